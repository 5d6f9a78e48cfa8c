"""The benchmark protocol: which iterations count and how metrics are computed from them.

- Warm-up: the first ``WARMUP_ITERS`` iterations are excluded (allocator growth, NCCL set-up,
  kernel autotuning, the first optimizer step).
- Steady-state window: every logged iteration after the warm-up; at least ``MIN_WINDOW_ITERS`` are
  required for a result, otherwise the run is ``incomplete``.
- Step time: the median over the window, with the 10th and 90th percentiles as its spread.
- samples/s = global batch / median step time; tokens/s/GPU = samples/s x sequence / GPUs.
- TFLOP/s/GPU = model FLOPs of one iteration (``bench.measure.flops``, causal convention, and the
  non-causal figure beside it) / median step time / GPUs; MFU = that over the platform's dense peak
  for the precision used (from ``platforms/accelerators/``).
"""

from __future__ import annotations

import statistics

from bench.config.presets import Preset
from bench.measure.flops import CAUSAL, flops_per_iteration, mfu
from bench.measure.logparse import Iteration

WARMUP_ITERS = 5
MIN_WINDOW_ITERS = 5


class ShortWindow(ValueError):
    """Too few iterations after the warm-up for a measurement: the run is ``incomplete``."""


def window(iterations: tuple[Iteration, ...]) -> tuple[Iteration, ...]:
    """The steady-state iterations: those after the warm-up."""
    return tuple(it for it in iterations if it.index > WARMUP_ITERS)


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 1]."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lower = int(pos)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (pos - lower)


def metrics(iterations: tuple[Iteration, ...], preset: Preset, global_batch: int, gpus: int,
            peak_tflops: float, peak_mem_gb: float | None,
            bf16_peak_tflops: float | None = None) -> dict[str, float | int | str | None]:
    """Record metrics (``bench.records.record.Metrics`` fields) from the logged iterations.

    ``bf16_peak_tflops``: the accelerator's dense bf16 peak, given when ``peak_tflops`` is another
    format's (fp8 runs), so the record also says how the run compares with bf16 hardware peak.

    Raises :class:`ShortWindow` when the window holds fewer than ``MIN_WINDOW_ITERS``
    iterations, and ValueError when the median step time is zero (no rate can be computed).
    """
    steady = window(iterations)
    if len(steady) < MIN_WINDOW_ITERS:
        raise ShortWindow(f"only {len(steady)} iterations after the {WARMUP_ITERS} warm-up ones; "
                          f"the protocol needs {MIN_WINDOW_ITERS} (raise --iters)")
    times = [it.elapsed_ms / 1000.0 for it in steady]
    median = statistics.median(times)
    if median <= 0:
        raise ValueError(f"the log's median step time over the window is {median} s; a step "
                         "cannot take no time, so the log's timings are not measurements")
    samples_per_s = global_batch / median
    tflops = flops_per_iteration(preset, global_batch) / median / gpus / 1e12
    tflops_nc = flops_per_iteration(preset, global_batch, causal=False) / median / gpus / 1e12
    return {
        "warmup_iters": WARMUP_ITERS,
        "window_iters": len(steady),
        "step_time_s_median": median,
        "step_time_s_p10": _percentile(times, 0.10),
        "step_time_s_p90": _percentile(times, 0.90),
        "samples_per_s": samples_per_s,
        "tokens_per_s_per_gpu": samples_per_s * preset.seq_length / gpus,
        "tflops_per_gpu": tflops,
        "mfu": mfu(tflops, peak_tflops),
        "flops_convention": CAUSAL,
        "tflops_per_gpu_noncausal": tflops_nc,
        "mfu_noncausal": mfu(tflops_nc, peak_tflops),
        "peak_mem_gb": peak_mem_gb,
        "mfu_bf16_peak": tflops / bf16_peak_tflops if bf16_peak_tflops else None,
    }
