"""bench.train.timing on CPU, without torch: what is counted, in which order, and the host clock.

The timer's logic (warm-up left out, marks read after one synchronization, the median, the mean of a
loop) does not depend on the clock, so a clock whose time moves only when the timed work says so
checks it exactly; :class:`HostClock` is checked against real sleeps. The CUDA clock runs in the
microbenchmarks themselves on the GPU machine.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from bench.train.timing import CudaClock, HostClock, clock_for, loop_seconds, median_seconds


class WorkClock:
    """Time moves only when work is done (``work(seconds)``); every call is written down in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def work(self, seconds: float) -> None:
        self.now += seconds
        self.calls.append("work")

    def mark(self) -> float:
        self.calls.append("mark")
        return self.now

    def synchronize(self) -> None:
        self.calls.append("sync")

    def seconds(self, start: float, end: float) -> float:
        assert self.calls[-1] == "sync", "a mark was read before the work was waited for"
        return end - start


def steps(clock: WorkClock, durations: list[float]):
    """A step that does the next duration's work each call."""
    left = iter(durations)
    return lambda: clock.work(next(left))


def test_the_median_leaves_the_warm_up_out() -> None:
    clock = WorkClock()
    # Two slow warm-up steps, then five timed ones: the median of 3, 1, 2, 5, 4 is 3.
    assert median_seconds(steps(clock, [100, 100, 3, 1, 2, 5, 4]), 2, 5, clock) == 3


def test_the_steps_run_back_to_back_and_are_waited_for_once() -> None:
    clock = WorkClock()
    median_seconds(steps(clock, [1, 1, 1, 1]), 1, 3, clock)
    assert clock.calls == ["work", *["mark", "work", "mark"] * 3, "sync"]


def test_the_median_of_an_even_count_is_the_middle_pair_s_mean() -> None:
    clock = WorkClock()
    assert median_seconds(steps(clock, [1, 2, 4, 8]), 0, 4, clock) == 3


def test_a_loop_is_lined_up_after_its_warm_up_and_timed_between_two_waits() -> None:
    clock = WorkClock()
    lined_up = []
    loop_seconds(steps(clock, [1, 1, 1, 1, 1]), 3, clock, warmup=2,
                 line_up=lambda: lined_up.append(list(clock.calls)))
    assert lined_up == [["work", "work", "sync"]]
    assert clock.calls == ["work", "work", "sync", "work", "work", "work", "sync"]


def test_a_loop_s_mean_is_by_the_host_clock() -> None:
    seconds = loop_seconds(lambda: time.sleep(0.01), 3, HostClock())
    assert 0.01 <= seconds < 0.5


def test_the_host_clock_times_a_step() -> None:
    assert 0.01 <= median_seconds(lambda: time.sleep(0.01), 1, 3, HostClock()) < 0.5


@pytest.mark.parametrize("timer", [lambda: median_seconds(lambda: None, 1, 0, HostClock()),
                                   lambda: loop_seconds(lambda: None, 0, HostClock())])
def test_no_timed_call_is_refused(timer) -> None:
    with pytest.raises(ValueError, match="iters must be at least 1, got 0"):
        timer()


def test_the_clock_follows_the_device() -> None:
    assert clock_for(SimpleNamespace(type="cpu")) == HostClock()
    cuda = SimpleNamespace(type="cuda")
    assert clock_for(cuda) == CudaClock(cuda)
