"""The log parser and the protocol against real logs of our own runs (tests/fixtures/logs/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.presets import get_preset
from bench.measure.logparse import (
    MemoryParts,
    failing_call,
    first_error_lines,
    memory_parts,
    parse_iteration,
    parse_log,
)
from bench.measure.protocol import WARMUP_ITERS, metrics, window
from bench.records.record import Status

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def test_ok_run_one_gpu() -> None:
    result = parse_log(read("megatron_ok_1.3b_tp1pp1_h200.log"))
    assert result.status is Status.OK and result.reason is None
    assert [it.index for it in result.iterations] == list(range(1, 16))
    assert result.train_iters == 15
    assert all(it.global_batch == 32 for it in result.iterations)
    losses = result.losses
    assert losses[-1] < losses[0]  # mock data still trains
    assert result.peak_mem_mb == pytest.approx(max(
        float(line.split("max allocated:")[1].split("|")[0])
        for line in read("megatron_ok_1.3b_tp1pp1_h200.log").splitlines()
        if "max allocated:" in line))


def test_metrics_from_the_real_window() -> None:
    result = parse_log(read("megatron_ok_6.7b_dp4_h200x4.log"))
    assert result.status is Status.OK
    steady = window(result.iterations)
    assert steady[0].index == WARMUP_ITERS + 1 and len(steady) == 12 - WARMUP_ITERS
    m = metrics(result.iterations, get_preset("6.7b"), 64, 4, 989.0, None)
    # Megatron's own TFLOP/s (causal count since 0.12) agrees with the kit's FLOPs function.
    megatron = sorted(it.tflops_per_gpu for it in steady)[len(steady) // 2]
    assert m["tflops_per_gpu"] == pytest.approx(megatron, rel=0.03)
    assert m["samples_per_s"] == pytest.approx(64 / m["step_time_s_median"])
    assert m["step_time_s_p10"] <= m["step_time_s_median"] <= m["step_time_s_p90"]
    assert m["mfu"] == pytest.approx(m["tflops_per_gpu"] / 989.0)


def test_out_of_memory_run() -> None:
    result = parse_log(read("megatron_oom_13b_tp1pp1_h200.log"), exit_code=1)
    assert result.status is Status.OOM
    assert "CUDA out of memory" in result.reason
    assert not result.iterations


def test_crash_names_the_first_error() -> None:
    result = parse_log(read("megatron_crash_dataset_helpers_345m_h200.log"), exit_code=1)
    assert result.status is Status.CRASHED
    assert "Failed to compile the C++ dataset helper functions" in result.reason


def test_killed_before_the_first_iteration() -> None:
    text = read("megatron_killed_13b_tp4pp1_h200x4.log")
    assert parse_log(text, exit_code=None).status is Status.INCOMPLETE
    timed = parse_log(text, timed_out=True, exit_code=-15)
    assert timed.status is Status.TIMEOUT and "time limit" in timed.reason


def test_truncated_log_is_incomplete_not_zero() -> None:
    lines = read("megatron_ok_1.3b_tp1pp1_h200.log").splitlines()
    cut = "\n".join(line for line in lines if "iteration       10/" not in line
                    and not any(f"iteration       {i}/" in line for i in range(11, 16)))
    result = parse_log(cut)
    assert result.status is Status.INCOMPLETE and "9/15" in result.reason
    with pytest.raises(ValueError, match="only 4 iterations after the 5 warm-up"):
        metrics(result.iterations, get_preset("1.3b"), 32, 1, 989.0, None)


def test_nan_detection_on_a_real_line() -> None:
    line = next(line for line in read("megatron_ok_1.3b_tp1pp1_h200.log").splitlines()
                if parse_iteration(line))
    nan_line = line.replace("number of nan iterations:   0", "number of nan iterations:   1")
    assert nan_line != line
    result = parse_log(nan_line)
    assert result.status is Status.NAN and "nan iterations 1" in result.reason


def test_megatron_deepspeed_iteration_lines() -> None:
    # Lines in the exact phrasing of Megatron-DeepSpeed's training_log at the pinned commit: its
    # own "TFLOPs:" figure is read as the engine's TFLOP/s, "samples per second" too.
    result = parse_log(read("megatron_deepspeed_rendered_1.3b_tp1pp1.log"))
    assert result.status is Status.OK and result.train_iters == 12
    first = result.iterations[0]
    assert (first.index, first.elapsed_ms, first.global_batch) == (1, 5100.0, 32)
    assert first.samples_per_s == pytest.approx(6.275)
    assert first.tflops_per_gpu == pytest.approx(float(
        read("megatron_deepspeed_rendered_1.3b_tp1pp1.log").split("TFLOPs: ")[1].split(" ")[0]))
    assert result.peak_mem_mb == pytest.approx(68456.7)


def test_megatron_deepspeed_phrases() -> None:
    # The same two phrases added to a real Megatron line.
    line = next(line for line in read("megatron_ok_1.3b_tp1pp1_h200.log").splitlines()
                if parse_iteration(line))
    ds = line.split(" throughput per GPU")[0] + " samples per second: 25.561 | TFLOPs: 444.00 |"
    it = parse_iteration(ds)
    assert it.samples_per_s == pytest.approx(25.561) and it.tflops_per_gpu == pytest.approx(444.0)


def test_a_worker_killed_by_a_signal_is_named() -> None:
    """Megatron-DeepSpeed on an H200: rank 0 segfaulted in its C++ dataset helper while the
    sample index was built; torchrun's ChildFailedError alone would not say why."""
    result = parse_log(read("megatron_deepspeed_segfault_1.3b_tp1pp1_h200.log"), exit_code=1)
    assert result.status is Status.CRASHED and not result.iterations
    assert result.reason == "exit code 1: local rank 0 was killed by signal 11 (SIGSEGV)"


def test_a_workers_last_exception_is_the_reason() -> None:
    """Megatron-DeepSpeed on an H200 (before patch 0009 reshaped the value): upstream catches
    a TypeError and retries, the retry raises; torchrun's ChildFailedError comes last."""
    text = read("megatron_deepspeed_view_error_1.3b_tp1pp1_h200.log")
    result = parse_log(text, exit_code=1)
    assert result.status is Status.CRASHED
    assert result.reason.startswith("exit code 1: RuntimeError: view size is not compatible")
    errors = first_error_lines(text.splitlines())
    assert any("TypeError: ParallelAttention.forward() got an unexpected keyword" in line
               for line in errors)
    assert any("RuntimeError: view size is not compatible" in line for line in errors)


def test_a_crash_names_the_failing_call_from_the_real_traceback() -> None:
    """The innermost frame above the exception: the file and line to open, with the record's
    versions (megatron-core, torch) beside it."""
    text = (LOGS / "megatron_deepspeed_view_error_1.3b_tp1pp1_h200.log").read_text()
    result = parse_log(text, timed_out=False, exit_code=1)
    assert result.status is Status.CRASHED
    assert result.reason.endswith("(at megatron/model/transformer.py:352 in forward)")
    lines = text.splitlines()
    frame = next(line for line in lines if "site-packages/torch/nn/modules/module.py" in line)
    error = "RuntimeError: stand-in"
    # a frame in an installed package is named from the package's root
    assert failing_call([frame, f"[rank0]: {error}"], error) == "torch/nn/modules/module.py:1779 in _wrapped_call_impl"
    assert failing_call(lines, "no such error text") is None


def test_a_crash_names_an_exception_whose_name_says_no_error() -> None:
    """MS-AMP's compiled cast past Dynamo's recompile limit (2026-11-26, two H200s): the ranks
    raise torch._dynamo.exc.FailOnRecompileLimitHit, and the launcher's ChildFailedError names no
    cause."""
    result = parse_log(read("megatron_msamp_recompile_limit_345m_h200x2.log"), exit_code=1)
    assert result.status is Status.CRASHED
    assert result.reason.startswith("exit code 1: torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure")
    assert result.reason.endswith("(at torch/_dynamo/convert_frame.py:1780 in _compile)")


def test_a_crash_without_a_traceback_names_no_call() -> None:
    text = (LOGS / "megatron_deepspeed_segfault_1.3b_tp1pp1_h200.log").read_text()
    result = parse_log(text, timed_out=False, exit_code=1)
    assert result.status is Status.CRASHED and "(at " not in result.reason


def test_memory_by_part_is_read_from_the_line_the_entry_prints() -> None:
    """The training entry's wrapper run on CPU (tests/train/memory_parts_checks.py report_line:
    megatron-core's GPT in bf16, fp32 gradient buffer, fp32 masters, AdamW): 2/4/4/8 bytes a
    parameter; a GPU log from before the line existed has none."""
    parsed = parse_log(read("megatron_memory_parts_cpu_bf16.log"), exit_code=0)
    n = 10_762_240
    assert parsed.memory_parts == MemoryParts(parameters=n, weights=2 * n, gradients=4 * n,
                                              master=4 * n, moments=8 * n)
    assert parse_log(read("megatron_ok_1.3b_tp1pp1_h200.log")).memory_parts is None


def test_a_cut_memory_line_is_not_read() -> None:
    line = next(line for line in read("megatron_memory_parts_cpu_bf16.log").splitlines()
                if line.startswith("kit memory by part:"))
    assert memory_parts([line]) is not None
    assert memory_parts([line.rsplit(" | ", 1)[0]]) is None  # no moments: not a measurement
