"""bench.train.capped: the wrapper that caps the GPU, then runs Megatron-DeepSpeed's script as Python
would. Its arguments and the script's run are checked here; the cap itself (bench.train.memory_cap)
needs a CUDA GPU, so on this machine the wrapper must stop with that error before running anything
(in the Python with torch that `nox -s tests` makes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.train.capped import USAGE, parse, run_script
from tests.conftest import megatron_python

REPO = Path(__file__).resolve().parents[2]


def test_the_arguments_are_the_cap_the_script_and_its_own() -> None:
    assert parse(["--kit-gpu-memory-cap", "80", "/t/pretrain_gpt.py", "--fp16", "--tp", "2"]) == (
        80.0, "/t/pretrain_gpt.py", ["--fp16", "--tp", "2"])
    with pytest.raises(ValueError, match="usage: python -m bench.train.capped"):
        parse(["/t/pretrain_gpt.py"])
    with pytest.raises(ValueError, match="--kit-gpu-memory-cap eighty: give the GB a GPU may use"):
        parse(["--kit-gpu-memory-cap", "eighty", "/t/pretrain_gpt.py"])
    assert USAGE.startswith("usage:")


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


def test_without_a_gpu_it_stops_with_the_caps_error_before_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w')\n")
    done = subprocess.run([megatron_python(), "-m", "bench.train.capped", "--kit-gpu-memory-cap", "80",
                           str(script)], cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "bench.train.capped: --kit-gpu-memory-cap 80 caps a CUDA GPU's memory" in done.stderr
    assert not (tmp_path / "ran").exists()
