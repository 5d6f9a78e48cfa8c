"""The one timer of the kit's microbenchmarks (the smoke check's GEMMs and all-reduce, the FP8 linear,
the FP8 gradient reduction): a step's median time, or a loop's mean time, in seconds.

- :func:`median_seconds`: ``warmup`` untimed calls, then ``iters`` calls each between two marks of a
  :class:`Clock`, read after one synchronization at the end (as Triton's ``do_bench``): no wait falls
  between the steps, so a GPU-bound step is timed as it runs back to back.
- :func:`loop_seconds`: ``iters`` calls in a row by the host clock between two synchronizations,
  after an optional line-up of the ranks (a barrier): a collective's pace is its slowest rank's.

On a CUDA device the marks are CUDA events, which time the GPU's stream: a call returns when its
kernels are queued, not when they end. Elsewhere they are the host's ``time.perf_counter``, which
lets the counting run, and be tested, on a CPU. torch is imported only by :class:`CudaClock`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Clock(Protocol):
    def mark(self) -> Any:
        """A point in the order of the work queued so far."""
        ...

    def synchronize(self) -> None:
        """Wait until the work queued so far is done."""
        ...

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds between two marks, once :meth:`synchronize` has passed the later one."""
        ...


@dataclass(frozen=True)
class HostClock:
    """The host's monotonic clock, for work that is done when its call returns (CPU tensors)."""

    def mark(self) -> float:
        return time.perf_counter()

    def synchronize(self) -> None:
        pass

    def seconds(self, start: float, end: float) -> float:
        return end - start


@dataclass(frozen=True)
class CudaClock:
    """CUDA events on the current stream of ``device`` (default: the current device)."""

    device: Any = None

    def mark(self) -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # CUDA events count milliseconds


def clock_for(device: Any) -> Clock:
    """The clock of a ``torch.device``: CUDA events on ``cuda``, the host clock elsewhere."""
    return CudaClock(device) if device.type == "cuda" else HostClock()


def median_seconds(step: Callable[[], object], warmup: int, iters: int,
                   clock: Clock | None = None) -> float:
    """The median seconds of ``iters`` calls of ``step``, each timed alone, after ``warmup`` untimed
    calls. The default clock is :class:`CudaClock` on the current device."""
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    clock = clock or CudaClock()
    for _ in range(warmup):
        step()
    marks = []
    for _ in range(iters):
        start = clock.mark()
        step()
        marks.append((start, clock.mark()))
    clock.synchronize()
    return statistics.median(clock.seconds(start, end) for start, end in marks)


def loop_seconds(call: Callable[[], object], iters: int, clock: Clock, *, warmup: int = 0,
                 line_up: Callable[[], object] | None = None) -> float:
    """The mean seconds a call of ``iters`` calls in a row, by the host clock from the moment the
    queued work is done and ``line_up`` (a barrier of the ranks) has returned, after ``warmup``
    untimed calls."""
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    for _ in range(warmup):
        call()
    clock.synchronize()
    if line_up is not None:
        line_up()
    started = time.perf_counter()
    for _ in range(iters):
        call()
    clock.synchronize()
    return (time.perf_counter() - started) / iters
