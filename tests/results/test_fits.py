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


def test_2_7b_under_80_gb_te_trains_at_4_and_msamp_o2_at_8(groups) -> None:
    group = groups["2.7B tp1pp1dp2, global batch 32, capped at 80 GB, NVIDIA H200 SXM 141GB, real data"]
    rows = [(row.configuration, row.run.layout.micro_batch, row.run.status) for row in group.rows]
    assert ("fp8-delayed TE", 8, "oom") in rows and ("fp8-delayed TE", 4, "ok") in rows
    largest = {name: run.layout.micro_batch for name, run in group.largest().items()}
    assert largest["fp8-delayed TE"] == 4 and largest["msamp-o2 no TE"] == 8
    assert group.fastest()["msamp-o2 no TE"].metrics.tflops_per_gpu == pytest.approx(578.0, abs=0.05)


def test_6_7b_under_80_gb_trains_only_with_the_kit_s_paper_adam(groups) -> None:
    group = groups["6.7B tp1pp1dp2, global batch 16, capped at 80 GB, NVIDIA H200 SXM 141GB, real data"]
    assert sorted(group.largest()) == ["fp8-delayed TE optimizer_states=paper-kit",
                                       "msamp-o1 no TE optimizer_states=paper-kit"]
    assert {row.run.status for row in group.rows
            if not row.configuration.endswith("paper-kit")} == {"oom"}


def test_uncapped_runs_are_not_listed(groups) -> None:
    assert all("capped at" in title for title in groups)
    assert all(row.run.variant.get("gpu_memory_cap_gb") for g in groups.values() for row in g.rows)
