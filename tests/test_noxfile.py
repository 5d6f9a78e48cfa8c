"""nox sessions start fast when called again: pip runs only for a new venv or a changed
pyproject.toml, and the sessions that need only the kit have no venv at all."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import require

REPO = Path(__file__).resolve().parents[1]


def _nox(envdir: Path, *args: str) -> str:
    """nox's log of a session (whether ruff finds something in the checkout is not the point)."""
    out = subprocess.run(["nox", "-f", str(REPO / "noxfile.py"), "--envdir", str(envdir), *args],
                         capture_output=True, text=True, timeout=600, check=False)
    return out.stdout + out.stderr


def test_second_call_skips_pip_and_kit_only_sessions_have_no_venv(tmp_path: Path) -> None:
    require(shutil.which("nox") is not None, "nox is not installed (pip install nox)")
    first = _nox(tmp_path, "-s", "lint")
    assert "pip install ruff" in first
    again = _nox(tmp_path, "-s", "lint")
    assert "pip install" not in again and "ruff check" in again
    jobs = _nox(tmp_path, "-s", "jobs", "--", "--help")
    assert "Session jobs was successful" in jobs
    assert "pip install" not in jobs and not (tmp_path / "jobs").exists()
