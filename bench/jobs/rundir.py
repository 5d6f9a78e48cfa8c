"""The run directory: ``runs/<run-id>/``, written once at submission, then only ``state.json``.

Files (all but the job script and the output are small JSON or text):

- ``job.sbatch`` / ``job.pbs``: the exact script handed to the scheduler.
- ``plan.json``: the launch plan it was rendered from (absent for hand-written test jobs).
- ``submit.json``: ``kind`` (``bench`` or ``check``), scheduler, submit argv, output file path,
  UTC submit time, kit commit.
- ``job_id``: the scheduler's job id, one line.
- ``job.out``: the job's stdout and stderr (written by the job; may be missing if it never ran).
- ``state.json``: the last :class:`~bench.jobs.scheduler.JobState` the kit saw.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from bench.jobs.scheduler import JobState

DEFAULT_RUNS_DIR = Path("runs")
"""Where run directories go, relative to the working directory. The default is ``runs``; on a
cluster it must be on a file system the compute nodes also see."""

OUTPUT_NAME = "job.out"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _write_text_new(path: Path, text: str) -> None:
    # "x" mode: never overwrite a file of an existing run.
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(text)


@dataclass(frozen=True)
class RunDir:
    """Paths and readers of one run directory."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def output(self) -> Path:
        return self.path / OUTPUT_NAME

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> RunDir:
        """Create ``runs_dir/run_id`` exclusively; fail if it exists (runs are never overwritten)."""
        if not _RUN_ID.fullmatch(run_id):
            raise ValueError(
                f"run id {run_id!r} is not a safe directory name; use letters, digits, '.', '_', '-'"
            )
        runs_dir.mkdir(parents=True, exist_ok=True)
        path = runs_dir / run_id
        try:
            path.mkdir()
        except FileExistsError:
            raise ValueError(
                f"run directory {path} already exists; runs are never overwritten: "
                f"plan a new run (a new run id) or move the old directory away"
            ) from None
        return cls(path.resolve())

    def write_new(self, name: str, text: str) -> Path:
        """Write a file that must not exist yet."""
        target = self.path / name
        _write_text_new(target, text)
        return target

    def write_json_new(self, name: str, data: object) -> Path:
        return self.write_new(name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, name: str) -> dict | None:
        target = self.path / name
        if not target.exists():
            return None
        return json.loads(target.read_text(encoding="utf-8"))

    @property
    def submission(self) -> dict:
        data = self.read_json("submit.json")
        if data is None:
            raise ValueError(f"{self.path} has no submit.json: it is not a submitted run directory")
        return data

    @property
    def job_id(self) -> str:
        return (self.path / "job_id").read_text(encoding="utf-8").strip()

    @property
    def kind(self) -> str:
        return self.submission.get("kind", "bench")

    def last_state(self) -> JobState | None:
        data = self.read_json("state.json")
        return JobState(**data) if data else None

    def save_state(self, state: JobState) -> None:
        """Replace ``state.json`` atomically (the one file of a run that changes)."""
        target = self.path / "state.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True) + "\n",
                       encoding="utf-8")
        os.replace(tmp, target)

    def read_output(self) -> str | None:
        """The job's output text, or ``None`` if the file does not exist."""
        try:
            return self.output.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None


def list_runs(runs_dir: Path) -> list[RunDir]:
    """Submitted run directories under ``runs_dir``, oldest submission first."""
    if not runs_dir.is_dir():
        return []
    runs = [RunDir(p.resolve()) for p in runs_dir.iterdir() if (p / "submit.json").is_file()]
    return sorted(runs, key=lambda r: (r.submission.get("submitted_at", ""), r.run_id))
