"""Shell text from argument lists: every value is quoted unless the renderer itself wrote it.

Values from platforms, presets and users go through ``shlex.quote`` and come out inert (spaces,
quotes, ``$(...)``). Only ``Raw`` pieces, which renderers construct from fixed text and scheduler
variables such as ``"$SLURM_JOB_ID"``, reach the shell unquoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

_SAFE_DIRECTIVE = re.compile(r"^[A-Za-z0-9_./:=,@%+-]*$")


@dataclass(frozen=True)
class Raw:
    """Shell text written by a renderer (never user data), emitted as is."""

    text: str


Token = str | Raw


def join(tokens: Iterable[Token]) -> str:
    return " ".join(t.text if isinstance(t, Raw) else shlex.quote(t) for t in tokens)


def wrap(tokens: list[Token], indent: str = "    ", width: int = 100) -> str:
    """Join tokens, breaking long commands before each ``--flag`` with backslash continuations."""
    line = join(tokens)
    if len(line) <= width:
        return line
    lines: list[list[Token]] = [[]]
    for token in tokens:
        if isinstance(token, str) and token.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(token)
    return (" \\\n" + indent).join(join(chunk) for chunk in lines)


def export_lines(env: Iterable[tuple[str, str]]) -> list[str]:
    """``export NAME=value`` lines; names were validated by the platform schema."""
    return [f"export {name}={shlex.quote(value)}" for name, value in env]


def directive_value(value: str) -> str:
    """A value for an ``#SBATCH``/``#PBS`` line.

    Schedulers read these lines themselves, not through a shell, and a ``#`` starts a comment
    there: values with anything beyond plain characters are double-quoted. Newlines, double
    quotes and backslashes (sbatch reads one as an escape even inside quotes) cannot be expressed
    and are refused.
    """
    if "\n" in value or '"' in value or "\\" in value:
        raise ValueError(f"scheduler option value {value!r} contains a newline, a double quote or "
                         "a backslash, which job-script directives cannot carry")
    return value if _SAFE_DIRECTIVE.match(value) else f'"{value}"'
