"""Records against what the model expected when each run was planned: the one check of the model
that no refit can flatter, split by whether the run's configuration was new to the records."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.records.as_planned import as_planned, describe
from bench.records.expected import Expected
from bench.records.store import load_records
from tests.inprocess import run_cli
from tests.record_factory import failed_fields, make_record

REPO = Path(__file__).resolve().parents[2]
STEP = 64 / 9.3  # the factory's measured median step, seconds


def _ok(run_id: str, started: str, expected_step: float | None, band: float = 0.12, **more):
    expected = None if expected_step is None else Expected(
        tflops_per_gpu=379.0 * STEP / expected_step, step_time_s=expected_step, band=band,
        terms={"gemm": expected_step}).model_dump()
    return make_record(run_id=run_id, started_at=started, expected=expected, **more)


def test_the_first_record_of_a_key_is_new_and_the_later_ones_known() -> None:
    other_batch = {"layout": {**make_record().layout.model_dump(), "global_batch": 128},
                   "argv": ["python", "-m", "bench.train.pretrain_gpt", "--num-layers", "40",
                            "--global-batch-size", "128"]}
    records = [
        _ok("13b_dp4_h200x4_20261121T120000Z", "2026-11-21T12:00:00Z", 1.1 * STEP),  # new, in its band
        _ok("13b_dp4_h200x4_20261121T130000Z", "2026-11-21T13:00:00Z", 1.3 * STEP),  # known, beyond it
        _ok("13b_dp4_h200x4_20261121T110000Z", "2026-11-21T11:00:00Z", None, **other_batch),  # no expectation
        _ok("13b_dp4_h200x4_20261121T140000Z", "2026-11-21T14:00:00Z", 0.8 * STEP, 0.25, **other_batch),
        make_record(**failed_fields(run_id="13b_dp4_h200x4_20261121T090000Z", started_at="2026-11-21T09:00:00Z",
                                    layout={**make_record().layout.model_dump(), "micro_batch": 2})),
        _ok("13b_dp4_h200x4_20261121T150000Z", "2026-11-21T15:00:00Z", STEP,
            layout={**make_record().layout.model_dump(), "micro_batch": 2}),
    ]
    found = as_planned(reversed(records))  # taken in the order the runs started, not as given
    assert found.new.errors == pytest.approx((0.1,)) and found.new.in_band == 1
    # the second of its key; one whose key only a run without an expectation had; one whose key
    # only a failed run had: each repeats a configuration already run
    assert sorted(found.known.errors) == pytest.approx([0.0, 0.2, 0.3]) and found.known.in_band == 2
    lines = describe(found)
    assert lines[1].split()[:3] == ["new", "key", "1"] and "(1 within the band they quoted)" in lines[1]
    assert lines[2].split()[:5] == ["key", "run", "before", "3", "median"]


def test_the_kits_records_are_checked_so_by_validate_and_on_the_page() -> None:
    records, _ = load_records(REPO / "results" / "records")
    found = as_planned(records)
    assert len(found.new.errors) > 100 and len(found.known.errors) > 50
    page = (REPO / "results" / "README.md").read_text(encoding="utf-8")
    assert (f"the {len(found.new.errors)} records of a configuration no earlier record had" in page
            and f"{found.new.in_band} of {len(found.new.errors)} within the band they quoted" in page)
    shown = run_cli("predict", "--validate", cwd=REPO).stdout.splitlines()
    assert shown[-5:-2] == describe(found)  # the summary's two lines stay last
