"""The seeds' corpora read document by document, one buffer at a time, never a whole file at once.

A file's name says its format: the layout (``.jsonl``/``.json``: a JSON object per line; ``.txt``:
one document per file; ``wiki_NN``: wikiextractor output) and, as a last suffix, its compression
(``.zst`` as SlimPajama ships, ``.xz`` as OSCAR and the bigscience OSCAR sample ship, ``.gz``,
``.bz2`` as wikiextractor ``--compress`` writes). A compressed ``.txt`` is OSCAR's plain text:
documents separated by a blank line. wikiextractor files hold ``<doc id=... url=... title=...>``
... ``</doc>`` blocks, or a JSON object per line with ``--json``; the first line tells which.
"""

from __future__ import annotations

import bz2
import contextlib
import enum
import gzip
import io
import json
import lzma
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

ACCEPTED = ("bench data reads .jsonl/.json (a JSON object per line), .txt (a document per file), "
            "either compressed as .zst, .xz, .gz or .bz2 (a compressed .txt is OSCAR's plain text, "
            "a blank line between documents), and wikiextractor output (AA/wiki_00, plain or --json)")
COMPRESSIONS = {".zst": "zstd", ".xz": "xz", ".gz": "gzip", ".bz2": "bzip2"}
WIKIEXTRACTOR_NAME = re.compile(r"wiki_\d+")
PROBE_BYTES = 1 << 16  # decompressed bytes read from each input before anything is written
ZSTD_MAX_WINDOW = 1 << 31  # what `zstd --long=31` writes; the library's default refuses above 128 MiB
ZSTD_READ = 1 << 18  # compressed bytes per read from the file
# Compressed bytes per call of the decompressor: zstd turns 4 bytes into at most a 128 KiB block,
# so one call yields at most ~32 MiB however the file was made (a bomb included).
ZSTD_FEED = 1 << 10
# The longest line (a JSON line, a paragraph's line) and document taken: far above any corpus's
# (Wikipedia's longest article is ~1 MB; SlimPajama's longest documents a few MB), and what one
# tokenizer call holds comfortably. A decompression bomb is a line or document far beyond it, and
# is refused here rather than filling the memory.
MAX_DOCUMENT_BYTES = 64 << 20


class InputError(ValueError):
    """A user's input cannot be read as documents; the message names the file and the fix."""


class Layout(enum.Enum):
    JSONL = enum.auto()  # a JSON object per line
    TEXT = enum.auto()  # one document per file
    PARAGRAPHS = enum.auto()  # plain text, a blank line between documents (OSCAR)
    WIKIEXTRACTOR = enum.auto()  # <doc> blocks or JSON lines


@dataclass(frozen=True)
class InputFormat:
    layout: Layout
    compression: str | None  # the suffix, e.g. ".zst"; None for a plain file


class Document(NamedTuple):
    text: str
    size: int  # bytes of text this document took in the (decompressed) file
    read: int  # bytes of the file on disk read so far (compressed bytes where compressed)


def input_format(path: Path) -> InputFormat | None:
    """The format ``path``'s name says, or None where it names none the kit reads."""
    compression = next((suffix for suffix in COMPRESSIONS if path.name.endswith(suffix)), None)
    inner = path.name.removesuffix(compression or "")
    suffix = Path(inner).suffix
    if suffix in (".jsonl", ".json"):
        return InputFormat(Layout.JSONL, compression)
    if suffix == ".txt":
        # Compressed text is a corpus file (OSCAR); plain .txt stays a document per file.
        return InputFormat(Layout.PARAGRAPHS if compression else Layout.TEXT, compression)
    if WIKIEXTRACTOR_NAME.fullmatch(inner):
        return InputFormat(Layout.WIKIEXTRACTOR, compression)
    return None


class _ZstdFrames(io.RawIOBase):
    """A .zst file's bytes, frame after frame (pzstd writes several). Unlike zstandard's
    ``stream_reader``, which ends quietly at a cut, a file ending inside a frame raises EOFError."""

    def __init__(self, raw: BinaryIO):
        import zstandard

        self._zstandard = zstandard
        self._decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self._frame = self._decompressor.decompressobj()
        self._raw = raw
        self._in_frame = False
        self._out = memoryview(b"")
        self._pending = memoryview(b"")  # compressed bytes read, not yet decompressed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        while not self._out:
            if not self._pending:
                self._pending = memoryview(self._raw.read(ZSTD_READ))
                if not self._pending:
                    if self._in_frame:
                        raise EOFError("the file ends inside a zstd frame")
                    return 0
            feed, self._pending = self._pending[:ZSTD_FEED], self._pending[ZSTD_FEED:]
            try:
                self._out = memoryview(self._decompress(bytes(feed)))
            except self._zstandard.ZstdError as error:
                raise OSError(str(error)) from None
        count = min(len(buffer), len(self._out))
        buffer[:count] = self._out[:count]
        self._out = self._out[count:]
        return count

    def _decompress(self, data: bytes) -> bytes:
        parts = []
        while data:
            parts.append(self._frame.decompress(data))
            self._in_frame = not self._frame.eof
            if self._in_frame:
                break
            data = self._frame.unused_data
            self._frame = self._decompressor.decompressobj()
        return b"".join(parts)


def _decompressed(raw: BinaryIO, compression: str | None) -> BinaryIO:
    if compression == ".zst":
        return io.BufferedReader(_ZstdFrames(raw), ZSTD_READ)
    if compression == ".xz":
        return lzma.LZMAFile(raw)
    if compression == ".gz":
        return gzip.GzipFile(fileobj=raw)
    if compression == ".bz2":
        return bz2.BZ2File(raw)
    return raw


@contextlib.contextmanager
def _opened(path: Path, fmt: InputFormat) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """(its text's bytes, the file); a read error becomes one InputError naming the file."""
    what = COMPRESSIONS.get(fmt.compression or "", "")
    try:
        with path.open("rb") as raw, _decompressed(raw, fmt.compression) as stream:
            yield stream, raw
    except EOFError:
        raise InputError(f"{path}: the {what} data ends early: the file is cut short (an "
                         "interrupted download or copy?); fetch it again") from None
    except (OSError, lzma.LZMAError, zlib.error) as error:
        kind = f"{what} data" if what else "a file"
        raise InputError(f"{path}: cannot be read as {kind} ({error}); {ACCEPTED}") from None


def check_input(path: Path) -> InputFormat:
    """The format of ``path``, checked by reading its start: a name the kit does not read, a
    missing zstandard, a file that does not decompress or is not wikiextractor's layout fails here,
    before anything is written."""
    fmt = input_format(path)
    if fmt is None:
        raise InputError(f"{path}: not a format the kit reads; {ACCEPTED}")
    if fmt.compression == ".zst":
        try:
            import zstandard  # noqa: F401  (imported here: only .zst input needs it)
        except ImportError:
            raise InputError(f"{path}: reading .zst needs zstandard, which is not installed: pip "
                             "install 'megatron-bench-kit[data]' (or pip install zstandard)") from None
    with _opened(path, fmt) as (stream, _):
        head = stream.read(PROBE_BYTES)
    if fmt.layout is Layout.WIKIEXTRACTOR and not head.lstrip().startswith((b"<doc ", b"{")):
        raise InputError(f"{path}: named like wikiextractor output but starts with neither "
                         f"'<doc ' nor a JSON object; {ACCEPTED}")
    return fmt


def _decode(raw: bytes, where: str, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{where}: not UTF-8 (byte 0x{raw[error.start]:02x} at offset {offset + error.start}); "
            "convert the file, e.g. iconv -f LATIN1 -t UTF-8 IN > OUT") from None


def _lines(stream: BinaryIO, path: Path) -> Iterator[tuple[str, str, int]]:
    """(line, where, bytes) for each line, decoded, a leading byte-order mark dropped."""
    offset = 0
    for number, raw in enumerate(iter(lambda: stream.readline(MAX_DOCUMENT_BYTES + 1), b""), start=1):
        where = f"{path}:{number}"
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise InputError(_too_long(where, "a line"))
        line = _decode(raw, where, offset)
        offset += len(raw)
        yield (line.removeprefix("\ufeff") if number == 1 else line), where, len(raw)


def _too_long(where: str, what: str) -> str:
    return (f"{where}: {what} longer than {MAX_DOCUMENT_BYTES >> 20} MiB: no corpus has one, so "
            "this is no text the kit reads (a decompression bomb, or a binary file named like "
            "text); remove it from the inputs")


def _json_lines(lines: Iterator[tuple[str, str, int]], json_key: str) -> Iterator[tuple[str, int]]:
    for line, where, size in lines:
        line = line.strip().removeprefix("\ufeff")  # any line: files with one are concatenated
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


def _paragraphs(lines: Iterator[tuple[str, str, int]]) -> Iterator[tuple[str, int]]:
    """OSCAR's plain text: a document's lines up to a blank line, trailing whitespace dropped
    (as the OSCAR loader of HuggingFace datasets does)."""
    document = io.StringIO()  # not a list of lines: millions of short ones would each be an object
    size = 0
    for line, where, length in lines:
        size += length
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(_too_long(where, "a document"))
        if line.strip():
            document.write(line)
        elif document.tell():
            yield document.getvalue().rstrip(), size
            document, size = io.StringIO(), 0
    if document.tell():
        yield document.getvalue().rstrip(), size


def _doc_blocks(lines: Iterator[tuple[str, str, int]], path: Path) -> Iterator[tuple[str, int]]:
    """wikiextractor's default output: the text between ``<doc ...>`` and ``</doc>`` lines."""
    document: io.StringIO | None = None
    size = 0
    for line, where, length in lines:
        size += length
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(_too_long(where, "a document"))
        stripped = line.strip()
        if document is None:
            if stripped.startswith("<doc ") and stripped.endswith(">"):
                document = io.StringIO()
            elif stripped:
                raise InputError(f"{where}: text outside a <doc ...> ... </doc> block; is this "
                                 "wikiextractor output?")
        elif stripped == "</doc>":
            yield document.getvalue().removesuffix("\n"), size
            document, size = None, 0
        else:
            document.write(line)
    if document is not None:
        raise InputError(f"{path}: ends inside a <doc> block: the file is cut short")


def _wikiextractor(lines: Iterator[tuple[str, str, int]], path: Path,
                   json_key: str) -> Iterator[tuple[str, int]]:
    """Blocks or, with ``--json``, JSON lines: the first line that is not blank tells which."""
    skipped = 0
    for first in lines:
        if first[0].strip():
            break
        skipped += first[2]
    else:
        return
    rest = _chain_first(first, lines)
    if first[0].lstrip().startswith("{"):
        documents = _json_lines(rest, json_key)
    else:
        documents = _doc_blocks(rest, path)
    for text, size in documents:
        yield text, size + skipped
        skipped = 0


def _chain_first(first: tuple[str, str, int],
                 rest: Iterator[tuple[str, str, int]]) -> Iterator[tuple[str, str, int]]:
    yield first
    yield from rest


def read_documents(path: Path, fmt: InputFormat, json_key: str) -> Iterator[Document]:
    """Each document of ``path`` as it is read; a generator, so a file is read only as far as
    the documents taken from it (empty documents come as ``""``, for the caller to count)."""
    with _opened(path, fmt) as (stream, raw):
        if fmt.layout is Layout.TEXT:
            data = stream.read(MAX_DOCUMENT_BYTES + 1)  # one document: tokenized at once
            if len(data) > MAX_DOCUMENT_BYTES:
                raise InputError(_too_long(str(path), "a document"))
            yield Document(_decode(data, str(path), 0).removeprefix("\ufeff"), len(data), raw.tell())
            return
        lines = _lines(stream, path)
        if fmt.layout is Layout.JSONL:
            documents = _json_lines(lines, json_key)
        elif fmt.layout is Layout.PARAGRAPHS:
            documents = _paragraphs(lines)
        else:
            documents = _wikiextractor(lines, path, json_key)
        for text, size in documents:
            yield Document(text, size, raw.tell())
