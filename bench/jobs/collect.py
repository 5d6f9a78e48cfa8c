"""Collect finished benchmark runs into records (``results/records/<run-id>.json``).

Idempotent: a run whose record exists is skipped without asking the scheduler, a run still queued
or running is left for a later collect, and records are never rewritten. System-check runs make no
record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.jobs.outcome import Outcome, judge
from bench.jobs.rundir import RunDir, list_runs
from bench.jobs.scheduler import Scheduler, scheduler_for
from bench.platforms import load_accelerator, peak_format
from bench.presets import Preset
from bench.protocol import ShortWindow, metrics
from bench.record import (
    Record,
    RecordExistsError,
    Status,
    build_finished_record,
    record_path,
    write_record,
)

RECORDS_DIR = Path("results") / "records"
"""Where records go, relative to the root. The default is ``results/records``."""

_PRESET_KEYS = ("name", "layers", "hidden", "heads", "seq_length", "vocab_size")
_LAYOUT_KEYS = ("name", "tp", "pp", "dp", "vp", "cp", "sp", "zero", "micro_batch",
                "global_batch")


@dataclass(frozen=True)
class Collected:
    """What collect did with one run: ``action`` is ``recorded``, ``exists`` or ``running``."""

    run_id: str
    action: str
    status: str | None = None
    reason: str | None = None


def _status_and_metrics(plan: dict, outcome: Outcome, peak_tflops: float,
                        bf16_peak_tflops: float | None) -> tuple[str, str | None, dict | None]:
    """Status, reason and the protocol's steady-state metrics (only ok runs have metrics)."""
    parsed = outcome.parsed
    if outcome.status != Status.OK or parsed is None:
        return outcome.status, outcome.reason, None
    try:
        return outcome.status, None, metrics(
            parsed.iterations, Preset(**plan["preset"]), plan["layout"]["global_batch"],
            plan["world_size"], peak_tflops, parsed.peak_mem_gb, bf16_peak_tflops)
    except ShortWindow as err:  # too few iterations for the measurement window
        return Status.INCOMPLETE.value, str(err), None
    except ValueError as err:  # timings that are not measurements (zero step time)
        return Status.FAILED.value, str(err), None


def record_exists(records_dir: Path, run_id: str) -> bool:
    return record_path(records_dir, run_id).exists()


def build_run_record(run: RunDir, outcome: Outcome) -> Record:
    """The validated record of a finished run, from its plan.json, submission and outcome;
    implausible metrics make it a failed record (:func:`bench.record.build_finished_record`)."""
    plan = run.plan
    accelerator = load_accelerator(plan["accelerator"])
    peak = accelerator.peak(plan["precision"])
    bf16_peak = (None if peak_format(plan["precision"]) == "bf16"
                 else accelerator.peak_tflops.get("bf16"))
    status, reason, run_metrics = _status_and_metrics(plan, outcome, peak, bf16_peak)
    state = outcome.state
    notes: dict[str, str | int | None] = {
        **plan.get("variant", {}),
        **plan.get("labels", {}),  # sweep, repeat group, campaign
        "job_id": run.job_id,
        "scheduler": run.submission["scheduler"],
        "scheduler_state": state.state if state else None,
        "exit_status": outcome.exit_status,
    }
    return build_finished_record(
        failure_log_tail=outcome.log_tail,
        run_id=run.run_id,
        status=status,
        reason=reason,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        engine=plan["engine"],
        precision=plan["precision"],
        preset={key: plan["preset"][key] for key in _PRESET_KEYS},
        layout={key: plan["layout"][key] for key in _LAYOUT_KEYS},
        platform={"name": plan["platform"], "accelerator": accelerator.name,
                  "peak_tflops": peak,
                  "peak_source": accelerator.peak_source},
        nodes=plan["nodes"],
        gpus=plan["world_size"],
        argv=plan["train_argv"],
        env=plan["env"],
        provenance={"kit_commit": run.submission["kit_commit"], "image": plan["image"] or None,
                    "hostname": state.nodes if state else None},
        metrics=run_metrics,
        log_tail=list(outcome.log_tail) if status != Status.OK else [],
        notes=notes,
    )


def collect_run(run: RunDir, records_dir: Path, scheduler: Scheduler) -> Collected:
    if record_exists(records_dir, run.run_id):
        return Collected(run.run_id, "exists")
    outcome = judge(run, scheduler)
    if not outcome.finished:
        return Collected(run.run_id, "running", outcome.status, outcome.reason)
    try:
        write_record(records_dir, build_run_record(run, outcome))
    except RecordExistsError:  # another collect got there first
        return Collected(run.run_id, "exists")
    return Collected(run.run_id, "recorded", outcome.status, outcome.reason)


def collect(root: Path, records_dir: Path) -> list[Collected]:
    """Record every finished benchmark run under ``root/runs``; see the module docstring."""
    return [collect_run(run, records_dir, scheduler_for(run.submission["scheduler"]))
            for run in list_runs(root) if run.kind == "bench"]
