"""What pull and build make is what the job scripts use: one image reference per target, the
platform files' defaults in the runtime's own form; a pull that pulled nothing fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from bench.config.paths import PLATFORMS_DIR
from bench.config.platforms import load_platform_file
from bench.images import refs
from bench.images.pins import load_pins


@pytest.fixture(autouse=True)
def kit_platforms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_PLATFORMS_DIR", raising=False)


def test_platform_defaults_are_what_pull_makes() -> None:
    pins = load_pins()
    release = refs.pyxis_reference(refs.registry_reference(pins.target("cuda")))
    assert release == "ghcr.io#megatron-bench-kit/cuda:latest"
    sif = refs.image_file(pins.target("rocm"), "singularity")
    by_runtime = {"pyxis": release, "singularity": sif}
    checked = 0
    for path in sorted(PLATFORMS_DIR.glob("*.toml")):
        platform = load_platform_file(path)
        if platform.container_runtime in by_runtime:
            assert platform.image == by_runtime[platform.container_runtime], path.name
            checked += 1
    assert checked >= 3  # azure-h100, azure-h200, lumi
    assert refs.platforms_using(sif) == ["lumi"]
    # The squashed image the Azure platforms start from is the file `pull --runtime enroot` writes.
    sqsh = refs.image_file(pins.target("cuda"), "enroot")
    for name in ("azure-h100", "azure-h200"):
        squashed = load_platform_file(PLATFORMS_DIR / f"{name}.toml").storage.squashed_image
        assert squashed.rpartition("/")[2] == sqsh == "megatron-bench-cuda.sqsh", name
    assert refs.image_file(pins.target("cuda"), "enroot", "0.1.0") == "megatron-bench-cuda_0.1.0.sqsh"


def test_a_digest_in_place_of_the_tag_pins_the_image() -> None:
    cuda = load_pins().target("cuda")
    digest = "sha256:" + "0" * 64
    assert (refs.registry_reference(cuda, "registry.example/team", digest)
            == f"registry.example/team/{cuda.image}@{digest}")
    assert refs.image_file(cuda, "enroot", digest) == f"megatron-bench-cuda_sha256-{'0' * 64}.sqsh"


@pytest.mark.parametrize("runtime", ["enroot", "singularity"])
def test_pull_without_the_runtime_fails(runtime: str, tmp_path: Path, monkeypatch, capfd) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither enroot nor singularity here
    monkeypatch.chdir(tmp_path)
    assert main(["images", "pull", "rocm", "--runtime", runtime]) == 1
    out, err = capfd.readouterr()
    assert "docker://ghcr.io" in out  # the command to run where the tool exists
    assert f"error: nothing was pulled: {runtime} is not installed here" in err


def test_pull_that_writes_no_file_fails(tmp_path: Path, monkeypatch, capfd) -> None:
    """A runtime that exits 0 without the image file (a stand-in for a misbehaving tool)."""
    tool = tmp_path / "bin" / "singularity"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert main(["images", "pull", "rocm", "--runtime", "singularity"]) == 1
    assert "megatron-bench-rocm.sif is not there: nothing was pulled" in capfd.readouterr().err


def test_pull_that_worked_names_the_image_for_jobs(tmp_path: Path, monkeypatch, capfd) -> None:
    tool = tmp_path / "bin" / "singularity"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\n[ "$1" = pull ] && echo image > "$2"\n')  # singularity pull OUT REF
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert main(["images", "pull", "rocm", "--runtime", "singularity"]) == 0
    out = capfd.readouterr().out
    assert f"job scripts: the default image of lumi, for jobs submitted from {tmp_path}" in out
    assert main(["images", "pull", "rocm", "--runtime", "singularity", "--tag", "0.1.0"]) == 0
    assert f"job scripts: --image {tmp_path / 'megatron-bench-rocm_0.1.0.sif'}" in capfd.readouterr().out


@pytest.mark.parametrize("runtime", ["enroot", "singularity"])
def test_pull_that_finds_nothing_says_so_in_one_line(runtime: str, tmp_path: Path, monkeypatch,
                                                    capfd) -> None:
    """The registry has no such image (no release yet): the tool fails, the kit says what to do."""
    tool = tmp_path / "bin" / runtime
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 'manifest unknown' >&2\nexit 1\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert main(["images", "pull", "cuda", "--runtime", runtime]) == 1
    err = capfd.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("error:")]
    assert ours == ["error: ghcr.io/megatron-bench-kit/cuda:latest was not found: no release of it "
                    "is published there (releases are made by v* tags, docs/images.md#releases); "
                    "build it with `nox -s build-cuda` and push it with `nox -s push -- cuda "
                    "--registry HOST/OWNER`, then pull with --registry"]
    assert "Traceback" not in err


def test_docker_pull_that_finds_nothing_says_so_in_one_line(monkeypatch, capfd) -> None:
    from bench.images import container_runtime

    def missing(reference: str) -> str:
        raise container_runtime.ContainerRuntimeError(f"pull of {reference} failed: manifest unknown")

    monkeypatch.setattr(container_runtime, "pull", missing)
    assert main(["images", "pull", "rocm"]) == 1
    err = capfd.readouterr().err
    assert err.startswith("error: ghcr.io/megatron-bench-kit/rocm:latest was not found: no release")
    assert len(err.splitlines()) == 1
