"""Precisions, the one vocabulary of the kit's number formats: the names a plan, a platform file
and a record use, the shorthands the command line takes, the format whose dense peak each is
measured against, and what MS-AMP's precisions set. Standard library only: the training entry on
the GPU node reads it too.
"""

from __future__ import annotations

from typing import Literal, get_args

# fp8-delayed / fp8-current: Transformer Engine's delayed-scaling and current (per-tensor) scaling
# recipes (bench.planning.engines.common.precision_flags). "fp8" on the command line means fp8-delayed.
# msamp-o1 / msamp-o2 / fp4: MS-AMP on top of Transformer Engine fp8 (the MS-AMP seed's "msamp" mode
# is O2; "fp4" is O2 plus MS-AMP's FP4 simulation of weights and activations, GEMMs in fp8).
Precision = Literal["bf16", "fp16", "fp8-delayed", "fp8-current", "msamp-o1", "msamp-o2", "fp4"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
PRECISION_SHORTHANDS = {"fp8": "fp8-delayed"}
MSAMP_PRECISIONS = ("msamp-o1", "msamp-o2", "fp4")
PeakFormat = Literal["bf16", "fp16", "fp8"]  # the formats an accelerator file gives dense peaks for
# MS-AMP's optimization level per precision (bench.train.msamp reads --kit-msamp).
MSAMP_LEVEL = {"msamp-o1": "O1", "msamp-o2": "O2", "fp4": "O2"}
# What MS-AMP 9746ea8 reads (msamp/megatron/layers.py) and the seed's fp4 mode exports: FP4 weights
# with the differentiable gradient estimator, FP4 activations. (The seed's README calls them
# USE_W_SIMU_FP4 / USE_W_DIFFERENTIABLE_GRADIENT_ESTIMATOR / USE_A_SIMU_FP4; its scripts and MS-AMP
# use these names.)
# How MS-AMP's FP8 linear scales its casts (patches/ms-amp/0008; --msamp-scaling sets it).
MSAMP_SCALING_ENV = "MSAMP_FP8_SCALING"
FP4_SIMULATION_ENV = (("MSAMP_USE_WEIGHT_SIMULATE_FP4", "1"),
                      ("MSAMP_USE_WEIGHT_DIFFERENTIABLE_GRADIENT_ESTIMATOR", "1"),
                      ("MSAMP_USE_ACTIVATION_SIMULATE_FP4", "1"))


def peak_format(precision: str) -> str:
    """The number format whose dense peak a precision is measured against: fp8-delayed -> fp8 (a
    record's precision the kit no longer offers: its prefix)."""
    return "fp8" if precision in MSAMP_PRECISIONS else precision.split("-", 1)[0]


def resolve_precision(name: str) -> str:
    """A precision name or shorthand to the kit's name; unknown names raise with the choices."""
    name = PRECISION_SHORTHANDS.get(name, name)
    if name not in PRECISIONS:
        raise ValueError(f"precision '{name}' is not one of {', '.join(PRECISIONS)} (fp8 = fp8-delayed)")
    return name
