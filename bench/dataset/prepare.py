"""Text files -> GPT-2 ids -> an indexed dataset named by the hash of everything that made it.

Inputs are JSON-lines files (``.jsonl``/``.json``: one document per line, its text under
``json_key``), plain text files (``.txt``: one document per file), either compressed (``.zst``,
``.xz``, ``.gz``, ``.bz2``; compressed text is OSCAR's, a blank line between documents),
wikiextractor output, or folders of them (``bench.dataset.corpora`` reads them). The
output prefix is ``<out_dir>/gpt2-<16 hex>_text_document``: the hash covers the tokenizer files,
the key, the inputs' bytes in order and this format's version, so the same inputs find the files
already made (nothing is rewritten) and different inputs never share a name. Files are written
under temporary names and linked into place only when complete; an existing file is never replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.dataset.corpora import (
    ACCEPTED,
    InputError,
    InputFormat,
    Layout,
    check_input,
    input_format,
    read_documents,
)
from bench.dataset.gpt2 import Gpt2Bpe
from bench.dataset.indexed import IndexedWriter, token_dtype

FORMAT = "bench.dataset/1 gpt2 append-eod one-sequence-per-document"
BATCH_BYTES = 4 << 20  # text per tokenizer call


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` made (or found already made)."""

    prefix: Path
    reused: bool
    documents: int
    empty_skipped: int
    tokens: int
    text_bytes: int
    seconds: float
    cpu_seconds: float  # CPU time of the whole process (every thread) while tokenizing
    tokenizer: str

    @property
    def mb_per_s(self) -> float:
        return self.text_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_cpu_s(self) -> float:
        """Throughput per CPU core: text per CPU-second, whatever else shares the machine."""
        return self.text_bytes / 1e6 / self.cpu_seconds if self.cpu_seconds > 0 else 0.0


def input_files(paths: list[Path]) -> list[tuple[Path, InputFormat]]:
    """The files to read, in order, with their formats, each checked by reading its start: each
    file given, then each folder's files the kit reads, sorted by path (wikiextractor's AA/wiki_00,
    AA/wiki_01, AB/wiki_00, ... in its own order)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and input_format(p))
            if not found:
                raise InputError(f"{path}: a folder with no file the kit reads in it; {ACCEPTED}")
            files += found
        elif not path.is_file():
            raise InputError(f"{path}: no such file or folder")
        else:
            files.append(path)
    checked = []
    for file in files:
        if file.stat().st_size == 0:
            raise InputError(f"{file}: the file is empty; remove it from the inputs")
        checked.append((file, check_input(file)))
    return checked


def content_hash(files: list[tuple[Path, InputFormat]], vocab_file: Path, merge_file: Path,
                 json_key: str) -> str:
    digest = hashlib.sha256(FORMAT.encode() + b"\0" + json_key.encode() + b"\0")
    for path, layout in ((vocab_file, None), (merge_file, None), *((p, f.layout) for p, f in files)):
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        # The same bytes split another way are other data; the layouts read before this one was
        # hashed (JSON lines, a document per .txt) keep the names their data already has.
        digest.update(b"\0file\0" if layout in (None, Layout.JSONL, Layout.TEXT)
                      else f"\0{layout.name}\0".encode())
    return digest.hexdigest()


class Progress:
    """One line on ``stream`` (default: the current stderr): redrawn in place on a terminal,
    every 10% otherwise. The percentage is of the bytes on disk (compressed, where compressed);
    the rate is of text tokenized."""

    def __init__(self, total_bytes: int, stream: IO[str] | None = None):
        self.total = max(total_bytes, 1)
        self.stream = stream or sys.stderr  # looked up now: stderr may have been replaced since import
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.shown = -1.0

    def update(self, read: int, text_bytes: int, docs: int, tokens: int, final: bool = False) -> None:
        now = time.monotonic()
        fraction = read / self.total
        if not final and (now - self.shown < 0.5 if self.tty else int(fraction * 10) <= int(
                self.shown)):
            return
        self.shown = now if self.tty else int(fraction * 10)
        rate = text_bytes / 1e6 / max(now - self.start, 1e-9)
        text = (f"read {read / 1e6:,.1f} of {self.total / 1e6:,.1f} MB ({100 * fraction:.0f}%) | "
                f"tokenized {text_bytes / 1e6:,.1f} MB of text, {rate:,.1f} MB/s | {docs:,} "
                f"documents | {tokens:,} tokens")
        self.stream.write(f"\r\033[K{text}" + ("\n" if final else "") if self.tty else text + "\n")
        self.stream.flush()


def _link_new(partial: Path, final: Path) -> None:
    """Give ``partial`` the name ``final`` unless a file has it already (never replace one)."""
    try:
        os.link(partial, final)
    except FileExistsError:
        pass  # same hash, same content: made by an earlier or concurrent run
    finally:
        partial.unlink()


def _prepared_before(prefix: Path) -> Prepared | None:
    """What an earlier run prepared under ``prefix`` (its manifest), if it completed."""
    bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
    if not (bin_path.is_file() and idx_path.is_file()):
        return None
    manifest = json.loads(prefix.with_name(prefix.name + ".json").read_text())
    return Prepared(prefix, True, manifest["documents"], manifest["empty_skipped"],
                    manifest["tokens"], manifest["text_bytes"], 0.0, 0.0, manifest["tokenizer"])


def _manifest(result: Prepared, files: list[tuple[Path, InputFormat]], json_key: str, vocab_file: Path,
              merge_file: Path, tokenizer: Gpt2Bpe) -> dict[str, object]:
    """The ``.json`` beside a prepared prefix: its inputs, tokenizer and counts."""
    return {"prefix": result.prefix.name, "format": FORMAT, "inputs": [str(f) for f, _ in files],
            "json_key": json_key, "vocab_file": str(vocab_file),
            "merge_file": str(merge_file), "documents": result.documents,
            "empty_skipped": result.empty_skipped, "tokens": result.tokens,
            "text_bytes": result.text_bytes, "tokenizer": tokenizer.fast_path,
            "fast_documents": tokenizer.counts.fast,
            "exact_documents": tokenizer.counts.exact,
            "verified_documents": tokenizer.counts.verified}


def prepare(inputs: list[Path], vocab_file: Path, merge_file: Path, out_dir: Path,
            json_key: str = "text", exact: bool = False,
            stream: IO[str] | None = None) -> Prepared:
    """Tokenize ``inputs`` into ``out_dir``; returns the prefix to pass as ``--data-path``."""
    files = input_files(inputs)
    tokenizer = Gpt2Bpe(vocab_file, merge_file, fast=not exact)
    prefix = out_dir / f"gpt2-{content_hash(files, vocab_file, merge_file, json_key)[:16]}_text_document"
    earlier = _prepared_before(prefix)
    if earlier is not None:
        return earlier
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(sum(f.stat().st_size for f, _ in files), stream)
    partial = out_dir / f".{prefix.name}.{os.getpid()}.partial"
    start, cpu_start = time.perf_counter(), time.process_time()
    done = empty = read_before = read = 0  # text bytes, empty documents, bytes of the files read
    try:
        with open(f"{partial}.bin", "wb") as bin_file:
            writer = IndexedWriter(bin_file, token_dtype(tokenizer.vocab_size))
            batch: list[str] = []
            batch_bytes = 0
            for path, fmt in files:
                for text, size, read_in_file in read_documents(path, fmt, json_key):
                    done += size
                    read = read_before + read_in_file
                    if not text:
                        empty += 1
                        continue
                    batch.append(text)
                    batch_bytes += size
                    if batch_bytes >= BATCH_BYTES:
                        writer.add_documents(tokenizer.encode_batch(batch), tokenizer.eod)
                        batch, batch_bytes = [], 0
                        progress.update(read, done, len(writer.lengths), writer.tokens)
                read_before += path.stat().st_size
            writer.add_documents(tokenizer.encode_batch(batch), tokenizer.eod)
        if not writer.lengths:
            raise InputError("no document has any text: every input line or file is empty")
        with open(f"{partial}.idx", "wb") as idx_file:
            writer.write_index(idx_file)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        progress.update(read_before, done, len(writer.lengths), writer.tokens, final=True)
        result = Prepared(prefix, False, len(writer.lengths), empty, writer.tokens, done, seconds,
                          cpu_seconds, tokenizer.fast_path)
        manifest = _manifest(result, files, json_key, vocab_file, merge_file, tokenizer)
        Path(f"{partial}.json").write_text(json.dumps(manifest, indent=2) + "\n")
        # The .idx last: a reader needs both, and a prefix with an .idx is complete.
        for suffix in (".json", ".bin", ".idx"):
            _link_new(Path(f"{partial}{suffix}"), prefix.with_name(prefix.name + suffix))
        return result
    finally:
        for suffix in (".bin", ".idx", ".json"):
            Path(f"{partial}{suffix}").unlink(missing_ok=True)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: str) -> None:
    """Refuse a ``--name`` that is not a plain file name (said before any tokenizing)."""
    if not _NAME.fullmatch(name):
        raise InputError(f"--name {name[:100]!r} is not a name: letters, digits, '.', '_' and '-', "
                         "starting with a letter or digit, at most 100")


# The tokenizer files' names beside named data: the LUMI and Polaris platform files' defaults
# (data/gpt2-vocab.json, data/gpt2-merges.txt beside data/meg-gpt2_text_document).
TOKENIZER_NAMES = ("gpt2-vocab.json", "gpt2-merges.txt")


def tokenizer_beside(folder: Path, vocab_file: Path, merge_file: Path) -> tuple[Path, Path]:
    """Copies of the vocab and merges files in ``folder`` under :data:`TOKENIZER_NAMES`, where
    platform defaults look for them beside the data (copies, not links: the folder may be bound
    into a container without the originals). A file already there with the same bytes is kept;
    one with other bytes is refused, never replaced."""
    placed = []
    for source, name in zip((vocab_file, merge_file), TOKENIZER_NAMES, strict=True):
        target, data = folder / name, source.read_bytes()
        if target.is_file() and target.read_bytes() == data:
            placed.append(target)
            continue
        if target.exists() or target.is_symlink():
            raise InputError(f"{target} exists and is another tokenizer file than {source}: remove "
                             "it, or give --out-dir another folder")
        partial = folder / f".{name}.{os.getpid()}.partial"
        try:
            partial.write_bytes(data)
            _link_new(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        placed.append(target)
    return placed[0], placed[1]


def named(prefix: Path, name: str) -> Path:
    """``<folder>/<name>_text_document``: links (relative, so the folder can move or be bound into
    a container) to the prefix's ``.bin`` and ``.idx``, for a stable ``--data-path`` such as a
    platform file's default. A name that links to these files already is kept; one that names other
    data is refused, never replaced."""
    check_name(name)
    stable = prefix.with_name(f"{name}_text_document")
    for suffix in (".bin", ".idx"):  # the .idx last: a prefix with an .idx is complete
        link, target = stable.with_name(stable.name + suffix), prefix.name + suffix
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.exists() or link.is_symlink():
            raise InputError(f"{link} exists and names other data: remove it, or give another "
                             "--name")
        link.symlink_to(target)
    return stable
