"""The results page's bytes-a-parameter table: records' measured parts beside the paper's."""

from __future__ import annotations

from pathlib import Path

from bench.measure.logparse import parse_log
from bench.results.data import load_published
from bench.results.generate import PUBLISHED_FILE
from bench.results.memory import parts_rows, section
from tests.record_factory import make_record

ROOT = Path(__file__).parents[2]
CPU_LOG = ROOT / "tests" / "fixtures" / "logs" / "megatron_memory_parts_cpu_bf16.log"


def test_a_measured_row_sits_above_the_papers_rows() -> None:
    parts = parse_log(CPU_LOG.read_text()).memory_parts
    run = make_record(memory_parts=vars(parts))
    published = load_published(ROOT / PUBLISHED_FILE)
    rows = parts_rows([run, make_record(run_id="no-parts")], published)
    assert [(row.precision, row.measured, row.total) for row in rows] == [
        ("bf16", True, 18.0), ("bf16", False, 16.0), ("msamp-o2", False, 6.0)]
    table = section(rows, "records")[4:]
    assert table == [
        "| precision | run or source | weights | gradients | master | moments | total |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        f"| bf16 | [13B dp4, NVIDIA H200 SXM 141GB](records/{run.run_id}.json) | 2.00 | 4.00 | 4.00 | 8.00 | 18.00 |",
        "| bf16 | [FP8-LM (Peng et al. 2023) / MS-AMP GPT-3 docs](https://arxiv.org/abs/2310.18313) "
        "| – | 4.00 | 4.00 | 8.00 | 16.00 |",
        "| msamp-o2 | [FP8-LM (Peng et al. 2023) / MS-AMP GPT-3 docs](https://arxiv.org/abs/2310.18313) "
        "| – | 1.00 | 2.00 | 3.00 | 6.00 |",
        "",
    ]


def test_no_measured_row_no_section() -> None:
    published = load_published(ROOT / PUBLISHED_FILE)
    assert section(parts_rows([make_record()], published), "records") == []


def test_the_papers_states_are_a_row_of_their_own_and_an_uncounted_moment_has_no_total() -> None:
    """Runs of one precision with and without --optimizer-states paper are two rows; a record of a
    commit whose count missed the fp8 first moment (TE 2.20's empty Float8Tensor storage) shows its
    moments and total as not counted, the other parts as measured."""
    parts = {"parameters": 100, "weights": 200, "gradients": 200, "master": 100, "moments": 100}
    provenance = {"kit_commit": "382c9e2d04a2aaaa", "megatron_core": "0.19.2", "torch": "2.11.0",
                  "gpu_model": "NVIDIA H200", "gpu_count": 4}
    default = make_record(run_id="default", memory_parts={**parts, "moments": 600},
                          precision="fp8-delayed", variant={})
    old = make_record(run_id="old", memory_parts=parts, precision="fp8-delayed",
                      variant={"optimizer_states": "paper"}, provenance=provenance)
    fixed = make_record(run_id="fixed", memory_parts={**parts, "moments": 200},
                        precision="fp8-delayed", variant={"optimizer_states": "paper"},
                        provenance={**provenance, "kit_commit": "f54b62a"},
                        started_at="2026-11-22T10:00:00Z", finished_at="2026-11-22T10:05:00Z")
    published = load_published(ROOT / PUBLISHED_FILE)
    measured = [row for row in parts_rows([default, old], published) if row.measured]
    assert [(row.precision, row.link, row.parts, row.total) for row in measured] == [
        ("fp8-delayed", "default.json", (2.0, 2.0, 1.0, 6.0), 11.0),
        ("fp8-delayed paper states", "old.json", (2.0, 2.0, 1.0, None), None)]
    newest = [row for row in parts_rows([old, fixed], published) if row.measured]
    assert [(row.link, row.total) for row in newest] == [("fixed.json", 7.0)]
