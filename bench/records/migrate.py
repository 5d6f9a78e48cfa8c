"""Records of older shapes, read as today's: one function per change of the record, in order.

A record names its schema, ``bench.record/<n>``. One of an older version is upgraded as it is read
(:func:`upgrade`, on the decoded JSON, before the schema validates it); the file is never
rewritten, since records are append-only. ``bench.record/1`` changed three times without a new
name, so each of its functions tells its shape from the keys a record holds and leaves a record of
a later shape as it is:

1. :func:`notes_by_kind` (records before kit 6fdfc48): everything in ``notes``; the variant, the
   engine's notes and the labels are sorted out of it.
2. :func:`facts_from_argv` (before c1a456b): no ``implementation``, ``data`` or ``patches``; read
   back from the argv and the ``patch_series`` engine note.
3. :func:`msamp_scaling_explicit` (before 381a0ad): an MS-AMP run's FP8 scaling only in its
   environment, or not at all where it ran a kit that scaled delayed by default
   (:data:`DELAYED_WITHOUT_ENV`); it becomes a variant against ``bench.record/2``'s default.

``bench.record/2`` to ``bench.record/3``: :func:`older_code_explicit`, a run whose variant ran
other code than today's kit runs for it gets the setting that code was (:data:`CODE_CHANGES`):
``paper_adam = "chunked"`` for ``optimizer_states = "paper-kit"`` before kit 74d8988.

A ``bench.record/3`` record holds every field of the schema, its variant against the defaults of
its version and naming the code it ran where that is not today's. To change the record again: add
the field to ``Record`` with a default where an older record can do without it (nothing to
migrate), or else raise ``SCHEMA`` to ``bench.record/4``, write a function here that takes a
``bench.record/3`` record (a dict) and returns it in the new shape, and add
``("bench.record/3", (that_function,))`` to :data:`STEPS`, with a fixture of a real record of the
old shape in ``tests/fixtures/records/migrate/`` (``tests/records/test_migrate.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from bench.config.capabilities import layers_of
from bench.config.precisions import MSAMP_PRECISIONS, MSAMP_SCALING_ENV

Data = dict[str, Any]
Upgrade = Callable[[Data], Data]

# Notes kinds of records before kit 6fdfc48: these keys go to ``labels`` and ``engine_notes``, the
# kit's bookkeeping keys stay, and the rest were settings.
OLD_LABELS = frozenset({"sweep", "sweep_id", "repeat_group", "campaign"})
OLD_ENGINE_NOTES = frozenset({"engine_tflops_per_gpu", "engine_flops", "flops_counted",
                              "hardware_tflops_per_gpu", "zero_stage", "deepspeed", "patch_series",
                              "apex"})
OLD_BOOKKEEPING = frozenset({"comment", "job_id", "scheduler", "scheduler_state", "exit_status",
                             "nodelist"})
REJECTED_METRICS_PREFIX = "metrics."  # notes of a run's implausible metrics: bookkeeping too
# What built a Megatron-engine run's layers, by :func:`bench.config.capabilities.layers_of`.
OLD_LAYERS: dict[str, str | None] = {"TE+apex": "te+apex", "TE": "te", "no TE": "local", "": None}
# Kit commits whose MS-AMP scaled delayed by default (patch 0008) before runs recorded
# MSAMP_FP8_SCALING: c96d05d up to the --msamp-scaling option. Runs of earlier commits scaled in time.
DELAYED_WITHOUT_ENV = frozenset({"c96d05d7bdcb", "4ced49419afe", "86553d5548e2", "6be5d1e66e21",
                                 "15e5646696af", "1ec5ff35fcf0", "a4b1b78f1e0d"})
MSAMP_SCALING_DEFAULT = "in-time"  # the default of bench.record/2 and /3, which variants are against
SCALING_KEY = "msamp_scaling"
# Kit changes after which a variant runs other code, as (variant key, value, the new code's first
# start time, the setting a run that started before it gets): bench.record/2 records did not say
# it, bench.record/3 records carry it in their variant, so the two runs are other configurations.
CODE_CHANGES = (
    # Kit 74d8988: PaperAdamW steps with its Triton kernel, where it had a chunked torch step.
    ("optimizer_states", "paper-kit", "2026-11-26T11:27:50Z", ("paper_adam", "chunked")),
)


def notes_by_kind(record: Data) -> Data:
    """A record whose ``notes`` held everything: its notes sorted into ``variant``,
    ``engine_notes``, ``labels`` and the kit's bookkeeping (``notes``)."""
    notes = record.get("notes")
    if {"variant", "engine_notes", "labels"} & record.keys() or not isinstance(notes, dict) or not notes:
        return record
    kinds: dict[str, Data] = {"notes": {}, "variant": {}, "engine_notes": {}, "labels": {}}
    for key, value in notes.items():
        kinds[_kind(key)][key] = value
    return {**record, **kinds}


def _kind(key: str) -> str:
    if key in OLD_LABELS:
        return "labels"
    if key in OLD_ENGINE_NOTES:
        return "engine_notes"
    if key in OLD_BOOKKEEPING or key.startswith(REJECTED_METRICS_PREFIX):
        return "notes"
    return "variant"


def facts_from_argv(record: Data) -> Data:
    """A record without ``implementation``, ``data`` or ``patches``: what built the layers and
    the data prefix read from its argv, the patch series from its ``patch_series`` engine note."""
    argv = record.get("argv")
    if not isinstance(argv, list | tuple) or not all(isinstance(arg, str) for arg in argv):
        return record  # not an argv: the schema names the problem
    notes = record.get("engine_notes")
    series = notes.get("patch_series") if isinstance(notes, dict) else None
    layers = layers_of(argv) if "--transformer-impl" in argv[:-1] else ""
    found = {"implementation": OLD_LAYERS[layers], "data": data_fields(_flag_value(argv, "--data-path")),
             "patches": _patch_series(series)}
    return {**{name: value for name, value in found.items() if name not in record}, **record}


def _flag_value(argv: Sequence[str], flag: str) -> str:
    """The value after ``flag`` in an argv, "" where it is absent."""
    return argv[list(argv).index(flag) + 1] if flag in argv[:-1] else ""


def data_fields(path: str) -> Data:
    """``data`` of a run given ``path`` as its data prefix ("": mock data), as JSON; the record's
    model of it is :func:`bench.records.record.data_info`'s."""
    if not path:
        return {"kind": "mock", "name": None, "path_sha256": None}
    return {"kind": "real", "name": path.rstrip("/").rsplit("/", 1)[-1],
            "path_sha256": hashlib.sha256(path.encode()).hexdigest()[:16]}


def _patch_series(note: object) -> list[Data]:
    """The ``patch_series`` engine note: ``sha256:<16 hex> applied`` or ``sha256:<16 hex> NOT
    applied in <tree>: <why>`` (Megatron-DeepSpeed's series, the only one then)."""
    if not isinstance(note, str) or not note.startswith("sha256:"):
        return []
    digest, _, state = note.removeprefix("sha256:").partition(" ")
    return [{"upstream": "megatron-deepspeed", "sha256": digest, "applied": state == "applied",
             "why": None if state == "applied" else state}]


def msamp_scaling_explicit(record: Data) -> Data:
    """An MS-AMP run's FP8 scaling as a variant against :data:`MSAMP_SCALING_DEFAULT`: from its
    variant, else its environment, else its kit commit."""
    variant, env = record.get("variant", {}), record.get("env", {})
    provenance = record.get("provenance")
    commit = provenance.get("kit_commit") if isinstance(provenance, dict) else None
    precision = record.get("precision")
    if not (isinstance(precision, str) and precision in MSAMP_PRECISIONS and isinstance(variant, dict)
            and isinstance(env, dict)):
        return record
    delayed = isinstance(commit, str) and commit[:12] in DELAYED_WITHOUT_ENV
    ran = variant.get(SCALING_KEY) or env.get(MSAMP_SCALING_ENV) or ("delayed" if delayed else "in-time")
    others = {key: value for key, value in variant.items() if key != SCALING_KEY}
    return {**record, "variant": others if ran == MSAMP_SCALING_DEFAULT else {**others, SCALING_KEY: ran}}


def older_code_explicit(record: Data) -> Data:
    """A run that started before a :data:`CODE_CHANGES` entry with its variant's value: that
    entry's setting added to its variant (after its other keys), unless the variant names it."""
    variant, started = record.get("variant"), record.get("started_at")
    if not (isinstance(variant, dict) and isinstance(started, str)):
        return record  # not a variant or a start time: the schema names the problem
    older = dict(setting for key, value, since, setting in CODE_CHANGES
                 if variant.get(key) == value and started < since)
    return {**record, "variant": {**variant, **{key: value for key, value in older.items()
                                                if key not in variant}}}


# (version, its upgrades in order): each step leads to the version after it, the last to SCHEMA.
STEPS: tuple[tuple[str, tuple[Upgrade, ...]], ...] = (
    ("bench.record/1", (notes_by_kind, facts_from_argv, msamp_scaling_explicit)),
    ("bench.record/2", (older_code_explicit,)),
)
OLDER = tuple(version for version, _ in STEPS)


def upgrade(record: Data, to: str) -> Data:
    """``record`` (decoded JSON of a version in :data:`OLDER`) in the shape of version ``to``."""
    versions = [*OLDER, to]
    start = versions.index(record["schema"])
    for version, steps in STEPS[start:]:
        for step in steps:
            record = step(record)
        record = {**record, "schema": versions[versions.index(version) + 1]}
    return record
