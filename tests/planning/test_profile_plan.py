"""--profile: the steps it adds after the measured ones, Megatron's profiler flags, what is refused."""

from __future__ import annotations

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.measure.profile import PROFILE_LEAD_STEPS, PROFILE_STEPS
from bench.planning.plan import plan
from tests.conftest import options


def _flag(args: tuple[str, ...], name: str) -> str:
    return args[args.index(name) + 1]


def test_profile_trains_the_profiled_steps_after_the_measured_ones() -> None:
    launch = plan(get_preset("6.7b"), "tp2pp1sp", load_platform("azure-h100"),
                  options(gpus=8, iters=12, profile=True))
    args = launch.train_args
    assert launch.iters == 12 and launch.profile_steps == PROFILE_STEPS
    start = 12 + PROFILE_LEAD_STEPS  # the profiler arms and warms up in the steps before
    assert _flag(args, "--train-iters") == str(start + PROFILE_STEPS)
    assert {"--profile", "--use-pytorch-profiler"} <= set(args)
    assert _flag(args, "--profile-step-start") == str(start)
    assert _flag(args, "--profile-step-end") == str(start + PROFILE_STEPS)
    assert _flag(args, "--profile-ranks") == "0"


def test_without_profile_no_profiler_flag_and_no_extra_step() -> None:
    launch = plan(get_preset("6.7b"), "tp2pp1sp", load_platform("azure-h100"), options(gpus=8, iters=12))
    assert launch.profile_steps == 0 and "--profile" not in launch.train_args
    assert _flag(launch.train_args, "--train-iters") == "12"


def test_profile_is_refused_for_megatron_deepspeed_before_planning() -> None:
    with pytest.raises(ValueError, match="--profile captures steps through megatron-core"):
        plan(get_preset("1.3b"), "tp1pp1zero1", load_platform("azure-h100"),
             options(gpus=8, profile=True, engine="megatron-deepspeed"))
