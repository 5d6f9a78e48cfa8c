"""The seeds' corpora as they ship, written for real here (zstandard, lzma, gzip, bz2 and
wikiextractor's layout): the same text gives the same .bin/.idx as plain JSON lines; a cut or
unknown file is one line naming it, before anything is written; files are read as a stream."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
import sys
import tracemalloc
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
import zstandard

from bench.dataset.corpora import Layout, check_input, input_format, read_documents
from bench.dataset.prepare import InputError, prepare
from bench.images.pins import REPO_ROOT
from tests.dataset.test_prepare import read_indexed
from tests.inprocess import run_cli

# No blank line inside a document and no trailing whitespace: every layout can hold these as they are.
DOCS = ["SlimPajama says: the quick brown fox jumps over the lazy dog.",
        "It's 2026; GPT-2's BPE still works.\nA second line\tand a tab.",
        "Ünïcödé — ça marche, 中文 too 😀", "line one\nline two\nthree"]
# wikiextractor's plain output starts a document's text with its title and a blank line.
WIKI_DOCS = ["Anarchism\n\nAnarchism is a political philosophy.\nIt is sceptical of authority.",
             "Autism\n\nAutism is a neurodevelopmental condition — “spectrum”, 中文.",
             "A\n\nA is the first letter.\n\nIt has two paragraphs here."]


def jsonl(docs: list[str]) -> bytes:
    return "".join(json.dumps({"text": d, "meta": {"i": i}}) + "\n" for i, d in enumerate(docs)).encode()


def doc_blocks(docs: list[str], first_id: int = 0) -> bytes:
    return "".join(f'<doc id="{first_id + i}" url="https://en.wikipedia.org/wiki?curid={first_id + i}"'
                   f' title="{d.split(chr(10))[0]}">\n{d}\n</doc>\n' for i, d in enumerate(docs)).encode()


def slimpajama(path: Path, docs: list[str]) -> list[Path]:
    """Two zstd frames, as pzstd writes: every frame is read."""
    half = len(docs) // 2
    frames = (zstandard.ZstdCompressor(level=3).compress(jsonl(docs[:half])) +
              zstandard.ZstdCompressor(level=19).compress(jsonl(docs[half:])))
    (file := path / "chunk1" / "example_train_0.jsonl.zst").parent.mkdir()
    file.write_bytes(frames)
    return [path / "chunk1"]


def oscar_jsonl_xz(path: Path, docs: list[str]) -> list[Path]:
    (file := path / "oscar-1GB.jsonl.xz").write_bytes(lzma.compress(jsonl(docs)))
    return [file]


def oscar_txt_xz(path: Path, docs: list[str]) -> list[Path]:
    """OSCAR's plain text: a blank line between documents (and blank lines at both ends)."""
    (file := path / "en_part_1.txt.xz").write_bytes(lzma.compress(("\n" + "\n\n".join(docs) +
                                                                   "\n\n\n").encode()))
    return [file]


def oscar_txt_gz(path: Path, docs: list[str]) -> list[Path]:
    (file := path / "en_part_1.txt.gz").write_bytes(gzip.compress("\n\n".join(docs).encode()))
    return [file]


def wikiextractor(path: Path, docs: list[str]) -> list[Path]:
    """Its default output: text/AA/wiki_00, wiki_01, then AB/wiki_00, given as the folder."""
    for name, part, first in (("AA/wiki_00", docs[:1], 0), ("AA/wiki_01", docs[1:2], 1),
                              ("AB/wiki_00", docs[2:], 2)):
        (file := path / "text" / name).parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(doc_blocks(part, first))
    return [path / "text"]


def wikiextractor_json(path: Path, docs: list[str]) -> list[Path]:
    """``--json``: a JSON object per line, its text without the title (as MS-AMP's script uses)."""
    (file := path / "text" / "AA" / "wiki_00").parent.mkdir(parents=True)
    file.write_text("".join(json.dumps({"id": str(i), "revid": "1", "url": "u", "title": "t",
                                        "text": d}) + "\n" for i, d in enumerate(docs)))
    return [path / "text"]


def wikiextractor_compressed(path: Path, docs: list[str]) -> list[Path]:
    """``--compress``: wiki_00.bz2."""
    (file := path / "text" / "AA" / "wiki_00.bz2").parent.mkdir(parents=True)
    file.write_bytes(bz2.compress(doc_blocks(docs)))
    return [path / "text"]


@pytest.mark.parametrize("write, docs", [
    (slimpajama, DOCS), (oscar_jsonl_xz, DOCS), (oscar_txt_xz, DOCS), (oscar_txt_gz, DOCS),
    (wikiextractor, WIKI_DOCS), (wikiextractor_json, WIKI_DOCS), (wikiextractor_compressed, WIKI_DOCS),
], ids=lambda value: getattr(value, "__name__", "docs"))
def test_each_corpus_format_gives_what_the_same_text_as_jsonl_gives(
        tmp_path, gpt2_files, write: Callable[[Path, list[str]], list[Path]], docs: list[str]):
    (source := tmp_path / "source").mkdir()
    inputs = write(source, docs)
    (plain := tmp_path / "plain.jsonl").write_bytes(jsonl(docs))
    expected = prepare([plain], *gpt2_files, tmp_path / "expected")
    made = prepare(inputs, *gpt2_files, tmp_path / "out")
    assert (made.documents, made.tokens, made.empty_skipped) == (len(docs), expected.tokens, 0)
    assert read_indexed(made.prefix) == read_indexed(expected.prefix)


def test_a_compressed_name_keeps_its_layout_and_unknown_names_are_refused():
    assert input_format(Path("train/chunk1/example_train_0.jsonl.zst")).layout is Layout.JSONL
    assert input_format(Path("en_part_1.txt.xz")).layout is Layout.PARAGRAPHS
    assert input_format(Path("story.txt")).layout is Layout.TEXT
    assert input_format(Path("text/AB/wiki_17.bz2")).layout is Layout.WIKIEXTRACTOR
    for name in ("notes.md", "corpus.zst", "wiki_all.tar.xz", "wiki_x"):
        assert input_format(Path(name)) is None, name


def test_the_same_bytes_read_another_way_get_another_name(tmp_path, gpt2_files):
    data = gzip.compress(jsonl(DOCS))
    (as_jsonl := tmp_path / "c.jsonl.gz").write_bytes(data)
    (as_text := tmp_path / "c.txt.gz").write_bytes(data)  # no blank line: one document
    first = prepare([as_jsonl], *gpt2_files, tmp_path / "out")
    other = prepare([as_text], *gpt2_files, tmp_path / "out")
    assert (first.documents, other.documents, other.reused) == (len(DOCS), 1, False)
    assert other.prefix != first.prefix


def test_data_made_before_keeps_its_name(tmp_path, gpt2_files):
    """JSON lines and a document per .txt hash as they did before compressed input was read."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "Hello world"}) + "\n")
    (tmp_path / "b.txt").write_text("Once upon a time.\n")
    made = prepare([tmp_path / "a.jsonl", tmp_path / "b.txt"], *gpt2_files, tmp_path / "out")
    assert made.prefix.name == "gpt2-cf6746d05f8fe3be_text_document"


@cache  # the same text for every test that asks for it: bytes, never changed
def random_jsonl(documents: int, seed: int = 0) -> bytes:
    """Prose-like text that compresses about as real text does (not to a few bytes)."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choices("abcdefghijklmnopqrstuvwxyz", k=rnd.randint(2, 9))) for _ in range(3000)]
    return jsonl([" ".join(rnd.choices(words, k=350)) for _ in range(documents)])


def _cli(tmp_path: Path, gpt2_files: tuple[Path, Path], *inputs: Path):
    vocab, merges = gpt2_files
    return run_cli("data", *map(str, inputs), "--vocab-file", str(vocab), "--merge-file", str(merges),
                   "--out-dir", str(tmp_path / "out"), cwd=REPO_ROOT)


@pytest.mark.parametrize("suffix, compress", [(".jsonl.zst", zstandard.ZstdCompressor().compress),
                                              (".jsonl.xz", lzma.compress)])
@pytest.mark.parametrize("documents", [20, 400], ids=["cut-in-the-first-64KiB", "cut-later"])
def test_a_cut_compressed_file_is_one_error_line_and_nothing_is_written(
        tmp_path, gpt2_files, suffix: str, compress, documents: int):
    data = compress(random_jsonl(documents))
    (cut := tmp_path / f"part{suffix}").write_bytes(data[: len(data) * 2 // 3])
    done = _cli(tmp_path, gpt2_files, cut)
    assert done.returncode == 1, done.stderr
    error = done.stderr.splitlines()[-1]
    assert error.startswith(f"error: {cut}: the ") and "data ends early: the file is cut short" in error
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    if documents == 20:  # small enough to be found by the check before any output
        assert done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, content, message", [
    ("corpus.jsonl.xz", b'{"text": "not compressed"}\n', "cannot be read as xz data"),
    ("corpus.jsonl.zst", b'{"text": "not compressed"}\n', "cannot be read as zstd data"),
    ("corpus.txt.gz", b"plain", "cannot be read as gzip data"),
    ("text/AA/wiki_00", b"Just some text\n", "named like wikiextractor output but starts with neither"),
    ("corpus.parquet", b"PAR1", "not a format the kit reads"),
])
def test_an_unknown_or_unreadable_file_is_one_error_line_before_any_output(
        tmp_path, gpt2_files, name: str, content: bytes, message: str):
    (bad := tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(content)
    (good := tmp_path / "good.jsonl").write_bytes(jsonl(DOCS))
    done = _cli(tmp_path, gpt2_files, good, bad)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {bad}: ")
    assert message in done.stderr and ".zst, .xz" in done.stderr and "wikiextractor" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_without_a_corpus_file_is_refused(tmp_path, gpt2_files):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "README.md").write_text("hello")
    with pytest.raises(InputError, match=r"in: a folder with no file the kit reads in it; .*\.zst"):
        prepare([tmp_path / "in"], *gpt2_files, tmp_path / "out")


def test_zst_without_zstandard_names_the_install(tmp_path, gpt2_files, monkeypatch):
    (file := tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(DOCS)))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises ImportError
    done = _cli(tmp_path, gpt2_files, file)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert done.stderr == (f"error: {file}: reading .zst needs zstandard, which is not installed: "
                           "pip install 'megatron-bench-kit[data]' (or pip install zstandard)\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix, compress", [
    (".jsonl.zst", zstandard.ZstdCompressor(level=1).compress),
    (".jsonl.xz", lambda data: lzma.compress(data, preset=0)),  # the fastest to make, read alike
])
def test_files_are_read_as_a_stream(tmp_path, suffix: str, compress):
    text = random_jsonl(7000)  # about 16 MB of text
    (file := tmp_path / f"big{suffix}").write_bytes(compress(text))
    fmt = check_input(file)
    reader = read_documents(file, fmt, "text")
    first = next(reader)
    # A generator: the first document came after a small part of the file was read.
    assert first.size < 3000 and first.read < file.stat().st_size / 4
    tracemalloc.start()
    try:
        count, size = 1, first.size
        for document in reader:
            count, size = count + 1, size + document.size
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (count, size, document.read) == (7000, len(text), file.stat().st_size)
    assert peak < len(text) / 4, f"{peak / 1e6:.1f} MB held while reading {len(text) / 1e6:.1f} MB"


def test_progress_shows_bytes_read_and_documents(tmp_path, gpt2_files):
    (file := tmp_path / "oscar.jsonl.xz").write_bytes(lzma.compress(random_jsonl(2000), preset=1))
    done = _cli(tmp_path, gpt2_files, file)
    assert done.returncode == 0, done.stderr
    size = file.stat().st_size / 1e6
    *during, last = done.stderr.splitlines()
    assert last.startswith(f"read {size:,.1f} of {size:,.1f} MB (100%) | tokenized ")
    assert last.endswith(" tokens") and "| 2,000 documents |" in last
    # Also shown while reading (after each 4 MB of text), with the part of the file read so far.
    assert during and all(f" of {size:,.1f} MB (" in line and "(100%)" not in line for line in during)
