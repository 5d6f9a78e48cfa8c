"""Load run records for the results page: validated by ``bench.record``, spread over CPU cores.

Validation is the cost of regenerating the page (about 0.15 ms per record on one core), so with
many records the files are split into contiguous chunks that forked workers load with
:func:`bench.record.load_record` (the one schema check). Workers send back :class:`Run`, the part
of a record the page shows, because a record's read-only mappings cannot be pickled. Chunks come
back in file-name order, so the result is the same as loading them one by one.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.capabilities import layers_of
from bench.record import (
    JsonScalar,
    LayoutInfo,
    Metrics,
    PlatformInfo,
    PresetInfo,
    Problem,
    Record,
    RecordError,
    Status,
    load_record,
)

# Below this many files one process is faster than starting workers (about 30 ms).
PARALLEL_MIN_FILES = 400
_TEMP_SUFFIX = ".tmp"
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


@dataclass(frozen=True)
class Run:
    """What the results page uses of one record (no argv, env, provenance or log tail)."""

    run_id: str
    status: Status
    reason: str | None
    started_at: str
    engine: str
    precision: str
    preset: PresetInfo
    layout: LayoutInfo
    platform: PlatformInfo
    nodes: int
    gpus: int
    metrics: Metrics | None
    notes: Mapping[str, JsonScalar]
    platform_label: str  # what the page shows: the platform, and a local run's GPU
    layers: str = ""  # Megatron engine: TE+apex, TE or no TE (bench.capabilities.layers_of)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @classmethod
    def of(cls, record: Record) -> Run:
        return cls(
            run_id=record.run_id, status=record.status, reason=record.reason,
            started_at=record.started_at, engine=record.engine, precision=record.precision,
            preset=record.preset, layout=record.layout, platform=record.platform,
            nodes=record.nodes, gpus=record.gpus, metrics=record.metrics,
            notes=dict(record.notes),
            platform_label=platform_label(record.platform.name, record.provenance.gpu_model),
            layers=layers_of(record.argv),
        )  # fmt: skip


def _load_one(path: str) -> Run | Problem:
    try:
        return Run.of(load_record(path))
    except RecordError as error:
        return Problem(os.path.basename(path), "; ".join(error.problems))
    except OSError as error:
        return Problem(os.path.basename(path), f"cannot read ({error.strerror or error})")


def _load_chunk(paths: Sequence[str]) -> list[Run | Problem]:
    # The loaded records hold no reference cycles, so the cyclic garbage collector would only
    # walk the growing list of them again and again (about a third of the load time).
    paused = gc.isenabled()
    gc.disable()
    try:
        return [_load_one(path) for path in paths]
    finally:
        if paused:
            gc.enable()


def _default_workers(count: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if count < PARALLEL_MIN_FILES:
        return 1
    return max(1, min(cores or 1, count // (PARALLEL_MIN_FILES // 2)))


def load_runs(
    records_dir: Path | str, workers: int | None = None
) -> tuple[list[Run], list[Problem]]:
    """Every valid record in ``records_dir`` (file-name order) and every skipped file.

    Same rules as :func:`bench.record.load_records`: a missing directory holds no records;
    ``*.json`` files that do not validate and leftover temporary files of an interrupted write
    are problems; other files are ignored. ``workers`` defaults to one process per core from
    ``PARALLEL_MIN_FILES`` files on, else one; without ``fork`` it is always one (other start
    methods import everything again, which costs more than they save).
    """
    directory = Path(records_dir)
    if not directory.is_dir():
        return [], []
    problems: list[Problem] = []
    paths = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(".") and name.endswith(_TEMP_SUFFIX):
            problems.append(
                Problem(name, "leftover temporary file of an interrupted write; delete it")
            )
        elif name.endswith(".json") and not name.startswith("."):
            paths.append(os.path.join(directory, name))
    if workers is None:
        workers = _default_workers(len(paths))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        loaded = _load_chunk(paths)
    else:
        # A few chunks per worker, so one slow chunk does not leave a core idle at the end.
        size = -(-len(paths) // (workers * 4))
        chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            loaded = [item for chunk in pool.map(_load_chunk, chunks) for item in chunk]
    runs = [item for item in loaded if isinstance(item, Run)]
    problems += [item for item in loaded if isinstance(item, Problem)]
    problems.sort(key=lambda p: p.file)
    return runs, problems
