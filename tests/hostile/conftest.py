"""Shared plans of the hostile-input tests (issue 35, items 10-14)."""

from __future__ import annotations

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import LaunchPlan, plan
from bench.records.build import PlanSummary, plan_summary
from tests.conftest import options


@pytest.fixture()
def launch() -> LaunchPlan:
    """1.3b tp1pp1 on one H200, as tests/fixtures/logs/megatron_ok_1.3b_tp1pp1_h200.log ran."""
    return plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                options(gpus_present=1, gpu_name="NVIDIA H200", mbs=4, gbs=32, iters=15))


@pytest.fixture()
def summary(launch: LaunchPlan) -> PlanSummary:
    return plan_summary(launch)
