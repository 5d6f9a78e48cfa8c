"""Headline grade: three runs of twenty measured steps on one key, or quick."""

from __future__ import annotations

from pathlib import Path

from bench.records.headline import HEADLINE_RUNS, HEADLINE_STEPS, Grade, grade, headline, is_headline_grade
from bench.records.identity import config_key
from bench.records.record import Record
from bench.records.store import load_records
from tests.record_factory import make_record

BASE = make_record()


def _run(minute: int, steps: int = HEADLINE_STEPS, **fields) -> Record:
    metrics = {**BASE.metrics.model_dump(), "window_iters": steps}
    return make_record(run_id=f"13b_dp4_h200x4_20261121T20{minute:02d}00Z",
                       started_at=f"2026-11-21T20:{minute:02d}:00Z",
                       finished_at=f"2026-11-21T20:{minute + 5:02d}:00Z", metrics=metrics, **fields)


def test_three_runs_of_twenty_steps_on_one_key_are_headline_grade() -> None:
    runs = [_run(m) for m in (10, 20, 30)]
    assert HEADLINE_RUNS == 3 and grade(runs) is Grade.HEADLINE and is_headline_grade(runs)
    assert headline(runs) == {config_key(runs[0]): tuple(runs)}


def test_fewer_runs_or_steps_are_quick() -> None:
    assert grade([_run(10), _run(20)]) is Grade.QUICK
    assert grade([_run(10), _run(20), _run(30, steps=HEADLINE_STEPS - 1)]) is Grade.QUICK
    assert headline([_run(10), _run(20)]) == {}


def test_runs_of_two_keys_are_never_headline_together() -> None:
    runs = [_run(10), _run(20), _run(30, precision="fp8-delayed")]
    assert grade(runs) is Grade.QUICK


def test_a_headline_figure_is_made_of_the_long_runs_only() -> None:
    runs = [_run(10), _run(20), _run(30), _run(40, steps=5)]
    assert is_headline_grade(runs)
    (kept,) = headline(runs).values()
    assert len(kept) == 3 and all(run.metrics.window_iters >= HEADLINE_STEPS for run in kept)


def test_the_kept_records_headline_configurations_have_three_long_runs_each() -> None:
    runs, _ = load_records(Path(__file__).resolve().parents[2] / "results" / "records")
    found = headline(runs)
    assert found  # 345m bf16 on two H200s: four runs of 495 steps
    assert all(len(kept) >= HEADLINE_RUNS for kept in found.values())
