"""A job as the scheduler reports it: one observation, in Slurm's words (PBS states are mapped
onto them). Run folders keep the last one seen (``state.json``); the job commands read and judge it."""

from __future__ import annotations

from dataclasses import dataclass

# Slurm's names for states a job never leaves; PBS states are mapped onto them.
FAILED_STATES = frozenset(
    {"FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
     "PREEMPTED"}
)
TERMINAL_STATES = FAILED_STATES | {"COMPLETED"}


@dataclass(frozen=True)
class JobState:
    """One observation of a job by the scheduler.

    ``state`` uses Slurm's names (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ...).
    ``exit_code`` is the batch script's exit status and ``signal`` the signal that ended it (0 when
    none); both are ``None`` while unknown. ``elapsed_s`` is run time in seconds. ``seen_at`` is a
    Unix time (seconds) of the observation.
    """

    job_id: str
    state: str
    reason: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: int | None = None
    nodes: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    seen_at: float = 0.0

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES
