"""A record's metrics computed again from its evidence, with the kit's own protocol.

The measured iterations are the logged ones up to the run's ``--train-iters``, or up to the
profiler's lead steps where it profiled (those steps ran slower and never counted);
:func:`bench.measure.protocol.metrics` turns them into the record's metrics with the kit's one
FLOPs function, the record's own peak and its layout's global batch and GPU count, exactly as
:func:`bench.records.build.build_run_record` did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from bench.config.platforms import load_accelerator
from bench.config.precisions import PRECISIONS
from bench.config.presets import Preset
from bench.config.tomlfile import DataError
from bench.measure.logparse import Iteration
from bench.measure.profile import PROFILE_LEAD_STEPS
from bench.measure.protocol import metrics
from bench.records.claims import flag_value
from bench.records.evidence import SeriesPoint
from bench.records.record import Record

RTOL = 1e-6
"""How far (relative) a recomputed metric may lie from the record's: 1e-6 by default. The record
was computed from the very numbers the log prints, so the two agree but for floating-point
rounding of another order of operations (about 1e-15), while the smallest change a log can print,
0.1 ms of one step time, is 1e-6 of a 100 s step: any figure it moves is seen."""
PROFILE_LEAD_SINCE = datetime(2026, 11, 25, 22, 17, 9, tzinfo=UTC)
"""When the profiler's lead steps came in: a run profiled with ``--profile`` measures up to
``--profile-step-start`` less :data:`bench.measure.profile.PROFILE_LEAD_STEPS`; one started before
this time measured up to ``--profile-step-start`` itself (its records say so: their window ends
there). A run made afterwards with an older checkout shows as a mismatch of ``window_iters``."""
METRIC_FIELDS = ("warmup_iters", "window_iters", "step_time_s_median", "step_time_s_p10",
                 "step_time_s_p90", "samples_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu",
                 "flops_convention", "tflops_per_gpu_noncausal", "mfu_noncausal")
"""The metrics every recomputation checks; ``peak_mem_gb`` needs the whole log (the series keeps
the memory reports after iterations only) and ``mfu_bf16_peak`` the accelerator file, so each is
checked where that is at hand."""


def last_measured(record: Record) -> int | None:
    """The run's last measured iteration: its ``--train-iters``, or with ``--profile`` the step
    before the profiler's lead steps (:data:`PROFILE_LEAD_SINCE`); None where the argv says neither."""
    start = flag_value(record.argv, "--profile-step-start")
    if "--profile" in record.argv and start is not None and start.isdigit():
        lead = PROFILE_LEAD_STEPS if datetime.fromisoformat(record.started_at) >= PROFILE_LEAD_SINCE else 0
        return int(start) - lead
    value = flag_value(record.argv, "--train-iters")
    return int(value) if value is not None and value.isdigit() else None


def measured(iterations: Sequence[Iteration], last: int | None) -> tuple[Iteration, ...]:
    """The iterations up to ``last`` (all of them when None): those the protocol measures."""
    return tuple(it for it in iterations if last is None or it.index <= last)


def iterations_of(series: Sequence[SeriesPoint]) -> tuple[Iteration, ...]:
    """The series as the parser's iterations: what the protocol reads of them is the index and
    the step time."""
    return tuple(Iteration(index=point.iteration, total=point.iteration, elapsed_ms=point.step_ms,
                           tflops_per_gpu=None, lm_loss=point.lm_loss, global_batch=None,
                           nan_iterations=0, skipped_iterations=0, samples_per_s=None,
                           grad_norm=point.grad_norm) for point in series)


def preset_of(record: Record) -> Preset:
    """The model the run trained: the record's shape with the argv's ``--ffn-hidden-size``
    (4 x hidden where it has none), which the FLOPs count uses and the record does not carry."""
    p, lay = record.preset, record.layout
    ffn = flag_value(record.argv, "--ffn-hidden-size")
    return Preset(name=p.name, layers=p.layers, hidden=p.hidden, heads=p.heads, seq_length=p.seq_length,
                  vocab_size=p.vocab_size, micro_batch=lay.micro_batch, global_batch=lay.global_batch,
                  ffn_hidden=int(ffn) if ffn is not None and ffn.isdigit() else 4 * p.hidden)


def bf16_peak(record: Record) -> float | None:
    """The dense bf16 peak a run measured against another format's peak (fp8) is also compared
    with, from its accelerator's file; None for a bf16/fp16 run or an accelerator this kit lacks."""
    precision = PRECISIONS.get(record.precision)
    if precision is not None and precision.peak == "bf16":
        return None
    try:
        return load_accelerator(record.platform.accelerator).peak_tflops.get("bf16")
    except DataError:
        return None


def recomputed(record: Record, iterations: Sequence[Iteration],
               peak_mem_gb: float | None) -> dict[str, object]:
    """The record's metrics from ``iterations`` (all logged ones; the measured are chosen here).
    Raises :class:`bench.measure.protocol.ShortWindow` or ValueError as the protocol does, DataError for a record whose
    model is no model."""
    return metrics(measured(iterations, last_measured(record)), preset_of(record),
                   record.layout.global_batch, record.gpus, record.platform.peak_tflops,
                   peak_mem_gb, bf16_peak(record))


def differences(record: Record, found: dict[str, object],
                fields: Sequence[str]) -> list[tuple[str, object, object]]:
    """(field, recorded, recomputed) of each of ``fields`` where the two differ beyond :data:`RTOL`."""
    out: list[tuple[str, object, object]] = []
    if record.metrics is None:  # only ok records have metrics to compare
        return out
    for field in fields:
        mine, theirs = getattr(record.metrics, field), found.get(field)
        if not _same(mine, theirs):
            out.append((f"metrics.{field}", mine, theirs))
    return out


def _same(recorded: object, again: object) -> bool:
    if isinstance(recorded, float | int) and isinstance(again, float | int):
        return math.isclose(recorded, again, rel_tol=RTOL)
    return recorded == again

