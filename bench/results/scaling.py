"""Data-parallel scaling: each run with DP > 1 beside the DP 1 run it grew from.

Two configurations pair when they differ in the data-parallel degree only: the same model (preset
name and shape), engine (``megatron`` only: its layouts are the kit's), what built the layers (the
record's ``implementation``), precision, platform and accelerator, tensor, pipeline, virtual
pipeline, context and sequence parallelism, ZeRO stage, micro-batch, batch per data-parallel rank
(global batch / DP) and settings (the row's notes: variant, patches, data), and campaign (the
record's ``campaign`` label; runs without one pair with each other): a figure is set beside its
counterpart from one campaign, not from another machine's day; and the two runs
passed the engine the same flags but those only data parallelism adds (records of commits between
which the kit's defaults changed, such as the fused loss, do not pair). A side is one
configuration's runs (of one kit commit unless commits are pooled, as on the page's tables),
shown as their median TFLOP/s/GPU with run count and spread; its median run is the one whose flags
are compared. *Efficiency* is TFLOP/s/GPU with DP N over TFLOP/s/GPU with DP 1, with its noise
(:func:`bench.results.spread.ratio_text`, headline-grade sides only): 1.0 is perfect scaling,
above 1 a faster N-GPU run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.planning.engines.registry import ENGINES
from bench.planning.tuning import flag_names
from bench.records.record import Record
from bench.results.aggregate import configuration, median_run
from bench.results.hardware import hardware_id, hardware_name
from bench.results.runs import label_of
from bench.results.spread import RATIO_WORDS, Figure, commits_words, ratio_text
from bench.results.table import record_link, table, text
from bench.results.words import CAP_KEY, engine_words, model_name, model_sort_key, variant_text

# Flags the planner adds only when DP > 1 (bench.planning.engines.megatron): not a difference.
DP_FLAGS = frozenset({"--overlap-grad-reduce", "--overlap-param-gather"})


@dataclass(frozen=True)
class ScalingPair:
    """The DP 1 runs (``base_runs``) and DP N runs (``scaled_runs``) of one configuration but DP;
    ``base`` and ``scaled`` are their median runs."""

    base_runs: tuple[Record, ...]
    scaled_runs: tuple[Record, ...]

    @property
    def base(self) -> Record:
        return median_run(self.base_runs)

    @property
    def scaled(self) -> Record:
        return median_run(self.scaled_runs)

    @property
    def efficiency(self) -> str:
        """DP N over DP 1 with its noise where both sides are headline grade, else ``quick``."""
        return ratio_text(self.scaled_runs, self.base_runs, 3)


def scaling_key(run: Record) -> tuple:
    """What two runs must share to be one configuration at two data-parallel degrees."""
    p, lay = run.preset, run.layout
    return (
        p.name.lower(), p.layers, p.hidden, p.heads, p.seq_length, p.vocab_size,
        run.engine, run.implementation, run.precision, label_of(run),
        hardware_id(run.platform.accelerator), run.variant.get(CAP_KEY), lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.sp,
        lay.zero, lay.micro_batch, lay.global_batch // lay.dp, variant_text(run),
        run.labels.get("campaign"),
    )  # fmt: skip


def scaling_pairs(runs: Sequence[Record], by_commit: bool = False) -> tuple[ScalingPair, ...]:
    """Every DP > 1 configuration of ok megatron runs beside its DP 1 one, by model, hardware,
    precision, the rest of the key and DP; the result does not depend on the input order. A
    configuration's runs are taken within each campaign and, with ``by_commit``, kit commit."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for run in runs:
        if run.ok and ENGINES[run.engine].kit_layers:
            groups[(configuration(run, by_commit), run.labels.get("campaign"))].append(run)
    by_key: dict[tuple, tuple[list[tuple], list[tuple]]] = defaultdict(lambda: ([], []))
    for group in groups.values():
        members = tuple(sorted(group, key=lambda r: r.run_id))
        bases, scaled = by_key[scaling_key(median_run(members))]
        (bases if members[0].layout.dp == 1 else scaled).append(members)
    # Configurations that differ beyond the key (a layout named otherwise) each get their pair.
    pairs = [ScalingPair(base, run) for bases, scaled in by_key.values()
             for base in bases for run in scaled
             if _same_flags(median_run(base), median_run(run))]
    return tuple(sorted(pairs, key=_order))


def _same_flags(base: Record, scaled: Record) -> bool:
    return flag_names(base.argv) - DP_FLAGS == flag_names(scaled.argv) - DP_FLAGS


def _order(pair: ScalingPair) -> tuple:
    base, lay = pair.base, pair.base.layout
    return (model_sort_key(base.preset.name.lower()), hardware_id(base.platform.accelerator),
            base.precision, base.implementation or "", lay.micro_batch, lay.global_batch,
            str(scaling_key(base)), pair.scaled.layout.dp, base.run_id, pair.scaled.run_id)


SCALING_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("precision", False), ("engine", False), ("hardware", False),
    ("micro batch / batch per DP rank", True), ("layout, DP 1", False), ("GPUs, DP 1", True),
    ("TFLOP/s/GPU, DP 1", True), ("layout, DP N", False), ("GPUs, DP N", True),
    ("TFLOP/s/GPU, DP N", True), ("efficiency", True), ("kit commit, DP 1 / DP N", False),
    ("record, DP 1", False), ("record, DP N", False),
)


def _scaling_cells(pair: ScalingPair, records_link: str) -> list[str]:
    base, scaled = pair.base, pair.scaled
    lay = base.layout
    return [text(model_name(base)), text(base.precision), text(engine_words(base)),
            text(hardware_name(base.platform.accelerator)),
            f"{lay.micro_batch}/{lay.global_batch // lay.dp}", text(lay.name), str(base.gpus),
            Figure.of_runs(pair.base_runs).text(), text(scaled.layout.name), str(scaled.gpus),
            Figure.of_runs(pair.scaled_runs).text(), pair.efficiency,
            text(f"{_commits(pair.base_runs)} / {_commits(pair.scaled_runs)}"),
            record_link(base, records_link), record_link(scaled, records_link)]


def _commits(runs: Sequence[Record]) -> str:
    return commits_words(runs).split(" ", 1)[1]


def section(pairs: Sequence[ScalingPair], records_link: str) -> list[str]:
    """Each pair a row: the DP 1 and DP N runs and the efficiency."""
    if not pairs:
        return []
    return ["## Scaling", "",
            ("Each ok Megatron-Core configuration with data parallelism (DP N) beside the one-replica "
             "run (DP 1) it differs from in DP only: same model, precision, engine and what built "
             "its layers, platform and hardware, tensor/pipeline/context/sequence parallelism, "
             "micro-batch, batch per DP rank (global batch / DP), notes and campaign (runs "
             "without a campaign label pair with each other), and the same engine "
             "flags but those DP adds (runs of commits between which the kit's defaults changed "
             "do not pair). Each side is its configuration's runs, as in the "
             "tables below: median TFLOP/s/GPU with run count and lowest–highest. `efficiency` = "
             "TFLOP/s/GPU at DP N / TFLOP/s/GPU at DP 1 (1.000: perfect scaling). " + RATIO_WORDS),
            "", *table(SCALING_COLUMNS, [_scaling_cells(p, records_link) for p in pairs]), ""]
