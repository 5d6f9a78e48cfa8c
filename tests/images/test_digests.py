"""Digests and transfer progress through a real dockerd and a real registry (docker-registry).

A small image is built for real (``FROM scratch`` and a few MB of random bytes, so the layer has
something to move), pushed to the loopback registry and pulled back by digest; the digests are the
registry's own, read from the runtime's JSON stream and from the image's RepoDigests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.images import container_runtime as runtime_api
from bench.images.context import BuildContext
from bench.images.pins import load_pins


def _build_tiny(runtime, directory: Path, tag: str, dockerfile: str, buildargs=None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Dockerfile").write_text(dockerfile)
    (directory / "payload.bin").write_bytes(os.urandom(3_000_000))
    for chunk in runtime.api.build(path=str(directory), tag=tag, decode=True, rm=True,
                                  buildargs=buildargs or {}):
        assert "error" not in chunk, chunk


@pytest.fixture(scope="module")
def pushed(runtime, registry, tmp_path_factory):
    """A tiny image pushed as <registry>/megatron-bench-kit/tiny:1, with the progress lines."""
    _build_tiny(runtime, tmp_path_factory.mktemp("tiny"), "megatron-bench-kit/tiny:1",
                "FROM scratch\nCOPY payload.bin /payload.bin\n")
    lines: list[str] = []
    (result,) = runtime_api.push("megatron-bench-kit/tiny:1", registry, runtime=runtime,
                                show=lines.append)
    return result, lines


def test_push_reports_the_registry_digest_and_layer_progress(pushed, registry) -> None:
    result, lines = pushed
    assert result.reference == f"{registry}/megatron-bench-kit/tiny:1"
    assert runtime_api.DIGEST.fullmatch(result.digest or "")
    assert result.pinned == f"{result.reference}@{result.digest}"
    assert lines[0].startswith(f"pushing {result.reference}: ")
    assert lines[-1].startswith(f"pushing {result.reference}: 1/1 layers, 3.")
    assert lines[-1].endswith(f", digest {result.digest}")


@pytest.mark.parametrize("form", ["digest", "tag and digest"])
def test_pull_by_digest_gets_the_pushed_image(runtime, pushed, form: str) -> None:
    result, _ = pushed
    repository = result.reference.rsplit(":", 1)[0]
    reference = f"{repository}@{result.digest}" if form == "digest" else result.pinned
    image_id = runtime.images.get(result.reference).id
    runtime.images.remove(image_id, force=True)  # every tag of it: the pull must fetch it
    lines: list[str] = []
    assert runtime_api.pull(reference, runtime=runtime, show=lines.append) == image_id
    assert lines[-1].startswith(f"pulling {reference}: 1/1 layers")
    assert lines[-1].endswith(f", digest {result.digest}")
    assert runtime_api.repo_digest(reference, runtime=runtime) == result.digest
    image = runtime.images.get(image_id)
    image.tag(repository, "1")  # as the other tests expect it
    image.tag("megatron-bench-kit/tiny", "1")


def test_a_build_records_its_base_digest(runtime, pushed, tmp_path) -> None:
    result, _ = pushed
    # What the kit's Dockerfiles declare for it (images/*/Dockerfile, at their end).
    dockerfile = ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nARG BASE_IMAGE\nARG BASE_DIGEST=unknown\n"
                  'LABEL org.opencontainers.image.base.digest="${BASE_DIGEST}"\n')
    labels = {}
    for base in (result.reference, f"{result.reference.rsplit(':', 1)[0]}@{result.digest}"):
        context = BuildContext("tiny", tmp_path / str(len(labels)), "megatron-bench-kit/child:1",
                               "0" * 64, {"BASE_IMAGE": base})
        context.directory.mkdir()
        context.dockerfile.write_text(dockerfile)
        built = runtime_api.build(context, runtime=runtime, force=True, show=lambda _: None)
        labels[base] = built.labels["org.opencontainers.image.base.digest"]
    assert set(labels.values()) == {result.digest}, "pulled by tag or by digest: the same digest"
    # A base that never came from a registry has no digest: the build says so.
    assert runtime_api.base_digest("megatron-bench-kit/child:1", runtime) == "unknown"


def test_references_split_by_tag_or_digest() -> None:
    digest = "sha256:" + "a" * 64
    assert runtime_api.split_reference("127.0.0.1:5000/x/y:1") == ("127.0.0.1:5000/x/y", "1")
    assert runtime_api.split_reference("127.0.0.1:5000/x/y") == ("127.0.0.1:5000/x/y", "latest")
    assert runtime_api.split_reference(f"x/y:1@{digest}") == ("x/y", digest)
    with pytest.raises(ValueError, match="not a sha256:<64 hex> digest"):
        runtime_api.split_reference("x/y@sha256:abc")


def test_pins_give_a_digest_or_say_tag_only() -> None:
    targets = load_pins().targets
    assert targets["rocm"].base_ref == (
        "rocm/pytorch@sha256:c76af9bfb1c25b0f40d4c29e8652105c57250bf018d23ff595b06bd79666fdd7")
    assert targets["cuda"].base_digest == ""  # no published digest found: tag only
    assert targets["cuda"].base_ref == "nvcr.io/nvidia/pytorch:25.03-py3"


def test_buildkit_shows_its_steps_and_the_classic_builder_stays_available(runtime,
                                                                         tmp_path) -> None:
    from bench.images import buildkit

    assert buildkit.supports_buildkit(runtime)  # dockerd; podman would say no
    context = BuildContext("tiny", tmp_path, "megatron-bench-kit/steps:1", "1" * 64, {})
    tmp_path.joinpath("payload.bin").write_bytes(b"x" * 1000)
    context.dockerfile.write_text("FROM scratch\nCOPY payload.bin /payload.bin\n")
    first: list[str] = []
    built = runtime_api.build(context, runtime=runtime, force=True, show=first.append)
    assert built.builder == "buildkit"
    assert "[1/1] COPY payload.bin /payload.bin" in first
    again: list[str] = []
    rebuilt = runtime_api.build(context, runtime=runtime, force=True, show=again.append)
    assert "CACHED [1/1] COPY payload.bin /payload.bin" in again
    assert rebuilt.image_id == built.image_id
    classic = runtime_api.build(context, runtime=runtime, force=True, builder="classic",
                               show=lambda _: None)
    assert classic.builder == "classic"
    context.dockerfile.write_text("FROM scratch\nCOPY missing.bin /x\n")
    with pytest.raises(runtime_api.ContainerRuntimeError, match="missing.bin"):
        runtime_api.build(context, runtime=runtime, force=True, show=lambda _: None)
