"""The kit's job lifecycle on the real test Slurm: submit, follow, collect, list, system check.

Every job is a plan of the test platform (tests/running/jobs/platforms/ci-slurm.toml) rendered by the kit's
Slurm renderer and submitted by the kit. Where a GPU would be needed the plan's per-rank command is
swapped for one that needs none: the system check's sysinfo, a command that fails, a sleep past the
time limit, a command that deletes its own output.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.options import Options
from bench.planning.plan import plan
from bench.records.store import load_records
from bench.running.jobs.follow import follow
from bench.running.jobs.outcome import judge
from bench.running.jobs.scheduler import SLURM
from bench.running.jobs.submit import submit_plan
from bench.running.rundir import RunDir, list_runs

REPO = Path(__file__).resolve().parents[3]
TEST_PLATFORM = Path(__file__).resolve().parent / "platforms" / "ci-slurm.toml"
# The time-limit job needs Slurm's 1-minute minimum plus up to ~30 s until its time-limit sweep.
MAX_WAIT_S = 240

# Per-rank commands that replace training (run as `python <entry>` by srun in the job).
FAILS = ("-c", "import sys; print('deliberate failure', flush=True); sys.exit(3)")
SLEEPS = ("-c", "import time; time.sleep(600)")
TRAINS_NOTHING = ("-c", "print('exits 0 without a single iteration')")
# A real log of ours (6.7b, tp1pp1dp4, mbs 2 / gbs 64 on four H200s), printed by rank 0 as
# Megatron prints: collect must turn it into an ok record with the protocol's metrics.
REAL_LOG = REPO / "tests" / "fixtures" / "logs" / "megatron_ok_6.7b_dp4_h200x4.log"
REPLAYS_REAL_LOG = ("-c", "import os, sys; os.environ['RANK'] == '0' and "
                          f"sys.stdout.write(open({str(REAL_LOG)!r}).read())")
# The same log with every step a thousand times faster: metrics no GPU can reach (MFU far above 1),
# which must still give the run its record, as a failed one keeping the numbers.
IMPLAUSIBLE_LOG_NAME = "implausible-6.7b.log"
REPLAYS_IMPLAUSIBLE_LOG = ("-c", "import os, sys; os.environ['RANK'] == '0' and "
                                 f"sys.stdout.write(open({IMPLAUSIBLE_LOG_NAME!r}).read())")
DELETES_OWN_OUTPUT = ("-c", ("import os; os.remove(os.path.join('runs', "
                             "os.environ['SLURM_JOB_NAME'], "
                             "'slurm-' + os.environ['SLURM_JOB_ID'] + '.out'))"))


def _kit(root: Path, *args: str, timeout: float = MAX_WAIT_S) -> subprocess.CompletedProcess[str]:
    """``python -m bench <args>`` as a user runs it, in ``root``."""
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=root, check=False,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def kit_env(slurm_cluster, tmp_path_factory):
    """BENCH_PLATFORMS_DIR with the test platform (and the real accelerators); PYTHONPATH so the
    jobs' ``python -m bench...`` import this checkout."""
    platforms = tmp_path_factory.mktemp("platforms")
    shutil.copy(TEST_PLATFORM, platforms)
    shutil.copytree(REPO / "platforms" / "accelerators", platforms / "accelerators")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BENCH_PLATFORMS_DIR", str(platforms))
        patch.setenv("PYTHONPATH", str(REPO))
        yield


def _submit(root: Path, preset: str, entry: tuple[str, ...], walltime: str = "00:05:00",
            gpus: int = 1) -> RunDir:
    launch = plan(get_preset(preset), "tp1pp1", load_platform("ci-slurm"),
                  Options(now=datetime.now(UTC), gpus=gpus, walltime=walltime))
    return submit_plan(replace(launch, entry=entry, train_args=()), root)


@pytest.fixture(scope="module")
def root(kit_env, tmp_path_factory) -> Path:
    """A kit root whose jobs all ran to their end; they are submitted together to overlap."""
    root = tmp_path_factory.mktemp("kit-root")
    (root / IMPLAUSIBLE_LOG_NAME).write_text(re.sub(
        r"(elapsed time per iteration \(ms\): )([\d.]+)",
        lambda m: f"{m[1]}{float(m[2]) / 1000:.4f}", REAL_LOG.read_text()))
    started = time.monotonic()
    runs = [_submit(root, "125m", SLEEPS, walltime="00:01:00"),
            _submit(root, "350m", FAILS),
            _submit(root, "760m", DELETES_OWN_OUTPUT),
            _submit(root, "2.7b", TRAINS_NOTHING),
            _submit(root, "6.7b", REPLAYS_REAL_LOG, gpus=4),
            _submit(root, "345m", REPLAYS_IMPLAUSIBLE_LOG)]
    check = _kit(root, "check", "--platform", "ci-slurm", "--nodes", "1", "--poll", "0.5")
    (root / "check.stdout").write_text(check.stdout + check.stderr)
    waited = _kit(root, "run", "1.3b", "tp1pp1", "--platform", "ci-slurm", "--gpus", "1",
                  "--walltime", "00:02:00", "--wait", "--poll", "0.5")
    (root / "run-wait.stdout").write_text(waited.stdout + waited.stderr)
    for run in runs:
        follow(run, SLURM, poll_s=0.5, max_wait_s=MAX_WAIT_S, echo=lambda _: None)
    print(f"all test jobs ended after {time.monotonic() - started:.0f} s")
    return root


def _run(root: Path, prefix: str) -> RunDir:
    (run,) = [r for r in list_runs(root) if r.run_id.startswith(prefix)]
    return run


def test_run_directory_keeps_script_plan_and_job_id(root: Path) -> None:
    run = _run(root, "350m_")
    script = (run.path / "job.sbatch").read_text()
    assert script.startswith(f"#!/bin/bash\n#SBATCH --job-name={run.run_id}\n")
    assert "#SBATCH --gpus-per-node=0" in script
    assert run.plan.run_id == run.run_id
    assert (run.path / "job_id").read_text() == run.job_id + "\n"
    assert run.submission["argv"][:2] == ["sbatch", "--parsable"]
    assert run.output == run.path / f"slurm-{run.job_id}.out"


def test_run_directory_is_never_overwritten(root: Path) -> None:
    run = _run(root, "350m_")
    launch = plan(get_preset("350m"), "tp1pp1", load_platform("ci-slurm"),
                  Options(now=datetime.strptime(run.run_id.rsplit("_", 1)[1],
                                                "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC), gpus=1))
    assert launch.run_id == run.run_id
    with pytest.raises(FileExistsError, match="already exists"):
        submit_plan(launch, root)


def test_system_check_reports_every_rank(root: Path) -> None:
    out = (root / "check.stdout").read_text()
    run = _run(root, "check_ci-slurm_1n_")
    reports = [json.loads(line.split("bench-sysinfo ", 1)[1])
               for line in (run.read_output() or "").splitlines() if "bench-sysinfo " in line]
    sums = [json.loads(line.split("bench-allreduce ", 1)[1])
            for line in (run.read_output() or "").splitlines() if "bench-allreduce " in line]
    assert sorted(r["rank"] for r in sums) == [0, 1, 2, 3]
    if all("torch is not importable" in r.get("error", "") for r in sums):  # the jobs' Python
        assert "FLAG all-reduce failed on rank 0: torch is not importable" in out, out
    else:  # no GPU: the four ranks sum over gloo, and nothing else disagrees
        assert {r["backend"] for r in sums} == {"gloo"} and all(r["ok"] for r in sums), sums
        assert "all-reduce (gloo): 4 of 4 ranks summed right" in out, out
        assert "all 4 ranks agree" in out, out
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3]
    assert {r["local_rank"] for r in reports} == {0, 1, 2, 3}
    assert {r["job_id"] for r in reports} == {run.job_id}
    assert all(r["communication"]["NCCL_SOCKET_IFNAME"] == "lo" for r in reports)
    assert judge(run, SLURM).status == "ok"


def test_wait_follows_the_job_to_its_end(root: Path) -> None:
    out = (root / "run-wait.stdout").read_text()
    run = _run(root, "1.3b_")
    assert f"submitted {run.run_id} as job {run.job_id}" in out
    assert f"job {run.job_id} " in out  # state lines from the scheduler
    assert f"run {run.run_id}: failed (" in out  # no GPU, no engine here: it must fail


def test_collect_records_failures_with_reasons(root: Path) -> None:
    first = _kit(root, "collect")
    assert first.returncode == 0, first.stderr
    assert "7 new record(s)" in first.stdout, first.stdout
    records, problems = load_records(root / "results" / "records")
    assert problems == []
    by_preset = {r.preset.name: r for r in records}
    assert set(by_preset) == {"125m", "345m", "350m", "760m", "1.3b", "2.7b", "6.7b"}  # no check
    implausible = by_preset.pop("345m")
    assert implausible.status == "failed" and implausible.metrics is None
    assert "implausible" in implausible.reason and "metrics.mfu" in implausible.reason
    assert implausible.notes["metrics.mfu"] > 1 and implausible.notes["metrics.window_iters"] == 7
    assert implausible.log_tail and implausible.notes["job_id"] == _run(root, "345m_").job_id
    finished = by_preset.pop("6.7b")
    assert finished.status == "ok" and finished.metrics is not None
    assert finished.metrics.window_iters == 7 and finished.gpus == 4
    assert finished.metrics.tflops_per_gpu == pytest.approx(512.7, rel=0.01)  # as on the H200s
    assert all(r.metrics is None for r in by_preset.values())
    assert {r.status for name, r in by_preset.items() if name != "2.7b"} == {"failed"}
    # A clean end goes to the benchmark log parser: no iteration logged is "incomplete".
    assert by_preset["2.7b"].status == "incomplete"
    assert "logged iterations: none" in by_preset["2.7b"].reason
    assert by_preset["125m"].reason.startswith("TIMEOUT: ")
    assert "DUE TO TIME LIMIT" in by_preset["125m"].reason
    assert by_preset["350m"].reason.startswith("FAILED: ")
    assert "deliberate failure" in by_preset["350m"].log_tail
    assert "missing" in by_preset["760m"].reason
    assert by_preset["350m"].platform.peak_tflops > 0
    assert by_preset["350m"].notes["job_id"] == _run(root, "350m_").job_id

    again = _kit(root, "collect")
    assert "0 new record(s)" in again.stdout and "7 already recorded" in again.stdout


def test_jobs_lists_every_run(root: Path) -> None:
    listing = _kit(root, "jobs")
    assert listing.returncode == 0, listing.stderr
    for run in list_runs(root):
        line = next(line for line in listing.stdout.splitlines() if line.startswith(run.run_id))
        assert run.job_id in line
    timeout_line = next(line for line in listing.stdout.splitlines() if line.startswith("125m_"))
    assert "TIMEOUT" in timeout_line


def test_time_limit_is_caught_whether_or_not_the_script_printed_its_end(root: Path) -> None:
    # At the time limit slurmstepd sends SIGTERM to the batch script and to srun's step in no
    # fixed order: the script dies before its BENCH_END line, or srun dies first and the script
    # prints "BENCH_END status=143" (128 + SIGTERM). Both happen here; the verdict must not move.
    run = _run(root, "125m_")
    outcome = judge(run, SLURM)
    assert outcome.exit_status in (None, 143), outcome.log_text
    assert outcome.reason.startswith("TIMEOUT: ")


def test_time_limit_is_caught_though_the_job_never_printed_its_end(root: Path,
                                                                   tmp_path: Path) -> None:
    # The same run's real output less its end line, judged from its saved state and then, with
    # the state gone, from the output's slurmstepd line alone.
    run = _run(root, "125m_")
    copy = RunDir(tmp_path / run.run_id)
    shutil.copytree(run.path, copy.path)
    submission = {**run.submission, "output": str(copy.path / run.output.name)}
    (copy.path / "submit.json").write_text(json.dumps(submission))
    copy.output.write_text("".join(line for line in (run.read_output() or "").splitlines(True)
                                   if not line.startswith("BENCH_END")))
    assert copy.last_state() is not None and copy.last_state().state == "TIMEOUT"
    outcome = judge(copy, SLURM)
    assert outcome.exit_status is None
    assert outcome.reason.startswith("TIMEOUT: ")
    (copy.path / "state.json").unlink()
    outcome = judge(copy, SLURM)
    assert outcome.exit_status is None
    assert outcome.reason.startswith("TIMEOUT: ")
    assert "DUE TO TIME LIMIT" in outcome.reason


def test_forgotten_jobs_are_judged_from_saved_state_and_output(root: Path) -> None:
    # MinJobAge=4: the controller forgets a finished job within seconds; judge still knows.
    run = _run(root, "350m_")
    deadline = time.monotonic() + 60
    while SLURM.query(run.job_id) is not None:
        assert time.monotonic() < deadline, "scontrol still knows the job after 60 s"
        time.sleep(0.5)
    assert judge(run, SLURM).reason.startswith("FAILED: ")
    # Without any saved state (the job may have ended unseen), from the output alone.
    (run.path / "state.json").unlink(missing_ok=True)
    outcome = judge(run, SLURM)
    assert outcome.reason == "FAILED: the job script exited with status 3"
    assert outcome.exit_status == 3
