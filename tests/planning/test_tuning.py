"""A/B settings: what each changes in the Megatron argv, how a variant is named, what is refused."""

from __future__ import annotations

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.planning.tuning import Tuning
from bench.records.build import plan_summary
from tests.conftest import options

OVERLAP = ("--overlap-grad-reduce", "--overlap-param-gather")


def _plan(tuning: Tuning, layout: str = "tp1pp1", engine: str = "megatron"):
    return plan(get_preset("6.7b"), layout, load_platform("azure-h100"),
                options(gpus=8, tuning=tuning, engine=engine))


def test_defaults_overlap_reduce_in_bf16_fuse_the_loss_and_name_no_variant() -> None:
    launch = _plan(Tuning())
    assert set(OVERLAP) <= set(launch.train_args) and "--grad-reduce-in-bf16" in launch.train_args
    assert "--cross-entropy-loss-fusion" in launch.train_args
    assert launch.variant == () and plan_summary(launch).variant == {}


def test_each_setting_removes_its_flags_and_names_the_variant() -> None:
    launch = _plan(Tuning(overlap=False, grad_reduce="fp32", fused_loss=False,
                          extra_args=("--manual-gc", "--kit-torch-adam", "foreach")))
    assert not set(OVERLAP) & set(launch.train_args)
    assert "--grad-reduce-in-bf16" not in launch.train_args
    assert "--cross-entropy-loss-fusion" not in launch.train_args
    assert launch.train_args[-3:] == ("--manual-gc", "--kit-torch-adam", "foreach")
    assert dict(launch.variant) == {"overlap": "off", "grad_reduce": "fp32", "fused_loss": "off",
                                    "megatron_args": "--manual-gc --kit-torch-adam foreach"}


def test_overlap_is_only_set_with_data_parallelism() -> None:
    assert not set(OVERLAP) & set(_plan(Tuning(), layout="tp8pp1").train_args)


@pytest.mark.parametrize(("tuning", "engine", "message"), [
    (Tuning(extra_args=("--global-batch-size", "64")), "megatron", "already sets --global-batch-size"),
    (Tuning(extra_args=("--bf16",)), "megatron", "already sets --bf16"),
    (Tuning(extra_args=("--seq-length=4096",)), "megatron", "already sets --seq-length"),
    (Tuning(extra_args=("fused",)), "megatron", "must start with a flag"),
    (Tuning(overlap=False), "megatron-deepspeed", "Megatron-engine settings"),
    (Tuning(fused_loss=False), "megatron-deepspeed", "Megatron-engine settings"),
    (Tuning(fused_attention=False), "megatron", "a Megatron-DeepSpeed setting"),
])
def test_refusals_name_the_problem(tuning: Tuning, engine: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _plan(tuning, engine=engine)


def test_a_setting_that_changes_nothing_at_the_layout_is_dropped_with_a_note() -> None:
    """--no-overlap with DP 1 (tp8 on 8 GPUs): the argv is the default's, so it is no variant."""
    default, asked = _plan(Tuning(), layout="tp8pp1"), _plan(Tuning(overlap=False), layout="tp8pp1")
    assert asked.train_args == default.train_args
    assert asked.variant == () and plan_summary(asked).variant == {}
    assert any(note.startswith("--no-overlap changes nothing with DP 1") for note in asked.notes)
    # Where it does change the argv, it stays a variant.
    assert dict(_plan(Tuning(overlap=False), layout="tp4pp1").variant) == {"overlap": "off"}


def test_fp32_reduce_under_fp16_is_dropped_with_a_note() -> None:
    launch = plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h100"),
                  options(gpus=8, precision="fp16", tuning=Tuning(grad_reduce="fp32")))
    assert launch.variant == ()
    assert any("--grad-reduce fp32 changes nothing under fp16" in note for note in launch.notes)


def test_megatron_deepspeed_attention_is_fused_unless_asked_and_unfused_is_a_variant() -> None:
    """Without flash-attn, torch's SDPA (patch 0011); --no-fused-attention keeps upstream's
    unfused core attention for an A/B, and the run is a variant."""
    data = {"data_path": "d", "vocab_file": "v", "merge_file": "m"}
    fused = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                 options(gpus_present=1, gpu_name="NVIDIA H200", engine="megatron-deepspeed", **data))
    unfused = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                   options(gpus_present=1, gpu_name="NVIDIA H200", engine="megatron-deepspeed",
                           tuning=Tuning(fused_attention=False), **data))
    assert "--use-torch-sdpa" in fused.train_args and fused.variant == ()
    assert "--use-torch-sdpa" not in unfused.train_args
    assert dict(unfused.variant) == {"core_attention": "unfused"}
    assert plan_summary(unfused).variant == {"core_attention": "unfused"}


@pytest.mark.parametrize("choice", ["fp8-allgather", "fp8-shared-scale"])
def test_fp8_grad_reduce_passes_the_kit_flag_without_overlap_and_names_the_variant(choice: str) -> None:
    """The buffer stays bf16, the entry reduces it in FP8 (--kit-grad-reduce), synchronously."""
    launch = _plan(Tuning(grad_reduce=choice), layout="tp4pp1")
    args = launch.train_args
    assert args[args.index("--kit-grad-reduce") + 1] == choice and args.count("--kit-grad-reduce") == 1
    assert "--grad-reduce-in-bf16" in args and "--use-distributed-optimizer" in args
    assert not set(OVERLAP) & set(args)
    assert dict(launch.variant) == {"overlap": "off", "grad_reduce": choice}
    assert plan_summary(launch).variant == {"overlap": "off", "grad_reduce": choice}
    assert any(f"--grad-reduce {choice} reduces after the backward pass" in note for note in launch.notes)
    # The same argv as the default's but for the overlap flags and the kit's one.
    default = list(_plan(Tuning(), layout="tp4pp1").train_args)
    for flag in OVERLAP:
        default.remove(flag)
    rest = list(args)
    del rest[rest.index("--kit-grad-reduce"):rest.index("--kit-grad-reduce") + 2]
    assert rest == default


@pytest.mark.parametrize(("layout", "engine", "message"), [
    ("tp8pp1", "megatron", r"--grad-reduce fp8-shared-scale reduces gradients over data-parallel ranks, "
                           r"and tp8pp1dp1 on 8 GPU\(s\) has dp 1: give more GPUs than tp x pp x cp \(8\)"),
    ("tp1pp1", "megatron-deepspeed", "Megatron-DeepSpeed reduces through DeepSpeed: use --engine megatron"),
])
def test_fp8_grad_reduce_refusals(layout: str, engine: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _plan(Tuning(grad_reduce="fp8-shared-scale"), layout=layout, engine=engine)


def test_unknown_grad_reduce_is_refused() -> None:
    with pytest.raises(ValueError, match="--grad-reduce fp8: use one of bf16, fp32, fp8-allgather"):
        Tuning(grad_reduce="fp8")


@pytest.mark.parametrize(("layout", "caps", "message"), [
    ("tp1pp1", Capabilities(transformer_engine=True, fused_wgrad=True),
     r"--defer-embedding-wgrad-compute overlaps .* tp1pp1dp4 has no pipeline \(pp 1\): drop it"),
    ("tp1pp4", Capabilities(transformer_engine=True),
     r"--defer-embedding-wgrad-compute needs the fused weight-gradient accumulation .* build apex"),
])
def test_deferred_output_layer_gradient_needs_a_pipeline_and_apex(
        layout: str, caps: Capabilities, message: str) -> None:
    """Megatron refuses the flag at start-up in both cases (13b tp1pp4vp2 ran it with apex)."""
    tuning = Tuning(extra_args=("--defer-embedding-wgrad-compute",))
    with pytest.raises(ValueError, match=message):
        plan(get_preset("13b"), layout, load_platform("local"),
             options(gpus=4, gpus_present=4, tuning=tuning, capabilities=caps, gpu_name="NVIDIA H200"))
    fits = plan(get_preset("13b"), "tp1pp4vp2", load_platform("local"),
                options(gpus=4, gpus_present=4, tuning=tuning, gpu_name="NVIDIA H200",
                        capabilities=Capabilities(transformer_engine=True, fused_wgrad=True)))
    assert "--defer-embedding-wgrad-compute" in fits.train_args
    assert any("does not count the deferred output-layer inputs" in note for note in fits.notes)
