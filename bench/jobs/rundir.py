"""Reading a submitted run directory, ``runs/<run-id>/`` (created by ``bench.rundir``).

Files: the exact job script (``job.sbatch`` or ``job.pbs``), ``plan.json``, ``job_id``,
``submit.json`` (``kind`` ``bench`` or ``check``, scheduler, submit argv, output file path, work
directory, UTC submit time, kit commit), the job's output (``slurm-<job id>.out`` or ``job.out``,
written by the job; missing if it never ran) and ``state.json``: the last
:class:`~bench.jobs.scheduler.JobState` the kit saw, the one file of a run that changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bench.jobs.scheduler import JobState
from bench.plan import RUNS_DIR
from bench.run_record import PlanSummary
from bench.schema import problems
from bench.tomlfile import DataError


@dataclass(frozen=True)
class RunDir:
    """Paths and readers of one submitted run directory."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

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
    def plan(self) -> PlanSummary:
        path = self.path / "plan.json"
        if not path.exists():
            raise ValueError(f"{self.path} has no plan.json: it was not written by the kit")
        try:
            return PlanSummary.model_validate_json(path.read_bytes())
        except ValidationError as error:
            raise DataError(f"{path}: " + "; ".join(problems(error, PlanSummary)) + " (written by "
                            "another version of the kit? collect it with that version)") from None

    @property
    def job_id(self) -> str:
        return self.submission["job_id"]

    @property
    def kind(self) -> str:
        return self.submission["kind"]

    @property
    def output(self) -> Path:
        return Path(self.submission["output"])

    def last_state(self) -> JobState | None:
        data = self.read_json("state.json")
        return JobState(**data) if data else None

    def save_state(self, state: JobState) -> None:
        """Replace ``state.json`` atomically."""
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


def runs_dir(root: Path) -> Path:
    """Where the kit keeps run directories under ``root`` (``runs/``)."""
    return root / RUNS_DIR


def list_runs(root: Path) -> list[RunDir]:
    """Submitted run directories under ``root/runs``, oldest submission first."""
    directory = runs_dir(root)
    if not directory.is_dir():
        return []
    runs = [RunDir(p.resolve()) for p in directory.iterdir() if (p / "submit.json").is_file()]
    return sorted(runs, key=lambda r: (r.submission["submitted_at"], r.run_id))
