"""A run with ``--save`` times its saves: the interval the planner renders, and the warning a dry
run prints where the user's interval would time none."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.planning.saves import save_interval, timed_saves
from tests.inprocess import run_cli


@pytest.mark.parametrize(("iters", "asked", "platform", "interval", "saves"), [
    (30, None, 100, 15, 2),  # the Azure seed's 100 in the kit's 30 iterations
    (300, None, 100, 100, 3),  # long enough: the platform's interval stands
    (30, None, 0, 15, 2),  # no platform interval: once at the end would time nothing
    (3, None, 0, 1, 3),
    (30, 7, 100, 7, 4),  # the user's interval is the user's
])
def test_the_interval_times_at_least_two_saves(iters: int, asked: int | None, platform: int,
                                               interval: int, saves: int) -> None:
    got, notes = save_interval(iters, asked, platform)
    assert (got, timed_saves(iters, got)) == (interval, saves)
    assert bool(notes) == (asked is None and interval != platform)


def test_dry_run_warns_where_no_save_would_be_timed(tmp_path: Path) -> None:
    common = ("run", "175b", "tp8pp16sp", "--platform", "azure-h100", "--save", "--dry-run")
    quiet = run_cli(*common, "--save-interval", "10", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "times no save" not in quiet.stderr and "--save-interval 10\n" in quiet.stdout
    warned = run_cli(*common, "--save-interval", "100", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert ("note: --save-interval 100 times no save in 30 iterations: the only save is the one "
            "after the last iteration, which Megatron does not time") in warned.stderr
    assert "pass --save-interval 15" in warned.stderr
    assert not list(tmp_path.iterdir())  # a dry run writes nothing
