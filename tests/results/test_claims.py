"""One figure per claim: a configuration's median with n, spread and CV, kit commits pooled unless
split, every ratio with its noise, hardware named from the records (caps included), TE-module
MS-AMP named as such; and the kept page free of the cases issue 48 found."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.records.record import Record
from bench.results import markdown
from bench.results.aggregate import build_report
from bench.results.data import Published
from bench.results.spread import Figure, Ratio, kit_commit, ratio_text
from bench.results.words import engine_words, hardware_words, layers
from tests.record_factory import make_record
from tests.results.test_results import FIXTURES, _fixture_args

BASE = make_record()
NO_PUBLISHED = Published({}, ())
PAGE = (Path(__file__).parents[2] / "results" / "README.md").read_text()


def _run(minute: int, tflops: float, commit: str, **fields) -> Record:
    metrics = {**BASE.metrics.model_dump(), "tflops_per_gpu": tflops, "mfu": tflops / 989.0}
    return make_record(run_id=f"13b_dp4_h200x4_20261121T20{minute:02d}00Z",
                       started_at=f"2026-11-21T20:{minute:02d}:00Z",
                       finished_at=f"2026-11-21T20:{minute + 5:02d}:00Z", metrics=metrics,
                       provenance={**BASE.provenance.model_dump(), "kit_commit": commit}, **fields)


def test_a_figure_is_the_median_with_its_count_and_spread() -> None:
    assert Figure.of([578.0, 587.1, 586.8]).text() == "586.8 (n=3, 578.0–587.1, CV 0.9 %)"
    # A true median: the mean of the middle two, said so.
    assert Figure.of([121.5, 163.4]).text() == "142.4 (n=2, mean of the middle two, 121.5–163.4, CV 20.8 %)"
    assert Figure.of([447.3]).text() == "447.3 (n=1)"


def test_a_ratio_carries_the_spread_between_runs_where_a_side_ran_twice() -> None:
    steady = [_run(10, 400.0, "a"), _run(20, 400.0, "a")]
    noisy = [_run(30, 300.0, "a"), _run(40, 600.0, "a")]
    ratio = Ratio.of(noisy, steady)
    assert ratio.value == pytest.approx(1.125) and not ratio.single  # medians 450 / 400
    # The between-run spread (stdev 212 / sqrt 2 = 150 on a mean of 450) dominates the step times'.
    assert ratio.noise == pytest.approx(2 * 1.125 * 150 / 450, rel=0.01)
    assert ratio.text() == "1.12 ± 0.75"


def test_a_ratio_is_drawn_between_headline_grade_sides_only() -> None:
    three = [_run(m, 400.0, "a") for m in (10, 20, 30)]
    other = [_run(m, 440.0, "a", precision="fp8-delayed") for m in (40, 50)]
    assert ratio_text(other, three) == "quick (n=2 / 3)"
    other.append(_run(35, 440.0, "a", precision="fp8-delayed"))
    assert ratio_text(other, three).startswith("1.10 ± ")


def test_kit_commits_share_a_row_unless_split_by_commit() -> None:
    runs = [_run(10, 450.0, "1111111aaaa"), _run(20, 470.0, "1111111aaaa"), _run(30, 380.0, "2222222bbbb")]
    apart = build_report(runs, (), NO_PUBLISHED, (), by_commit=True).measured_rows
    assert sorted((row.commits, row.figure.text()) for row in apart) == [
        ("kit 1111111", "460.0 (n=2, mean of the middle two, 450.0–470.0, CV 3.1 %)"),
        ("kit 2222222", "380.0 (n=1)")]
    (pooled,) = build_report(runs, (), NO_PUBLISHED, ()).measured_rows
    assert (pooled.commits, pooled.figure.text(), pooled.runs) == ("kits 1111111, 2222222",
                                                                   "450.0 (n=3, 380.0–470.0, CV 10.9 %)", 3)
    assert kit_commit(make_record(provenance={**BASE.provenance.model_dump(), "kit_commit": None})) == "unknown"


def test_results_by_commit_option_splits_the_rows(tmp_path: Path, capsys) -> None:
    shutil.copytree(FIXTURES / "records", tmp_path / "records")
    counts = []
    for extra in (["--by-commit"], []):
        assert main([*_fixture_args(tmp_path / "records", tmp_path), "--csv", *extra]) == 0
        rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        counts.append(len(rows))
        assert all(r["tflops_per_gpu_min"] <= r["tflops_per_gpu"] <= r["tflops_per_gpu_max"]
                   for r in rows if r["published"] == "False")
    assert counts[1] <= counts[0]


def test_te_module_ms_amp_is_named_te_modules_not_no_te() -> None:
    run = make_record(precision="msamp-o2", implementation="local", variant={"msamp_modules": "te"})
    assert layers(run) == "TE modules" and engine_words(run) == "megatron (TE modules)"
    assert layers(run.model_copy(update={"variant": {}})) == "no TE"


def test_a_capped_gpu_is_its_own_hardware_never_the_larger_gpus_best() -> None:
    capped = [_run(m, 600.0, "a", variant={"gpu_memory_cap_gb": "80"}) for m in (10, 20, 30)]
    full = [_run(m, 500.0, "a") for m in (40, 50, 51)]
    assert hardware_words(capped[0]) == hardware_words(full[0]) + " capped at 80 GB"
    report = build_report([*capped, *full], (), NO_PUBLISHED, ())
    assert len(report.best_rows) == 2
    page = markdown.render(markdown.Page(report, "records", runs=(*capped, *full)))
    best = page.split("## Best measured", 1)[1].split("\n## ", 1)[0]
    assert "capped at 80 GB | " in best


def test_a_cap_at_the_cards_nominal_memory_says_the_card_holds_more() -> None:
    h100 = make_record(platform={**BASE.platform.model_dump(), "accelerator": "h100-sxm"},
                       variant={"gpu_memory_cap_gb": 80})
    assert hardware_words(h100) == ("NVIDIA H100 SXM5 80GB capped at 80 GB (the card holds more "
                                    "than its nominal 80)")


def test_a_quick_row_is_never_a_best() -> None:
    report = build_report([_run(10, 600.0, "a"), _run(20, 610.0, "a")], (), NO_PUBLISHED, ())
    assert report.best_rows == [] and report.quick_rows == 1
    page = markdown.render(markdown.Page(report, "records"))
    assert "No configuration is headline grade yet." in page and "| quick |" in page


def test_the_kept_page_has_none_of_the_cases_issue_48_found() -> None:
    assert "campaign msamp-h100x2" not in PAGE  # a campaign's name never stands for hardware
    assert "no TE msamp_modules=te" not in PAGE and "(no TE) msamp_modules=te" not in PAGE
    # 345M bf16 TE on two H200s: four kit commits, one configuration, one row of four runs.
    bf16 = [line for line in PAGE.split("\n## 345M\n", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| local · H200 | megatron (TE) | bf16 | 1 | 2 |")]
    assert len(bf16) == 1 and "(n=4, mean of the middle two," in bf16[0]
    # Every precision ratio carries its noise, or says why it is not drawn.
    ratios = [line for line in PAGE.splitlines() if line.startswith("| × bf16, like for like |")]
    assert ratios and all(" ± " in cell or cell.startswith(("quick", "not like for like", "1 |", "1"))
                          for line in ratios for cell in line.split(" | ")[1:])
    # The best table's capped 2.7B msamp-o2 row is named capped, or an uncapped row is the best.
    best = PAGE.split("## Best measured", 1)[1].split("\n## ", 1)[0]
    for line in best.splitlines():
        if "gpu_memory_cap_gb=80" in line:
            assert "capped at 80 GB" in line


def test_time_plot_labels_are_distinct_and_fit_their_column() -> None:
    from bench.records.store import load_records
    from bench.results.profiles import LABEL_CHAR_IN, plan_time_plot, time_rows

    runs, _ = load_records(Path(__file__).parents[2] / "results" / "records")
    spec = plan_time_plot(time_rows(runs))
    labels = [label for label, _ in spec.bars]
    assert len(set(labels)) == len(labels) > 5  # five msamp-o2 bars once shared one label
    assert any("capped" in label or "kit " in label for label in labels)
    # The label column is sized from the longest label, so none starts left of the figure.
    assert 0.3 + LABEL_CHAR_IN * max(map(len, labels)) > 4.4


def test_a_scaling_line_joins_one_batch_per_gpu_only() -> None:
    from bench.results import plots

    def run(minute: int, gpus: int, gbs: int, tflops: float) -> Record:
        layout = {**BASE.layout.model_dump(), "name": f"dp{gpus}", "dp": gpus, "global_batch": gbs}
        record = _run(minute, tflops, "a")
        metrics = {**record.metrics.model_dump(),
                   "tokens_per_s_per_gpu": record.metrics.samples_per_s * 2048 / gpus}
        return make_record(**{**record.model_dump(), "gpus": gpus, "layout": layout, "metrics": metrics})

    # 16 a GPU at 1 and 2 GPUs: one line; 64 a GPU at 4 GPUs: another workload, no line of its own.
    report = build_report([run(10, 1, 16, 400.0), run(20, 2, 32, 390.0), run(30, 4, 256, 380.0)],
                          (), NO_PUBLISHED, ())
    (spec,) = plots.plan_plots(report)
    (series,) = spec.series
    assert series.gpus == (1, 2) and "16 a GPU" in series.label
