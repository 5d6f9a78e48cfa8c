"""``python -m bench data`` on real files: output named by content, never rewritten, bad input
refused with one line naming the file, a progress line, the .idx layout Megatron reads."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench.dataset.gpt2 import Gpt2Bpe
from bench.dataset.prepare import InputError, prepare
from bench.images.pins import REPO_ROOT
from tests.inprocess import run_cli

TEXTS = ["The quick brown fox jumps over the lazy dog.", "It's 2026; GPT-2's BPE still works.\n",
         "Ünïcödé — ça marche, 中文 too 😀", "line one\nline two\n\nthree"]


def read_indexed(prefix: Path) -> list[list[int]]:
    """The documents of a .bin/.idx pair, read by the layout megatron-core documents."""
    idx = prefix.with_name(prefix.name + ".idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version, code, sequences, documents = struct.unpack("<QBQQ", idx[9:34])
    assert (version, code) == (1, 8)  # uint16 ids
    lengths = np.frombuffer(idx, np.int32, sequences, 34)
    pointers = np.frombuffer(idx, np.int64, sequences, 34 + 4 * sequences)
    bounds = np.frombuffer(idx, np.int64, documents, 34 + 12 * sequences)
    assert bounds.tolist() == list(range(sequences + 1))
    data = np.fromfile(prefix.with_name(prefix.name + ".bin"), np.uint16)
    return [data[p // 2: p // 2 + n].tolist() for p, n in zip(pointers, lengths, strict=True)]


@pytest.fixture
def inputs(tmp_path) -> list[Path]:
    jsonl = tmp_path / "in" / "docs.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS))
                     + json.dumps({"text": ""}) + "\n\n", encoding="utf-8")
    text = tmp_path / "in" / "extra" / "story.txt"
    text.parent.mkdir()
    text.write_text("Once upon a time.\nThe end.\n", encoding="utf-8")
    return [jsonl, text.parent]


def test_documents_are_written_as_gpt2_ids_with_end_of_text(tmp_path, inputs, gpt2_files):
    result = prepare(inputs, *gpt2_files, tmp_path / "out")
    assert result.prefix.parent == tmp_path / "out"
    assert result.prefix.name.startswith("gpt2-") and result.prefix.name.endswith("_text_document")
    assert (result.documents, result.empty_skipped) == (5, 2)
    exact = Gpt2Bpe(*gpt2_files, fast=False)
    expected = [ids.tolist() + [50256] for ids in exact.encode_batch(
        [*TEXTS, "Once upon a time.\nThe end.\n"])]
    assert read_indexed(result.prefix) == expected
    assert result.tokens == sum(map(len, expected))
    manifest = json.loads(result.prefix.with_name(result.prefix.name + ".json").read_text())
    assert manifest["documents"] == 5 and manifest["inputs"][0].endswith("docs.jsonl")


def test_same_inputs_reuse_the_files_and_other_inputs_get_another_name(tmp_path, inputs,
                                                                       gpt2_files):
    first = prepare(inputs, *gpt2_files, tmp_path / "out")
    files = sorted((tmp_path / "out").iterdir())
    stamps = [f.stat().st_mtime_ns for f in files]
    again = prepare(inputs, *gpt2_files, tmp_path / "out")
    assert again.reused and again.prefix == first.prefix and again.documents == first.documents
    assert [f.stat().st_mtime_ns for f in sorted((tmp_path / "out").iterdir())] == stamps
    inputs[0].write_text(inputs[0].read_text() + json.dumps({"text": "one more"}) + "\n")
    other = prepare(inputs, *gpt2_files, tmp_path / "out")
    assert other.prefix != first.prefix and other.documents == 6
    assert len(list((tmp_path / "out").iterdir())) == 6  # two prefixes, three files each


@pytest.mark.parametrize("content, message", [
    (b"", "the file is empty"),
    ('{"text": "caf\xe9"}\n'.encode("latin-1"), r"docs.jsonl:1: not UTF-8 \(byte 0xe9 at offset 13\)"),
    (b'{"text": "ok"}\n{"text": \n', r"docs.jsonl:2: not a JSON object"),
    (b'{"body": "ok"}\n', r"docs.jsonl:1: no text under the key 'text'; name the key with --json-key"),
    (b'{"text": ""}\n\n', "no document has any text"),
])
def test_bad_input_is_refused_and_nothing_is_written(tmp_path, gpt2_files, content, message):
    bad = tmp_path / "docs.jsonl"
    bad.write_bytes(content)
    with pytest.raises(InputError, match=message):
        prepare([bad], *gpt2_files, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_missing_input_and_unknown_suffix_are_named(tmp_path, gpt2_files):
    with pytest.raises(InputError, match="no such file or folder"):
        prepare([tmp_path / "absent.jsonl"], *gpt2_files, tmp_path / "out")
    (tmp_path / "notes.md").write_text("hello")
    with pytest.raises(InputError, match=r"notes.md: not a format the kit reads; .*\.jsonl/\.json.*"
                                         r"\.zst, \.xz.*wikiextractor"):
        prepare([tmp_path / "notes.md"], *gpt2_files, tmp_path / "out")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("data", *args, cwd=REPO_ROOT)


def test_command_line_prints_the_data_path_and_progress(tmp_path, inputs, gpt2_files):
    vocab, merges = gpt2_files
    done = _cli(*map(str, inputs), "--vocab-file", str(vocab), "--merge-file", str(merges),
                "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "tokenized " in done.stderr and "(100%)" in done.stderr
    prefix = next((tmp_path / "out").glob("*.idx")).with_suffix("")
    assert f"use: --data-path {prefix} --vocab-file {vocab} --merge-file {merges}" in done.stdout
    again = _cli(*map(str, inputs), "--vocab-file", str(vocab), "--merge-file", str(merges),
                 "--out-dir", str(tmp_path / "out"))
    assert "already prepared from the same inputs" in again.stdout


def test_command_line_errors_are_one_line(tmp_path, inputs, gpt2_files):
    vocab, merges = gpt2_files
    done = _cli(str(inputs[0]), "--vocab-file", str(tmp_path / "vocab.json"), "--merge-file",
                str(merges), "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: --vocab-file")
    assert not (tmp_path / "out").exists()
