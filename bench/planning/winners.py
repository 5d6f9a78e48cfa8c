"""The kit's defaults where a configuration was measured: the fastest known settings, with the
evidence each stands on.

A *winner* is what a preset, layout shape (tp, pp, vp, cp, sequence parallel; any dp) and
precision trained fastest at, on the layer implementation it names, in the kit's own records: a
micro-batch, activation recompute, CUDA graphs and dropout (typed settings,
``bench.config.run_options``) and any other Megatron flags. Each side of the comparison carries its
runs and their figures as data (:class:`Side`). A winner backs a measured default only where it
passes the evidence rule (:attr:`Winner.headline`): n >= 3 runs per side of >= 20 measured steps
each, one configuration per side, and a gain of more than two standard errors. A winner that
passes and changes no training math is applied to a run of its shape when the user sets none of
its settings and the memory estimate still fits; the plan's note says what was picked and why.

Every other entry is *quoted*, never applied: a *quick* one (fewer runs or steps; the plan says so,
with its n and spread), or a *recipe* (dropout 0 changes the training math: opt-in, named as a
faster recipe, as the paper's optimizer states are in :data:`BEYOND`). Shapes not listed keep the
preset's settings (and fp8's micro-batch rule, ``bench.planning.microbatch``). Layers measured
against each other (:data:`FASTER_LAYERS`, ``--layers``) are quoted, never applied, to a plan at
their dropout building either: as the evidence its layers stand on, or as faster than them
(:mod:`bench.planning.faster_layers`).

Planning reads no records; a test checks every entry against them (``results/records/<run id>.json``):
the figures, the measured steps, one configuration key per side and the headline grade.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bench.config.precisions import Precision, PrecisionName
from bench.config.presets import Preset
from bench.config.run_options import DEFAULT_DROPOUT
from bench.planning.engines.setting_flags import dropout_flags, graph_flags
from bench.planning.layout import Layout

EVIDENCE_RUNS = 3  # runs per side a measured default needs (bench.records.headline.HEADLINE_RUNS)
EVIDENCE_STEPS = 20  # measured steps each of them needs (bench.records.headline.HEADLINE_STEPS)
EVIDENCE_SE = 2.0  # the gain must exceed this many standard errors of the difference


@dataclass(frozen=True)
class Side:
    """The runs one side of a comparison stands on: ``runs`` as (run id, TFLOP/s per GPU), all of
    one configuration; ``steps``: the fewest measured steps among them."""

    runs: tuple[tuple[str, float], ...]
    steps: int

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def figures(self) -> tuple[float, ...]:
        return tuple(tflops for _, tflops in self.runs)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.figures)

    @property
    def variance_of_mean(self) -> float:
        """The squared standard error of the mean, (TFLOP/s)^2; 0 for a single run."""
        return statistics.variance(self.figures) / self.n if self.n > 1 else 0.0

    @property
    def spread(self) -> str:
        """``n=3, 476.5-479.0`` (TFLOP/s/GPU), or ``n=1, 5 steps`` for one run."""
        low, high = min(self.figures), max(self.figures)
        figures = f"{low:.1f}-{high:.1f}" if self.n > 1 else f"{low:.1f}"
        return f"n={self.n}, {figures}, {self.steps} measured steps"

    @property
    def long_enough(self) -> bool:
        return self.n >= EVIDENCE_RUNS and self.steps >= EVIDENCE_STEPS


def gain_exceeds_noise(faster: Side, slower: Side) -> bool:
    """Whether ``faster``'s mean beats ``slower``'s by more than :data:`EVIDENCE_SE` standard
    errors of the difference of the means."""
    error = math.sqrt(faster.variance_of_mean + slower.variance_of_mean)
    return faster.mean - slower.mean > EVIDENCE_SE * error


class Measured:
    """What an entry of two measured sides derives from its fields: its shape's name, whether it
    is a recipe (dropout away from Megatron's) and whether it passes the evidence rule."""

    shape: tuple[int, int, int, int, bool]  # tp, pp, vp, cp, sp
    record: Side
    against: Side
    dropout: float

    @property
    def shape_name(self) -> str:
        return shape_name(self.shape)

    @property
    def recipe(self) -> bool:
        """Whether its settings change the training math (dropout away from Megatron's)."""
        return self.dropout != DEFAULT_DROPOUT

    @property
    def headline(self) -> bool:
        """Whether it passes the evidence rule: both sides long enough, and a gain beyond noise."""
        return (self.record.long_enough and self.against.long_enough
                and gain_exceeds_noise(self.record, self.against))


@dataclass(frozen=True)
class Winner(Measured):
    """``implementation``: the layers the settings need (``te``: Transformer Engine's).
    ``micro_batch``, ``recompute``, ``cuda_graphs`` and ``dropout``: the settings (default: no
    graphs, Megatron's dropout); ``megatron_args``: other flags appended to the kit's.
    ``record``/``against``: the winner's runs and those of the setting it beat; ``without``: what
    those ran without; ``why``: one line. ``rule_micro_batch``: where ``against`` is the kit's
    plan of its day, the micro-batch fp8's rule picked there (0: none). The winner gives way only
    where the rule picks a micro-batch larger than both this and its own. ``global_batch``: where
    what won is a global batch (the user's to choose: it changes the optimizer's steps per sample),
    the one ``record`` ran at; such an entry answers only a plan at that batch, before any other
    (0: any batch its micro-batch divides)."""

    preset: str
    engine: str
    shape: tuple[int, int, int, int, bool]  # tp, pp, vp, cp, sp
    precision: PrecisionName
    implementation: str
    micro_batch: int
    recompute: str | None
    record: Side
    against: Side
    without: str
    why: str
    cuda_graphs: str = "none"
    dropout: float = DEFAULT_DROPOUT
    megatron_args: tuple[str, ...] = ()
    rule_micro_batch: int = 0
    global_batch: int = 0

    @property
    def flags(self) -> tuple[str, ...]:
        """Every Megatron flag it sets: its settings' (as the engine renders them) and the others."""
        return (*graph_flags(self.cuda_graphs), *dropout_flags(self.dropout, DEFAULT_DROPOUT),
                *self.megatron_args)

    @property
    def applied(self) -> bool:
        """Whether the planner applies it as a default: headline grade, and no recipe."""
        return self.headline and not self.recipe

    @property
    def typed(self) -> str:
        """What to type for its settings."""
        words = [f"--mbs {self.micro_batch}"]
        words += [f"--recompute {self.recompute}"] if self.recompute else []
        words += [f"--cuda-graphs {self.cuda_graphs}"] if self.cuda_graphs != "none" else []
        words += [f"--dropout {self.dropout:g}"] if self.recipe else []
        words += ["--", *self.megatron_args] if self.megatron_args else []
        return " ".join(words)


def shape_name(shape: tuple[int, int, int, int, bool]) -> str:
    """A shape as a layout name without dp, e.g. ``tp2pp2sp``."""
    tp, pp, vp, cp, sp = shape
    return (f"tp{tp}pp{pp}" + (f"vp{vp}" if vp > 1 else "") + (f"cp{cp}" if cp > 1 else "")
            + ("sp" if sp else ""))


def _one(run: str, tflops: float, steps: int = 5) -> Side:
    """One quick run (the campaigns of 2026-11-26..28 measured 5 or 15 steps)."""
    return Side(((run, tflops),), steps)


# Transformer Engine's CUDA graphs, with the selective recompute they graph, need dropout off
# (megatron-core: "attention dropout is not supported with graphed attention recomputation").
GRAPHED = "Transformer Engine's CUDA graphs with attention and hidden dropout 0.0 (graphed recompute needs them off)"

WINNERS: tuple[Winner, ...] = (
    # One H200 (2026-11-29, 18:12-18:29 UTC, kit 5d5ea31), megatron-core's local layers before
    # Transformer Engine was installed, dropout 0 on both sides, three runs of 20 measured steps a
    # side, alternating: 16 micro-batches a step spread what a step pays once (about 46 ms: the
    # optimizer's step and the rest, by the two sides' steps) over four times the sequences.
    Winner("2.7b", "megatron", (1, 1, 1, 1, False), "bf16", "local", 8, None,
           Side((("2.7b_tp1pp1dp1_local_20261129T181440Z-b2eda5", 534.3),
                 ("2.7b_tp1pp1dp1_local_20261129T181901Z-d2b4e8", 534.1),
                 ("2.7b_tp1pp1dp1_local_20261129T182457Z-3eb2ea", 533.5)), 20),
           Side((("2.7b_tp1pp1dp1_local_20261129T181246Z-061704", 524.8),
                 ("2.7b_tp1pp1dp1_local_20261129T182309Z-2561ad", 526.6),
                 ("2.7b_tp1pp1dp1_local_20261129T182907Z-66b57c", 524.8)), 20),
           "global batch 128 (32 there, micro-batch 8 and dropout 0.0 on both)",
           "micro-batch 8, attention and hidden dropout 0.0", dropout=0.0, global_batch=128),
    # 4 x H200 capped at 80 GB (2026-11-27): the GPU idled 37 % of the un-graphed step (its
    # profile), the host launching kernels; graphs took the step from 7.19 to 5.56 s.
    Winner("13b", "megatron", (2, 2, 1, 1, True), "bf16", "te", 2, "selective",
           _one("13b_tp2pp2dp1sp_local_20261127T071826Z-3ab377", 468.9),
           _one("13b_tp2pp2dp1sp_local_20261127T065217Z-d16e9a-c1", 362.6), "the graphs",
           f"micro-batch 2 with selective recompute, {GRAPHED}", cuda_graphs="te", dropout=0.0),
    # The same settings on tp4 + sp (two machines of 4 x H200 at 80 GB, 2026-11-27): its
    # un-graphed step is host-bound too (11.22 s against 5.93 with the graphs).
    Winner("13b", "megatron", (4, 1, 1, 1, True), "bf16", "te", 2, "selective",
           _one("13b_tp4pp1dp1sp_local_20261127T095255Z-32deb0-c12", 440.0),
           _one("13b_tp4pp1dp1sp_local_20261127T114230Z-fde7a5-c11", 232.4),
           "the graphs and dropout 0.0",
           f"micro-batch 2 with selective recompute, {GRAPHED}", cuda_graphs="te", dropout=0.0),
    # The best 13b layout with apex on the path (its fused weight-gradient accumulation, which
    # the deferral runs inside): the output layer's weight gradient deferred to the pipeline's
    # flush, 52.2 % MFU against 50.5 % on one machine of 4 x H200 at 80 GB (2026-11-27). The
    # deferred inputs and logit gradients of every micro-batch raise the last stage's peak from
    # 74.2 to 82.5 GB (76.8 GiB, within an 80 GB card); the memory estimate does not count them.
    Winner("13b", "megatron", (1, 4, 2, 1, False), "bf16", "te+apex", 1, None,
           _one("13b_tp1pp4vp2dp1_local_20261127T151928Z-ea3ae7-c22", 516.3),
           _one("13b_tp1pp4vp2dp1_local_20261127T151718Z-4c5fe1-c21", 499.5),
           "the deferred output-layer weight gradient",
           "micro-batch 1 without recompute, attention and hidden dropout 0.0, the output layer's "
           "weight gradient deferred to the pipeline's flush",
           dropout=0.0, megatron_args=("--defer-embedding-wgrad-compute",)),
    # The best 13b layout on four GPUs: its preset settings (micro-batch 1, no recompute) with
    # dropout off, 50.3 % MFU against 49.0 % (two machines of 4 x H200 at 80 GB, 2026-11-27).
    Winner("13b", "megatron", (1, 4, 2, 1, False), "bf16", "te", 1, None,
           _one("13b_tp1pp4vp2dp1_local_20261127T114020Z-e266cd-c14", 497.8),
           _one("13b_tp1pp4vp2dp1_local_20261127T094709Z-c995f3-c13", 484.8), "dropout 0.0",
           "micro-batch 1 without recompute, attention and hidden dropout 0.0", dropout=0.0),
    # 13b tp4 + sp in fp8: the kit's plan before (fp8's rule picked micro-batch 4 at ~72.7 GB, no
    # recompute, no graphs) ran 396.3 on one machine of 4 x H100 80 GB (2026-11-28); with graphs
    # 581.0 there (1.41x bf16 with graphs, 410.9, beside it).
    Winner("13b", "megatron", (4, 1, 1, 1, True), "fp8-delayed", "te", 2, "selective",
           _one("13b_tp4pp1dp1sp_local_20261128T004441Z-773592-c20", 581.0),
           _one("13b_tp4pp1dp1sp_local_20261128T004441Z-da0365-c22", 396.3),
           "the graphs (fp8's rule: micro-batch 4, no recompute)",
           f"micro-batch 2 with selective recompute, {GRAPHED}", cuda_graphs="te", dropout=0.0,
           rule_micro_batch=4),
    # 6.7b tp2 + sp in fp8 on two GPUs: the un-graphed step is host-bound (the GPU idled 43 % of it
    # on two H100s); Transformer Engine's CUDA graphs (no recompute, so dropout may stay) ran 1.94x
    # on one machine of 2 x H200 at 80 GB (2026-11-26) and 603.9 on another (2026-11-27).
    Winner("6.7b", "megatron", (2, 1, 1, 1, True), "fp8-delayed", "te", 2, None,
           _one("6.7b_tp2pp1dp1sp_local_20261126T113323Z-c58cae-c61", 610.3, steps=15),
           _one("6.7b_tp2pp1dp1sp_local_20261126T113323Z-f5af1c-c60", 315.1, steps=15),
           "the graphs", "micro-batch 2 without recompute, Transformer Engine's CUDA graphs",
           cuda_graphs="te"),
    # 6.7b data-parallel: dropout off, 54.2 % MFU against 51.3 % on one machine of 4 x H200 at
    # 80 GB (2026-11-27).
    Winner("6.7b", "megatron", (1, 1, 1, 1, False), "bf16", "te", 2, None,
           _one("6.7b_tp1pp1dp4_local_20261127T132436Z-05f990-c23", 536.0),
           _one("6.7b_tp1pp1dp4_local_20261127T132254Z-41b88c-c22", 507.4), "dropout 0.0",
           "micro-batch 2 without recompute, attention and hidden dropout 0.0", dropout=0.0),
    # One H200 (2026-11-29), megatron-core's local layers (no Transformer Engine), three runs of
    # 20 measured steps per side, one knob apart: headline grade, and recipes. Micro-batch 8 was
    # measured with dropout 0 on both sides, so it is quoted with that recipe, never applied alone;
    # the first entry a batch's micro-batch divides is the one quoted.
    Winner("2.7b", "megatron", (1, 1, 1, 1, False), "bf16", "local", 8, None,
           Side((("2.7b_tp1pp1dp1_local_20261129T060521Z-1dcf15", 529.8),
                 ("2.7b_tp1pp1dp1_local_20261129T060749Z-317ea4", 531.3),
                 ("2.7b_tp1pp1dp1_local_20261129T060950Z-63c33b", 530.6)), 20),
           Side(tuple((f"2.7b_tp1pp1dp1_local_20261129T031755Z-85efdb-r{i}", tflops)
                      for i, tflops in ((1, 504.4), (2, 505.8), (3, 505.1))), 20),
           "micro-batch 8 (micro-batch 4 there, dropout 0.0 on both)",
           "micro-batch 8, attention and hidden dropout 0.0", dropout=0.0),
    Winner("2.7b", "megatron", (1, 1, 1, 1, False), "bf16", "local", 4, None,
           Side(tuple((f"2.7b_tp1pp1dp1_local_20261129T031755Z-85efdb-r{i}", tflops)
                      for i, tflops in ((1, 504.4), (2, 505.8), (3, 505.1))), 20),
           Side(tuple((f"2.7b_tp1pp1dp1_local_20261129T030421Z-bc2278-r{i}", tflops)
                      for i, tflops in ((1, 478.6), (2, 476.5), (3, 479.0))), 20),
           "dropout 0.0", "attention and hidden dropout 0.0", dropout=0.0),
)


def shape_of(layout: Layout) -> tuple[int, int, int, int, bool]:
    """A layout's shape as the tables key it: tp, pp, vp, cp, sequence parallel."""
    return layout.tp, layout.pp, layout.vp, layout.cp, layout.sp


def winner_for(preset: Preset, layout: Layout, engine: str, precision: Precision,
               implementation: str) -> Winner | None:
    """The measured winner of this preset, layout shape, engine and precision on these layers, if
    any whose micro-batch divides the sequences of one data-parallel rank (applied or quoted): one
    measured at the plan's global batch first, then the first of any batch."""
    per_rank = layout.global_batch // layout.dp
    key = (preset.name, engine, shape_of(layout), precision.name)
    found = [w for w in WINNERS
             if (w.preset, w.engine, w.shape, w.precision) == key
             and implementation.startswith(w.implementation) and per_rank % w.micro_batch == 0
             and w.global_batch in (0, layout.global_batch)]
    return min(found, key=lambda w: w.global_batch == 0, default=None)


def _figures(winner: Winner) -> str:
    return (f"{winner.record.mean:.1f} TFLOP/s/GPU ({winner.record.spread}) against "
            f"{winner.against.mean:.1f} ({winner.against.spread}) without {winner.without}")


def note(winner: Winner) -> str:
    """The plan's note of an applied winner: what it set, its figures against the ones it beat,
    and the way out."""
    return (f"measured defaults for {winner.preset} {winner.shape_name} {winner.precision}: "
            f"{winner.why}: {_figures(winner)}; --mbs, --recompute, --cuda-graphs or --dropout "
            "replace them")


NOT_HEADLINE = ("not headline grade (n >= 3 runs of >= 20 measured steps a side, a gain beyond two "
                "standard errors)")


def quoted_note(winner: Winner) -> str:
    """The plan's note of a winner it does not apply: a recipe, or quick evidence."""
    if winner.recipe and winner.headline:
        why_not = "a recipe: dropout 0 changes the training math, so it is yours to choose"
    else:
        why_not = NOT_HEADLINE + (", and a recipe: dropout 0 changes the training math"
                                  if winner.recipe else "")
    return (f"measured faster, not a default, for {winner.preset} {winner.shape_name} "
            f"{winner.precision}: {winner.typed} ran {_figures(winner)}; not applied: {why_not}")


@dataclass(frozen=True)
class Beyond:
    """A measured configuration faster than the shape's defaults that the kit does not pick,
    because it changes what is trained: the plan names it, its figure and why it is no default.
    ``optimizer_states``: the states it stands for (a run already on them gets no note);
    ``asks``: what to type for it beyond them; ``record``/``against``: the fastest record with it
    and the fastest of the same shape on the default states, with their TFLOP/s per GPU."""

    preset: str
    engine: str
    shape: tuple[int, int, int, int, bool]  # tp, pp, vp, cp, sp
    precision: PrecisionName
    implementation: str
    optimizer_states: str
    asks: str
    record: tuple[str, float]
    against: tuple[str, float]
    why_not: str

    @property
    def shape_name(self) -> str:
        return shape_name(self.shape)

    @property
    def typed(self) -> str:
        """The whole of what to type: its states, then the rest it asks."""
        return f"--optimizer-states {self.optimizer_states} {self.asks}"


# The FP8-LM paper's optimizer states (the kit's PaperAdamW: fp16 master weights, fp8 first and
# fp16 second moments) free the memory for the micro-batch that feeds fp8's GEMMs; fp8-delayed's
# loss followed megatron-core's states on 13b (9.007 at step 10 on both), bf16's did not.
PAPER_STATES = ("the FP8-LM paper's optimizer states (fp16 master weights, fp8 first moment) "
                "change the optimizer's numerics")
BEYOND: tuple[Beyond, ...] = (
    # 4 x H200 at 80 GB (2026-11-28): megatron-core's states leave no room for the graphs here
    # (they ran out of memory at micro-batch 2, 2026-11-27).
    Beyond("13b", "megatron", (2, 2, 1, 1, True), "fp8-delayed", "te", "paper-kit",
           "--mbs 4 --recompute selective --cuda-graphs te --dropout 0",
           record=("13b_tp2pp2dp1sp_local_20261128T084516Z-d254d6-c28", 760.8),
           against=("13b_tp2pp2dp1sp_local_20261127T115331Z-81e0a3-c16", 395.1), why_not=PAPER_STATES),
    Beyond("13b", "megatron", (4, 1, 1, 1, True), "fp8-delayed", "te", "paper-kit",
           "--mbs 8",
           record=("13b_tp4pp1dp1sp_local_20261128T084710Z-fa1813-c25", 717.9),
           against=("13b_tp4pp1dp1sp_local_20261127T224848Z-6e973e-c20", 613.8), why_not=PAPER_STATES),
    # 2 x H200 at 80 GB, global batch 16 on both (2026-11-28 and 2026-11-26).
    Beyond("6.7b", "megatron", (2, 1, 1, 1, True), "fp8-delayed", "te", "paper-kit",
           "--mbs 8",
           record=("6.7b_tp2pp1dp1sp_local_20261128T062830Z-abdd69-c45", 684.6),
           against=("6.7b_tp2pp1dp1sp_local_20261126T113323Z-c58cae-c61", 610.3), why_not=PAPER_STATES),
)


def beyond_for(preset: Preset, layout: Layout, engine: str, precision: Precision,
               implementation: str) -> Beyond | None:
    """The faster configuration the kit does not pick for this preset, shape, engine and precision
    on these layers, if one was measured."""
    key = (preset.name, engine, shape_of(layout), precision.name)
    return next((b for b in BEYOND if (b.preset, b.engine, b.shape, b.precision) == key
                 and implementation.startswith(b.implementation)), None)


def beyond_note(beyond: Beyond) -> str:
    """The plan's note: what was measured faster, against what, and why it is not the default."""
    return (f"measured faster, not a default, for {beyond.preset} {beyond.shape_name} "
            f"{beyond.precision}: {beyond.typed} ran {beyond.record[1]:.1f} TFLOP/s/GPU, the fastest "
            f"run of this shape without it {beyond.against[1]:.1f} (records {beyond.record[0]}, "
            f"{beyond.against[0]}); not picked: {beyond.why_not}")
