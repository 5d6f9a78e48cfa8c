"""Text files -> GPT-2 ids -> an indexed dataset named by the hash of everything that made it.

Inputs are JSON-lines files (``.jsonl``/``.json``: one document per line, its text under
``json_key``) or plain text files (``.txt``: one document per file), or folders of them. The
output prefix is ``<out_dir>/gpt2-<16 hex>_text_document``: the hash covers the tokenizer files,
the key, the inputs' bytes in order and this format's version, so the same inputs find the files
already made (nothing is rewritten) and different inputs never share a name. Files are written
under temporary names and linked into place only when complete; an existing file is never replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.dataset.gpt2 import Gpt2Bpe
from bench.dataset.indexed import IndexedWriter, token_dtype

FORMAT = "bench.dataset/1 gpt2 append-eod one-sequence-per-document"
JSONL_SUFFIXES = (".jsonl", ".json")
TEXT_SUFFIXES = (".txt",)
BATCH_BYTES = 4 << 20  # text per tokenizer call


class InputError(ValueError):
    """A user's input cannot be read as documents; the message names the file and the fix."""


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


def input_files(paths: list[Path]) -> list[Path]:
    """The files to read, in order: each file given, then each folder's files sorted by name."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix in JSONL_SUFFIXES + TEXT_SUFFIXES)
            if not found:
                raise InputError(f"{path}: a folder with no .jsonl, .json or .txt file in it")
            files += found
        elif not path.is_file():
            raise InputError(f"{path}: no such file or folder")
        elif path.suffix not in JSONL_SUFFIXES + TEXT_SUFFIXES:
            raise InputError(f"{path}: not .jsonl/.json (one JSON document per line) or .txt "
                             "(one document per file); rename it to say which it is")
        else:
            files.append(path)
    for file in files:
        if file.stat().st_size == 0:
            raise InputError(f"{file}: the file is empty; remove it from the inputs")
    return files


def content_hash(files: list[Path], vocab_file: Path, merge_file: Path, json_key: str) -> str:
    digest = hashlib.sha256(FORMAT.encode() + b"\0" + json_key.encode() + b"\0")
    for path in (vocab_file, merge_file, *files):
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        digest.update(b"\0file\0")
    return digest.hexdigest()


def _decode(raw: bytes, where: str, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{where}: not UTF-8 (byte 0x{raw[error.start]:02x} at offset {offset + error.start}); "
            "convert the file, e.g. iconv -f LATIN1 -t UTF-8 IN > OUT") from None


def documents(path: Path, json_key: str) -> Iterator[tuple[str, int]]:
    """(text, bytes read) per document of one file."""
    if path.suffix in TEXT_SUFFIXES:
        raw = path.read_bytes()
        yield _decode(raw, str(path), 0).removeprefix("\ufeff"), len(raw)
        return
    offset = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path}:{number}"
            size = len(raw)
            line = _decode(raw, where, offset).strip().removeprefix("\ufeff")
            offset += size
            if not line:
                yield "", size
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(f"{where}: not a JSON object ({error.msg}); a .jsonl file holds "
                                 "one JSON object per line") from None
            if not isinstance(record, dict) or not isinstance(record.get(json_key), str):
                raise InputError(f"{where}: no text under the key {json_key!r}; name the key "
                                 "with --json-key")
            yield record[json_key], size


class Progress:
    """One line on ``stream`` (default: the current stderr): redrawn in place on a terminal,
    every 10% otherwise."""

    def __init__(self, total_bytes: int, stream: IO[str] | None = None):
        self.total = max(total_bytes, 1)
        self.stream = stream or sys.stderr  # looked up now: stderr may have been replaced since import
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.shown = -1.0

    def update(self, done: int, docs: int, tokens: int, final: bool = False) -> None:
        now = time.monotonic()
        fraction = done / self.total
        if not final and (now - self.shown < 0.5 if self.tty else int(fraction * 10) <= int(
                self.shown)):
            return
        self.shown = now if self.tty else int(fraction * 10)
        rate = done / 1e6 / max(now - self.start, 1e-9)
        text = (f"tokenized {done / 1e6:,.1f} of {self.total / 1e6:,.1f} MB ({100 * fraction:.0f}%)"
                f" | {rate:,.1f} MB/s | {docs:,} documents | {tokens:,} tokens")
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


def prepare(inputs: list[Path], vocab_file: Path, merge_file: Path, out_dir: Path,
            json_key: str = "text", exact: bool = False,
            stream: IO[str] | None = None) -> Prepared:
    """Tokenize ``inputs`` into ``out_dir``; returns the prefix to pass as ``--data-path``."""
    files = input_files(inputs)
    tokenizer = Gpt2Bpe(vocab_file, merge_file, fast=not exact)
    prefix = out_dir / f"gpt2-{content_hash(files, vocab_file, merge_file, json_key)[:16]}_text_document"
    bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
    if bin_path.is_file() and idx_path.is_file():
        manifest = json.loads(prefix.with_name(prefix.name + ".json").read_text())
        return Prepared(prefix, True, manifest["documents"], manifest["empty_skipped"],
                        manifest["tokens"], manifest["text_bytes"], 0.0, 0.0, manifest["tokenizer"])
    out_dir.mkdir(parents=True, exist_ok=True)
    total = sum(f.stat().st_size for f in files)
    progress = Progress(total, stream)
    partial = out_dir / f".{prefix.name}.{os.getpid()}.partial"
    start, cpu_start = time.perf_counter(), time.process_time()
    done = empty = 0
    try:
        with open(f"{partial}.bin", "wb") as bin_file:
            writer = IndexedWriter(bin_file, token_dtype(tokenizer.vocab_size))
            batch: list[str] = []
            batch_bytes = 0
            for path in files:
                for text, size in documents(path, json_key):
                    done += size
                    if not text:
                        empty += 1
                        continue
                    batch.append(text)
                    batch_bytes += size
                    if batch_bytes >= BATCH_BYTES:
                        writer.add_documents(tokenizer.encode_batch(batch), tokenizer.eod)
                        batch, batch_bytes = [], 0
                        progress.update(done, len(writer.lengths), writer.tokens)
            writer.add_documents(tokenizer.encode_batch(batch), tokenizer.eod)
        if not writer.lengths:
            raise InputError("no document has any text: every input line or file is empty")
        with open(f"{partial}.idx", "wb") as idx_file:
            writer.write_index(idx_file)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        progress.update(done, len(writer.lengths), writer.tokens, final=True)
        result = Prepared(prefix, False, len(writer.lengths), empty, writer.tokens, done, seconds,
                          cpu_seconds, tokenizer.fast_path)
        manifest = {"prefix": prefix.name, "format": FORMAT, "inputs": [str(f) for f in files],
                    "json_key": json_key, "vocab_file": str(vocab_file),
                    "merge_file": str(merge_file), "documents": result.documents,
                    "empty_skipped": empty, "tokens": result.tokens, "text_bytes": done,
                    "tokenizer": tokenizer.fast_path,
                    "fast_documents": tokenizer.counts.fast,
                    "exact_documents": tokenizer.counts.exact,
                    "verified_documents": tokenizer.counts.verified}
        Path(f"{partial}.json").write_text(json.dumps(manifest, indent=2) + "\n")
        # The .idx last: a reader needs both, and a prefix with an .idx is complete.
        for suffix in (".json", ".bin", ".idx"):
            _link_new(Path(f"{partial}{suffix}"), prefix.with_name(prefix.name + suffix))
        return result
    finally:
        for suffix in (".bin", ".idx", ".json"):
            Path(f"{partial}{suffix}").unlink(missing_ok=True)
