"""The one renderer table: the plan's scheduler picks the file a plan becomes and its text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.planning.plan import LaunchPlan
from bench.render import pbs, slurm, torchrun

# Job scripts by scheduler; a platform without one ("none") runs a command here.
JOB_SCRIPTS: dict[str, tuple[str, Callable[[LaunchPlan], str]]] = {
    "slurm": ("job.sbatch", slurm.render),
    "pbs": ("job.pbs", pbs.render),
}
COMMAND_NAME = "command.sh"


def render_script(launch: LaunchPlan, workdir: Path | None = None) -> tuple[str, str]:
    """(file name, text) of the job script or command for the plan's scheduler; a run here
    starts in ``workdir`` (default: the current folder)."""
    if launch.platform.scheduler in JOB_SCRIPTS:
        name, render = JOB_SCRIPTS[launch.platform.scheduler]
        return name, render(launch)
    return COMMAND_NAME, torchrun.render(launch, str(workdir or Path.cwd()))
