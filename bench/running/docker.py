"""A run on this machine inside an image, through the docker command line (``DOCKER_HOST`` as
docker reads it): the checks before anything is written, the probe of the image's Python, and
afterwards the identity of the image the engine started, from the engine.

The run's container is named (``bench.render.docker.container_name``) and not removed by docker,
so that once it has ended the kit can ask the engine which image it was created from (its image
ID; the registry digest where the image came from a registry); then the kit removes it, also after
a timeout or Ctrl-C, when it may still run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence

from bench.render.docker import run_prefix
from bench.running.provenance import NO_DIGEST
from bench.running.trainenv import PROBE_TIMEOUT_S, Facts, facts_from

ENGINE_TIMEOUT_S = 60  # an inspect or rm: the engine answers in well under a second
DOCKER_FAILED = 125  # docker run's own status when the engine could not create or start it
# What dockerd says when --gpus has no NVIDIA Container Toolkit behind it.
NO_GPU_RUNTIME = re.compile(r"could not select device driver .*capabilities: \[\[gpu\]\]")
NOT_FOUND = re.compile(r"no such image", re.IGNORECASE)


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False,
                          timeout=ENGINE_TIMEOUT_S)


def _said(stderr: str) -> str:
    """docker's own error line (``docker: ...``, before its usage hint), else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()] or ["no output"]
    return next((line for line in lines if line.startswith("docker: ")), lines[-1])


def check_runtime(image: str) -> None:
    """Refuse, in one sentence with the fix, a machine where docker cannot start ``image``."""
    if shutil.which("docker") is None:
        raise ValueError("--image runs the benchmark with `docker run --gpus all`, but docker is "
                         "not on PATH: install Docker Engine and the NVIDIA Container Toolkit, or "
                         "leave out --image to run in the Python the kit is started from")
    found = _docker("image", "inspect", "--format", "{{.Id}}", image)
    if found.returncode == 0:
        return
    said = _said(found.stderr)
    if NOT_FOUND.search(said):
        raise ValueError(f"image {image} is not in this machine's docker ({said}): pull it "
                         f"(`docker pull {image}`; the kit's: `python -m bench images pull "
                         "cuda`) or build it (`python -m bench images build cuda`)")
    raise ValueError(f"docker does not answer ({said}): start dockerd, or set DOCKER_HOST to "
                     "the engine's socket")


def probe(image: str, workdir: str, binds: Sequence[str] = (),
          megatron_deepspeed_dir: str = "") -> Facts:
    """The training facts of ``image``'s Python, asked in a container started as the run's is."""
    argv = [*run_prefix(image, workdir, binds), "python", "-m", "bench.running.trainenv",
            megatron_deepspeed_dir]
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=PROBE_TIMEOUT_S)
    if done.returncode == DOCKER_FAILED:
        said = _said(done.stderr)
        if NO_GPU_RUNTIME.search(said):
            raise ValueError(f"docker cannot give the container GPUs ({said}): install the NVIDIA "
                             "Container Toolkit and restart dockerd, or leave out --image")
        raise ValueError(f"docker could not start {image}: {said}")
    return facts_from(done, f"the python of image {image}", image)


def _repository(reference: str) -> str:
    """``host:5000/x/y:tag@sha256:...`` -> ``host:5000/x/y`` (a tag follows the last ``/``)."""
    name = reference.partition("@")[0]
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


def started_image(name: str, reference: str) -> dict[str, str | None]:
    """``image_digest`` and its kind for the image container ``name`` was created from: the
    registry digest of ``reference``'s repository (else of any) where the engine has one, else
    the image ID; none when the container does not exist (it never started)."""
    created = _docker("container", "inspect", "--format", "{{.Image}}", name)
    if created.returncode != 0:
        return dict(NO_DIGEST)
    image_id = created.stdout.strip()
    found = _docker("image", "inspect", "--format", "{{json .RepoDigests}}", image_id)
    repo_digests = json.loads(found.stdout) if found.returncode == 0 else []
    wanted = _repository(reference)
    ranked = sorted(repo_digests or [], key=lambda d: d.partition("@")[0] != wanted)
    if ranked:
        return {"image_digest": ranked[0].partition("@")[2], "image_digest_kind": "registry"}
    return {"image_digest": image_id, "image_digest_kind": "image-id"}


def remove(name: str) -> None:
    """Remove the run's container, stopping it first if it still runs (``docker rm -f``)."""
    _docker("rm", "--force", name)
