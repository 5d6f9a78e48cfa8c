"""Issue 48, item 6: a missing ``--data-path`` file is caught before anything is written or
submitted. A run here, and a cluster's path this machine sees, are refused in one error line; a
cluster path not visible here is submitted with a note, and its job stops before its launcher."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.records.store import load_records
from bench.render import slurm
from bench.render.common import END_MARKER
from tests.conftest import options
from tests.hostile.machine import bench_run
from tests.inprocess import run_cli
from tests.planning.test_clusters import RECORDER, _run_with_standins
from tests.running.test_reliability import refused

FIX = "make it with 'python -m bench data ... --out-dir DIR --name NAME'"


def _sbatch(tmp_path: Path) -> dict[str, str]:
    """An environment whose sbatch and qsub record their calls (tmp_path/calls.jsonl) and answer a
    job id, as ``sbatch --parsable`` and ``qsub`` print it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "qsub"):
        (bin_dir / tool).write_text(RECORDER + 'print("7")\n')
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD_TO": str(tmp_path / "calls.jsonl")}


def _data(folder: Path, prefix: str) -> None:
    (folder / prefix).parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".bin", ".idx"):
        (folder / f"{prefix}{suffix}").write_bytes(b"")


@pytest.mark.slow  # a real `python -m bench run` child: half a second and more
def test_a_run_here_with_a_missing_data_file_writes_nothing(tmp_path: Path) -> None:
    _data(tmp_path, "data/half_text_document")
    (tmp_path / "data/half_text_document.idx").unlink()
    run = bench_run(tmp_path, "run", "1.3b", "tp1pp1", "--mbs", "4", "--gbs", "32", "--iters", "15",
                    "--data-path", "data/half_text_document")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: --data-path data/half_text_document: {tmp_path}/data/"
                      "half_text_document.idx not found, so nothing was written or submitted: "
                      f"{FIX} (the prefix is DIR/NAME_text_document; docs/megatron-deepspeed.md), "
                      "or pass --data-path"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.slow  # a real `python -m bench run` child: half a second and more
def test_a_run_here_with_its_data_runs(tmp_path: Path) -> None:
    _data(tmp_path, "data/d_text_document")
    run = bench_run(tmp_path, "run", "1.3b", "tp1pp1", "--mbs", "4", "--gbs", "32", "--iters", "15",
                    "--data-path", "data/d_text_document")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and [r.status.value for r in records] == ["ok"]


def test_a_cluster_path_in_the_submit_folder_is_checked_before_submit(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "13b", "tp2pp8", "--platform", "lumi", "--account", "project_1",
                     cwd=work, env=_sbatch(tmp_path))
    refused(result, f"--data-path data/meg-gpt2_text_document: {work}/data/meg-gpt2_text_document.bin"
                    f" and {work}/data/meg-gpt2_text_document.idx not found", FIX)
    assert not list(work.iterdir()) and not (tmp_path / "calls.jsonl").exists()


def test_a_cluster_path_on_a_folder_seen_here_is_checked(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "1.3b", "tp4pp1", "--platform", "polaris", "--account", "project_1",
                     "--data-path", str(work / "nothing_text_document"), cwd=work,
                     env=_sbatch(tmp_path))
    refused(result, f"{work}/nothing_text_document.bin and ")
    assert not list(work.iterdir())


def test_a_cluster_path_not_seen_here_is_submitted_with_a_note(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "1.3b", "tp1pp1", "--platform", "azure-h100", "--account", "p1",
                     "--nodes", "1", cwd=work, env=_sbatch(tmp_path))
    assert result.returncode == 0, result.stderr
    assert ("note: the data files of --data-path /data/megatron-bench/slimpajama/preprocessed/"
            "my-gpt3_00_text_document are not visible here (/data/megatron-bench/slimpajama/"
            "preprocessed is not a folder on this machine); the job checks them before it starts"
            ) in result.stderr.splitlines()
    (script,) = work.glob("runs/*/job.sbatch")
    assert "for file in /data/megatron-bench/slimpajama/preprocessed/my-gpt3_00_text_document.bin" \
        in script.read_text()


def test_the_job_stops_before_its_launcher_when_a_data_file_is_missing(tmp_path: Path) -> None:
    script = slurm.render(plan(get_preset("1.3b"), "tp1pp1", load_platform("azure-h100"),
                               options(nodes=1, account="p1", image="registry.example/x:1",
                                       data_path="data/gone_text_document")))
    result, calls = _run_with_standins(script, tmp_path, ("srun", "scontrol"), {})
    assert result.returncode == 1 and "srun" not in [call["tool"] for call in calls]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: data file data/gone_text_document.bin not found: "
        f"{FIX} (the prefix is DIR/NAME_text_document; docs/megatron-deepspeed.md), or pass "
        "--data-path")
    assert result.stdout.strip().splitlines()[-1] == f"{END_MARKER}1"
