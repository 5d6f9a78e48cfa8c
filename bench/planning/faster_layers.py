"""Layers measured against each other (``--layers``): the pairs a plan quotes, never applies, where
it builds either side at their dropout, with the runs each side stands on (the evidence rule and
the sides are :mod:`bench.planning.winners`'). Planning reads no records; a test checks every
entry against them (``tests/planning/test_layers.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.config.precisions import Precision, PrecisionName
from bench.config.presets import Preset
from bench.config.run_options import DEFAULT_DROPOUT
from bench.planning.layout import Layout
from bench.planning.winners import NOT_HEADLINE, Measured, Side, shape_of


@dataclass(frozen=True)
class FasterLayers(Measured):
    """Layers measured against others: ``layers`` (``--layers`` for the faster; ``record``) against
    ``implementation`` (``against``), both at ``micro_batch`` and ``dropout``, one configuration a
    side; ``measured``: what else differed (or not), said with the figures. Quoted, never applied,
    where a plan at ``dropout`` builds either side for the shape: to the slower as faster layers
    (the layers are the user's to choose; a dropout-0 gain backs no default), to the faster as the
    evidence its layers stand on."""

    preset: str
    engine: str
    shape: tuple[int, int, int, int, bool]  # tp, pp, vp, cp, sp
    precision: PrecisionName
    implementation: str  # the layers beaten, as a record's implementation says them (exactly)
    layers: str  # the faster, as --layers asks for them
    implementation_of_layers: str  # the faster, as a record's implementation says them
    micro_batch: int
    record: Side
    against: Side
    measured: str
    dropout: float = DEFAULT_DROPOUT

    @property
    def typed(self) -> str:
        return f"--layers {self.layers} --mbs {self.micro_batch}" + (
            f" --dropout {self.dropout:g}" if self.recipe else "")


LAYER_WORDS = {"local": "megatron-core's local layers (SDPA attention)", "te": "Transformer Engine's layers"}

FASTER_LAYERS: tuple[FasterLayers, ...] = (
    # One H200 (2026-11-29, docs/reports/2026-11-29-h200-te-pair.md), global batch 32, dropout 0
    # on both sides, 3 runs of 20 measured steps a side, one Python without apex: the local layers
    # before Transformer Engine 2.20 was installed (torch's fused AdamW, --kit-torch-adam), its
    # layers after (its FusedAdam, which megatron-core takes whatever the layers): the note says so.
    FasterLayers("2.7b", "megatron", (1, 1, 1, 1, False), "bf16", "te", "local", "local", 8,
                 Side((("2.7b_tp1pp1dp1_local_20261129T060521Z-1dcf15", 529.8),
                       ("2.7b_tp1pp1dp1_local_20261129T060749Z-317ea4", 531.3),
                       ("2.7b_tp1pp1dp1_local_20261129T060950Z-63c33b", 530.6)), 20),
                 Side((("2.7b_tp1pp1dp1_local_20261129T061735Z-bea1ca", 525.1),
                       ("2.7b_tp1pp1dp1_local_20261129T062132Z-5fcc80-r1", 520.5),
                       ("2.7b_tp1pp1dp1_local_20261129T062132Z-5fcc80-r2", 520.7)), 20),
                 "one H200, no apex; the local side before Transformer Engine was installed, so "
                 "its Adam was torch's fused AdamW, not Transformer Engine's FusedAdam that "
                 "--layers local steps with where it imports (not measured)",
                 dropout=0.0),
    # The same pair at Megatron's dropout (one H200, 2026-11-29, kit 878ba00), TE installed on
    # both sides: TE's layers (what auto builds where TE imports) 1.02x, beyond two standard errors.
    FasterLayers("2.7b", "megatron", (1, 1, 1, 1, False), "bf16", "local", "te", "te", 8,
                 Side(tuple((f"2.7b_tp1pp1dp1_local_20261129T115459Z-ed466c-c4-r{i}", tflops)
                            for i, tflops in ((1, 486.1), (2, 485.9), (3, 485.8))), 20),
                 Side(tuple((f"2.7b_tp1pp1dp1_local_20261129T120007Z-e5c3d5-c5-r{i}", tflops)
                            for i, tflops in ((1, 474.8), (2, 474.9), (3, 475.1))), 20),
                 "one H200, no apex, Transformer Engine installed on both sides, so both stepped "
                 "Adam with its FusedAdam"),
)


def faster_layers_for(preset: Preset, layout: Layout, engine: str, precision: Precision,
                      implementation: str, dropout: float) -> FasterLayers | None:
    """The pair measured at ``dropout`` with ``implementation`` (the plan's own, exactly: TE's with
    apex's wgrad fusion are another configuration) on either side, for this preset, shape, engine
    and precision, if any whose micro-batch divides the sequences of one data-parallel rank."""
    per_rank = layout.global_batch // layout.dp
    key = (preset.name, engine, shape_of(layout), precision.name, dropout)
    return next((f for f in FASTER_LAYERS
                 if (f.preset, f.engine, f.shape, f.precision, f.dropout) == key
                 and implementation in (f.implementation, f.implementation_of_layers)
                 and per_rank % f.micro_batch == 0), None)


def faster_layers_note(found: FasterLayers, implementation: str) -> str:
    """The plan's note: the faster layers, their figures against the slower, the dropout, the runs;
    said as the plan's own where it builds the faster (``implementation``), else as faster ones."""
    whose = ("the layers this plan builds" if implementation == found.implementation_of_layers
             else "not a default" if found.recipe else "not applied (--layers is yours to choose)")
    dropout = (f"dropout {found.dropout:g} (a recipe: it changes the training math)" if found.recipe
               else f"Megatron's dropout ({found.dropout:g})")
    grade = "beyond two standard errors" if found.headline else NOT_HEADLINE
    runs = ", ".join(run for side in (found.record, found.against) for run, _ in side.runs)
    return (f"measured faster, {whose}, for {found.preset} {found.shape_name} {found.precision}: "
            f"{LAYER_WORDS[found.layers]} ({found.typed}) ran {found.record.mean:.1f} TFLOP/s/GPU "
            f"({found.record.spread}) against {found.against.mean:.1f} ({found.against.spread}) on "
            f"{LAYER_WORDS.get(found.implementation, found.implementation)}, "
            f"{found.record.mean / found.against.mean:.2f}x, {grade}, both sides with {dropout}; "
            f"{found.measured}; runs {runs}")
