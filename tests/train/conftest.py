"""Fixtures for the training entry's tests: the Python that has torch + megatron-core 0.19.2.

``BENCH_MEGATRON_PYTHON`` names it (``nox -s tests`` makes one where a Python 3.12 exists). Tests
using it are marked ``slow`` and ``needs_megatron``; unset, they skip locally with the command that
enables them, and fail in CI (``CI=true``): the one gate in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def megatron_python() -> str:
    return conftest.megatron_python()


@pytest.fixture(scope="session")
def run_megatron(megatron_python: str):
    """``run(args, timeout_s=300, env=None)``: ``args`` under the Megatron Python (see run_python)."""
    return lambda args, **kw: run_python(megatron_python, args, **kw)


@pytest.fixture(scope="session")
def run_host():
    """``run(args, ...)``: ``args`` under the interpreter running pytest (see run_python)."""
    return lambda args, **kw: run_python(sys.executable, args, **kw)


def run_python(python: str, args: list[str], timeout_s: int = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python args`` from the repository root with the kit importable and no GPU visible."""
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    return subprocess.run([python, *args], cwd=REPO_ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
