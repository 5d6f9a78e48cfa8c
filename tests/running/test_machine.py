"""The machine is asked once per command: one probe of the training Python, one GPU detection,
however many runs a campaign plans; a second command asks again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.running import gpus as hardware
from tests.inprocess import run_cli
from tests.running.test_command import REPO


def test_a_campaign_asks_the_machine_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked = {"probe": 0, "gpus": 0}
    real_run, real_detect = subprocess.run, hardware.detect_gpus

    def run(argv, *args, **kwargs):
        asked["probe"] += "bench.running.trainenv" in argv
        return real_run(argv, *args, **kwargs)

    def detect() -> hardware.LocalGPUs:
        asked["gpus"] += 1
        return real_detect()

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(hardware, "detect_gpus", detect)
    campaign = REPO / "results" / "campaigns" / "h200-tuning.toml"
    for command in (1, 2):
        result = run_cli("run", "--campaign", str(campaign), "--dry-run", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("# command.sh for run") == 12
        assert asked == {"probe": command, "gpus": command}  # once per command, not per run


def test_a_bad_option_is_refused_before_the_machine_is_asked(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    def no_probe(*args, **kwargs):
        raise AssertionError("the training Python was probed for a run that is refused")

    monkeypatch.setattr("bench.running.machine.facts", no_probe)
    result = run_cli("run", "1.3b", "tp1pp1", "--iters", "3", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "--iters 3 is too few to measure" in result.stderr
