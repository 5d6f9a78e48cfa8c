"""One figure per claim: a configuration's median with n and spread, kit commits apart unless
pooled, every ratio with its noise, hardware named from the records (caps included), TE-module
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
from bench.results.spread import Figure, Ratio, kit_commit
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
    assert Figure.of([578.0, 587.1, 586.8]).text() == "586.8 (n=3, 578.0–587.1)"
    assert Figure.of([121.5, 163.4]).text() == "121.5 (n=2, 121.5–163.4)"  # the lower median: a run's
    assert Figure.of([447.3]).text() == "447.3 (n=1)"


def test_a_ratio_carries_the_spread_between_runs_where_a_side_ran_twice() -> None:
    steady = [_run(10, 400.0, "a"), _run(20, 400.0, "a")]
    noisy = [_run(30, 300.0, "a"), _run(40, 500.0, "a")]
    ratio = Ratio.of(noisy, steady)
    assert ratio.value == pytest.approx(0.75) and not ratio.single
    # The between-run spread (stdev 141 / sqrt 2 = 100 on a mean of 400) dominates the step times'.
    assert ratio.noise == pytest.approx(2 * 0.75 * 100 / 400, rel=0.01)
    assert ratio.text() == "0.75 ± 0.38"


def test_kit_commits_are_rows_of_their_own_unless_pooled() -> None:
    runs = [_run(10, 450.0, "1111111aaaa"), _run(20, 470.0, "1111111aaaa"), _run(30, 380.0, "2222222bbbb")]
    apart = build_report(runs, (), NO_PUBLISHED, ()).measured_rows
    assert sorted((row.commits, row.figure.text()) for row in apart) == [
        ("kit 1111111", "450.0 (n=2, 450.0–470.0)"), ("kit 2222222", "380.0 (n=1)")]
    (pooled,) = build_report(runs, (), NO_PUBLISHED, (), pool_commits=True).measured_rows
    assert (pooled.commits, pooled.figure.text(), pooled.runs) == ("kits 1111111, 2222222",
                                                                   "450.0 (n=3, 380.0–470.0)", 3)
    assert kit_commit(make_record(provenance={**BASE.provenance.model_dump(), "kit_commit": None})) == "unknown"


def test_results_pool_commits_option_pools_the_rows(tmp_path: Path, capsys) -> None:
    shutil.copytree(FIXTURES / "records", tmp_path / "records")
    counts = []
    for extra in ([], ["--pool-commits"]):
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
    capped = _run(10, 600.0, "a", variant={"gpu_memory_cap_gb": "80"})
    full = _run(20, 500.0, "a")
    assert hardware_words(capped) == hardware_words(full) + " capped at 80 GB"
    report = build_report([capped, full], (), NO_PUBLISHED, ())
    assert len(report.best_rows) == 2
    page = markdown.render(markdown.Page(report, "records", runs=(capped, full)))
    best = page.split("## Best measured", 1)[1].split("\n## ", 1)[0]
    assert "capped at 80 GB | " in best


def test_the_kept_page_has_none_of_the_cases_issue_48_found() -> None:
    assert "campaign msamp-h100x2" not in PAGE  # a campaign's name never stands for hardware
    assert "no TE msamp_modules=te" not in PAGE and "(no TE) msamp_modules=te" not in PAGE
    # 345M bf16 TE on two H200s: four kit commits, four rows of one run each, not one median.
    bf16 = [line for line in PAGE.split("\n## 345M\n", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| local · H200 | megatron (TE) | bf16 | 1 | 2 |")]
    assert len(bf16) == 4 and all("(n=1)" in line for line in bf16)
    # Every precision ratio carries its noise.
    ratios = [line for line in PAGE.splitlines() if line.startswith("| × bf16 |")]
    assert ratios and all(" ± " in cell for line in ratios for cell in line.split(" | ")[2:])
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
