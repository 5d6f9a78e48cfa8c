"""Precisions side by side, from the kept records: what the README and the reports quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.records.record import Record
from bench.records.store import load_records
from bench.results.precisions import side_by_side
from tests.record_factory import make_record

BASE = make_record()

RECORDS = Path(__file__).parents[2] / "results" / "records"


@pytest.fixture(scope="module")
def groups():
    runs, _ = load_records(RECORDS)
    return {group.title: group for group in side_by_side(runs)}


def _ratios(group) -> dict[str, float]:
    base = group.baseline.run.metrics.tflops_per_gpu
    return {c.name: round(c.run.metrics.tflops_per_gpu / base, 2) for c in group.columns}


def test_the_two_h100_dp2_group_sets_fp8_and_the_stacks_beside_bf16(groups) -> None:
    (title,) = [t for t in groups
                if t.startswith("2.7B tp1pp1dp2, micro/global batch 4/32") and t.endswith("campaign h100x2")]
    assert _ratios(groups[title]) == {"bf16 TE": 1.0, "bf16 TE+apex": 0.99, "bf16 no TE": 1.01,
                                      "fp8-delayed TE": 1.23, "fp8-current TE": 1.19}


def test_the_ms_amp_modes_are_one_group_of_five_precisions(groups) -> None:
    (title,) = [t for t in groups if t.startswith("1.3B tp1pp1dp1, micro/global batch 4/32, 30 iterations")]
    group = groups[title]
    assert [c.run.precision for c in group.columns] == ["bf16", "fp8-delayed", "msamp-o1", "msamp-o2", "fp4"]
    assert group.baseline.run.metrics.tflops_per_gpu == pytest.approx(461.2, abs=0.05)


def test_a_campaign_s_runs_are_set_beside_those_of_their_own_command(groups) -> None:
    """Two H200s, 2026-11-26: te ran at 468.2 in msamp-te-modules and at 537.2 in
    msamp-te-cuda-graph ten minutes later; each group is its own table."""
    titles = [t for t in groups if t.startswith("2.7B tp1pp1dp2, micro/global batch 4/32")
              and t.endswith(("2026-11-26 09:51", "2026-11-26 10:02"))]
    tables = [{c.name: round(c.run.metrics.tflops_per_gpu, 1) for c in groups[t].columns}
              for t in sorted(titles)]
    assert tables == [
        {"fp8-delayed TE": 468.2, "msamp-o2 no TE": 511.2, "msamp-o2 no TE msamp_modules=te": 536.9},
        {"fp8-delayed TE": 537.2, "fp8-delayed TE megatron_args=--cuda-graph-impl transformer_engine": 572.0,
         "msamp-o2 no TE": 549.3}]


def test_runs_that_differ_in_anything_but_precision_and_layers_stay_apart(groups) -> None:
    for group in groups.values():
        first = group.columns[0].run
        for column in group.columns:
            run = column.run
            assert (run.preset.name, run.layout.name, run.layout.micro_batch, run.layout.global_batch,
                    run.platform.accelerator) == (first.preset.name, first.layout.name,
                                                  first.layout.micro_batch, first.layout.global_batch,
                                                  first.platform.accelerator)
        assert len({c.name for c in group.columns}) == len(group.columns) >= 2


def test_fp8_at_its_default_micro_batch_is_set_beside_bf16_at_that_micro_batch_only() -> None:
    def run(precision: str, mbs: int, minute: int) -> Record:
        return make_record(run_id=f"13b_dp4_h200x4_20261121T20{minute:02d}00Z", precision=precision,
                           started_at=f"2026-11-21T20:{minute:02d}:00Z",
                           finished_at=f"2026-11-21T20:{minute + 5:02d}:00Z",
                           layout={**BASE.layout.model_dump(), "micro_batch": mbs},
                           labels={"campaign": "h100x2"})

    fp8, bf16_preset = run("fp8-delayed", 8, 10), run("bf16", 4, 20)
    assert side_by_side([fp8, bf16_preset]) == []
    (group,) = side_by_side([fp8, bf16_preset, run("bf16", 8, 30)])
    assert {c.run.layout.micro_batch for c in group.columns} == {8}
    assert "micro/global batch 8/64" in group.title


def _run(precision: str, minute: int, uuids: list[str] | None, commit: str = "0123abc",
         day: str = "2026-11-21") -> Record:
    return make_record(run_id=f"13b_dp4_h200x4_{day.replace('-', '')}T20{minute:02d}00Z",
                       precision=precision, started_at=f"{day}T20:{minute:02d}:00Z",
                       finished_at=f"{day}T20:{minute + 5:02d}:00Z", labels={"campaign": "h200x4"},
                       provenance={**BASE.provenance.model_dump(), "kit_commit": commit,
                                   "gpu_uuids": uuids})


MACHINE_A = [f"GPU-aaaaaaa{i}-9bec-9809-174b-7bcb20b53a7f" for i in range(4)]
MACHINE_B = [f"GPU-bbbbbbb{i}-9bec-9809-174b-7bcb20b53a7f" for i in range(4)]


def test_one_machines_runs_are_one_group_whatever_the_order_of_its_gpus() -> None:
    (group,) = side_by_side([_run("bf16", 10, MACHINE_A), _run("fp8-delayed", 20, MACHINE_A[::-1])])
    assert [c.run.precision for c in group.columns] == ["bf16", "fp8-delayed"]
    assert group.title.endswith("campaign h200x4")  # nothing to tell apart


def test_two_machines_of_one_campaign_are_two_groups_told_apart_by_day() -> None:
    runs = [_run("bf16", 10, MACHINE_A), _run("fp8-delayed", 20, MACHINE_A),
            _run("fp8-current", 30, MACHINE_A),
            _run("bf16", 10, MACHINE_B, day="2026-11-22"), _run("fp8-current", 20, MACHINE_B, day="2026-11-22")]
    first, second = side_by_side(runs)
    assert [c.run.precision for c in first.columns] == ["bf16", "fp8-delayed", "fp8-current"]
    assert [c.run.precision for c in second.columns] == ["bf16", "fp8-current"]
    assert first.title.endswith("campaign h200x4, first run 2026-11-21")
    assert second.title.endswith("campaign h200x4, first run 2026-11-22")
    # One machine alone in a campaign makes no table: a column from the other is not its to take.
    assert side_by_side([_run("bf16", 10, MACHINE_A), _run("fp8-current", 20, MACHINE_B)]) == []


def test_machines_of_one_day_are_told_apart_by_the_minute_of_their_first_run() -> None:
    runs = [_run(p, m, MACHINE_A) for p, m in (("bf16", 10), ("fp8-delayed", 20))]
    runs += [_run(p, m, MACHINE_B) for p, m in (("bf16", 30), ("fp8-delayed", 40))]
    assert [g.title.rpartition(", ")[2] for g in side_by_side(runs)] == [
        "first run 2026-11-21 20:10", "first run 2026-11-21 20:30"]


def test_records_without_uuids_split_where_an_hour_passes_between_runs() -> None:
    """Older records: one machine's runs follow each other (a kit commit may change between them);
    the next machine's come more than an hour after."""
    runs = [_run("bf16", 10, None, "1111111aaaa"), _run("fp8-delayed", 20, None, "2222222bbbb"),
            _run("bf16", 10, None, day="2026-11-22"), _run("fp8-current", 20, None, day="2026-11-22")]
    groups = side_by_side(runs)
    assert [[c.run.precision for c in g.columns] for g in groups] == [["bf16", "fp8-delayed"], ["bf16", "fp8-current"]]
    assert [g.title.rpartition(", ")[2] for g in groups] == ["first run 2026-11-21", "first run 2026-11-22"]
    assert side_by_side(runs[:1] + runs[3:]) == []  # never across machines
    later = make_record(**{**runs[1].model_dump(), "run_id": "13b_dp4_h200x4_20261121T2200Z",
                           "started_at": "2026-11-21T22:00:00Z", "finished_at": "2026-11-21T22:05:00Z"})
    assert side_by_side(runs[:1] + [later]) == []  # 95 minutes after the first run ended
