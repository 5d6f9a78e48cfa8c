"""Results page: golden markdown, identical regeneration, skipped records, data files, check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.records.store import write_record
from bench.results import plots
from bench.results.aggregate import find_range
from bench.results.data import load_published, load_ranges
from bench.results.generate import generate, write_outputs
from tests.conftest import assert_golden
from tests.record_factory import make_record

TESTS = Path(__file__).parents[1]
FIXTURES = TESTS / "fixtures" / "results"
SMOKE = FIXTURES / "smoke"  # a copy of the H200 campaign's smoke report: its GEMM ceiling
REPO = TESTS.parent


def _fixture_args(records: Path, out: Path, smoke: Path = SMOKE) -> list[str]:
    return ["results", "--records", str(records), "--out", str(out),
            "--published", str(FIXTURES / "published.toml"),
            "--ranges", str(FIXTURES / "reference_ranges.toml"), "--smoke", str(smoke),
            "--targets", str(FIXTURES / "targets.toml")]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the fixture records at <tmp>/results/records, output at <tmp>/results, and of the
    smoke reports at <tmp>/smoke (the page links them relative to itself: the same on any machine)."""
    shutil.copytree(FIXTURES / "records", tmp_path / "results" / "records")
    shutil.copytree(SMOKE, tmp_path / "smoke")
    return tmp_path / "results"


def test_golden_markdown(workdir: Path) -> None:
    assert main(_fixture_args(workdir / "records", workdir, workdir.parent / "smoke")) == 0
    assert_golden("results-page.md", (workdir / "README.md").read_text())


def test_regeneration_is_byte_identical(workdir: Path, tmp_path: Path) -> None:
    smoke = tmp_path / "smoke"
    assert main(_fixture_args(workdir / "records", workdir, smoke)) == 0
    first = {p.relative_to(workdir): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    plots = sorted(str(p) for p in first if p.suffix == ".png")
    assert plots == ["plots/four-gpus-13b.png", "plots/platform-h200.png"]  # the fixtures' 13b ran on 4 GPUs
    # A second process, other record order on disk: same bytes; unchanged files are not rewritten.
    again = tmp_path / "again"
    shutil.copytree(workdir / "records", again / "records")
    assert main(_fixture_args(again / "records", again, smoke)) == 0
    second = {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()}
    assert first == second
    assert write_outputs(workdir, generate(
        workdir / "records", workdir, FIXTURES / "published.toml",
        FIXTURES / "reference_ranges.toml", smoke_dir=smoke, targets_file=FIXTURES / "targets.toml").files) == []


def test_bad_records_are_reported_by_name_and_skipped(workdir: Path, capsys) -> None:
    assert main(_fixture_args(workdir / "records", workdir)) == 0
    err = capsys.readouterr().err
    assert "skipped broken.json: not valid JSON" in err
    assert "skipped future.json: schema 'bench.record/4' is not supported" in err
    page = (workdir / "README.md").read_text()
    assert "- `future.json`: schema 'bench.record/4'" in page
    assert "future" not in page.split("## Skipped files")[0]


def test_failed_runs_stay_out_of_throughput_tables(workdir: Path) -> None:
    assert main(_fixture_args(workdir / "records", workdir)) == 0
    tables, failed = (workdir / "README.md").read_text().split("## Failed runs")
    assert "13b_dp4_h200_20261121T203500Z" not in tables
    assert "| oom | CUDA out of memory \\| micro batch 2 |" in failed


def test_check_fails_on_a_row_outside_its_range(workdir: Path, capsys) -> None:
    assert main([*_fixture_args(workdir / "records", workdir), "--check"]) == 1
    out = capsys.readouterr().out
    assert "OUT OF RANGE 13b tp2pp2 on h200" in out
    assert "4 measured rows: 2 in range, 1 out of range, 1 without a reference range" in out
    assert not (workdir / "README.md").exists()  # --check writes nothing
    (workdir / "records" / "13b_tp2pp2_h200_20261121T203000Z.json").unlink()
    assert main([*_fixture_args(workdir / "records", workdir), "--check"]) == 0


def test_stale_plots_are_removed(workdir: Path) -> None:
    # A second platform gets its own plot; without its record the plot goes again.
    other = make_record(run_id="13b_dp4_h100x4_20261122T100000Z",
                        platform={"name": "h100x4", "accelerator": "H100 SXM",
                                  "peak_tflops": 989.0, "peak_source": "NVIDIA datasheet"})
    path = write_record(workdir / "records", other)
    assert main(_fixture_args(workdir / "records", workdir)) == 0
    assert sorted(p.name for p in (workdir / "plots").iterdir()) == [
        "four-gpus-13b.png", "platform-h100x4.png", "platform-h200.png"]
    path.unlink()
    assert main(_fixture_args(workdir / "records", workdir)) == 0
    assert sorted(p.name for p in (workdir / "plots").iterdir()) == ["four-gpus-13b.png", "platform-h200.png"]


def test_unchanged_plots_are_reused_and_changed_ones_redrawn(workdir: Path) -> None:
    args = (workdir / "records", workdir, FIXTURES / "published.toml",
            FIXTURES / "reference_ranges.toml", True, SMOKE)
    drawn = generate(*args).files["plots/platform-h200.png"]
    key = plots.png_text(drawn)[plots.KEY_CHUNK]
    assert len(key) == 64
    # A PNG whose key matches is taken as it is (here with bytes appended after its end).
    marked = drawn + b"appended"
    (workdir / "plots").mkdir()
    (workdir / "plots" / "platform-h200.png").write_bytes(marked)
    assert generate(*args).files["plots/platform-h200.png"] == marked
    # A damaged PNG (bad chunk CRC) or one drawn from other data is drawn again.
    damaged = drawn[:60] + bytes([drawn[60] ^ 1]) + drawn[61:]
    (workdir / "plots" / "platform-h200.png").write_bytes(damaged)
    assert generate(*args).files["plots/platform-h200.png"] == drawn
    (workdir / "records" / "1.3b_dp2_h200_20261121T204500Z.json").unlink()
    redrawn = generate(*args).files["plots/platform-h200.png"]
    assert plots.png_text(redrawn)[plots.KEY_CHUNK] != key


def test_ranges_match_accelerator_and_layout_degrees(tmp_path: Path) -> None:
    path = tmp_path / "ranges.toml"
    path.write_text(
        '[[range]]\nplatform = "h200x4"\nmodel = "13b"\naccelerator = "H100 SXM"\n'
        'tflops_per_gpu = 1\ntolerance = 0.1\nsource = "other accelerator"\n'
        '[[range]]\nplatform = "h200x4"\nmodel = "13b"\nlayout = "tp1pp1dp2"\n'
        'tflops_per_gpu = 1\ntolerance = 0.1\nsource = "other dp"\n'
        '[[range]]\nplatform = "h200x4"\nmodel = "13b"\nlayout = "tp1pp1"\n'
        'accelerator = "H200 SXM"\ntflops_per_gpu = 379\ntolerance = 0.1\nsource = "any dp"\n'
        '[[range]]\nplatform = "h200x4"\nmodel = "13b"\nlayout = "dp4"\n'
        'tflops_per_gpu = 379\ntolerance = 0.1\nsource = "dp4"\n')
    ranges = load_ranges(path)
    run = make_record()  # 13b, layout named "dp4" = tp1pp1dp4, accelerator "H200 SXM"
    entry = find_range(ranges, run)
    assert entry is not None and entry.source == "any dp"
    assert find_range(ranges[3:], make_record(layout={**make_record().layout.model_dump(),
                                                              "name": "tp1pp1dp4"})) == ranges[3]


def test_an_ab_variant_is_judged_only_by_a_range_that_names_it(tmp_path: Path) -> None:
    path = tmp_path / "ranges.toml"
    path.write_text(
        '[[range]]\nplatform = "h200x4"\nmodel = "13b"\ntflops_per_gpu = 379\ntolerance = 0.1\n'
        'source = "defaults"\n'
        '[[range]]\nplatform = "h200x4"\nmodel = "13b"\ntflops_per_gpu = 350\ntolerance = 0.1\n'
        'source = "no overlap"\nvariant = { overlap = "off" }\n')
    ranges = load_ranges(path)
    default = make_record()
    variant = make_record(variant={**default.variant, "overlap": "off"}, labels={"sweep": "s1"})
    assert find_range(ranges, default).source == "defaults"
    assert find_range(ranges, variant).source == "no overlap"
    assert find_range(ranges[:1], variant) is None


def test_zero_records_give_an_honest_page_with_published_figures(tmp_path: Path) -> None:
    assert main(["results", "--records", str(tmp_path / "records"), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "README.md").read_text()
    assert "**No measured runs yet**" in page
    assert "published: LUMI" in page and "## Plots" not in page
    assert main(["results", "--records", str(tmp_path / "records"), "--check"]) == 0


def test_repository_results_page_is_current() -> None:
    """results/README.md is generated from results/records/ only (real runs)."""
    generated = generate(REPO / "results" / "records", REPO / "results",
                         REPO / "results" / "published.toml",
                         REPO / "results" / "reference_ranges.toml",
                         smoke_dir=REPO / "docs" / "reports", targets_file=REPO / "results" / "targets.toml")
    for name, data in generated.files.items():
        assert (REPO / "results" / name).read_bytes() == data, f"run nox -s results ({name})"


def test_repository_data_files_load() -> None:
    published = load_published(REPO / "results" / "published.toml")
    assert {row.source for row in published.rows} == set(published.sources)
    assert load_ranges(REPO / "results" / "reference_ranges.toml")


@pytest.mark.parametrize(("text", "message"), [
    (('[[range]]\nplatform = "h200"\nmodel = "13b"\ntflops_per_gpu = 400\ntolerance = 10\n'
     'source = "x"\n'), "0 < tolerance < 1"),
    (('[[range]]\nplatform = "h200"\nmodel = "13b"\ntflops_per_gpu = "400"\ntolerance = 0.1\n'
     'source = "x"\n'), "key 'tflops_per_gpu' must be"),
    ('[[range]]\nplatform = "h200"\ntflops_per_gpu = 400\ntolerance = 0.1\nsource = "x"\n',
     "missing key 'model'"),
    (('[[range]]\nplatform = "h200"\nmodel = "13b"\nlayout = "tp2x"\ntflops_per_gpu = 400\n'
      'tolerance = 0.1\nsource = "x"\n'), "key 'layout': layout 'tp2x': cannot read 'x'"),
])
def test_bad_ranges_name_file_entry_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "ranges.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"ranges.toml: \\[\\[range\\]\\] #1: .*{message}"):
        load_ranges(path)


def test_missing_matplotlib_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    # None in sys.modules is how Python marks a module that cannot be imported.
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    assert main(["results", "--records", str(tmp_path / "records"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'megatron-bench-kit[results]'" in err
    assert not (tmp_path / "README.md").exists()


def test_paper_kit_runs_of_the_chunked_step_are_not_pooled_with_the_kernel_s() -> None:
    """PaperAdamW's chunked torch step (runs before kit 74d8988) and its Triton kernel are other
    code: the two 2.7b runs of 2026-11-26 (09:57 and 11:45) are two configurations, the older one
    named ``paper_adam=chunked``."""
    from bench.records.store import load_records
    from bench.results.aggregate import configuration
    from bench.results.words import settings

    runs, _ = load_records(REPO / "results" / "records")
    by_id = {run.run_id: run for run in runs}
    chunked = by_id["2.7b_tp1pp1dp2_local_20261126T095722Z-c0e8ac-c28"]
    kernel = by_id["2.7b_tp1pp1dp2_local_20261126T114534Z-0dea3b-c58"]
    assert settings(chunked) == {"optimizer_states": "paper-kit", "paper_adam": "chunked"}
    assert settings(kernel) == {"optimizer_states": "paper-kit"}
    assert configuration(chunked) != configuration(kernel)
    other = by_id["2.7b_tp1pp1dp2_local_20261126T095722Z-99713f-c25"]  # msamp-o2, same command
    assert settings(other) == {}
