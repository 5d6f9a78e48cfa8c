"""The layer-spec / attention choice and the environment checks, as pure functions."""

from __future__ import annotations

from argparse import Namespace

import pytest

from bench.config.capabilities import Capabilities
from bench.train.spec import check_args, resolve_attention

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
        "use_precision_aware_optimizer": False, "kit_msamp": "off",
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
