"""Issue 48, item 7: a data file (campaign, preset, platform) is read only when it is a regular file
of at most ``MAX_TOML_BYTES``: a device grows no memory, a FIFO does not hang, and a control
character in a value reaches neither the terminal nor a job script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.tomlfile import MAX_TOML_BYTES
from tests.inprocess import run_cli
from tests.running.test_reliability import REPO, refused

CAMPAIGN = 'description = "x"\n[[run]]\nmodel = "1.3b"\nlayout = "tp1pp1"\n'


def _bench(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A real ``python -m bench``: without the checks, a FIFO blocks and /dev/zero never ends, and
    the timeout ends the test instead of the suite."""
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


NOT_REGULAR = "not a regular file (a device, FIFO or socket); a data file is a plain TOML file"


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_campaign_that_is_a_device_or_fifo_is_refused(tmp_path: Path, special: str) -> None:
    path = _fifo(tmp_path / "c.toml") if special == "fifo" else Path(special)
    refused(_bench(tmp_path, "run", "--campaign", str(path), "--dry-run"), f"{path}: {NOT_REGULAR}")


@pytest.mark.parametrize("variable,special", [
    ("BENCH_PRESETS_DIR", "/dev/zero"), ("BENCH_PRESETS_DIR", "fifo"),
    ("BENCH_PLATFORMS_DIR", "/dev/zero"), ("BENCH_PLATFORMS_DIR", "fifo")])
def test_a_toml_link_to_a_device_in_a_data_folder_is_refused(tmp_path: Path, variable: str,
                                                              special: str) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    target = _fifo(tmp_path / "pipe") if special == "fifo" else Path(special)
    (folder / "zz.toml").symlink_to(target)
    work = tmp_path / "work"
    work.mkdir()
    refused(_bench(work, "run", "1.3b", "tp1pp1", "--platform", "zz", "--dry-run",
                   env={variable: str(folder)}), f"{folder / 'zz.toml'}: {NOT_REGULAR}")
    assert not list(work.iterdir())


def test_a_campaign_over_the_size_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text(CAMPAIGN + "# " + "x" * MAX_TOML_BYTES + "\n")
    refused(run_cli("run", "--campaign", str(path), "--dry-run", cwd=tmp_path),
            f"{path}: larger than 1 MiB; a data file is a few KB of TOML")


def test_a_control_character_in_a_campaign_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN + 'account = "p\\u001b[2J\\n#SBATCH --wrap=x"\n')
    result = run_cli("run", "--campaign", str(path), "--dry-run", cwd=tmp_path)
    refused(result, f"{path}: key 'run.account' holds the control character \\x1b; remove it")
    assert "\x1b" not in result.stderr + result.stdout


def test_a_campaign_whose_name_holds_a_control_character_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c\x1b[31m.toml"  # the campaign's name is its file's stem
    path.write_text(CAMPAIGN)
    result = run_cli("run", "--campaign", str(path), "--dry-run", "--platform", "lumi",
                     "--account", "p1", cwd=tmp_path)
    assert result.returncode == 2 and "\x1b" not in result.stderr + result.stdout
    assert "control character" in result.stderr and "c\\x1b[31m" in result.stderr


@pytest.mark.parametrize("value", ["p\x1b]0;owned\x07", "p\n#SBATCH --wrap=rm", "p\rq"])
def test_a_control_character_on_the_command_line_is_refused(tmp_path: Path, value: str) -> None:
    result = run_cli("run", "1.3b", "tp2pp8", "--platform", "lumi", "--account", value,
                     "--dry-run", cwd=tmp_path)
    refused(result, "holds a control character (shown escaped); type it without one")
    assert not any(ch in result.stderr + result.stdout for ch in "\x1b\x07\r")
    assert "\n#SBATCH" not in result.stderr + result.stdout


def test_an_error_line_is_bounded(tmp_path: Path) -> None:
    result = run_cli("run", "x" * 100_000, "tp1pp1", "--dry-run", cwd=tmp_path)
    refused(result, "unknown preset", "more characters)")
    assert len(result.stderr) < 2_200
