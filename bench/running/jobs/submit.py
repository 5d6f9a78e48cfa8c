"""Submit a plan: render its job script, create its run directory exclusively, hand it over.

The job runs in the directory the kit was started from (the *root*, which holds ``runs/``), as the
rendered scripts expect: their relative paths (data, ``runs/<run-id>/...``) are relative to it.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

from bench.planning.checks import missing_account
from bench.planning.plan import LaunchPlan
from bench.render.scripts import render_script
from bench.running.jobs.scheduler import Scheduler, scheduler_for
from bench.running.provenance import kit_commit
from bench.running.rundir import RunDir, create_run_dir


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_submittable(launch: LaunchPlan) -> Scheduler:
    """The plan's scheduler, after the checks that must pass before anything is written."""
    account = missing_account(launch.platform)  # a dry run shows a placeholder; a job cannot
    if account:
        raise ValueError(account)
    scheduler = scheduler_for(launch.platform.scheduler)
    if shutil.which(scheduler.submit_command) is None:
        raise ValueError(f"'{scheduler.submit_command}' is not on PATH: submit from a login node "
                         f"of {launch.platform.name}, or add --dry-run to print the script")
    return scheduler


def submit_plan(launch: LaunchPlan, root: Path, *, kind: str = "bench") -> RunDir:
    """Render, write ``root/runs/<run-id>/`` (never an existing one), submit; return the run.

    ``kind`` is ``bench`` (a benchmark that ``collect`` turns into a record) or ``check`` (a
    system check). If the scheduler refuses the job the run directory stays, with the script and a
    ``submit_error`` file, and :class:`~bench.running.jobs.scheduler.SchedulerError` is raised.
    """
    scheduler = check_submittable(launch)
    _check_image_file(launch, root)
    name, script = render_script(launch)
    run = RunDir(create_run_dir(root, launch, {name: script}).resolve())
    try:
        job_id, argv, output = scheduler.submit(run.path / name, run.path,
                                                root.resolve())
    except Exception as err:
        _write_new(run.path / "submit_error", f"{err}\n")
        raise
    _write_new(run.path / "job_id", job_id + "\n")
    _write_new(run.path / "submit.json", json.dumps({
        "kind": kind,
        "scheduler": scheduler.name,
        "argv": argv,
        "job_id": job_id,
        "output": str(output),
        "workdir": str(root.resolve()),
        "submitted_at": utc_now(),
        "kit_commit": kit_commit(),
    }, indent=2, sort_keys=True) + "\n")
    return run


def _check_image_file(launch: LaunchPlan, root: Path) -> None:
    """An image file named relative to the submit folder (LUMI's ``.sif``) must be there before the
    job waits in the queue; the job checks again on its node (absolute paths only there)."""
    image = launch.image
    if launch.platform.container_runtime != "singularity" or "://" in image or image.startswith("/"):
        return
    if not (root / image).is_file():
        raise ValueError(f"image file {image} is not in {root}, where the job runs: pull it there "
                         "with `nox -s pull -- rocm --runtime singularity` (docs/images.md), or "
                         "pass --image")


def _write_new(path: Path, text: str) -> None:
    with open(path, "x", encoding="utf-8") as handle:  # "x": a run's files are written once
        handle.write(text)
