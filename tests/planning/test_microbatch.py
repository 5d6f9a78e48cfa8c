"""fp8's default micro-batch (bench.planning.microbatch): the largest of the preset's and its
doublings that divides the per-rank batch and fits the memory estimate; bf16 and an explicit
--mbs are untouched."""

from __future__ import annotations

import math

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.planning.layout import build_layout
from bench.planning.microbatch import candidates, rule_of
from bench.planning.plan import LaunchPlan, plan
from bench.planning.sweep import sweep_plans
from tests.conftest import options

H100 = {"gpus_present": 2, "gpu_name": "NVIDIA H100 80GB HBM3",
        "capabilities": Capabilities(transformer_engine=True, apex_layer_norm=True)}


def _plan(preset: str, layout: str, **kw: object) -> LaunchPlan:
    return plan(get_preset(preset), layout, load_platform("local"), options(**{**H100, **kw}))


def _mbs_notes(launch: LaunchPlan) -> list[str]:
    return [note for note in launch.notes if note.startswith("micro-batch")]


@pytest.mark.parametrize("precision", ["fp8-delayed", "fp8-current"])
def test_fp8_takes_the_largest_micro_batch_that_fits(precision: str) -> None:
    # 1.3b dp2, 16 sequences per rank: 16 needs ~83 GB of 80, 8 needs ~49 GB.
    launch = _plan("1.3b", "tp1pp1", precision=precision)
    assert launch.layout.micro_batch == 8 and launch.layout.grad_accumulation == 2
    assert _mbs_notes(launch) == [f"micro-batch 8 ({precision} default: largest of 4, 8, 16 that "
                                  "fits, fp8 pays at large GEMMs; --mbs sets it)"]
    assert "--micro-batch-size" in launch.train_args
    assert launch.train_args[launch.train_args.index("--micro-batch-size") + 1] == "8"


@pytest.mark.parametrize("preset,layout,mbs,too_big", [("2.7b", "tp1pp1", 4, 8),
                                                       ("6.7b", "tp2pp1sp", 2, 4)])
def test_fp8_keeps_the_preset_micro_batch_when_a_larger_does_not_fit(
        preset: str, layout: str, mbs: int, too_big: int) -> None:
    assert _plan(preset, layout, precision="fp8-delayed").layout.micro_batch == mbs
    with pytest.raises(ValueError, match=rf"\(mbs {too_big}\) needs ~[0-9.]+ GB per GPU"):
        _plan(preset, layout, precision="fp8-delayed", mbs=too_big)


def test_a_larger_device_lets_fp8_grow_further() -> None:
    launch = _plan("6.7b", "tp2pp1sp", precision="fp8-delayed", gpu_name="NVIDIA H200")
    assert launch.layout.micro_batch == 8  # 4x the preset's: the rule's cap


# Micro-batch 16 fits 80 GB with neither O1's 12 bytes a parameter of optimizer state nor O2's 7:
# the estimate of O2 at micro-batch 8 (44.4 GB) is what 1.3b dp2 msamp-o2 used on two H200s (44.3
# GB, record 1.3b_tp1pp1dp2_local_20261126T001602Z-831811-c4), and 16 doubles its activations.
@pytest.mark.parametrize(("precision", "mbs"), [("msamp-o1", 8), ("msamp-o2", 8)])
def test_msamp_grows_like_fp8_and_fp4_keeps_the_preset_micro_batch(precision: str, mbs: int) -> None:
    caps = Capabilities(transformer_engine=True, msamp=True)
    launch = _plan("1.3b", "tp1pp1", precision=precision, capabilities=caps)
    assert launch.layout.micro_batch == mbs
    assert _mbs_notes(launch) == [f"micro-batch {mbs} ({precision} default: largest of 4, 8, 16 that "
                                  "fits, MS-AMP's fp8 pays at large GEMMs; --mbs sets it)"]
    assert _plan("1.3b", "tp1pp1", precision="fp4", capabilities=caps).layout.micro_batch == 4


@pytest.mark.parametrize("mbs", [2, 4, 16])
def test_an_explicit_micro_batch_always_wins(mbs: int) -> None:
    launch = _plan("1.3b", "tp1pp1", precision="fp8-delayed", mbs=mbs, force=True)
    assert launch.layout.micro_batch == mbs and not _mbs_notes(launch)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_bf16_and_fp16_keep_the_preset_micro_batch(precision: str) -> None:
    launch = _plan("1.3b", "tp1pp1", precision=precision)
    assert launch.layout.micro_batch == get_preset("1.3b").micro_batch == 4
    assert not _mbs_notes(launch)


def test_only_micro_batches_that_divide_the_rank_batch_are_tried() -> None:
    preset = get_preset("1.3b")
    # 24 sequences on one rank: 4 and 8 divide it, 16 does not.
    layout = build_layout("tp1pp1", preset, 1, 1, gbs=24)
    assert candidates(preset, layout, rule_of(PRECISIONS["fp8-delayed"])) == [4, 8]
    # dp2 with 8 sequences: 4 per rank, so only the preset's.
    assert _plan("1.3b", "tp1pp1", precision="fp8-delayed", gbs=8).layout.micro_batch == 4


def test_unknown_device_memory_keeps_the_preset_micro_batch() -> None:
    launch = _plan("1.3b", "tp1pp1", precision="fp8-delayed", gpu_name="")
    assert launch.accelerator is None and launch.layout.micro_batch == 4
    assert "the GPU's memory is unknown" in _mbs_notes(launch)[0]


def test_the_rules_double_to_their_cap_and_say_why() -> None:
    rules = {name: rule_of(precision) for name, precision in PRECISIONS.items()}
    assert {name for name, rule in rules.items() if rule} == {
        "fp8-delayed", "fp8-current", "msamp-o1", "msamp-o2"}
    for rule in filter(None, rules.values()):
        assert rule.max_factor > 1 and math.log2(rule.max_factor).is_integer() and rule.why


def test_a_sweep_gives_each_fp8_layout_its_default_micro_batch() -> None:
    found, _ = sweep_plans(get_preset("1.3b"), load_platform("local"),
                           options(**H100, precision="fp8-delayed"), 80.0)
    by_name = {p.layout.name: p.layout.micro_batch for p in found}
    assert by_name["tp1pp1dp2"] == 8
    assert all(mbs >= 4 for mbs in by_name.values())
