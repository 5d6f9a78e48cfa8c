"""What fits a smaller GPU, from the kept records: the capped runs of two H200s (2026-11-26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.records.store import load_records
from bench.results.fits import fit_groups

RECORDS = Path(__file__).parents[2] / "results" / "records"


@pytest.fixture(scope="module")
def groups():
    runs, _ = load_records(RECORDS)
    return {group.title: group for group in fit_groups(runs)}


def test_2_7b_under_80_gb_te_needs_expandable_segments_for_8(groups) -> None:
    """te at 8 ran out of memory with torch's default allocator and trained with expandable
    segments (2026-11-26 11:41, 599.6 TFLOP/s/GPU at 79.3 GB); msamp-o2 trains 8 either way."""
    group = groups["2.7B tp1pp1dp2, global batch 32, NVIDIA H200 SXM 141GB capped at 80 GB, real data"]
    rows = [(row.configuration, row.run.layout.micro_batch, row.run.status) for row in group.rows]
    assert ("fp8-delayed TE", 8, "oom") in rows and ("fp8-delayed TE", 4, "ok") in rows
    largest = {name: run.layout.micro_batch for name, run in group.largest().items()}
    assert largest["fp8-delayed TE"] == 4 and largest["msamp-o2 no TE"] == 8
    assert largest["fp8-delayed TE allocator=expandable"] == 8
    fastest = group.fastest()
    assert fastest["fp8-delayed TE allocator=expandable"].metrics.tflops_per_gpu == pytest.approx(599.6, abs=0.05)
    assert fastest["msamp-o2 no TE"].metrics.tflops_per_gpu == pytest.approx(587.1, abs=0.05)


def test_6_7b_dp2_under_80_gb_trains_with_the_paper_s_states_or_expandable_segments(groups) -> None:
    """At dp2 only the paper's states in the kit's Adam (chunked step, then its kernel, up to
    micro-batch 2) and msamp-o2 with expandable segments trained; te's own states need tp2."""
    group = groups["6.7B tp1pp1dp2, global batch 16, NVIDIA H200 SXM 141GB capped at 80 GB, real data"]
    largest = {name: run.layout.micro_batch for name, run in group.largest().items()}
    assert largest == {"fp8-delayed TE optimizer_states=paper-kit": 1,
                       "fp8-delayed TE optimizer_states=paper-kit, paper_adam=chunked": 1,
                       "msamp-o1 no TE optimizer_states=paper-kit": 2,
                       "msamp-o1 no TE optimizer_states=paper-kit, paper_adam=chunked": 1,
                       "msamp-o2 no TE allocator=expandable": 1}
    assert {row.run.status for row in group.rows if "paper-kit" not in row.configuration
            and "expandable" not in row.configuration} == {"oom"}
    tp2 = groups["6.7B tp2pp1dp1sp, global batch 16, NVIDIA H200 SXM 141GB capped at 80 GB, real data"]
    assert {row.run.status for row in tp2.rows} == {"ok"}


def test_uncapped_runs_are_not_listed(groups) -> None:
    assert all("capped at" in title for title in groups)
    assert all(row.run.variant.get("gpu_memory_cap_gb") for g in groups.values() for row in g.rows)


def test_6_7b_across_layouts_sets_the_paper_s_states_at_dp2_beside_te_at_tp2() -> None:
    """Where memory binds at 6.7b: each configuration's fastest run over dp2 and tp2 + sp."""
    from bench.results.fits import best_layouts

    runs, _ = load_records(RECORDS)
    title = "6.7B on 2 GPUs, global batch 16, NVIDIA H200 SXM 141GB capped at 80 GB, real data"
    (across,) = [group for group in best_layouts(fit_groups(runs)) if group.title == title]
    top = [(row.configuration, row.run.layout.name, round(row.run.metrics.tflops_per_gpu, 1))
           for row in across.best[:2]]
    assert top == [("msamp-o1 no TE optimizer_states=paper-kit", "tp1pp1dp2", 632.6),
                   ("fp8-delayed TE cuda_graphs=te",
                    "tp2pp1dp1sp", 610.3)]
    # te's own states trained at tp2 (so it is not listed as untrained), not at dp2
    assert ("fp8-delayed TE", "tp2pp1dp1sp") in [(r.configuration, r.run.layout.name) for r in across.best]
    assert across.none_trained == ("fp8-delayed TE optimizer_states=paper",
                                   "msamp-o1 no TE optimizer_states=paper", "msamp-o2 no TE")


def test_an_out_of_memory_row_says_when_fragmentation_caused_it(groups) -> None:
    """The two runs that ran out of memory with GiBs stranded by torch's allocator and trained when
    rerun with expandable segments (2.7b te at 8, 6.7b msamp-o2 at 1) read `fragmented`; the 13b
    runs whose CUDA graphs filled the device do not."""
    from bench.results.fits import section

    lines = section(list(groups.values()), "records")
    status = {line.split("](records/")[1].split(".json")[0]: line.split(" | ")[2]
              for line in lines if line.startswith("| ") and "](records/" in line}
    assert status["2.7b_tp1pp1dp2_local_20261126T095541Z-d18b01-c39"] == "out of memory, fragmented"
    assert status["6.7b_tp1pp1dp2_local_20261126T100614Z-cfa8e8-c42"] == "out of memory, fragmented"
    assert status["13b_tp1pp4dp1_local_20261127T071534Z-5d8581-c5"] == "out of memory"
    assert status["13b_tp4pp1dp1sp_local_20261128T023620Z-37ca82-c24"] == "out of memory"
