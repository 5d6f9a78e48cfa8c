"""Live progress lines drawn from a Megatron-Core 0.19 training log (tests/train/data)."""

from __future__ import annotations

from pathlib import Path

from bench.jobs.follow import progress

LOG = Path(__file__).resolve().parents[1] / "train" / "data" / "megatron_0.19_train.log"


def test_iteration_lines_become_short_progress_lines() -> None:
    lines = [p for p in map(progress, LOG.read_text().splitlines()) if p]
    assert len(lines) == 10
    assert lines[0] == "iteration 1/10: 4022 ms, 0.4 TFLOP/s/GPU (engine's count), loss 9.046"
    assert lines[-1] == "iteration 10/10: 59 ms, 25.2 TFLOP/s/GPU (engine's count), loss 5.125"


def test_other_lines_are_not_progress() -> None:
    assert progress("[after training is done] datetime: 2026-11-21 20:31:03 ") is None
    assert progress("BENCH_END status=0") is None
