"""The results page's bytes-a-parameter table: records' measured parts beside the paper's."""

from __future__ import annotations

from pathlib import Path

from bench.measure.logparse import parse_log
from bench.results.data import load_published
from bench.results.generate import PUBLISHED_FILE
from bench.results.markdown import _memory_section
from bench.results.memory import parts_rows
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
    table = _memory_section(rows, "records")[4:]
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
    assert _memory_section(parts_rows([make_record()], published), "records") == []
