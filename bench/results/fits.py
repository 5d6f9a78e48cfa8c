"""What fits a smaller GPU: the Megatron-Core runs made with ``--gpu-memory-cap``, those that trained
and those that ran out of memory, one table per cap, model, layout, global batch, GPU and data.

A row is one run: its configuration (precision, what built the layers, the variant but the cap),
micro-batch, status, TFLOP/s per GPU and peak memory, in configuration then micro-batch order.
Every run is a row, not the newest of each configuration: whether a micro-batch fits is the same
question on any machine, its TFLOP/s are not, so each row names its day and links its record. Each
table ends with each configuration's largest micro-batch that trained and its fastest run: what the
FP8-LM issue asks of 80 GB ("the largest micro-batch each fits, and each one's best TFLOP/s").

Where a model ran under one cap in more than one layout (6.7b: te's own states need tp2 where the
paper's fit dp2), :func:`best_layouts` sets each configuration's fastest run across the layouts
side by side: where memory binds, what each precision and optimizer trains at its best.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.records.record import Record
from bench.results.aggregate import data_words, display_name, layers, model_sort_key, settings, variant
from bench.results.hardware import hardware_name

CAP_KEY = "gpu_memory_cap_gb"  # the variant key of --gpu-memory-cap (bench.planning.tuning)


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
    lay = run.layout
    return (f"{display_name(run.preset.name.lower())} {lay.name}, global batch {lay.global_batch}, "
            f"capped at {run.variant[CAP_KEY]} GB, {hardware_name(run.platform.accelerator)}, {data_words(run)}")


def fit_groups(runs: Sequence[Record]) -> list[FitGroup]:
    """The capped runs that trained or ran out of memory, grouped; in model-size order."""
    grouped: dict[str, list[Record]] = defaultdict(list)
    for run in runs:
        if run.engine == "megatron" and CAP_KEY in run.variant and (run.ok or run.status == "oom"):
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
    lay = run.layout
    return (f"{display_name(run.preset.name.lower())} on {run.gpus} GPUs, global batch "
            f"{lay.global_batch}, capped at {run.variant[CAP_KEY]} GB, "
            f"{hardware_name(run.platform.accelerator)}, {data_words(run)}")


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
