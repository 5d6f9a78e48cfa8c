"""Submit, follow and judge real jobs on the test Slurm: a system check, a failure, a time limit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.jobs.check import compare, gather
from bench.jobs.follow import follow
from bench.jobs.outcome import judge
from bench.jobs.rundir import RunDir
from bench.jobs.scheduler import Slurm
from bench.jobs.submit import submit_script

REPO = Path(__file__).resolve().parents[2]
# The time-limit job needs Slurm's 1-minute minimum plus its ~30 s time-limit sweep.
MAX_WAIT_S = 180

FAILING_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=kit-fails
#SBATCH --time=00:05:00
echo "about to fail"
srun false
"""
OVERTIME_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=kit-overtime
#SBATCH --time=00:01:00
srun sleep 600
"""
VANISHING_OUTPUT_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=kit-no-output
#SBATCH --time=00:05:00
rm -f job.out
"""
CHECK_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=kit-check
#SBATCH --ntasks=4
#SBATCH --time=00:05:00
export NCCL_DEBUG=INFO
export NCCL_SOCKET_IFNAME=lo
srun python -m bench.jobs.sysinfo --env NCCL_DEBUG
"""


@pytest.fixture(scope="module")
def finished_runs(slurm_cluster, tmp_path_factory) -> dict[str, RunDir]:
    """All jobs submitted at once (they run side by side), then followed to their end."""
    runs_dir = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(REPO))  # the job's `python -m bench...` finds this checkout
        runs = {
            name: submit_script(runs_dir, f"test-{name}", script, Slurm(), kind=kind)
            for name, script, kind in (("overtime", OVERTIME_SCRIPT, "bench"),
                                       ("fails", FAILING_SCRIPT, "bench"),
                                       ("no-output", VANISHING_OUTPUT_SCRIPT, "bench"),
                                       ("check", CHECK_SCRIPT, "check"))
        }
    for run in runs.values():
        follow(run, Slurm(), poll_s=0.5, max_wait_s=MAX_WAIT_S)
    return runs


def test_run_directory_keeps_script_and_job_id(finished_runs) -> None:
    run = finished_runs["fails"]
    script = (run.path / "job.sbatch").read_text()
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=kit-fails\n#SBATCH --time=00:05:00\n")
    assert "bench-job: end" in script
    assert run.job_id.isdigit()
    assert run.submission["argv"][:2] == ["sbatch", "--parsable"]
    assert run.submission["output"] == str(run.output)


def test_run_directory_is_never_overwritten(finished_runs) -> None:
    run = finished_runs["fails"]
    with pytest.raises(ValueError, match="already exists"):
        submit_script(run.path.parent, run.run_id, FAILING_SCRIPT, Slurm())


def test_system_check_reports_every_rank(finished_runs) -> None:
    run = finished_runs["check"]
    outcome = judge(run, Slurm())
    assert (outcome.status, outcome.reason) == ("ok", None)
    reports = gather(run.read_output() or "")
    assert [r["rank"] for r in reports] == [0, 1, 2, 3]
    assert {r["rank_source"] for r in reports} == {"SLURM_PROCID"}
    assert {r["job_id"] for r in reports} == {run.job_id}
    report = compare(reports, 4, {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "lo"})
    assert report.flags == ()
    wrong = compare(reports, 5, {"NCCL_DEBUG": "WARN"})
    assert any("missing ranks [4]" in f for f in wrong.flags)
    assert any("NCCL_DEBUG: the platform sets 'WARN'" in f for f in wrong.flags)


def test_failing_job_is_failed(finished_runs) -> None:
    outcome = judge(finished_runs["fails"], Slurm())
    assert outcome.finished and outcome.status == "failed"
    assert outcome.reason.startswith("FAILED: ")
    assert outcome.exit_status == 1
    assert "about to fail" in outcome.log_tail


def test_time_limit_is_timeout_even_though_the_script_says_0(finished_runs) -> None:
    run = finished_runs["overtime"]
    outcome = judge(run, Slurm())
    assert outcome.status == "failed"
    assert outcome.reason.startswith("TIMEOUT: ")
    assert "DUE TO TIME LIMIT" in outcome.reason
    # The EXIT trap saw srun's 0 after the kill: an exit code alone would call this a success.
    assert outcome.exit_status == 0


def test_missing_output_is_failed_even_when_completed(finished_runs) -> None:
    run = finished_runs["no-output"]
    outcome = judge(run, Slurm())
    assert outcome.status == "failed"
    assert "output file" in outcome.reason and "missing" in outcome.reason


def test_forgotten_jobs_are_judged_from_saved_state_and_output(finished_runs) -> None:
    # MinJobAge=4: the controller forgets a finished job within seconds; judge still knows.
    run = finished_runs["overtime"]
    deadline = time.monotonic() + 60
    while Slurm().query(run.job_id) is not None:
        assert time.monotonic() < deadline, "scontrol still knows the job after 60 s"
        time.sleep(0.5)
    assert run.last_state().state == "TIMEOUT"
    assert judge(run, Slurm()).reason.startswith("TIMEOUT: ")
