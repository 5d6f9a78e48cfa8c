"""A run's ``--timeout`` against the time its expected step says it takes.

On 2026-11-29 two profiled 2.7b runs at global batch 128 on one H200 were cut by limits of 285 and
292 s (docs/reports/2026-11-29-h200-apex.md): 25 measured steps, 4 more under ``--profile``, at
about 8.1 s, and the trace to write. The kit knew the step before launching them; these tests
hold that it says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure.profile import PROFILE_LEAD_STEPS, PROFILE_STEPS
from bench.running.wall_time import OUTSIDE_STEPS_S, expected_wall_s, steps_trained, timeout_problem
from tests.inprocess import run_cli

# One H200 stated by the platform file (no probe of a GPU this machine lacks), no TE.
ONE_H200 = """description = "one H200 stated, nothing probed"
scheduler = "none"
launcher = "torchrun"
container_runtime = "docker"
gpus_per_node = 1
accelerator = "h200-sxm"
default_engine = "megatron"
default_precision = "bf16"

[capabilities]
transformer_engine = false
"""
RUN = ("run", "2.7b", "tp1pp1", "--mbs", "8", "--gbs", "128", "--iters", "25", "--dropout", "0",
       "--layers", "local")


@pytest.fixture()
def platforms(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "platforms"
    folder.mkdir()
    (folder / "local.toml").write_text(ONE_H200)
    return {"BENCH_PLATFORMS_DIR": str(folder)}


def _plan(tmp_path: Path, env: dict[str, str], *more: str):
    """The one launch of ``RUN`` and ``more``, planned with ``env`` (the platform file)."""
    from bench.running.arguments import parse_run_argv
    from bench.running.run import launches_for
    from tests.inprocess import _environment

    with _environment(env):
        return launches_for(parse_run_argv([*RUN[1:], *more]))[0]


def test_the_run_takes_its_measured_and_profiled_steps_at_the_expected_step(tmp_path, platforms) -> None:
    plain, profiled = _plan(tmp_path, platforms), _plan(tmp_path, platforms, "--profile")
    assert steps_trained(plain) == 25 and steps_trained(profiled) == 25 + PROFILE_LEAD_STEPS + PROFILE_STEPS
    expected = profiled.expected
    assert expected is not None and 8.0 < expected.step_s < 9.5  # the records: 8.09-8.30 s
    fastest, slowest = expected_wall_s(profiled)  # type: ignore[misc]
    steps_s = 29 * expected.step_s
    assert fastest == pytest.approx(OUTSIDE_STEPS_S[0] + steps_s * (1 - expected.band))
    assert slowest == pytest.approx(OUTSIDE_STEPS_S[1] + steps_s * (1 + expected.band))
    # the cut runs: a limit of 285 s is warned about; 200 s cannot be met; 400 s leaves room
    assert timeout_problem(profiled, 285)[0] == "warning"  # type: ignore[index]
    level, words = timeout_problem(profiled, 200)  # type: ignore[misc]
    assert level == "error" and words.startswith("2.7b tp1pp1dp1: --timeout 200 s, but its 29 steps")
    assert f"give --timeout {slowest:.0f} or more" in words
    assert timeout_problem(profiled, 400) is None


def test_a_limit_no_run_can_meet_is_refused_before_anything_runs(tmp_path, platforms) -> None:
    refused = run_cli(*RUN, "--profile", "--timeout", "200", "--dry-run", cwd=tmp_path, env=platforms)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "error: 2.7b tp1pp1dp1: --timeout 200 s" in refused.stderr
    assert "it would be cut and recorded as failed" in refused.stderr
    warned = run_cli(*RUN, "--profile", "--timeout", "285", "--dry-run", cwd=tmp_path, env=platforms)
    assert warned.returncode == 0 and "warning: 2.7b tp1pp1dp1: --timeout 285 s" in warned.stderr
    assert "a run at the slow end would be cut" in warned.stderr
    fine = run_cli(*RUN, "--dry-run", cwd=tmp_path, env=platforms)  # the default limit, an hour
    assert fine.returncode == 0 and "--timeout" not in fine.stderr


def test_a_campaign_is_refused_before_its_first_run(tmp_path, platforms) -> None:
    campaign = tmp_path / "pair.toml"
    campaign.write_text('description = "two runs"\n\n[defaults]\nmodel = "2.7b"\nlayout = "tp1pp1"\n'
                        'mbs = 8\ngbs = 128\niters = 25\n\n[[run]]\nname = "short"\n\n'
                        '[[run]]\nname = "profiled"\nprofile = true\n')
    refused = run_cli("run", "--campaign", str(campaign), "--timeout", "200", "--dry-run", cwd=tmp_path,
                      env=platforms)
    assert refused.returncode == 2 and "campaign" not in refused.stdout
    assert "--timeout 200 s, but its 25 steps" in refused.stderr
    assert "--timeout 200 s, but its 29 steps" in refused.stderr


def test_nothing_is_said_where_the_model_expects_nothing(tmp_path, platforms) -> None:
    from dataclasses import replace

    unexpected = replace(_plan(tmp_path, platforms, "--profile"), expected=None)
    assert expected_wall_s(unexpected) is None and timeout_problem(unexpected, 1) is None
