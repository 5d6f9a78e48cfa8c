"""Render the Singularity/Apptainer definition of an image from its Dockerfile with spython.

spython's Docker-to-Singularity conversion has faults this module corrects, in order:

- ``ARG`` is not supported by Singularity: every ``${NAME}``/``$NAME`` is replaced by its resolved
  build-arg value (the same values the Docker build used) and the ARG lines are dropped.
- ``ENV`` becomes a bare ``NAME=value`` in ``%post``, which child processes (pip) never see:
  those lines are exported.
- ``LABEL`` becomes ``name="value"`` lines, but ``%labels`` takes ``name value``: rewritten.
- an exec-form ``CMD`` becomes ``exec /bin/bash <argv>`` (bash would read the program as a
  script): the ``/bin/bash`` is removed so the argv runs as written.

The definition is written into the build context, whose paths its ``%files`` section names.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import tempfile
from pathlib import Path

from bench.config.extras import require

ARG_LINE = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
LABEL_LINE = re.compile(r'^([^=\s]+)="?(.*?)"?\s*$')
BASH_EXEC = "exec /bin/bash "


def resolve_args(dockerfile_text: str, buildargs: dict[str, str]) -> str:
    """Drop ARG lines and put each ARG's value (build arg, else its default) where it is used."""
    values: dict[str, str] = {}
    kept = []
    for line in dockerfile_text.splitlines():
        match = ARG_LINE.match(line.strip())
        if match:
            name, default = match.group(1), match.group(2)
            if name in buildargs:
                values[name] = buildargs[name]
            elif default is not None:
                values[name] = default.strip('"')
            elif name not in values:
                raise ValueError(f"ARG {name} has no default and no build arg; pass one")
            continue
        kept.append(line)
    text = "\n".join(kept) + "\n"
    for name, value in values.items():
        text = re.sub(r"\$\{" + name + r"\}|\$" + name + r"\b", lambda _, value=value: value, text)
    return text


def _fix_sections(definition: str) -> str:
    section = ""
    out = []
    for line in definition.splitlines():
        if line.startswith("%"):
            section = line.split()[0]
        elif section == "%labels" and line.strip():
            match = LABEL_LINE.match(line.strip())
            if match:
                line = f"{match.group(1)} {match.group(2)}"
        elif section == "%post" and ENV_ASSIGNMENT.match(line):
            line = f"export {line}"
        elif section in ("%runscript", "%startscript") and line.startswith(BASH_EXEC):
            line = "exec " + line[len(BASH_EXEC):]
        out.append(line)
    return "\n".join(out).rstrip() + "\n"


def render_definition(dockerfile: Path, buildargs: dict[str, str]) -> str:
    """The Singularity definition for ``dockerfile`` built with ``buildargs``."""
    require("spython", "images", "writing a Singularity definition")
    from spython.main.parse.parsers import DockerParser
    from spython.main.parse.writers import SingularityWriter

    text = resolve_args(dockerfile.read_text(), buildargs)
    with tempfile.TemporaryDirectory() as scratch:
        resolved = Path(scratch) / "Dockerfile"
        resolved.write_text(text)
        # spython warns about %files sources relative to the working directory; run it in the
        # build context so those warnings mean something.
        quiet = io.StringIO()
        previous = os.getcwd()
        logging.disable(logging.WARNING)
        try:
            os.chdir(dockerfile.parent)
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                recipe = DockerParser(str(resolved)).recipe
                definition = SingularityWriter(recipe).convert()
        finally:
            os.chdir(previous)
            logging.disable(logging.NOTSET)
    return _fix_sections(definition)
