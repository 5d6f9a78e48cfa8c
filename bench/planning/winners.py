"""The kit's defaults where a configuration was measured: the fastest known settings, with their
evidence.

A *winner* is what a preset, layout shape (tp, pp, vp, cp, sequence parallel; any dp) and
precision trained fastest at, on the layer implementation it names, in the kit's own records. A
run of that shape gets the winner's micro-batch, activation recompute and Megatron flags when the
user sets none of them (``--mbs``, ``--recompute``, the same flags after ``--``), as long as the
memory estimate still fits; the plan's note says what was picked and why. Shapes not listed keep
the preset's settings (and fp8's micro-batch rule, ``bench.planning.microbatch``).

Every entry names the records it stands on (``results/records/<run id>.json``); a test checks
that they exist and that the winner's figure is theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.config.precisions import Precision, PrecisionName
from bench.config.presets import Preset
from bench.planning.layout import Layout


@dataclass(frozen=True)
class Winner:
    """``implementation``: the layers the settings need (``te``: Transformer Engine's).
    ``megatron_args``: flags appended to the kit's. ``record``/``against``: the winner's record
    and the record of the setting it beat, with their TFLOP/s per GPU; ``why``: one line.
    ``rule_micro_batch``: where ``against`` is the kit's plan of its day, the micro-batch fp8's
    rule picked there (0: none). The winner gives way only where the rule picks a micro-batch
    larger than both this and its own."""

    preset: str
    engine: str
    shape: tuple[int, int, int, int, bool]  # tp, pp, vp, cp, sp
    precision: PrecisionName
    implementation: str
    micro_batch: int
    recompute: str | None
    megatron_args: tuple[str, ...]
    record: tuple[str, float]
    against: tuple[str, float, str]  # run id, TFLOP/s per GPU, what it ran without
    why: str
    rule_micro_batch: int = 0

    @property
    def shape_name(self) -> str:
        return shape_name(self.shape)


def shape_name(shape: tuple[int, int, int, int, bool]) -> str:
    """A shape as a layout name without dp, e.g. ``tp2pp2sp``."""
    tp, pp, vp, cp, sp = shape
    return (f"tp{tp}pp{pp}" + (f"vp{vp}" if vp > 1 else "") + (f"cp{cp}" if cp > 1 else "")
            + ("sp" if sp else ""))


# Transformer Engine's CUDA graphs, with the selective recompute they graph, need dropout off
# (megatron-core: "attention dropout is not supported with graphed attention recomputation").
TE_GRAPHS = ("--cuda-graph-impl", "transformer_engine", "--attention-dropout", "0.0",
             "--hidden-dropout", "0.0")

WINNERS: tuple[Winner, ...] = (
    # 4 x H200 capped at 80 GB (2026-11-27): the GPU idled 37 % of the un-graphed step (its
    # profile), the host launching kernels; graphs took the step from 7.19 to 5.56 s.
    Winner("13b", "megatron", (2, 2, 1, 1, True), "bf16", "te", 2, "selective", TE_GRAPHS,
           record=("13b_tp2pp2dp1sp_local_20261127T071826Z-3ab377", 468.9),
           against=("13b_tp2pp2dp1sp_local_20261127T065217Z-d16e9a-c1", 362.6, "the graphs"),
           why="micro-batch 2 with selective recompute, Transformer Engine's CUDA graphs with "
               "attention and hidden dropout 0.0 (graphed recompute needs them off)"),
    # The same settings on tp4 + sp (two machines of 4 x H200 at 80 GB, 2026-11-27): its
    # un-graphed step is host-bound too (11.22 s against 5.93 with the graphs).
    Winner("13b", "megatron", (4, 1, 1, 1, True), "bf16", "te", 2, "selective", TE_GRAPHS,
           record=("13b_tp4pp1dp1sp_local_20261127T095255Z-32deb0-c12", 440.0),
           against=("13b_tp4pp1dp1sp_local_20261127T114230Z-fde7a5-c11", 232.4,
                    "the graphs and dropout 0.0"),
           why="micro-batch 2 with selective recompute, Transformer Engine's CUDA graphs with "
               "attention and hidden dropout 0.0 (graphed recompute needs them off)"),
    # The best 13b layout with apex on the path (its fused weight-gradient accumulation, which
    # the deferral runs inside): the output layer's weight gradient deferred to the pipeline's
    # flush, 52.2 % MFU against 50.5 % on one machine of 4 x H200 at 80 GB (2026-11-27), where
    # the same settings without apex ran 490.6. The deferred inputs and logit gradients of every
    # micro-batch raise the last stage's peak from 74.2 to 82.5 GB (76.8 GiB, within an 80 GB
    # card); the memory estimate does not count them and the plan says so.
    Winner("13b", "megatron", (1, 4, 2, 1, False), "bf16", "te+apex", 1, None,
           ("--attention-dropout", "0.0", "--hidden-dropout", "0.0",
            "--defer-embedding-wgrad-compute"),
           record=("13b_tp1pp4vp2dp1_local_20261127T151928Z-ea3ae7-c22", 516.3),
           against=("13b_tp1pp4vp2dp1_local_20261127T151718Z-4c5fe1-c21", 499.5,
                    "the deferred output-layer weight gradient"),
           why="micro-batch 1 without recompute, attention and hidden dropout 0.0, the output "
               "layer's weight gradient deferred to the pipeline's flush"),
    # The best 13b layout on four GPUs: its preset settings (micro-batch 1, no recompute) with
    # dropout off, 50.3 % MFU against 49.0 % (two machines of 4 x H200 at 80 GB, 2026-11-27; the
    # kit's default on tp2pp2 + sp reproduced within 1.1 % across two such machines).
    Winner("13b", "megatron", (1, 4, 2, 1, False), "bf16", "te", 1, None,
           ("--attention-dropout", "0.0", "--hidden-dropout", "0.0"),
           record=("13b_tp1pp4vp2dp1_local_20261127T114020Z-e266cd-c14", 497.8),
           against=("13b_tp1pp4vp2dp1_local_20261127T094709Z-c995f3-c13", 484.8, "dropout 0.0"),
           why="micro-batch 1 without recompute, attention and hidden dropout 0.0"),
    # 13b tp4 + sp in fp8: the kit's plan before (fp8's rule picked micro-batch 4 at ~72.7 GB, no
    # recompute, no graphs) ran 396.3 and the same micro-batch 2 without graphs 171.4 (neither
    # profiled) on one machine of 4 x H100 80 GB (2026-11-28); with graphs 581.0 there (1.41x
    # bf16 with graphs, 410.9, beside it) and 613.8 on 4 x H200 at 80 GB (2026-11-27).
    Winner("13b", "megatron", (4, 1, 1, 1, True), "fp8-delayed", "te", 2, "selective", TE_GRAPHS,
           record=("13b_tp4pp1dp1sp_local_20261128T004441Z-773592-c20", 581.0),
           against=("13b_tp4pp1dp1sp_local_20261128T004441Z-da0365-c22", 396.3,
                    "the graphs (fp8's rule: micro-batch 4, no recompute)"),
           why="micro-batch 2 with selective recompute, Transformer Engine's CUDA graphs with "
               "attention and hidden dropout 0.0 (graphed recompute needs them off)",
           rule_micro_batch=4),
    # 6.7b tp2 + sp in fp8 on two GPUs: the un-graphed step is host-bound (the GPU idled 43 % of it
    # on two H100s), more so than bf16's, whose kernels run longer; Transformer Engine's CUDA
    # graphs (no recompute, so dropout may stay) ran 1.94x on one machine of 2 x H200 at 80 GB
    # (2026-11-26) and 603.9 on another (2026-11-27), 1.38x bf16 with graphs (436.6) beside it.
    Winner("6.7b", "megatron", (2, 1, 1, 1, True), "fp8-delayed", "te", 2, None,
           ("--cuda-graph-impl", "transformer_engine"),
           record=("6.7b_tp2pp1dp1sp_local_20261126T113323Z-c58cae-c61", 610.3),
           against=("6.7b_tp2pp1dp1sp_local_20261126T113323Z-f5af1c-c60", 315.1, "the graphs"),
           why="micro-batch 2 without recompute, Transformer Engine's CUDA graphs"),
    # 6.7b data-parallel: dropout off, 54.2 % MFU against 51.3 % on one machine of 4 x H200 at
    # 80 GB (2026-11-27). With apex on the path as well (its fused weight-gradient accumulation,
    # which the kit turns on where apex is found) the same settings ran 545.9 (55.2 %).
    Winner("6.7b", "megatron", (1, 1, 1, 1, False), "bf16", "te", 2, None,
           ("--attention-dropout", "0.0", "--hidden-dropout", "0.0"),
           record=("6.7b_tp1pp1dp4_local_20261127T132436Z-05f990-c23", 536.0),
           against=("6.7b_tp1pp1dp4_local_20261127T132254Z-41b88c-c22", 507.4, "dropout 0.0"),
           why="micro-batch 2 without recompute, attention and hidden dropout 0.0"),
)


def _shape(layout: Layout) -> tuple[int, int, int, int, bool]:
    return layout.tp, layout.pp, layout.vp, layout.cp, layout.sp


def winner_for(preset: Preset, layout: Layout, engine: str, precision: Precision,
               implementation: str) -> Winner | None:
    """The measured winner of this preset, layout shape, engine and precision on these layers, if
    any whose micro-batch divides the sequences of one data-parallel rank."""
    per_rank = layout.global_batch // layout.dp
    key = (preset.name, engine, _shape(layout), precision.name)
    return next((w for w in WINNERS
                 if (w.preset, w.engine, w.shape, w.precision) == key
                 and implementation.startswith(w.implementation) and per_rank % w.micro_batch == 0),
                None)


def note(winner: Winner) -> str:
    """The plan's note: what the winner set, its figure against the one it beat, and the way out."""
    run, tflops, without = winner.against
    return (f"measured defaults for {winner.preset} {winner.shape_name} {winner.precision}: "
            f"{winner.why}: {winner.record[1]:.1f} TFLOP/s/GPU against {tflops:.1f} without "
            f"{without} (records {winner.record[0]}, {run}); --mbs, --recompute or your own "
            "flags after '--' replace them")


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
           "--mbs 4 --recompute selective -- " + " ".join(TE_GRAPHS),
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
    key = (preset.name, engine, _shape(layout), precision.name)
    return next((b for b in BEYOND if (b.preset, b.engine, b.shape, b.precision) == key
                 and implementation.startswith(b.implementation)), None)


def beyond_note(beyond: Beyond) -> str:
    """The plan's note: what was measured faster, against what, and why it is not the default."""
    return (f"measured faster, not a default, for {beyond.preset} {beyond.shape_name} "
            f"{beyond.precision}: {beyond.typed} ran {beyond.record[1]:.1f} TFLOP/s/GPU, the fastest "
            f"run of this shape without it {beyond.against[1]:.1f} (records {beyond.record[0]}, "
            f"{beyond.against[0]}); not picked: {beyond.why_not}")
