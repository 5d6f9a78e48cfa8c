"""--allocator: torch's caching allocator as a run option: parsed, a campaign key, put into the run's
environment and recorded as a variant, and refused where the platform sets the allocator itself.
Two H200s capped at 80 GB ran out of memory with 6.6 and 8.6 GiB reserved but unallocated
(docs/reports/2026-11-26-h200x2-msamp-modules.md): the A/B this option is for."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.planning.tuning import DEFAULT_TUNING, Tuning
from tests.conftest import options
from tests.planning.msamp_options import check_env_variant, check_option_and_campaign_key

EXPANDABLE = Tuning(allocator="expandable")


def _plan(tuning: Tuning = DEFAULT_TUNING, platform: str = "azure-h200"):
    return plan(get_preset("2.7b"), "tp1pp1", load_platform(platform),
                options(nodes=1, precision="fp8-delayed", tuning=tuning))


def test_the_option_parses_and_is_a_campaign_key(tmp_path: Path) -> None:
    check_option_and_campaign_key(tmp_path, "allocator", "expandable", "default", "huge")


def test_expandable_sets_torch_s_allocator_configuration_and_is_a_variant() -> None:
    default, expandable = _plan(), _plan(EXPANDABLE)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in dict(default.env) and default.variant == ()
    check_env_variant(default, expandable, "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                      "allocator", "expandable")


def test_refused_where_the_platform_sets_the_allocator_itself() -> None:
    platform = load_platform("azure-h200")
    own = platform.model_copy(update={"env": {**platform.env,
                                              "PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.8"}})
    with pytest.raises(ValueError, match=r"--allocator expandable: the platform's \[env\] sets "
                       r"PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8 already; drop "
                       r"--allocator or that line"):
        plan(get_preset("2.7b"), "tp1pp1", own, options(nodes=1, precision="fp8-delayed", tuning=EXPANDABLE))
    assert "PYTORCH_CUDA_ALLOC_CONF" in dict(
        plan(get_preset("2.7b"), "tp1pp1", own, options(nodes=1, precision="fp8-delayed")).env)
