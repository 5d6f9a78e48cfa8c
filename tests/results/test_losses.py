"""Loss curves: which runs are set side by side, the final loss, the page section and the PNG."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.cli import main
from bench.records.record import Record, data_info
from bench.records.store import load_records, write_record
from bench.results import loss_plot, losses, markdown, plots
from bench.results.aggregate import build_report
from bench.results.data import load_published
from bench.results.loss_plot import Curve, LossPlot, Treatment, moving_average
from bench.results.losses import difference, plan_losses
from tests.record_factory import make_record
from tests.results.test_results import FIXTURES, REPO, _fixture_args

BASE = make_record()
DATA = "/data/gpt2-0123456789abcdef_text_document"


def _data(path: str | None = DATA) -> dict[str, object]:
    """The record's ``data`` of a run on ``path`` (None: the engine's mock data)."""
    return data_info(path or "").model_dump()


def _logged(iters: int = 200, interval: int = 1) -> dict[str, object]:
    """A run of ``iters`` iterations logged every ``interval``: its losses and measured window."""
    logged = range(interval, iters + 1, interval)
    return {"lm_losses": _losses(3.0, len(logged)),
            "metrics": {**BASE.metrics.model_dump(), "window_iters": sum(i > 5 for i in logged)}}


def _losses(final: float, count: int = 200) -> tuple[float, ...]:
    """A falling curve whose last 50 losses average ``final``."""
    return (*(10.0 - i * 0.01 for i in range(count - 50)), *([final - 0.1, final + 0.1] * 25))


def _run(precision: str, minute: int, final: float = 3.0, **overrides: object) -> Record:
    logged = _logged()
    return make_record(**{"run_id": f"13b_dp4_h200x4_20261121T20{minute:02d}00Z",
                          "precision": precision, "started_at": f"2026-11-21T20:{minute:02d}:00Z",
                          "data": _data(), "lm_losses": _losses(final), "metrics": logged["metrics"],
                          **overrides})


def _batch(global_batch: int) -> dict[str, object]:
    return {**BASE.layout.model_dump(), "global_batch": global_batch}


def _shown(specs: list[LossPlot]) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(spec.filename, [(c.precision, c.run_id[-7:-3]) for c in spec.curves]) for spec in specs]


def test_runs_of_another_batch_are_another_group() -> None:
    runs = [_run("fp8-delayed", 1), _run("bf16", 2), _run("bf16", 3, layout=_batch(128)),
            _run("fp4", 4, layout=_batch(128)), _run("msamp-o1", 5, layout=_batch(256))]
    # Each group has bf16 first; a group of one precision (global batch 256) is no plot. Groups of
    # one model and accelerator are named by layout, then numbered where the layout is shared too.
    assert _shown(plan_losses(runs)) == [
        ("loss-13b-h200-sxm-dp4-1.png", [("bf16", "2002"), ("fp8-delayed", "2001")]),
        ("loss-13b-h200-sxm-dp4-2.png", [("bf16", "2003"), ("fp4", "2004")])]
    assert plan_losses(runs[::-1]) == plan_losses(runs)


@pytest.mark.parametrize("other", [
    {"data": _data("/data/gpt2-fedcba9876543210_text_document")},
    {"data": _data(None)},  # the engine's mock data
    _logged(iters=300),
    {"preset": {**BASE.preset.model_dump(), "seq_length": 4096},
     "metrics": {**BASE.metrics.model_dump(), "tokens_per_s_per_gpu": 9.3 * 4096 / 4}},
    {"platform": {**BASE.platform.model_dump(), "accelerator": "H100 SXM"}},
    {"variant": {"attention": "flash"}},
])
def test_runs_on_other_data_iterations_shape_accelerator_or_variant_are_not_compared(
        other: dict[str, object]) -> None:
    assert plan_losses([_run("bf16", 1), _run("fp8-delayed", 2, **other)]) == []


def test_the_accelerator_spelled_two_ways_is_one() -> None:
    named = {**BASE.platform.model_dump(), "accelerator": "h200-sxm"}
    (spec,) = plan_losses([_run("bf16", 1), _run("fp4", 2, platform=named)])
    assert spec.filename == "loss-13b-h200-sxm.png"


def test_every_run_of_a_treatment_is_kept_oldest_first_whatever_the_input_order() -> None:
    runs = [_run("bf16", 1), _run("fp8-delayed", 3), _run("fp8-delayed", 2), _run("bf16", 0),
            _run("bf16", 4)]
    (spec,) = plan_losses(runs)
    assert _shown([spec]) == [("loss-13b-h200-sxm.png", [
        ("bf16", "2000"), ("bf16", "2001"), ("bf16", "2004"),
        ("fp8-delayed", "2002"), ("fp8-delayed", "2003")])]
    assert [(t.label, t.runs) for t in spec.treatments] == [("bf16", 3), ("fp8-delayed", 2)]
    assert plan_losses(runs[::-1]) == plan_losses(runs)


def test_runs_started_together_are_ordered_by_run_id() -> None:
    twins = [_run("fp4", 2, run_id="13b_dp4_h200x4_20261121T200200Z-b"),
             _run("fp4", 2, run_id="13b_dp4_h200x4_20261121T200200Z-a")]
    (spec,) = plan_losses([*twins, _run("bf16", 1)])
    assert [c.run_id[-1] for c in spec.treatments[1].curves] == ["a", "b"]
    assert plan_losses([_run("bf16", 1), *twins[::-1]]) == [spec]


def test_two_runs_of_one_precision_are_no_group() -> None:
    assert plan_losses([_run("bf16", 1), _run("bf16", 2)]) == []


def test_runs_with_too_few_losses_or_not_ok_or_not_every_iteration_are_left_out() -> None:
    bf16 = _run("bf16", 1)
    assert plan_losses([_run("bf16", 1, **_logged(99)), _run("fp4", 2, **_logged(99))]) == []
    assert len(plan_losses([_run("bf16", 1, **_logged(100)), _run("fp4", 2, **_logged(100))])) == 1
    failed = _run("fp4", 2, status="crashed", reason="NaN loss", metrics=None)
    assert plan_losses([bf16, failed]) == []
    every_tenth = _logged(iters=2000, interval=10)  # 200 losses, but not one per iteration
    assert plan_losses([_run("bf16", 1, **every_tenth), _run("fp4", 2, **every_tenth)]) == []


def _treatment(label: str, *finals: float) -> Treatment:
    """A treatment of one run per final loss, each window alternating final ± 0.1."""
    return Treatment(label, tuple(Curve(label, f"{label}-{i}", _losses(final))
                                  for i, final in enumerate(finals)))


# The last 50 losses alternate final ± 0.1: standard deviation sqrt(50 * 0.01 / 49), so a window's
# standard error is that over sqrt(50), sqrt(0.01 / 49) = 0.1 / 7 = 0.0143.
WINDOW_ERROR = 0.1 / 7


def test_final_loss_is_the_mean_of_the_last_50_and_differences_are_against_the_baseline() -> None:
    baseline = Curve("bf16", "a", (9.0,) * 150 + (2.0, 4.0) * 25)
    other = Curve("fp4", "b", (1.0,) * 150 + (3.3,) * 50)
    assert baseline.final_loss == 3.0 and other.final_loss == pytest.approx(3.3)
    diff = difference(Treatment("fp4", (other,)), Treatment("bf16", (baseline,)))
    assert diff.absolute == pytest.approx(0.3) and diff.percent == pytest.approx(10.0)
    assert moving_average([1.0, 2.0, 3.0, 4.0], 2) == (1.5, 2.5, 3.5)


def test_a_treatment_has_the_mean_and_spread_of_its_runs_final_losses() -> None:
    bf16 = _treatment("bf16", 3.00, 3.02, 2.98)
    assert bf16.runs == 3 and bf16.final_losses == pytest.approx((3.00, 3.02, 2.98))
    assert bf16.final_loss == pytest.approx(3.00)
    assert bf16.spread == pytest.approx(0.02)  # sample standard deviation: n - 1
    # the windows are independent: the mean's window error is sqrt(3 e²) / 3 = e / sqrt(3)
    assert bf16.window_error == pytest.approx(WINDOW_ERROR / math.sqrt(3))
    once = _treatment("fp4", 3.1)
    assert once.spread is None and once.window_error == pytest.approx(WINDOW_ERROR)


def test_the_difference_of_repeated_treatments_takes_its_error_from_the_spread_between_runs() -> None:
    bf16, fp4 = _treatment("bf16", 3.00, 3.02, 2.98), _treatment("fp4", 3.10, 3.04)
    diff = difference(fp4, bf16)
    assert diff.absolute == pytest.approx(0.07) and diff.percent == pytest.approx(7 / 3)
    # s_fp4 = 0.06 / sqrt(2), s_bf16 = 0.02: sqrt(s_fp4² / 2 + s_bf16² / 3)
    assert diff.error == pytest.approx(math.sqrt(0.0018 / 2 + 0.0004 / 3))
    assert not diff.floor


@pytest.mark.parametrize("finals", [((3.0,), (3.06,)), ((3.0, 3.02, 2.98), (3.06,)),
                                    ((3.0,), (3.06, 3.1))])
def test_with_one_run_on_either_side_the_error_is_the_windows_floor(
        finals: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    bf16, other = _treatment("bf16", *finals[0]), _treatment("msamp-o2", *finals[1])
    diff = difference(other, bf16)
    assert diff.floor
    assert diff.error == pytest.approx(math.hypot(bf16.window_error, other.window_error))


def _section(runs: list[Record]) -> str:
    report = build_report(runs, [], load_published(FIXTURES / "published.toml"), [])
    page = markdown.render(markdown.Page(report, "records", losses=tuple(plan_losses(runs))))
    return page[page.index("## Loss curves"):page.index("## Failed runs")]


def test_the_page_tables_final_losses_against_bf16() -> None:
    section = _section([_run("bf16", 1, final=3.0), _run("fp4", 2, final=2.97),
                        _run("msamp-o2", 3, final=3.06)])
    assert "![13B dp4, NVIDIA H200 SXM 141GB: lm loss per iteration by precision (micro/global " \
           "batch 1/64, 200 iterations)](plots/loss-13b-h200-sxm.png)" in section
    assert ("Shared: 13B (40 layers, hidden 5120, 40 heads, sequence 2048, vocabulary 51200), "
            "megatron dp4, micro/global batch 1/64, 200 iterations, data "
            "`gpt2-0123456789abcdef_text_document`, NVIDIA H200 SXM 141GB, attention=sdpa.") in section
    # one run each: the difference's error is the windows' floor, 0.1 / 7 * sqrt(2) = 0.0202, so
    # +0.06 is +3.0 standard errors and -0.03 is -1.5
    assert ("| precision | runs | final loss of each run | mean final loss | s.d. between runs "
            "| s.e. in window | vs bf16 | ± s.e. | vs bf16 (%) | difference / s.e. | iterations "
            "| loss check |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
            "| bf16 | 1 | [3.0000](records/13b_dp4_h200x4_20261121T200100Z.json) | 3.0000 | – | 0.0143 "
            "| – | – | – | – | 200 | – |\n"
            "| msamp-o2 | 1 | [3.0600](records/13b_dp4_h200x4_20261121T200300Z.json) | 3.0600 | – | 0.0143 "
            "| +0.0600 | 0.0202 (floor) | +2.00 % | +3.0 | 200 "
            "| **worse by more than 1 %** (quick: mock data or under 300 steps) |\n"
            "| fp4 | 1 | [2.9700](records/13b_dp4_h200x4_20261121T200200Z.json) | 2.9700 | – | 0.0143 "
            "| -0.0300 | 0.0202 (floor) | -1.00 % | -1.5 | 200 "
            "| within 1 % (quick: mock data or under 300 steps) |\n\n"
            "`final loss of each run`: the mean `lm loss` of its last 50 iterations") in section
    assert "within about ±2 it is noise" in section
    assert ("Every precision here ran once: each error is the windows' floor, and a difference smaller "
            "than the spread between repeated runs of one precision is not resolved.") in section
    assert "no bf16 run" not in section


def test_the_page_tables_each_treatments_runs_mean_and_spread() -> None:
    section = _section([_run("bf16", 1, final=3.0), _run("bf16", 4, final=3.02),
                        _run("bf16", 5, final=2.98), _run("fp4", 2, final=3.10),
                        _run("fp4", 6, final=3.04), _run("msamp-o2", 3, final=3.06)])
    # bf16: mean 3.00, s.d. 0.02, window error 0.1 / 7 / sqrt(3) = 0.0082. fp4 against it: +0.07,
    # between runs sqrt((0.06 / sqrt(2))² / 2 + 0.02² / 3) = 0.0321, +2.2 errors. msamp-o2 ran once:
    # the floor sqrt(0.0143² + 0.0082²) = 0.0165, +3.6 errors.
    assert ("| bf16 | 3 | [3.0000](records/13b_dp4_h200x4_20261121T200100Z.json), "
            "[3.0200](records/13b_dp4_h200x4_20261121T200400Z.json), "
            "[2.9800](records/13b_dp4_h200x4_20261121T200500Z.json) | 3.0000 | 0.0200 | 0.0082 "
            "| – | – | – | – | 200 | – |\n"
            "| msamp-o2 | 1 | [3.0600](records/13b_dp4_h200x4_20261121T200300Z.json) | 3.0600 | – | 0.0143 "
            "| +0.0600 | 0.0165 (floor) | +2.00 % | +3.6 | 200 "
            "| **worse by more than 1 %** (quick: mock data or under 300 steps) |\n"
            "| fp4 | 2 | [3.1000](records/13b_dp4_h200x4_20261121T200200Z.json), "
            "[3.0400](records/13b_dp4_h200x4_20261121T200600Z.json) | 3.0700 | 0.0424 | 0.0101 "
            "| +0.0700 | 0.0321 | +2.33 % | +2.2 | 200 "
            "| **worse by more than 1 %** (quick: mock data or under 300 steps) |\n") in section
    assert ("the windows' errors combined, marked `(floor)`: the true error is larger.") in section
    assert ("Runs of one precision here differ by up to 0.0600 in final loss, against a run's window "
            "error of at most 0.0143: a precision that ran once has only that floor as its "
            "uncertainty, and a difference smaller than the spread between runs is not "
            "resolved.") in section


def test_without_bf16_the_differences_are_blank() -> None:
    section = _section([_run("fp8-delayed", 1, final=3.0), _run("fp4", 2, final=2.97)])
    assert "| 3.0000 | – | 0.0143 |  |  |  |  | 200 |" in section  # fp8-delayed
    assert "| 2.9700 | – | 0.0143 |  |  |  |  | 200 |" in section  # fp4
    assert "This group has no bf16 run: its differences are blank." in section


def test_no_group_no_section() -> None:
    assert "## Loss curves" not in markdown.render(markdown.Page(
        build_report([_run("bf16", 1)], [], load_published(FIXTURES / "published.toml"), []),
        "records", losses=tuple(plan_losses([_run("bf16", 1)]))))


def test_the_loss_plot_is_drawn_with_its_inputs_key(tmp_path: Path) -> None:
    for run in (_run("bf16", 1), _run("fp8-delayed", 2)):
        write_record(tmp_path / "records", run)
    assert main(_fixture_args(tmp_path / "records", tmp_path)) == 0
    png = (tmp_path / "plots" / "loss-13b-h200-sxm.png").read_bytes()
    (spec,) = plan_losses(load_records(tmp_path / "records")[0])
    assert plots.png_text(png)[plots.KEY_CHUNK] == plots.inputs_key(spec)
    assert "](plots/loss-13b-h200-sxm.png)" in (tmp_path / "README.md").read_text()


def test_the_legend_names_each_treatment_once_with_its_runs_and_mean() -> None:
    assert loss_plot._legend_label(_treatment("msamp-o2, fp8-shared-scale reduction", 3.3633, 3.4445)) == (
        "msamp-o2, fp8-shared-scale reduction: 2 runs, mean final 3.404")
    assert loss_plot._legend_label(_treatment("bf16", 3.5147)) == "bf16: 1 run, final 3.515"
    # a treatment's first run solid, its repeats in other styles (dashed marks final losses), and a
    # key to those styles only for the repeats the plot has
    styles = [loss_plot._style(j) for j in range(4)]
    assert styles[0] == "-" and "--" not in styles and len(set(styles[:3])) == 3
    assert loss_plot._repeat_keys([_treatment("bf16", 3.0), _treatment("fp4", 3.0)]) == []
    assert [label for _, label in loss_plot._repeat_keys([_treatment("bf16", 3.0, 3.0, 3.0, 3.0)])] == [
        "a treatment's run 2", "a treatment's run 3 and later"]


def test_the_campaign_records_give_a_group_of_five_precisions_and_one_of_the_fp8_reduction() -> None:
    """On two GPUs, MS-AMP's FP8 reduction in time (before patch 0008) and delayed (since)."""
    runs, _ = load_records(REPO / "results" / "records")
    one_gpu, two_gpus = (plot for plot in plan_losses(runs) if plot.filename.startswith("loss-345m"))
    assert one_gpu.filename == "loss-345m-h200-sxm-tp1pp1dp1.png"
    assert [(c.precision, c.run_id.rsplit("_", 1)[1], len(c.losses)) for c in one_gpu.curves] == [
        ("bf16", "20261125T055505Z", 500), ("fp8-delayed", "20261125T055846Z", 500),
        ("msamp-o1", "20261125T060242Z", 500), ("msamp-o2", "20261125T061248Z", 500),
        ("fp4", "20261125T061802Z", 500)]
    assert two_gpus.filename == "loss-345m-h200-sxm-tp1pp1dp2.png"
    assert [(t.label, t.runs, len(t.curves[0].losses)) for t in two_gpus.treatments] == [
        ("bf16", 4, 500), ("msamp-o2, delayed scaling, fp8-shared-scale reduction", 2, 500),
        ("msamp-o2, fp8-shared-scale reduction", 3, 500)]


def test_the_campaign_records_repeat_the_345m_dp2_runs_by_more_than_a_windows_error() -> None:
    """bf16 four times, MS-AMP O2 with the FP8 reduction three times in time and twice delayed."""
    runs, _ = load_records(REPO / "results" / "records")
    bf16, delayed, in_time = next(plot for plot in plan_losses(runs)
                                  if plot.filename == "loss-345m-h200-sxm-tp1pp1dp2.png").treatments
    assert [c.run_id.split("_")[-1] for c in bf16.curves] == [
        "20261126T002058Z-0af0fb-c5", "20261126T031927Z-9c9311-c5", "20261126T055540Z-3f5222-c5",
        "20261126T114815Z-b27eba-c5"]
    assert bf16.final_losses == pytest.approx((3.3661, 3.3569, 3.3796, 3.4335), abs=5e-5)
    assert in_time.final_losses == pytest.approx((3.3633, 3.4445, 3.4106), abs=5e-5)
    assert delayed.final_losses == pytest.approx((3.4620, 3.3702), abs=5e-5)
    assert [round(t.final_loss, 4) for t in (bf16, in_time, delayed)] == [3.3840, 3.4061, 3.4161]
    # two runs of one treatment differ by more than their windows' errors add up to
    assert max(in_time.final_losses) - min(in_time.final_losses) > 2 * max(
        c.final_loss_error for c in in_time.curves)
    diff = difference(in_time, bf16)
    assert not diff.floor and diff.error == pytest.approx(
        math.sqrt(in_time.spread ** 2 / 3 + bf16.spread ** 2 / 4))


def test_msamp_scaling_away_from_the_default_is_a_curve_of_its_own() -> None:
    delayed = {**BASE.variant, "msamp_scaling": "delayed"}
    runs = [_run("bf16", 1), _run("msamp-o2", 2), _run("msamp-o2", 3, variant=delayed)]
    assert _shown(plan_losses(runs)) == [("loss-13b-h200-sxm.png", [
        ("bf16", "2001"), ("msamp-o2", "2002"), ("msamp-o2, delayed scaling", "2003")])]


def test_an_fp8_gradient_reduction_is_set_beside_bf16_and_named() -> None:
    fp8 = {**BASE.variant, "grad_reduce": "fp8-shared-scale", "overlap": "off"}
    runs = [_run("bf16", 1), _run("msamp-o2", 2, variant=fp8), _run("bf16", 3, variant=fp8)]
    assert _shown(plan_losses(runs)) == [("loss-13b-h200-sxm.png", [
        ("bf16", "2001"), ("bf16, fp8-shared-scale reduction", "2003"),
        ("msamp-o2, fp8-shared-scale reduction", "2002")])]
    # Another reduction that is not FP8 (fp32 buffers) still shapes the curve: no group.
    assert plan_losses([_run("bf16", 1), _run("fp8-delayed", 2, variant={**BASE.variant, "grad_reduce": "fp32"})]) == []


def test_the_final_loss_carries_its_standard_error() -> None:
    curve = plan_losses([_run("bf16", 1), _run("fp4", 2, final=2.97)])[0].curves[0]
    assert curve.final_loss_error == pytest.approx(math.sqrt(50 * 0.01 / 49) / math.sqrt(50))


def test_recipes_have_their_loss_checks_beside_bf16_on_real_data() -> None:
    """1.3b on one H200, 300 steps on the GPT-2 BPE corpus, 2026-11-29: dropout 0, fp8 and fp8 on
    the paper's optimizer states, each drawn and tabled beside bf16 (the kit's layers' run and
    Transformer Engine's), every one a loss check within 1 % of it."""
    runs, _ = load_records(REPO / "results" / "records")
    check = next(plot for plot in plan_losses(runs) if plot.filename == "loss-1.3b-h200-sxm.png")
    assert [(t.label, [c.run_id for c in t.curves]) for t in check.treatments] == [
        ("bf16", ["1.3b_tp1pp1dp1_local_20261129T030935Z-dbe866", "1.3b_tp1pp1dp1_local_20261129T093803Z-86aae8"]),
        ("bf16, dropout 0", ["1.3b_tp1pp1dp1_local_20261129T031208Z-a0f3f5"]),
        ("fp8-delayed", ["1.3b_tp1pp1dp1_local_20261129T094041Z-3617e2"]),
        ("fp8-delayed, optimizer states paper-kit", ["1.3b_tp1pp1dp1_local_20261129T094319Z-10fafe"])]
    section = "\n".join(losses.section([check], "records"))
    # real data and 300 steps: loss checks, not quick
    assert section.count("| 300 | within 1 % |") == 3 and "quick" not in section


def test_attention_in_fp8_is_a_treatment_beside_the_plain_precision() -> None:
    """Its loss check sets a run with --kit-fp8-attention beside bf16 and plain fp8 of the same
    setup; another Megatron flag still sets curves apart."""
    fp8_args = {"argv": [*BASE.argv, "--kit-fp8-attention"],
                "variant": {**BASE.variant, "megatron_args": "--kit-fp8-attention"}}
    other = {"argv": [*BASE.argv, "--manual-gc"], "variant": {**BASE.variant, "megatron_args": "--manual-gc"}}
    (spec,) = plan_losses([_run("bf16", 1), _run("fp8-delayed", 2), _run("fp8-delayed", 3, **fp8_args)])
    assert [(c.precision, c.run_id[-7:-3]) for c in spec.curves] == [
        ("bf16", "2001"), ("fp8-delayed", "2002"), ("fp8-delayed, FP8 attention", "2003")]
    assert plan_losses([_run("bf16", 1), _run("fp8-delayed", 2, **other)]) == []
    both = {"argv": [*BASE.argv, "--manual-gc", "--kit-fp8-attention"],
            "variant": {**BASE.variant, "megatron_args": "--manual-gc --kit-fp8-attention"}}
    (apart,) = plan_losses([_run("bf16", 1, **other), _run("fp8-delayed", 2, **both)])
    assert [c.precision for c in apart.curves] == ["bf16", "fp8-delayed, FP8 attention"]
