"""Build each image for real on a stand-in base, check it inside, rebuild from cache, push and pull.

The stand-in replaces only the NGC/ROCm base (unreachable from CI); every step the kit adds runs:
CA trust, pinned pip installs, patch series, kit install. Megatron-DeepSpeed comes from the source
snapshot of its pinned commit (``$BENCH_UPSTREAM_SNAPSHOTS``, which CI sets) because GitHub is
unreachable.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from bench.images import container_runtime as runtime_api
from bench.images.context import assemble
from bench.images.pins import REPO_ROOT, load_pins
from bench.images.series import read_series
from tests.snapshots import snapshot_archive, snapshot_tree

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")  # the re-signing proxy's CA is in here


def _context(target: str, out: Path, base: str, **extra):
    pins = load_pins()
    # The host's CA bundle is passed as the extra CA: on this network pip cannot reach PyPI
    # from inside a build without it, which is the --ca-cert feature's reason to exist.
    return assemble(pins, pins.target(target), out, base=base, ca_certs=(HOST_CA,),
                    upstream_dirs={"megatron-deepspeed": snapshot_archive("megatron-deepspeed")},
                    **extra)


def _run(runtime, tag: str, *command: str) -> str:
    output = runtime.containers.run(tag, list(command), remove=True, network_mode="none")
    return output.decode()


@pytest.fixture(scope="module")
def built(runtime, standin_base, tmp_path_factory):
    """Both images built once per session: {target: (context, first BuildResult)}."""
    results = {}
    for target in ("cuda", "rocm"):
        context = _context(target, tmp_path_factory.mktemp(target) / "context", standin_base)
        results[target] = (context, runtime_api.build(context, runtime=runtime, network_mode="host"))
    return results


@pytest.mark.parametrize("target", ["cuda", "rocm"])
def test_image_builds_and_checks_inside(runtime, built, target):
    context, result = built[target]
    assert result.built
    print(f"\n{target}: first build {result.seconds:.1f} s")
    report = _run(runtime, context.tag, "python3", "-m", "bench.images.check", "--target", target)
    print(report)
    assert "check: ok" in report
    labels = runtime.images.get(context.tag).labels
    assert labels["dev.megatron-bench.pins"] == context.buildargs["PINS"]
    assert labels["dev.megatron-bench.patches.sha256"] == context.buildargs["PATCHES_SHA256"]
    assert labels["org.opencontainers.image.revision"] == context.buildargs["KIT_COMMIT"]
    assert labels["dev.megatron-bench.inputs.sha256"] == context.content_hash


@pytest.mark.parametrize("target", ["cuda", "rocm"])
def test_image_carries_patched_megatron_deepspeed_with_prebuilt_helpers(runtime, built, target):
    context, _ = built[target]
    source = _run(runtime, context.tag, "cat", "/opt/Megatron-DeepSpeed/megatron/utils.py")
    assert "(1 + (2 / gqa) + 1)" in source and "(2 // gqa)" not in source
    report = _run(runtime, context.tag, "python3", "-m", "bench.images.check", "--target", target)
    assert "ok   Megatron-DeepSpeed dataset helpers: /opt/Megatron-DeepSpeed/megatron/data/helpers" \
        in report


def test_unchanged_inputs_reuse_the_cache(runtime, built, standin_base, tmp_path):
    context, first = built["cuda"]
    again = _context("cuda", tmp_path / "context", standin_base)
    assert again.tag == context.tag, "same inputs must give the same tag"
    skipped = runtime_api.build(again, runtime=runtime, network_mode="host")
    assert not skipped.built
    start = time.monotonic()
    cached = runtime_api.build(again, runtime=runtime, network_mode="host", force=True)
    cached_seconds = time.monotonic() - start
    print(f"\ncuda: first build {first.seconds:.1f} s, rebuild of unchanged inputs "
          f"{cached_seconds:.1f} s (layer cache), tag lookup {skipped.seconds:.2f} s")
    assert cached.image_id == first.image_id
    assert cached_seconds < first.seconds / 3


def test_a_patch_that_does_not_apply_fails_naming_file_and_hunk(runtime, standin_base, tmp_path):
    stale = tmp_path / "stale-upstream"
    (stale / "megatron").mkdir(parents=True)
    text = (snapshot_tree("megatron-deepspeed") / "megatron/utils.py").read_text()
    (stale / "megatron/utils.py").write_text(text.replace("(2 // gqa)", "(2 // groups)"))
    pins = load_pins()
    context = assemble(pins, pins.target("rocm"), tmp_path / "context", base=standin_base,
                       ca_certs=(HOST_CA,), upstream_dirs={"megatron-deepspeed": stale})
    with pytest.raises(runtime_api.ContainerRuntimeError) as failure:
        runtime_api.build(context, runtime=runtime, network_mode="host", show=lambda line: None)
    message = str(failure.value)
    assert "0001-throughput-calculator-gqa-float-division.patch does not apply" in message
    assert "Hunk #1 FAILED" in message and "megatron/utils.py" in message


def test_msamp_stage_runs_up_to_the_cuda_extensions(runtime, standin_base, tmp_path):
    """--option msamp=1 on the stand-in: the pinned MS-AMP tree is patched by its series and the
    msamp package installed; the CUDA extensions need the base's torch and nvcc (NGC's), which the
    stand-in lacks, and the build stops there saying so."""
    pins = load_pins()
    context = assemble(pins, pins.target("cuda"), tmp_path / "context", base=standin_base,
                       ca_certs=(HOST_CA,), options={"msamp": "1", "msamp_arch": "8.0;9.0"},
                       upstream_dirs={"megatron-deepspeed": snapshot_archive("megatron-deepspeed"),
                                      "ms-amp": snapshot_archive("ms-amp")})
    lines: list[str] = []
    with pytest.raises(runtime_api.ContainerRuntimeError) as failure:
        runtime_api.build(context, runtime=runtime, network_mode="host", show=lines.append)
    log = "\n".join([*lines, str(failure.value)])
    for patch in read_series(REPO_ROOT / "patches/ms-amp/series"):
        assert f"{patch.name}: applied" in log, patch.name
    assert "msamp: installing . (TORCH_CUDA_ARCH_LIST=8.0;9.0)" in log
    assert "Successfully installed MS-AMP-" in log
    assert "msamp: cannot build MS-AMP's CUDA extensions: this base has no torch with a CUDA " \
        "toolkit (nvcc)" in log
    assert "msamp: installing msamp/operators/arithmetic" not in log


def test_push_to_and_pull_from_a_local_registry(runtime, built, registry):
    context, _ = built["cuda"]
    pushed = runtime_api.push(context.tag, registry, runtime=runtime, extra_tags=("0.1.0",))
    assert pushed[0].reference == f"{registry}/{context.tag}"
    assert pushed[0].digest == pushed[1].digest is not None  # one image, two tags
    runtime.images.remove(pushed[1].reference)
    image_id = runtime_api.pull(pushed[1].pinned, runtime=runtime)
    assert image_id == runtime.images.get(context.tag).id


def test_command_line_build_writes_the_lumi_definition(runtime, built, standin_base, monkeypatch,
                                                       capsys):
    from bench.cli import main
    from bench.images.cli import BUILD_DIR

    monkeypatch.setenv("DOCKER_HOST", runtime.docker_host)
    status = main(["images", "build", "rocm", "--base", standin_base, "--ca-cert", str(HOST_CA),
                   "--upstream", f"megatron-deepspeed={snapshot_archive('megatron-deepspeed')}",
                   "--network", "host"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"image: {built['rocm'][0].tag}" in out  # same inputs as the fixture's build
    definition = (BUILD_DIR / "rocm/context/megatron-bench-rocm.def").read_text()
    assert f"From: {standin_base}" in definition
    if shutil.which("singularity") is None and shutil.which("apptainer") is None:
        assert "not built: no apptainer/singularity here" in out
