"""--optimizer-states paper and paper-kit: the flags they render, their variant, their bytes in the
memory estimate, and every refusal before anything runs. Megatron's validator on these plans:
test_megatron_args.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.planning.engines.registry import ENGINES
from bench.planning.layout import build_layout
from bench.planning.memory import GB, Counted, estimate_bytes, params_per_gpu, state_bytes
from bench.planning.plan import plan
from bench.planning.tuning import Tuning
from tests.conftest import options

PAPER = Tuning(optimizer_states="paper")
PAPER_KIT = Tuning(optimizer_states="paper-kit")
MSAMP_IMAGE = "ghcr.io#megatron-bench-kit/cuda:msamp"  # what `images build cuda --option msamp=1` pushes
PAPER_FLAGS = ("--grad-reduce-in-bf16 --use-precision-aware-optimizer --main-grads-dtype bf16 "
               "--main-params-dtype fp16 --exp-avg-dtype fp8 --exp-avg-sq-dtype fp16")


def _dp2(precision: str, tuning: Tuning = PAPER, **extra: object):
    """1.3b dp2 at micro/global batch 8/32 on two H200s (the msamp-paper campaign group's size)."""
    return plan(get_preset("1.3b"), "tp1pp1", load_platform("azure-h200"),
                options(gpus=2, mbs=8, gbs=32, precision=precision, tuning=tuning, **extra))


@pytest.mark.parametrize("precision", ["bf16", "fp8-delayed", "fp8-current"])
def test_paper_states_render_the_precision_aware_distributed_optimizer(precision: str) -> None:
    launch = _dp2(precision)
    args = " ".join(launch.train_args)
    assert PAPER_FLAGS in args and "--use-distributed-optimizer" in args
    assert "--accumulate-allreduce-grads-in-fp32" not in args
    assert launch.variant == (("optimizer_states", "paper"),)
    assert "--use-precision-aware-optimizer" not in " ".join(_dp2(precision, Tuning()).train_args)


@pytest.mark.parametrize("precision", ["bf16", "fp8-delayed", "fp8-current"])
def test_paper_kit_renders_the_same_flags_and_the_entry_s_paper_adam(precision: str) -> None:
    """paper-kit: paper's flags, plus --kit-paper-adam (the entry has megatron-core build the kit's
    PaperAdamW); paper itself never carries it."""
    kit, paper = list(_dp2(precision, PAPER_KIT).train_args), list(_dp2(precision).train_args)
    assert kit == [*paper[:paper.index("--exp-avg-sq-dtype") + 2], "--kit-paper-adam",
                   *paper[paper.index("--exp-avg-sq-dtype") + 2:]]
    assert "--kit-paper-adam" not in paper
    assert _dp2(precision, PAPER_KIT).variant == (("optimizer_states", "paper-kit"),)


def test_msamp_o1_takes_the_paper_states_beside_its_fp8_linears() -> None:
    launch = _dp2("msamp-o1", image=MSAMP_IMAGE, image_msamp=True)
    args = " ".join(launch.train_args)
    assert "--kit-msamp O1" in args and "--transformer-impl local" in args and PAPER_FLAGS in args
    assert launch.variant == (("optimizer_states", "paper"),)
    kit = _dp2("msamp-o1", PAPER_KIT, image=MSAMP_IMAGE, image_msamp=True)
    assert PAPER_FLAGS + " --kit-paper-adam" in " ".join(kit.train_args)
    assert kit.variant == (("optimizer_states", "paper-kit"),)


def test_state_bytes_per_parameter() -> None:
    """fp32 master + moments 12; MS-AMP O2's LBAdamW 4 + 1 + 2; the paper's 2 + 2 + 2 (TE's fp8
    moment keeps a transposed copy on Hopper); the kit's PaperAdamW 2 + 1 + 2 (no transposed copy)."""
    named = [PRECISIONS[p] for p in ("bf16", "fp8-delayed", "msamp-o1", "msamp-o2", "fp4")]
    assert [state_bytes(p) for p in named] == [12, 12, 12, 7, 7]
    named = [PRECISIONS[p] for p in ("bf16", "fp8-current", "msamp-o1")]
    assert [state_bytes(p, "paper") for p in named] == [6, 6, 6]
    assert [state_bytes(p, "paper-kit") for p in named] == [5, 5, 5]


def test_step_bytes_per_parameter() -> None:
    """Megatron's distributed optimizer copies a bf16 gradient shard to fp32 (4); TE's FusedAdam
    unscales both moments and the master weights of the paper's states to fp32 (12); fp32 main
    gradients and the kit's PaperAdamW (its kernel keeps none) add none; DeepSpeed's ZeRO step copies
    its gradient partition to fp32 (4)."""
    assert ENGINES["megatron"].step_bytes("default", 2) == 4
    assert ENGINES["megatron"].step_bytes("default", 4) == 0
    assert ENGINES["megatron"].step_bytes("paper", 2) == 12
    assert ENGINES["megatron"].step_bytes("paper-kit", 2) == 0
    assert ENGINES["megatron-deepspeed"].step_bytes("default", 2) == 4


def test_the_step_binds_where_activations_are_few() -> None:
    """6.7b dp2 at micro-batch 1 with the paper's states: 6.66e9 parameters a GPU hold 2 + 2
    (gradients) + 6 / 2 bytes, its layers' linears 2 more (fp8 weights); the step adds 12 / 2, more
    than the activations."""
    preset = get_preset("6.7b")
    layout = build_layout("tp1pp1", preset, 2, 2, 1, 16)
    params = params_per_gpu(preset, layout)
    h = preset.hidden
    linears = preset.layers * (4 * h * h + 2 * h * preset.ffn_hidden)
    at_step = estimate_bytes(Counted(preset, layout, 2, 1, 6, fp8=True, optimizer_step_bytes=12))
    assert at_step == pytest.approx(params * (2 + 2 + 3 + 6) + linears * 2 + 2 * GB)
    assert at_step > estimate_bytes(Counted(preset, layout, 2, 1, 6, fp8=True)) + 25 * GB


def test_a_refusal_of_the_paper_states_names_paper_kit_where_it_fits() -> None:
    """6.7b dp2 at 1/16 on 80 GB: TE FusedAdam's fp32 copies at the step do not fit (out of memory
    on two H200s capped at 80 GB), the kit's PaperAdamW does (it trained at a 65.2 GB peak)."""
    def h100(tuning: Tuning):
        return plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h100"),
                    options(gpus=2, mbs=1, gbs=16, precision="fp8-delayed", tuning=tuning))

    with pytest.raises(ValueError, match=r"needs ~101\.5 GB per GPU .*; --optimizer-states paper-kit "
                       r"\(the same states, stepped without TE FusedAdam's fp32 copies\) needs "
                       r"~66\.8 GB; --force plans it anyway$"):
        h100(PAPER)
    assert h100(PAPER_KIT).memory_gb == pytest.approx(66.8, abs=0.05)
    with pytest.raises(ValueError) as refused:  # the default states: no hint to give
        h100(Tuning())
    assert "paper-kit" not in str(refused.value)


def test_the_estimate_counts_the_paper_states_sharded_over_dp() -> None:
    """1.3b dp2: 1 317 650 432 parameters a GPU; weights 2 + gradients 2 + (2 + 4) / 2 = 7 bytes a
    parameter against 2 + 2 + 12 / 2 = 10, so 3 bytes a parameter less."""
    preset = get_preset("1.3b")
    layout = build_layout("tp1pp1", preset, 2, 2, 8, 32)
    assert params_per_gpu(preset, layout) == 1_317_650_432
    assert estimate_bytes(Counted(preset, layout, 2, 1, 12)) == 49_267_807_232
    assert estimate_bytes(Counted(preset, layout, 2, 1, 6)) == 49_267_807_232 - 3 * 1_317_650_432
    assert _dp2("bf16").memory_gb == pytest.approx(45_314_855_936 / GB)
    assert _dp2("bf16", Tuning()).memory_gb == pytest.approx(49_267_807_232 / GB)
    # paper-kit: 5 bytes of state over dp, half a byte a parameter less than paper's 6.
    assert _dp2("bf16", PAPER_KIT).memory_gb == pytest.approx(
        (45_314_855_936 - 0.5 * 1_317_650_432) / GB)
    # The planner counts MS-AMP O2's smaller state too: 2 + 2 + 7 / 2; and its FP8 linears: an fp8
    # weight and transpose kept (2 bytes a parameter of the 24 layers' linears), the GEMM inputs
    # of each layer partly kept in fp8 (5 of 34 s*b*h saved).
    o2 = _dp2("msamp-o2", Tuning(), image=MSAMP_IMAGE, image_msamp=True)
    fp8 = 2 * 24 * 12 * 2048 * 2048 - 24 * 5 * 2048 * 8 * 2048
    assert o2.memory_gb == pytest.approx((49_267_807_232 - 2.5 * 1_317_650_432 + fp8) / GB)


@pytest.mark.parametrize(
    ("precision", "tuning", "extra", "message"),
    [
        ("msamp-o2", PAPER, {"image": MSAMP_IMAGE, "image_msamp": True},
         r"--optimizer-states paper with --precision msamp-o2: its Adam is MS-AMP's LBAdamW.*use "
         r"--precision msamp-o1"),
        ("fp4", PAPER, {"image": MSAMP_IMAGE, "image_msamp": True}, "use --precision msamp-o1"),
        ("fp16", PAPER, {}, "under --precision fp16 the weights are fp16 themselves: use --precision bf16"),
        ("bf16", Tuning(optimizer_states="paper", grad_reduce="fp32"), {},
         "asks for fp32 ones, which Megatron would silently drop: drop --grad-reduce fp32"),
        ("bf16", PAPER, {"engine": "megatron-deepspeed"},
         "--optimizer-states is megatron-core's precision-aware optimizer.*use --engine megatron"),
    ],
)
def test_refusals_name_the_fix(precision: str, tuning: Tuning, extra: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _dp2(precision, tuning, **extra)
    # paper-kit refuses all that paper refuses, naming itself.
    kit = replace(tuning, optimizer_states="paper-kit")
    with pytest.raises(ValueError, match=message.replace("--optimizer-states paper ",
                                                         "--optimizer-states paper-kit ")):
        _dp2(precision, kit, **extra)


def test_refused_without_transformer_engine() -> None:
    """paper-kit too: megatron-core's OptimizerConfig imports TE's FusedAdam under its
    precision-aware optimizer, whichever Adam then steps."""
    local = load_platform("local")
    no_te = Capabilities(apex_layer_norm=True, fused_wgrad=True)
    with pytest.raises(ValueError, match=r"steps with Transformer Engine's FusedAdam, and this "
                       r"environment has no Transformer Engine \(detected in this Python\)"):
        plan(get_preset("345m"), "tp1pp1", local,
             options(gpus=2, gpus_present=2, tuning=PAPER, capabilities=no_te))
    with pytest.raises(ValueError, match=r"--optimizer-states paper-kit .* megatron-core refuses "
                       r"unless Transformer Engine's FusedAdam can be imported"):
        plan(get_preset("345m"), "tp1pp1", local,
             options(gpus=2, gpus_present=2, tuning=PAPER_KIT, capabilities=no_te))


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="--optimizer-states fp8: use one of default, paper, paper-kit"):
        Tuning(optimizer_states="fp8")
