"""Build, push and pull images through the Docker Engine API (dockerd or podman's compatible socket).

The engine is found the way the docker SDK finds it: ``DOCKER_HOST`` or the default socket. Builds
stream the engine's log lines with a step counter; an image whose content-hash tag already exists is
not rebuilt.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bench.images.context import BuildContext

STEP_LINE = re.compile(r"^Step (\d+)/(\d+) : (.*)")  # classic builder's "Step 3/17 : RUN ..."
# What an engine says when a registry cannot be reached or its TLS certificate is not trusted.
UNREACHABLE = re.compile(r"no such host|dial tcp|i/o timeout|connection refused|TLS handshake|"
                         r"x509|server misbehaving|name resolution|network is unreachable",
                         re.IGNORECASE)
LOG_TAIL_LINES = 40


class EngineError(RuntimeError):
    """The engine refused a build, push or pull; the message carries its last log lines."""


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    built: bool  # False when the tag already existed
    seconds: float
    labels: dict[str, str]


def client(base_url: str | None = None):
    """A docker SDK client for ``base_url`` (default: DOCKER_HOST or the default socket)."""
    try:
        import docker
    except ImportError as error:
        raise EngineError("the docker SDK is missing; pip install '.[images]'") from error
    try:
        api = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        api.ping()
    except Exception as error:  # the SDK raises several types for "no engine there"
        raise EngineError(
            f"no container engine answers ({error}); start dockerd or podman's API service "
            f"and set DOCKER_HOST"
        ) from error
    return api


def _follow(chunks: Iterable[dict], show: Callable[[str], None]) -> list[str]:
    """Print a build's stream with a step counter; raise EngineError on an error chunk."""
    tail: list[str] = []
    for chunk in chunks:
        if "error" in chunk:
            detail = "\n".join(tail[-LOG_TAIL_LINES:])
            raise EngineError(f"{detail}\n{chunk['error'].strip()}")
        for line in chunk.get("stream", "").splitlines():
            if not line.strip():
                continue
            tail.append(line)
            step = STEP_LINE.match(line)
            show(f"[{step.group(1)}/{step.group(2)}] {step.group(3)}" if step else f"    {line}")
    return tail


def build(
    context: BuildContext,
    *,
    engine=None,
    force: bool = False,
    network_mode: str | None = None,
    show: Callable[[str], None] = print,
) -> BuildResult:
    """Build ``context`` unless its tag exists (``force`` rebuilds, still using the layer cache).

    ``network_mode`` is the RUN steps' network; the default is the engine's (a bridge).
    """
    engine = engine or client()
    start = time.monotonic()
    if not force:
        existing = _image_or_none(engine, context.tag)
        if existing is not None:
            show(f"{context.tag} is up to date (inputs unchanged); not rebuilt")
            return BuildResult(context.tag, existing.id, False, time.monotonic() - start,
                               existing.labels or {})
    show(f"building {context.tag} from {context.directory}")
    chunks = engine.api.build(
        path=str(context.directory), tag=context.tag, buildargs=context.buildargs,
        labels={"dev.megatron-bench.inputs.sha256": context.content_hash},
        rm=True, forcerm=True, decode=True, pull=False, network_mode=network_mode,
    )
    try:
        _follow(chunks, show)
    except EngineError as error:
        base = context.buildargs.get("BASE_IMAGE", "")
        if UNREACHABLE.search(str(error)) and _image_or_none(engine, base) is None:
            raise EngineError(f"{error}\n{base_hint(base)}") from None
        raise
    image = engine.images.get(context.tag)
    seconds = time.monotonic() - start
    show(f"built {context.tag} in {seconds:.1f} s")
    return BuildResult(context.tag, image.id, True, seconds, image.labels or {})


def base_hint(base: str) -> str:
    registry = base.partition("/")[0]
    return (f"hint: the base image {base} could not be fetched from {registry}. Build on a base "
            f"this machine can reach with --base IMAGE (a mirror, or an image already in the "
            f"engine: docker load / docker tag). Where a proxy re-signs TLS, the engine needs its "
            f"CA in /etc/docker/certs.d/{registry}/ca.crt, and --ca-cert PATH trusts it inside the "
            f"build for pip.")


def _image_or_none(engine, tag: str):
    import docker.errors

    try:
        return engine.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def remote_name(registry: str, tag: str) -> tuple[str, str]:
    """(repository, tag) of a local ``name:tag`` under ``registry`` (``host:port/owner``)."""
    name, _, version = tag.rpartition(":")
    return f"{registry.rstrip('/')}/{name}", version


def push(tag: str, registry: str, *, engine=None, extra_tags: tuple[str, ...] = (),
         show: Callable[[str], None] = print) -> list[str]:
    """Tag ``tag`` under ``registry`` (plus ``extra_tags``) and push; return the pushed references."""
    engine = engine or client()
    repository, version = remote_name(registry, tag)
    pushed = []
    for version_tag in (version, *extra_tags):
        engine.api.tag(tag, repository, version_tag)
        show(f"pushing {repository}:{version_tag}")
        for chunk in engine.api.push(repository, version_tag, stream=True, decode=True):
            if "error" in chunk:
                raise EngineError(f"push of {repository}:{version_tag} failed: {chunk['error']}")
        pushed.append(f"{repository}:{version_tag}")
    return pushed


def pull(reference: str, *, engine=None, show: Callable[[str], None] = print) -> str:
    """Pull ``repository:tag`` through the engine; return the local image id."""
    import docker.errors

    engine = engine or client()
    repository, _, version = reference.rpartition(":")
    show(f"pulling {reference}")
    try:
        for chunk in engine.api.pull(repository, version, stream=True, decode=True):
            if "error" in chunk:
                raise EngineError(f"pull of {reference} failed: {chunk['error']}")
    except (EngineError, docker.errors.APIError) as error:  # APIError: refused up front
        message = str(error) if isinstance(error, EngineError) else f"pull of {reference} failed: {error}"
        if UNREACHABLE.search(message):
            message += (f"\nhint: {reference.partition('/')[0]} cannot be reached from here; pull "
                        "from a registry that can with --registry HOST/OWNER")
        raise EngineError(message) from None
    return engine.images.get(reference).id


def runtime_pull_command(runtime: str, reference: str, output: str) -> list[str]:
    """The command that brings ``reference`` into a non-Docker runtime (an argv list).

    enroot (pyxis clusters) imports into a squashfs file; Singularity/Apptainer pulls into a .sif.
    """
    registry, _, path = reference.partition("/")
    if runtime == "enroot":
        # enroot separates the registry from the image path with '#'.
        return ["enroot", "import", "--output", output, f"docker://{registry}#{path}"]
    if runtime in ("singularity", "apptainer"):
        return [runtime, "pull", output, f"docker://{reference}"]
    raise ValueError(f"runtime {runtime!r} has no pull command; use docker, enroot or singularity")


def subprocess_run(argv: list[str], cwd=None) -> None:
    """Run a tool of a platform runtime, its output going straight to the terminal."""
    import subprocess

    subprocess.run(argv, cwd=cwd, check=True, stdout=sys.stdout, stderr=sys.stderr)


def run_if_present(argv: list[str], show: Callable[[str], None] = print) -> bool:
    """Run ``argv`` when its program is installed; otherwise say so. Returns whether it ran."""
    import shlex

    show("$ " + shlex.join(argv))
    if shutil.which(argv[0]) is None:
        show(f"not run: {argv[0]} is not installed on this machine")
        return False
    subprocess_run(argv)
    return True
