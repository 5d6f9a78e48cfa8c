"""Pins, patch series, the Singularity definition (golden) and the Polaris recipe: data loaded by
tests, renders compared byte for byte, patches applied with the real GNU patch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.images import polaris, singularity, upstreams
from bench.images.context import assemble
from bench.images.pins import REPO_ROOT, load_pins, load_polaris_recipe
from bench.images.series import SeriesError, read_series, run_series

GOLDEN_DEF = REPO_ROOT / "tests/golden/singularity-lumi.def"
EXCERPT = REPO_ROOT / "tests/images/upstream/megatron-deepspeed"
# The files of Azure/MS-AMP at the pinned commit that its series touches, byte for byte.
MSAMP_EXCERPT = REPO_ROOT / "tests/images/upstream/ms-amp"
# Where the exact source archives of the pins are (git archive, top folder <Name>-<commit>/), if here.
SNAPSHOTS = os.environ.get("BENCH_UPSTREAM_SNAPSHOTS")
FIXED_COMMIT = "0" * 40  # the kit commit is provenance that changes with every commit


def test_pins_load_and_name_existing_files():
    pins = load_pins()
    assert {"cuda", "rocm"} <= set(pins.targets)
    assert pins.upstreams["megatron-core"].version == "0.19.2"  # the engine's version
    assert pins.target("cuda").base == "nvcr.io/nvidia/pytorch:25.03-py3"
    for target in pins.targets.values():
        assert (REPO_ROOT / target.dockerfile).is_file()
    for upstream in pins.upstreams.values():
        if upstream.series:
            read_series(REPO_ROOT / upstream.series)  # every named patch exists


def test_every_patch_says_what_it_fixes_and_where_it_was_discussed():
    for patch in REPO_ROOT.glob("patches/*/*.patch"):
        header = patch.read_text().split("\n--- ", 1)[0]
        assert "What it fixes:" in header and "Where upstream discussed it:" in header, patch
        assert patch.name in (patch.parent / "series").read_text(), f"{patch} is in no series"


def test_unpinned_package_is_refused(tmp_path):
    text = (REPO_ROOT / "images/pins.toml").read_text().replace('"deepspeed==0.18.2"', '"deepspeed"')
    (tmp_path / "pins.toml").write_text(text)
    with pytest.raises(ValueError, match="'deepspeed' is not pinned"):
        load_pins(tmp_path / "pins.toml")


def test_series_applies_to_the_pinned_upstream_text(tmp_path):
    shutil.copytree(EXCERPT, tmp_path / "tree")
    series = REPO_ROOT / "patches/megatron-deepspeed/series"
    with pytest.raises(SeriesError, match="is not applied"):
        run_series(series, tmp_path / "tree", "verify-applied")
    run_series(series, tmp_path / "tree", "apply")
    run_series(series, tmp_path / "tree", "verify-applied")
    assert "(1 + (2 / gqa) + 1)" in (tmp_path / "tree/megatron/utils.py").read_text()


def test_msamp_series_applies_to_the_pinned_upstream_text(tmp_path):
    shutil.copytree(MSAMP_EXCERPT, tmp_path / "tree")
    series = REPO_ROOT / "patches/ms-amp/series"
    run_series(series, tmp_path / "tree", "apply")
    run_series(series, tmp_path / "tree", "verify-applied")
    tree = tmp_path / "tree"
    assert "import transformer_engine_torch as tex" in (tree / "msamp/te/modules.py").read_text()
    assert "TransformerEngine.git@v1.1" not in (tree / "pyproject.toml").read_text()
    assert (tree / "Makefile").read_text().count("pip install -v --no-build-isolation .") == 3


@pytest.mark.skipif(not SNAPSHOTS, reason="BENCH_UPSTREAM_SNAPSHOTS names no folder of source archives")
def test_msamp_series_applies_with_no_fuzz_to_the_real_snapshot(tmp_path):
    import tarfile

    commit = load_pins().upstreams["ms-amp"].commit
    with tarfile.open(Path(SNAPSHOTS) / f"ms-amp-{commit}.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    tree = tmp_path / f"MS-AMP-{commit}"
    for name in ("pyproject.toml", "Makefile", "msamp/te/modules.py"):  # the excerpt is the real text
        assert (MSAMP_EXCERPT / name).read_bytes() == (tree / name).read_bytes(), name
    lines, ok = upstreams.check_all(load_pins(), {"megatron-deepspeed": EXCERPT, "ms-amp": tree})
    assert ok and any(line.startswith("ms-amp") and "2 patch(es) apply cleanly" in line
                      for line in lines), lines


def test_patches_check_reports_every_series():
    lines, ok = upstreams.check_all(load_pins(), {"megatron-deepspeed": EXCERPT, "ms-amp": MSAMP_EXCERPT})
    assert ok
    text = "\n".join(lines)
    assert "megatron-deepspeed" in text and "1 patch(es) apply cleanly" in text
    assert "megatron-core (megatron-core==0.19.2): 1 patch(es) apply cleanly" in text
    assert "ms-amp (Azure/MS-AMP@9746ea85289f8e6233646e73ace35f730d1245d5): 2 patch(es) apply" in text


def _rocm_definition(tmp_path: Path) -> str:
    pins = load_pins()
    context = assemble(pins, pins.target("rocm"), tmp_path / "context",
                       upstream_dirs={"megatron-deepspeed": EXCERPT})
    return singularity.render_definition(
        context.dockerfile, {**context.buildargs, "KIT_COMMIT": FIXED_COMMIT})


def test_lumi_singularity_definition_matches_golden(tmp_path):
    definition = _rocm_definition(tmp_path)
    if os.environ.get("BENCH_UPDATE_GOLDEN") == "1":
        GOLDEN_DEF.write_text(definition)
    assert GOLDEN_DEF.exists(), "missing golden: run with BENCH_UPDATE_GOLDEN=1 and review"
    assert definition == GOLDEN_DEF.read_text()


def test_singularity_definition_has_spythons_faults_fixed(tmp_path):
    definition = _rocm_definition(tmp_path)
    assert "From: rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.6.0" in definition
    assert "${" not in definition and "ARG " not in definition  # ARGs resolved
    assert "exec /bin/bash" not in definition
    assert 'exec python3 -m bench.images.check --target rocm "$@"' in definition
    assert "export PIP_BREAK_SYSTEM_PACKAGES=1" in definition  # ENV reaches pip in %post
    assert f"org.opencontainers.image.revision {FIXED_COMMIT}" in definition  # name value labels


def test_polaris_recipe_renders_the_seed_steps_and_is_a_dry_run_here(capsys):
    recipe, pins = load_polaris_recipe(), load_pins()
    script = polaris.render_script(recipe, pins, "/src/Megatron-DeepSpeed", root=Path("/kit"))
    lines = script.splitlines()
    assert lines[4:6] == [f"module use {recipe.module_path}", f"module load {recipe.conda_module}"]
    assert f"python3 -m venv --system-site-packages {recipe.venv}" in lines
    assert (f"{recipe.venv}/bin/python3 -m pip install --no-deps --no-build-isolation "
            "deepspeed==0.18.2") in lines
    assert (f"{recipe.venv}/bin/python3 /kit/bench/images/series.py apply "
            "/kit/patches/megatron-deepspeed/series Megatron-DeepSpeed") in lines
    if not polaris.module_command_exists():
        assert polaris.run(script, execute=False) == 0
        assert "dry run" in capsys.readouterr().out


def test_msamp_option_carries_its_series_pin_and_labels(tmp_path):
    pins = load_pins()
    plain = assemble(pins, pins.target("cuda"), tmp_path / "plain")
    assert not (plain.directory / "patches/ms-amp").exists() and "MS-AMP" not in plain.buildargs["PINS"]
    built = assemble(pins, pins.target("cuda"), tmp_path / "msamp", options={"msamp": "1"})
    assert (built.directory / "patches/ms-amp/series").read_bytes() == (
        REPO_ROOT / "patches/ms-amp/series").read_bytes()
    assert "Azure/MS-AMP@9746ea85289f8e6233646e73ace35f730d1245d5" in built.buildargs["PINS"]
    assert built.buildargs["WITH_MSAMP"] == "1" and built.tag != plain.tag
    dockerfile = built.dockerfile.read_text()
    assert 'dev.megatron-bench.msamp.commit="${MSAMP_COMMIT}"' in dockerfile
    assert "series.py apply /opt/megatron-bench/patches/ms-amp/series /opt/MS-AMP" in dockerfile
    with pytest.raises(ValueError, match="has no MS-AMP option"):
        assemble(pins, pins.target("rocm"), tmp_path / "rocm", options={"msamp": "1"})
