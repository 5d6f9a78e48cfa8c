"""One submit and query path for Slurm and PBS, their differences as data (bench.running.jobs.scheduler).

The answers read here are in the shape the clients print them (``scontrol show job -o``, ``qstat -f
-x``, ``sbatch --parsable``, ``qsub``). Submitting runs a stand-in client on ``PATH`` that writes down
its argv and folder and prints a job id: what the kit hands the scheduler and reads back, for PBS,
which has no real-engine test here. The real Slurm tests (test_slurm_*.py) run the same path.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from bench.running.jobs.scheduler import PBS, SLURM, SchedulerError, scheduler_for
from tests.conftest import GOLDEN

SCONTROL_LINE = (
    "JobId=12 JobName=1.3b_tp1pp1_slurm UserId=root(0) GroupId=root(0) Priority=1 Nice=0 "
    "Account=(null) QOS=normal JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 ExitCode=0:15 RunTime=01:00:07 TimeLimit=01:00:00 "
    "SubmitTime=2026-11-21T19:16:20 StartTime=2026-11-21T19:16:27 EndTime=2026-11-21T20:16:34 "
    "NodeList=vm BatchHost=vm NumNodes=1 Command=/srv/my runs/runs/x/job.sbatch "
    "WorkDir=/srv/my runs StdOut=/srv/my runs/runs/x/slurm-12.out"
)
QSTAT_FULL = """Job Id: 4711.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov
    Job_Name = 13b_tp4pp2_polaris
    Job_Owner = user@polaris-login-02.hsn.cm.polaris.alcf.anl.gov
    resources_used.walltime = 00:20:04
    job_state = F
    queue = debug-scaling
    exec_host = x3006c0s19b0n0/0*64+x3006c0s1b1n0/0*64
    Exit_status = 271
    comment = Job run at Fri Nov 21 at 19:16 on (x3006c0s19b0n0:ncpus=64:ngpus=4)+(x3006c0s1b1n0:
\tncpus=64:ngpus=4) and finished
    stime = Fri Nov 21 19:16:27 2026
    obittime = Fri Nov 21 19:36:31 2026
"""


def test_a_slurm_job_is_read_from_its_scontrol_line() -> None:
    state = SLURM.job_state("12", SLURM.read_fields(SCONTROL_LINE + "\n"))
    assert (state.state, state.reason, state.exit_code, state.signal) == ("TIMEOUT", "TimeLimit", 0, 15)
    assert (state.elapsed_s, state.nodes) == (3607, "vm")
    assert (state.start_time, state.end_time) == ("2026-11-21T19:16:27", "2026-11-21T20:16:34")
    assert state.terminal


def test_a_pbs_job_is_read_in_slurm_s_words() -> None:
    state = PBS.job_state("4711", PBS.read_fields(QSTAT_FULL))
    assert (state.state, state.exit_code, state.signal) == ("FAILED", 271, 15)  # 256 + SIGTERM
    assert state.reason.endswith("(x3006c0s1b1n0:ncpus=64:ngpus=4) and finished")  # continued line
    assert (state.elapsed_s, state.nodes) == (1204, "x3006c0s19b0n0/0*64+x3006c0s1b1n0/0*64")
    assert (state.start_time, state.end_time) == ("Fri Nov 21 19:16:27 2026", "Fri Nov 21 19:36:31 2026")


@pytest.mark.parametrize(("letter", "exit_status", "state"), [
    ("Q", None, "PENDING"), ("R", None, "RUNNING"), ("S", None, "SUSPENDED"), ("F", "0", "COMPLETED"),
    ("F", "-29", "TIMEOUT"), ("F", "-27", "OUT_OF_MEMORY"), ("X", "1", "FAILED"), ("?", None, "UNKNOWN"),
])
def test_pbs_states_become_slurm_s(letter: str, exit_status: str | None, state: str) -> None:
    fields = {"job_state": letter, **({"Exit_status": exit_status} if exit_status else {})}
    assert PBS.job_state("1", fields).state == state


def test_unset_values_are_none() -> None:
    line = "JobId=3 JobState=PENDING Reason=None ExitCode=0:0 RunTime=00:00:00 StartTime=Unknown NodeList=(null)"
    state = SLURM.job_state("3", SLURM.read_fields(line))
    assert (state.reason, state.start_time, state.nodes, state.elapsed_s) == (None, None, None, 0)


def _client(folder: Path, name: str, stdout: str, rc: int = 0) -> Path:
    """A stand-in ``name`` that writes its argv and folder to ``<name>.json`` and prints ``stdout``."""
    script = folder / name
    seen = folder / f"{name}.json"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"json.dump({{'argv': sys.argv[1:], 'cwd': os.getcwd()}}, open({str(seen)!r}, 'w'))\n"
                      f"print({stdout!r})\nprint('refused', file=sys.stderr)\nsys.exit({rc})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return seen


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(folder of the stand-in clients, on PATH; the run folder; the work folder)."""
    bin_dir, run_dir, workdir = tmp_path / "bin", tmp_path / "work" / "runs" / "r1", tmp_path / "work"
    for folder in (bin_dir, run_dir):
        folder.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir, run_dir, workdir


@pytest.mark.parametrize(("scheduler", "printed", "job_id", "options", "output"), [
    (SLURM, "12;cluster", "12", ["--parsable", "--chdir={workdir}", "--output={run_dir}/slurm-%j.out"],
     "slurm-12.out"),
    (PBS, "4711.polaris-pbs-01", "4711.polaris-pbs-01", ["-j", "oe", "-o", "{run_dir}/job.out"], "job.out"),
])
def test_submit_runs_the_client_in_the_work_folder(folders, scheduler, printed, job_id, options, output) -> None:
    bin_dir, run_dir, workdir = folders
    seen = _client(bin_dir, scheduler.submit_command, printed)
    script = run_dir / "job.script"
    got_id, argv, got_output = scheduler.submit(script, run_dir, workdir)
    filled = [option.format(workdir=workdir, run_dir=run_dir) for option in options]
    assert (got_id, got_output) == (job_id, run_dir / output)
    assert argv == [scheduler.submit_command, *filled, str(script)]
    assert json.loads(seen.read_text()) == {"argv": [*filled, str(script)], "cwd": str(workdir)}


@pytest.mark.parametrize("scheduler", [SLURM, PBS])
def test_a_refused_or_unreadable_submission_is_a_scheduler_error(folders, scheduler) -> None:
    bin_dir, run_dir, workdir = folders
    _client(bin_dir, scheduler.submit_command, "", rc=1)
    with pytest.raises(SchedulerError, match=f"{scheduler.submit_command} failed \\(rc 1\\): refused"):
        scheduler.submit(run_dir / "job.script", run_dir, workdir)
    _client(bin_dir, scheduler.submit_command, "Submitted batch job")
    with pytest.raises(SchedulerError, match=f"{scheduler.submit_command} printed no job id"):
        scheduler.submit(run_dir / "job.script", run_dir, workdir)


@pytest.mark.parametrize(("scheduler", "unknown"), [(SLURM, "Invalid job id specified"),
                                                    (PBS, "qstat: Unknown Job Id 9.server")])
def test_a_job_the_scheduler_forgot_is_none(folders, scheduler, unknown) -> None:
    bin_dir = folders[0]
    client = bin_dir / scheduler.query_command[0]
    client.write_text(f"#!{sys.executable}\nimport sys\nprint({unknown!r}, file=sys.stderr)\nsys.exit(1)\n")
    client.chmod(client.stat().st_mode | stat.S_IXUSR)
    assert scheduler.query("9") is None


def test_a_missing_client_says_where_to_run(folders, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(folders[0]))
    with pytest.raises(SchedulerError, match="qsub not found on PATH: run this on the cluster's login node"):
        PBS.submit(folders[1] / "job.pbs", folders[1], folders[2])


def test_only_batch_schedulers_take_jobs() -> None:
    assert (scheduler_for("slurm"), scheduler_for("pbs")) == (SLURM, PBS)
    with pytest.raises(ValueError, match="scheduler 'none' cannot take batch jobs"):
        scheduler_for("none")


@pytest.mark.parametrize(("golden", "scheduler", "directive"), [
    ("azure-h100_megatron_175b_tp8pp16sp.txt", SLURM, r"^#SBATCH --output=(\S+)$"),
    ("polaris_megatron_13b_tp4pp2.txt", PBS, r"^#PBS -o (\S+)$"),
])
def test_the_job_script_and_the_submit_command_name_one_output_file(golden, scheduler, directive) -> None:
    """The script's own line (relative to the submit folder) and the absolute one given on the
    command line, which wins, are the same file."""
    written = re.search(directive, (GOLDEN / golden).read_text(), re.MULTILINE).group(1)
    run_dir = written.rpartition("/")[0]
    given = [option.format(workdir="", run_dir=run_dir) for option in scheduler.submit_options]
    assert written in {option.removeprefix("--output=") for option in given}
