"""The kit's front door: thin nox sessions over ``python -m bench`` (logic lives in bench/)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

RUN_USAGE = ("Usage: nox -s bench -- <preset> <layout> [--platform NAME] [--dry-run] "
             "[--env auto|current|venv] [--wheelhouse DIR [--builds te,apex,...]] [options]")


REPO = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, REPO)  # nox imports this file from anywhere; tests.testenv needs only the stdlib
from bench.images.runtime_check import missing_runtime, runtime_of  # noqa: E402
from bench.running import provision  # noqa: E402
from tests.testenv import megatron_env  # noqa: E402

# The kit itself needs Python 3.11 and pydantic, so the sessions that need only the kit run in
# the current Python; the GPU sessions train in it too when it has the pins (an image, a cluster's
# venv), else in the venv bench.running.provision keeps (see train()).
IN_PLACE = {"PYTHONPATH": REPO}


def train(session: nox.Session, name: str, *command: str) -> None:
    """Run ``python <command> <posargs>`` in the Python that trains (--env, --wheelhouse: there)."""
    current = shutil.which("python") or shutil.which("python3") or sys.executable
    try:
        chosen = provision.choose(session.posargs, current, log=session.log, session=name)
    except (ValueError, subprocess.CalledProcessError) as exc:
        session.error(str(exc))
    env = dict(IN_PLACE)
    if chosen.path_prefix:  # the venv's torchrun, started by the kit, starts the venv's Python
        env["PATH"] = os.pathsep.join([chosen.path_prefix, os.environ.get("PATH", "")])
    session.run(chosen.python, *command, *chosen.args, env=env, external=True)


def need_runtime(session: nox.Session, runtime: str = "docker") -> None:
    """End the session at once when the container runtime is missing, before a venv is filled."""
    problem = missing_runtime(runtime)
    if problem:
        session.error(problem)


def install(session: nox.Session, *specs: str) -> None:
    """pip only when the session's venv is new or pyproject.toml changed: the kit is installed
    editable, so its own sources never need a reinstall and a repeated session starts at once."""
    pyproject = hashlib.sha256(Path(REPO, "pyproject.toml").read_bytes()).hexdigest()
    stamp = Path(session.virtualenv.location, ".bench-installed")
    wanted = f"{' '.join(specs)} {pyproject}\n"
    if stamp.exists() and stamp.read_text() == wanted:
        return
    session.install(*specs)
    stamp.write_text(wanted)


def asks_help(session: nox.Session) -> bool:
    """Whether the session's own arguments (before a '--') ask for the command's help."""
    own = session.posargs[:session.posargs.index("--")] if "--" in session.posargs else session.posargs
    return bool({"-h", "--help"} & set(own))


@nox.session(venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Plan a GPT-3 throughput benchmark and print, submit or run it."""
    if asks_help(session):  # run's help needs only the kit, not the training Python
        session.run("python", "-m", "bench", "run", "--help", env=IN_PLACE)
        return
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error(RUN_USAGE)
    train(session, "bench", "-m", "bench", "run")


@nox.session(venv_backend="none", default=False)
def smoke(session: nox.Session) -> None:
    """GPU node check: NCCL all-reduce, bf16 GEMM ceiling, a 2-layer GPT trained 10 iterations."""
    train(session, "smoke", "-m", "bench.train.smoke")


@nox.session(venv_backend="none", default=False)
def wheelhouse(session: nox.Session) -> None:
    """Gather what an offline GPU machine needs: wheels, sources, manifest (nox -s bench --wheelhouse)."""
    if not asks_help(session) and (not session.posargs or session.posargs[0].startswith("-")):
        session.error("Usage: nox -s wheelhouse -- cuda [--dest DIR] [--python PYTHON3.12] "
                      "[--upstream NAME=PATH]... [--without PART]")
    session.run("python", "-m", "bench.running.provision", "wheelhouse", *session.posargs, env=IN_PLACE)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (real engines, Slurm and Megatron's parser where the machine has them)."""
    install(session, "-e", ".[test,images,results,data]")
    try:  # a Python 3.12 venv with megatron-core, or the reason the Megatron checks will skip
        env = megatron_env(log=session.log)
    except (ValueError, subprocess.CalledProcessError) as exc:
        session.error(str(exc))
    session.run("pytest", *session.posargs, env=env)


@nox.session(default=False)
def data(session: nox.Session) -> None:
    """Tokenize text (jsonl or .txt) into Megatron's .bin/.idx with GPT-2's BPE (--data-path)."""
    if not asks_help(session) and (not session.posargs or session.posargs[0].startswith("-")):
        session.error("Usage: nox -s data -- INPUT... --vocab-file VOCAB --merge-file MERGES "
                      "[--out-dir data]")
    install(session, "-e", ".[data]")
    session.run("python", "-m", "bench", "data", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks with ruff (the reports' scripts included)."""
    if asks_help(session):  # says what it checks; neither installs nor runs ruff
        session.log("nox -s lint: ruff check bench tests noxfile.py docs/reports (rules in "
                    "pyproject.toml); takes no arguments")
        return
    install(session, "ruff")
    session.run("ruff", "check", "bench", "tests", "noxfile.py", "docs/reports")


@nox.session
def results(session: nox.Session) -> None:
    """Regenerate results/README.md and plots from results/records (-- --check: ranges only)."""
    install(session, "-e", ".[results]")
    session.run("python", "-m", "bench", "results", *session.posargs)


def images_help(session: nox.Session, command: str) -> bool:
    """Show ``bench images <command> --help`` when asked, and say so: the help needs only the kit
    (the images extra is imported when an image is made), so it runs in nox's own Python without
    filling the session's venv (pip there took 14-18 s on a first call)."""
    if not asks_help(session):
        return False
    session.run(sys.executable, "-m", "bench", "images", command, "--help", env=IN_PLACE, external=True)
    return True


IMAGE_OPTIONS = "[--base IMAGE] [--ca-cert PATH] [--upstream NAME=PATH] [--option msamp=1] [--force]"


@nox.session(name="build-cuda", default=False)
def build_cuda(session: nox.Session) -> None:
    """Build the NVIDIA image: NGC PyTorch + pinned Megatron + patches + the kit."""
    if images_help(session, "build"):
        return
    need_runtime(session)
    install(session, "-e", ".[images]")
    session.run("python", "-m", "bench", "images", "build", "cuda", *session.posargs)


@nox.session(name="build-rocm", default=False)
def build_rocm(session: nox.Session) -> None:
    """Build the LUMI image and its Singularity definition (and .sif where Apptainer exists)."""
    if images_help(session, "build"):
        return
    need_runtime(session)
    install(session, "-e", ".[images]")
    session.run("python", "-m", "bench", "images", "build", "rocm", *session.posargs)


@nox.session(name="build-polaris", venv_backend="none", default=False)
def build_polaris(session: nox.Session) -> None:
    """Render the Polaris conda + venv recipe; run it where `module` exists (Polaris)."""
    session.run("python", "-m", "bench", "images", "polaris", *session.posargs, env=IN_PLACE)


@nox.session(default=False)
def pull(session: nox.Session) -> None:
    """Pull a prebuilt image: docker pull, enroot import or singularity pull."""
    if images_help(session, "pull"):
        return
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error("Usage: nox -s pull -- <cuda|rocm> [--runtime docker|enroot|singularity] "
                      "[--tag TAG]")
    need_runtime(session, runtime_of(session.posargs))
    install(session, "-e", ".[images]")
    session.run("python", "-m", "bench", "images", "pull", *session.posargs)


@nox.session(default=False)
def push(session: nox.Session) -> None:
    """Push the image of the current inputs to a registry a cluster can pull from."""
    if images_help(session, "push"):
        return
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error(f"Usage: nox -s push -- <cuda|rocm> --registry HOST/OWNER {IMAGE_OPTIONS}")
    need_runtime(session)
    install(session, "-e", ".[images]")
    session.run("python", "-m", "bench", "images", "push", *session.posargs)


@nox.session(venv_backend="none", default=False)
def patches(session: nox.Session) -> None:
    """Check that every patch series applies cleanly to its pinned upstream."""
    session.run("python", "-m", "bench", "images", "patches", *session.posargs, env=IN_PLACE)


@nox.session(venv_backend="none", default=False)
def jobs(session: nox.Session) -> None:
    """List the kit's runs on this cluster: run id, job id, state, elapsed time, result."""
    session.run("python", "-m", "bench", "jobs", *session.posargs, env=IN_PLACE)


@nox.session(venv_backend="none", default=False)
def collect(session: nox.Session) -> None:
    """Write a record for every finished run (skips runs already recorded)."""
    session.run("python", "-m", "bench", "collect", *session.posargs, env=IN_PLACE)


@nox.session(venv_backend="none", default=False)
def compare(session: nox.Session) -> None:
    """B against A (run ids or selectors) in TFLOP/s/GPU and memory, with the noise band."""
    session.run("python", "-m", "bench", "compare", *session.posargs, env=IN_PLACE)


@nox.session(venv_backend="none", default=False)
def check(session: nox.Session) -> None:
    """System check job: every rank reports host, devices, container, versions, NCCL variables."""
    if not asks_help(session) and "--platform" not in " ".join(session.posargs):
        session.error("Usage: nox -s check -- --platform NAME [--nodes N] [--dry-run]")
    session.run("python", "-m", "bench", "check", *session.posargs, env=IN_PLACE)
