"""``nox -s tests`` finds a Python 3.12 the usual ways, or skips the Megatron checks saying how to
enable them — never a missing-interpreter failure. Real interpreters, real subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import testenv

REPO = Path(__file__).resolve().parents[1]


def _shim(folder: Path) -> Path:
    """What pyenv puts on PATH for a version it keeps hidden: a python3.12 that exits 127."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python3.12"
    shim.write_text("#!/bin/sh\necho \"pyenv: python3.12: command not found\" >&2\nexit 127\n")
    shim.chmod(0o755)
    return shim


def _real_python312() -> str:
    found = testenv.find_python312(os.environ)
    if found is None:
        pytest.skip(testenv.ENABLE_HINT)
    return found


def test_a_shim_that_exits_127_is_not_a_python(tmp_path: Path) -> None:
    env = {"PATH": str(_shim(tmp_path / "shims").parent), "HOME": str(tmp_path)}
    assert testenv.candidates(env) == [str(tmp_path / "shims" / "python3.12")]
    assert testenv.find_python312(env) is None
    assert testenv.megatron_env(env, log=lambda _: None) == {
        "BENCH_MEGATRON_PYTHON": "", "BENCH_MEGATRON_SKIP": testenv.ENABLE_HINT}


def test_pyenv_versions_are_found_without_pyenv_version(tmp_path: Path) -> None:
    """The machine's case: 3.12 installed by pyenv but not selected; PATH has only its shim."""
    real = _real_python312()
    root = tmp_path / "pyenv"
    for version in ("3.12.1", "3.12.10", "3.11.7"):
        (root / "versions" / version / "bin").mkdir(parents=True)
    (root / "versions" / "3.12.10" / "bin" / "python3.12").symlink_to(real)
    (root / "versions" / "3.12.1" / "bin" / "python3.12").symlink_to(real)
    env = {"PATH": str(_shim(tmp_path / "shims").parent), "PYENV_ROOT": str(root),
           "HOME": str(tmp_path)}
    assert testenv.find_python312(env) == str(root / "versions" / "3.12.10" / "bin" / "python3.12")


def test_override_wins_and_a_wrong_one_is_an_error(tmp_path: Path) -> None:
    real = _real_python312()
    assert testenv.find_python312({"BENCH_PYTHON312": real, "PATH": ""}) == real
    with pytest.raises(ValueError, match="BENCH_PYTHON312=.* is not a working Python 3.12"):
        testenv.find_python312({"BENCH_PYTHON312": sys.executable, "PATH": ""})


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
def test_venv_is_made_once_and_pip_runs_only_when_requirements_change(tmp_path: Path) -> None:
    real = _real_python312()
    requirements = tmp_path / "req.txt"
    requirements.write_text("# nothing to install\n")
    logs: list[str] = []
    venv = tmp_path / "venv"
    python = testenv.ensure_venv(real, venv, requirements, log=logs.append)
    assert testenv.is_python312(python)
    assert [line.split()[0] for line in logs] == ["creating", "installing"]
    logs.clear()
    assert testenv.ensure_venv(real, venv, requirements, log=logs.append) == python
    assert logs == []  # second call: nothing to do
    requirements.write_text("# changed\n")
    testenv.ensure_venv(real, venv, requirements, log=logs.append)
    assert [line.split()[0] for line in logs] == ["installing"]


@pytest.mark.slow  # a pytest of its own in a child process
def test_megatron_tests_skip_with_the_enabling_command() -> None:
    """Without a Megatron Python the checks are reported skipped, with the command that enables
    them, and the run passes (outside CI)."""
    env = {**os.environ, "BENCH_MEGATRON_PYTHON": "", "BENCH_MEGATRON_SKIP": testenv.ENABLE_HINT}
    env.pop("CI", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          "tests/planning/test_megatron_args.py"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^\d+ skipped in ", out.stdout.splitlines()[-1])  # all of them, none failed
    assert "BENCH_PYTHON312=/path/to/python3.12 nox -s tests" in out.stdout


@pytest.mark.slow  # a pytest of its own in a child process
def test_in_ci_a_missing_megatron_python_fails() -> None:
    env = {**os.environ, "BENCH_MEGATRON_PYTHON": "", "BENCH_MEGATRON_SKIP": testenv.ENABLE_HINT,
           "CI": "true"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/planning/test_megatron_args.py"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 1 and "CI must provide this" in out.stdout
