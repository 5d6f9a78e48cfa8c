"""Runs + published figures + reference ranges -> one report of rows grouped by model.

Ok runs of one configuration key (:func:`bench.records.identity.config_key`: everything that
changes the math or the speed, not the kit commit; split by kit commit too with ``by_commit``)
become one measured row: its TFLOP/s/GPU is the median of the runs (the mean of the middle two for
an even count) with their lowest, highest and CV (:class:`bench.results.spread.Figure`); its other
cells are the middle run's (the lower middle for an even count, ties broken by run id), whose
record the row links. A row is headline grade or quick (:mod:`bench.records.headline`): only a
headline row may be a "best". Failed runs (any status but ok) never enter a throughput table.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS
from bench.planning.layout import LayoutSpec
from bench.planning.tuning import TUNING_NOTE_KEYS
from bench.records.headline import Grade, grade, long_runs
from bench.records.identity import config_key
from bench.records.record import LayoutInfo, Record
from bench.records.store import Problem
from bench.results.data import Published, PublishedRow, ReferenceRange
from bench.results.hardware import hardware_id
from bench.results.runs import label_of
from bench.results.spread import Figure, commits_words, kit_commit
from bench.results.words import CAP_KEY, engine_words, layers, model_sort_key, recipe, variant_text


class Verdict(enum.StrEnum):
    """How a row compares with its reference range."""

    IN_RANGE = "in range"
    BELOW = "below range"
    ABOVE = "above range"
    NO_RANGE = "no range"
    PUBLISHED = "published"


@dataclass(frozen=True)
class Row:
    """One table row, measured or published; None renders as a dash.

    ``link`` is a record file name (measured) or a source address (published, None if it has
    none); ``label`` is the link text. ``percent_of_peak`` is 0-100 in ``flops_convention``.
    ``sweep`` is the sweep id in the shown run's labels (``sweep`` or ``sweep_id``), else None.
    """

    published: bool
    model: str
    platform: str
    accelerator: str  # the record's platform.accelerator, or the published row's
    engine: str
    precision: str
    nodes: int | None
    gpus: int | None
    layout: str | None
    tp: int | None
    pp: int | None
    dp: int | None
    vp: int | None
    cp: int | None
    sp: bool | None
    zero: int | None
    micro_batch: int | None
    global_batch: int | None
    samples_per_s: float | None
    tokens_per_s_per_gpu: float | None
    tflops_per_gpu: float | None
    percent_of_peak: float | None
    flops_convention: str
    peak_mem_gb: float | None
    date: str | None
    runs: int | None
    label: str
    link: str | None
    variant: str
    sweep: str | None
    reference: ReferenceRange | None
    verdict: Verdict
    # fp8 rows: TFLOP/s/GPU over the bf16 dense peak, 0-100 (``percent_of_peak`` is over fp8's).
    percent_of_bf16_peak: float | None = None
    figure: Figure | None = None  # measured rows: the median, n and spread of the runs' TFLOP/s/GPU
    commits: str = ""  # measured rows: "kit 74d8988" (or "kits ..." where pooled)
    memory_cap_gb: str | None = None  # the --gpu-memory-cap the runs planned with, if any
    key: str = ""  # measured rows: the configuration key's digest (bench.records.identity)
    grade: Grade | None = None  # measured rows: headline or quick
    evidenced: int | None = None  # measured rows: how many of the runs have a series or a kept log
    recipe: str = ""  # a recipe that changes the training math (bench.results.words.recipe)
    best_figure: Figure | None = None  # headline rows: the figure of their long runs

    @property
    def flagged(self) -> bool:
        return self.verdict in (Verdict.BELOW, Verdict.ABOVE)


@dataclass(frozen=True)
class ModelTable:
    """All rows of one model size; ``shapes`` describes the measured presets of that name."""

    model: str
    shapes: tuple[str, ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Report:
    """Everything the markdown, the plots and the check need, in a stable order."""

    tables: tuple[ModelTable, ...]
    failed: tuple[Record, ...]
    problems: tuple[Problem, ...]
    ok_runs: int

    @property
    def measured_rows(self) -> list[Row]:
        return [row for table in self.tables for row in table.rows if not row.published]

    @property
    def flagged_rows(self) -> list[Row]:
        return [row for row in self.measured_rows if row.flagged]

    @property
    def best_rows(self) -> list[Row]:
        """The headline-grade row with the most median TFLOP/s/GPU (of its long runs) per model,
        precision and recipe, and accelerator: one GPU model's figure never stands for another's,
        and a quick row is never a best. In table order of model and precision, each precision's
        rows side by side by accelerator name."""
        best: dict[tuple[str, str, str], Row] = {}
        for row in self.measured_rows:  # a capped GPU is its own hardware, never the larger's best
            if row.best_figure is None:
                continue
            key = (row.model, " ".join(filter(None, (row.precision, row.recipe))),
                   hardware_id(row.accelerator) + (f" capped at {row.memory_cap_gb} GB" if row.memory_cap_gb else ""))
            if key not in best or row.best_figure.median > best[key].best_figure.median:  # type: ignore[union-attr]
                best[key] = row
        first_seen = {key[:2]: i for i, key in reversed(list(enumerate(best)))}
        return [best[key] for key in sorted(best, key=lambda k: (first_seen[k[:2]], k[2]))]

    @property
    def quick_rows(self) -> int:
        """How many measured rows are quick: shown, never a best."""
        return sum(1 for row in self.measured_rows if row.grade is Grade.QUICK)


def _sweep(run: Record) -> str | None:
    sweep = run.labels.get("sweep", run.labels.get("sweep_id"))
    return None if sweep is None else str(sweep)


def configuration(run: Record, by_commit: bool = False) -> tuple[str, str | None]:
    """What makes two runs the same configuration (ok runs of one are pooled): its key's digest,
    and with ``by_commit`` the kit commit too."""
    return config_key(run).digest, kit_commit(run) if by_commit else None


def _shape(run: Record) -> str:
    p = run.preset
    return (f"{p.layers} layers, hidden {p.hidden}, {p.heads} heads, "
            f"sequence {p.seq_length}, vocabulary {p.vocab_size}")


def layout_matches(spec: LayoutSpec, layout: LayoutInfo) -> bool:
    """Whether a run's layout has the degrees a layout name asks for (DP only when named)."""
    return (
        (spec.tp, spec.pp, spec.cp, spec.vp, spec.sp, spec.zero)
        == (layout.tp, layout.pp, layout.cp, layout.vp or 1, layout.sp, layout.zero)
        and spec.dp in (None, layout.dp)
    )


def find_range(ranges: Sequence[ReferenceRange], run: Record) -> ReferenceRange | None:
    """The first reference range that matches the run's configuration, or None."""
    for entry in ranges:
        wanted = (
            (entry.platform, run.platform.name),
            (entry.accelerator, run.platform.accelerator),
            (entry.model, run.preset.name),
            # A range without a precision was measured in bf16, on the megatron engine without
            # Transformer Engine unless it names them: it judges only runs like that.
            (entry.precision or "bf16", run.precision),
            (entry.layers or "no TE", layers(run) or "no TE"),
            (entry.engine or "megatron", run.engine),
            (entry.micro_batch, run.layout.micro_batch),
            (entry.global_batch, run.layout.global_batch),
            (entry.gpus, run.gpus),
        )
        if any(want is not None and want != have for want, have in wanted):
            continue
        spec = entry.layout_spec
        if spec is not None and not layout_matches(spec, run.layout):
            continue
        wanted_variant = entry.variant or {}
        if any(run.variant.get(k) != v for k, v in wanted_variant.items()):
            continue
        # An A/B setting away from the kit's defaults is judged only by a range that names it.
        if any(run.variant.get(k) != wanted_variant.get(k) for k in TUNING_NOTE_KEYS):
            continue
        return entry
    return None


def _verdict(entry: ReferenceRange | None, value: float) -> Verdict:
    if entry is None:
        return Verdict.NO_RANGE
    if value < entry.low:
        return Verdict.BELOW
    if value > entry.high:
        return Verdict.ABOVE
    return Verdict.IN_RANGE


def median_run(runs: Sequence[Record]) -> Record:
    """The run a configuration's row shows: the median of its ok runs by TFLOP/s/GPU (the lower
    median for an even count, ties broken by run id)."""
    ranked = sorted(runs, key=lambda r: (r.metrics.tflops_per_gpu, r.run_id))  # type: ignore[union-attr]
    return ranked[(len(ranked) - 1) // 2]


def _fp8_peak(name: str) -> bool:
    """Whether a record's precision is measured against fp8's peak (False for a precision the kit
    does not offer)."""
    precision = PRECISIONS.get(name)
    return precision is not None and precision.peak == "fp8"


def _measured_row(runs: list[Record], ranges: Sequence[ReferenceRange], evidenced: frozenset[str]) -> Row:
    median = median_run(runs)
    graded = grade(runs)
    m, lay = median.metrics, median.layout
    assert m is not None  # only ok runs are grouped, and ok runs have metrics
    entry = find_range(ranges, median)
    return Row(
        published=False, model=median.preset.name.lower(), platform=label_of(median),
        accelerator=median.platform.accelerator,
        engine=engine_words(median),
        precision=median.precision, nodes=median.nodes, gpus=median.gpus,
        layout=lay.name, tp=lay.tp, pp=lay.pp, dp=lay.dp, vp=lay.vp, cp=lay.cp, sp=lay.sp,
        zero=lay.zero, micro_batch=lay.micro_batch, global_batch=lay.global_batch,
        samples_per_s=m.samples_per_s, tokens_per_s_per_gpu=m.tokens_per_s_per_gpu,
        tflops_per_gpu=m.tflops_per_gpu, percent_of_peak=m.mfu * 100,
        flops_convention=m.flops_convention, peak_mem_gb=m.peak_mem_gb,
        date=median.started_at[:10], runs=len(runs), label=median.run_id,
        link=f"{median.run_id}.json", variant=variant_text(median),
        sweep=_sweep(median), reference=entry,
        verdict=_verdict(entry, m.tflops_per_gpu),
        # Only fp8 is measured against a peak other than bf16's (older fp16 records carry both).
        percent_of_bf16_peak=(m.mfu_bf16_peak * 100 if m.mfu_bf16_peak is not None
                              and _fp8_peak(median.precision) else None),
        figure=Figure.of_runs(runs), commits=commits_words(runs),
        memory_cap_gb=_cap(median), key=config_key(median).digest, grade=graded,
        evidenced=sum(1 for run in runs if run.run_id in evidenced), recipe=recipe(median),
        best_figure=Figure.of_runs(long_runs(runs)) if graded is Grade.HEADLINE else None,
    )  # fmt: skip


def _cap(run: Record) -> str | None:
    cap = run.variant.get(CAP_KEY)
    return None if cap is None else str(cap)


def _published_row(row: PublishedRow, published: Published) -> Row:
    source = published.sources[row.source]
    tokens = row.tokens_per_s_per_gpu
    if tokens is None and None not in (row.samples_per_s, row.seq_length, row.gpus):
        tokens = row.samples_per_s * row.seq_length / row.gpus  # type: ignore[operator]
    return Row(
        published=True, model=row.model.lower(), platform=row.platform,
        accelerator=row.accelerator, engine=row.engine,
        precision=row.precision, nodes=row.nodes, gpus=row.gpus, layout=None, tp=row.tp,
        pp=row.pp, dp=row.dp, vp=row.vp, cp=row.cp, sp=row.sp, zero=row.zero,
        micro_batch=row.micro_batch, global_batch=row.global_batch,
        samples_per_s=row.samples_per_s, tokens_per_s_per_gpu=tokens,
        tflops_per_gpu=row.tflops_per_gpu, percent_of_peak=row.percent_of_peak,
        flops_convention=row.flops_convention, peak_mem_gb=row.peak_mem_gb, date=source.date,
        runs=None, label=source.title, link=source.link, variant=row.note or "", sweep=None,
        reference=None, verdict=Verdict.PUBLISHED,
    )  # fmt: skip


def _measured_order(row: Row) -> tuple:
    return (row.platform, row.engine, row.precision, row.gpus, row.tp, row.pp, row.dp, row.cp,
            row.vp or 0, -1 if row.zero is None else row.zero, row.sp, row.micro_batch,
            row.global_batch, row.variant, row.commits, row.key, row.label)


def build_report(
    runs: Sequence[Record],
    problems: Sequence[Problem],
    published: Published,
    ranges: Sequence[ReferenceRange],
    by_commit: bool = False,
    evidenced: frozenset[str] = frozenset(),
) -> Report:
    """Group, select and order everything; the result does not depend on the input order. Runs
    of different kit commits share a row unless ``by_commit``; ``evidenced`` are the run ids with
    a series or a kept log (:func:`bench.results.evidence.evidenced`)."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    shapes: dict[str, set[str]] = defaultdict(set)
    failed = []
    for run in runs:
        if run.ok:
            groups[configuration(run, by_commit)].append(run)
            shapes[run.preset.name.lower()].add(_shape(run))
        else:
            failed.append(run)
    by_model: dict[str, list[Row]] = defaultdict(list)
    for group in groups.values():
        row = _measured_row(group, ranges, evidenced)
        by_model[row.model].append(row)
    for rows in by_model.values():
        rows.sort(key=_measured_order)
    for published_row in published.rows:  # file order: the order the sources print them
        row = _published_row(published_row, published)
        by_model[row.model].append(row)
    tables = tuple(
        ModelTable(model, tuple(sorted(shapes.get(model, ()))), tuple(by_model[model]))
        for model in sorted(by_model, key=model_sort_key)
    )
    failed.sort(key=lambda r: (r.started_at, r.run_id))
    return Report(
        tables=tables,
        failed=tuple(failed),
        problems=tuple(sorted(problems, key=lambda p: p.file)),
        ok_runs=sum(len(group) for group in groups.values()),
    )
