"""``python -m bench.train.smoke`` on a machine without GPUs refuses, and its log reading is exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure.logparse import parse_log
from bench.train.smoke import EXIT_NO_GPU, TRAIN_ITERS, judge_training

# The smoke check's own 2-layer training on an H200 (megatron-core 0.19.2, bf16, mock data).
LOG = Path(__file__).parent.parent / "fixtures" / "logs" / "megatron_smoke_2layer_h200.log"


def parse_iteration_lines(text: str):
    return parse_log(text).iterations


def test_smoke_refuses_without_gpu_in_megatron_python(run_megatron, tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    result = run_megatron(["-m", "bench.train.smoke", "--out", str(out)])
    assert result.returncode == EXIT_NO_GPU, result.stderr[-2000:]
    assert "no CUDA GPU is visible" in result.stderr
    assert not out.exists(), "nothing measured, nothing written"


def test_smoke_refuses_without_torch_or_gpu_in_host_python(run_host, tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    result = run_host(["-m", "bench.train.smoke", "--out", str(out)])
    assert result.returncode == EXIT_NO_GPU, result.stderr[-2000:]
    assert "torch is not importable" in result.stderr or "no CUDA GPU is visible" in result.stderr
    assert not out.exists()


def test_log_lines_are_read_field_by_field() -> None:
    lines = parse_iteration_lines(LOG.read_text())
    assert [line.index for line in lines] == list(range(1, 11))
    first, last = lines[0], lines[-1]
    assert (first.total, first.elapsed_ms, first.tflops_per_gpu) == (10, 3692.3, 0.0)
    assert first.lm_loss == pytest.approx(9.087224) and last.lm_loss == pytest.approx(7.420660)
    assert last.nan_iterations == 0
    assert judge_training(lines, TRAIN_ITERS) is None


def test_training_judgement_names_the_problem() -> None:
    lines = parse_iteration_lines(LOG.read_text())
    assert "expected iterations 1..10" in judge_training(lines[:7], TRAIN_ITERS)
    flat = LOG.read_text().replace("lm loss: 7.420660E+00", "lm loss: 9.900000E+00")
    assert "did not fall" in judge_training(parse_iteration_lines(flat), TRAIN_ITERS)
    nan = LOG.read_text().replace("lm loss: 8.141500E+00", "lm loss: nan")
    assert "not finite" in judge_training(parse_iteration_lines(nan), TRAIN_ITERS)
