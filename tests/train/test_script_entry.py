"""bench.train.script_entry: the entry that probes the host's pace, caps the GPU where asked, then
runs Megatron-DeepSpeed's script as Python would. Its arguments and the script's run are checked
here; without a cap it prints the probe's line (on this machine's CPU) and runs the script; the cap
itself (bench.train.memory_cap) needs a CUDA GPU, so here a capped entry must stop with that error
before running anything (in the Python with torch that `nox -s tests` makes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.measure.host_probe_line import read_probe_line
from bench.train.script_entry import parse, run_script
from tests.conftest import megatron_python

REPO = Path(__file__).resolve().parents[2]


def test_the_arguments_are_the_cap_if_any_the_script_and_its_own() -> None:
    assert parse(["--kit-gpu-memory-cap", "80", "/t/pretrain_gpt.py", "--fp16", "--tp", "2"]) == (
        80.0, "/t/pretrain_gpt.py", ["--fp16", "--tp", "2"])
    assert parse(["/t/pretrain_gpt.py", "--fp16"]) == (None, "/t/pretrain_gpt.py", ["--fp16"])
    for wrong in ([], ["--fp16", "/t/pretrain_gpt.py"], ["--kit-gpu-memory-cap", "80"]):
        with pytest.raises(ValueError, match=r"usage: python -m bench.train.script_entry \[--kit-gpu"):
            parse(wrong)
    with pytest.raises(ValueError, match="--kit-gpu-memory-cap eighty: give the GB a GPU may use"):
        parse(["--kit-gpu-memory-cap", "eighty", "/t/pretrain_gpt.py"])


def test_the_script_runs_as_main_with_its_folder_first_and_its_own_argv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "megatron_like.py").write_text("NAME = 'from the script folder'\n")
    script = tmp_path / "train.py"
    out = tmp_path / "out.txt"
    script.write_text(
        "import sys, megatron_like\n"
        f"open({str(out)!r}, 'w').write(' '.join([__name__, megatron_like.NAME, *sys.argv[1:]]))\n")
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    run_script(str(script), ["--fp16", "--seed", "1"])
    assert out.read_text() == "__main__ from the script folder --fp16 --seed 1"


def _entry(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([megatron_python(), "-m", "bench.train.script_entry", *args], cwd=tmp_path,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)


def test_without_a_cap_it_prints_the_hosts_pace_then_runs_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nopen('ran', 'w').write(' '.join(sys.argv[1:]))\n")
    done = _entry(tmp_path, str(script), "--fp16")
    assert done.returncode == 0, done.stderr
    line = read_probe_line(done.stdout)
    assert line is not None and line.device == "cpu" and line.op_us > 0
    assert (tmp_path / "ran").read_text() == "--fp16"


def test_without_a_gpu_it_stops_with_the_caps_error_before_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w')\n")
    done = _entry(tmp_path, "--kit-gpu-memory-cap", "80", str(script))
    assert done.returncode == 2, done.stderr
    assert "bench.train.script_entry: --kit-gpu-memory-cap 80 caps a CUDA GPU's memory" in done.stderr
    assert not (tmp_path / "ran").exists()
