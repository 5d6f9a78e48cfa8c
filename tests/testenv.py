"""The Python 3.12 environment the Megatron checks of ``nox -s tests`` run in.

megatron-core >= 0.17 needs Python >= 3.12, the kit only 3.11, so a fresh machine often has no
``python3.12`` on PATH (pyenv keeps it under ``PYENV_VERSION``). This module finds one the usual
ways, keeps a venv with torch + the pinned megatron-core outside the checkout (inside a git work tree
megatron-core appends that tree's commit to its own version string), and says how to enable the
checks where there is none — the tests then skip with that reason locally and fail in CI. The
search itself is the kit's (:mod:`bench.running.pythons`).

Standard library only: the noxfile imports it before the kit is installed anywhere.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

# The search is the kit's own (the wheelhouse and the training venv ask it too).
from bench.running.pythons import OVERRIDE, WHERE, candidates, find_python312, is_python312

__all__ = ["candidates", "ensure_venv", "find_python312", "is_python312", "megatron_env"]

VENV = Path("~/.cache/megatron-bench/venv-py312-megatron").expanduser()
REQUIREMENTS = Path(__file__).resolve().parent / "megatron-requirements.txt"
_STAMP = ".bench-requirements.sha256"  # in the venv: what was installed, so a rerun skips pip
ENABLE_HINT = (f"no Python 3.12 found ({WHERE}); install one "
               f"(e.g. `pyenv install 3.12` or `apt install python3.12-venv`) or run: "
               f"{OVERRIDE}=/path/to/python3.12 nox -s tests")


def requirements_hash(requirements: Path = REQUIREMENTS) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def ensure_venv(python312: str, venv: Path = VENV, requirements: Path = REQUIREMENTS,
                log: Callable[[str], None] = print) -> str:
    """The venv's Python, made from ``python312`` if missing or broken; pip runs only when the
    requirements changed since the last install."""
    python = venv / "bin" / "python"
    if not is_python312(str(python)):
        log(f"creating {venv} from {python312}")
        subprocess.run([python312, "-m", "venv", "--clear", str(venv)], check=True)
    stamp = venv / _STAMP
    wanted = requirements_hash(requirements)
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        log(f"installing {requirements.name} into {venv}")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
                       check=True)
        stamp.write_text(wanted + "\n")
    return str(python)


def megatron_env(env: Mapping[str, str] = os.environ,
                 log: Callable[[str], None] = print) -> dict[str, str]:
    """Environment for pytest: ``BENCH_MEGATRON_PYTHON`` (given, or the venv made here), or empty
    with ``BENCH_MEGATRON_SKIP`` saying how to enable the Megatron checks."""
    given = env.get("BENCH_MEGATRON_PYTHON", "")
    if given:
        return {"BENCH_MEGATRON_PYTHON": given}
    python312 = find_python312(env)
    if python312 is None:
        log(f"Megatron checks will be skipped: {ENABLE_HINT}")
        return {"BENCH_MEGATRON_PYTHON": "", "BENCH_MEGATRON_SKIP": ENABLE_HINT}
    return {"BENCH_MEGATRON_PYTHON": ensure_venv(python312, log=log)}
