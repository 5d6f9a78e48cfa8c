"""--msamp-scaling: MS-AMP's FP8 linear scaling (MSAMP_FP8_SCALING, patch 0008) as a run option:
parsed, a campaign key, put into the run's environment and recorded, a variant the results page and
``bench compare`` keep apart, and refused where no MS-AMP runs. In time by default; a record written
while delayed was the default reads as a delayed variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.precisions import MSAMP_PRECISIONS
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.planning.tuning import DEFAULT_TUNING, Tuning
from bench.results.aggregate import configuration
from bench.results.compare import select
from tests.conftest import options
from tests.planning.msamp_options import check_env_variant, check_option_and_campaign_key
from tests.record_factory import make_record, read_old_record, record_fields

MSAMP_IMAGE = "ghcr.io#megatron-bench-kit/cuda:msamp"  # what `images build cuda --option msamp=1` pushes
DELAYED = Tuning(msamp_scaling="delayed")


def _plan(precision: str, tuning: Tuning = DEFAULT_TUNING):
    msamp = {"image": MSAMP_IMAGE, "image_msamp": True} if precision in MSAMP_PRECISIONS else {}
    return plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h200"),
                options(nodes=1, precision=precision, tuning=tuning, **msamp))


def test_the_option_parses_and_is_a_campaign_key(tmp_path: Path) -> None:
    check_option_and_campaign_key(tmp_path, "msamp_scaling", "delayed", "in-time", "late")


@pytest.mark.parametrize("precision", ["msamp-o1", "msamp-o2", "fp4"])
def test_msamp_precisions_record_their_scaling_in_the_env(precision: str) -> None:
    """Set at the default too, so the record says what ran; delayed makes the run a variant."""
    default, delayed = _plan(precision), _plan(precision, DELAYED)
    assert dict(default.env)["MSAMP_FP8_SCALING"] == "in-time" and default.variant == ()
    check_env_variant(default, delayed, "MSAMP_FP8_SCALING", "delayed", "msamp_scaling", "delayed")


@pytest.mark.parametrize("precision", ["bf16", "fp8-delayed", "fp8-current"])
def test_other_precisions_set_no_msamp_scaling(precision: str) -> None:
    assert "MSAMP_FP8_SCALING" not in dict(_plan(precision).env)


@pytest.mark.parametrize("precision", ["bf16", "fp8-delayed", "fp16"])
def test_delayed_is_refused_where_no_msamp_runs(precision: str) -> None:
    with pytest.raises(ValueError, match=rf"--msamp-scaling delayed with --precision {precision}: .*"
                       r"runs no MS-AMP; use --precision msamp-o1, msamp-o2, fp4, or drop --msamp-scaling"):
        _plan(precision, DELAYED)


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="--msamp-scaling late: use one of delayed, in-time"):
        Tuning(msamp_scaling="late")


def test_delayed_runs_are_kept_apart_from_the_default(tmp_path: Path) -> None:
    """The results page pools by configuration, ``bench compare`` by selector: delayed is neither
    the default's configuration nor taken by a selector that does not name it."""
    default = make_record(precision="msamp-o2", env={"MSAMP_FP8_SCALING": "in-time"})
    delayed = make_record(run_id="13b_dp4_h200x4_20261121T210000Z", precision="msamp-o2",
                          started_at="2026-11-21T21:00:00Z", finished_at="2026-11-21T21:10:00Z",
                          env={"MSAMP_FP8_SCALING": "delayed"}, variant={"msamp_scaling": "delayed"})
    assert configuration(default) != configuration(delayed)
    records = [default, delayed]
    assert [r.run_id for r in select(records, "model=13b precision=msamp-o2").runs] == [default.run_id]
    chosen = select(records, "model=13b precision=msamp-o2 msamp_scaling=delayed").runs
    assert [r.run_id for r in chosen] == [delayed.run_id]


@pytest.mark.parametrize(("variant", "env", "commit", "read_as"), [
    ({}, {"MSAMP_FP8_SCALING": "delayed"}, None, {"msamp_scaling": "delayed"}),  # delayed was the default
    ({"msamp_scaling": "in-time"}, {"MSAMP_FP8_SCALING": "in-time"}, None, {}),  # in time was a variant
    ({}, {}, "86553d5548e26cbc3fd0e1b4a8c1c0e2d6f4b9a1", {"msamp_scaling": "delayed"}),  # 0008, no env
    ({}, {}, "fab02e98e8c3cacdc3fea9fa117b87f41e012fbe", {}),  # before 0008: in time
    ({"grad_reduce": "fp8-shared-scale"}, {"MSAMP_FP8_SCALING": "delayed"}, None,
     {"grad_reduce": "fp8-shared-scale", "msamp_scaling": "delayed"}),
])
def test_records_read_their_scaling_against_todays_default(variant, env, commit, read_as) -> None:
    """Whatever the default was when a run ran, its record reads as a variant of today's."""
    provenance = {**record_fields()["provenance"], "kit_commit": commit or "0123abc"}
    record = read_old_record(precision="msamp-o2", env=env, variant=variant, provenance=provenance)
    assert record.variant == read_as


def test_other_precisions_keep_their_variant() -> None:
    record = make_record(precision="fp8-delayed", variant={"grad_reduce": "fp32"})
    assert record.variant == {"grad_reduce": "fp32"}
