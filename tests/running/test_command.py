"""The command line as a user meets it: dry runs print scripts, bad input exits 2 writing nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]




@pytest.mark.parametrize("args,expect", [
    (["13b", "tp2pp8", "--platform", "lumi", "--account", "project_1"], ["#SBATCH --nodes=2", "singularity exec",
                                               "--cpu-bind=mask_cpu:", "--fp16"]),
    (["175b", "tp8pp16", "--platform", "azure-h100"], ["#SBATCH --nodes=16", "--container-image",
                                                       "--tensor-model-parallel-size 8"]),
    (["6.7b", "tp4pp1", "--mbs", "1", "--platform", "polaris", "--account", "datascience"],
     ["#PBS -l select=1:system=polaris", "mpiexec", "module load conda/2026-10-01"]),
])
def test_dry_run_prints_the_job_script(tmp_path: Path, args: list[str], expect: list[str]) -> None:
    result = run_cli("run", *args, "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for text in expect:
        assert text in result.stdout
    assert not list(tmp_path.iterdir()), "a dry run must write nothing"


@pytest.mark.parametrize("args,message", [
    (["13b", "tp2pp8", "--platform", "lumi", "--gpus", "8"], "= 16 GPUs, but the run has 8"),
    (["14b", "tp1pp1"], "unknown preset '14b'"),
    (["tp2pp8", "13b"], "'tp2pp8' is a layout and '13b' a preset: the preset comes first "
                        "(python -m bench run 13b tp2pp8)"),
    (["13b", "tp1pp1", "--platform", "frontier"], "unknown platform 'frontier'"),
    (["13b", "tp3pp1", "--platform", "lumi"], "40 attention heads, not divisible by tp3"),
    (["13b", "tp1pp1", "--platform", "lumi", "--gpus", "12"], "do not fill whole nodes of 8"),
    (["13b", "tp1pp1zero1", "--platform", "azure-h100", "--engine", "megatron"], "zero1 is a DeepSpeed stage"),
    (["13b", "tp2pp2", "--platform", "lumi", "--walltime", "2h"], "walltime '2h'"),
    (["13b", "tp2pp2", "--platform", "lumi", "--", "--micro-batch-size", "2"],
     "already sets --micro-batch-size"),
    (["13b", "tp2pp2", "--platform", "lumi", "--engine", "megatron-deepspeed", "--no-overlap"],
     "Megatron-engine settings"),
    (["13b", "tp2pp2", "--platform", "lumi", "--", "--manual-gc", "--records-dir", "r"],
     "--records-dir after '--' would go to Megatron"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str],
                                              message: str) -> None:
    result = run_cli("run", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert not list(tmp_path.iterdir())


def test_cluster_submit_without_scheduler_is_refused(tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()  # a PATH without sbatch: a laptop, not a login node
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "13b", "tp2pp8", "--platform", "lumi", "--account", "project_1",
                     cwd=work, env={"PATH": str(empty_path)})
    assert result.returncode == 2 and "'sbatch' is not on PATH" in result.stderr
    assert not list(work.iterdir())


def test_local_without_gpu_prints_plan_and_fails_honestly(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver")
    result = run_cli("run", "1.3b", "tp1pp1", cwd=tmp_path)
    assert result.returncode == 1
    assert "torchrun" in result.stdout and "--num-layers 24" in result.stdout
    assert "no NVIDIA GPU on this machine" in result.stderr
    assert not list(tmp_path.iterdir()), "no record or run directory without a GPU"


def test_lists(tmp_path: Path) -> None:
    assert "175b" in run_cli("presets", cwd=tmp_path).stdout
    assert "polaris" in run_cli("platforms", cwd=tmp_path).stdout


def test_a_python_without_pydantic_gets_one_line_naming_it(tmp_path: Path) -> None:
    # A fresh venv without site packages is a login node's bare Python: no pydantic there.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}
    result = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "-m", "bench", "presets"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "pip install 'pydantic>=2.11'" in result.stderr


@pytest.mark.parametrize("args,usage,hint", [
    (["run", "1.3b", "tp1pp1", "--platfrom", "lumi"], "usage: python -m bench run ", "did you mean --platform?"),
    (["images", "build", "cuda", "--forse"], "usage: python -m bench images build ", "did you mean --force?"),
])
def test_an_option_typo_shows_its_commands_usage_and_the_option_meant(
        tmp_path: Path, args: list[str], usage: str, hint: str) -> None:
    refused = run_cli(*args, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith(usage)
    assert hint in refused.stderr
