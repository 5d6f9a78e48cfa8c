"""Precisions side by side: the runs of one setup that differ only in precision or in what built
the layers, one small table each, so that "fp8 is 1.23x bf16" is read from records, not typed.

Ok Megatron-Core records are grouped by setup: preset, layout, micro and global batch, the GPU
model with its memory cap (a run under ``--gpu-memory-cap`` is other hardware), data (mock, or the
corpus's name), measured iterations and kit commit (``provenance.kit_commit``; runs of several
commits share a table only with ``--pool-commits``): fp8 is set beside bf16 only at the same batch,
so an fp8 run at its larger default micro-batch (``bench.planning.microbatch``) needs a bf16 run
given that micro-batch. Within a group each column is one configuration: a precision, with the
layers' builder added where a group holds more than one (``bf16 TE``, ``bf16 TE+apex``, ``msamp-o2
TE modules``), and the variant where one is set. A column is every run of its configuration, so
one claim has one figure: the median TFLOP/s/GPU with its run count and spread
(:class:`bench.results.spread.Figure`), and its ratio to the group's bf16 column with that ratio's
noise (:class:`bench.results.spread.Ratio`). Machines of one GPU model differ by 10 % and more, and
one H200 pair ran te at 468.2 and 537.2 TFLOP/s/GPU ten minutes apart: that spread is the noise a
ratio carries, shown rather than hidden in several tables. The title names the hardware the runs
ran on, never a campaign's name. A group of two or more columns is a table on the page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS
from bench.measure.protocol import WARMUP_ITERS
from bench.planning.engines.table import ENGINES
from bench.records.record import Record
from bench.results.aggregate import median_run
from bench.results.losses import BASELINE  # the precision others are set against
from bench.results.spread import RATIO_WORDS, Figure, Ratio, commits_words, kit_commit
from bench.results.table import heading, link, number, table, text
from bench.results.words import CAP_KEY, TE_MODULES, group_title, layers, model_sort_key, settings, variant


@dataclass(frozen=True)
class Column:
    name: str  # precision, then the layers and variant where they tell columns apart
    runs: tuple[Record, ...]

    @property
    def run(self) -> Record:
        """The median run, whose record the column links."""
        return median_run(self.runs)


@dataclass(frozen=True)
class PrecisionGroup:
    title: str
    columns: tuple[Column, ...]

    @property
    def baseline(self) -> Column | None:
        return next((c for c in self.columns if c.run.precision == BASELINE), None)


def _key(run: Record, pool_commits: bool) -> tuple:
    data = run.data.name if run.data is not None and run.data.kind == "real" else "mock"
    lay = run.layout
    return (run.preset.name, lay.name, lay.micro_batch, lay.global_batch, run.platform.accelerator,
            run.variant.get(CAP_KEY), data, run.metrics.window_iters,
            None if pool_commits else kit_commit(run))


def _title(runs: Sequence[Record]) -> str:
    run, lay = runs[0], runs[0].layout
    return (group_title(run, f"micro/global batch {lay.micro_batch}/{lay.global_batch}",
                        f"{run.metrics.window_iters + WARMUP_ITERS} iterations")
            + f", {commits_words(runs)}")


def _name(run: Record, builders: int) -> str:
    # The cap is in the title; TE's modules around MS-AMP's linears are in the layers' name.
    hidden = {CAP_KEY, "msamp_modules"} if layers(run) == TE_MODULES else {CAP_KEY}
    shown = {key: value for key, value in settings(run).items() if key not in hidden}
    return " ".join(filter(None, (run.precision, layers(run) if builders > 1 else "", variant(shown))))


def side_by_side(runs: Sequence[Record], pool_commits: bool = False) -> list[PrecisionGroup]:
    """The groups of two or more columns, in model-size order, then by title."""
    grouped: dict[tuple, list[Record]] = defaultdict(list)
    for run in runs:
        if run.ok and ENGINES[run.engine].kit_layers:
            grouped[_key(run, pool_commits)].append(run)
    order = {p: i for i, p in enumerate(PRECISIONS)}
    groups = []
    for members in grouped.values():
        builders = len({layers(run) for run in members})
        columns: dict[str, list[Record]] = defaultdict(list)
        for run in members:
            columns[_name(run, builders)].append(run)
        if len(columns) < 2:
            continue
        ordered = sorted((Column(name, tuple(sorted(col, key=lambda r: r.run_id)))
                          for name, col in columns.items()),
                         key=lambda c: (order.get(c.run.precision, len(order)), c.name))
        groups.append(PrecisionGroup(_title(members), tuple(ordered)))
    return sorted(groups, key=lambda g: (model_sort_key(g.columns[0].run.preset.name), g.title))


def section(groups: Sequence[PrecisionGroup], records_link: str) -> list[str]:
    """One small table per group of runs that differ only in precision or layers."""
    if not groups:
        return []
    lines = ["## Precisions side by side", "",
             "Runs that differ only in precision or in what built the layers (TE, TE+apex, no TE, "
             "TE modules: MS-AMP's FP8 linears among Transformer Engine's modules): same model, "
             "layout, micro and global batch, GPU model and memory cap, data, iterations and kit "
             "commit (an fp8 run at its larger default micro-batch is set beside a bf16 run at "
             "that micro-batch only). A column is every run of one configuration: its median "
             "TFLOP/s per GPU (causal count) with the run count and lowest–highest, the ratio "
             f"to the group's {BASELINE} column with its noise, the median run's peak memory; "
             "each column links its median run's record (`bench/results/precisions.py`). "
             + RATIO_WORDS, ""]
    for group in groups:
        lines += [*heading(group.title), *_group_table(group, records_link), ""]
    return lines


def _group_table(group: PrecisionGroup, records_link: str) -> list[str]:
    """A column per precision: TFLOP/s per GPU, the ratio to the baseline's, peak memory."""
    base = group.baseline
    runs = [c.run for c in group.columns]
    header = [("", False), *((link(text(c.name), f"{records_link}/{c.run.run_id}.json"), True)
                             for c in group.columns)]
    ratio = [[f"× {BASELINE}", *("1" if c is base else Ratio.of(c.runs, base.runs).text()
                                 for c in group.columns)]] if base is not None else []
    return table(header, [["TFLOP/s/GPU", *(Figure.of_runs(c.runs).text() for c in group.columns)],
                          *ratio, ["peak memory (GB)", *(number(r.metrics.peak_mem_gb, 1) for r in runs)]])
