"""Issue 48, item 7: counts of 10**30 are refused with their bound, not planned."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.planning.checks import MAX_BATCH, MAX_ITERS
from tests.inprocess import run_cli
from tests.running.test_reliability import refused

HUGE = str(10**30)


@pytest.mark.parametrize("flag,most", [("--iters", MAX_ITERS), ("--gbs", MAX_BATCH),
                                       ("--mbs", MAX_BATCH)])
def test_a_huge_count_is_refused_with_its_bound(tmp_path: Path, flag: str, most: int) -> None:
    refused(run_cli("run", "1.3b", "tp1pp1", flag, HUGE, "--dry-run", cwd=tmp_path),
            f"{flag} must be at most {most:,}, got {HUGE}")


def test_a_campaigns_huge_count_is_refused_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'description = "x"\n[[run]]\nmodel = "1.3b"\nlayout = "tp1pp1"\n'
                    f"iters = {10**18}\n")
    refused(run_cli("run", "--campaign", str(path), "--dry-run", cwd=tmp_path),
            f"--iters must be at most {MAX_ITERS:,}, got {10**18}")


def test_the_bound_itself_plans(tmp_path: Path) -> None:
    result = run_cli("run", "1.3b", "tp1pp1", "--iters", str(MAX_ITERS), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
