"""Read the kit's .bin/.idx back with each engine's own reader (run in BENCH_MEGATRON_PYTHON).

``python tests/train/readback_checks.py PREFIX EXPECTED_JSON MDS_TREE``: megatron-core 0.19.2's
``IndexedDataset`` and Megatron-DeepSpeed's ``MMapIndexedDataset`` (the snapshot's file, loaded by
path; its only import from its package, ``print_rank_0``, is given as ``print``) must both return
exactly the expected documents.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import megatron
from megatron.core.datasets.indexed_dataset import IndexedDataset


def main(prefix: str, expected_json: str, mds_tree: str) -> None:
    expected = json.load(open(expected_json))
    core = IndexedDataset(prefix)
    assert len(core) == len(expected), (len(core), len(expected))
    assert [core[i].tolist() for i in range(len(core))] == expected
    assert core.document_indices.tolist() == list(range(len(expected) + 1))

    megatron.print_rank_0 = print  # what Megatron-DeepSpeed's module imports from its package
    spec = importlib.util.spec_from_file_location(
        "mds_indexed_dataset", f"{mds_tree}/megatron/data/indexed_dataset.py")
    mds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mds)
    assert mds.infer_dataset_impl(prefix) == "mmap"
    dataset = mds.make_dataset(prefix, "mmap", skip_warmup=True)
    assert [dataset[i].tolist() for i in range(len(dataset))] == expected
    assert dataset.doc_idx.tolist() == list(range(len(expected) + 1))
    print("ok readback")


if __name__ == "__main__":
    main(*sys.argv[1:])
