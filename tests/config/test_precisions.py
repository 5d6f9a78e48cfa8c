"""Each precision is one object that knows its facts; the kit asks it, and a new one plans whole."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest

from bench.config import precisions
from bench.config.platforms import load_platform
from bench.config.precisions import (
    FP4_SIMULATION_ENV,
    MSAMP_PRECISIONS,
    MSAMP_SCALING_ENV,
    PRECISIONS,
    PrecisionName,
    resolve_precision,
)
from bench.config.presets import get_preset
from bench.planning.memory import state_bytes
from bench.planning.plan import plan
from tests.conftest import options

DELAYED = ("--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024",
           "--fp8-amax-compute-algo", "max")
# The flags each precision ran with before it was an object (bench/planning/engines/common.py's
# precision_flags): the records' argv carry them, and verify reads them back.
FLAGS = {
    "bf16": ("--bf16",),
    "fp16": ("--fp16",),
    "fp8-delayed": ("--bf16", *DELAYED),
    "fp8-current": ("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"),
    "msamp-o1": ("--bf16", "--kit-msamp", "O1"),
    "msamp-o2": ("--bf16", "--kit-msamp", "O2"),
    "fp4": ("--bf16", "--kit-msamp", "O2"),
}


def test_the_table_holds_each_precision_under_its_name_in_the_kit_order() -> None:
    assert list(PRECISIONS) == list(FLAGS) == list(get_args(PrecisionName))
    assert all(name == precision.name for name, precision in PRECISIONS.items())
    assert MSAMP_PRECISIONS == ("msamp-o1", "msamp-o2", "fp4")


@pytest.mark.parametrize("name", FLAGS)
def test_each_renders_the_flags_it_always_ran_with(name: str) -> None:
    assert PRECISIONS[name].flags == FLAGS[name]


@pytest.mark.parametrize(("name", "peak", "family", "linears", "states"), [
    ("bf16", "bf16", "bf16", None, 12),
    ("fp16", "fp16", "bf16", None, 12),
    ("fp8-delayed", "fp8", "fp8", "Transformer Engine", 12),
    ("fp8-current", "fp8", "fp8", "Transformer Engine", 12),
    ("msamp-o1", "fp8", "msamp", "MS-AMP", 12),
    ("msamp-o2", "fp8", "msamp", "MS-AMP", 7),
    ("fp4", "fp8", "fp4", "MS-AMP", 7),
])
def test_each_knows_its_peak_family_fp8_linears_and_state_bytes(name, peak, family, linears, states) -> None:
    precision = PRECISIONS[name]
    assert (precision.peak, precision.family, precision.fp8_linears) == (peak, family, linears)
    assert precision.fp8 == (linears is not None) and precision.state_bytes == states
    assert state_bytes(precision) == states and state_bytes(precision, "paper-kit") == 5


def test_the_environment_is_ms_amps_scaling_and_fp4s_switches() -> None:
    assert [name for name, p in PRECISIONS.items() if p.environment("delayed")] == list(MSAMP_PRECISIONS)
    assert PRECISIONS["msamp-o1"].environment("delayed") == {MSAMP_SCALING_ENV: "delayed"}
    assert PRECISIONS["fp4"].environment("in-time") == {MSAMP_SCALING_ENV: "in-time",
                                                        **dict(FP4_SIMULATION_ENV)}


def test_the_te_recipe_is_read_from_its_flags() -> None:
    assert {name: p.te_recipe for name, p in PRECISIONS.items() if p.te_recipe} == {
        "fp8-delayed": "delayed", "fp8-current": "tensorwise"}


def test_a_shorthand_resolves_and_an_unknown_name_says_the_choices() -> None:
    assert resolve_precision("fp8") is PRECISIONS["fp8-delayed"]
    with pytest.raises(ValueError, match=r"'fp6' is not one of bf16, fp16, .*fp4 \(fp8 = fp8-delayed\)"):
        resolve_precision("fp6")


def test_a_new_precision_is_one_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Transformer Engine recipe the kit does not offer, added as one object, plans whole: its
    flags, its default micro-batch rule, the fp8 copies of the memory estimate and its peak."""
    mxfp8 = replace(PRECISIONS["fp8-current"], name="mxfp8",
                    te_fp8=("--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"))
    monkeypatch.setitem(precisions.PRECISIONS, "mxfp8", mxfp8)
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("azure-h200"),
                  options(nodes=1, precision="mxfp8"))
    current = plan(get_preset("1.3b"), "tp1pp1", load_platform("azure-h200"),
                   options(nodes=1, precision="fp8-current"))
    assert launch.precision is mxfp8
    assert "--bf16 --fp8-format e4m3 --fp8-recipe mxfp8" in " ".join(launch.train_args)
    assert (launch.layout.micro_batch, launch.memory_gb) == (current.layout.micro_batch, current.memory_gb)
    assert launch.peak_tflops == current.peak_tflops
