"""The sweep enumerates valid layouts for the GPUs present and drops those that cannot fit."""

from __future__ import annotations

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.sweep import SWEEP_ITERS, candidates, ranking, sweep_plans
from bench.planning.tuning import Tuning
from tests.conftest import options


def test_all_13b_layouts_fit_four_h200_in_every_shape() -> None:
    """Each split, with sequence parallelism where tp > 1 and two virtual stages where pp > 1."""
    keep, skipped = candidates(get_preset("13b"), 4, 1, 64, 141)
    assert {lay.name for lay in keep} == {
        "tp1pp1dp4", "tp1pp2dp2", "tp1pp2vp2dp2", "tp1pp4dp1", "tp1pp4vp2dp1", "tp2pp1dp2",
        "tp2pp1dp2sp", "tp2pp2dp1", "tp2pp2dp1sp", "tp2pp2vp2dp1", "tp2pp2vp2dp1sp", "tp4pp1dp1",
        "tp4pp1dp1sp"}
    assert not skipped


def test_sequence_parallel_layouts_only_where_the_layers_take_them() -> None:
    """Plain torch layers (no Transformer Engine, no apex layer norm) cannot run sp: the sweep
    leaves those layouts out instead of planning runs the engine refuses."""
    local = load_platform("local")
    plain, _ = sweep_plans(get_preset("13b"), local, options(gpus_present=4, gpu_name="NVIDIA H200"), 141)
    te, _ = sweep_plans(get_preset("13b"), local, options(gpus_present=4, gpu_name="NVIDIA H200",
                                                          capabilities=Capabilities(transformer_engine=True)), 141)
    assert not any(p.layout.sp for p in plain) and any(p.layout.vp == 2 for p in plain)
    assert {p.layout.name for p in te} - {p.layout.name for p in plain} == {
        "tp2pp1dp2sp", "tp2pp2dp1sp", "tp2pp2vp2dp1sp", "tp4pp1dp1sp"}


def test_the_ranking_gives_each_layout_its_expectation_and_memory() -> None:
    plans, _ = sweep_plans(get_preset("13b"), load_platform("azure-h100"),
                           options(nodes=1, gpus_present=0, gpu_name=""), 80)
    line = ranking(plans)
    assert line.startswith("expected, fastest first (TFLOP/s/GPU ±")
    shown = line.split(": ", 1)[1].split("; ")[0].split(", tp")
    assert len(shown) == len(plans) and any("sp " in part for part in shown)
    assert all(part.endswith(" GB)") for part in shown)
    assert "launch-bound (largest term the host's): with Transformer Engine's CUDA graphs" in line


def test_megatron_deepspeed_is_offered_plain_splits_only() -> None:
    """Its pipeline engine has no virtual stages and its sequence parallelism is refused."""
    plans, skipped = sweep_plans(get_preset("13b"), load_platform("lumi"), options(nodes=2, gpus_present=0,
                                                                                   gpu_name=""), 64)
    assert plans and all(p.layout.vp == 1 and not p.layout.sp for p in plans)
    assert all(lay.vp == 1 and not lay.sp for lay, _ in skipped)


def test_memory_estimate_drops_layouts_on_smaller_gpus() -> None:
    keep, skipped = candidates(get_preset("13b"), 4, 1, 64, 80)
    assert "tp1pp1dp4" in {lay.name for lay, _ in skipped}  # ~108 GB of 80
    assert all(gb > 0.92 * 80 for _, gb in skipped)
    assert keep


def test_sweep_plans_and_refusal() -> None:
    local = load_platform("local")
    plans, _ = sweep_plans(get_preset("6.7b"), local,
                           options(gpus_present=4, gpu_name="NVIDIA H200", iters=SWEEP_ITERS), 141)
    assert all(p.iters == SWEEP_ITERS and p.world_size == 4 for p in plans)
    assert len({p.run_id for p in plans}) == len(plans)
    with pytest.raises(ValueError, match="no layout of 13b fits 1 GPUs of 141 GB"):
        sweep_plans(get_preset("13b"), local, options(gpus_present=1, gpu_name="NVIDIA H200"), 141)


def test_sweep_counts_gradients_as_the_planner_does() -> None:
    """fp32 gradients (--grad-reduce fp32): 13b dp4 no longer fits 141 GB; the sweep skips it
    instead of handing the planner a layout it refuses."""
    tuned = Tuning(grad_reduce="fp32")
    plans, skipped = sweep_plans(get_preset("13b"), load_platform("local"),
                                 options(gpus_present=4, gpu_name="NVIDIA H200", tuning=tuned), 141)
    assert "tp1pp1dp4" in {lay.name for lay, _ in skipped}
    assert plans and all(dict(p.variant) == {"grad_reduce": "fp32"} for p in plans)
