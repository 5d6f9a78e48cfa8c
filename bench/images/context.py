"""Assemble an image's build context and derive its tag from a content hash of the inputs.

The context holds exactly what the Dockerfile copies: the Dockerfile and the scripts beside it,
pins.toml, the patch series of the target's upstreams, GitHub upstream trees, the CA certificates
to trust, the rendered requirement lists, and the kit's own sources. The tag is
``<image>:<first 16 hex of sha256>`` over every file's path and bytes plus the build args, so
unchanged inputs give the same tag.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.images.pins import REPO_ROOT, Pins, Target, Upstream

DEFAULT_CACHE = Path.home() / ".cache" / "megatron-bench" / "upstream"
KIT_FILES = ("pyproject.toml",)
KIT_DIRS = ("bench",)
CA_README = "Extra CA certificates trusted by the image (--ca-cert); *.crt files only.\n"
# What stands in an optional upstream's folder when it is not built (the Dockerfile copies it).
NOT_BUILT_README = ("{name} is not built into this image. It is built with the build option that "
                    "adds it (nox -s build-cuda -- --option msamp=1).\n")
# The GPU architectures MS-AMP's CUDA extensions are compiled for (TORCH_CUDA_ARCH_LIST), unless
# --option msamp_arch= says otherwise: 9.0 (sm_90, H100 and H200), what the GPU machines ran. The
# Dockerfile's ARG MSAMP_CUDA_ARCH has the same default.
MSAMP_CUDA_ARCH = "9.0"
# TORCH_CUDA_ARCH_LIST's form: compute capabilities, optionally +PTX, separated by ";" or spaces.
ARCH_LIST = re.compile(r"^\d+\.\d+a?(\+PTX)?([; ]\d+\.\d+a?(\+PTX)?)*$")
OPTIONS = ("msamp", "msamp_arch")


@dataclass(frozen=True)
class BuildContext:
    """A ready build context: its directory, tag, build args and OCI labels."""

    target: str
    directory: Path
    tag: str
    content_hash: str
    buildargs: dict[str, str] = field(default_factory=dict)

    @property
    def dockerfile(self) -> Path:
        return self.directory / "Dockerfile"


def tree_hash(directory: Path) -> str:
    """sha256 over the relative path and bytes of every file under ``directory``, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def kit_commit(root: Path = REPO_ROOT) -> str:
    """The kit's git commit, with ``-dirty`` when the work tree has changes; ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _unpack(archive: tarfile.TarFile, tree: Path) -> Path:
    """Extract a source archive with one top directory (GitHub's, ``git archive``'s) as ``tree``."""
    partial = tree.with_name(f".{tree.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    archive.extractall(partial, filter="data")
    (top,) = partial.iterdir()
    top.rename(tree)
    shutil.rmtree(partial)
    return tree


def fetch_github_upstream(upstream: Upstream, cache: Path = DEFAULT_CACHE) -> Path:
    """Download (once) and unpack the source archive of a pinned GitHub commit; return its tree."""
    tree = cache / f"{upstream.name}-{upstream.commit}"
    if tree.is_dir():
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    print(f"fetching {upstream.archive_url}")
    try:
        with urllib.request.urlopen(upstream.archive_url, timeout=120) as response:
            data = response.read()
    except OSError as error:
        raise ValueError(
            f"cannot fetch {upstream.pin} ({error}); pass --upstream {upstream.name}=PATH "
            f"with a checkout or the source archive (.tar.gz) of that commit"
        ) from error
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return _unpack(archive, tree)


def local_upstream(upstream: Upstream, path: Path, cache: Path = DEFAULT_CACHE) -> Path:
    """The tree of ``--upstream NAME=PATH``: a directory as it is, or a source archive.

    An archive (``<name>-<commit>.tar.gz``, as in the snapshots beside the checkout) must name the
    pinned commit; it is unpacked once into the same cache a fetch from GitHub would fill.
    """
    if path.is_dir():
        return path
    if not path.name.endswith((".tar.gz", ".tgz")) or not path.is_file():
        raise ValueError(f"--upstream {upstream.name}={path}: neither a directory nor a "
                         ".tar.gz source archive")
    if upstream.commit and upstream.commit not in path.name:
        raise ValueError(f"--upstream {upstream.name}={path}: the archive's name does not carry "
                         f"the pinned commit {upstream.commit}; use the archive of that commit")
    tree = cache / f"{upstream.name}-{upstream.commit or path.name.split('.')[0]}"
    if tree.is_dir():
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode="r:gz") as archive:
        return _unpack(archive, tree)


def _copy_tree(source: Path, destination: Path) -> None:
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", ".git", "*.egg-info", "*.rej", "*.orig"))


def _check_options(target: Target, options: dict[str, str], ca_certs: tuple[Path, ...]) -> None:
    """Refuse unknown or inconsistent build options and missing CA files, before anything is written."""
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ValueError(f"unknown build option(s) {sorted(unknown)}; the options are msamp=0|1 "
                         f"and msamp_arch=ARCHS (with msamp=1)")
    if options.get("msamp") not in (None, "0", "1"):
        raise ValueError(f"msamp={options['msamp']}: use msamp=0 or msamp=1")
    if options and "ms-amp" not in target.optional_upstreams:
        raise ValueError(f"target {target.name} has no MS-AMP option; it exists for cuda")
    if "msamp_arch" in options:
        if options.get("msamp") != "1":
            raise ValueError("msamp_arch applies to MS-AMP's CUDA extensions: pass it with msamp=1")
        if not ARCH_LIST.match(options["msamp_arch"]):
            raise ValueError(f"msamp_arch={options['msamp_arch']}: write compute capabilities as "
                             "TORCH_CUDA_ARCH_LIST does, e.g. 9.0 (H100/H200) or '8.0;9.0' (A100 too)")
    for cert in ca_certs:
        if not cert.is_file():
            raise ValueError(f"--ca-cert {cert}: no such file")


def _copy_build_files(target: Target, out_dir: Path, root: Path) -> None:
    """The Dockerfile, its scripts, pins.toml, the shared scripts and the requirement lists."""
    shutil.copy(root / target.dockerfile, out_dir / "Dockerfile")
    for script in sorted((root / target.dockerfile).parent.glob("*.sh")):
        shutil.copy(script, out_dir / script.name)
    shutil.copy(root / "images" / "pins.toml", out_dir / "pins.toml")
    shutil.copy(root / "images" / "common" / "install-ca.sh", out_dir / "install-ca.sh")
    shutil.copy(root / "images" / "common" / "prebuild-megatron-deepspeed.sh",
                out_dir / "prebuild-megatron-deepspeed.sh")
    shutil.copy(root / "bench" / "images" / "series.py", out_dir / "series.py")
    (out_dir / "requirements.txt").write_text("".join(f"{r}\n" for r in target.requirements))
    (out_dir / "packages.txt").write_text("".join(f"{p}\n" for p in target.packages))


def _copy_ca_certs(out_dir: Path, ca_certs: tuple[Path, ...]) -> None:
    ca_dir = out_dir / "ca"
    ca_dir.mkdir()
    (ca_dir / "README").write_text(CA_README)
    for number, cert in enumerate(ca_certs):
        shutil.copy(cert, ca_dir / f"extra-{number}.crt")


def _copy_upstreams(pins: Pins, target: Target, out_dir: Path, optional: tuple[str, ...],
                    upstream_dirs: dict[str, Path], root: Path) -> None:
    """The patch series and GitHub trees of the upstreams built, a README for those not built."""
    # An optional upstream's series and tree travel only when it is built; otherwise its folder
    # holds a README saying so (the Dockerfile copies the folder either way).
    (out_dir / "patches").mkdir()
    (out_dir / "upstream").mkdir()
    for name in (*target.upstreams, *optional):
        upstream = pins.upstreams[name]
        if upstream.series:
            series_dir = (root / upstream.series).parent
            _copy_tree(series_dir, out_dir / "patches" / series_dir.name)
        if upstream.kind == "github":
            given = upstream_dirs.get(name)
            tree = local_upstream(upstream, given) if given else fetch_github_upstream(upstream)
            _copy_tree(tree, out_dir / "upstream" / name)
    for name in sorted(set(target.optional_upstreams) - set(optional)):
        (out_dir / "upstream" / name).mkdir()
        (out_dir / "upstream" / name / "README").write_text(NOT_BUILT_README.format(name=name))


def _copy_kit(out_dir: Path, root: Path) -> None:
    kit = out_dir / "kit"
    kit.mkdir()
    for name in KIT_FILES:
        shutil.copy(root / name, kit / name)
    for name in KIT_DIRS:
        _copy_tree(root / name, kit / name)


def _hashed_buildargs(pins: Pins, target: Target, out_dir: Path, optional: tuple[str, ...],
                      options: dict[str, str], base: str | None) -> dict[str, str]:
    """The build args that are inputs of the image, and so part of its content hash."""
    pins_text = " ".join(
        [*target.packages, *(pins.upstreams[u].pin for u in (*target.upstreams, *optional))])
    buildargs = {
        "BASE_IMAGE": base or target.base_ref,
        "PINS": pins_text,
        "PATCHES_SHA256": tree_hash(out_dir / "patches"),
    }
    if "msamp" in options:
        buildargs["WITH_MSAMP"] = options["msamp"]
        buildargs["MSAMP_COMMIT"] = pins.upstreams["ms-amp"].commit
    if options.get("msamp") == "1":
        buildargs["MSAMP_CUDA_ARCH"] = options.get("msamp_arch", MSAMP_CUDA_ARCH)
    return buildargs


def assemble(
    pins: Pins,
    target: Target,
    out_dir: Path,
    *,
    base: str | None = None,
    ca_certs: tuple[Path, ...] = (),
    upstream_dirs: dict[str, Path] | None = None,
    options: dict[str, str] | None = None,
    root: Path = REPO_ROOT,
) -> BuildContext:
    """Write the build context of ``target`` to ``out_dir`` (replaced) and return it.

    ``base`` replaces the pinned base image (stand-ins, mirrors). ``upstream_dirs`` maps an
    upstream name to a local tree or source archive used instead of fetching its pinned commit. ``options`` are
    target build options: ``msamp=1`` adds MS-AMP, ``msamp_arch`` the GPU architectures of its
    CUDA extensions (TORCH_CUDA_ARCH_LIST; default ``9.0``). The default for each is the pinned choice.
    """
    options = dict(options or {})
    _check_options(target, options, ca_certs)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    optional = ("ms-amp",) if options.get("msamp") == "1" else ()
    _copy_build_files(target, out_dir, root)
    _copy_ca_certs(out_dir, ca_certs)
    _copy_upstreams(pins, target, out_dir, optional, upstream_dirs or {}, root)
    _copy_kit(out_dir, root)

    buildargs = _hashed_buildargs(pins, target, out_dir, optional, options, base)
    digest = hashlib.sha256(tree_hash(out_dir).encode())
    for key in sorted(buildargs):
        digest.update(f"{key}={buildargs[key]}\0".encode())
    content_hash = digest.hexdigest()
    # The kit commit is provenance, not an input: the kit's files are hashed already. The tag is
    # the hash's, baked into the image so a run inside it can name the image it ran in.
    buildargs["KIT_COMMIT"] = kit_commit(root)
    buildargs["IMAGE_TAG"] = f"{target.image}:{content_hash[:16]}"
    # A base pinned by digest names it; otherwise the runtime resolves it when it builds.
    pinned = buildargs["BASE_IMAGE"].partition("@")[2]
    buildargs["BASE_DIGEST"] = pinned or "unknown"
    return BuildContext(
        target=target.name,
        directory=out_dir,
        tag=f"{target.image}:{content_hash[:16]}",
        content_hash=content_hash,
        buildargs=buildargs,
    )
