"""Submit a job script and keep everything about it in a new run directory.

The job script gets two kit lines right after its directive block: a start marker and an EXIT trap
that prints an end marker with the script's exit status. They let :mod:`bench.jobs.outcome` judge a
job after the scheduler has forgotten it. The script must not ``exec`` its launcher (that would drop
the trap); a job killed by SIGKILL prints no end marker, which the kit reads as "did not finish".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
from pathlib import Path

from bench.jobs.rundir import RunDir
from bench.jobs.scheduler import Scheduler

START_MARKER = "bench-job: start"
END_MARKER = "bench-job: end"
_MARKER_LINES = (
    "# bench.jobs markers: the kit reads them when the scheduler has forgotten this job",
    f'echo "{START_MARKER} at=$(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname)"',
    f"trap 'echo \"{END_MARKER} exit_status=$? at=$(date -u +%Y-%m-%dT%H:%M:%SZ)\"' EXIT",
)


def with_markers(script: str) -> str:
    """``script`` with the start/end marker lines after its leading comment/directive block.

    Scheduler directives are only read before the first command, so the lines go after the last
    leading ``#`` or blank line. A script that already has them is returned unchanged.
    """
    if END_MARKER in script:
        return script
    lines = script.splitlines()
    insert_at = 0
    while insert_at < len(lines) and (
        not lines[insert_at].strip() or lines[insert_at].lstrip().startswith("#")
    ):
        insert_at += 1
    return "\n".join([*lines[:insert_at], *_MARKER_LINES, *lines[insert_at:]]) + "\n"


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def kit_commit() -> str | None:
    """The kit's git commit (``None`` outside a git checkout)."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent)
    return done.stdout.strip() if done.returncode == 0 else None


def plan_to_json(plan: object) -> dict:
    """A launch plan (a frozen dataclass, possibly nested) as JSON-ready data."""
    return dataclasses.asdict(plan)  # type: ignore[call-overload]


def submit_script(
    runs_dir: Path,
    run_id: str,
    script: str,
    scheduler: Scheduler,
    *,
    kind: str = "bench",
    plan: dict | None = None,
) -> RunDir:
    """Create ``runs_dir/run_id`` exclusively, write the script and plan, submit, keep the job id.

    ``kind`` is ``bench`` (a benchmark run that ``collect`` turns into a record) or ``check``
    (a system check). Raises ``ValueError`` if the run directory exists and
    :class:`~bench.jobs.scheduler.SchedulerError` if the scheduler refuses the job; in that case the
    run directory stays, with the script and a ``submit_error`` file, so the failure can be read.
    """
    run = RunDir.create(runs_dir, run_id)
    script_path = run.write_new(scheduler.script_name, with_markers(script))
    if plan is not None:
        run.write_json_new("plan.json", plan)
    try:
        job_id, argv = scheduler.submit(script_path, run.output, run.path)
    except Exception as err:
        run.write_new("submit_error", f"{err}\n")
        raise
    run.write_new("job_id", job_id + "\n")
    run.write_json_new("submit.json", {
        "kind": kind,
        "scheduler": scheduler.name,
        "argv": argv,
        "job_id": job_id,
        "output": str(run.output),
        "submitted_at": utc_now(),
        "kit_commit": kit_commit(),
    })
    return run
