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
from bench.running.recordable import replaced_shell_problem
from tests.conftest import options
from tests.inprocess import run_cli
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


def test_the_option_never_silently_replaces_the_shells_value(tmp_path: Path) -> None:
    """A shell with its own PYTORCH_CUDA_ALLOC_CONF and --allocator: the user asked for both, so the
    run is refused before anything is written; the same value, or either alone, runs."""
    local = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                 options(gpus_present=1, gpu_name="NVIDIA H200", tuning=EXPANDABLE))
    shell = {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"}
    assert replaced_shell_problem(local, shell) == (
        "--allocator sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, but this shell has "
        "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6: unset it to run with --allocator, "
        "or leave --allocator out to run with the shell's value (recorded as the run's environment); "
        "nothing was run")
    assert replaced_shell_problem(local, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}) is None
    assert replaced_shell_problem(local, {}) is None
    assert replaced_shell_problem(_plan(EXPANDABLE), shell) is None  # a cluster job: the plan's alone
    argv = ("run", "1.3b", "tp1pp1", "--gpus", "1", "--dry-run", "--records", str(tmp_path / "r"))
    done = run_cli(*argv, "--allocator", "expandable", cwd=tmp_path, env=shell)
    assert done.returncode == 2 and done.stderr.startswith("error: --allocator sets ")
    assert done.stderr.count("\n") == 1 and not list(tmp_path.iterdir())
    assert run_cli(*argv, cwd=tmp_path, env=shell).returncode == 0
