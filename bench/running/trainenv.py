"""Is the Python that will train ready? Checked before a run on this machine launches anything.

A run whose environment lacks torch's GPUs, megatron-core at the pinned version (or DeepSpeed and
the Megatron-DeepSpeed tree for that engine) would start torchrun and die on an import: a failed
record for a problem that was knowable before launch. :func:`facts` asks the training Python
itself (``python -m bench.running.trainenv`` in a child, on this machine or inside the run's image: its
imports stay out of the kit's), once per command: what it finds also gives the plan its
capabilities. :func:`problems` turns each missing piece into one line naming it and the command
that fixes it. An environment problem is not a run: the caller launches nothing and writes no
record.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.config.capabilities import Capabilities
from bench.config.paths import KIT_ROOT

if TYPE_CHECKING:  # the probe runs in the training Python, which may lack pydantic
    from bench.images.pins import Pins
    from bench.planning.engines.base import Preflight

PROBE_TIMEOUT_S = 180  # imports torch, megatron-core, DeepSpeed: seconds, not minutes
PROVISION_HINT = "or run through `nox -s bench`, which provisions a venv with the pins"
IMAGE_HINT = ("use the kit's CUDA image (`python -m bench images pull cuda`, or `python -m bench "
              "images build cuda`) as --image")


@dataclass(frozen=True)
class Facts:
    """What the training Python has (None: not installed). ``python`` names it in messages: its
    path, or ``the python of image X``; ``image`` is that image (None: a Python on this machine)."""

    python: str
    image: str | None = None
    python_version: str = ""  # major.minor of the Python that answered
    torch: str | None = None
    torch_error: str = ""
    torch_cuda: str | None = None  # the CUDA torch was built for; None: a CPU-only build
    cuda_devices: int = 0
    megatron_core: str | None = None
    megatron_error: str = ""
    missing_module: str = ""  # what megatron-core's import missed, when it was a module
    deepspeed: str | None = None
    torchrun: str | None = None  # where torchrun is on that Python's PATH
    megatron_deepspeed_tree: bool = False  # pretrain_gpt.py is in the folder asked about
    capabilities: Capabilities | None = None


def pinned_version(pins: Pins, package: str) -> str:
    """The version images/pins.toml pins ``package`` to (an upstream, else the cuda target's)."""
    for upstream in pins.upstreams.values():
        if upstream.kind == "pypi" and upstream.package == package:
            return upstream.version
    for spec in pins.target("cuda").packages:
        name, _, version = spec.partition("==")
        if name == package:
            return version
    raise ValueError(f"images/pins.toml pins no {package}")


def _probe(megatron_deepspeed_dir: str) -> dict[str, object]:
    """Run inside the training Python: versions, GPUs, torchrun, the Megatron-DeepSpeed tree,
    capabilities (JSON-ready)."""
    from importlib import metadata

    out: dict[str, object] = {
        "python_version": "{}.{}".format(*sys.version_info[:2]), "torchrun": shutil.which("torchrun"),
        "megatron_deepspeed_tree": bool(megatron_deepspeed_dir)
        and Path(megatron_deepspeed_dir, "pretrain_gpt.py").is_file()}
    try:
        import torch
    except ImportError as exc:
        out["torch_error"] = str(exc)
        return out
    out.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
               cuda_devices=torch.cuda.device_count())
    for key, dist in (("megatron_core", "megatron-core"), ("deepspeed", "deepspeed")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if "megatron_core" in out:
        from bench.config.capabilities import detect

        try:
            out["capabilities"] = detect().__dict__
            # What the entry imports before it trains: a package of this Python that breaks it
            # (a shadowed dependency of transformers, say) shows here, not after torchrun.
            import megatron.training  # noqa: F401
        except ImportError as exc:
            out["megatron_error"] = (str(exc).splitlines() or [repr(exc)])[0]
            out["missing_module"] = getattr(exc, "name", None) or ""
    return out


def facts(python: str = sys.executable, megatron_deepspeed_dir: str = "") -> Facts:
    """Ask ``python`` on this machine what it has; a Python that does not run has nothing."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(KIT_ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([python, "-m", "bench.running.trainenv", megatron_deepspeed_dir],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                              env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Facts(python=python, torch_error=f"{python} does not run: {exc}")
    return facts_from(done, python)


def facts_from(done: subprocess.CompletedProcess[str], python: str,
               image: str | None = None) -> Facts:
    """The facts of a finished probe (``python -m bench.running.trainenv DIR``) of ``python``."""
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Facts(python=python, image=image, torch_error=f"the probe failed: {last}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    caps = raw.pop("capabilities", None)
    return Facts(**raw, python=python, image=image,
                 capabilities=None if caps is None else Capabilities.from_dict(caps, "probe"))


def problems(found: Facts, engine: str, gpus_needed: int, megatron_deepspeed_dir: str = "",
             pins: Pins | None = None) -> list[str]:
    """One line per missing piece, each naming it and the command that fixes it; [] when ready."""
    from bench.images.pins import load_pins  # host side: pydantic is there
    from bench.planning.engines.registry import ENGINES

    pins = pins or load_pins()
    py = found.python
    pip = f"{py} -m pip install"

    def fix(here: str) -> str:
        """The fix on this machine, or for an image: another image (nothing is installed in one)."""
        return here if found.image is None else IMAGE_HINT

    if found.torch is None:
        return [f"torch does not import in {py} ({found.torch_error}); " + fix(
            "the kit never installs torch: install your machine's CUDA build "
            f"(https://pytorch.org/get-started/locally/), e.g. `{pip} torch`")]
    out = []
    if found.cuda_devices < gpus_needed:
        build = (f"built for CUDA {found.torch_cuda}" if found.torch_cuda else "a CPU-only build")
        if not found.torch_cuda:
            fix_gpus = fix(f"install a CUDA build: `{pip} --force-reinstall torch --index-url "
                           "https://download.pytorch.org/whl/cu128`")
        elif found.image:
            fix_gpus = ("check that `docker run --gpus all` shows the GPUs (the NVIDIA Container "
                        "Toolkit) and CUDA_VISIBLE_DEVICES")
        else:
            fix_gpus = "check the driver (`nvidia-smi`) and CUDA_VISIBLE_DEVICES"
        seen = "no GPU" if not found.cuda_devices else f"{found.cuda_devices} GPU(s)"
        out.append(f"torch {found.torch} in {py} sees {seen} ({build}), the run needs "
                   f"{gpus_needed}; {fix_gpus}")
    out += _engine_problems(found, ENGINES[engine].preflight, pins, py, fix, megatron_deepspeed_dir)
    if not found.torchrun:
        where = f" in image {found.image}" if found.image else ""
        out.append(f"torchrun is not on PATH{where}; " + fix(
            f"put the bin folder of {py}'s environment on PATH"))
    return out


def _engine_problems(found: Facts, check: Preflight, pins: Pins, py: str,
                     fix: Callable[[str], str], megatron_deepspeed_dir: str) -> list[str]:
    """What the engine's training Python lacks: its package at the pinned version (and importing,
    where it must), and the Megatron-DeepSpeed tree where it runs one."""
    out = _package(getattr(found, check.version_field), check.package,
                   pinned_version(pins, check.package), py, no_deps=check.no_deps, image=found.image)
    if check.must_import and getattr(found, check.version_field) is not None and found.megatron_error:
        module = found.missing_module.split(".")[0]
        out.append(f"{check.package} {getattr(found, check.version_field)} is installed in {py} "
                   f"but does not import ({found.megatron_error}); "
                   + fix(f"`{py} -m pip install {module}`" if module else PROVISION_HINT))
    if check.needs_tree and not found.megatron_deepspeed_tree:
        upstream = pins.upstreams["megatron-deepspeed"]
        where = f" in image {found.image}" if found.image else ""
        out.append(f"Megatron-DeepSpeed is not at {megatron_deepspeed_dir}{where} (no "
                   "pretrain_gpt.py); " + fix(
                       f"check out the pinned tree: `git clone https://github.com/"
                       f"{upstream.repo} {megatron_deepspeed_dir} && git -C "
                       f"{megatron_deepspeed_dir} checkout {upstream.commit}`, or use the "
                       "kit's image"))
    return out


def describe(found: Facts) -> str:
    """One line for the run's log: the training Python, its stack and its capabilities."""
    parts = [found.python, f"torch {found.torch} ({found.cuda_devices} GPU(s))"]
    parts += [f"{name} {version}" for name, version in (("megatron-core", found.megatron_core),
                                                         ("deepspeed", found.deepspeed)) if version]
    if found.capabilities is not None:
        parts.append(found.capabilities.describe())
    return ", ".join(parts)


def _package(have: str | None, name: str, pinned: str, py: str, no_deps: bool,
             image: str | None) -> list[str]:
    install = f"`{py} -m pip install {'--no-deps ' if no_deps else ''}{name}=={pinned}`"
    if have is None:
        return [f"{name} is not installed in {py}; "
                + (IMAGE_HINT if image else f"{install}, {PROVISION_HINT}")]
    if have != pinned:
        return [f"{name} {have} in {py}, but the kit pins {pinned} (images/pins.toml); "
                + (IMAGE_HINT if image else install)]
    return []


def main(argv: list[str]) -> int:
    """``python -m bench.running.trainenv [MEGATRON_DEEPSPEED_DIR]``: the probe's JSON on stdout."""
    print(json.dumps(_probe(argv[0] if argv else "")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
