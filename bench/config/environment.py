"""Every environment variable the kit reads, and the check its value meets when set.

The kit reads a variable of :data:`CHECKED` through :func:`env_value` only, and the command line
checks them all before any command starts (:func:`environment_problem`): a bad value is one error
line that names the variable and what it takes, said before anything is planned or written, never
after a run. :data:`FREE_TEXT` lists the variables the kit reads as they are, with why. The training
entry (``bench/train``) reads what its launcher sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``BENCH_PROFILE_DIR``, a job's id), not the user. ``tests/hostile/test_environment_variables.py``
ties both tables to the code and to docs/running.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from bench.config.text import visible

GPU_LOCK_MODES = ("fail", "wait", "off")
"""``$BENCH_GPU_LOCK``: ``fail`` (the default) stops a run at a GPU another run holds; ``wait``
waits for it; ``off`` shares it."""
MAX_LENGTH = 4096  # longer than any path, image name or account a site uses

_CUDA_ENTRY = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+")
_COMMIT = re.compile(r"[0-9a-f]{7,40}(-dirty)?|unknown")
_IMAGE = re.compile(r"[^\s]+")


def _folder(value: str) -> str | None:
    return None if Path(value).expanduser().is_dir() else "is not a folder"


def _folder_or_new(value: str) -> str | None:
    path = Path(value).expanduser()
    return "is not a folder" if path.exists() and not path.is_dir() else None


def _matching(pattern: re.Pattern[str], wanted: str) -> Callable[[str], str | None]:
    return lambda value: None if pattern.fullmatch(value) else f"is not {wanted}"


def _cuda_devices(value: str) -> str | None:
    entries = [entry.strip() for entry in value.split(",")]
    if value.strip() == "" or all(_CUDA_ENTRY.fullmatch(entry) for entry in entries):
        return None
    return ("is not a comma-separated list of GPU indexes or UUIDs (0,1 or GPU-...); an empty "
            "value hides every GPU")


def _choice(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    return lambda value: None if value in choices else f"is not one of {', '.join(choices)}"


# name -> (the check, what to set instead); a check returns what is wrong, None when nothing is.
CHECKED: dict[str, tuple[Callable[[str], str | None], str]] = {
    "BENCH_PRESETS_DIR": (_folder, "point it at the folder that holds your preset files "
                                   "(<name>.toml), or unset it"),
    "BENCH_PLATFORMS_DIR": (_folder, "point it at the folder that holds your platform files "
                                     "(<name>.toml, accelerators/<name>.toml), or unset it"),
    "BENCH_CACHE_DIR": (_folder_or_new, "point it at a folder (made if missing), or unset it for "
                                        "~/.cache/megatron-bench"),
    "BENCH_IMAGE": (_matching(_IMAGE, "an image name"), "images set it to their own name; unset "
                                                        "it outside one"),
    "BENCH_KIT_COMMIT": (_matching(_COMMIT, "a git commit (hex, -dirty allowed) or 'unknown'"),
                         "images set it to the kit's commit; unset it outside one"),
    "CUDA_VISIBLE_DEVICES": (_cuda_devices, "set it as CUDA takes it, or unset it for every GPU"),
    "BENCH_GPU_LOCK": (_choice(GPU_LOCK_MODES), "unset it to stop at a GPU another run holds, "
                                                "'wait' to wait for it, 'off' to share it"),
    "BENCH_GPU_LOCK_DIR": (_folder_or_new, "unset it for /tmp/megatron-bench-gpus, the folder "
                                           "of every run of the machine, or give a folder (made "
                                           "if missing) that every run here is given too"),
    "BENCH_PLATFORM": (lambda value: None, "name a platform (python -m bench platforms)"),
    # Job options' defaults: free in form, checked as the typed option is, but never raw text.
    **{f"BENCH_{key}": (lambda value: None, f"give the value of --{key.lower()}")
       for key in ("ACCOUNT", "PARTITION", "QUEUE", "WALLTIME")},
}

# Version stamps that NVIDIA's CUDA and PyTorch images export to say what they installed: they
# share the run-changing prefixes below, but nothing reads them, so they never make a variant.
VERSION_STAMPS = frozenset({"NCCL_VERSION", "PYTORCH_VERSION", "PYTORCH_BUILD_VERSION",
                            "PYTORCH_BUILD_NUMBER"})

FREE_TEXT: dict[str, str] = {
    "PATH": "where docker, podman, singularity or apptainer are looked for",
    "DOCKER_HOST": "whether docker talks to a remote engine (only its scheme is looked at)",
    "PYTHONPATH": "kept, with the kit's folder put first, for the training Python's probe",
    "LMOD_CMD": "only whether it is set: environment modules exist here",
    "OMP_NUM_THREADS": "only whether it is set: a ZeRO-Offload run here then keeps the shell's "
                       "CPU Adam threads, not the plan's",
    "MODULESHOME": "only whether it is set: environment modules exist here",
    "BENCH_PYTHON312": "a Python 3.12; checked by running it (an error if it is not one)",
    "PYTORCH_CUDA_ALLOC_CONF": "compared with the value --allocator sets: a run here with both, "
                               "different, is refused",
    "NCCL_*, TORCH_NCCL_*, PYTORCH_*, NVTE_*, TORCH_CUDNN_*, CUDA_DEVICE_MAX_CONNECTIONS, "
    "CUDA_LAUNCH_BLOCKING, CUBLAS_WORKSPACE_CONFIG":
        "passed to a run here as they are and recorded as its variant (env:NAME), except the "
        "images' version stamps (NCCL_VERSION, PYTORCH_VERSION, PYTORCH_BUILD_*)",
}


def env_value(name: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """``$name`` when set and not empty (None otherwise), once it meets its check of
    :data:`CHECKED`; raises ``ValueError`` with one line naming the variable and the fix."""
    value = environ.get(name)
    if value is None or (value == "" and name != "CUDA_VISIBLE_DEVICES"):
        return None
    check, fix = CHECKED[name]
    shown = visible(value)
    if shown != value:
        problem = "holds a control character (shown escaped)"
    elif len(value) > MAX_LENGTH:
        problem = f"is longer than {MAX_LENGTH} characters"
    else:
        problem = check(value) or ""
    if problem:
        cut = shown if len(shown) <= 200 else shown[:200] + "..."
        raise ValueError(f"{name}={cut} {problem}: {fix}")
    return value


def environment_problem(environ: Mapping[str, str] = os.environ) -> str | None:
    """The error of the first variable of :data:`CHECKED` whose value fails its check, or None."""
    for name in CHECKED:
        try:
            env_value(name, environ)
        except ValueError as error:
            return str(error)
    return None
