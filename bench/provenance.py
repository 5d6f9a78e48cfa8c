"""Provenance of a run: kit commit, software versions, GPUs and image, as far as they can be read.

Software versions are read by the Python that runs the training (it may differ from the host's),
so the record describes what actually ran. Anything that cannot be determined is None.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from bench.hardware import detect_gpus

_VERSIONS = r"""
import json, importlib.metadata as md
out = {}
try:
    out["megatron_core"] = md.version("megatron-core")
except md.PackageNotFoundError:
    out["megatron_core"] = None
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda or torch.version.hip
    nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
    out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl and str(nccl)
except Exception:
    out.update(torch=None, cuda=None, nccl=None)
print(json.dumps(out))
"""


def kit_commit() -> str | None:
    """The kit's git commit: ``BENCH_KIT_COMMIT`` (set in images), else the checkout's HEAD."""
    if os.environ.get("BENCH_KIT_COMMIT"):
        return os.environ["BENCH_KIT_COMMIT"]
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def software_versions(python: str = sys.executable) -> dict[str, str | None]:
    try:
        out = subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {"megatron_core": None, "torch": None, "cuda": None, "nccl": None}


def collect() -> dict[str, object]:
    """Every provenance field of ``bench.record.Provenance``."""
    gpus = detect_gpus()
    return {
        "kit_commit": kit_commit(),
        **software_versions(),
        "gpu_model": gpus.name or None,
        "gpu_count": gpus.count or None,
        "driver": gpus.driver or None,
        # The kit's images set these; outside an image they are absent.
        "image": os.environ.get("BENCH_IMAGE"),
        "image_digest": os.environ.get("BENCH_IMAGE_DIGEST"),
        "hostname": socket.gethostname(),
    }
