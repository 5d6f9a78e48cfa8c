"""The sweep enumerates valid layouts for the GPUs present and drops those that cannot fit."""

from __future__ import annotations

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.sweep import SWEEP_ITERS, candidates, sweep_plans
from bench.planning.tuning import Tuning
from tests.conftest import options


def test_all_13b_layouts_fit_four_h200() -> None:
    keep, skipped = candidates(get_preset("13b"), 4, 1, 64, 141)
    assert {lay.name for lay in keep} == {"tp1pp1dp4", "tp1pp2dp2", "tp1pp4dp1", "tp2pp1dp2",
                                          "tp2pp2dp1", "tp4pp1dp1"}
    assert not skipped


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
