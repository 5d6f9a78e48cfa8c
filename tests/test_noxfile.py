"""nox sessions start fast when called again: pip runs only for a new venv or a changed
pyproject.toml, and the sessions that need only the kit have no venv at all."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

REPO = Path(__file__).resolve().parents[1]


def _nox(envdir: Path, *args: str) -> str:
    """nox's log of a session (whether ruff finds something in the checkout is not the point), run
    by this Python's nox (the test extra brings it)."""
    require(importlib.util.find_spec("nox") is not None,
            "nox is not installed in this Python (pip install -e '.[test]')")
    out = subprocess.run([sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "--envdir",
                          str(envdir), *args], capture_output=True, text=True, timeout=600, check=False)
    return out.stdout + out.stderr


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
def test_second_call_skips_pip_and_kit_only_sessions_have_no_venv(tmp_path: Path) -> None:
    first = _nox(tmp_path, "-s", "lint")
    assert "pip install ruff" in first
    again = _nox(tmp_path, "-s", "lint")
    assert "pip install" not in again and "ruff check" in again
    jobs = _nox(tmp_path, "-s", "jobs", "--", "--help")
    assert "Session jobs was successful" in jobs
    assert "pip install" not in jobs and not (tmp_path / "jobs").exists()


def test_what_the_noxfile_imports_needs_no_pydantic() -> None:
    # nox imports the noxfile in whatever Python runs nox: `pip install nox && nox -s tests` on a
    # fresh machine has no pydantic there. None in sys.modules makes the import fail, as absent.
    code = ("import sys; sys.modules['pydantic'] = None; import bench.running.provision, tests.testenv; "
            "print('imported')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip() == "imported", done.stderr


def test_the_training_stack_without_pydantic_is_one_line_naming_it() -> None:
    # `nox -s bench` reads the pins (pydantic) in nox's Python to choose the training Python;
    # without pydantic there the session ends on one line naming the fix (train() shows it).
    code = ("import sys; sys.modules['pydantic'] = None; from bench.running import provision\n"
            "try:\n    provision.training_stack()\nexcept ValueError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert "pip install 'pydantic>=2.11'" in done.stdout and done.stdout.count("\n") == 1, done.stderr


def test_a_sessions_help_is_shown_by_real_nox(tmp_path: Path) -> None:
    """`nox -s wheelhouse -- --help` in a Python with nox (the test extra), as a user types it."""
    log = _nox(tmp_path, "-s", "wheelhouse", "--", "--help")
    assert "usage: python -m bench.running.provision wheelhouse" in log
    assert "Session wheelhouse was successful" in log
