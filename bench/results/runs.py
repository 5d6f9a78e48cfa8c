"""What the results page shows of a run beyond its record's fields: the platform label."""

from __future__ import annotations

from bench.records.record import Record

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
