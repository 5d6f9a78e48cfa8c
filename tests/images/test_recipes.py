"""Pins, patch series, the Singularity definition (golden) and the Polaris recipe: data loaded by
tests, renders compared byte for byte, patches applied with the real GNU patch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.images import polaris, singularity, upstreams
from bench.images.context import MSAMP_CUDA_ARCH, assemble
from bench.images.pins import REPO_ROOT, load_pins, load_polaris_recipe
from bench.images.series import SeriesError, read_series, run_series
from tests.conftest import assert_golden
from tests.snapshots import snapshot_archive, snapshot_tree

FIXED_TAG = "megatron-bench-kit/rocm:0123456789abcdef"  # the real one hashes every kit file
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


def test_series_applies_exactly_to_the_pinned_upstream_tree(tmp_path):
    shutil.copytree(snapshot_tree("megatron-deepspeed"), tmp_path / "tree")
    tree = tmp_path / "tree"
    series = REPO_ROOT / "patches/megatron-deepspeed/series"
    with pytest.raises(SeriesError, match="is not applied"):
        run_series(series, tree, "verify-applied")
    report = run_series(series, tree, "apply")
    assert len(report) == len(read_series(series)) == 12
    run_series(series, tree, "verify-applied")  # 0003 and 0010 change one file
    assert "value_layer.reshape(" in (tree / "megatron/model/transformer.py").read_text()
    assert "sys.modules[name] = module" in (tree / "megatron/fused_kernels/__init__.py").read_text()
    assert "(1 + (2 / gqa) + 1)" in (tree / "megatron/utils.py").read_text()
    assert "helpers.build_sample_idx(" not in (tree / "megatron/data/gpt_dataset.py").read_text()
    assert "arch=compute_70" not in (tree / "megatron/fused_kernels/__init__.py").read_text()
    assert "if nltk_available:" in (tree / "tools/preprocess_data.py").read_text()
    assert not list(tree.rglob("*.orig")) and not list(tree.rglob("*.rej"))


def test_msamp_series_applies_exactly_to_the_pinned_snapshot(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(snapshot_tree("ms-amp"), tree)
    series = REPO_ROOT / "patches/ms-amp/series"
    report = run_series(series, tree, "apply")
    assert len(report) == len(read_series(series)) == 9
    run_series(series, tree, "verify-applied")
    assert "bool(in_time)" in (tree / "msamp/common/utils/torch_fp8.py").read_text()
    assert "def quantize_delayed(" in (tree / "msamp/common/utils/torch_fp8.py").read_text()
    assert "Float8Quantizer(" in (tree / "msamp/common/utils/te_fp8.py").read_text()
    assert "force_pow_2_scales=True" in (tree / "msamp/common/utils/te_fp8.py").read_text()
    assert "optimizer_blocks(numel, threadsPerBlock)" in (tree / "msamp/optim/adamw.cu").read_text()
    assert "lr, self.bias_correction, decay" in (tree / "msamp/optim/adamw.py").read_text()
    assert "torch._scaled_mm" in (tree / "msamp/common/utils/torch_fp8.py").read_text()
    assert "class FP8LinearForMegatronCore" in (tree / "msamp/megatron/layers.py").read_text()
    assert "if os.path.exists(DistOp.lib_path):" in (
        tree / "msamp/operators/dist_op/dist_op.py").read_text()
    assert "import transformer_engine_torch as tex" in (tree / "msamp/te/modules.py").read_text()
    assert "TransformerEngine.git@v1.1" not in (tree / "pyproject.toml").read_text()
    assert (tree / "Makefile").read_text().count("pip install -v --no-build-isolation .") == 3
    assert not list(tree.rglob("*.orig")) and not list(tree.rglob("*.rej"))


def _msamp_dirs() -> dict[str, Path]:
    return {"megatron-deepspeed": snapshot_archive("megatron-deepspeed"),
            "ms-amp": snapshot_archive("ms-amp")}


def test_msamp_option_carries_its_series_tree_pin_and_labels(tmp_path):
    pins = load_pins()
    dirs = _msamp_dirs()
    plain = assemble(pins, pins.target("cuda"), tmp_path / "plain", upstream_dirs=dirs)
    assert not (plain.directory / "patches/ms-amp").exists() and "MS-AMP" not in plain.buildargs["PINS"]
    assert [p.name for p in (plain.directory / "upstream/ms-amp").iterdir()] == ["README"]
    assert "MSAMP_CUDA_ARCH" not in plain.buildargs
    built = assemble(pins, pins.target("cuda"), tmp_path / "msamp", upstream_dirs=dirs,
                     options={"msamp": "1"})
    assert (built.directory / "patches/ms-amp/series").read_bytes() == (
        REPO_ROOT / "patches/ms-amp/series").read_bytes()
    # The pinned snapshot's tree, unpatched: the series is applied in the image.
    tree = built.directory / "upstream/ms-amp"
    assert (tree / "msamp/optim/setup.py").read_bytes() == (
        snapshot_tree("ms-amp") / "msamp/optim/setup.py").read_bytes()
    assert "TransformerEngine.git@v1.1" in (tree / "pyproject.toml").read_text()
    assert (built.directory / "build-msamp.sh").read_bytes() == (
        REPO_ROOT / "images/cuda/build-msamp.sh").read_bytes()
    assert "Azure/MS-AMP@9746ea85289f8e6233646e73ace35f730d1245d5" in built.buildargs["PINS"]
    assert built.buildargs["WITH_MSAMP"] == "1" and built.tag != plain.tag
    assert built.buildargs["MSAMP_CUDA_ARCH"] == MSAMP_CUDA_ARCH == "9.0"  # sm_90: what ran
    dockerfile = built.dockerfile.read_text()
    assert 'dev.megatron-bench.msamp.commit="${MSAMP_COMMIT}"' in dockerfile
    assert 'dev.megatron-bench.msamp.cuda_arch="${MSAMP_CUDA_ARCH}"' in dockerfile
    assert f"ARG MSAMP_CUDA_ARCH={MSAMP_CUDA_ARCH}\n" in dockerfile  # a hand build's default too
    with pytest.raises(ValueError, match="has no MS-AMP option"):
        assemble(pins, pins.target("rocm"), tmp_path / "rocm", options={"msamp": "1"})


def test_msamp_arch_is_a_build_arg_of_the_tag(tmp_path):
    pins = load_pins()
    both = assemble(pins, pins.target("cuda"), tmp_path / "both", upstream_dirs=_msamp_dirs(),
                    options={"msamp": "1", "msamp_arch": "8.0;9.0"})
    assert both.buildargs["MSAMP_CUDA_ARCH"] == "8.0;9.0"
    default = assemble(pins, pins.target("cuda"), tmp_path / "default", upstream_dirs=_msamp_dirs(),
                       options={"msamp": "1"})
    assert both.tag != default.tag


@pytest.mark.parametrize("options,message", [
    ({"msamp_arch": "9.0"}, "pass it with msamp=1"),
    ({"msamp": "0", "msamp_arch": "9.0"}, "pass it with msamp=1"),
    ({"msamp": "1", "msamp_arch": "sm_90"}, "msamp_arch=sm_90: write compute capabilities"),
    ({"msamp": "1", "arch": "9.0"}, "unknown build option(s) ['arch']"),
])
def test_bad_msamp_options_are_refused_before_anything_is_written(tmp_path, options, message):
    pins = load_pins()
    with pytest.raises(ValueError) as error:
        assemble(pins, pins.target("cuda"), tmp_path / "context", options=options)
    assert message in str(error.value)
    assert not (tmp_path / "context").exists()


def test_msamp_script_builds_what_ran_on_the_gpu_machines():
    """The four installs of docs/reports/2026-11-25-h200-msamp/h200-msamp.sh `setup`, in its
    order, each --no-deps --no-build-isolation with TORCH_CUDA_ARCH_LIST, after the series."""
    script = (REPO_ROOT / "images/cuda/build-msamp.sh").read_text()
    ran = (REPO_ROOT / "docs/reports/2026-11-25-h200-msamp/h200-msamp.sh").read_text()
    parts = ". msamp/operators/arithmetic msamp/operators/fp4_quantize msamp/optim"
    assert f"for part in {parts}; do" in ran
    assert script.index('series.py" apply "$series" "$tree"') < script.index("install .\n") < \
        script.index("for part in msamp/operators/arithmetic msamp/operators/fp4_quantize "
                     "msamp/optim; do")
    assert ('TORCH_CUDA_ARCH_LIST="$arch" \\\n    python3 -m pip install --no-cache-dir --no-deps '
            "--no-build-isolation .)") in script
    assert "import torch, msamp_arithmetic, msamp_quantize, msamp_adamw" in script
    assert "dist_op" not in script.split("set -eu", 1)[1]  # not built: it needs MSCCL


def test_cuda_msamp_build_matches_golden(tmp_path):
    """What `nox -s build-cuda -- --option msamp=1` hands the runtime: its build args and the
    Dockerfile with them put in place (the kit commit and the tag fixed: they change with every
    commit)."""
    pins = load_pins()
    context = assemble(pins, pins.target("cuda"), tmp_path / "context", upstream_dirs=_msamp_dirs(),
                       options={"msamp": "1"})
    buildargs = {**context.buildargs, "KIT_COMMIT": FIXED_COMMIT,
                 "IMAGE_TAG": "megatron-bench-kit/cuda:0123456789abcdef"}
    text = "".join(f"# --build-arg {key}={buildargs[key]}\n" for key in sorted(buildargs))
    text += singularity.resolve_args(context.dockerfile.read_text(), buildargs)
    assert_golden("build-cuda-msamp.Dockerfile", text)


def test_a_patch_at_an_offset_is_refused(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(snapshot_tree("megatron-deepspeed"), tree)
    utils = tree / "megatron/utils.py"
    utils.write_text("# one more line\n" + utils.read_text())
    with pytest.raises(SeriesError, match="only at an offset"):
        run_series(REPO_ROOT / "patches/megatron-deepspeed/series", tree, "check")


def test_patches_check_reports_every_series_checked_against_the_snapshot():
    lines, ok = upstreams.check_all(load_pins(), {
        "megatron-deepspeed": snapshot_archive("megatron-deepspeed"),
        "ms-amp": snapshot_archive("ms-amp")})
    text = "\n".join(lines)
    assert ok, text
    assert "NOT CHECKED" not in text
    assert "megatron-deepspeed (deepspeedai/Megatron-DeepSpeed@" in text
    assert "12 patch(es) apply exactly" in text
    assert "megatron-core (megatron-core==0.19.2): 1 patch(es) apply exactly" in text
    assert "ms-amp (Azure/MS-AMP@9746ea85289f8e6233646e73ace35f730d1245d5): 9 patch(es) apply exactly" in text


def test_an_unchecked_series_fails_the_check(tmp_path):
    lines, ok = upstreams.check_all(load_pins(), {"megatron-deepspeed": tmp_path / "absent.tar.gz",
                                                  "ms-amp": snapshot_archive("ms-amp")})
    assert not ok
    assert "megatron-deepspeed" in "\n".join(lines) and "NOT CHECKED" in "\n".join(lines)


def test_an_archive_of_another_commit_is_refused(tmp_path):
    other = tmp_path / f"megatron-deepspeed-{'1' * 40}.tar.gz"
    shutil.copy(snapshot_archive("megatron-deepspeed"), other)
    with pytest.raises(ValueError, match="does not carry the pinned commit"):
        assemble(load_pins(), load_pins().target("rocm"), tmp_path / "context",
                 upstream_dirs={"megatron-deepspeed": other})


def _rocm_definition(tmp_path: Path) -> str:
    pins = load_pins()
    context = assemble(pins, pins.target("rocm"), tmp_path / "context",
                       upstream_dirs={"megatron-deepspeed": snapshot_archive("megatron-deepspeed")})
    return singularity.render_definition(
        context.dockerfile, {**context.buildargs, "KIT_COMMIT": FIXED_COMMIT,
                             "IMAGE_TAG": FIXED_TAG})


def test_lumi_singularity_definition_matches_golden(tmp_path):
    assert_golden("singularity-lumi.def", _rocm_definition(tmp_path))


def test_singularity_definition_has_spythons_faults_fixed(tmp_path):
    definition = _rocm_definition(tmp_path)
    assert ("From: rocm/pytorch@sha256:"
            "c76af9bfb1c25b0f40d4c29e8652105c57250bf018d23ff595b06bd79666fdd7") in definition
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


@pytest.mark.parametrize("old,new,message", [
    ('dockerfile = "images/cuda/Dockerfile"', 'dockerfil = "images/cuda/Dockerfile"',
     "[targets.cuda] unknown key(s) dockerfil; allowed: dockerfile,"),
    ('install_dir = "/opt/MS-AMP"', 'install_dirs = "/opt/MS-AMP"',
     "[upstreams.ms-amp] unknown key(s) install_dirs; allowed: kind, series,"),
    ('\nkind = "pypi"', '\nkind = 1', "key 'upstreams.megatron-core.kind' is 1, expected 'pypi' or"),
])
def test_a_typo_in_pins_is_refused_naming_the_file_and_table(tmp_path, old, new, message):
    text = (REPO_ROOT / "images/pins.toml").read_text()
    assert old in text
    (tmp_path / "pins.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ValueError, match=r"pins.toml[: ]") as error:
        load_pins(tmp_path / "pins.toml")
    assert message in str(error.value)
