"""Judge a run: is it finished, and did it succeed? Never from the exit code alone.

Evidence, strongest first: the scheduler's terminal state (live, or the last one saved in
``state.json``), the job's own output (``slurmstepd`` cancel lines, out-of-memory lines, PBS kill
lines, the kit's end marker with the script's exit status) and, for a benchmark that ended cleanly,
the benchmark log parser. A job whose output file is missing failed, whatever the scheduler says:
on a misconfigured node a job step that could not start still reports ``COMPLETED``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from bench.measure.logparse import ParseResult, log_lines, parse_log
from bench.render.common import END_MARKER
from bench.running.jobs.scheduler import Scheduler
from bench.running.jobstate import FAILED_STATES, JobState
from bench.running.rundir import RunDir

# slurmstepd: "*** JOB 12 ON vm CANCELLED AT 2026-11-21T20:16:34 DUE TO TIME LIMIT ***"
# (a plain `scancel` ends after the time stamp).
SLURM_CANCELLED = re.compile(
    r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<cause>[A-Z ]+?))?(?: \*\*\*|$)",
    re.MULTILINE,
)
_SLURM_CANCEL_CAUSES = {"TIME LIMIT": "TIMEOUT", "NODE FAILURE": "NODE_FAIL",
                        "PREEMPTION": "PREEMPTED", None: "CANCELLED"}
# slurmstepd with cgroup memory enforcement: "Detected 1 oom_kill event in StepId=12.0 ..."
SLURM_OOM_KILL = re.compile(r"Detected \d+ oom[-_]kill events?.*$", re.MULTILINE)
# PBS: "=>> PBS: job killed: walltime 3610 exceeded limit 3600" (or mem ... exceeded limit).
PBS_JOB_KILLED = re.compile(r"PBS: job killed: (?P<what>\w+) .*exceeded limit.*$", re.MULTILINE)
# The rendered scripts' last line: "BENCH_END status=<launcher exit status>".
END_MARKER_LINE = re.compile(re.escape(END_MARKER) + r"(?P<status>\d+)")


@dataclass(frozen=True)
class Outcome:
    """What the kit concludes about a run.

    ``status`` is a record status (``ok``, ``incomplete``, ``oom``, ``nan``, ``timeout``,
    ``crashed`` from the log parser, ``failed`` from the scheduler or the output) or ``running``
    while the job is not finished. ``reason`` is ``None`` only for ``ok``. Times are UTC ISO 8601:
    the scheduler's start and end, else the submit time and the output file's last change.
    """

    run_id: str
    finished: bool
    status: str
    reason: str | None
    state: JobState | None
    exit_status: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    log_text: str = ""  # the job's output
    parsed: ParseResult | None = None


def current_state(run: RunDir, scheduler: Scheduler) -> tuple[JobState | None, bool]:
    """The job's state and whether it is the scheduler's live answer.

    A saved terminal state is final and needs no query (so finished runs can be judged away from
    the cluster); a live answer is saved in ``state.json``; a job the scheduler forgot gets the
    last saved state.
    """
    saved = run.last_state()
    if saved is not None and saved.terminal:
        return saved, False
    live = scheduler.query(run.job_id)
    if live is None:
        return saved, False
    run.save_state(live)
    return live, True


def output_verdict(text: str) -> tuple[str | None, str | None]:
    """A Slurm state name and the evidence line if the output shows the job did not end well."""
    cancelled = SLURM_CANCELLED.search(text)
    if cancelled:
        return _SLURM_CANCEL_CAUSES.get(cancelled.group("cause"), "CANCELLED"), \
            cancelled.group(0).strip()
    oom = SLURM_OOM_KILL.search(text)
    if oom:
        return "OUT_OF_MEMORY", oom.group(0).strip()
    killed = PBS_JOB_KILLED.search(text)
    if killed:
        return ("TIMEOUT" if killed.group("what") == "walltime" else "OUT_OF_MEMORY"), \
            killed.group(0).strip()
    end = END_MARKER_LINE.search(text)
    if end is None:
        return "FAILED", (f"the job script never reached its end (no '{END_MARKER}' line): "
                          f"killed by the scheduler or the node")
    if int(end.group("status")) != 0:
        error = _last_error(text)
        return "FAILED", f"the job script exited with status {end.group('status')}" + (
            f"; last error: {error}" if error else "")
    return None, None


# A line naming a Python exception ("RuntimeError: ...", "... (ModuleNotFoundError: ...)"), not
# the launcher's own "srun: error: ..." lines. Matched line by line on bounded lines (``log_lines``),
# with nothing before the error word but one ".*": linear in the line's length.
PYTHON_ERROR_LINE = re.compile(r"^(?!srun|slurmstepd).*(?:Error|Exception)\b")
ERROR_LINE_CHARS = 300
"""A failure reason quotes at most this many characters of the error line. The default is 300."""


def _last_error(text: str) -> str | None:
    """The last line of the output naming a Python exception (shortened), if any."""
    found = [line for line in log_lines(text) if PYTHON_ERROR_LINE.match(line)]
    return found[-1].strip()[:ERROR_LINE_CHARS] if found else None


def _utc_from_scheduler(text: str | None) -> str | None:
    # Slurm prints the controller's local time without a zone; read it as this host's local time.
    if not text:
        return None
    try:
        local = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return local.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc_mtime(path: Path) -> str:
    stamp = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_benchmark_log(text: str, exit_status: int | None) -> ParseResult:
    """The benchmark log parser's verdict on a job that ended cleanly; the one call into it."""
    return parse_log(text, timed_out=False, exit_code=exit_status)


def judge(run: RunDir, scheduler: Scheduler) -> Outcome:
    """The outcome of ``run``; ``finished`` is False while the scheduler still runs it."""
    state, known = current_state(run, scheduler)
    if known and state is not None and not state.terminal:
        return Outcome(run.run_id, False, "running", state.state, state)

    scheduler_state = state.state if state is not None and state.terminal else None
    started_at = (_utc_from_scheduler(state and state.start_time)
                  or run.submission["submitted_at"])
    finished_at = _utc_from_scheduler(state and state.end_time)
    text = run.read_output()
    if text is None:
        said = scheduler_state or "the scheduler no longer knows the job"
        return Outcome(run.run_id, True, "failed",
                       f"{scheduler_state or 'FAILED'}: output file {run.output} is missing "
                       f"({said}; a job that never started can still report success)", state,
                       started_at=started_at, finished_at=finished_at)

    end = END_MARKER_LINE.search(text)
    exit_status = int(end.group("status")) if end else None
    common = {"state": state, "exit_status": exit_status, "started_at": started_at,
              "finished_at": finished_at or _utc_mtime(run.output),
              "log_text": text}

    out_state, evidence = output_verdict(text)
    if scheduler_state in FAILED_STATES:
        detail = evidence or state.reason or f"exit code {state.exit_code}"  # type: ignore[union-attr]
        return Outcome(run.run_id, True, "failed", f"{scheduler_state}: {detail}", **common)
    if out_state is not None:
        said = f" (the scheduler said {scheduler_state})" if scheduler_state else ""
        return Outcome(run.run_id, True, "failed", f"{out_state}: {evidence}{said}", **common)
    if run.kind != "bench":
        return Outcome(run.run_id, True, "ok", None, **common)

    parsed = parse_benchmark_log(text, exit_status)
    return Outcome(run.run_id, True, parsed.status.value, parsed.reason, parsed=parsed, **common)
