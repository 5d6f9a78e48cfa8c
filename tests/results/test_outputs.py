"""Results outputs beside the page: the CSV export, the best-row summary and GEMM ceilings."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.records.store import load_records
from bench.results import plots
from bench.results.aggregate import build_report
from bench.results.data import load_published, load_ranges
from bench.results.hardware import hardware_name, load_ceilings
from tests.record_factory import make_record, read_old_record
from tests.results.test_results import FIXTURES, SMOKE, _fixture_args


def test_csv_has_every_table_row_and_writes_nothing(tmp_path: Path, capsys) -> None:
    shutil.copytree(FIXTURES / "records", tmp_path / "records")
    assert main([*_fixture_args(tmp_path / "records", tmp_path), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["model"], r["layout"], r["published"]) for r in rows] == [
        ("1.3b", "tp1pp1", "False"), ("1.3b", "dp2", "False"), ("13b", "dp4", "False"),
        ("13b", "tp2pp2", "False"), ("13b", "", "True")]
    dp4 = rows[2]
    assert float(dp4["tflops_per_gpu"]) == 489.0 and dp4["runs"] == "3"
    assert dp4["accelerator"] == "H200 SXM" and dp4["check"] == "in range"
    assert rows[3]["check"] == "below range" and rows[4]["reference_tflops_per_gpu"] == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records"]


def _report():
    runs, problems = load_records(FIXTURES / "records")
    return build_report(runs, problems, load_published(FIXTURES / "published.toml"),
                        load_ranges(FIXTURES / "reference_ranges.toml"))


def test_best_rows_are_headline_grade_only() -> None:
    # 13b bf16 ran three times, 20 measured steps each: the one best; 1.3b ran fewer: quick.
    report = _report()
    assert [(r.model, r.precision, r.best_figure.median, r.best_figure.n) for r in report.best_rows] == [
        ("13b", "bf16", 489.0, 3)]
    assert report.quick_rows == len(report.measured_rows) - 1
    assert hardware_name(report.measured_rows[0].accelerator) == "NVIDIA H200 SXM 141GB"
    assert hardware_name("Some GPU") == "Some GPU"


def test_the_plot_draws_the_smoke_ceiling_of_its_gpu(tmp_path: Path) -> None:
    ceilings = load_ceilings(SMOKE)
    assert ceilings["h200-sxm"].tflops_per_gpu == pytest.approx(781.4359419816135)
    (spec,) = plots.plan_plots(_report(), ceilings)
    assert spec.ceiling == pytest.approx(781.4359419816135)
    assert "NVIDIA H200: 781.4 TFLOP/s (bf16, 2026-11-21" in spec.ceiling_source
    # Without a smoke report, or with a failed GEMM check, there is no line.
    assert plots.plan_plots(_report(), load_ceilings(tmp_path))[0].ceiling is None
    failed = json.loads((SMOKE / "2026-11-21-h200x1-smoke.json").read_text())
    failed["checks"]["gemm"]["ok"] = False
    (tmp_path / "x-smoke.json").write_text(json.dumps(failed))
    assert load_ceilings(tmp_path) == {}


def test_a_broken_smoke_report_exits_2_naming_it(tmp_path: Path, capsys) -> None:
    shutil.copytree(FIXTURES / "records", tmp_path / "records")
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "bad-smoke.json").write_text('{"schema": "other"}')
    args = _fixture_args(tmp_path / "records", tmp_path)
    args[args.index("--smoke") + 1] = str(tmp_path / "smoke")
    assert main(args) == 2
    assert "bad-smoke.json: schema is not 'bench.smoke/1'" in capsys.readouterr().err


def test_a_run_on_real_data_is_its_own_row() -> None:
    """Tokenized data (--data-path in argv) against the engine's mock data: never pooled."""
    mock = make_record()
    real = make_record(run_id="13b_dp4_h200x4_20261121T203000Z",
                       argv=[*mock.argv, "--data-path", "data/gpt2-0123_text_document"],
                       data={"kind": "real", "name": "gpt2-0123_text_document", "path_sha256": "2328e140b022fc02"})
    rows = build_report([mock, real], [], load_published(FIXTURES / "published.toml"),
                        []).measured_rows
    notes = "attention=sdpa"  # the factory's run: a variant setting
    assert sorted((r.runs, r.variant) for r in rows) == [(1, notes), (1, f"{notes}, data=real")]


def test_megatron_deepspeed_runs_of_another_patch_series_are_their_own_rows() -> None:
    """A run notes the sha256 of the patch series in its tree: another series is other code (the
    H200 1.3b went from 260 to 420 TFLOP/s with two patches), so runs of two series are never
    pooled, and a tree that lacked part of the series says so."""
    base = make_record()

    def with_series(run_id: str, state: str):  # as records before the patches field said it
        return read_old_record(run_id=run_id, engine="megatron-deepspeed",
                               engine_notes={**base.engine_notes, "patch_series": state})

    runs = [with_series("13b_dp4_h200x4_20261121T203000Z", "sha256:8fba20b3a947b3a4 applied"),
            with_series("13b_dp4_h200x4_20261121T203100Z", "sha256:7c5051a71637d60d applied"),
            with_series("13b_dp4_h200x4_20261121T203200Z", "sha256:7c5051a71637d60d NOT applied in "
                        "/opt/Megatron-DeepSpeed: series: 0012-x.patch is not applied")]
    rows = build_report(runs, [], load_published(FIXTURES / "published.toml"), []).measured_rows
    assert sorted(r.variant for r in rows) == [
        "attention=sdpa, patches=7c5051a7", "attention=sdpa, patches=7c5051a7 (not all applied)",
        "attention=sdpa, patches=8fba20b3"]
