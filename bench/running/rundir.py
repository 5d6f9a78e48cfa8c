"""Run directories, ``runs/<run-id>/``: created once per run, read back by ``bench jobs``.

A run directory is created exclusively (an existing one is never reused or overwritten) and holds
the exact job script or command, ``plan.json`` (the plan summary a record is built from) and, for a
submitted run, ``job_id``, ``submit.json`` (``kind`` ``bench`` or ``check``, scheduler, submit argv,
output file path, work directory, UTC submit time, kit commit), the job's output
(``slurm-<job id>.out`` or ``job.out``, missing if it never ran) and ``state.json``: the last
:class:`~bench.running.jobstate.JobState` the kit saw, the one file of a run that changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bench.config.schema import problems
from bench.config.tomlfile import DataError
from bench.planning.plan import RUNS_DIR, LaunchPlan
from bench.records.build import PlanSummary, plan_summary
from bench.running.jobstate import JobState


def create_run_dir(root: Path, plan: LaunchPlan, files: dict[str, str],
                   summary: PlanSummary | None = None) -> Path:
    """Make ``root/runs/<run-id>`` (refusing an existing one) and write ``files`` plus plan.json
    (``summary``: the plan's, where the caller has made it already)."""
    run_dir = root / plan.run_dir
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise FileExistsError(f"{run_dir} already exists; the kit never reuses a run directory "
                              "(wait a second for a new run id, or move the old one)") from None
    contents = dict(files)
    if plan.ds_config is not None:
        contents["ds_config.json"] = plan.ds_config
    contents["plan.json"] = json.dumps((summary or plan_summary(plan)).model_dump(mode="json"),
                                       indent=2) + "\n"
    try:
        for name, text in contents.items():
            with (run_dir / name).open("x") as fh:
                fh.write(text)
    except OSError as error:  # a full disk or a file-size limit: said before anything starts
        shutil.rmtree(run_dir, ignore_errors=True)  # made above, exclusively: only its files go
        raise ValueError(f"the run directory {run_dir} could not be written "
                         f"({error.strerror or error}); nothing was started") from None
    return run_dir


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
    return sorted(runs, key=lambda r: (_submitted_at(r), r.run_id))


def _submitted_at(run: RunDir) -> str:
    """When ``run`` was submitted, for ordering; "" where its submit.json cannot say (a tampered
    file is named by whoever reads the run, and must not stop the listing of the others)."""
    try:
        when = run.submission["submitted_at"]
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    return when if isinstance(when, str) else ""
