"""Run records: the versioned JSON schema ``bench.record/1``, atomic writes and tolerant loading.

A *record* is one JSON file, ``results/records/<run_id>.json``, describing one *run*: the fully
resolved preset, layout and platform, what the kit set (argv, environment), provenance, and either
steady-state metrics (``status == "ok"``) or a failure status with a reason (``metrics`` is null).

Records are append-only: :func:`write_record` never overwrites an existing file, and nothing in the
kit rewrites or deletes one. :func:`load_records` never crashes on a bad file: malformed JSON, a
record that fails validation and a foreign or future schema version are each returned as a
:class:`Problem` naming the file, and skipped.

Units: times in seconds, throughput in samples/s and tokens/s per GPU, FLOP rates in TFLOP/s
(10^12 FLOP/s) per GPU, MFU as a fraction of the platform's dense peak (0.42 means 42 %), memory in
GB (10^9 bytes). ``flops_convention`` names how ``tflops_per_gpu``/``mfu`` were counted;
``*_noncausal`` are the same run counted with the older non-causal convention (see
``bench/flops.py``).
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

SCHEMA = "bench.record/1"
SCHEMA_PREFIX = "bench.record/"

ENGINES = ("megatron", "megatron-deepspeed")
FLOPS_CONVENTIONS = ("megatron-causal",)

# MFU must agree with tflops_per_gpu / peak_tflops and tokens/s/GPU with samples/s * seq / gpus to
# this relative tolerance; a mismatch means the metrics were computed from different inputs.
CONSISTENCY_RTOL = 0.01

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_UTC_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
_PRECISION = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_TEMP_SUFFIX = ".tmp"


class Status(enum.StrEnum):
    """How a run ended. Only ``ok`` carries metrics; every other status needs a reason."""

    OK = "ok"
    INCOMPLETE = "incomplete"
    OOM = "oom"
    NAN = "nan"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    FAILED = "failed"


class RecordError(ValueError):
    """A record does not satisfy the schema; ``problems`` lists every violation found."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("invalid run record: " + "; ".join(self.problems))


class RecordExistsError(FileExistsError):
    """A record with this run id is already on disk; records are never overwritten."""


@dataclass(frozen=True)
class PresetInfo:
    """Model shape of the run; ``vocab_size`` is the padded vocabulary."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_length: int
    vocab_size: int


@dataclass(frozen=True)
class LayoutInfo:
    """Parallel layout: degrees, virtual pipeline ``vp`` and ZeRO stage ``zero`` (None: off)."""

    name: str
    tp: int
    pp: int
    dp: int
    vp: int | None
    cp: int
    sp: bool
    zero: int | None
    micro_batch: int
    global_batch: int


@dataclass(frozen=True)
class PlatformInfo:
    """Platform as used: ``peak_tflops`` is the dense peak per GPU for the run's precision."""

    name: str
    accelerator: str
    peak_tflops: float
    peak_source: str


@dataclass(frozen=True)
class Provenance:
    """Where the numbers came from; any value may be None when it could not be determined."""

    kit_commit: str | None = None
    megatron_core: str | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = None
    driver: str | None = None
    image: str | None = None
    image_digest: str | None = None
    hostname: str | None = None


@dataclass(frozen=True)
class Metrics:
    """Steady-state metrics over ``window_iters`` iterations after ``warmup_iters``.

    ``mfu`` is a fraction (0..1] of ``PlatformInfo.peak_tflops``; ``peak_mem_gb`` is the largest
    per-GPU allocation in GB, None when the platform cannot report it. ``mfu_bf16_peak`` is
    ``tflops_per_gpu`` over the accelerator's dense bf16 peak, for runs measured against another
    peak (fp8); None otherwise and in records written before it existed.
    """

    warmup_iters: int
    window_iters: int
    step_time_s_median: float
    step_time_s_p10: float
    step_time_s_p90: float
    samples_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    flops_convention: str
    tflops_per_gpu_noncausal: float | None
    mfu_noncausal: float | None
    peak_mem_gb: float | None
    mfu_bf16_peak: float | None = None


JsonScalar = str | int | float | bool | None


@dataclass(frozen=True)
class Record:
    """One run. Build it with :func:`build_record` or :func:`record_from_dict`; both validate."""

    run_id: str
    status: Status
    reason: str | None
    started_at: str
    finished_at: str | None
    engine: str
    precision: str
    preset: PresetInfo
    layout: LayoutInfo
    platform: PlatformInfo
    nodes: int
    gpus: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    provenance: Provenance
    metrics: Metrics | None
    log_tail: tuple[str, ...] = ()
    notes: Mapping[str, JsonScalar] = field(default_factory=dict)
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        problems = _semantic_problems(self)
        if problems:
            raise RecordError(problems)

    @property
    def ok(self) -> bool:
        """True when the run finished and has metrics."""
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, keys in schema order (the order of the contract)."""
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "status": self.status.value,
            "reason": self.reason,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "engine": self.engine,
            "precision": self.precision,
            "preset": _as_dict(self.preset),
            "layout": _as_dict(self.layout),
            "platform": _as_dict(self.platform),
            "nodes": self.nodes,
            "gpus": self.gpus,
            "argv": list(self.argv),
            "env": dict(self.env),
            "provenance": _as_dict(self.provenance),
            "metrics": None if self.metrics is None else _as_dict(self.metrics),
            "log_tail": list(self.log_tail),
            "notes": dict(self.notes),
        }

    def to_json(self) -> str:
        """Serialized record: 2-space indent, trailing newline, deterministic."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


@dataclass(frozen=True)
class Problem:
    """A file in the records directory that was skipped, and why."""

    file: str
    message: str

    def __str__(self) -> str:
        # A file name may hold a newline or escape codes: shown quoted, it cannot fake a line.
        name = self.file if self.file.isprintable() else ascii(self.file)
        return f"{name}: {self.message}"


def _as_dict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in _KEYS_OF[type(obj)]}


# ---------------------------------------------------------------------------------------------
# Parsing and validation
# ---------------------------------------------------------------------------------------------

_TOP_KEYS = (
    "schema",
    "run_id",
    "status",
    "reason",
    "started_at",
    "finished_at",
    "engine",
    "precision",
    "preset",
    "layout",
    "platform",
    "nodes",
    "gpus",
    "argv",
    "env",
    "provenance",
    "metrics",
    "log_tail",
    "notes",
)


class _Checker:
    """Collects type problems with a JSON path, so one pass reports every bad field."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def keys(self, where: str, data: Any, allowed: Sequence[str]) -> bool:
        if not isinstance(data, Mapping):
            self.fail(where, f"expected an object, got {type(data).__name__}")
            return False
        if len(data) == len(allowed) and all(k in data for k in allowed):
            return True  # the common case, checked cheaply
        missing = [k for k in allowed if k not in data]
        unknown = sorted(k for k in data if k not in allowed)
        if missing:
            self.fail(where, f"missing key(s) {', '.join(missing)}")
        if unknown:
            self.fail(where, f"unknown key(s) {', '.join(map(str, unknown))} (not in {SCHEMA})")
        return not missing

    def string(self, where: str, value: Any, nullable: bool = False) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value:
            self.fail(
                where, f"expected a non-empty string{' or null' if nullable else ''}, got {value!r}"
            )
            return None
        return value

    def integer(self, where: str, value: Any, minimum: int, nullable: bool = False) -> int | None:
        if value is None and nullable:
            return None
        # bool is an int subclass in Python; JSON true is not a count.
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(
                where,
                f"expected an integer >= {minimum}{' or null' if nullable else ''}, got {value!r}",
            )
            return None
        return value

    def number(
        self, where: str, value: Any, positive: bool = True, nullable: bool = False
    ) -> float | None:
        if value is None and nullable:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or (positive and value <= 0)
        ):
            kind = "a finite number > 0" if positive else "a finite number"
            self.fail(where, f"expected {kind}{' or null' if nullable else ''}, got {value!r}")
            return None
        return float(value)

    def boolean(self, where: str, value: Any) -> bool | None:
        if not isinstance(value, bool):
            self.fail(where, f"expected true or false, got {value!r}")
            return None
        return value

    def strings(self, where: str, value: Any) -> tuple[str, ...] | None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(where, "expected a list of strings")
            return None
        return tuple(value)

    def string_map(self, where: str, value: Any) -> Mapping[str, str] | None:
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.fail(where, "expected an object of string values")
            return None
        return MappingProxyType(dict(value))

    def scalar_map(self, where: str, value: Any) -> Mapping[str, JsonScalar] | None:
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str | int | float | bool))
            for k, v in value.items()
        ):
            self.fail(where, "expected an object of string/number/boolean/null values")
            return None
        return MappingProxyType(dict(value))


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


_PRESET_KEYS = _names(PresetInfo)
_LAYOUT_KEYS = _names(LayoutInfo)
_PLATFORM_KEYS = _names(PlatformInfo)
_PROVENANCE_KEYS = _names(Provenance)
_METRICS_KEYS = _names(Metrics)
_KEYS_OF = {PresetInfo: _PRESET_KEYS, LayoutInfo: _LAYOUT_KEYS, PlatformInfo: _PLATFORM_KEYS,
            Provenance: _PROVENANCE_KEYS, Metrics: _METRICS_KEYS}


def _parse_preset(c: _Checker, data: Any) -> PresetInfo | None:
    names = _PRESET_KEYS
    if not c.keys("preset", data, names):
        return None
    values = {"name": c.string("preset.name", data["name"])}
    for key in names[1:]:
        values[key] = c.integer(f"preset.{key}", data[key], 1)
    return None if None in values.values() else PresetInfo(**values)


def _parse_layout(c: _Checker, data: Any) -> LayoutInfo | None:
    names = _LAYOUT_KEYS
    if not c.keys("layout", data, names):
        return None
    ok = True
    values: dict[str, Any] = {"name": c.string("layout.name", data["name"])}
    for key in ("tp", "pp", "dp", "cp", "micro_batch", "global_batch"):
        values[key] = c.integer(f"layout.{key}", data[key], 1)
    values["vp"] = c.integer("layout.vp", data["vp"], 1, nullable=True)
    ok &= data["vp"] is None or values["vp"] is not None
    values["zero"] = c.integer("layout.zero", data["zero"], 0, nullable=True)
    ok &= data["zero"] is None or values["zero"] is not None
    values["sp"] = c.boolean("layout.sp", data["sp"])
    required = [values[k] for k in values if k not in ("vp", "zero")]
    return LayoutInfo(**values) if ok and None not in required else None


def _parse_platform(c: _Checker, data: Any) -> PlatformInfo | None:
    if not c.keys("platform", data, _PLATFORM_KEYS):
        return None
    values = {
        "name": c.string("platform.name", data["name"]),
        "accelerator": c.string("platform.accelerator", data["accelerator"]),
        "peak_tflops": c.number("platform.peak_tflops", data["peak_tflops"]),
        "peak_source": c.string("platform.peak_source", data["peak_source"]),
    }
    return None if None in values.values() else PlatformInfo(**values)


def _parse_provenance(c: _Checker, data: Any) -> Provenance | None:
    names = _PROVENANCE_KEYS
    # Every provenance key must be present (null when unknown): absence would be ambiguous.
    if not c.keys("provenance", data, names):
        return None
    before = len(c.problems)
    values: dict[str, Any] = {}
    for key in names:
        if key == "gpu_count":
            values[key] = c.integer("provenance.gpu_count", data[key], 1, nullable=True)
        else:
            values[key] = c.string(f"provenance.{key}", data[key], nullable=True)
    return Provenance(**values) if len(c.problems) == before else None


_NULLABLE_METRICS = ("tflops_per_gpu_noncausal", "mfu_noncausal", "peak_mem_gb", "mfu_bf16_peak")
# Metrics added after the first records: absent means None, so older records load unchanged.
_LATER_METRICS = ("mfu_bf16_peak",)


def _with_later_metrics(data: Any) -> Any:
    if isinstance(data, dict) and any(k not in data for k in _LATER_METRICS):
        return {**data, **{k: None for k in _LATER_METRICS if k not in data}}
    return data


def _parse_metrics(c: _Checker, data: Any) -> Metrics | None:
    names = _METRICS_KEYS
    data = _with_later_metrics(data)
    if not c.keys("metrics", data, names):
        return None
    before = len(c.problems)
    values: dict[str, Any] = {
        "warmup_iters": c.integer("metrics.warmup_iters", data["warmup_iters"], 0),
        "window_iters": c.integer("metrics.window_iters", data["window_iters"], 1),
        "flops_convention": c.string("metrics.flops_convention", data["flops_convention"]),
    }
    for key in names:
        if key not in values:
            values[key] = c.number(f"metrics.{key}", data[key], nullable=key in _NULLABLE_METRICS)
    return Metrics(**values) if len(c.problems) == before else None


# Fast path: plain dicts as json.loads returns them are checked with direct type tests, which
# accept exactly what the detailed checker below accepts (nothing more, sometimes less: an int or
# str subclass, a Mapping other than dict). Anything it does not accept goes to the checker, which
# finds the same record invalid and says why, so the messages come from one place.

_TOP_KEY_SET = frozenset(_TOP_KEYS)
_PRESET_KEY_SET = frozenset(_PRESET_KEYS)
_LAYOUT_KEY_SET = frozenset(_LAYOUT_KEYS)
_PLATFORM_KEY_SET = frozenset(_PLATFORM_KEYS)
_PROVENANCE_KEY_SET = frozenset(_PROVENANCE_KEYS)
_METRICS_KEY_SET = frozenset(_METRICS_KEYS)
_PROVENANCE_TEXT_KEYS = tuple(k for k in _PROVENANCE_KEYS if k != "gpu_count")
_METRIC_NUMBER_KEYS = tuple(
    k for k in _METRICS_KEYS if k not in ("warmup_iters", "window_iters", "flops_convention")
)
_STATUS_BY_VALUE = {status.value: status for status in Status}
_SCALAR_TYPES = frozenset((str, int, float, bool))


def _is_text(value: Any) -> bool:
    """A non-empty string (``_Checker.string``)."""
    return type(value) is str and value != ""


def _is_count(value: Any, minimum: int) -> bool:
    """An integer, not a bool, >= ``minimum`` (``_Checker.integer``)."""
    return type(value) is int and value >= minimum


def _is_positive(value: Any) -> bool:
    """A finite number > 0, not a bool (``_Checker.number``); NaN fails the comparison."""
    return (type(value) is float or type(value) is int) and 0 < value < math.inf


def _built(cls: type, values: dict[str, Any]) -> Any:
    """An instance of frozen dataclass ``cls`` from checked field values, in one dict update.

    The generated ``__init__`` sets each field through ``object.__setattr__``, which is most of
    the fast path's cost; ``values`` must hold exactly the fields. No ``__post_init__`` runs.
    """
    instance = object.__new__(cls)
    instance.__dict__.update(values)
    return instance


def _fast_metrics(m: Any) -> Metrics | None:
    m = _with_later_metrics(m)
    if type(m) is not dict or m.keys() != _METRICS_KEY_SET:
        return None
    if not (
        _is_count(m["warmup_iters"], 0)
        and _is_count(m["window_iters"], 1)
        and _is_text(m["flops_convention"])
    ):
        return None
    values = dict(m)
    for key in _METRIC_NUMBER_KEYS:
        value = values[key]
        if _is_positive(value):
            values[key] = float(value)
        elif value is not None or key not in _NULLABLE_METRICS:
            return None
    return _built(Metrics, values)


def _fast_record(data: dict[str, Any]) -> Record | None:
    """The record if ``data`` is right by type, None if the detailed checker must look at it.

    Cross-field rules are not checked here: ``Record`` checks them when it is built, on both
    paths, and raises :class:`RecordError`.
    """
    if data.keys() != _TOP_KEY_SET or data["schema"] != SCHEMA:
        return None
    preset, layout, platform = data["preset"], data["layout"], data["platform"]
    provenance, metrics = data["provenance"], data["metrics"]
    argv, env, log_tail, notes = data["argv"], data["env"], data["log_tail"], data["notes"]
    reason, finished_at = data["reason"], data["finished_at"]
    status = _STATUS_BY_VALUE.get(data["status"]) if type(data["status"]) is str else None
    if not (
        status is not None
        and _is_text(data["run_id"])
        and _is_text(data["started_at"])
        and _is_text(data["engine"])
        and _is_text(data["precision"])
        and (reason is None or _is_text(reason))
        and (finished_at is None or _is_text(finished_at))
        and _is_count(data["nodes"], 1)
        and _is_count(data["gpus"], 1)
        and type(argv) is list
        and all(type(v) is str for v in argv)
        and type(log_tail) is list
        and all(type(v) is str for v in log_tail)
        and type(env) is dict
        and all(type(k) is str and type(v) is str for k, v in env.items())
        and type(notes) is dict
        and all(type(k) is str and (v is None or type(v) in _SCALAR_TYPES)
                for k, v in notes.items())
        and type(preset) is dict
        and preset.keys() == _PRESET_KEY_SET
        and _is_text(preset["name"])
        and all(_is_count(preset[k], 1) for k in _PRESET_KEYS[1:])
        and type(layout) is dict
        and layout.keys() == _LAYOUT_KEY_SET
        and _is_text(layout["name"])
        and all(_is_count(layout[k], 1)
                for k in ("tp", "pp", "dp", "cp", "micro_batch", "global_batch"))
        and (layout["vp"] is None or _is_count(layout["vp"], 1))
        and (layout["zero"] is None or _is_count(layout["zero"], 0))
        and type(layout["sp"]) is bool
        and type(platform) is dict
        and platform.keys() == _PLATFORM_KEY_SET
        and _is_text(platform["name"])
        and _is_text(platform["accelerator"])
        and _is_positive(platform["peak_tflops"])
        and _is_text(platform["peak_source"])
        and type(provenance) is dict
        and provenance.keys() == _PROVENANCE_KEY_SET
        and all(provenance[k] is None or _is_text(provenance[k]) for k in _PROVENANCE_TEXT_KEYS)
        and (provenance["gpu_count"] is None or _is_count(provenance["gpu_count"], 1))
    ):
        return None
    typed_metrics = None if metrics is None else _fast_metrics(metrics)
    if metrics is not None and typed_metrics is None:
        return None
    record = _built(Record, {
        "run_id": data["run_id"], "status": status, "reason": reason,
        "started_at": data["started_at"], "finished_at": finished_at, "engine": data["engine"],
        "precision": data["precision"], "preset": _built(PresetInfo, preset),
        "layout": _built(LayoutInfo, layout),
        "platform": _built(PlatformInfo, {**platform, "peak_tflops": float(platform["peak_tflops"])}),
        "nodes": data["nodes"], "gpus": data["gpus"], "argv": tuple(argv),
        "env": MappingProxyType(dict(env)), "provenance": _built(Provenance, provenance),
        "metrics": typed_metrics, "log_tail": tuple(log_tail),
        "notes": MappingProxyType(dict(notes)), "schema": SCHEMA,
    })  # fmt: skip
    problems = _semantic_problems(record)  # what Record.__post_init__ checks
    if problems:
        raise RecordError(problems)
    return record


def record_from_dict(data: Any) -> Record:
    """Validate a decoded JSON record and return it typed.

    Raises :class:`RecordError` listing every problem (types, missing/unknown keys, cross-field
    rules); a schema other than ``bench.record/1`` is reported before anything else.
    """
    if type(data) is dict:
        record = _fast_record(data)
        if record is not None:
            return record
    return _checked_record(data)


def _checked_record(data: Any) -> Record:
    """:func:`record_from_dict` by the detailed checker alone, which words every problem."""
    c = _Checker()
    if not isinstance(data, Mapping):
        raise RecordError([f"expected a JSON object, got {type(data).__name__}"])
    schema = data.get("schema")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith(SCHEMA_PREFIX):
            message = (
                f"schema {schema!r} is not supported by this kit, which reads {SCHEMA!r}; "
                "update the kit to read this record"
            )
            raise RecordError([message])
        raise RecordError([f"schema {schema!r} is not a run record (expected {SCHEMA!r})"])
    if not c.keys("record", data, _TOP_KEYS):
        raise RecordError(c.problems)
    status = None
    try:
        status = Status(data["status"])
    except ValueError:
        c.fail(
            "status",
            f"expected one of {', '.join(s.value for s in Status)}, got {data['status']!r}",
        )
    values: dict[str, Any] = {
        "run_id": c.string("run_id", data["run_id"]),
        "status": status,
        "started_at": c.string("started_at", data["started_at"]),
        "engine": c.string("engine", data["engine"]),
        "precision": c.string("precision", data["precision"]),
        "preset": _parse_preset(c, data["preset"]),
        "layout": _parse_layout(c, data["layout"]),
        "platform": _parse_platform(c, data["platform"]),
        "nodes": c.integer("nodes", data["nodes"], 1),
        "gpus": c.integer("gpus", data["gpus"], 1),
        "argv": c.strings("argv", data["argv"]),
        "env": c.string_map("env", data["env"]),
        "provenance": _parse_provenance(c, data["provenance"]),
        "log_tail": c.strings("log_tail", data["log_tail"]),
        "notes": c.scalar_map("notes", data["notes"]),
    }
    reason = c.string("reason", data["reason"], nullable=True)
    finished_at = c.string("finished_at", data["finished_at"], nullable=True)
    metrics = None if data["metrics"] is None else _parse_metrics(c, data["metrics"])
    if c.problems or None in values.values():
        raise RecordError(c.problems)
    return Record(reason=reason, finished_at=finished_at, metrics=metrics, **values)


def build_record(**fields_: Any) -> Record:
    """Build a validated record from plain values (nested parts as mappings or dataclasses).

    Takes the record's keys (see the contract) except ``schema``; ``log_tail`` and ``notes``
    default to empty, ``provenance`` keys default to null. Raises :class:`RecordError`.
    """
    data: dict[str, Any] = {"schema": SCHEMA, "log_tail": [], "notes": {}}
    for key, value in fields_.items():
        if isinstance(value, PresetInfo | LayoutInfo | PlatformInfo | Provenance | Metrics):
            value = _as_dict(value)
        elif isinstance(value, Status):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        data[key] = value
    data["provenance"] = {**_as_dict(Provenance()), **(data.get("provenance") or {})}
    return record_from_dict(data)


IMPLAUSIBLE_NOTE_PREFIX = "metrics."
"""Notes key prefix under which a run's rejected metrics are kept (``metrics.mfu``, ...)."""


def build_finished_record(failure_log_tail: Sequence[str] = (), **fields_: Any) -> Record:
    """:func:`build_record` for a run that ended: its metrics cannot cost it its record.

    When the metrics fail the record's checks (an MFU above 1 from an impossible step time, a
    throughput that disagrees with the step time), the run is recorded as ``failed`` with those
    problems as the reason, ``failure_log_tail`` as its log tail, and every computed number kept
    in ``notes`` as ``metrics.<name>`` (non-finite ones as text, which JSON can hold).
    """
    try:
        return build_record(**fields_)
    except RecordError as error:
        metrics = fields_.get("metrics")
        if metrics is None:
            raise  # not the metrics: a bug in the caller, which no status can record
        kept = _as_dict(metrics) if isinstance(metrics, Metrics) else dict(metrics)
        notes = {**dict(fields_.get("notes") or {}), **{
            IMPLAUSIBLE_NOTE_PREFIX + key: value if not isinstance(value, float)
            or math.isfinite(value) else repr(value) for key, value in kept.items()}}
        reason = ("the run finished, but its metrics are implausible, so it is not a result: "
                  + "; ".join(error.problems) + f" (the numbers are kept in notes as "
                  f"{IMPLAUSIBLE_NOTE_PREFIX}*)")
        return build_record(**{**fields_, "status": Status.FAILED, "reason": reason,
                               "metrics": None, "notes": notes,
                               "log_tail": list(failure_log_tail)})


def validate_record(data: Any) -> list[str]:
    """Every problem with a decoded JSON record; an empty list means it is a valid record."""
    try:
        record_from_dict(data)
    except RecordError as error:
        return list(error.problems)
    return []


def _relative_gap(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b))


def _semantic_problems(r: Record) -> list[str]:
    """Cross-field rules; types are already right when this runs."""
    p: list[str] = []
    if r.schema != SCHEMA:
        p.append(f"schema: must be {SCHEMA!r}")
    if not _RUN_ID.match(r.run_id):
        p.append(
            f"run_id: {r.run_id!r} must be letters, digits, '.', '_' or '-' (it is the file name)"
        )
    if r.engine not in ENGINES:
        p.append(f"engine: {r.engine!r} is not one of {', '.join(ENGINES)}")
    if not _PRECISION.match(r.precision):
        p.append(f"precision: {r.precision!r} must be lower-case like bf16, fp16, fp8")
    started = _timestamp(p, "started_at", r.started_at)
    finished = None if r.finished_at is None else _timestamp(p, "finished_at", r.finished_at)
    if started and finished and finished < started:
        p.append(f"finished_at: {r.finished_at} is before started_at {r.started_at}")
    if r.status is Status.OK:
        if r.metrics is None:
            p.append("metrics: required when status is 'ok'")
        if r.reason is not None:
            p.append("reason: must be null when status is 'ok'")
    else:
        if r.metrics is not None:
            p.append(
                f"metrics: must be null when status is {r.status.value!r} "
                "(only ok runs have metrics)"
            )
        if not r.reason or not r.reason.strip():
            p.append(f"reason: required when status is {r.status.value!r}; say what went wrong")
    lay = r.layout
    if lay.tp * lay.pp * lay.cp * lay.dp != r.gpus:
        p.append(
            f"layout: tp {lay.tp} x pp {lay.pp} x cp {lay.cp} x dp {lay.dp} = "
            f"{lay.tp * lay.pp * lay.cp * lay.dp}, but gpus is {r.gpus}"
        )
    if lay.global_batch % (lay.micro_batch * lay.dp):
        p.append(
            f"layout: global_batch {lay.global_batch} is not a multiple of micro_batch "
            f"{lay.micro_batch} x dp {lay.dp}"
        )
    if lay.zero is not None and lay.zero > 3:
        p.append(f"layout.zero: {lay.zero} is not a ZeRO stage (0-3 or null)")
    if r.nodes > r.gpus:
        p.append(f"nodes: {r.nodes} nodes cannot run {r.gpus} GPUs")
    if r.metrics is not None:
        p.extend(_metric_problems(r, r.metrics))
    return p


def _metric_problems(r: Record, m: Metrics) -> list[str]:
    p: list[str] = []
    if m.flops_convention not in FLOPS_CONVENTIONS:
        p.append(
            f"metrics.flops_convention: {m.flops_convention!r} is not one of "
            f"{', '.join(FLOPS_CONVENTIONS)}"
        )
    if not m.step_time_s_p10 <= m.step_time_s_median <= m.step_time_s_p90:
        p.append("metrics: step times must satisfy p10 <= median <= p90")
    for name in ("mfu", "mfu_noncausal"):
        value = getattr(m, name)
        if value is not None and not 0 < value <= 1:
            p.append(
                f"metrics.{name}: {value} is a fraction of peak and must be in (0, 1]; "
                "a value above 1 means the wrong peak or FLOPs formula"
            )
    if _relative_gap(m.mfu, m.tflops_per_gpu / r.platform.peak_tflops) > CONSISTENCY_RTOL:
        p.append(
            f"metrics.mfu: {m.mfu} != tflops_per_gpu {m.tflops_per_gpu} / platform.peak_tflops "
            f"{r.platform.peak_tflops}"
        )
    expected_tokens = m.samples_per_s * r.preset.seq_length / r.gpus
    if _relative_gap(m.tokens_per_s_per_gpu, expected_tokens) > CONSISTENCY_RTOL:
        p.append(
            f"metrics.tokens_per_s_per_gpu: {m.tokens_per_s_per_gpu} != samples_per_s x "
            f"seq_length / gpus = {expected_tokens:.6g}"
        )
    return p


def _timestamp(p: list[str], name: str, value: str) -> datetime | None:
    if not _UTC_TIMESTAMP.match(value):
        p.append(f"{name}: {value!r} must be UTC like 2026-11-21T20:15:00Z")
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError as error:  # the right shape, but no such day or time (month 13)
        p.append(f"{name}: {value!r} is not a date and time ({error})")
        return None


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def record_path(records_dir: Path | str, run_id: str) -> Path:
    """Where the record of ``run_id`` lives: ``<records_dir>/<run_id>.json``."""
    return Path(records_dir) / f"{run_id}.json"


def check_records_dir(records_dir: Path | str) -> None:
    """Create ``records_dir`` and write and remove a test file in it, before a run starts.

    Raises ValueError naming the directory when it cannot hold records (a file is in the way, no
    permission, a read-only file system), so the GPUs are not used for a run whose record would
    be lost.
    """
    directory = Path(records_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=directory, prefix=".write-test.", suffix=_TEMP_SUFFIX)
        os.close(fd)
        os.unlink(temp_name)
    except OSError as error:
        raise ValueError(f"records directory {directory} cannot hold records "
                         f"({error.strerror or error}); give a writable directory with "
                         "--records-dir") from None


def write_record(records_dir: Path | str, record: Record) -> Path:
    """Write ``record`` to ``<records_dir>/<run_id>.json`` atomically and return the path.

    Creates ``records_dir``. The JSON goes to a temporary file in the same directory, is fsynced,
    then hard-linked to the final name: ``os.link`` fails rather than replace an existing file, so
    a record is never overwritten (:class:`RecordExistsError`) and a reader never sees half a
    record. The temporary file is removed on every path, including KeyboardInterrupt.
    """
    if not isinstance(record, Record):
        raise TypeError(
            f"write_record takes a Record (see build_record), got {type(record).__name__}"
        )
    directory = Path(records_dir)
    final = record_path(directory, record.run_id)
    text = record.to_json().encode()
    directory.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise _exists(final)
    fd, temp_name = tempfile.mkstemp(
        dir=directory, prefix=f".{record.run_id}.", suffix=_TEMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp_name, final)
        except FileExistsError:
            raise _exists(final) from None
    finally:
        os.unlink(temp_name)
    _fsync_dir(directory)
    return final


def _exists(path: Path) -> RecordExistsError:
    return RecordExistsError(
        f"{path} already exists; records are append-only, so a run id is written once "
        "(plan a new run for a new run id)"
    )


def _fsync_dir(directory: Path) -> None:
    # Makes the new directory entry durable; a no-op where directories cannot be opened.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_record(path: Path | str) -> Record:
    """Read and validate one record file; raises :class:`RecordError` or ``OSError``.

    Whatever the file holds, the failure is a :class:`RecordError`: text that is not JSON or not
    UTF-8, an integer longer than Python converts (4300 digits), nesting deeper than the decoder's
    recursion limit, or something that is not a regular file (a FIFO would block the read).
    """
    path = os.fspath(path)  # plain strings: pathlib's parsing costs more than the read
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(["not a regular file"])
    with open(fd, "rb") as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except RecursionError:
        raise RecordError(["not a record: JSON nested too deeply to read"]) from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise RecordError([f"not valid JSON ({error})"]) from None
    record = record_from_dict(data)
    name = os.path.basename(path)
    if record.run_id != os.path.splitext(name)[0]:
        raise RecordError([f"run_id {record.run_id!r} does not match the file name {name!r}"])
    return record


def load_records(records_dir: Path | str) -> tuple[list[Record], list[Problem]]:
    """Every valid record in ``records_dir`` (sorted by file name) and every skipped file.

    A missing directory holds no records. ``*.json`` files that are malformed, invalid or of a
    foreign/future schema become :class:`Problem` entries, as do leftover temporary files of an
    interrupted write; other files are not records and are ignored.
    """
    directory = Path(records_dir)
    if not directory.is_dir():
        return [], []
    records: list[Record] = []
    problems: list[Problem] = []
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.name.startswith(".") and path.name.endswith(_TEMP_SUFFIX):
            problems.append(
                Problem(path.name, "leftover temporary file of an interrupted write; delete it")
            )
            continue
        if path.suffix != ".json" or path.name.startswith("."):
            continue
        try:
            records.append(load_record(path))
        except RecordError as error:
            problems.append(Problem(path.name, "; ".join(error.problems)))
        except OSError as error:
            problems.append(Problem(path.name, f"cannot read ({error.strerror or error})"))
    return records, problems
