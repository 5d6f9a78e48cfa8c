"""The four-GPU section: the 13b layouts side by side with their time breakdowns, what is missing
of issue 46's campaign, and data-parallel scaling over 1, 2 and 4 GPUs at one batch per GPU."""

from __future__ import annotations

from pathlib import Path

from bench.config.campaign import load_campaign
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.planning.layout import build_layout
from bench.records.record import Record
from bench.records.store import load_records
from bench.results import fourgpu, markdown
from bench.results.aggregate import build_report
from bench.results.data import Published
from tests.record_factory import make_record
from tests.results.test_findings import PROFILE

BASE = make_record()
REPO = Path(__file__).parents[2]


def _run(minute: int, tflops: float, *, name: str = "dp4", tp: int = 1, pp: int = 1, dp: int = 4,
         sp: bool = False, gpus: int = 4, gbs: int = 64, commit: str = "abc1234", **fields) -> Record:
    layout = {**BASE.layout.model_dump(), "name": name, "tp": tp, "pp": pp, "dp": dp, "sp": sp,
              "global_batch": gbs}
    samples = tflops * gpus / 163.0
    metrics = {**BASE.metrics.model_dump(), "tflops_per_gpu": tflops, "mfu": tflops / 989.0,
               "samples_per_s": samples, "tokens_per_s_per_gpu": samples * 2048 / gpus}
    return make_record(run_id=f"13b_{name}_h200x4_20261127T10{minute:02d}00Z", gpus=gpus,
                       started_at=f"2026-11-27T10:{minute:02d}:00Z",
                       finished_at=f"2026-11-27T10:{minute + 1:02d}:00Z", layout=layout, metrics=metrics,
                       provenance={**BASE.provenance.model_dump(), "kit_commit": commit}, **fields)


def test_layouts_side_by_side_with_breakdown_ratio_and_whats_missing() -> None:
    te = {"implementation": "te"}
    runs = [_run(10, 460.0, name="tp2pp2sp", tp=2, pp=2, dp=1, sp=True, profile=PROFILE, **te),
            _run(12, 470.0, name="tp2pp2sp", tp=2, pp=2, dp=1, sp=True, **te),
            _run(14, 380.0, name="tp4sp", tp=4, dp=1, sp=True, **te)]
    rows = fourgpu.layout_rows(runs)
    assert [r.run.layout.name for r in rows] == ["tp2pp2sp", "tp4sp"]  # fastest first
    assert rows[0].profile is not None and rows[1].profile is None
    missing = fourgpu.missing_layouts(rows)
    assert "tp2pp2sp bf16" not in missing and "tp4sp bf16" not in missing
    assert "tp2pp2sp fp8-delayed" in missing
    # 13b tp2 dp2 keeps half the model's weights, gradients and their step per GPU: past 80 GB
    assert "tp2sp dp2 bf16 (beyond 80 GB: ~79.1 GB by the memory estimate)" in missing
    page = "\n".join(fourgpu.section(rows, [], fourgpu.plan_plot(rows), "records"))
    first = next(line for line in page.splitlines() if line.startswith("| tp2pp2sp |"))
    # Two runs: the mean of the middle two, said so; quick, so no row is the fastest to divide by.
    assert "465.0 (n=2, mean of the middle two, 460.0–470.0, CV 1.5 %)" in first
    assert "| quick (n=2; no headline row) |" in first
    step_ms = runs[0].metrics.step_time_s_median * 1000  # shares are of the measured step
    assert f"| {100 * 800 / step_ms:.1f} | {100 * 100 / step_ms:.1f} |" in first  # GEMM, attention
    tp4 = next(line for line in page.splitlines() if line.startswith("| tp4sp |"))
    assert "| quick (n=1; no headline row) |" in tp4 and "| – | – |" in tp4  # no ratio; no profile
    assert "Missing: " in page and "No data-parallel run on four GPUs yet." in page


def test_scaling_joins_one_batch_per_gpu_and_says_what_was_not_measured() -> None:
    runs = [_run(10, 500.0, name="dp1", dp=1, gpus=1, gbs=16), _run(20, 490.0, gbs=64),
            _run(30, 480.0, gbs=128)]  # 32 a GPU at four GPUs: no one-GPU counterpart
    rows = fourgpu.scaling_rows(runs)
    assert [sorted(r) for r in rows] == [[1, 4], [4]]
    cells = fourgpu._scaling_cells(rows[0], "records")
    assert cells[5].startswith("500.0 (n=1), kit abc1234") and cells[6] == "not measured"
    assert cells[8] == "quick (n=1 / 1)"  # one run a side: no efficiency drawn
    assert fourgpu._scaling_cells(rows[1], "records")[5] == "not measured"


def test_a_headline_row_is_the_fastest_the_others_divide_by() -> None:
    te = {"implementation": "te"}
    runs = [*(_run(m, 460.0 + m, name="tp2pp2sp", tp=2, pp=2, dp=1, sp=True, **te) for m in (10, 11, 12)),
            *(_run(m, 380.0 + m, name="tp4sp", tp=4, dp=1, sp=True, **te) for m in (20, 21, 22))]
    page = "\n".join(fourgpu.section(fourgpu.layout_rows(runs), [], None, "records"))
    tp4 = next(line for line in page.splitlines() if line.startswith("| tp4sp |"))
    assert "| 0.85 ± " in tp4


def test_an_empty_section_says_so_and_the_page_has_it_in_order() -> None:
    lines = fourgpu.section((), [], None, "records")
    assert "No 13B run on four GPUs yet." in lines
    page = markdown.render(markdown.Page(build_report([], (), Published({}, ()), ()), "records"))
    assert "## Four GPUs" in page


def test_the_kept_page_has_the_four_h200_13b_layouts() -> None:
    runs, _ = load_records(REPO / "results" / "records")
    rows = fourgpu.layout_rows(runs)
    assert {r.run.layout.name for r in rows} >= {"tp1pp1dp4", "tp1pp4dp1", "tp2pp2dp1"}
    page = (REPO / "results" / "README.md").read_text()
    assert "## Four GPUs" in page and "plots/four-gpus-13b.png" in page


def test_the_plot_labels_every_kept_configuration_apart() -> None:
    """Two runs of one layout (with and without CUDA graphs) get two labels, in a few words."""
    runs, _ = load_records(Path(__file__).resolve().parents[2] / "results" / "records")
    spec = fourgpu.plan_plot(fourgpu.layout_rows(runs))
    labels = [label for label, _, _ in spec.bars]
    assert len(set(labels)) == len(labels)
    assert any("TE CUDA graphs, dropout 0, selective recompute" in label for label in labels)
    assert all("megatron_args" not in label for label in labels)


def _option(argv: tuple[str, ...], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


def test_the_four_gpu_campaign_runs_every_layout_and_precision_the_section_asks_for() -> None:
    """Each 13b layout and precision the section names as missing where no record has it, and that
    fits 80 GB by the estimate, is a run of x4.toml: a gap in the campaign would stay a gap."""
    preset = get_preset(fourgpu.MODEL)
    planned = set()
    for run in load_campaign(REPO / "results" / "campaigns" / "x4.toml").runs:
        if run.argv[:1] == (fourgpu.MODEL,) and _option(run.argv, "--gpus", "4") == "4":
            lay = build_layout(run.argv[1], preset, 4, 4, 1, 64)
            planned.add((lay.tp, lay.pp, lay.dp, lay.sp, lay.vp > 1, _option(run.argv, "--precision", "bf16")))
    unplanned = [(name, precision) for name, tp, pp, dp, sp, vp in fourgpu.CAMPAIGN_LAYOUTS
                 for precision in fourgpu.CAMPAIGN_PRECISIONS
                 if not fourgpu._beyond_80_gb(tp, pp, sp, vp, PRECISIONS[precision])
                 and (tp, pp, dp, sp, vp, precision) not in planned]
    assert not unplanned, f"x4.toml has no run of {unplanned}"
