"""Run records: the versioned JSON schema ``bench.record/3`` and its one parse path.

A *record*, ``results/records/<run_id>.json``, describes one *run*: the resolved preset, layout and
platform, what the kit set (argv, environment), provenance, and either steady-state metrics
(``status == "ok"``) or a failure status with a reason. The models are the schema and its one parse
path. Records are append-only; ``bench.records.store`` writes and loads them. A record of an older
version is read through :mod:`bench.records.migrate`, which upgrades it to this one.

Units: seconds, samples/s, tokens/s and TFLOP/s (10^12 FLOP/s) per GPU, MFU as a fraction of the
dense peak (0.42 is 42 %), memory in GB (10^9 bytes). ``flops_convention`` names how
``tflops_per_gpu``/``mfu`` were counted; ``*_noncausal`` use the older convention (``bench/measure/flops.py``).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench.config.platforms import EngineName
from bench.config.run_options import MSAMP_SCALINGS, variant_key
from bench.config.schema import Count, Finite, Strict, hinted, problems
from bench.measure.status import Status
from bench.records.checkpoint import Checkpoint
from bench.records.evidence import LogFile, SeriesPoint
from bench.records.expected import Expected
from bench.records.metrics import Metrics, Profile
from bench.records.migrate import OLDER, SCALING_KEY, upgrade
from bench.records.parts import (
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    DataInfo,
    Implementation,
    JsonScalar,
    Key,
    LayoutInfo,
    Line,
    MemoryParts,
    PatchSeries,
    PlatformInfo,
    PresetInfo,
    Text,
    Timestamp,
    data_info,
)
from bench.records.provenance import Conditions, Provenance

__all__ = ["MAX_NAME_CHARS", "MAX_TEXT_CHARS", "SCHEMA", "Conditions", "DataInfo", "Implementation", "JsonScalar",
           "LayoutInfo", "LogFile", "MemoryParts", "Metrics", "PatchSeries", "PlatformInfo",
           "PresetInfo", "Profile", "Provenance", "Record", "RecordError", "SeriesPoint", "Status",
           "build_finished_record", "build_record", "data_info", "record_from_dict",
           "record_from_json"]

SCHEMA = "bench.record/3"
# MFU must agree with tflops_per_gpu / peak_tflops and tokens/s/GPU with samples/s * seq / gpus to
# this relative tolerance; a mismatch means the metrics were computed from different inputs.
CONSISTENCY_RTOL = 0.01
IMPLAUSIBLE_NOTE_PREFIX = "metrics."  # notes keys of a run's rejected metrics: metrics.mfu, ...


class RecordError(ValueError):
    """A record does not satisfy the schema; ``problems`` lists every violation found."""

    def __init__(self, problems: list[str]):
        self.problems = tuple(problems)
        super().__init__("invalid run record: " + "; ".join(self.problems))

class Record(Strict):
    """One run. Build it with :func:`build_record` or :func:`record_from_dict`; both validate.

    ``argv`` is the command each rank runs (``python <entry> <flags>``), for local and cluster runs
    alike; the launcher (torchrun, srun, mpiexec) is the platform's. Records of local runs written
    before this held the torchrun command line. ``log_errors`` holds the first error lines of a failed
    run's log before ``log_tail`` (the cause often scrolls out of the tail); older records lack it.

    What the record says beyond the shared schema keeps its kind: ``variant``, the settings away
    from the defaults of its schema version (A/B tuning, ZeRO settings, sequence length, recompute,
    and the older code a run ran for a setting where it is not today's: ``paper_adam``,
    :data:`bench.records.migrate.CODE_CHANGES`), which make the run a configuration of its own;
    ``engine_notes``, how the numbers were made (the engine's own TFLOP/s, DeepSpeed's version,
    the patch series: ``bench.records.engine_notes``);
    ``labels``, how the run was made (``sweep``, ``repeat_group``, ``campaign`` and ``campaign_run``, the
    campaign file's run name, in records since 2026-11-27), which never split
    a configuration; ``notes``, the kit's bookkeeping. ``lm_losses`` is the ``lm loss`` of every
    logged iteration in order, up to the first non-finite one (loss curves are drawn from it); older
    records lack it. ``profile``: where the time of the steps profiled after the window went
    (``--profile``), else null. ``memory_parts``: bytes held per part after the first step, as the
    kit's training entry printed them; null for other engines and for records written before it.
    ``expected``: what the step-time model expected (:mod:`bench.records.expected`), null where it
    expected nothing and before it; ``checkpoint``, the saves it timed
    (:mod:`bench.records.checkpoint`). What the numbers were computed from
    (:mod:`bench.records.evidence`): ``series``, every logged iteration, and ``log``, the train log
    kept beside the records; ``log_tail`` holds the log's last lines whatever the status. Records
    written before 2026-11-29 lack both and keep a tail only when they failed. ``conditions``: what
    the GPUs and host were while a local run went, power limit, clocks, throttling, links, CPU and
    the memory cap (:class:`bench.records.provenance.Conditions`); null before it and for cluster runs.
    """

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    schema_: Literal["bench.record/3"] = Field(SCHEMA, alias="schema")
    run_id: Annotated[str, hinted(r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                  "must be letters, digits, '.', '_' or '-' (it is the file name)")]
    status: Status
    reason: Text | None
    started_at: Timestamp
    finished_at: Timestamp | None
    engine: EngineName
    precision: Annotated[str, hinted(r"^[a-z0-9][a-z0-9_-]*$", "must be lower-case like bf16, fp16, fp8"),
                         Field(max_length=MAX_NAME_CHARS)]
    preset: PresetInfo
    layout: LayoutInfo
    platform: PlatformInfo
    nodes: Count
    gpus: Count
    argv: tuple[Line, ...]
    env: dict[Key, Line]
    provenance: Provenance
    metrics: Metrics | None
    log_tail: tuple[Line, ...] = ()
    notes: dict[Key, JsonScalar] = {}
    log_errors: tuple[Line, ...] = ()
    variant: dict[Key, JsonScalar] = {}
    engine_notes: dict[Key, JsonScalar] = {}
    labels: dict[Key, JsonScalar] = {}
    lm_losses: tuple[Finite, ...] = ()
    implementation: Implementation | None = None
    data: DataInfo | None = None
    patches: tuple[PatchSeries, ...] = ()
    profile: Profile | None = None
    memory_parts: MemoryParts | None = None
    expected: Expected | None = None
    checkpoint: Checkpoint | None = None
    series: tuple[SeriesPoint, ...] = ()
    log: LogFile | None = None
    conditions: Conditions | None = None

    @property
    def ok(self) -> bool:
        """True when the run finished and has metrics."""
        return self.status is Status.OK

    @model_validator(mode="after")
    def _rules(self) -> Record:
        found = [*_time_problems(self), *_status_problems(self), *_layout_problems(self),
                 *_metrics_problems(self), *_variant_problems(self)]
        if found:
            raise ValueError("\n".join(found))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, keys in schema order (the order of the contract)."""
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        """Serialized record: 2-space indent, trailing newline, deterministic."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _time_problems(record: Record) -> list[str]:
    if record.finished_at is None or (datetime.fromisoformat(record.finished_at)
                                      >= datetime.fromisoformat(record.started_at)):
        return []
    return [f"finished_at: {record.finished_at} is before started_at {record.started_at}"]


def _status_problems(record: Record) -> list[str]:
    """Metrics with an ok run only, a reason with every other."""
    status, found = record.status.value, []
    if record.ok and record.metrics is None:
        found.append("metrics: required when status is 'ok'")
    if record.ok and record.reason is not None:
        found.append("reason: must be null when status is 'ok'")
    if not record.ok and record.metrics is not None:
        found.append(f"metrics: must be null when status is {status!r} (only ok runs have metrics)")
    if not record.ok and not (record.reason or "").strip():
        found.append(f"reason: required when status is {status!r}; say what went wrong")
    return found


def _layout_problems(record: Record) -> list[str]:
    lay, gpus, found = record.layout, record.gpus, []
    if lay.tp * lay.pp * lay.cp * lay.dp != gpus:
        found.append(f"layout: tp {lay.tp} x pp {lay.pp} x cp {lay.cp} x dp {lay.dp} = "
                     f"{lay.tp * lay.pp * lay.cp * lay.dp}, but gpus is {gpus}")
    if lay.global_batch % (lay.micro_batch * lay.dp):
        found.append(f"layout: global_batch {lay.global_batch} is not a multiple of micro_batch "
                     f"{lay.micro_batch} x dp {lay.dp}")
    if record.nodes > gpus:
        found.append(f"nodes: {record.nodes} nodes cannot run {gpus} GPUs")
    return found


CAP_KEY = variant_key("gpu_memory_cap")  # the variant key of --gpu-memory-cap


def _variant_problems(record: Record) -> list[str]:
    """The variant values the results page reads as numbers or choices: the memory cap (GB) and
    MS-AMP's scaling, as the kit writes them; anything else would split or break the page's rows."""
    found = []
    cap = record.variant.get(CAP_KEY)
    try:
        cap_ok = cap is None or (not isinstance(cap, bool) and math.isfinite(float(str(cap)))
                                 and float(str(cap)) > 0)
    except ValueError:
        cap_ok = False
    if not cap_ok:
        found.append(f"variant.{CAP_KEY}: {str(cap)[:40]!r} is not a number of GB above 0")
    scaling = record.variant.get(SCALING_KEY)
    if scaling is not None and scaling not in MSAMP_SCALINGS:
        found.append(f"variant.{SCALING_KEY}: {str(scaling)[:40]!r} is not one of "
                     f"{', '.join(MSAMP_SCALINGS)}")
    return found


def _metrics_problems(record: Record) -> list[str]:
    """MFU and tokens/s/GPU agree with TFLOP/s/GPU and samples/s (:data:`CONSISTENCY_RTOL`)."""
    m = record.metrics
    if m is None:
        return []
    peak, tokens, found = record.platform.peak_tflops, m.samples_per_s * record.preset.seq_length / record.gpus, []
    if not math.isclose(m.mfu, m.tflops_per_gpu / peak, rel_tol=CONSISTENCY_RTOL):
        found.append(f"metrics.mfu: {m.mfu} != tflops_per_gpu {m.tflops_per_gpu} / "
                     f"platform.peak_tflops {peak}")
    if not math.isclose(m.tokens_per_s_per_gpu, tokens, rel_tol=CONSISTENCY_RTOL):
        found.append(f"metrics.tokens_per_s_per_gpu: {m.tokens_per_s_per_gpu} != samples_per_s x "
                     f"seq_length / gpus = {tokens:.6g}")
    return found


def record_from_json(text: str | bytes) -> Record:
    """Validate a record's JSON text (the one parse path), one of an older version upgraded first
    (:mod:`bench.records.migrate`); raises :class:`RecordError`."""
    try:
        return Record.model_validate_json(text)
    except ValidationError as error:
        try:  # the standard library's words for what is not JSON
            data = json.loads(text)
        except RecursionError:
            raise RecordError(["not a record: JSON nested too deeply to read"]) from None
        except ValueError as bad:  # JSONDecodeError, UnicodeDecodeError, too many digits
            raise RecordError([f"not valid JSON ({bad})"]) from None
        schema = data.get("schema") if isinstance(data, dict) else SCHEMA
        if schema == SCHEMA:
            raise RecordError(problems(error, Record)) from None
    if schema in OLDER:
        try:
            return Record.model_validate_json(json.dumps(upgrade(data, SCHEMA)))
        except ValidationError as error:
            raise RecordError(problems(error, Record)) from None
    if isinstance(schema, str) and schema.startswith("bench.record/"):  # said before all else
        raise RecordError([f"schema {schema!r} is not supported by this kit, which reads up to "
                           f"{SCHEMA!r}; update the kit to read this record"])
    raise RecordError([f"schema {schema!r} is not a run record (expected {SCHEMA!r})"])


def record_from_dict(data: Any) -> Record:
    """Validate a decoded JSON record: it is checked as the JSON text it stands for."""
    try:
        text = json.dumps(data)
    except (TypeError, ValueError) as error:
        raise RecordError([f"not JSON data ({error})"]) from None
    return record_from_json(text)


def build_record(**fields: Any) -> Record:
    """A validated record of today's :data:`SCHEMA` from its keys but ``schema`` (nested parts as
    mappings or models); ``provenance`` keys default to null. It is built from today's fields
    alone: no upgrade runs on it (:mod:`bench.records.migrate` upgrades older records when they are
    read). Raises :class:`RecordError`."""
    data = {k: _plain(v) for k, v in fields.items()}
    data["provenance"] = {**dict.fromkeys(Provenance.model_fields), **(data.get("provenance") or {})}
    return record_from_dict({**data, "schema": SCHEMA})


def _plain(value: Any) -> Any:
    """A part given as a model, or a sequence of them (the series), as plain data."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def build_finished_record(**fields: Any) -> Record:
    """:func:`build_record` for a run that ended: metrics that fail the checks (an MFU above 1
    from an impossible step time) make it ``failed``, with the problems as reason and the numbers
    kept in ``notes`` as ``metrics.<name>`` (non-finite ones as text)."""
    try:
        return build_record(**fields)
    except RecordError as error:
        if fields.get("metrics") is None:
            raise  # not the metrics: a bug in the caller, which no status can record
        notes = {**dict(fields.get("notes") or {}), **{
            IMPLAUSIBLE_NOTE_PREFIX + key: value if not isinstance(value, float)
            or math.isfinite(value) else repr(value) for key, value in dict(fields["metrics"]).items()}}
        reason = ("the run finished, but its metrics are implausible, so it is not a result: "
                  + "; ".join(error.problems) + f" (the numbers are kept in notes as "
                  f"{IMPLAUSIBLE_NOTE_PREFIX}*)")
        return build_record(**{**fields, "status": Status.FAILED, "reason": reason,
                               "metrics": None, "notes": notes})
