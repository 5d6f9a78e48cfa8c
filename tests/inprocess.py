"""``python -m bench <args>`` run in this process: ``bench.cli.main(argv)`` in a folder, with
environment variables set for the call, its output captured as a subprocess's would be.

Starting a Python per command costs a quarter of a second; the quick tier runs its CLI tests
through this and keeps real subprocesses for what only a process shows (the entry point, a Python
without pydantic).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

from bench.cli import main


@contextlib.contextmanager
def _environment(changes: dict[str, str]):
    saved = {key: os.environ.get(key) for key in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``main([*args])`` in ``cwd`` with ``env`` added to the environment: its exit status (an
    argparse exit included), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with (_environment(env or {}), contextlib.chdir(cwd), contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err)):
        try:
            code = main(list(args))
        except SystemExit as done:  # argparse: --help (0) or a usage error (2)
            code = done.code if isinstance(done.code, int) else 2
    return subprocess.CompletedProcess(["python", "-m", "bench", *args], code, out.getvalue(),
                                       err.getvalue())
