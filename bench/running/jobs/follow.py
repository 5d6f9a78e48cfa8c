"""Follow a submitted run: its queue state, then its training progress, until it ends."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from bench.config.run_options import POLL_S  # seconds between scheduler queries
from bench.measure.logparse import parse_iteration
from bench.running.jobs.outcome import Outcome, judge
from bench.running.jobs.scheduler import Scheduler, SchedulerError
from bench.running.jobstate import JobState
from bench.running.rundir import RunDir

POLL_RANGE_S = (0.5, 3600.0)
"""The ``--poll`` a user may give, seconds: faster hammers the scheduler's controller (0 would
query it in a busy loop), slower is no longer following."""
QUERY_RETRIES = 5
"""Failed scheduler queries in a row tolerated while following (a busy controller). Default 5."""

# Lines worth showing live besides progress: kit markers, scheduler kills, errors.
NOTEWORTHY_LINE = re.compile(
    r"BENCH_END|\*\*\*|Traceback|Error|error:|CUDA out of memory|\bnan\b|exceeded limit")


def check_poll(poll_s: float) -> None:
    """A ValueError unless ``poll_s`` is in :data:`POLL_RANGE_S`: said before a job is submitted,
    not when following it starts."""
    low, high = POLL_RANGE_S
    if not low <= poll_s <= high:  # nan fails both comparisons
        raise ValueError(f"--poll must be {low:g} to {high:g} seconds, got {poll_s}")


def describe(state: JobState) -> str:
    """One line about a job state, e.g. ``job 12 RUNNING on vm, 0:00:54 elapsed``."""
    parts = [f"job {state.job_id} {state.state}"]
    if state.reason and state.reason != "None":
        parts.append(f"({state.reason})")
    if state.nodes and state.state != "PENDING":
        parts.append(f"on {state.nodes}")
    if state.elapsed_s:
        parts.append(f"{state.elapsed_s // 3600}:{state.elapsed_s // 60 % 60:02d}:"
                     f"{state.elapsed_s % 60:02d} elapsed")
    return " ".join(parts)


def progress(line: str) -> str | None:
    """A short line for a training log's iteration line, e.g.
    ``iteration 12/30: 5412 ms, 478.1 TFLOP/s/GPU (engine's count), loss 9.871``; else None."""
    it = parse_iteration(line)
    if it is None:
        return None
    parts = [f"{it.elapsed_ms:.0f} ms"]
    if it.tflops_per_gpu is not None:
        parts.append(f"{it.tflops_per_gpu:.1f} TFLOP/s/GPU (engine's count)")
    if it.lm_loss is not None:
        parts.append(f"loss {it.lm_loss:.3f}")
    return f"iteration {it.index}/{it.total}: " + ", ".join(parts)


class _OutputTail:
    """Yields the complete lines appended to a growing file since the last call."""

    def __init__(self, run: RunDir) -> None:
        self._run = run
        self._offset = 0
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            with open(self._run.output, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]


def follow(
    run: RunDir,
    scheduler: Scheduler,
    *,
    poll_s: float = POLL_S,
    max_wait_s: float | None = None,
    echo: Callable[[str], None] = print,
    show_all_output: bool = False,
) -> Outcome:
    """Print state changes and progress lines of ``run`` until its job ends; return its outcome.

    ``poll_s`` is seconds between scheduler queries (default :data:`POLL_S`). ``max_wait_s``
    (seconds, default unlimited) raises ``TimeoutError`` if the job is still not done by then; the
    job itself keeps running. With ``show_all_output`` every output line is echoed, not only
    Megatron iteration lines and noteworthy ones.
    """
    deadline = None if max_wait_s is None else time.monotonic() + max_wait_s
    tail = _OutputTail(run)
    last_seen: str | None = None
    failures = 0
    while True:
        try:
            live = scheduler.query(run.job_id)
            failures = 0
        except SchedulerError as err:
            failures += 1
            if failures > QUERY_RETRIES:
                raise
            echo(f"warning: {err}; asking again in {poll_s} s")
            time.sleep(poll_s)
            continue
        if live is not None:
            run.save_state(live)
            summary = f"{live.state} {live.reason}"
            if summary != last_seen:
                echo(describe(live))
                last_seen = summary
        for line in tail.new_lines():
            step = None if show_all_output else progress(line)
            if step:
                echo(f"  {step}")
            elif show_all_output or NOTEWORTHY_LINE.search(line):
                echo(f"  | {line}")
        if live is None or live.terminal:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                f"job {run.job_id} of run {run.run_id} still {live.state} after {max_wait_s} s; "
                f"it keeps running: follow it again with `python -m bench jobs`")
        time.sleep(poll_s)
    for line in tail.new_lines():
        if show_all_output or NOTEWORTHY_LINE.search(line):
            echo(f"  | {line}")
    outcome = judge(run, scheduler)
    echo(f"run {run.run_id}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    return outcome
