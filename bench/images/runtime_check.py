"""Whether the container runtime a command needs is there, asked before anything slow starts.

The image sessions (``nox -s build-cuda``, ``build-rocm``, ``push``, ``pull``) call this before they
spend half a minute installing the docker SDK into a venv, so a machine without a runtime hears so
at once. Standard library only: nox imports it in whatever Python runs nox.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

DEFAULT_SOCKET = "/var/run/docker.sock"  # where the docker SDK looks when DOCKER_HOST is unset


def runtime_of(argv: Sequence[str]) -> str:
    """The ``--runtime`` an ``images pull`` command line names (default: docker)."""
    for i, word in enumerate(argv):
        if word == "--runtime" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--runtime="):
            return word.partition("=")[2]
    return "docker"


def missing_runtime(runtime: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """One line saying what is missing for ``runtime``, or None when it looks present.

    docker: the runtime's socket (``DOCKER_HOST`` when it is a ``unix://`` socket, else the default
    one); a TCP or SSH ``DOCKER_HOST`` is left to the SDK to reach. enroot, singularity, apptainer:
    the program on PATH."""
    if runtime != "docker":
        programs = ("singularity", "apptainer") if runtime in ("singularity", "apptainer") else (runtime,)
        if any(shutil.which(program, path=environ.get("PATH")) for program in programs):
            return None
        return (f"--runtime {runtime} needs {' or '.join(programs)} on PATH, and there is none here: "
                "run the pull on the cluster's login node, where the runtime is installed")
    host = environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    socket = host.removeprefix("unix://") or DEFAULT_SOCKET
    if os.path.exists(socket):
        return None
    where = f"DOCKER_HOST names {host}" if host else f"DOCKER_HOST is not set and {DEFAULT_SOCKET}"
    return (f"no container runtime: {where}, which does not exist; start dockerd, or podman's socket "
            "(podman system service) and set DOCKER_HOST=unix://PATH-OF-ITS-SOCKET")
