"""What fits a smaller GPU: the Megatron-Core runs made with ``--gpu-memory-cap``, those that trained
and those that ran out of memory, one table per cap, model, layout, global batch, GPU and data.

A row is one run: its configuration (precision, what built the layers, the variant but the cap),
micro-batch, status, TFLOP/s per GPU and peak memory, in configuration then micro-batch order.
Every run is a row, not the newest of each configuration: whether a micro-batch fits is the same
question on any machine, its TFLOP/s are not, so each row names its day and links its record. Each
table ends with each configuration's largest micro-batch that trained and its fastest run: what the
kit's FP8-LM target asks of 80 GB ("the largest micro-batch each fits, and each one's best TFLOP/s").

Where a model ran under one cap in more than one layout (6.7b: te's own states need tp2 where the
paper's fit dp2), :func:`best_layouts` sets each configuration's fastest run across the layouts
side by side: where memory binds, what each precision and optimizer trains at its best.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.measure.oom import fragmented
from bench.planning.engines.registry import ENGINES
from bench.records.record import Record
from bench.results.table import DASH, heading, number, record_link, table, text
from bench.results.words import CAP_KEY, group_title, layers, model_name, model_sort_key, settings, variant


@dataclass(frozen=True)
class FitRow:
    configuration: str  # precision, layers and variant, the cap left out
    run: Record


@dataclass(frozen=True)
class FitGroup:
    title: str
    rows: tuple[FitRow, ...]

    def largest(self) -> dict[str, Record]:
        """Each configuration's ok run at its largest micro-batch (the fastest of those)."""
        return self._best(lambda run: (run.layout.micro_batch, run.metrics.tflops_per_gpu))

    def fastest(self) -> dict[str, Record]:
        """Each configuration's fastest ok run, at any micro-batch."""
        return self._best(lambda run: (run.metrics.tflops_per_gpu,))

    def _best(self, rank: Callable[[Record], tuple[float, ...]]) -> dict[str, Record]:
        best: dict[str, Record] = {}
        for row in self.rows:
            held = best.get(row.configuration)
            if row.run.metrics is not None and (held is None or rank(row.run) > rank(held)):
                best[row.configuration] = row.run
        return best


def _configuration(run: Record) -> str:
    others = {key: value for key, value in settings(run).items() if key != CAP_KEY}
    return " ".join(filter(None, (run.precision, layers(run), variant(others))))


def _title(run: Record) -> str:
    return group_title(run, f"global batch {run.layout.global_batch}")


def fit_groups(runs: Sequence[Record]) -> list[FitGroup]:
    """The capped runs that trained or ran out of memory, grouped; in model-size order."""
    grouped: dict[str, list[Record]] = defaultdict(list)
    for run in runs:
        if ENGINES[run.engine].kit_layers and CAP_KEY in run.variant and (run.ok or run.status == "oom"):
            grouped[_title(run)].append(run)
    groups = [FitGroup(title, tuple(FitRow(_configuration(run), run) for run in sorted(
        members, key=lambda r: (_configuration(r), r.layout.micro_batch, r.started_at))))
        for title, members in grouped.items()]
    return sorted(groups, key=lambda g: (model_sort_key(g.rows[0].run.preset.name), g.title))


@dataclass(frozen=True)
class BestLayouts:
    """One model's capped runs over several layouts: each configuration's fastest run, fastest
    first, and the configurations that trained in none."""

    title: str
    best: tuple[FitRow, ...]
    none_trained: tuple[str, ...]


def _across_layouts(run: Record) -> str:
    return group_title(run, f"global batch {run.layout.global_batch}",
                       head=f"{model_name(run)} on {run.gpus} GPUs")


def best_layouts(groups: Sequence[FitGroup]) -> list[BestLayouts]:
    """Per model, GPU count, global batch, cap, GPU and data with more than one layout group."""
    by_model: dict[str, list[FitGroup]] = defaultdict(list)
    for group in groups:
        by_model[_across_layouts(group.rows[0].run)].append(group)
    result = []
    for title, members in by_model.items():
        if len({group.title for group in members}) < 2:
            continue
        fastest: dict[str, Record] = {}
        for group in members:
            for configuration, run in group.fastest().items():
                held = fastest.get(configuration)
                if held is None or run.metrics.tflops_per_gpu > held.metrics.tflops_per_gpu:
                    fastest[configuration] = run
        tried = {row.configuration for group in members for row in group.rows}
        best = sorted(fastest.items(), key=lambda item: -item[1].metrics.tflops_per_gpu)
        result.append(BestLayouts(title, tuple(FitRow(c, run) for c, run in best),
                                  tuple(sorted(tried - set(fastest)))))
    return result


FIT_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("configuration", False), ("micro-batch", True), ("status", False), ("TFLOP/s/GPU", True),
    ("peak memory (GB)", True), ("day", False), ("record", False))


def _fit_cells(run: Record, configuration: str, records_link: str) -> list[str]:
    ok = run.metrics is not None
    status = "ok" if ok else "out of memory, fragmented" if fragmented(run.log_errors) else "out of memory"
    return [text(configuration), str(run.layout.micro_batch), status,
            number(run.metrics.tflops_per_gpu, 1) if ok else DASH,
            number(run.metrics.peak_mem_gb, 1) if ok else DASH, run.started_at[:10],
            record_link(run, records_link)]


ACROSS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("configuration", False), ("layout", False), ("micro-batch", True), ("TFLOP/s/GPU", True),
    ("peak memory (GB)", True), ("day", False), ("record", False))


def _across_cells(run: Record, configuration: str, records_link: str) -> list[str]:
    assert run.metrics is not None  # best_layouts keeps runs that trained
    return [text(configuration), run.layout.name, str(run.layout.micro_batch),
            number(run.metrics.tflops_per_gpu, 1), number(run.metrics.peak_mem_gb, 1),
            run.started_at[:10], record_link(run, records_link)]


def section(groups: Sequence[FitGroup], records_link: str) -> list[str]:
    """What trained and what ran out of memory under --gpu-memory-cap."""
    if not groups:
        return []
    lines = ["## What fits a smaller GPU", "",
             "Megatron-Core runs planned and trained with `--gpu-memory-cap` (torch's allocator "
             "capped, docs/running.md), every one a row: the configuration (precision, layers, "
             "variant), micro-batch, whether it trained or ran out of memory (`fragmented` where "
             "torch's account says fragmentation caused it, bench/measure/oom.py: such a run may "
             "train with `--allocator expandable`), TFLOP/s per GPU (causal count) and peak "
             "memory. Whether a micro-batch fits is the same on any machine; TFLOP/s are the "
             "day's machine's, so compare them within a day "
             "(`bench/results/fits.py`).", ""]
    for group in groups:
        lines += _group_lines(group, records_link)
    for across in best_layouts(groups):
        lines += _across_lines(across, records_link)
    return lines


def _group_lines(group: FitGroup, records_link: str) -> list[str]:
    """One cap's table, then each configuration's largest micro-batch and fastest run."""
    lines = [*heading(group.title), *table(FIT_COLUMNS, [
        _fit_cells(row.run, row.configuration, records_link) for row in group.rows]), ""]
    largest, fastest = group.largest(), group.fastest()
    for configuration, run in largest.items():
        best = fastest[configuration]
        lines.append(f"- {text(configuration)}: largest micro-batch that trained "
                     f"{run.layout.micro_batch}; fastest {number(best.metrics.tflops_per_gpu, 1)} "
                     f"TFLOP/s/GPU at micro-batch {best.layout.micro_batch} "
                     f"({record_link(best, records_link)})")
    if not largest:
        lines.append("- Nothing trained under this cap.")
    return [*lines, ""]


def _across_lines(across: BestLayouts, records_link: str) -> list[str]:
    lines = [*heading(f"{across.title}: each configuration at its fastest layout"),
             "Where memory binds, a configuration that does not fit one layout may train in "
             "another (tensor parallelism where data parallelism does not fit): the fastest "
             "run of each, over the tables above, fastest first.", "",
             *table(ACROSS_COLUMNS, [_across_cells(row.run, row.configuration, records_link)
                                     for row in across.best]), ""]
    if across.none_trained:
        lines += [f"- Trained in no layout: {', '.join(map(text, across.none_trained))}.", ""]
    return lines
