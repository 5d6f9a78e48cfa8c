"""Precisions, the one vocabulary of the kit's number formats: each a :class:`Precision` that knows
the format whose dense peak it is measured against, the step-time model's family, whose linears
run in fp8, MS-AMP's level, the Megatron flags and environment it sets and its optimizer-state
bytes. :data:`PRECISIONS` holds them by the name plans, platform files and records use; the command
line also takes :data:`PRECISION_SHORTHANDS`. Adding a precision is one object here and its tests.
Standard library only: the training entry on the GPU node reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PeakFormat = Literal["bf16", "fp16", "fp8"]  # the formats an accelerator file gives dense peaks for
# The step-time model's families (bench.planning.predict): bf16 stands for fp16 too.
Family = Literal["bf16", "fp8", "msamp", "fp4"]
PRECISION_SHORTHANDS = {"fp8": "fp8-delayed"}
# How MS-AMP's FP8 linear scales its casts (patches/ms-amp/0008; --msamp-scaling sets it).
MSAMP_SCALING_ENV = "MSAMP_FP8_SCALING"
# What MS-AMP 9746ea8 reads (msamp/megatron/layers.py) and the seed's fp4 mode exports: FP4 weights
# with the differentiable gradient estimator, FP4 activations. (The seed's README calls them
# USE_W_SIMU_FP4 / USE_W_DIFFERENTIABLE_GRADIENT_ESTIMATOR / USE_A_SIMU_FP4; its scripts and MS-AMP
# use these names.)
FP4_SIMULATION_ENV = (("MSAMP_USE_WEIGHT_SIMULATE_FP4", "1"),
                      ("MSAMP_USE_WEIGHT_DIFFERENTIABLE_GRADIENT_ESTIMATOR", "1"),
                      ("MSAMP_USE_ACTIVATION_SIMULATE_FP4", "1"))
# Transformer Engine's fp8 recipes run in the hybrid format (E4M3 forward, E5M2 gradients).
HYBRID_FP8 = ("--fp8-format", "hybrid")
FP32_ADAM_STATE_BYTES = 12  # fp32 master weights and two fp32 moments
# MS-AMP O2's LBAdamW keeps the first moment in fp8 and the second in fp16 beside the fp32 master
# weights (4 + 1 + 2 = 7 B).
MSAMP_O2_STATE_BYTES = 7


@dataclass(frozen=True)
class Precision:
    """One number-format recipe. ``name``: as plans, platform files and records write it.
    ``peak``: the format whose dense peak (an accelerator file's ``peak_tflops``) its MFU divides
    by. ``family``: the step-time model's. ``half``: the 16-bit format of the weights,
    activations and reduced gradients (Megatron's ``--bf16`` or ``--fp16``). ``te_fp8``:
    Transformer Engine's fp8 recipe as Megatron's flags (empty, the default: TE runs no fp8).
    ``msamp_level``: MS-AMP's optimization level (``--kit-msamp``, read by
    bench.train.msamp), None without MS-AMP. ``fp4_simulation``: MS-AMP's FP4 simulation of
    weights and activations (:data:`FP4_SIMULATION_ENV`; GEMMs stay fp8). ``state_bytes``:
    optimizer-state bytes per parameter under the default optimizer states. ``micro_batch_factor``:
    the largest multiple of the preset's micro-batch its default micro-batch tries
    (bench.planning.microbatch; 1, the default: the preset's)."""

    name: str
    peak: PeakFormat
    family: Family
    half: Literal["bf16", "fp16"] = "bf16"
    te_fp8: tuple[str, ...] = ()
    msamp_level: Literal["O1", "O2"] | None = None
    fp4_simulation: bool = False
    state_bytes: int = FP32_ADAM_STATE_BYTES
    micro_batch_factor: int = 1

    @property
    def fp8_linears(self) -> Literal["Transformer Engine", "MS-AMP"] | None:
        """Whose linears run in fp8 (the memory estimate counts their fp8 copies); None: none."""
        if self.te_fp8:
            return "Transformer Engine"
        return "MS-AMP" if self.msamp_level is not None else None

    @property
    def fp8(self) -> bool:
        """Whether the linears run in fp8, Transformer Engine's or MS-AMP's."""
        return self.fp8_linears is not None

    @property
    def msamp(self) -> bool:
        """Whether MS-AMP's FP8 linears (and, at O2, its optimizer) run."""
        return self.msamp_level is not None

    @property
    def te_recipe(self) -> str | None:
        """Transformer Engine's ``--fp8-recipe`` among its flags; None where it gives none."""
        flags = self.te_fp8
        return flags[flags.index("--fp8-recipe") + 1] if "--fp8-recipe" in flags[:-1] else None

    @property
    def flags(self) -> tuple[str, ...]:
        """The Megatron flags that run it (Megatron-LM's and Megatron-DeepSpeed's parsers share
        them): ``--fp16`` alone, else ``--bf16`` with TE's recipe or MS-AMP's level."""
        if self.half == "fp16":
            return ("--fp16",)
        level = ("--kit-msamp", self.msamp_level) if self.msamp_level is not None else ()
        return ("--bf16", *self.te_fp8, *level)

    def environment(self, msamp_scaling: str) -> dict[str, str]:
        """What it sets for the training processes: under MS-AMP, its FP8 linear's scaling (set
        even at the default, so the record says what ran and a shell's own value does not change
        it unrecorded) and, with the FP4 simulation, its switches; nothing otherwise."""
        if not self.msamp:
            return {}
        env = {MSAMP_SCALING_ENV: msamp_scaling}
        if self.fp4_simulation:
            env.update(FP4_SIMULATION_ENV)
        return env


# The MS-AMP seed's modes: te is fp8-delayed/fp8-current, msamp is msamp-o2 (O1 keeps fp32 Adam
# states), fp4 is O2 plus MS-AMP's FP4 simulation, GEMMs in fp8. Transformer Engine's and MS-AMP's
# fp8 pay at large GEMMs (bench.planning.microbatch); the FP4 simulation at none. Their default
# micro-batch stops at 4x the preset's: twice what was measured to pay (1.3b at 8 on H200), as the
# memory estimate is a filter, not a promise (-19 % to +18 % of measured peaks).
PRECISIONS: dict[str, Precision] = {precision.name: precision for precision in (
    Precision("bf16", peak="bf16", family="bf16"),
    Precision("fp16", peak="fp16", family="bf16", half="fp16"),
    # Delayed scaling: each tensor scaled by the amax history of earlier steps, as Transformer
    # Engine's DelayedScaling recipe defaults it (1024 steps, max); Megatron's own flags default to
    # a history of 1, most_recent, which the MS-AMP seed's te mode ran.
    Precision("fp8-delayed", peak="fp8", family="fp8", micro_batch_factor=4,
              te_fp8=(*HYBRID_FP8, "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024",
                      "--fp8-amax-compute-algo", "max")),
    # Current scaling: each tensor scaled by its own amax in the same step (Megatron's tensorwise).
    Precision("fp8-current", peak="fp8", family="fp8", micro_batch_factor=4,
              te_fp8=(*HYBRID_FP8, "--fp8-recipe", "tensorwise")),
    Precision("msamp-o1", peak="fp8", family="msamp", msamp_level="O1", micro_batch_factor=4),
    Precision("msamp-o2", peak="fp8", family="msamp", msamp_level="O2",
              state_bytes=MSAMP_O2_STATE_BYTES, micro_batch_factor=4),
    Precision("fp4", peak="fp8", family="fp4", msamp_level="O2", fp4_simulation=True,
              state_bytes=MSAMP_O2_STATE_BYTES),
)}
MSAMP_PRECISIONS = tuple(name for name, precision in PRECISIONS.items() if precision.msamp)
# The names as a type, for what validates one (a platform file's default_precision, the measured
# winners): made from PRECISIONS, so a new precision is one object above.
PrecisionName = Literal[tuple(PRECISIONS)]  # type: ignore[valid-type]


def resolve_precision(name: str) -> Precision:
    """A precision name or shorthand to the kit's precision; unknown names raise with the choices."""
    name = PRECISION_SHORTHANDS.get(name, name)
    if name not in PRECISIONS:
        raise ValueError(f"precision '{name}' is not one of {', '.join(PRECISIONS)} (fp8 = fp8-delayed)")
    return PRECISIONS[name]
