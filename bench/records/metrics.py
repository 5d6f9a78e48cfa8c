"""The measured parts of a run record: steady-state metrics and the profiled time breakdown.

Units as in :mod:`bench.records.record`: seconds, samples/s, tokens/s and TFLOP/s per GPU, MFU as
a fraction of the dense peak, memory in GB (10^9 bytes), profiled time in milliseconds per step.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from bench.config.schema import Count, NonNegative, Positive, Strict
from bench.records.parts import Fraction, Text


class Metrics(Strict):
    """Steady-state metrics over ``window_iters`` iterations after ``warmup_iters``.

    ``mfu`` is a fraction (0..1] of ``PlatformInfo.peak_tflops``; ``peak_mem_gb`` is the largest
    per-GPU allocation in GB, null when the platform cannot report it. ``mfu_bf16_peak`` is
    ``tflops_per_gpu`` over the accelerator's dense bf16 peak, for runs measured against another
    peak (fp8); null otherwise, and absent in records written before it existed.
    """

    warmup_iters: NonNegative
    window_iters: Count
    step_time_s_median: Positive
    step_time_s_p10: Positive
    step_time_s_p90: Positive
    samples_per_s: Positive
    tokens_per_s_per_gpu: Positive
    tflops_per_gpu: Positive
    mfu: Fraction
    flops_convention: Literal["megatron-causal"]
    tflops_per_gpu_noncausal: Positive | None
    mfu_noncausal: Fraction | None
    peak_mem_gb: Positive | None
    mfu_bf16_peak: Positive | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Metrics:
        if not self.step_time_s_p10 <= self.step_time_s_median <= self.step_time_s_p90:
            raise ValueError("step times must satisfy p10 <= median <= p90")
        return self


Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class KernelTime(Strict):
    """One of the kernels that took a profiled step's most time (bench.measure.profile.KernelTime):
    its name (cut), its class (``comm`` for communication), milliseconds per step, launches in all."""

    name: Text
    cls: Literal["gemm", "attention", "optimizer", "other", "comm"]
    ms: Milliseconds
    launches: Count


class HostOp(Strict):
    """One of the host ops that took a profiled step's most time (bench.measure.host_side.HostOp):
    its name (cut), its thread (the training loop's or autograd's), milliseconds per step, calls in all."""

    name: Text
    thread: Literal["loop", "backward"]
    ms: Milliseconds
    calls: Count


class HostProfile(Strict):
    """The host's side of the profiled steps (:mod:`bench.measure.host_side`), milliseconds per
    step: the training loop's thread and autograd's in their outermost ops, the kernel launch calls
    (``launches`` a step) and their time, the calls of ``torch.compile``'d code, the largest ops."""

    loop_ms: Milliseconds
    backward_ms: Milliseconds
    launches: NonNegative
    launch_ms: Milliseconds
    compiled_ms: Milliseconds
    largest: list[HostOp] = []


class Profile(Strict):
    """Where the profiled steps' time went (``--profile``; :mod:`bench.measure.profile`), in
    milliseconds per step: the six classes from ``gemm`` to ``idle`` add up to ``step_ms``;
    ``comm_total`` is all communication, hidden behind compute or not. ``steps`` are the profiled
    steps, after the measured window; ``source`` says whose trace (rank 0's); ``largest`` names the
    kernels that took the most time, ``host`` what the host did in those steps (each absent in
    records written before it existed)."""

    steps: Count
    step_ms: Positive
    gemm: Milliseconds
    attention: Milliseconds
    optimizer: Milliseconds
    other: Milliseconds
    comm_exposed: Milliseconds
    idle: Milliseconds
    comm_total: Milliseconds
    kernels: Count
    source: Text = "rank 0"
    largest: list[KernelTime] = []
    host: HostProfile | None = None
