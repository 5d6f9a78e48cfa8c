"""Live progress lines drawn from a real Megatron-Core 0.19.2 log (the smoke's 2-layer run on an H200)."""

from __future__ import annotations

from pathlib import Path

from bench.running.jobs.follow import progress

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "megatron_smoke_2layer_h200.log"


def test_iteration_lines_become_short_progress_lines() -> None:
    lines = [p for p in map(progress, LOG.read_text().splitlines()) if p]
    assert len(lines) == 10
    assert lines[0] == "iteration 1/10: 3692 ms, 0.0 TFLOP/s/GPU (engine's count), loss 9.087"
    assert lines[-1] == "iteration 10/10: 25 ms, 5.5 TFLOP/s/GPU (engine's count), loss 7.421"


def test_other_lines_are_not_progress() -> None:
    assert progress("[after training is done] datetime: 2026-11-21 20:31:03 ") is None
    assert progress("BENCH_END status=0") is None
