"""Build, push and pull images through the Docker Engine API (dockerd or podman's compatible socket).

The runtime is found the way the docker SDK finds it: ``DOCKER_HOST`` or the default socket. Builds
stream the runtime's log lines with a step counter; an image whose content-hash tag already exists is
not rebuilt. Where the runtime has BuildKit (dockerd) it builds, showing BuildKit's steps and logs
(``bench.images.buildkit``); elsewhere (podman) the classic builder. Pushes and pulls show layer
progress from the runtime's JSON stream (layers done, bytes moved) and report the manifest digest
the registry gave, so an image can be referenced by digest; a reference may carry one
(``repo:tag@sha256:...``, the tag then only for humans).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bench.config.extras import require
from bench.images import buildkit
from bench.images.context import BuildContext

# The last lines of a failed build or run that its error shows: enough for the failing step.
LOG_TAIL_LINES = 40
STEP_LINE = re.compile(r"^Step (\d+)/(\d+) : (.*)")  # classic builder's "Step 3/17 : RUN ..."
# What a runtime says when a registry cannot be reached or its TLS certificate is not trusted.
UNREACHABLE = re.compile(r"no such host|dial tcp|i/o timeout|connection refused|TLS handshake|"
                         r"x509|server misbehaving|name resolution|network is unreachable",
                         re.IGNORECASE)
LAYER_ID = re.compile(r"^[0-9a-f]{12}$")  # the short layer ids of push/pull progress chunks
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Statuses that end a layer's transfer (push, pull; "Mounted from x" starts with "Mounted").
LAYER_DONE = ("Pushed", "Layer already exists", "Mounted from", "Pull complete", "Already exists")
PROGRESS_INTERVAL_S = 2.0
BUILDERS = ("auto", "buildkit", "classic")


class ContainerRuntimeError(RuntimeError):
    """The runtime refused a build, push or pull; the message carries its last log lines."""


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    built: bool  # False when the tag already existed
    seconds: float
    labels: dict[str, str]
    builder: str = ""  # "buildkit" or "classic"; "" when not built


def client(base_url: str | None = None):
    """A docker SDK client for ``base_url`` (default: DOCKER_HOST or the default socket)."""
    require("docker", "images", "building and pushing images")
    import docker

    try:
        api = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        api.ping()
    except Exception as error:  # the SDK raises several types for "no runtime there"
        raise ContainerRuntimeError(
            f"no container runtime answers ({error}); start dockerd or podman's API service "
            f"and set DOCKER_HOST"
        ) from error
    return api


def split_reference(reference: str) -> tuple[str, str]:
    """(repository, tag or digest): ``127.0.0.1:5000/x:1`` -> (``127.0.0.1:5000/x``, ``1``);
    ``x:1@sha256:...`` and ``x@sha256:...`` -> (``x``, ``sha256:...``); no tag means ``latest``."""
    name, at, digest = reference.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    repository, tag = (name[:colon], name[colon + 1:]) if colon > slash else (name, "latest")
    if at:
        if not DIGEST.fullmatch(digest):
            raise ValueError(f"{reference}: the part after '@' is not a sha256:<64 hex> digest")
        return repository, digest
    return repository, tag


class LayerProgress:
    """Layer progress of a push or pull from the runtime's JSON stream, shown as one summary line
    (layers done of those seen, MB moved of those known) at most every ``interval_s``."""

    def __init__(self, action: str, reference: str, show: Callable[[str], None],
                 interval_s: float = PROGRESS_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.action, self.reference, self.show = action, reference, show
        self.interval_s, self.clock = interval_s, clock
        self.layers: set[str] = set()
        self.done: set[str] = set()
        self.bytes: dict[str, tuple[int, int]] = {}  # layer -> (current, total)
        self.digest: str | None = None
        self._shown_at: float | None = None

    def update(self, chunk: dict) -> None:
        layer, status = chunk.get("id", ""), chunk.get("status", "")
        if LAYER_ID.match(layer):
            self.layers.add(layer)
            detail = chunk.get("progressDetail") or {}
            if detail.get("total"):
                self.bytes[layer] = (int(detail.get("current", 0)), int(detail["total"]))
            if status.startswith(LAYER_DONE):
                self.done.add(layer)
                if layer in self.bytes:
                    self.bytes[layer] = (self.bytes[layer][1], self.bytes[layer][1])
        found = DIGEST.search(str((chunk.get("aux") or {}).get("Digest", ""))) or (
            DIGEST.search(status) if "digest" in status.lower() else None)
        if found:
            self.digest = found.group(0)
        now = self.clock()
        if self._shown_at is None or now - self._shown_at >= self.interval_s:
            self._shown_at = now
            self.show(self.line())

    def line(self) -> str:
        current = sum(c for c, _ in self.bytes.values()) / 1e6
        total = sum(t for _, t in self.bytes.values()) / 1e6
        return (f"{self.action} {self.reference}: {len(self.done)}/{len(self.layers)} layers, "
                f"{current:.1f}/{total:.1f} MB")


def _stream(chunks: Iterable[dict], progress: LayerProgress, what: str) -> str | None:
    """Feed a push or pull stream to ``progress``; raise ContainerRuntimeError on an error chunk; return
    the digest the runtime reported."""
    for chunk in chunks:
        if "error" in chunk:
            raise ContainerRuntimeError(f"{what} failed: {chunk['error']}")
        progress.update(chunk)
    progress.show(progress.line() + (f", digest {progress.digest}" if progress.digest else ""))
    return progress.digest


def _follow(chunks: Iterable[dict], show: Callable[[str], None]) -> list[str]:
    """Print a build's stream with a step counter; raise ContainerRuntimeError on an error chunk."""
    tail: list[str] = []
    for chunk in chunks:
        if "error" in chunk:
            detail = "\n".join(tail[-LOG_TAIL_LINES:])
            raise ContainerRuntimeError(f"{detail}\n{chunk['error'].strip()}")
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
    runtime=None,
    force: bool = False,
    network_mode: str | None = None,
    show: Callable[[str], None] = print,
    builder: str = "auto",
) -> BuildResult:
    """Build ``context`` unless its tag exists (``force`` rebuilds, still using the layer cache).

    ``network_mode`` is the RUN steps' network; the default is the runtime's (a bridge).
    ``builder``: ``buildkit``, ``classic``, or ``auto`` (BuildKit where the runtime has it).
    """
    if builder not in BUILDERS:
        raise ValueError(f"builder {builder!r} is not one of {', '.join(BUILDERS)}")
    runtime = runtime or client()
    start = time.monotonic()
    if not force:
        existing = _image_or_none(runtime, context.tag)
        if existing is not None:
            show(f"{context.tag} is up to date (inputs unchanged); not rebuilt")
            return BuildResult(context.tag, existing.id, False, time.monotonic() - start,
                               existing.labels or {})
    if builder == "auto":
        builder = "buildkit" if buildkit.supports_buildkit(runtime) else "classic"
    show(f"building {context.tag} from {context.directory} ({builder} builder)")
    buildargs = dict(context.buildargs)
    if buildargs.get("BASE_DIGEST", "unknown") == "unknown":
        buildargs["BASE_DIGEST"] = base_digest(buildargs.get("BASE_IMAGE", ""), runtime)
    labels = {"dev.megatron-bench.inputs.sha256": context.content_hash}
    try:
        if builder == "buildkit":
            tail, error = buildkit.follow(buildkit.build(
                runtime, str(context.directory), context.tag, buildargs, labels, network_mode), show)
            if error:
                raise ContainerRuntimeError("\n".join([*tail[-LOG_TAIL_LINES:], error]))
        else:
            _follow(runtime.api.build(
                path=str(context.directory), tag=context.tag, buildargs=buildargs, labels=labels,
                rm=True, forcerm=True, decode=True, pull=False, network_mode=network_mode,
            ), show)  # fmt: skip
    except ContainerRuntimeError as error:
        base = buildargs.get("BASE_IMAGE", "")
        if UNREACHABLE.search(str(error)) and _image_or_none(runtime, base) is None:
            raise ContainerRuntimeError(f"{error}\n{base_hint(base)}") from None
        raise
    image = runtime.images.get(context.tag)
    seconds = time.monotonic() - start
    show(f"built {context.tag} in {seconds:.1f} s")
    return BuildResult(context.tag, image.id, True, seconds, image.labels or {}, builder)


def base_digest(base: str, runtime) -> str:
    """The digest of the base a build uses: the one its reference pins, else the one the runtime
    has for the local image (pulled from a registry), else ``unknown``."""
    if "@" in base:
        return split_reference(base)[1]
    if not base or _image_or_none(runtime, base) is None:
        return "unknown"  # the build itself will say the base is missing
    return repo_digest(base, runtime=runtime) or "unknown"


def base_hint(base: str) -> str:
    registry = base.partition("/")[0]
    return (f"hint: the base image {base} could not be fetched from {registry}. Build on a base "
            f"this machine can reach with --base IMAGE (a mirror, or an image already in the "
            f"runtime: docker load / docker tag). Where a proxy re-signs TLS, the runtime needs its "
            f"CA in /etc/docker/certs.d/{registry}/ca.crt, and --ca-cert PATH trusts it inside the "
            f"build for pip.")


def _image_or_none(runtime, tag: str):
    import docker.errors

    try:
        return runtime.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def remote_name(registry: str, tag: str) -> tuple[str, str]:
    """(repository, tag) of a local ``name:tag`` under ``registry`` (``host:port/owner``)."""
    name, _, version = tag.rpartition(":")
    return f"{registry.rstrip('/')}/{name}", version


@dataclass(frozen=True)
class Pushed:
    """A pushed reference and the manifest digest the registry gave it (None if it gave none)."""

    reference: str
    digest: str | None

    @property
    def pinned(self) -> str:
        """``repository:tag@sha256:...``: what job scripts should name to get exactly this image."""
        return f"{self.reference}@{self.digest}" if self.digest else self.reference


def push(tag: str, registry: str, *, runtime=None, extra_tags: tuple[str, ...] = (),
         show: Callable[[str], None] = print) -> list[Pushed]:
    """Tag ``tag`` under ``registry`` (plus ``extra_tags``) and push; return what was pushed."""
    runtime = runtime or client()
    repository, version = remote_name(registry, tag)
    pushed = []
    for version_tag in (version, *extra_tags):
        runtime.api.tag(tag, repository, version_tag)
        reference = f"{repository}:{version_tag}"
        digest = _stream(runtime.api.push(repository, version_tag, stream=True, decode=True),
                         LayerProgress("pushing", reference, show), f"push of {reference}")
        pushed.append(Pushed(reference, digest))
    return pushed


def pull(reference: str, *, runtime=None, show: Callable[[str], None] = print) -> str:
    """Pull ``repository:tag`` or ``repository[:tag]@sha256:...``; return the local image id."""
    import docker.errors

    runtime = runtime or client()
    repository, version = split_reference(reference)
    try:
        _stream(runtime.api.pull(repository, version, stream=True, decode=True),
                LayerProgress("pulling", reference, show), f"pull of {reference}")
    except (ContainerRuntimeError, docker.errors.APIError) as error:  # APIError: refused up front
        message = str(error) if isinstance(error, ContainerRuntimeError) else f"pull of {reference} failed: {error}"
        if UNREACHABLE.search(message):
            message += (f"\nhint: {reference.partition('/')[0]} cannot be reached from here; pull "
                        "from a registry that can with --registry HOST/OWNER")
        raise ContainerRuntimeError(message) from None
    local = f"{repository}@{version}" if version.startswith("sha256:") else f"{repository}:{version}"
    return runtime.images.get(local).id


def repo_digest(reference: str, *, runtime=None) -> str | None:
    """The registry digest of a local image (from a pull or push), or None: a locally built or
    loaded image has none until it is pushed."""
    runtime = runtime or client()
    repository, _ = split_reference(reference)
    for entry in runtime.images.get(reference).attrs.get("RepoDigests") or []:
        name, _, digest = entry.partition("@")
        if name == repository or name.endswith("/" + repository):
            return digest
    return None


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
