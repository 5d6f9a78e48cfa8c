"""Talk to a batch scheduler: submit a script, read a job's state.

One :class:`Scheduler` does both for every scheduler; what differs is its data (:data:`SLURM`,
:data:`PBS`): Slurm is driven through ``sbatch --parsable`` and ``scontrol show job -o``, PBS
through ``qsub`` and ``qstat -f -x``, whose states are read in Slurm's words.

There is no ``sacct`` on every cluster (it needs accounting storage), and ``scontrol`` forgets a
finished job ``MinJobAge`` seconds after it ends, so :meth:`Scheduler.query` returns ``None`` for a
job the scheduler no longer knows; callers fall back to the state they saved and to the job's own
output.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.running.jobstate import JobState

SCHEDULER_TIMEOUT_S = 60
"""How long one scheduler command may take before the kit gives up, in seconds."""


class SchedulerError(RuntimeError):
    """A scheduler command failed for a reason other than an unknown job."""


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, check=False, capture_output=True, text=True, cwd=cwd,
                              timeout=SCHEDULER_TIMEOUT_S)
    except FileNotFoundError as err:
        raise SchedulerError(
            f"{argv[0]} not found on PATH: run this on the cluster's login node "
            f"(or load the scheduler's module)"
        ) from err


def parse_duration(text: str) -> int | None:
    """Seconds in a Slurm/PBS duration like ``1-02:03:04``, ``02:03:04`` or ``03:04``."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# `scontrol show job -o` prints `Key=value` tokens on one line; values may contain spaces (paths,
# comments), so split at each ` Key=` boundary rather than at spaces.
_SCONTROL_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=")


def parse_scontrol_line(line: str) -> dict[str, str]:
    """Fields of one ``scontrol show job -o`` line."""
    keys = list(_SCONTROL_KEY.finditer(line))
    fields: dict[str, str] = {}
    for here, after in zip(keys, keys[1:] + [None], strict=True):
        end = after.start() if after else len(line)
        fields[here.group(1)] = line[here.end():end].strip()
    return fields


def _none_if_unset(value: str | None) -> str | None:
    return None if value in (None, "", "(null)", "Unknown", "None") else value



def _scontrol_fields(text: str) -> dict[str, str]:
    lines = text.strip().splitlines()
    return parse_scontrol_line(lines[0]) if lines else {}


def _slurm_end(fields: dict[str, str]) -> tuple[str, int | None, int | None]:
    """(state, exit code, signal): Slurm names the state itself; ``ExitCode`` is ``code:signal``."""
    exit_code, _, signal = fields.get("ExitCode", "").partition(":")
    return (fields.get("JobState", "UNKNOWN"), int(exit_code) if exit_code.isdigit() else None,
            int(signal) if signal.isdigit() else None)


def parse_qstat_full(text: str) -> dict[str, str]:
    """Fields of one job in ``qstat -f`` output (continuation lines are tab-indented)."""
    fields: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith("\t") and key:
            fields[key] += line.strip()
        elif " = " in line:
            key, _, value = line.strip().partition(" = ")
            fields[key] = value
    return fields


# PBS job_state letters; F (finished) and X (finished subjob) are decided by Exit_status.
_PBS_STATES = {"Q": "PENDING", "H": "PENDING", "W": "PENDING", "T": "PENDING", "S": "SUSPENDED",
               "U": "SUSPENDED", "R": "RUNNING", "B": "RUNNING", "E": "RUNNING", "M": "PENDING"}
# PBS Professional's negative Exit_status values for jobs the server killed.
_PBS_EXIT_STATES = {-29: "TIMEOUT", -27: "OUT_OF_MEMORY"}


def _pbs_end(fields: dict[str, str]) -> tuple[str, int | None, int | None]:
    """(state, exit code, signal) in Slurm's words: a letter while the job lives, then by
    ``Exit_status`` (over 256: killed by signal ``status - 256``)."""
    letter = fields.get("job_state", "")
    exit_status = fields.get("Exit_status")
    exit_code = int(exit_status) if exit_status and exit_status.lstrip("-").isdigit() else None
    if letter not in ("F", "X"):
        state = _PBS_STATES.get(letter, "UNKNOWN")
    elif exit_code == 0:
        state = "COMPLETED"
    else:
        state = _PBS_EXIT_STATES.get(exit_code, "FAILED")  # type: ignore[arg-type]
    return state, exit_code, exit_code - 256 if exit_code and exit_code > 256 else 0


@dataclass(frozen=True)
class JobFields:
    """The names a scheduler's job listing gives what :class:`JobState` holds besides the state."""

    reason: str
    elapsed: str
    nodes: str
    start: str
    end: str


@dataclass(frozen=True)
class Scheduler:
    """A batch scheduler through its command-line clients; what differs between schedulers is data.

    ``submit_options`` go between the submit command and the script, with ``{workdir}`` and
    ``{run_dir}`` filled in; the command runs in the work directory. ``output`` is the job's output
    file in the run directory (``{job_id}`` filled in); ``job_id`` matches the submit command's
    standard output (group 1 is the id). ``query_command`` is followed by the job id; a failure whose
    standard error holds ``unknown_job`` means the scheduler no longer knows the job.
    """

    name: str
    submit_command: str
    submit_options: tuple[str, ...]
    output: str
    job_id: re.Pattern[str]
    query_command: tuple[str, ...]
    unknown_job: str
    read_fields: Callable[[str], dict[str, str]]
    fields: JobFields
    end: Callable[[dict[str, str]], tuple[str, int | None, int | None]]

    def submit(self, script: Path, run_dir: Path, workdir: Path) -> tuple[str, list[str], Path]:
        """Submit ``script`` to run in ``workdir``, its output in ``run_dir``.

        Returns the job id, the exact argv used and the job's output file.
        """
        options = [option.format(workdir=workdir, run_dir=run_dir) for option in self.submit_options]
        argv = [self.submit_command, *options, str(script)]
        done = _run(argv, cwd=workdir)
        if done.returncode != 0:
            raise SchedulerError(f"{self.submit_command} failed (rc {done.returncode}): {done.stderr.strip()}")
        match = self.job_id.fullmatch(done.stdout.strip())
        if not match:
            raise SchedulerError(f"{self.submit_command} printed no job id: {done.stdout!r} {done.stderr!r}")
        job_id = match.group(1)
        return job_id, argv, run_dir / self.output.format(job_id=job_id)

    def query(self, job_id: str) -> JobState | None:
        """The job's current state, or ``None`` if the scheduler no longer knows it."""
        argv = [*self.query_command, job_id]
        done = _run(argv)
        if done.returncode != 0:
            if self.unknown_job in done.stderr:
                return None
            raise SchedulerError(f"{' '.join(argv)} failed (rc {done.returncode}): {done.stderr.strip()}")
        return self.job_state(job_id, self.read_fields(done.stdout))

    def job_state(self, job_id: str, fields: dict[str, str]) -> JobState:
        """The :class:`JobState` of one job's fields as the query command printed them."""
        state, exit_code, signal = self.end(fields)
        names = self.fields
        return JobState(
            job_id=job_id, state=state, reason=_none_if_unset(fields.get(names.reason)),
            exit_code=exit_code, signal=signal, elapsed_s=parse_duration(fields.get(names.elapsed, "")),
            nodes=_none_if_unset(fields.get(names.nodes)), start_time=_none_if_unset(fields.get(names.start)),
            end_time=_none_if_unset(fields.get(names.end)), seen_at=time.time())


# The output files are given absolutely on the command line (which overrides the script's own
# #SBATCH/#PBS lines, relative to the submit directory) so that there is no doubt where they are.
SLURM = Scheduler(
    name="slurm", submit_command="sbatch",
    submit_options=("--parsable", "--chdir={workdir}", "--output={run_dir}/slurm-%j.out"),
    output="slurm-{job_id}.out",
    job_id=re.compile(r"(\d+)(?:;\S*)?"),  # --parsable prints "<job id>" or "<job id>;<cluster>"
    query_command=("scontrol", "show", "job", "-o"), unknown_job="Invalid job id",
    read_fields=_scontrol_fields,
    fields=JobFields(reason="Reason", elapsed="RunTime", nodes="NodeList", start="StartTime", end="EndTime"),
    end=_slurm_end,
)
# -j oe joins stderr into the -o file; the script changes to $PBS_O_WORKDIR, where qsub ran.
# qstat -x includes finished jobs.
PBS = Scheduler(
    name="pbs", submit_command="qsub", submit_options=("-j", "oe", "-o", "{run_dir}/job.out"),
    output="job.out",
    job_id=re.compile(r"(\d+(?:\.[\w.-]+)?)"),  # "<sequence number>.<server>"
    query_command=("qstat", "-f", "-x"), unknown_job="Unknown Job Id",
    read_fields=parse_qstat_full,
    fields=JobFields(reason="comment", elapsed="resources_used.walltime", nodes="exec_host", start="stime",
                     end="obittime"),
    end=_pbs_end,
)
SCHEDULERS = {scheduler.name: scheduler for scheduler in (SLURM, PBS)}


def scheduler_for(name: str) -> Scheduler:
    """The scheduler a platform names (``platform.scheduler``: ``slurm`` or ``pbs``)."""
    if name not in SCHEDULERS:
        raise ValueError(
            f"scheduler {name!r} cannot take batch jobs; submitting needs a platform whose "
            f"scheduler is one of {sorted(SCHEDULERS)} (a 'none' platform runs with torchrun)"
        )
    return SCHEDULERS[name]
