"""LUMI's seed rows as the seed ran them: with activation checkpointing (its TFLOP/s count the
recompute), and its pure data-parallel ZeRO rows with one micro-batch of 1 per GCD. The commands
docs/platforms.md gives plan on a GCD's 64 GB, render DeepSpeed's activation checkpointing, and the
same rows without the options are refused, the refusal naming the options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.images.pins import REPO_ROOT
from tests.inprocess import run_cli

DOCS = REPO_ROOT / "docs" / "platforms.md"
SEED_ROWS = {  # the documented command -> its memory estimate (GB per GCD)
    "13b tp2pp8 --nodes 2 --recompute full": 20.5,
    "13b dp8zero1 --recompute full --gbs 8": 56.6,
    "13b dp16zero1 --nodes 2 --recompute full --gbs 16": 42.2,
    "13b dp16zero2 --nodes 2 --recompute full --gbs 16": 42.2,
}


def _dry_run(command: str, cwd: Path):
    return run_cli("run", *command.split(), "--platform", "lumi", "--account", "project_XXX",
                   "--dry-run", cwd=cwd)


@pytest.mark.parametrize("command,gb", SEED_ROWS.items())
def test_the_documented_seed_rows_plan_with_the_seeds_recompute(command: str, gb: float,
                                                                tmp_path: Path) -> None:
    assert f"`{command}`" in " ".join(DOCS.read_text().split())
    done = _dry_run(command, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--checkpoint-activations" in done.stdout and "--deepspeed-activation-checkpointing" in done.stdout
    assert f"memory estimate: ~{gb} GB per GPU of 64 GB" in done.stderr


@pytest.mark.parametrize("command,gb,missing", [("13b dp8zero1", 87.8, "--recompute full --gbs 8"),
                                                ("13b dp8zero1 --recompute full", 79.1, "--gbs 8")])
def test_the_pure_data_parallel_row_without_the_seeds_options_is_refused_naming_them(
        command: str, gb: float, missing: str, tmp_path: Path) -> None:
    done = _dry_run(command, tmp_path)
    assert done.returncode == 2 and re.match(rf"error: 13b tp1pp1dp8zero1 \(mbs 1\) needs ~{gb} GB",
                                              done.stderr), done.stderr
    assert f"; {missing} (one sequence per GPU a step, activations recomputed) needs ~56.6 GB;" in done.stderr
    assert f"~{gb} GB" in DOCS.read_text()


def test_a_pure_data_parallel_row_that_fits_no_way_gets_no_recompute_hint(tmp_path: Path) -> None:
    done = run_cli("run", "175b", "dp8zero1", "--platform", "lumi", "--account", "project_XXX",
                   "--dry-run", cwd=tmp_path)
    assert done.returncode == 2 and "one sequence per GPU" not in done.stderr, done.stderr
