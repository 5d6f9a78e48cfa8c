"""Rows of local runs name the GPU they ran on (``local · H200``): on the page, in the failed-runs
table and in the plots, from the record's GPU name, old records included."""

from __future__ import annotations

from pathlib import Path

from bench.records.record import build_record
from bench.records.store import write_record
from bench.results.generate import generate
from bench.results.runs import platform_label
from tests.record_factory import failed_fields, record_fields

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "results"


def _local(run_id: str, gpu: str, **overrides) -> dict:
    fields = record_fields(run_id=run_id, **overrides)
    fields["platform"] = {**fields["platform"], "name": "local"}
    fields["provenance"] = {**fields["provenance"], "gpu_model": gpu}
    return fields


def test_label_names_the_gpu_of_local_runs_only() -> None:
    assert platform_label("local", "NVIDIA H200") == "local · H200"
    assert platform_label("local", "NVIDIA H100 80GB HBM3") == "local · H100 80GB HBM3"
    assert platform_label("local", "AMD Instinct MI250X") == "local · Instinct MI250X"
    assert platform_label("local", None) == "local"
    assert platform_label("azure-h200", "NVIDIA H200") == "azure-h200"


def test_page_and_plots_name_the_gpu(tmp_path: Path) -> None:
    records = tmp_path / "records"
    write_record(records, build_record(**_local("13b_dp4_local_20261121T201500Z", "NVIDIA H200")))
    write_record(records, build_record(**_local("13b_dp4_local_20261121T201600Z",
                                                "NVIDIA H100 80GB HBM3")))
    oom = _local("13b_dp4_local_20261121T203000Z", "NVIDIA H200")
    write_record(records, build_record(**failed_fields(**{k: oom[k] for k in (
        "run_id", "platform", "provenance")})))
    files = generate(records, tmp_path, FIXTURES / "published.toml",
                     FIXTURES / "reference_ranges.toml").files
    page = files["README.md"].decode()
    best, _, tables = page.partition("## How to read the tables")
    assert tables.count("| local · H200 |") == 2  # the measured row and the failed run
    assert tables.count("| local · H100 80GB HBM3 |") == 1  # another GPU: its own row
    # One run each: quick rows, never a best.
    assert best.count("| local · H200 |") + best.count("| local · H100 80GB HBM3 |") == 0
    assert "No configuration is headline grade yet." in best
    assert "| local |" not in page
    assert sorted(name for name in files if name.endswith(".png")) == [  # 13b on 4 GPUs: its plot too
        "plots/four-gpus-13b.png", "plots/platform-local-H100-80GB-HBM3.png", "plots/platform-local-H200.png"]
    assert "![local · H200: TFLOP/s per GPU" in page


def test_repository_page_names_the_h200() -> None:
    page = (REPO / "results" / "README.md").read_text()
    assert "| local · H200 |" in page and "| local |" not in page
