"""Talk to a batch scheduler: submit a script, read a job's state.

Slurm is driven through ``sbatch --parsable`` and ``scontrol show job -o``; PBS through ``qsub``
and ``qstat -f -x``. There is no ``sacct`` on every cluster (it needs accounting storage), and
``scontrol`` forgets a finished job ``MinJobAge`` seconds after it ends, so :meth:`query` returns
``None`` for a job the scheduler no longer knows; callers fall back to the state they saved and to
the job's own output.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bench.running.jobstate import JobState

SCHEDULER_TIMEOUT_S = 60
"""How long one scheduler command may take before the kit gives up, in seconds."""


class SchedulerError(RuntimeError):
    """A scheduler command failed for a reason other than an unknown job."""


class Scheduler(Protocol):
    name: str
    submit_command: str

    def submit(self, script: Path, run_dir: Path, workdir: Path) -> tuple[str, list[str], Path]:
        """Submit ``script`` to run in ``workdir``, its output in ``run_dir``.

        Returns the job id, the exact argv used and the job's output file.
        """
        ...

    def query(self, job_id: str) -> JobState | None:
        """Return the job's current state, or ``None`` if the scheduler no longer knows it."""
        ...


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=SCHEDULER_TIMEOUT_S)
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


@dataclass(frozen=True)
class Slurm:
    """Slurm through its command-line clients (``sbatch``, ``scontrol``)."""

    name: str = "slurm"
    submit_command: str = "sbatch"

    def submit(self, script: Path, run_dir: Path, workdir: Path) -> tuple[str, list[str], Path]:
        # The script's own --output is relative to the submit directory; the same file given
        # absolutely on the command line (which overrides #SBATCH lines) leaves no doubt.
        output_pattern = run_dir / "slurm-%j.out"
        argv = ["sbatch", "--parsable", f"--chdir={workdir}", f"--output={output_pattern}",
                str(script)]
        done = _run(argv)
        if done.returncode != 0:
            raise SchedulerError(f"sbatch failed (rc {done.returncode}): {done.stderr.strip()}")
        # --parsable prints "<job id>" or "<job id>;<cluster>".
        job_id = done.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch printed no job id: {done.stdout!r} {done.stderr!r}")
        return job_id, argv, run_dir / f"slurm-{job_id}.out"

    def query(self, job_id: str) -> JobState | None:
        done = _run(["scontrol", "show", "job", "-o", job_id])
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise SchedulerError(
                f"scontrol show job {job_id} failed (rc {done.returncode}): {done.stderr.strip()}"
            )
        fields = parse_scontrol_line(done.stdout.strip().splitlines()[0])
        exit_code, _, signal = fields.get("ExitCode", "").partition(":")
        return JobState(
            job_id=job_id,
            state=fields.get("JobState", "UNKNOWN"),
            reason=_none_if_unset(fields.get("Reason")),
            exit_code=int(exit_code) if exit_code.isdigit() else None,
            signal=int(signal) if signal.isdigit() else None,
            elapsed_s=parse_duration(fields.get("RunTime", "")),
            nodes=_none_if_unset(fields.get("NodeList")),
            start_time=_none_if_unset(fields.get("StartTime")),
            end_time=_none_if_unset(fields.get("EndTime")),
            seen_at=time.time(),
        )


# PBS job_state letters; F (finished) and X (finished subjob) are decided by Exit_status.
_PBS_STATES = {"Q": "PENDING", "H": "PENDING", "W": "PENDING", "T": "PENDING", "S": "SUSPENDED",
               "U": "SUSPENDED", "R": "RUNNING", "B": "RUNNING", "E": "RUNNING", "M": "PENDING"}
# PBS Professional's negative Exit_status values for jobs the server killed.
_PBS_EXIT_STATES = {-29: "TIMEOUT", -27: "OUT_OF_MEMORY"}


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


@dataclass(frozen=True)
class Pbs:
    """PBS Professional through ``qsub`` and ``qstat -f -x`` (``-x`` includes finished jobs)."""

    name: str = "pbs"
    submit_command: str = "qsub"

    def submit(self, script: Path, run_dir: Path, workdir: Path) -> tuple[str, list[str], Path]:
        # -j oe joins stderr into the -o file (as the script's own #PBS lines say, but absolute);
        # the script changes to $PBS_O_WORKDIR, the directory qsub ran in.
        output = run_dir / "job.out"
        argv = ["qsub", "-j", "oe", "-o", str(output), str(script)]
        done = subprocess.run(argv, check=False, capture_output=True, text=True, cwd=workdir,
                              timeout=SCHEDULER_TIMEOUT_S)
        if done.returncode != 0:
            raise SchedulerError(f"qsub failed (rc {done.returncode}): {done.stderr.strip()}")
        return done.stdout.strip(), argv, output

    def query(self, job_id: str) -> JobState | None:
        done = _run(["qstat", "-f", "-x", job_id])
        if done.returncode != 0:
            if "Unknown Job Id" in done.stderr:
                return None
            raise SchedulerError(
                f"qstat -f -x {job_id} failed (rc {done.returncode}): {done.stderr.strip()}"
            )
        fields = parse_qstat_full(done.stdout)
        letter = fields.get("job_state", "")
        exit_status = fields.get("Exit_status")
        exit_code = int(exit_status) if exit_status and exit_status.lstrip("-").isdigit() else None
        if letter in ("F", "X"):
            if exit_code == 0:
                state = "COMPLETED"
            else:
                state = _PBS_EXIT_STATES.get(exit_code, "FAILED")  # type: ignore[arg-type]
        else:
            state = _PBS_STATES.get(letter, "UNKNOWN")
        return JobState(
            job_id=job_id,
            state=state,
            reason=fields.get("comment"),
            exit_code=exit_code,
            signal=exit_code - 256 if exit_code and exit_code > 256 else 0,
            elapsed_s=parse_duration(fields.get("resources_used.walltime", "")),
            nodes=fields.get("exec_host"),
            start_time=fields.get("stime"),
            end_time=fields.get("obittime"),
            seen_at=time.time(),
        )


def scheduler_for(name: str) -> Scheduler:
    """The scheduler a platform names (``platform.scheduler``: ``slurm`` or ``pbs``)."""
    schedulers: dict[str, Scheduler] = {"slurm": Slurm(), "pbs": Pbs()}
    if name not in schedulers:
        raise ValueError(
            f"scheduler {name!r} cannot take batch jobs; submitting needs a platform whose "
            f"scheduler is one of {sorted(schedulers)} (a 'none' platform runs with torchrun)"
        )
    return schedulers[name]
