"""Bar labels say what made the number: Megatron-Core's layers, or Megatron-DeepSpeed."""

from __future__ import annotations

from bench.results import plots
from bench.results.aggregate import build_report
from bench.results.data import load_published
from tests.record_factory import make_record
from tests.results.test_results import FIXTURES


def _labels(*records) -> list[str]:
    report = build_report(list(records), [], load_published(FIXTURES / "published.toml"), [])
    (spec,) = plots.plan_plots(report)
    return [bar.label for bar in spec.bars]


def test_megatron_deepspeed_bars_are_labelled_by_engine() -> None:
    core = make_record(run_id="1.3b_dp2_h100x2_20261125T220306Z")
    mds = make_record(run_id="1.3b_dp2_h100x2_20261125T220401Z", engine="megatron-deepspeed")
    labels = _labels(core, mds)
    assert sum("Megatron-DeepSpeed" in label for label in labels) == 1
    assert not any("Megatron-DeepSpeed" in label for label in _labels(core))
