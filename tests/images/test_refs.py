"""Through the command line and a real dockerd: an unreachable base or registry gets a hint with the
options that get around it; a push names the --image the cluster's job scripts take."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from bench.cli import main

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
UNREACHABLE = "registry.invalid"  # .invalid never resolves (RFC 2606)


@pytest.fixture
def on_runtime(runtime, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", runtime.docker_host)
    return runtime


def _tiny_image(runtime, repository: str, tag: str) -> None:
    """A real one-file image, imported without a base or network."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    runtime.api.import_image_from_data(data.getvalue(), repository=repository, tag=tag)


def test_unreachable_base_names_base_and_ca_cert(on_runtime, capfd):
    status = main(["images", "build", "cuda", "--base", f"{UNREACHABLE}/nvidia/pytorch:25.03-py3",
                   "--ca-cert", str(HOST_CA), "--network", "host"])
    err = capfd.readouterr().err
    assert status == 1, err
    assert f"hint: the base image {UNREACHABLE}/nvidia/pytorch:25.03-py3 could not be fetched" in err
    assert "--base IMAGE" in err and "--ca-cert PATH" in err


def test_unreachable_registry_on_pull_names_registry_option(on_runtime, capfd):
    assert main(["images", "pull", "cuda", "--registry", f"{UNREACHABLE}/owner"]) == 1
    err = capfd.readouterr().err
    assert f"hint: {UNREACHABLE} cannot be reached from here" in err and "--registry" in err


def test_push_names_the_image_for_job_scripts_and_pull_gets_it_back(on_runtime, registry, capfd):
    """Laptop to cluster: build (here: an image under the build's tag), push, the printed --image."""
    args = ["cuda", "--ca-cert", str(HOST_CA)]
    assert main(["images", "build", *args, "--base", f"{UNREACHABLE}/x:1"]) == 1  # only for the tag
    out = capfd.readouterr().out
    tag = next(line.split()[1] for line in out.splitlines() if line.startswith("building "))
    repository, _, version = tag.rpartition(":")
    _tiny_image(on_runtime, repository, version)
    assert main(["images", "push", *args, "--base", f"{UNREACHABLE}/x:1", "--registry",
                 f"{registry}/team"]) == 0
    out = capfd.readouterr().out
    assert f"pushed {registry}/team/{tag}" in out
    assert f"job scripts: --image {registry}#team/{tag} (pyxis" in out
    on_runtime.images.remove(f"{registry}/team/{tag}")
    assert main(["images", "pull", "cuda", "--registry", f"{registry}/team", "--tag", version]) == 0
    assert f"job scripts: --image {registry}#team/{tag}" in capfd.readouterr().out
