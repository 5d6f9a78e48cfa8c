"""Provenance of a run: kit commit, software versions, GPUs and image, as far as they can be read.

Software versions are read by the Python that runs the training (it may differ from the host's),
so the record describes what actually ran. Anything that cannot be determined is None.

Transformer Engine's version is its ``transformer_engine`` package metadata, read without importing
it (its import loads its CUDA libraries and torch extension): TE 2.x sets its own ``__version__``
from that metadata at import, so a TE whose metadata is missing (its modules unpacked onto
``PYTHONPATH`` alone) does not import, and training runs without it. None where the package is not
on the path.

The image's digest comes from the runtime that started it, never from the plan: a job script
prints an :data:`IMAGE_DIGEST_LINE` before launch (``bench.render.common.image_digest_lines``),
which :func:`image_digest_from_output` reads back; a local container run asks the engine for the
image of the container it started (``bench.running.docker``).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Sequence

from bench.config.environment import env_value
from bench.config.paths import CHECKOUT
from bench.running.gpus import detect_gpus

_VERSIONS = r"""
import json, importlib.metadata as md, importlib.util
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
out = {"megatron_core": version("megatron-core")}
try:
    te_found = importlib.util.find_spec("transformer_engine") is not None
except (ImportError, ValueError):
    te_found = False
out["transformer_engine"] = version("transformer_engine") if te_found else None
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


# What a job script prints before launch, e.g.
# "BENCH_IMAGE_DIGEST=sha256:<hex> kind=file-sha256 image=/data/x.sqsh", or "BENCH_IMAGE_DIGEST=
# unknown image=REF why=..." where the runtime does not say. A failed hash (a missing file) leaves
# "sha256:" without hex digits, which this does not match: then the record says null.
IMAGE_DIGEST_LINE = re.compile(
    r"^BENCH_IMAGE_DIGEST=(?P<digest>sha256:[0-9a-f]{64}) kind=(?P<kind>registry|file-sha256)\b",
    re.MULTILINE)
NO_DIGEST = {"image_digest": None, "image_digest_kind": None}


def image_digest_from_output(text: str) -> dict[str, str | None]:
    """``image_digest`` and ``image_digest_kind`` from a job's output (the first such line)."""
    found = IMAGE_DIGEST_LINE.search(text)
    if found is None:
        return dict(NO_DIGEST)
    return {"image_digest": found["digest"], "image_digest_kind": found["kind"]}


DIRTY = "-dirty"


def kit_commit() -> str | None:
    """The kit's git commit: ``BENCH_KIT_COMMIT`` (set in images), else the checkout's HEAD, with
    ``-dirty`` appended (as ``git describe --dirty`` does) when tracked files differ from it: the
    code that ran is then not that commit's."""
    if env_value("BENCH_KIT_COMMIT"):
        return env_value("BENCH_KIT_COMMIT")
    repo = CHECKOUT
    if repo is None:  # an installed wheel: no checkout, no commit to name
        return None
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0 or not head.stdout.strip():
            return None
        # --no-optional-locks: status must not refresh the index, whose lock file a killed or
        # file-size-limited run would leave behind, blocking the user's next git command.
        changed = subprocess.run(["git", "--no-optional-locks", "-C", str(repo), "status",
                                  "--porcelain", "--untracked-files=no"], capture_output=True,
                                 text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + (DIRTY if changed.stdout.strip() else "")


SOFTWARE = ("megatron_core", "transformer_engine", "torch", "cuda", "nccl")  # what _VERSIONS reads


def software_versions(python: Sequence[str] = (sys.executable,)) -> dict[str, str | None]:
    """Versions as ``python`` (a command: an interpreter, or one started in a container) sees them."""
    try:
        out = subprocess.run([*python, "-c", _VERSIONS], capture_output=True, text=True,
                             timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return dict.fromkeys(SOFTWARE)


def collect(python: Sequence[str] = (sys.executable,), image: str | None = None,
            digest: dict[str, str | None] = NO_DIGEST) -> dict[str, object]:
    """Every provenance field of ``bench.records.record.Provenance``: ``python`` is the command that
    trains, ``image`` and ``digest`` what a container run started (default: what the kit's images
    say of themselves in ``BENCH_IMAGE``, and no digest)."""
    gpus = detect_gpus()
    return {
        "kit_commit": kit_commit(),
        **software_versions(python),
        "gpu_model": gpus.name or None,
        "gpu_count": gpus.count or None,
        "driver": gpus.driver or None,
        "gpu_uuids": list(gpus.uuids) or None,
        # The kit's images set BENCH_IMAGE; an image cannot know its own digest.
        "image": image or env_value("BENCH_IMAGE"),
        **digest,
        "hostname": socket.gethostname(),
    }
