"""Run records: the versioned JSON schema ``bench.record/2`` and its one parse path.

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
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench.config.schema import Count, Finite, NonNegative, Positive, Strict, hinted, problems
from bench.measure.status import Status
from bench.records.checkpoint import Checkpoint
from bench.records.expected import Expected
from bench.records.migrate import OLDER, data_fields, upgrade

SCHEMA = "bench.record/2"
# MFU must agree with tflops_per_gpu / peak_tflops and tokens/s/GPU with samples/s * seq / gpus to
# this relative tolerance; a mismatch means the metrics were computed from different inputs.
CONSISTENCY_RTOL = 0.01
IMPLAUSIBLE_NOTE_PREFIX = "metrics."  # notes keys of a run's rejected metrics: metrics.mfu, ...


def _real_time(value: str) -> str:
    try:
        datetime.fromisoformat(value)
    except ValueError as error:  # the right shape, but no such day or time (month 13)
        raise ValueError(f"{value!r} is not a date and time ({error})") from None
    return value


def _fraction(value: float) -> float:
    if value > 1:
        raise ValueError(f"{value} is a fraction of peak and must be in (0, 1]; a value above 1 "
                         "means the wrong peak or FLOPs formula")
    return value


Fraction = Annotated[Positive, AfterValidator(_fraction)]
Timestamp = Annotated[str, hinted(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$",
                                  "must be UTC like 2026-11-21T20:15:00Z"), AfterValidator(_real_time)]
MAX_TEXT_CHARS = 10_000
"""The longest text a record holds (a log line, a reason, an argument). The default is 10,000, the
log parser's line length (``bench.measure.logparse.MAX_LINE_CHARS``): a longer one is not the
kit's, and a 100,000-character one took the results page 22 s and 1 GB."""
MAX_NAME_CHARS = 200
"""The longest name a record holds (a preset, layout, platform, accelerator, key): 200 by default."""
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
Line = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Key = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
JsonScalar = Line | int | Annotated[float, Field(allow_inf_nan=False)] | bool | None


class RecordError(ValueError):
    """A record does not satisfy the schema; ``problems`` lists every violation found."""

    def __init__(self, problems: list[str]):
        self.problems = tuple(problems)
        super().__init__("invalid run record: " + "; ".join(self.problems))


class PresetInfo(Strict):
    """Model shape of the run; ``vocab_size`` is the padded vocabulary."""

    name: Name
    layers: Count
    hidden: Count
    heads: Count
    seq_length: Count
    vocab_size: Count


class LayoutInfo(Strict):
    """Parallel layout: degrees, virtual pipeline ``vp`` and ZeRO stage ``zero`` (null: off)."""

    name: Name
    tp: Count
    pp: Count
    dp: Count
    vp: Count | None
    cp: Count
    sp: bool
    zero: Annotated[int, Field(ge=0, le=3)] | None
    micro_batch: Count
    global_batch: Count


class PlatformInfo(Strict):
    """Platform as used: ``peak_tflops`` is the dense peak per GPU for the run's precision."""

    name: Name
    accelerator: Name
    peak_tflops: Positive
    peak_source: Text


class Provenance(Strict):
    """Where the numbers came from; every key is present, null when it could not be determined.

    ``hostname`` is one host the run ran on, or null. A cluster run's record (``bench jobs
    collect``) knows ``kit_commit``, ``image`` and what the job printed of its image's digest; the
    scheduler's node list is in its notes (``nodelist``). Cluster records written before this held
    the node list in ``hostname``.

    ``image_digest`` is the identity of the image the run's container runtime started, read at run
    time, never from the plan; ``image_digest_kind`` says what it is: ``registry`` (a registry's
    manifest digest: the reference the runtime pulled was pinned ``@sha256:...``, or the engine's
    RepoDigests of the image it started), ``image-id`` (the engine's local image ID, the digest
    of the image's configuration: an image that never came from a registry) or ``file-sha256``
    (sha256 of the image file, ``.sqsh`` or ``.sif``, at job start). Both are null for a run
    without an image and where the runtime does not say (a tag pulled by pyxis); records written
    before the kind existed lack it.

    ``gpu_uuids`` are the UUIDs of the GPUs the run saw (nvidia-smi's ``uuid``, in
    ``CUDA_VISIBLE_DEVICES`` order): they name the physical machine, which ``hostname`` does not
    where every VM is called ``vm``. Null where unknown: records written before the field, cluster
    records (``bench jobs collect``), a driver that does not say.
    """

    kit_commit: Text | None
    megatron_core: Text | None
    torch: Text | None
    cuda: Text | None
    nccl: Text | None
    gpu_model: Text | None
    gpu_count: Count | None
    driver: Text | None
    image: Text | None
    image_digest: Annotated[str, hinted(r"^sha256:[0-9a-f]{64}$",
                                        "must be sha256:<64 lower-case hex digits>")] | None
    hostname: Text | None
    image_digest_kind: Literal["registry", "image-id", "file-sha256"] | None = None
    gpu_uuids: list[Name] | None = None

    @model_validator(mode="after")
    def _digest_has_kind(self) -> Provenance:
        if (self.image_digest is None) != (self.image_digest_kind is None):
            raise ValueError("image_digest and image_digest_kind are set together or not at all")
        return self


Implementation = Literal["te", "te+apex", "local"]
Digest16 = Annotated[str, hinted(r"^[0-9a-f]{16}$", "must be 16 lower-case hex digits")]


class DataInfo(Strict):
    """What a run trained on: ``mock`` (the engine's generated data) or ``real`` (a tokenized
    corpus: ``name`` is the last part of its ``--data-path`` prefix, ``path_sha256`` the first 16
    hex digits of the sha256 of that prefix as given, so runs on different corpora of one name
    stay apart)."""

    kind: Literal["mock", "real"]
    name: Text | None = None
    path_sha256: Digest16 | None = None


def data_info(path: str) -> DataInfo:
    """The :class:`DataInfo` of a run given ``path`` as its data prefix ("" or None: mock data)."""
    return DataInfo(**data_fields(path or ""))


class PatchSeries(Strict):
    """A patch series of the kit (``patches/<upstream>/``) as found in the tree a run trained
    with: ``sha256`` the first 16 hex digits of the series' digest, ``applied`` whether that tree
    had all of it, and if not, ``why``."""

    upstream: Text
    sha256: Digest16
    applied: bool
    why: Text | None = None


class Metrics(Strict):
    """Steady-state metrics over ``window_iters`` iterations after ``warmup_iters``.

    ``mfu`` is a fraction (0..1] of ``PlatformInfo.peak_tflops``; ``peak_mem_gb`` is the largest
    per-GPU allocation in GB, null when the platform cannot report it. ``mfu_bf16_peak`` is
    ``tflops_per_gpu`` over the accelerator's dense bf16 peak, for runs measured against another
    peak (fp8); null otherwise, and absent in records written before it existed.
    """

    warmup_iters: NonNegative
    window_iters: Count
    step_time_s_median: Positive
    step_time_s_p10: Positive
    step_time_s_p90: Positive
    samples_per_s: Positive
    tokens_per_s_per_gpu: Positive
    tflops_per_gpu: Positive
    mfu: Fraction
    flops_convention: Literal["megatron-causal"]
    tflops_per_gpu_noncausal: Positive | None
    mfu_noncausal: Fraction | None
    peak_mem_gb: Positive | None
    mfu_bf16_peak: Positive | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Metrics:
        if not self.step_time_s_p10 <= self.step_time_s_median <= self.step_time_s_p90:
            raise ValueError("step times must satisfy p10 <= median <= p90")
        return self


Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Profile(Strict):
    """Where the profiled steps' time went (``--profile``; :mod:`bench.measure.profile`), in
    milliseconds per step: the six classes from ``gemm`` to ``idle`` add up to ``step_ms``;
    ``comm_total`` is all communication, hidden behind compute or not. ``steps`` are the profiled
    steps, after the measured window; ``source`` says whose trace (rank 0's)."""

    steps: Count
    step_ms: Positive
    gemm: Milliseconds
    attention: Milliseconds
    optimizer: Milliseconds
    other: Milliseconds
    comm_exposed: Milliseconds
    idle: Milliseconds
    comm_total: Milliseconds
    kernels: Count
    source: Text = "rank 0"


class MemoryParts(Strict):
    """Bytes rank 0 held per part after its first optimizer step (:mod:`bench.train.memory_parts`):
    ``weights`` the model's parameters, ``gradients`` the gradient buffers, ``master`` the
    optimizer's master copies, ``moments`` its other state (Adam's moments and their scales);
    ``parameters`` the parameters on that rank. Sharded parts (the distributed optimizer's) are
    that rank's shard."""

    parameters: Count
    weights: NonNegative
    gradients: NonNegative
    master: NonNegative
    moments: NonNegative

    def per_parameter(self, part: str) -> float:
        """Bytes a parameter in ``part`` (one of weights, gradients, master, moments)."""
        return getattr(self, part) / self.parameters


class Record(Strict):
    """One run. Build it with :func:`build_record` or :func:`record_from_dict`; both validate.

    ``argv`` is the command each rank runs (``python <entry> <flags>``), for local and cluster runs
    alike; the launcher (torchrun, srun, mpiexec) is the platform's. Records of local runs written
    before this held the torchrun command line. ``log_errors`` holds the first error lines of a failed
    run's log before ``log_tail`` (the cause often scrolls out of the tail); older records lack it.

    What the record says beyond the shared schema keeps its kind: ``variant``, the settings away
    from the defaults of its schema version (A/B tuning, ZeRO settings, sequence length, recompute),
    which make the run a configuration of its own; ``engine_notes``, how the numbers were made (the
    engine's own TFLOP/s, DeepSpeed's version, the patch series: ``bench.records.engine_notes``);
    ``labels``, how the run was made (``sweep``, ``repeat_group``, ``campaign`` and ``campaign_run``, the
    campaign file's run name, in records since 2026-11-27), which never split
    a configuration; ``notes``, the kit's bookkeeping. ``lm_losses`` is the ``lm loss`` of every
    logged iteration in order, up to the first non-finite one (loss curves are drawn from it); older
    records lack it. ``profile``: where the time of the steps profiled after the window went
    (``--profile``), else null. ``memory_parts``: bytes held per part after the first step, as the
    kit's training entry printed them; null for other engines and for records written before it.
    ``expected``: what the step-time model expected (:mod:`bench.records.expected`), null where it
    expected nothing and before it; ``checkpoint``, the saves it timed
    (:mod:`bench.records.checkpoint`).
    """

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    schema_: Literal["bench.record/2"] = Field(SCHEMA, alias="schema")
    run_id: Annotated[str, hinted(r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                  "must be letters, digits, '.', '_' or '-' (it is the file name)")]
    status: Status
    reason: Text | None
    started_at: Timestamp
    finished_at: Timestamp | None
    engine: Literal["megatron", "megatron-deepspeed"]
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

    @property
    def ok(self) -> bool:
        """True when the run finished and has metrics."""
        return self.status is Status.OK

    @model_validator(mode="after")
    def _rules(self) -> Record:
        found = [*_time_problems(self), *_status_problems(self), *_layout_problems(self),
                 *_metrics_problems(self)]
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
    """A validated record from its keys but ``schema`` (nested parts as mappings or models);
    ``provenance`` keys default to null; what is left out is completed as in a ``bench.record/1``
    record (:mod:`bench.records.migrate`: the facts from the argv, MS-AMP's scaling as a variant).
    Raises :class:`RecordError`."""
    data = {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in fields.items()}
    data["provenance"] = {**dict.fromkeys(Provenance.model_fields), **(data.get("provenance") or {})}
    return record_from_dict(upgrade({**data, "schema": OLDER[0]}, SCHEMA))


def build_finished_record(failure_log_tail: Sequence[str] = (), **fields: Any) -> Record:
    """:func:`build_record` for a run that ended: metrics that fail the checks (an MFU above 1
    from an impossible step time) make it ``failed``, with the problems as reason, this log tail,
    and the numbers kept in ``notes`` as ``metrics.<name>`` (non-finite ones as text)."""
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
                               "metrics": None, "notes": notes, "log_tail": list(failure_log_tail)})
