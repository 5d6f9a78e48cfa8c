"""Finding a Python 3.12 on this machine: megatron-core 0.19 (the kit's pin) needs it, while the kit
itself and nox often run in an older one.

The places tried, in order: ``$BENCH_PYTHON312`` (an error if it is not one), ``python3.12`` on PATH,
pyenv's versions (no ``PYENV_VERSION`` needed), uv's. ``nox -s tests`` (``tests/testenv.py``),
``nox -s wheelhouse`` and the training venv's provisioning all ask here, before any pip runs.

Standard library only: the noxfile imports it before anything is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

OVERRIDE = "BENCH_PYTHON312"
NEEDED = (3, 12)  # megatron-core 0.19's Requires-Python: >= 3.12
WHERE = f"PATH python3.12, pyenv, uv, ${OVERRIDE}"


def version_of(python: str) -> tuple[int, int] | None:
    """``python``'s (major, minor) when it runs and has venv; None otherwise (a pyenv shim for a
    hidden version exits 127 here)."""
    try:
        out = subprocess.run([python, "-c", "import sys, venv; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    parts = out.stdout.split()
    return (int(parts[0]), int(parts[1])) if out.returncode == 0 and len(parts) == 2 else None


def is_python312(python: str) -> bool:
    """Whether ``python`` runs and is CPython 3.12 with venv."""
    return version_of(python) == NEEDED


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
