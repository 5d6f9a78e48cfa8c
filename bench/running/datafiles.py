"""The data files of a run checked before anything is written or submitted: a missing ``.bin`` or
``.idx`` of ``--data-path`` would otherwise fail every rank, after a job waited in the queue.

Where the files are visible here (a run here; a cluster's path relative to the submit folder, or
under a folder that exists on this login node) a missing one is refused. Where they are not (a
cluster's filesystem seen from elsewhere) a note says so; the job script checks them itself before
its launcher starts (:func:`bench.render.common.data_file_check`).
"""

from __future__ import annotations

from pathlib import Path

from bench.planning.plan import LaunchPlan
from bench.render.common import DATA_FIX, data_files


def check_data_files(launch: LaunchPlan, workdir: Path) -> str | None:
    """Raise ``ValueError`` naming a missing data file where the files are visible from
    ``workdir`` (the submit or working folder); a note where they are not; None otherwise."""
    files = [workdir / name for name in data_files(launch)]
    if not files:
        return None
    # A run here, and a path relative to the submit folder, are this machine's to check.
    seen = launch.platform.scheduler == "none" or not launch.data_path.startswith("/")
    if not seen and not all(path.parent.is_dir() for path in files):
        return (f"the data files of --data-path {launch.data_path} are not visible here "
                f"({files[0].parent} is not a folder on this machine); the job checks them before "
                "it starts")
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise ValueError(f"--data-path {launch.data_path}: {' and '.join(missing)} not found, so "
                         f"nothing was written or submitted: {DATA_FIX}")
    return None
