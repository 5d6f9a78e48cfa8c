"""``bench data --name``: a stable ``--data-path`` beside the hashed one, the names the platform
files' defaults use (issue 48, item 6)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from bench.config.platforms import platform_files
from bench.dataset.prepare import TOKENIZER_NAMES
from bench.images.pins import REPO_ROOT
from tests.dataset.test_corpora import DOCS, jsonl
from tests.dataset.test_prepare import read_indexed
from tests.inprocess import run_cli


def _data(tmp_path: Path, gpt2_files: tuple[Path, Path], source: Path, *extra: str):
    vocab, merges = gpt2_files
    return run_cli("data", str(source), "--vocab-file", str(vocab), "--merge-file", str(merges),
                   "--out-dir", str(tmp_path / "data"), *extra, cwd=REPO_ROOT)


def test_a_name_links_the_hashed_files(tmp_path: Path, gpt2_files) -> None:
    (source := tmp_path / "a.jsonl").write_bytes(jsonl(DOCS))
    done = _data(tmp_path, gpt2_files, source, "--name", "meg-gpt2")
    assert done.returncode == 0, done.stderr
    named = tmp_path / "data" / "meg-gpt2_text_document"
    assert f"use: --data-path {named} --vocab-file" in done.stdout
    (hashed,) = (tmp_path / "data").glob("gpt2-*_text_document.idx")
    for suffix in (".bin", ".idx"):
        link = Path(f"{named}{suffix}")
        assert link.is_symlink() and link.resolve() == hashed.with_suffix(suffix)
        assert not Path(link.readlink()).is_absolute()  # the folder can move or be bound
    assert read_indexed(named) == read_indexed(hashed.with_suffix(""))
    again = _data(tmp_path, gpt2_files, source, "--name", "meg-gpt2")  # same data: kept
    assert again.returncode == 0, again.stderr


def test_a_name_of_other_data_is_refused(tmp_path: Path, gpt2_files) -> None:
    (first := tmp_path / "a.jsonl").write_bytes(jsonl(DOCS))
    (second := tmp_path / "b.jsonl").write_bytes(jsonl(DOCS[:1]))
    assert _data(tmp_path, gpt2_files, first, "--name", "mine").returncode == 0
    done = _data(tmp_path, gpt2_files, second, "--name", "mine")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (f"error: {tmp_path}/data/mine_text_document.bin exists "
                                            "and names other data: remove it, or give another --name")


@pytest.mark.parametrize("name", ["../up", "a/b", "", ".hidden", "x" * 101])
def test_a_name_that_is_not_a_file_name_is_refused_before_tokenizing(tmp_path: Path, gpt2_files,
                                                                     name: str) -> None:
    (source := tmp_path / "a.jsonl").write_bytes(jsonl(DOCS))
    done = _data(tmp_path, gpt2_files, source, "--name", name)
    assert done.returncode == 1 and done.stderr.startswith("error: --name ")
    assert done.stderr.count("\n") == 1 and not (tmp_path / "data").exists()


def test_every_platform_default_is_a_name_bench_data_writes() -> None:
    """Each platform file's [data] path is OUT_DIR/NAME_text_document, and the docs give the
    ``bench data`` command that writes it."""
    docs = (REPO_ROOT / "docs" / "megatron-deepspeed.md").read_text()
    defaults = {path.stem: tomllib.loads(path.read_text()).get("data", {}).get("path")
                for path in platform_files()}
    for platform, default in defaults.items():
        if not default:
            continue
        folder, _, file = default.rpartition("/")
        name = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)_text_document", file)
        assert name, (platform, default)
        assert f"--out-dir {folder} --name {name[1]}" in docs, (platform, default)


def test_a_name_puts_the_tokenizer_files_where_the_platform_defaults_look(tmp_path: Path,
                                                                          gpt2_files) -> None:
    """LUMI's and Polaris's defaults read data/gpt2-vocab.json and data/gpt2-merges.txt beside
    data/meg-gpt2_text_document: --name copies the files given there, keeps the same bytes and
    refuses other ones."""
    (source := tmp_path / "a.jsonl").write_bytes(jsonl(DOCS))
    done = _data(tmp_path, gpt2_files, source, "--name", "meg-gpt2")
    assert done.returncode == 0, done.stderr
    data = tmp_path / "data"
    vocab, merges = (data / name for name in TOKENIZER_NAMES)
    assert vocab.read_bytes() == gpt2_files[0].read_bytes() and not vocab.is_symlink()
    assert merges.read_bytes() == gpt2_files[1].read_bytes()
    assert done.stdout.splitlines()[-1] == (f"use: --data-path {data}/meg-gpt2_text_document "
                                            f"--vocab-file {vocab} --merge-file {merges}")
    assert not [p for p in data.iterdir() if p.name.startswith(".")]
    assert _data(tmp_path, gpt2_files, source, "--name", "meg-gpt2").returncode == 0  # same: kept
    merges.write_text("#version: 0.2\n")
    again = _data(tmp_path, gpt2_files, source, "--name", "meg-gpt2")
    assert again.returncode == 1 and again.stderr.splitlines()[-1] == (
        f"error: {merges} exists and is another tokenizer file than {gpt2_files[1]}: remove it, "
        "or give --out-dir another folder")
    for platform in platform_files():
        files = tomllib.loads(platform.read_text()).get("data", {})
        folder = files.get("path", "").rpartition("/")[0]
        if folder and files["vocab_file"].rpartition("/")[0] == folder:
            assert (files["vocab_file"], files["merge_file"]) == tuple(
                f"{folder}/{name}" for name in TOKENIZER_NAMES), platform
