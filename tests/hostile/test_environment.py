"""Issue 48, item 7: the environment a shell brings. Cluster defaults (``$BENCH_ACCOUNT`` and the
like) are ignored where a platform's scheduler takes no such option, while the same value typed as
an option is refused as before; a variable that changes a run (the allocator's, NCCL's) is
recorded as its variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.records.store import load_records
from tests.hostile.machine import bench_run
from tests.inprocess import run_cli
from tests.running.test_reliability import refused

CLUSTER_SHELL = {"BENCH_ACCOUNT": "project_1", "BENCH_PARTITION": "standard-g",
                 "BENCH_WALLTIME": "01:00:00", "BENCH_QUEUE": "debug"}


@pytest.mark.slow  # a real `python -m bench run` child: half a second and more
def test_a_run_here_ignores_the_cluster_defaults_of_the_shell(tmp_path: Path) -> None:
    run = bench_run(tmp_path, env=CLUSTER_SHELL)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and [r.status.value for r in records] == ["ok"]


def test_a_dry_run_here_ignores_them_too(tmp_path: Path) -> None:
    result = run_cli("run", "1.3b", "tp1pp1", "--dry-run", cwd=tmp_path, env=CLUSTER_SHELL)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("typed", ["--account", "--account=project_1"])
def test_the_same_value_typed_is_still_refused_here(tmp_path: Path, typed: str) -> None:
    args = [typed, "project_1"] if "=" not in typed else [typed]
    refused(run_cli("run", "1.3b", "tp1pp1", *args, "--dry-run", cwd=tmp_path, env=CLUSTER_SHELL),
            "--account does not apply on platform local")


def test_a_slurm_job_takes_the_account_and_ignores_a_pbs_queue(tmp_path: Path) -> None:
    result = run_cli("run", "13b", "tp2pp8", "--platform", "lumi", "--dry-run", cwd=tmp_path,
                     env=CLUSTER_SHELL)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --account=project_1" in result.stdout
    assert "#SBATCH --time=01:00:00" in result.stdout


@pytest.mark.slow  # a real `python -m bench run` child: half a second and more
def test_a_shell_variable_that_changes_the_run_is_its_variant(tmp_path: Path) -> None:
    run = bench_run(tmp_path, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                   "NCCL_ALGO": "Ring", "HOME_LIKE": "ignored",
                                   "OMP_NUM_THREADS": "16",
                                   # NVIDIA's images export it; nothing reads it
                                   "NCCL_VERSION": "2.28.3-1"})
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and len(records) == 1
    record = records[0]
    assert record.variant.items() >= {"env:NCCL_ALGO": "Ring", "env:OMP_NUM_THREADS": "16",
                                      "env:PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}.items()
    assert all(key.startswith("env:") for key in record.variant)  # nothing else is a variant
    assert record.env["NCCL_ALGO"] == "Ring" and "HOME_LIKE" not in record.env
    assert "env:NCCL_VERSION" not in record.variant
