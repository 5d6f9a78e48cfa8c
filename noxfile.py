"""The kit's front door: thin nox sessions over ``python -m bench`` (logic lives in bench/)."""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

RUN_USAGE = "Usage: nox -s bench -- <preset> <layout> [--platform NAME] [--dry-run] [options]"


REPO = os.path.dirname(os.path.abspath(__file__))
# Training runs in the Python that has torch and megatron-core (an image, a venv, a GPU box), so
# the GPU sessions use the current environment; the kit itself needs nothing beyond Python 3.11.
IN_PLACE = {"PYTHONPATH": REPO}


@nox.session(venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Plan a GPT-3 throughput benchmark and print, submit or run it."""
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error(RUN_USAGE)
    session.run("python", "-m", "bench", "run", *session.posargs, env=IN_PLACE)


@nox.session(venv_backend="none", default=False)
def smoke(session: nox.Session) -> None:
    """GPU node check: NCCL all-reduce, bf16 GEMM ceiling, a 2-layer GPT trained 10 iterations."""
    session.run("python", "-m", "bench.smoke", *session.posargs, env=IN_PLACE)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (real engines, Slurm and Megatron's parser where CI provides them)."""
    session.install("-e", ".[test,images,results]")
    megatron_python = os.environ.get("BENCH_MEGATRON_PYTHON") or _megatron_venv(session)
    session.run("pytest", *session.posargs, env={"BENCH_MEGATRON_PYTHON": megatron_python})


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks with ruff."""
    session.install("ruff")
    session.run("ruff", "check", "bench", "tests", "noxfile.py")


def _megatron_venv(session: nox.Session) -> str:
    """A Python 3.12 venv with torch + the pinned megatron-core, for checks against Megatron itself.

    megatron-core >= 0.17 needs Python >= 3.12; the host's default Python may be older. It lives
    outside the checkout (and is reused): inside a git work tree megatron-core appends that tree's
    commit to its own version string.
    """
    venv = os.path.expanduser("~/.cache/megatron-bench/venv-py312-megatron")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        session.run("python3.12", "-m", "venv", venv, external=True)
    session.run(python, "-m", "pip", "install", "-q", "-r", "tests/megatron-requirements.txt",
                external=True)
    return python


@nox.session
def results(session: nox.Session) -> None:
    """Regenerate results/README.md and plots from results/records (-- --check: ranges only)."""
    session.install("-e", ".[results]")
    session.run("python", "-m", "bench", "results", *session.posargs)


IMAGE_OPTIONS = "[--base IMAGE] [--ca-cert PATH] [--upstream NAME=PATH] [--option msamp=1] [--force]"


@nox.session(name="build-cuda", default=False)
def build_cuda(session: nox.Session) -> None:
    """Build the NVIDIA image: NGC PyTorch + pinned Megatron + patches + the kit."""
    session.install("-e", ".[images]")
    session.run("python", "-m", "bench", "images", "build", "cuda", *session.posargs)


@nox.session(name="build-rocm", default=False)
def build_rocm(session: nox.Session) -> None:
    """Build the LUMI image and its Singularity definition (and .sif where Apptainer exists)."""
    session.install("-e", ".[images]")
    session.run("python", "-m", "bench", "images", "build", "rocm", *session.posargs)


@nox.session(name="build-polaris", default=False)
def build_polaris(session: nox.Session) -> None:
    """Render the Polaris conda + venv recipe; run it where `module` exists (Polaris)."""
    session.install("-e", ".")
    session.run("python", "-m", "bench", "images", "polaris", *session.posargs)


@nox.session(default=False)
def pull(session: nox.Session) -> None:
    """Pull a prebuilt image: docker pull, enroot import or singularity pull."""
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error("Usage: nox -s pull -- <cuda|rocm> [--runtime docker|enroot|singularity] "
                      "[--tag TAG]")
    session.install("-e", ".[images]")
    session.run("python", "-m", "bench", "images", "pull", *session.posargs)


@nox.session(default=False)
def patches(session: nox.Session) -> None:
    """Check that every patch series applies cleanly to its pinned upstream."""
    session.install("-e", ".")
    session.run("python", "-m", "bench", "images", "patches", *session.posargs)


@nox.session(default=False)
def jobs(session: nox.Session) -> None:
    """List the kit's runs on this cluster: run id, job id, state, elapsed time, result."""
    session.install("-e", ".")
    session.run("python", "-m", "bench", "jobs", *session.posargs)


@nox.session(default=False)
def collect(session: nox.Session) -> None:
    """Write a record for every finished run (skips runs already recorded)."""
    session.install("-e", ".")
    session.run("python", "-m", "bench", "collect", *session.posargs)


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """B against A (run ids or selectors) in TFLOP/s/GPU and memory, with the noise band."""
    session.install("-e", ".")
    session.run("python", "-m", "bench", "compare", *session.posargs)


@nox.session(default=False)
def check(session: nox.Session) -> None:
    """System check job: every rank reports host, devices, container, versions, NCCL variables."""
    if "--platform" not in " ".join(session.posargs):
        session.error("Usage: nox -s check -- --platform NAME [--nodes N] [--dry-run]")
    session.install("-e", ".")
    session.run("python", "-m", "bench", "check", *session.posargs)
