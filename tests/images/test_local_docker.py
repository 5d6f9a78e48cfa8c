"""``--image`` on the local platform through a real dockerd: the kit's own docker path, for real.

The image is a stand-in (the Debian trixie base of tests/images/conftest.py plus ``python`` and a
``torchrun`` that prints a real training log, since it has no torch). This machine has no NVIDIA
runtime, so the runs here drop ``--gpus all`` (``bench.render.docker.GPUS``), and where root may
not lift the locked-memory limit (this machine is itself a container) NGC's ``--ulimit
memlock=-1``; nothing else:
the kit starts the container, the container sees the mounted working folder and the plan's
environment, the runner reads its output, and the record carries the digest the runtime reports
for the image it started. Where the command line keeps ``--gpus all``, the runtime's own refusal
is what the user is told. Not exercised: GPU access inside a container.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.images import container_runtime as runtime_api
from bench.measure.status import Status
from bench.planning.plan import plan
from bench.records.store import load_records
from bench.render import docker
from bench.running import docker as dockerrun
from bench.running import local as runner
from bench.running.trainenv import problems
from tests.conftest import options
from tests.inprocess import run_cli
from tests.running.test_reliability import OK_LOG, REPO, refused

STANDIN = "megatron-bench-kit/local-standin:1"
# Stands in for torchrun: what the container sees, then a captured log of a real 1.3b run.
TORCHRUN = """#!/bin/sh
echo "standin torchrun in $(pwd): $*"
echo "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-unset} PYTHONUNBUFFERED=${PYTHONUNBUFFERED:-unset}"
ls runs
cat /standin/train.log
"""


@pytest.fixture(scope="module")
def standin(runtime, standin_base, tmp_path_factory) -> str:
    context = tmp_path_factory.mktemp("local-standin")
    (context / "torchrun").write_text(TORCHRUN)
    (context / "train.log").write_bytes(OK_LOG.read_bytes())
    (context / "Dockerfile").write_text(
        f"FROM {standin_base}\n"
        "RUN ln -s /usr/bin/python3 /usr/local/bin/python\n"
        "COPY torchrun /usr/local/bin/torchrun\n"
        "RUN chmod 755 /usr/local/bin/torchrun\n"
        "COPY train.log /standin/train.log\n")
    for chunk in runtime.api.build(path=str(context), tag=STANDIN, decode=True, rm=True):
        assert "error" not in chunk, chunk
    return STANDIN


@pytest.fixture()
def kit_docker(runtime, monkeypatch: pytest.MonkeyPatch):
    """The kit's docker client talks to the test runtime."""
    monkeypatch.setenv("DOCKER_HOST", runtime.docker_host)


def _memlock_can_be_lifted() -> bool:
    """Whether this machine may lift the locked-memory limit (root without CAP_SYS_RESOURCE, as
    inside a container, may not: runc then fails with "error setting rlimit type 8")."""
    lift = "import resource as r; r.setrlimit(r.RLIMIT_MEMLOCK, (r.RLIM_INFINITY, r.RLIM_INFINITY))"
    return subprocess.run([sys.executable, "-c", lift], capture_output=True).returncode == 0


@pytest.fixture()
def no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """What this machine cannot give a container, taken out of the kit's docker run for these
    runs only: GPUs (no NVIDIA runtime), and NGC's unlimited locked memory where it cannot be
    lifted here."""
    monkeypatch.setattr(docker, "GPUS", ())
    if not _memlock_can_be_lifted():
        options = list(docker.NGC_OPTIONS)
        at = options.index("memlock=-1") - 1
        monkeypatch.setattr(docker, "NGC_OPTIONS", tuple(options[:at] + options[at + 2:]))


def _launch(image: str):
    return plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                options(image=image, gpus_present=1, gpu_name="NVIDIA H200", iters=15))


def test_preflight_asks_the_python_in_the_image(standin, kit_docker, no_gpus) -> None:
    dockerrun.check_runtime(standin)
    # The working folder is the checkout, as when the kit runs from it: the image imports it.
    found = dockerrun.probe(standin, str(REPO))
    assert found.image == standin and found.python == f"the python of image {standin}"
    assert found.python_version == "3.13"  # trixie's, not this machine's
    assert found.torchrun == "/usr/local/bin/torchrun" and found.torch is None
    assert problems(found, "megatron", 1) == [
        f"torch does not import in the python of image {standin} (No module named 'torch'); use "
        "the kit's CUDA image (`python -m bench images pull cuda`, or `python -m bench images "
        "build cuda`) as --image"]


def _run(launch, tmp_path: Path):
    record = runner.run_local(launch, tmp_path, tmp_path / "records", 120.0, 60.0)
    (on_disk,), skipped = load_records(tmp_path / "records")
    assert not skipped and on_disk == record
    return record


def test_a_run_in_the_image_goes_through_the_kits_runner(runtime, standin, kit_docker, no_gpus,
                                                          tmp_path: Path) -> None:
    launch = _launch(standin)
    record = _run(launch, tmp_path)
    assert record.status is Status.OK and record.metrics is not None, record.reason
    log = (tmp_path / "runs" / launch.run_id / "train.log").read_text()
    assert f"standin torchrun in {tmp_path}: --nnodes=1 --nproc-per-node=1 --standalone -m " \
           "bench.train.pretrain_gpt --num-layers 24" in log
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 PYTHONUNBUFFERED=1" in log  # the plan's environment, inside
    assert launch.run_id in log.splitlines()  # `ls runs`: the working folder is mounted
    image_id = runtime.images.get(standin).id
    assert record.provenance.image == standin
    assert (record.provenance.image_digest, record.provenance.image_digest_kind) == (
        image_id, "image-id")  # built here, never in a registry: the runtime's image ID
    assert record.provenance.torch is None  # the image's Python was asked: it has none
    assert not runtime.containers.list(all=True, filters={"name": f"bench-{launch.run_id}"})
    command = (tmp_path / "runs" / launch.run_id / "command.sh").read_text()
    assert f"docker run \\\n    --name bench-{launch.run_id} \\\n" in command


def test_an_image_from_a_registry_is_recorded_by_its_registry_digest(
        runtime, standin, registry, kit_docker, no_gpus, tmp_path: Path) -> None:
    (pushed,) = runtime_api.push(standin, registry, runtime=runtime, show=lambda _: None)
    reference = f"{pushed.reference.rsplit(':', 1)[0]}@{pushed.digest}"
    record = _run(_launch(reference), tmp_path)
    assert record.status is Status.OK, record.reason
    assert (record.provenance.image_digest, record.provenance.image_digest_kind) == (
        pushed.digest, "registry")
    assert record.provenance.image == reference


def test_what_docker_cannot_start_is_refused_before_anything_is_written(
        runtime, standin, tmp_path: Path, tmp_path_factory) -> None:
    """Through the command line, with --gpus all: the runtime's own answers, one line each."""
    host = {"DOCKER_HOST": runtime.docker_host}
    refused(run_cli("run", "1.3b", "tp1pp1", "--image", "megatron-bench-kit/absent:1",
                    cwd=tmp_path, env=host),
            "image megatron-bench-kit/absent:1 is not in this machine's docker", "docker pull",
            "python -m bench images pull cuda")
    # The runtime here has no NVIDIA Container Toolkit: --gpus all is refused by dockerd itself.
    refused(run_cli("run", "1.3b", "tp1pp1", "--image", standin, cwd=tmp_path, env=host),
            "docker cannot give the container GPUs (", "could not select device driver",
            "install the NVIDIA Container Toolkit and restart dockerd")
    gone = tmp_path_factory.mktemp("no-runtime") / "docker.sock"
    refused(run_cli("run", "1.3b", "tp1pp1", "--image", standin, cwd=tmp_path,
                    env={"DOCKER_HOST": f"unix://{gone}"}),
            "docker does not answer (", "start dockerd, or set DOCKER_HOST")
    assert not list(tmp_path.iterdir())


def test_the_dry_run_prints_the_docker_command(runtime, standin, tmp_path: Path) -> None:
    done = run_cli("run", "1.3b", "tp1pp1", "--image", standin, "--dry-run", cwd=tmp_path,
                   env={"DOCKER_HOST": runtime.docker_host})
    assert done.returncode == 0, done.stderr
    assert "\ndocker run \\\n    --name bench-1.3b_tp1pp1dp1_local_" in done.stdout
    assert "    --gpus all \\\n" in done.stdout
    assert f"    --volume {tmp_path}:{tmp_path} \\" in done.stdout
    assert f"--env PYTHONUNBUFFERED=1 {standin} torchrun \\" in done.stdout
    assert "note: the image's Python was not probed: docker cannot give the container GPUs" \
        in done.stderr
    assert not list(tmp_path.iterdir())
