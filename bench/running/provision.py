"""The training environment of ``nox -s bench`` and ``nox -s smoke`` on this machine.

A fresh GPU machine has a driver, Python and often torch, but not megatron-core. Where the Python
the sessions start from lacks the pinned stack, this module creates (once) a cached venv that sees
the machine's own torch (``--system-site-packages``: a vendor's torch is never installed or
replaced) and installs the cuda image's pins from ``images/pins.toml`` into it, the way the image
does: the requirements, then the PyPI upstreams without dependencies. A stamp keyed on the pins
makes the next start a file read. Air-gapped sites give a wheelhouse (``--wheelhouse DIR``, or pip's
own ``PIP_FIND_LINKS``/``PIP_NO_INDEX``); ``python -m bench.running.provision wheelhouse cuda`` fills one on
a connected machine, with the sources of the GPU machine's builds (``--builds te,apex,...``:
:mod:`bench.running.airgap`, :mod:`bench.running.builds`); ``... setup --wheelhouse DIR`` makes the
venv and the builds without a run. ``--env current`` uses the current Python as it is (images, clusters).

Standard library only at import: the noxfile imports it before anything is installed. Reading the
pins (``images/pins.toml``, a pydantic model) needs pydantic, the kit's one dependency, in the
Python that runs nox (``pip install nox pydantic``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.config.environment import env_value
from bench.config.extras import NO_PYDANTIC
from bench.running.pythons import NEEDED, WHERE, find_python312, version_of

if TYPE_CHECKING:
    from bench.images.pins import Pins

def cache_dir() -> Path:
    """Where the training venvs are kept: ``$BENCH_CACHE_DIR``, else ~/.cache/megatron-bench."""
    return Path(env_value("BENCH_CACHE_DIR") or "~/.cache/megatron-bench").expanduser()
TARGET = "cuda"  # the local platform runs NVIDIA GPUs: the cuda image's pins
STAMP = ".bench-pins"  # in the venv: the key of what was installed
ENVS = ("auto", "current", "venv")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Stack:
    """What the venv gets: ``requirements`` with their dependencies, then ``packages`` without;
    ``python``: the oldest Python they install into (None: any)."""

    packages: tuple[str, ...]
    requirements: tuple[str, ...]
    python: tuple[int, int] | None = None

    @property
    def pins(self) -> tuple[str, ...]:
        return (*self.requirements, *self.packages)

    def key(self, base_python: str) -> str:
        """Changes when a pin or the base Python changes: then the venv is made again."""
        return hashlib.sha256(json.dumps([base_python, *self.pins]).encode()).hexdigest()


def training_stack(pins: Pins | None = None, target: str = TARGET) -> Stack:
    """The target's PyPI upstreams (megatron-core) and its pinned requirements.

    The target's other packages (DeepSpeed, built from source against torch) stay with the image.
    """
    try:
        from bench.images.pins import load_pins  # pydantic: only when the stack is asked for
    except ImportError as exc:  # nox's Python without pydantic: one line, not a traceback
        raise ValueError(NO_PYDANTIC) from exc

    pins = pins or load_pins()
    chosen = pins.target(target)
    packages = tuple(pins.upstreams[name].pin for name in chosen.upstreams
                     if pins.upstreams[name].kind == "pypi")
    return Stack(packages=packages, requirements=chosen.requirements, python=NEEDED)


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def check_python(python: str, stack: Stack, role: str, fix: str, env: dict[str, str]) -> None:
    """One error line, before any pip, when ``python`` is older than the stack needs (pip would
    find no megatron-core for it only after listing every version). ``role``: what that Python is
    for; ``fix``: what to do, a Python 3.12 found here (:mod:`bench.running.pythons`) named."""
    if stack.python is None:
        return
    version = version_of(python)
    if version is not None and version >= stack.python:
        return
    has = f"is Python {_dotted(version)}" if version else "does not run"
    found = find_python312(env)
    near = f"; a Python 3.12 here: {found}" if found else f" (none found here: {WHERE})"
    raise ValueError(f"{' '.join(stack.packages)} needs Python >= {_dotted(stack.python)}, and "
                     f"{python} ({role}) {has}: {fix}{near}")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheelhouse_problems(stack: Stack, folders: Sequence[Path]) -> list[str]:
    """Pins the wheelhouse cannot satisfy: missing, or there only at another version."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in folder.glob("*"):
            stem = path.name.removesuffix(".tar.gz").removesuffix(".zip").removesuffix(".whl")
            name, _, rest = stem.partition("-")
            found.setdefault(_normal(name), set()).add(rest.split("-")[0])
    out = []
    for spec in stack.pins:
        name, _, version = spec.partition("==")
        versions = found.get(_normal(name), set())
        if version not in versions:
            there = f"it has {', '.join(sorted(versions))}" if versions else "it has none"
            out.append(f"{name}=={version} ({there})")
    return out


def venv_for(base_python: str) -> Path:
    """One cached venv per base Python (its torch is the one the venv sees)."""
    tag = hashlib.sha256(str(Path(base_python).absolute()).encode()).hexdigest()[:8]
    return cache_dir() / f"train-venv-{tag}"


def _pip_source(wheelhouse: Path | None, env: dict[str, str]) -> tuple[list[str], list[Path]]:
    """(pip's index arguments, the wheelhouse folders to check): --wheelhouse means no index."""
    if wheelhouse is not None:
        if not wheelhouse.is_dir():
            raise ValueError(f"--wheelhouse {wheelhouse} is not a folder; fill one with "
                             f"`nox -s wheelhouse -- {TARGET} --dest {wheelhouse}`")
        return ["--no-index", "--find-links", str(wheelhouse)], [wheelhouse]
    if env.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"):
        links = [Path(p) for p in env.get("PIP_FIND_LINKS", "").split() if p]
        if not links:
            raise ValueError("PIP_NO_INDEX is set but PIP_FIND_LINKS names no wheelhouse; set "
                             "it, or give --wheelhouse DIR")
        return [], links
    return [], []


def ensure_venv(base_python: str, stack: Stack, venv: Path, wheelhouse: Path | None = None,
                log: Log = print, env: dict[str, str] | None = None) -> str:
    """The venv's Python with ``stack`` installed; reused as it is when its stamp matches."""
    env = dict(os.environ if env is None else env)
    python = venv / "bin" / "python"
    stamp = venv / STAMP
    key = stack.key(base_python)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == key:
        return str(python)
    index, folders = _pip_source(wheelhouse, env)
    # A requirement the base Python already has stays the base's: the venv sees the base's packages
    # (--system-site-packages), and a pinned older copy would shadow the version they need (seen on
    # a GPU machine: pinned regex 2024.11.6 broke its transformers, which megatron.training imports).
    names = [_name(spec) for spec in stack.requirements]
    have = _versions(base_python, names) or [None] * len(names)
    base = {spec: version for spec, version in zip(stack.requirements, have, strict=True) if version}
    wanted = Stack(packages=stack.packages,
                   requirements=tuple(spec for spec in stack.requirements if spec not in base))
    missing = wheelhouse_problems(wanted, folders) if folders else []
    if missing:
        where = ", ".join(str(f) for f in folders)
        raise ValueError(f"the wheelhouse {where} does not hold the pinned {'; '.join(missing)} "
                         f"(images/pins.toml); refill it on a connected machine with `nox -s "
                         f"wheelhouse -- {TARGET} --dest DIR`")
    log(f"provisioning the training venv {venv} from {base_python} (it sees that Python's "
        f"torch; pins: {' '.join(stack.pins)})")
    if base:
        log("kept from the base Python (its packages may need these versions): " + ", ".join(
            f"{_name(spec)} {version} (pin {spec.partition('==')[2]})" for spec, version in base.items()))
    stamp.unlink(missing_ok=True)  # a half-made venv must not pass for a finished one
    made = subprocess.run([base_python, "-m", "venv", "--clear", "--system-site-packages", str(venv)],
                          check=False)
    if made.returncode != 0:
        raise ValueError(f"{base_python} could not make the venv {venv} (see above); on Debian or "
                         "Ubuntu install its venv module: `apt install python3-venv` (or "
                         "python3.X-venv for that Python's version)")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *index]
    steps = [(list(wanted.requirements), []), (list(stack.packages), ["--no-deps"])]
    for specs, extra in steps:
        if not specs:
            continue
        log(f"pip install {' '.join(extra + specs)}")
        done = subprocess.run([*pip, *extra, *specs], env=env, check=False)
        if done.returncode != 0:
            raise ValueError(f"pip could not install {' '.join(specs)} into {venv} (see pip's "
                             "output above: no network? give --wheelhouse DIR; a package that "
                             "needs a newer Python? megatron-core 0.19 needs 3.12: start nox from "
                             "that Python)")
    _see_outer_venv(base_python, python)
    _link_torchrun(venv)
    stamp.write_text(key + "\n")
    log(f"training venv ready: {python}")
    return str(python)


def _see_outer_venv(base_python: str, python: Path) -> None:
    """``--system-site-packages`` of a venv made from a venv's Python is the *base* install's, so
    torch installed in that venv would be invisible: list its site-packages in a .pth file (after
    the new venv's own, so the pins still win)."""
    code = ("import json, site, sys\n"
            "print(json.dumps([sys.prefix != sys.base_prefix, site.getsitepackages()]))")
    inner, outer = (json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True,
                                              check=True).stdout) for py in (str(python), base_python))
    if outer[0]:
        Path(inner[1][0], "bench-outer-venv.pth").write_text("\n".join(outer[1]) + "\n")


def _link_torchrun(venv: Path) -> None:
    """torchrun in the venv's bin: the system's own starts the system Python, which lacks the
    venv's megatron-core (torch's entry points belong to where torch was installed)."""
    script = venv / "bin" / "torchrun"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n"
                      "from torch.distributed.run import main\nsys.exit(main())\n")
    script.chmod(0o755)


def _versions(python: str, names: Sequence[str]) -> list[str | None] | None:
    """The installed version of each of ``names`` in ``python`` (metadata only, no torch import,
    ~0.1 s), None for one it lacks; None altogether when that Python does not run."""
    code = ("import importlib.metadata as m, json, sys\n"
            "def v(n):\n try: return m.version(n)\n except m.PackageNotFoundError: return None\n"
            f"print(json.dumps([v(n) for n in {list(names)!r}]))")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                              check=False)
    except OSError:
        return None
    return json.loads(done.stdout) if done.returncode == 0 else None


def _name(spec: str) -> str:
    return spec.partition("==")[0]


def has_stack(python: str, stack: Stack) -> bool:
    """Whether ``python`` can train as it is: the packages at their pins, every requirement
    present (at its own version: see :func:`ensure_venv`)."""
    have = _versions(python, [_name(spec) for spec in stack.pins])
    if have is None:
        return False
    found = dict(zip(stack.pins, have, strict=True))
    return (all(f"{_name(spec)}=={found[spec]}" == spec for spec in stack.packages)
            and all(found[spec] for spec in stack.requirements))


@dataclass(frozen=True)
class Choice:
    """Which Python a session trains with, and the arguments left for the kit."""

    python: str
    path_prefix: str  # put first on PATH (the venv's bin: its torchrun), "" for none
    args: tuple[str, ...]


def _take(args: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` or ``flag=VALUE`` from the kit's part of ``args`` (before '--')."""
    end = args.index("--") if "--" in args else len(args)
    for i, arg in enumerate(args[:end]):
        if arg == flag and i + 1 < end:
            value = args[i + 1]
            del args[i:i + 2]
            return value
        if arg.startswith(flag + "="):
            del args[i]
            return arg.split("=", 1)[1]
    return None


def _runs_here(args: list[str], env: dict[str, str], session: str) -> bool:
    """Training on this machine's GPUs in its own Python: GPUs present and, for a run, a local
    platform, no image and not a dry run (a cluster's job and ``--image`` on a docker platform
    train in the image; nothing to train on, nothing to install)."""
    from bench.config.platforms import load_platform
    from bench.running.gpus import detect_gpus

    if session == "bench":
        kit = args[:args.index("--")] if "--" in args else args
        if "--dry-run" in kit:
            return False
        platform = _take(list(kit), "--platform") or env.get("BENCH_PLATFORM", "local")
        try:
            loaded = load_platform(platform)
            if loaded.scheduler != "none" or (
                    loaded.container_runtime == "docker" and _take(list(kit), "--image")):
                return False
        except ValueError:
            return False  # the kit itself says what is wrong with the name
    return detect_gpus().count > 0


def choose(posargs: Sequence[str], current_python: str, log: Log = print,
           env: dict[str, str] | None = None, stack: Stack | None = None,
           venv: Path | None = None, session: str = "bench") -> Choice:
    """The Python for ``nox -s bench``/``smoke``: the current one (``--env current``, a cluster or
    dry run, or it has the pins), else the provisioned venv (``--env venv`` forces it)."""
    env = dict(os.environ if env is None else env)
    args = list(posargs)
    mode = _take(args, "--env") or "auto"
    wheelhouse = _take(args, "--wheelhouse")
    builds = _take(args, "--builds")
    if mode not in ENVS:
        raise ValueError(f"--env {mode} is not one of {', '.join(ENVS)} (current: the Python you "
                         "are in; venv: the kit's provisioned venv; auto: venv when the current "
                         "Python lacks the pins)")
    stack = stack or training_stack()
    here = mode == "venv" or (mode == "auto" and _runs_here(args, env, session))
    if mode == "current" or not here or (mode == "auto" and has_stack(current_python, stack)):
        for flag, value in (("--wheelhouse", wheelhouse), ("--builds", builds)):
            if value is not None:
                log(f"{flag} {value} unused: this run uses the current Python")
        return Choice(current_python, "", tuple(args))
    check_python(current_python, stack, "it makes the training venv, which trains with its torch",
                 "start nox from a Python 3.12 with the machine's CUDA torch", env)
    python = ensure_venv(current_python, stack, venv or venv_for(current_python),
                         Path(wheelhouse) if wheelhouse else None, log, env)
    with_builds(python, builds, wheelhouse, log)
    return Choice(python, str(Path(python).parent), tuple(args))


def with_builds(python: str, builds: str | None, wheelhouse: str | None, log: Log,
                arch: str | None = None, jobs: int | None = None,
                mds_dir: str = "/opt/Megatron-DeepSpeed") -> None:
    """Make (or reuse) ``builds`` (comma-separated, :data:`bench.running.airgap.BUILDS`) from the
    wheelhouse and put them on the venv's path; none given: the venv's path has none of them."""
    from bench.running.builds import provide, put_on_path

    names = [name for name in (builds or "").split(",") if name]
    if names and wheelhouse is None:
        raise ValueError(f"--builds {builds} needs --wheelhouse DIR, filled by `nox -s wheelhouse "
                         f"-- {TARGET} --dest DIR`")
    cache = cache_dir() / "builds"
    sites = provide(names, Path(wheelhouse), python, cache, arch, jobs or os.cpu_count() or 8,
                    Path(mds_dir), log) if names else []
    put_on_path(python, sites)


def wheel_python(stack: Stack, given: str | None, env: dict[str, str], log: Log = print) -> str:
    """The Python whose pip downloads ``stack``: ``given``, else this one where the stack installs
    into it, else a Python 3.12 found here; refused before any pip when it is older."""
    python = given
    if python is None:
        older = stack.python is not None and sys.version_info[:2] < stack.python
        python = (find_python312(env) if older else None) or sys.executable
        if python != sys.executable:
            log(f"downloading for Python 3.12 with {python} (this one is "
                f"{_dotted(sys.version_info[:2])})")
    check_python(python, stack, "its pip downloads the wheels", "give --python PYTHON3.12 (the GPU "
                 "machine's version)", env)
    return python


def download(target: str, dest: Path, python: str | None = None, pins: Pins | None = None,
             log: Log = print) -> None:
    """Fill ``dest`` with wheels of the target's training stack for the GPU machine's Python
    version and CPU (:func:`wheel_python` picks the Python whose pip downloads)."""
    stack = training_stack(pins, target)
    python = wheel_python(stack, python, dict(os.environ), log)
    dest.mkdir(parents=True, exist_ok=True)
    pip = [python, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(dest)]
    subprocess.run([*pip, *stack.requirements], check=True)
    subprocess.run([*pip, "--no-deps", *stack.packages], check=True)


def _parser() -> argparse.ArgumentParser:
    from bench.running.airgap import BUILDS, PARTS

    parser = argparse.ArgumentParser(prog="python -m bench.running.provision", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wheels = sub.add_parser("wheelhouse", help="gather what an offline GPU machine needs (connected "
                            "machine, same Python version and CPU as the GPU machine)")
    wheels.add_argument("target", help="image target of images/pins.toml, e.g. cuda")
    wheels.add_argument("--dest", type=Path, default=Path("wheelhouse"),
                        help="folder to fill (default: ./wheelhouse)")
    wheels.add_argument("--python", default=None,
                        help="a Python of the GPU machine's version whose pip downloads (default: "
                        f"this one if it is 3.12 or newer, else a 3.12 found: {WHERE})")
    wheels.add_argument("--upstream", action="append", default=[], metavar="NAME=PATH",
                        help="source archive (.tar.gz) of apex, megatron-deepspeed or ms-amp (the "
                        "pinned ones are fetched at their commit where not given; apex only where given)")
    wheels.add_argument("--without", action="append", default=[], choices=PARTS,
                        help="leave a part out (te: Transformer Engine's 276 MB of wheels)")
    setup = sub.add_parser("setup", help="on the GPU machine: the training venv and the builds asked "
                           "for, from a wheelhouse; prints the venv's Python")
    setup.add_argument("--wheelhouse", type=Path, required=True, help="the folder `wheelhouse` filled")
    setup.add_argument("--builds", default="", help=f"comma-separated, of {', '.join(BUILDS)} "
                       "(default: none; each cached with a stamp of its inputs)")
    setup.add_argument("--arch", default=None, help="CUDA architecture of the builds, e.g. 9.0 "
                       "(default: the first GPU's, as torch reads it)")
    setup.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: the CPUs)")
    setup.add_argument("--megatron-deepspeed-dir", default="/opt/Megatron-DeepSpeed",
                       help="where the mds build puts Megatron-DeepSpeed (default: the local "
                       "platform's megatron_deepspeed_dir, /opt/Megatron-DeepSpeed)")
    return parser


def _setup(args: argparse.Namespace) -> str:
    stack = training_stack()
    check_python(sys.executable, stack, "it makes the training venv, which trains with its torch",
                 "run this with a Python 3.12 that has the machine's CUDA torch", dict(os.environ))
    python = ensure_venv(sys.executable, stack, venv_for(sys.executable), args.wheelhouse)
    with_builds(python, args.builds, str(args.wheelhouse), print, args.arch, args.jobs,
                args.megatron_deepspeed_dir)
    return python


def main(argv: list[str] | None = None) -> int:
    from bench.running.airgap import PARTS, gather

    args = _parser().parse_args(argv)
    try:
        if args.command == "setup":
            python = _setup(args)
            print(f"ready: {python}; train with it first on PATH: PATH={Path(python).parent}:$PATH "
                  "python -m bench run ...")
            return 0
        upstreams = dict(pair.split("=", 1) for pair in args.upstream if "=" in pair)
        if len(upstreams) != len(args.upstream):
            raise ValueError("--upstream takes NAME=PATH, e.g. --upstream apex=apex-<commit>.tar.gz")
        parts = [part for part in PARTS if part not in args.without]
        stack = training_stack(target=args.target)
        python = wheel_python(stack, args.python, dict(os.environ)) if "stack" in parts else sys.executable
        gather(args.target, args.dest, python, {k: Path(v) for k, v in upstreams.items()}, parts,
               fetch_stack=lambda: download(args.target, args.dest, python), stack=stack.packages)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"error: {exc.cmd[0]} failed (exit {exc.returncode}; see above)", file=sys.stderr)
        return 1
    print(f"carry {args.dest} to the GPU machine: python -m bench.running.provision setup "
          f"--wheelhouse {args.dest} --builds te (or nox -s bench -- ... --wheelhouse {args.dest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
