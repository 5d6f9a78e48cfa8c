"""MS-AMP and FP4-simulation precisions: what they render, what they are measured against, and
every refusal (no fp8 peak, no Transformer Engine, no MS-AMP, the wrong engine) before anything runs."""

from __future__ import annotations

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.precisions import FP4_SIMULATION_ENV, PRECISIONS
from bench.config.presets import get_preset
from bench.images.pins import REPO_ROOT as REPO
from bench.planning.plan import plan
from bench.train.msamp import msamp_problem
from tests.conftest import options
from tests.inprocess import run_cli

NGC = Capabilities(transformer_engine=True, apex_layer_norm=True, fused_wgrad=True, fused_softmax=True)
MSAMP_IMAGE = "ghcr.io#megatron-bench-kit/cuda:msamp"  # what `images build cuda --option msamp=1` pushes
FP4_ENV = dict(FP4_SIMULATION_ENV)


@pytest.mark.parametrize(("precision", "level"), [("msamp-o1", "O1"), ("msamp-o2", "O2"), ("fp4", "O2")])
def test_msamp_precisions_render_msamp_fp8_linears_against_the_fp8_peak(precision, level) -> None:
    """MS-AMP's own FP8 linears in megatron-core's local layers: no Transformer Engine recipe."""
    assert PRECISIONS[precision].peak == "fp8"
    launch = plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h200"),
                  options(nodes=1, precision=precision, image=MSAMP_IMAGE, image_msamp=True))
    args = " ".join(launch.train_args)
    assert f"--bf16 --kit-msamp {level}" in args and "--fp8-format" not in args
    assert "--transformer-impl local" in args
    assert launch.capabilities == Capabilities(**{**vars(NGC), "msamp": True})
    assert launch.peak_tflops == 1979.0 and launch.bf16_peak_tflops == 989.0
    env = dict(launch.env)
    assert {k: env.get(k) for k in FP4_ENV} == (FP4_ENV if precision == "fp4" else dict.fromkeys(FP4_ENV))


@pytest.mark.parametrize("te", [True, False], ids=["with-te", "without-te"])
def test_locally_detected_msamp_plans_on_an_fp8_gpu_with_or_without_te(te) -> None:
    caps = Capabilities(transformer_engine=te, msamp=True)
    launch = plan(get_preset("345m"), "tp1pp1", load_platform("local"),
                  options(gpus_present=1, gpu_name="NVIDIA H200", precision="msamp-o1", capabilities=caps))
    args = " ".join(launch.train_args)
    assert "--kit-msamp O1" in args and "--transformer-impl local" in args and launch.peak_tflops == 1979.0


@pytest.mark.parametrize(
    ("platform", "extra", "message"),
    [
        # The Azure platforms' image is built without MS-AMP: refused unless an msamp=1 image is named.
        ("azure-h200", {"nodes": 1}, r"msamp-o2 needs MS-AMP, which this environment lacks \(declared "
         r"by .*azure-h200.toml\): build the image with `python -m bench images build cuda --option msamp=1`"),
        ("azure-h200", {"nodes": 1, "image_msamp": True}, "says what an --image was built with.*give --image"),
        ("local", {"gpus_present": 1, "gpu_name": "NVIDIA H200", "image_msamp": True, "capabilities": NGC},
         "local detects what its Python has"),
        ("local", {"gpus_present": 1, "gpu_name": "NVIDIA H200", "capabilities": NGC},
         r"msamp-o2 needs MS-AMP, which this environment lacks \(detected in this Python\)"),
        # A100 (Polaris): no fp8 peak in its data, so nothing fp8 is planned there.
        ("polaris", {"engine": "megatron"}, "msamp-o2 cannot run on NVIDIA A100.*no dense fp8 peak"),
        ("azure-h200", {"nodes": 1, "engine": "megatron-deepspeed", "image": MSAMP_IMAGE, "image_msamp": True},
         "^msamp-o2 needs MS-AMP through the Megatron engine, which the kit wires it into: use "
         "--engine megatron"),
    ],
    ids=["azure-default-image", "option-without-image", "option-on-local", "local-no-msamp",
         "a100-no-fp8-peak", "megatron-deepspeed"],
)
def test_msamp_is_refused_where_it_cannot_run(platform, extra, message) -> None:
    preset = get_preset("6.7b")
    layout = "tp4pp1" if platform == "polaris" else "tp1pp1"
    with pytest.raises(ValueError, match=message):
        plan(preset, layout, load_platform(platform), options(precision="msamp-o2", **extra))


@pytest.mark.parametrize("precision", ["msamp-o1", "msamp-o2", "fp4"])
@pytest.mark.parametrize(("layout", "why"), [("tp2pp1", r"tensor parallelism \(tp2\)"),
                                             ("tp2pp1sp", r"sequence parallelism \('sp'\)")])
def test_msamp_with_tensor_or_sequence_parallelism_is_refused_at_plan_time(precision, layout,
                                                                           why) -> None:
    """bench.train.msamp's FP8 linear would raise NotImplementedError at the first forward."""
    with pytest.raises(ValueError, match=rf"--precision {precision} with layout {layout[:6]}\S*: "
                       rf"MS-AMP's FP8 linear on megatron-core does not do {why}; use tp1"):
        plan(get_preset("6.7b"), layout, load_platform("azure-h200"),
             options(nodes=1, precision=precision, image=MSAMP_IMAGE, image_msamp=True))


def test_help_keeps_the_seeds_mode_words() -> None:
    done = run_cli("run", "--help", cwd=REPO)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for words in ("The MS-AMP seed's modes: bf16; te = fp8-delayed", "msamp = msamp-o2", "fp4 = msamp-o2",
                  "--image-option {msamp=1}"):
        assert words in text, words


def test_cli_dry_run_with_an_msamp_image() -> None:
    done = run_cli("run", "6.7b", "tp1pp1", "--platform", "azure-h200", "--nodes", "1", "--precision",
                   "fp4", "--image", MSAMP_IMAGE, "--image-option", "msamp=1", "--dry-run", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "MSAMP_USE_ACTIVATION_SIMULATE_FP4" in done.stdout and "--kit-msamp O2" in done.stdout
    assert "MS-AMP yes" in done.stderr


def test_entry_check_refuses_fp4_switches_without_msamp_and_msamp_without_msamp() -> None:
    assert msamp_problem("off", {}) is None
    assert "set, but MS-AMP is off" in msamp_problem("off", {"MSAMP_USE_ACTIVATION_SIMULATE_FP4": "1"})
    problem = msamp_problem("O2", FP4_ENV)  # this Python has no MS-AMP
    assert problem.startswith("--kit-msamp O2 needs MS-AMP") and "--option msamp=1" in problem
    assert "\n" not in problem


def test_te_fp8_on_megatron_deepspeed_names_transformer_engine() -> None:
    with pytest.raises(ValueError, match="^fp8-delayed needs Transformer Engine through the Megatron"):
        plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h200"),
             options(precision="fp8-delayed", nodes=1, engine="megatron-deepspeed"))
