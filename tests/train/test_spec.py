"""The layer-spec / attention choice and the environment checks, as pure functions."""

from __future__ import annotations

from argparse import Namespace

import pytest

from bench.config.capabilities import Capabilities
from bench.train.spec import check_args, layer_spec_provider, resolve_attention

NOTHING = Capabilities(transformer_engine=False, apex_layer_norm=False, fused_wgrad=False,
                       fused_softmax=False)
NGC = Capabilities(transformer_engine=True, apex_layer_norm=True, fused_wgrad=True, fused_softmax=True)


@pytest.mark.parametrize(
    ("requested", "impl", "chosen"),
    [
        ("auto", "transformer_engine", "te"),
        ("auto", "local", "sdpa"),
        ("sdpa", "local", "sdpa"),
        ("sdpa", "transformer_engine", "sdpa"),
        ("local", "local", "local"),
        ("te", "transformer_engine", "te"),
    ],
)
def test_attention_choice(requested: str, impl: str, chosen: str) -> None:
    assert resolve_attention(requested, impl) == chosen


@pytest.mark.parametrize(
    ("requested", "impl", "message"),
    [
        ("te", "local", "--kit-attention te needs --transformer-impl transformer_engine"),
        ("local", "transformer_engine", "--kit-attention local needs --transformer-impl local"),
        ("auto", "inference_optimized", "not for training"),
        ("flash", "local", "choose one of auto, sdpa, local, te"),
    ],
)
def test_attention_choice_refusals(requested: str, impl: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_attention(requested, impl)


def megatron_defaults(**overrides: object) -> Namespace:
    """The attributes check_args reads, at Megatron 0.19.2's defaults (argparse dests)."""
    values = {
        "transformer_impl": "transformer_engine", "gradient_accumulation_fusion": True,
        "no_persist_layer_norm": False, "sequence_parallel": False, "masked_softmax_fusion": True,
        "position_embedding_type": "learned_absolute", "apply_rope_fusion": True, "spec": None,
        "attention_backend": "auto", "reset_attention_mask": False, "sft": False,
        "dataloader_inter_document_masking": False, "hybrid_context_parallel": False,
        "mtp_num_layers": None, "sequence_packing_scheduler": None,
        "use_precision_aware_optimizer": False, "kit_msamp": "off", "kit_msamp_modules": "torch",
        "fp8": None, "kit_fp8_attention": False,
    }
    values.update(overrides)
    return Namespace(**values)


def test_megatron_defaults_fit_an_ngc_image() -> None:
    assert check_args(megatron_defaults(), "te", NGC) == []


def test_megatron_defaults_name_every_missing_flag_without_te_or_apex() -> None:
    problems = "\n".join(check_args(megatron_defaults(transformer_impl="local"), "local", NOTHING))
    for flag in ("--no-gradient-accumulation-fusion", "--no-persist-layer-norm",
                 "--no-masked-softmax-fusion"):
        assert flag in problems
    assert check_args(megatron_defaults(transformer_impl="local", gradient_accumulation_fusion=False,
                                        no_persist_layer_norm=True, masked_softmax_fusion=False),
                      "local", NOTHING) == []


@pytest.mark.parametrize(
    ("overrides", "attention", "message"),
    [
        ({"sequence_parallel": True}, "sdpa", "--sequence-parallel needs Transformer Engine or apex"),
        ({"position_embedding_type": "rope"}, "sdpa", "--no-rope-fusion"),
        ({"spec": ["local"]}, "sdpa", "--spec is not used"),
        ({"attention_backend": "flash"}, "sdpa", "leave it at auto"),
        ({"reset_attention_mask": True}, "sdpa", "--reset-attention-mask"),
        ({"sft": True}, "sdpa", "--sft is not supported"),
    ],
)
def test_refusals_without_te(overrides: dict, attention: str, message: str) -> None:
    args = megatron_defaults(transformer_impl="local", gradient_accumulation_fusion=False,
                             no_persist_layer_norm=True, **overrides)
    problems = check_args(args, attention, NOTHING)
    assert any(message in problem for problem in problems), problems


@pytest.mark.parametrize(("fp8", "attention", "refused"),
                         [("hybrid", "te", False), (None, "te", True), ("hybrid", "sdpa", True)])
def test_fp8_attention_needs_fp8_and_te_attention(fp8: str | None, attention: str, refused: bool) -> None:
    problems = check_args(megatron_defaults(kit_fp8_attention=True, fp8=fp8), attention, NGC)
    assert any("--kit-fp8-attention" in problem for problem in problems) == refused, problems


def test_the_precision_aware_optimizer_needs_te_and_not_msamp_o2() -> None:
    """--optimizer-states paper's flags: TE's FusedAdam must import, and MS-AMP O2 would replace it."""
    assert check_args(megatron_defaults(use_precision_aware_optimizer=True, kit_msamp="O1"), "te",
                      NGC) == []
    no_te = check_args(megatron_defaults(transformer_impl="local", gradient_accumulation_fusion=False,
                                         no_persist_layer_norm=True, use_precision_aware_optimizer=True),
                       "sdpa", NOTHING)
    assert ["Transformer Engine's FusedAdam" in problem for problem in no_te] == [True]
    o2 = check_args(megatron_defaults(use_precision_aware_optimizer=True, kit_msamp="O2"), "te", NGC)
    assert ["use --kit-msamp O1" in problem for problem in o2] == [True]


@pytest.mark.parametrize("requested", ["auto", "te"])
def test_te_modules_bring_te_attention_into_the_local_layers(requested: str) -> None:
    assert resolve_attention(requested, "local", "te") == "te"
    assert resolve_attention("auto", "local", "torch") == "sdpa"


@pytest.mark.parametrize("requested", ["sdpa", "local"])
def test_te_modules_refuse_another_attention(requested: str) -> None:
    with pytest.raises(ValueError, match=rf"--kit-attention {requested} with --kit-msamp-modules te: "
                       "the latter brings Transformer Engine's attention; drop --kit-attention"):
        resolve_attention(requested, "local", "te")


MSAMP_LOCAL = {"transformer_impl": "local", "gradient_accumulation_fusion": False,
               "no_persist_layer_norm": True, "kit_msamp": "O1", "kit_msamp_modules": "te"}


def test_te_modules_fit_an_msamp_image() -> None:
    """Transformer Engine (as in the kit's MS-AMP image) and --kit-msamp: nothing to refuse, the
    --attention-backend included (TE's attention reads it)."""
    te = Capabilities(transformer_engine=True, msamp=True)
    assert check_args(megatron_defaults(**MSAMP_LOCAL), "te", te) == []
    assert check_args(megatron_defaults(**MSAMP_LOCAL, attention_backend="flash"), "te", te) == []


@pytest.mark.parametrize(
    ("overrides", "caps", "message"),
    [
        ({"kit_msamp": "off"}, NGC, "--kit-msamp-modules te chooses the modules around MS-AMP's FP8 "
         "linears, and --kit-msamp is off: pass --kit-msamp O1 or O2, or drop --kit-msamp-modules."),
        ({}, NOTHING, "--kit-msamp-modules te builds Transformer Engine's TENorm and "
         "TEDotProductAttention, and Transformer Engine is not importable here: drop "
         "--kit-msamp-modules (torch's layer norm and SDPA attention) or use an image with it."),
        ({"fp8": "hybrid"}, NGC, "--fp8-format hybrid turns on Transformer Engine's fp8 autocast around "
         "TE's modules, and MS-AMP's linears are this run's FP8: drop --fp8-format."),
    ],
    ids=["without-msamp", "without-te", "with-a-te-fp8-recipe"],
)
def test_te_modules_refusals(overrides: dict, caps: Capabilities, message: str) -> None:
    problems = check_args(megatron_defaults(**{**MSAMP_LOCAL, **overrides}), "te", caps)
    assert problems == [message]


def test_te_modules_give_a_layer_spec_even_beside_te_attention() -> None:
    """Attention te with the local layers still needs the kit's spec (None would keep Megatron's)."""
    assert layer_spec_provider("te") is None
    assert callable(layer_spec_provider("te", fp8_linears=True, te_modules=True))
