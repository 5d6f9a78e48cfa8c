"""Data-parallel scaling: each run with DP > 1 beside the DP 1 run it grew from.

Two configurations pair when they differ in the data-parallel degree only: the same model (preset
name and shape), engine (``megatron`` only: its layouts are the kit's), what built the layers (the
record's ``implementation``), precision, platform and accelerator, tensor, pipeline, virtual
pipeline, context and sequence parallelism, ZeRO stage, micro-batch, batch per data-parallel rank
(global batch / DP) and settings (the row's notes: variant, patches, data), and campaign (the
record's ``campaign`` label; runs without one pair with each other): a figure is set beside its
counterpart from one campaign, not from another machine's day; and the two runs
passed the engine the same flags but those only data parallelism adds (records of commits between
which the kit's defaults changed, such as the fused loss, do not pair). Each configuration counts
with its median run by TFLOP/s/GPU, as on the page's tables. *Efficiency* is TFLOP/s/GPU with DP N
over TFLOP/s/GPU with DP 1: 1.0 is perfect scaling, above 1 a faster N-GPU run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.planning.tuning import flag_names
from bench.records.record import Record
from bench.results.aggregate import configuration, median_run, model_sort_key, variant_text
from bench.results.hardware import hardware_id
from bench.results.runs import label_of

ENGINE = "megatron"
# Flags the planner adds only when DP > 1 (bench.planning.engines.megatron): not a difference.
DP_FLAGS = frozenset({"--overlap-grad-reduce", "--overlap-param-gather"})


@dataclass(frozen=True)
class ScalingPair:
    """The DP 1 run (``base``) and a DP N run (``scaled``) of one configuration but DP."""

    base: Record
    scaled: Record

    @property
    def efficiency(self) -> float:
        return _tflops(self.scaled) / _tflops(self.base)


def _tflops(run: Record) -> float:
    assert run.metrics is not None  # only ok runs pair
    return run.metrics.tflops_per_gpu


def scaling_key(run: Record) -> tuple:
    """What two runs must share to be one configuration at two data-parallel degrees."""
    p, lay = run.preset, run.layout
    return (
        p.name.lower(), p.layers, p.hidden, p.heads, p.seq_length, p.vocab_size,
        run.engine, run.implementation, run.precision, label_of(run),
        hardware_id(run.platform.accelerator), lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.sp,
        lay.zero, lay.micro_batch, lay.global_batch // lay.dp, variant_text(run),
        run.labels.get("campaign"),
    )  # fmt: skip


def scaling_pairs(runs: Sequence[Record]) -> tuple[ScalingPair, ...]:
    """Every DP > 1 configuration of ok megatron runs beside its DP 1 one, by model, hardware,
    precision, the rest of the key and DP; the result does not depend on the input order. A
    configuration's median is taken within each campaign."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for run in runs:
        if run.ok and run.engine == ENGINE:
            groups[(configuration(run), run.labels.get("campaign"))].append(run)
    by_key: dict[tuple, tuple[list[Record], list[Record]]] = defaultdict(lambda: ([], []))
    for group in groups.values():
        median = median_run(group)
        bases, scaled = by_key[scaling_key(median)]
        (bases if median.layout.dp == 1 else scaled).append(median)
    # Configurations that differ beyond the key (a layout named otherwise) each get their pair.
    pairs = [ScalingPair(base, run) for bases, scaled in by_key.values()
             for base in bases for run in scaled if _same_flags(base, run)]
    return tuple(sorted(pairs, key=_order))


def _same_flags(base: Record, scaled: Record) -> bool:
    return flag_names(base.argv) - DP_FLAGS == flag_names(scaled.argv) - DP_FLAGS


def _order(pair: ScalingPair) -> tuple:
    base, lay = pair.base, pair.base.layout
    return (model_sort_key(base.preset.name.lower()), hardware_id(base.platform.accelerator),
            base.precision, base.implementation or "", lay.micro_batch, lay.global_batch,
            str(scaling_key(base)), pair.scaled.layout.dp, base.run_id, pair.scaled.run_id)
