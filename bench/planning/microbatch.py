"""The micro-batch a run gets when the user gives none (``--mbs``), per precision.

bf16, fp16 and the FP4 simulation keep the preset's micro-batch. Transformer Engine's fp8 pays only
at large GEMMs: each GEMM's casts and amax bookkeeping cost about the same at any batch, so at
small micro-batches they cost more than fp8 saves. Measured (``results/records/``, the reports in
``docs/reports/``): 1.3b on one H200, fp8-delayed against bf16, 0.89x at micro-batch 4 and 1.28x
at 8; 2.7b dp2 on two H100 80 GB, 1.23x at 4; 6.7b tp2+sp there, 0.88x at 2 (the GPU idles 43 % of
the step). So an fp8 run gets the largest of the preset's micro-batch and its doublings, up to
its precision's ``micro_batch_factor`` (bench.config.precisions), that divides the sequences of
one data-parallel rank and fits the memory estimate (``bench.planning.memory``) with the
planner's head-room. MS-AMP's FP8 linear has the
same fixed cost per GEMM (its casts, in-time scaling and weight cast): 1.3b msamp-o2 on one H200
went from 320.9 to 472.0 TFLOP/s/GPU between micro-batch 4 and 8 (1.47x; the 2026-11-25 MS-AMP
report), so msamp-o1 and msamp-o2 follow the same rule; their smaller optimizer state (O2: 7 bytes
a parameter) is what the estimate counts. The FP4 simulation is slower than bf16 at any batch and
keeps the preset's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.planning.layout import Layout


@dataclass(frozen=True)
class MicroBatchRule:
    """``max_factor``: the largest multiple of the preset's micro-batch tried (a power of two);
    ``why``: the reason, for the plan's note."""

    max_factor: int
    why: str


def rule_of(precision: Precision) -> MicroBatchRule | None:
    """A precision's rule, from its ``micro_batch_factor``; None where that is 1 (the preset's
    micro-batch stands)."""
    if precision.micro_batch_factor == 1:
        return None
    whose = "MS-AMP's fp8" if precision.msamp else "fp8"
    return MicroBatchRule(precision.micro_batch_factor, f"{whose} pays at large GEMMs")


def candidates(preset: Preset, layout: Layout, rule: MicroBatchRule) -> list[int]:
    """The preset's micro-batch and its doublings up to the rule's factor that divide the
    sequences of one data-parallel rank per step, smallest first."""
    per_rank = layout.global_batch // layout.dp
    sizes, factor = [], 1
    while factor <= rule.max_factor:
        size = preset.micro_batch * factor
        if per_rank % size == 0:
            sizes.append(size)
        factor *= 2
    return sizes


def default_micro_batch(preset: Preset, layout: Layout, precision: Precision,
                        fits: Callable[[Layout], bool] | None) -> tuple[Layout, str | None]:
    """(the layout at the precision's default micro-batch, a note saying why), for a layout built
    at the preset's micro-batch; unchanged with no note for a precision without a rule.

    ``fits``: whether a layout fits the GPU by the memory estimate; None when the GPU's memory is
    not known, so only the preset's micro-batch is safe to assume.
    """
    rule = rule_of(precision)
    if rule is None:
        return layout, None
    if fits is None:
        return layout, (f"micro-batch {layout.micro_batch} (the preset's: the GPU's memory is "
                        f"unknown, so {precision.name}'s larger default is not tried; --mbs sets it)")
    tried = candidates(preset, layout, rule)
    chosen = next((lay for lay in (replace(layout, micro_batch=size) for size in reversed(tried))
                   if fits(lay)), layout)
    return chosen, (f"micro-batch {chosen.micro_batch} ({precision.name} default: largest of "
                    f"{', '.join(map(str, tried))} that fits, {rule.why}; --mbs sets it)")


SEED_MICRO_BATCHES = {"345m": 8, "6.7b": 1, "13b": 1}
"""The micro-batch of each of the MS-AMP seed's (seed 000) Megatron-LM scripts, by preset
(MS-AMP-Examples d836034, ``gpt3/pretrain_345m_megatron.sh``, ``pretrain_6b7_megatron.sh``,
``pretrain_13b_megatron.sh``), the same in all of a script's modes."""
SEED_WITHOUT_DROPOUT = ("6.7b", "13b")
"""The seed's scripts that set ``--attention-dropout 0.0 --hidden-dropout 0.0`` for all their
modes (bf16, te, msamp, fp4); its 345m script keeps Megatron's 0.1."""


def msamp_seed_notes(precision: Precision, preset: str, layout: Layout, given_mbs: int | None,
                     dropout: float) -> list[str]:
    """Where a run of the fp8 or MS-AMP precisions differs from the MS-AMP seed's (seed 000) by the
    kit's defaults, said in the plan's notes (docs/precisions.md gives the why): fp8-delayed's amax
    history, a micro-batch the kit picked other than the seed's script's for ``preset``, and
    dropout where the seed's script has none (``dropout``: the run's probability)."""
    notes = []
    if precision.te_recipe == "delayed":
        notes.append(f"{precision.name} keeps Transformer Engine's delayed-scaling default, an amax history "
                     "of 1024 steps reduced by max; the MS-AMP seed's te runs Megatron-LM's own "
                     "defaults, a history of 1, most_recent (the kit has no option for it: docs/precisions.md)")
    seed_mbs = SEED_MICRO_BATCHES.get(preset)
    if precision.micro_batch_factor > 1 and given_mbs is None and seed_mbs not in (None, layout.micro_batch):
        notes.append(f"the MS-AMP seed's {preset} script uses micro-batch {seed_mbs}, the kit's "
                     f"{precision.name} default picked {layout.micro_batch} (--mbs {seed_mbs} "
                     "gives the seed's)")
    if precision.fp8 and preset in SEED_WITHOUT_DROPOUT and dropout != 0:
        notes.append(f"the MS-AMP seed's {preset} script trains without dropout in every mode; this "
                     f"run keeps {dropout:g} (--dropout 0 gives the seed's)")
    return notes
