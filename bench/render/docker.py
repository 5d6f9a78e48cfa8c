"""``docker run`` for a run on this machine inside an image (``--image`` on the local platform).

The container gets every GPU (``--gpus all``, through the NVIDIA Container Toolkit), NGC's
recommended options, the working folder (``runs/<run-id>/``, relative data paths, the checkout the
kit runs from) and the platform's binds mounted at the same paths, and the plan's environment. The
kit on the host reads the container's output and writes the record, so the records folder is not
mounted: nothing inside writes records.
"""

from __future__ import annotations

from collections.abc import Sequence

GPUS: tuple[str, ...] = ("--gpus", "all")
# NGC's options for its PyTorch containers ("Running PyTorch" in NVIDIA's PyTorch release notes):
# the host's IPC namespace (shared memory for data loader workers and NCCL; docker's default
# /dev/shm is 64 MB), no limit on locked memory (pinned buffers), a 64 MiB stack.
NGC_OPTIONS = ("--ipc=host", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864")
# Passed on when set where the kit runs (docker's `--env NAME`): --gpus all shows the container every
# GPU, numbered as on the host, so the host's selection holds inside.
PASSED_ON = ("CUDA_VISIBLE_DEVICES",)


def container_name(run_id: str) -> str:
    """The run's container: named, so the kit can ask the engine what it started and remove it."""
    return f"bench-{run_id}"


def run_prefix(image: str, workdir: str, binds: Sequence[str] = (),
               env: Sequence[tuple[str, str]] = (), name: str | None = None) -> list[str]:
    """``docker run ... IMAGE``: the command to run in the image follows. Without ``name`` the
    container is removed when it ends (``--rm``: a probe); with one the kit removes it."""
    argv = ["docker", "run", *(["--name", name] if name else ["--rm"]), *GPUS, *NGC_OPTIONS,
            "--volume", f"{workdir}:{workdir}", "--workdir", workdir]
    for bind in binds:
        argv += ["--volume", bind]
    for key, value in env:
        argv += ["--env", f"{key}={value}"]
    for key in PASSED_ON:
        argv += ["--env", key]
    return [*argv, "--env", "PYTHONUNBUFFERED=1", image]
