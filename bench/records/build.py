"""A run's record, built in one place from its plan summary and its outcome.

The plan summary (:class:`PlanSummary`) is what a record needs of a plan, peak and its source
included; it is saved as ``plan.json`` in the run directory when the run starts, so a record made
later (``bench jobs collect``) does not depend on data files that may have changed since. The local
runner and ``collect`` both call :func:`build_run_record`; the fields mean the same for both:
``argv`` is the command each rank runs, ``provenance`` what could be read where it ran.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from pydantic_core import to_jsonable_python

from bench.config.precisions import PRECISIONS
from bench.config.presets import Preset
from bench.config.schema import Strict
from bench.measure.logparse import LOG_TAIL_LINES, ParseResult, first_error_lines, log_lines
from bench.measure.protocol import ShortWindow, metrics
from bench.planning.plan import LaunchPlan
from bench.records.checkpoint import STATES_VARIANT, Checkpoint, checkpoint_of
from bench.records.evidence import LogFile, series_of
from bench.records.expected import Expected, expected_of
from bench.records.migrate import facts_from_argv
from bench.records.record import (
    Conditions,
    DataInfo,
    Implementation,
    JsonScalar,
    LayoutInfo,
    MemoryParts,
    PatchSeries,
    PlatformInfo,
    PresetInfo,
    Profile,
    Record,
    Status,
    build_finished_record,
    data_info,
)


class PlanSummary(Strict):
    """What a record needs of a plan: ``plan.json`` in the run directory."""

    run_id: str
    preset: Preset
    layout: LayoutInfo
    platform: PlatformInfo
    # The dense bf16 peak for runs measured against another format's peak (fp8); else None.
    bf16_peak_tflops: float | None
    engine: str
    precision: str
    nodes: int
    gpus_per_node: int
    world_size: int
    iters: int
    image: str
    train_argv: tuple[str, ...]  # the command of each rank: python <entry> <flags>
    env: dict[str, str]
    variant: dict[str, str]  # non-default performance settings (bench.planning.tuning)
    labels: dict[str, str] = {}  # sweep, repeat group, campaign: grouping, not settings
    # The record's fields of the same names; a plan.json written before them has neither, and
    # its record reads them back from the argv (bench.records.record).
    implementation: Implementation | None = None
    data: DataInfo | None = None
    expected: Expected | None = None  # the step-time model's (bench.records.expected)


def _fields(plan: LaunchPlan) -> dict[str, object]:
    """Every field of the plan summary but the platform and the peaks, which need the GPU."""
    lay = plan.layout
    return dict(
        run_id=plan.run_id, preset=plan.preset,
        layout=LayoutInfo(name=lay.name, tp=lay.tp, pp=lay.pp, dp=lay.dp, vp=lay.vp, cp=lay.cp,
                          sp=lay.sp, zero=lay.zero, micro_batch=lay.micro_batch,
                          global_batch=lay.global_batch),
        engine=plan.engine, precision=plan.precision.name, nodes=plan.nodes,
        gpus_per_node=plan.gpus_per_node, world_size=plan.world_size, iters=plan.iters,
        image=plan.image, train_argv=plan.train_argv, env=dict(plan.env),
        variant=dict(plan.variant), labels=dict(plan.labels),
        implementation=plan.implementation, data=data_info(plan.data_path),
        expected=expected_of(plan.expected))


def plan_summary(plan: LaunchPlan) -> PlanSummary:
    """The summary of a plan whose accelerator (hence peak) is known."""
    acc = plan.accelerator
    if acc is None:
        raise ValueError("the GPU model is unknown to the kit, so MFU cannot be computed: add "
                         "its file to platforms/accelerators/ (dense peak and source)")
    return PlanSummary(
        **_fields(plan),
        platform=PlatformInfo(name=plan.platform.name, accelerator=acc.name,
                              peak_tflops=acc.peak(plan.precision), peak_source=acc.peak_source),
        bf16_peak_tflops=plan.bf16_peak_tflops)


def plan_preview(plan: LaunchPlan, summary: PlanSummary | None = None) -> dict[str, object]:
    """``plan.json`` as plain data for ``--json`` (``summary``: the plan's, where the caller has
    made it already); a plan for a GPU the kit cannot name (a dry run on a machine without one)
    has the platform's name only and no peaks."""
    if summary is not None or plan.accelerator is not None:
        return (summary or plan_summary(plan)).model_dump(mode="json")
    platform = {"name": plan.platform.name, "accelerator": None, "peak_tflops": None,
                "peak_source": None}
    return {**to_jsonable_python(_fields(plan)), "platform": platform, "bf16_peak_tflops": None}


def build_run_record(plan: PlanSummary, status: Status | str, reason: str | None,
                     started_at: str, finished_at: str | None, parsed: ParseResult | None,
                     log_text: str, provenance: Mapping[str, object],
                     notes: Mapping[str, JsonScalar],
                     engine_notes: Mapping[str, JsonScalar] | None = None,
                     patches: Sequence[PatchSeries] = (),
                     profile: Profile | None = None, log: LogFile | None = None,
                     conditions: Conditions | None = None) -> Record:
    """The validated record of a run; only an ok run with enough, plausible iterations gets
    metrics (implausible ones make it a failed record: :func:`bench.records.record.build_finished_record`).

    ``parsed`` is the log parser's result (None when the log was not parsed): every run keeps its
    logged iterations (``series``) and the log's last lines, a failed one also the first error lines
    before them; ``log`` is the train log as kept beside the records
    (:func:`bench.records.evidence.write_log`), None where it could not be kept. ``notes`` is the
    kit's bookkeeping (a cluster job's id and state), ``engine_notes`` how the numbers were made
    (:mod:`bench.records.engine_notes`); the plan gives the variant and the labels, what built the
    layers and the data; ``patches`` are the kit's patch series as found in the tree that ran. Only
    the plan's ``iters`` are measured: steps trained after them were profiled (``profile``), which
    slows them. The bytes held per part (``memory_parts``) are kept whatever the status: they were
    measured after the first step; so are the timed checkpoint saves (``checkpoint``).
    ``conditions``: what the GPUs and host were while the run went
    (:mod:`bench.running.conditions`), None where not watched.
    """
    status, run_metrics = Status(status), None
    if status is Status.OK:
        try:
            if parsed is None:
                raise ShortWindow("the run's log was not parsed")
            measured = tuple(it for it in parsed.iterations if it.index <= plan.iters)
            run_metrics = metrics(measured, plan.preset, plan.layout.global_batch,
                                  plan.world_size, plan.platform.peak_tflops, parsed.peak_mem_gb,
                                  plan.bf16_peak_tflops)
        except ShortWindow as exc:  # too few iterations for the measurement window
            status, reason = Status.INCOMPLETE, str(exc)
        except ValueError as exc:  # timings that are not measurements (zero step time)
            status, reason = Status.FAILED, str(exc)
    facts = ({"implementation": plan.implementation, "data": plan.data}
             if "data" in plan.model_fields_set else _facts_of_old_plan(plan))
    lines = log_lines(log_text)  # bounded: a record stays loadable (MAX_LINE_CHARS)
    errors = first_error_lines(lines[:-LOG_TAIL_LINES]) if status is not Status.OK else []
    p = plan.preset
    return build_finished_record(
        run_id=plan.run_id, status=status, reason=reason, started_at=started_at,
        finished_at=finished_at, engine=plan.engine, precision=plan.precision,
        preset=PresetInfo(name=p.name, layers=p.layers, hidden=p.hidden, heads=p.heads,
                          seq_length=p.seq_length, vocab_size=p.vocab_size),
        layout=plan.layout, platform=plan.platform, nodes=plan.nodes, gpus=plan.world_size,
        argv=plan.train_argv, env=plan.env, provenance=provenance, metrics=run_metrics,
        log_tail=lines[-LOG_TAIL_LINES:], log_errors=errors, log=log,
        series=series_of(parsed, plan.layout.global_batch, p.seq_length),
        notes=notes, variant=plan.variant, engine_notes=engine_notes or {}, labels=plan.labels,
        lm_losses=list(itertools.takewhile(math.isfinite, parsed.losses)) if parsed else [],
        patches=[series.model_dump() for series in patches],
        profile=profile if status is Status.OK else None,
        memory_parts=MemoryParts(**vars(parsed.memory_parts)) if parsed and parsed.memory_parts else None,
        expected=plan.expected, checkpoint=_checkpoint(plan, parsed), conditions=conditions, **facts)


def _checkpoint(plan: PlanSummary, parsed: ParseResult | None) -> Checkpoint | None:
    """The record's ``checkpoint`` of the saves the log timed; the estimate of their bytes needs
    the plan's optimizer states (a variant where not megatron-core's default)."""
    states = str(plan.variant.get(STATES_VARIANT, "default"))
    return checkpoint_of(parsed.checkpoint_saves if parsed else (), plan.preset,
                         PRECISIONS.get(plan.precision), states)


def _facts_of_old_plan(plan: PlanSummary) -> dict[str, object]:
    """What built the layers and the data of a ``plan.json`` written before the plan carried
    them (a cluster job planned by an older kit): read from its argv, as older records are."""
    found = facts_from_argv({"argv": list(plan.train_argv)})
    return {"implementation": found["implementation"], "data": found["data"]}
