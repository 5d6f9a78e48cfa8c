"""--msamp-modules te: Transformer Engine's layer norm and attention around MS-AMP's FP8 linears, as a
run option: parsed, a campaign key, passed to the entry as --kit-msamp-modules on the local layers,
a variant the results page and ``bench compare`` keep apart, and refused before anything runs where
no MS-AMP linear runs, on another engine, or without Transformer Engine. The entry's side:
tests/train/test_spec.py and tests/train/test_msamp_te_modules.py; Megatron's validator on these
plans: test_megatron_args.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.precisions import MSAMP_PRECISIONS
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.planning.tuning import DEFAULT_TUNING, Tuning
from bench.records.build import plan_summary
from bench.results.compare import select
from tests.conftest import options
from tests.planning.msamp_options import check_option_and_campaign_key
from tests.record_factory import make_record

MSAMP_IMAGE = "ghcr.io#megatron-bench-kit/cuda:msamp"  # what `images build cuda --option msamp=1` pushes
TE_MODULES = Tuning(msamp_modules="te")


def _plan(precision: str, tuning: Tuning = DEFAULT_TUNING, **extra: object):
    msamp = {"image": MSAMP_IMAGE, "image_msamp": True} if precision in MSAMP_PRECISIONS else {}
    return plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h200"),
                options(nodes=1, precision=precision, tuning=tuning, **msamp, **extra))


def test_the_option_parses_and_is_a_campaign_key(tmp_path: Path) -> None:
    check_option_and_campaign_key(tmp_path, "msamp_modules", "te", "torch", "apex")


@pytest.mark.parametrize("precision", ["msamp-o1", "msamp-o2", "fp4"])
def test_te_modules_pass_the_entry_flag_on_the_local_layers(precision: str) -> None:
    """The layers stay megatron-core's local ones (MS-AMP's linears need them); the entry swaps in
    TE's norm and attention. The default passes nothing and is no variant."""
    default, te = _plan(precision), _plan(precision, TE_MODULES)
    args = " ".join(te.train_args)
    assert "--kit-msamp-modules te" in args and "--transformer-impl local" in args
    assert "--kit-msamp " in args and "--fp8-format" not in args
    assert "--kit-msamp-modules" not in default.train_args and default.variant == ()
    assert te.variant == (("msamp_modules", "te"),)
    assert plan_summary(te).variant == {"msamp_modules": "te"}
    assert dict(te.env) == dict(default.env)  # the argv alone carries it


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8-delayed", "fp8-current"])
def test_te_modules_are_refused_where_no_msamp_runs(precision: str) -> None:
    with pytest.raises(ValueError, match=rf"--msamp-modules te with --precision {precision}: .*runs no "
                       r"MS-AMP .*use --precision msamp-o1, msamp-o2, fp4, or drop --msamp-modules"):
        _plan(precision, TE_MODULES)


def test_te_modules_are_refused_on_megatron_deepspeed() -> None:
    with pytest.raises(ValueError, match=r"--msamp-modules te builds Transformer Engine's layer norm .*"
                       r"use --engine megatron, or drop --msamp-modules"):
        _plan("msamp-o2", TE_MODULES, engine="megatron-deepspeed")


def test_te_modules_are_refused_without_transformer_engine() -> None:
    """Declared by the platform or detected in this Python: the refusal says which."""
    with pytest.raises(ValueError, match=r"--msamp-modules te builds Transformer Engine's layer norm "
                       r"and attention, and this environment has no Transformer Engine \(detected in "
                       r"this Python\): use an image with it, or drop --msamp-modules"):
        plan(get_preset("345m"), "tp1pp1", load_platform("local"),
             options(gpus=1, gpus_present=1, precision="msamp-o1", tuning=TE_MODULES,
                     capabilities=Capabilities(msamp=True)))
    local_te = plan(get_preset("345m"), "tp1pp1", load_platform("local"),
                    options(gpus=1, gpus_present=1, precision="msamp-o1", tuning=TE_MODULES,
                            capabilities=Capabilities(transformer_engine=True, msamp=True)))
    assert "--kit-msamp-modules" in local_te.train_args


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="--msamp-modules apex: use one of torch, te"):
        Tuning(msamp_modules="apex")


def test_te_modules_runs_are_kept_apart_from_the_default() -> None:
    default = make_record(precision="msamp-o2")
    te = make_record(run_id="13b_dp4_h200x4_20261121T210000Z", precision="msamp-o2",
                     started_at="2026-11-21T21:00:00Z", finished_at="2026-11-21T21:10:00Z",
                     variant={"msamp_modules": "te"})
    records = [default, te]
    assert [r.run_id for r in select(records, "model=13b precision=msamp-o2").runs] == [default.run_id]
    chosen = select(records, "model=13b precision=msamp-o2 msamp_modules=te").runs
    assert [r.run_id for r in chosen] == [te.run_id]
