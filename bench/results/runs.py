"""What the results page shows of a run beyond its record's fields: the platform label, and the
cause of a crash where the record's reason names only the launcher's error."""

from __future__ import annotations

from bench.measure.logparse import crash_cause
from bench.measure.status import Status
from bench.records.record import Record

LAUNCHER_ERROR = "ChildFailedError"  # torchrun's own exception: the cause is in the worker's lines

# Platforms that are whatever machine ran them: their rows also name the GPU.
MACHINE_PLATFORMS = ("local",)
_VENDORS = ("NVIDIA ", "AMD ")


def platform_label(platform: str, gpu_model: str | None) -> str:
    """``local · H200`` for a local run on an H200 (from the GPU name the driver reported); other
    platforms name their hardware already (``azure-h200``) and keep their name."""
    if platform not in MACHINE_PLATFORMS or not gpu_model:
        return platform
    gpu = next((gpu_model[len(v):] for v in _VENDORS if gpu_model.startswith(v)), gpu_model)
    return f"{platform} · {gpu.strip()}"


def label_of(run: Record) -> str:
    """:func:`platform_label` of a record."""
    return platform_label(run.platform.name, run.provenance.gpu_model)


def failure_reason(run: Record) -> str | None:
    """The record's reason; for a crash whose reason is torchrun's ``ChildFailedError`` (records
    written before the parser read the worker's lines), the cause found in its kept log lines."""
    reason = run.reason
    if run.status is not Status.CRASHED or not reason or LAUNCHER_ERROR not in reason:
        return reason
    cause = crash_cause([*run.log_errors, *run.log_tail])
    if not cause or LAUNCHER_ERROR in cause:
        return reason
    return f"{reason.split(':', 1)[0]}: {cause[:300]}"
