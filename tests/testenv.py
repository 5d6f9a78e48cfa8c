"""The Python 3.12 environment the Megatron checks of ``nox -s tests`` run in.

megatron-core >= 0.17 needs Python >= 3.12, the kit only 3.11, so a fresh machine often has no
``python3.12`` on PATH (pyenv keeps it under ``PYENV_VERSION``). This module finds one the usual
ways, keeps a venv with torch + the pinned megatron-core outside the checkout (inside a git work tree
megatron-core appends that tree's commit to its own version string), and says how to enable the
checks where there is none — the tests then skip with that reason locally and fail in CI.

Standard library only: the noxfile imports it before the kit is installed anywhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

OVERRIDE = "BENCH_PYTHON312"
VENV = Path("~/.cache/megatron-bench/venv-py312-megatron").expanduser()
REQUIREMENTS = Path(__file__).resolve().parent / "megatron-requirements.txt"
_STAMP = ".bench-requirements.sha256"  # in the venv: what was installed, so a rerun skips pip
ENABLE_HINT = (f"no Python 3.12 found (PATH python3.12, pyenv, uv, ${OVERRIDE}); install one "
               f"(e.g. `pyenv install 3.12` or `apt install python3.12-venv`) or run: "
               f"{OVERRIDE}=/path/to/python3.12 nox -s tests")


def is_python312(python: str) -> bool:
    """Whether ``python`` runs and is CPython 3.12 with venv (a pyenv shim for a hidden version
    exits 127 here)."""
    try:
        out = subprocess.run([python, "-c", "import sys, venv; print(sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == "(3, 12)"


def candidates(env: Mapping[str, str]) -> list[str]:
    """Where a Python 3.12 may be, in the order tried: PATH, pyenv's versions, uv's."""
    found = []
    on_path = shutil.which("python3.12", path=env.get("PATH", ""))
    if on_path:
        found.append(on_path)
    home = Path(env.get("HOME") or "~").expanduser()
    pyenv_root = Path(env.get("PYENV_ROOT") or home / ".pyenv")
    uv_dir = Path(env.get("UV_PYTHON_INSTALL_DIR") or home / ".local/share/uv/python")
    for pattern_root, pattern in ((pyenv_root / "versions", "3.12*/bin/python3.12"),
                                  (uv_dir, "cpython-3.12*/bin/python3.12")):
        # Newest patch release first (3.12.10 after 3.12.9: compare numerically).
        found += sorted((str(p) for p in pattern_root.glob(pattern)), key=_version_key, reverse=True)
    return found


def _version_key(path: str) -> tuple[int, ...]:
    part = next((p for p in Path(path).parts if p.startswith(("3.12", "cpython-3.12"))), "")
    digits = part.removeprefix("cpython-").split("-")[0].split(".")
    return tuple(int(d) for d in digits if d.isdigit())


def find_python312(env: Mapping[str, str]) -> str | None:
    """A working Python 3.12: ``$BENCH_PYTHON312`` (an error if it is not one), else the first
    candidate that runs."""
    override = env.get(OVERRIDE, "")
    if override:
        if not is_python312(override):
            raise ValueError(f"${OVERRIDE}={override} is not a working Python 3.12 with venv; "
                             "point it at one (e.g. $(pyenv prefix 3.12)/bin/python3.12) or unset it")
        return override
    return next((p for p in candidates(env) if is_python312(p)), None)


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
