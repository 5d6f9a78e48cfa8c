"""Collect finished benchmark runs into records (``results/records/<run-id>.json``).

Idempotent: a run whose record exists is skipped without asking the scheduler, a run still queued
or running is left for a later collect, and records are never rewritten. System-check runs make no
record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.config.tomlfile import DataError
from bench.records.build import build_run_record
from bench.records.evidence import LogFile, keep_log
from bench.records.record import Record
from bench.records.store import RecordExistsError, record_path, write_record
from bench.running.jobs.outcome import Outcome, judge
from bench.running.jobs.scheduler import Scheduler, SchedulerError, scheduler_for
from bench.running.provenance import image_digest_from_output
from bench.running.rundir import RunDir, list_runs


@dataclass(frozen=True)
class Collected:
    """What collect did with one run: ``action`` is ``recorded``, ``exists``, ``running`` or
    ``unreadable`` (its ``plan.json`` does not validate; ``reason`` says why)."""

    run_id: str
    action: str
    status: str | None = None
    reason: str | None = None


def record_exists(records_dir: Path, run_id: str) -> bool:
    return record_path(records_dir, run_id).exists()


def record_of(run: RunDir, outcome: Outcome, kept: tuple[LogFile | None, str | None] = (None, None)) -> Record:
    """The validated record of a finished run, from its plan.json, submission and outcome;
    ``kept``: its train log as kept beside the records, or why not (:func:`keep_log`).

    Provenance is what the kit knows here: the kit commit that submitted the run, its image, and
    the image digest the job printed before launch (null where it printed none, or no digest).
    The scheduler's node list goes into the notes (``nodelist``), not into ``hostname``.
    """
    state = outcome.state
    notes: dict[str, str | int | None] = {
        "job_id": run.job_id,
        "scheduler": run.submission["scheduler"],
        "scheduler_state": state.state if state else None,
        "exit_status": outcome.exit_status,
        "nodelist": state.nodes if state else None,
        **({"log": kept[1]} if kept[1] else {}),
    }
    plan = run.plan
    provenance = {"kit_commit": run.submission["kit_commit"], "image": plan.image or None,
                  **image_digest_from_output(outcome.log_text)}
    return build_run_record(plan, outcome.status, outcome.reason, outcome.started_at,
                            outcome.finished_at, outcome.parsed, outcome.log_text, provenance,
                            notes, log=kept[0])


def collect_run(run: RunDir, records_dir: Path, scheduler: Scheduler) -> Collected:
    if record_exists(records_dir, run.run_id):
        return Collected(run.run_id, "exists")
    outcome = judge(run, scheduler)
    if not outcome.finished:
        return Collected(run.run_id, "running", outcome.status, outcome.reason)
    try:
        record = record_of(run, outcome, keep_log(records_dir, run.run_id, outcome.log_text))
        write_record(records_dir, record)
    except RecordExistsError:  # another collect got there first
        return Collected(run.run_id, "exists")
    # The record's status, not the log's: metrics that fail the record's checks make it failed.
    return Collected(run.run_id, "recorded", record.status.value, record.reason)


def collect(root: Path, records_dir: Path) -> list[Collected]:
    """Record every finished benchmark run under ``root/runs``; see the module docstring. A run
    folder this kit cannot read (a tampered plan.json or submit.json) is ``unreadable``, and
    the others are still collected."""
    done = []
    for run in list_runs(root):
        try:
            if run.kind not in ("bench", "check"):
                raise ValueError(f"its submit.json names the kind {str(run.kind)[:80]!r}, "
                                 "neither bench nor check")
            if run.kind == "bench":
                done.append(collect_run(run, records_dir, scheduler_for(run.submission["scheduler"])))
        except SchedulerError:  # the scheduler itself failed (not on the login node): for all
            raise
        except Exception as error:  # the folder's files are foreign data: any fault is its own
            done.append(Collected(run.run_id, "unreadable", None, why_unreadable(error)))
    return done


def why_unreadable(error: Exception) -> str:
    """What was wrong with a run folder, in words: a KeyError or a TypeError says little alone."""
    run_files = "its plan.json, submit.json or state.json"
    if isinstance(error, (DataError, OSError)):
        return str(error)
    if isinstance(error, ValueError) and not isinstance(error, UnicodeError):
        return f"{run_files}: {error}"
    return f"{run_files} are not as the kit writes them ({type(error).__name__}: {error})"
