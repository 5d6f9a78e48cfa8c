"""The page's sections beyond the tables: the best rows kept apart by hardware, data-parallel
scaling, where profiled runs' time goes, and the smoke reports' node checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.records.record import Record, build_record
from bench.records.store import load_records, write_record
from bench.results import best, hardware, markdown
from bench.results.aggregate import build_report
from bench.results.data import Published
from bench.results.generate import generate
from bench.results.hardware import load_node_checks
from bench.results.profiles import STACK, TIME_PLOT, plan_time_plot, time_rows
from bench.results.scaling import scaling_pairs
from bench.results.spread import Ratio
from tests.record_factory import failed_fields, make_record

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "results"
NO_PUBLISHED = Published({}, ())
ARGV = ("python", "-m", "bench.train.pretrain_gpt", "--bf16")


def _run(run_id: str, tflops: float, *, dp: int = 1, global_batch: int = 16,
         accelerator: str = "h100-sxm", argv: tuple[str, ...] = ARGV, **overrides: Any) -> Record:
    """An ok megatron run with consistent metrics: 13b shape, tp1pp1, micro-batch 4."""
    samples = tflops * dp / 163.0
    step = global_batch / samples
    fields: dict[str, Any] = {
        "run_id": run_id, "gpus": dp, "argv": argv, "variant": {}, "implementation": "te",
        "layout": {"name": f"tp1pp1dp{dp}", "tp": 1, "pp": 1, "dp": dp, "vp": None, "cp": 1,
                   "sp": False, "zero": None, "micro_batch": 4, "global_batch": global_batch},
        "platform": {"name": "local", "accelerator": accelerator, "peak_tflops": 989.0,
                     "peak_source": "datasheet"},
        "metrics": {"warmup_iters": 10, "window_iters": 20, "step_time_s_median": step,
                    "step_time_s_p10": step * 0.99, "step_time_s_p90": step * 1.01,
                    "samples_per_s": samples, "tokens_per_s_per_gpu": samples * 2048 / dp,
                    "tflops_per_gpu": tflops, "mfu": tflops / 989.0,
                    "flops_convention": "megatron-causal", "tflops_per_gpu_noncausal": None,
                    "mfu_noncausal": None, "peak_mem_gb": 60.0},
    }
    return make_record(**{**fields, **overrides})


# --- best per model, precision and hardware ---------------------------------------------------

def _thrice(run_id: str, tflops: float, **overrides: Any) -> list[Record]:
    """Three runs of one configuration: a headline-grade row (runs of 20 measured steps)."""
    return [_run(run_id.replace("00Z", f"0{i}Z"), tflops, **overrides) for i in range(3)]


def test_best_rows_keep_each_gpu_model_apart() -> None:
    runs = [*_thrice("13b_h100_20261125T100000Z", 440.0),
            *_thrice("13b_h200_20261121T100000Z", 500.0, accelerator="h200-sxm"),
            # The same GPU model named as older records name it: one hardware, one best row.
            *_thrice("13b_h200_20261121T110000Z", 510.0, accelerator="H200 SXM", global_batch=32),
            *_thrice("13b_h100_20261125T110000Z", 540.0, precision="fp8-delayed"),
            # A quick row is never a best, however fast.
            _run("13b_h100_20261125T120000Z", 600.0, global_batch=32)]
    best = build_report(runs, (), NO_PUBLISHED, ()).best_rows
    assert [(row.precision, row.accelerator, row.tflops_per_gpu) for row in best] == [
        ("bf16", "h100-sxm", 440.0), ("bf16", "H200 SXM", 510.0),
        ("fp8-delayed", "h100-sxm", 540.0)]


def test_like_with_like_is_judged_within_one_gpu_model() -> None:
    # bf16 on the H200, fp8 on the H100, each one setup: nothing to warn of, the hardware column
    # keeps them apart.
    runs = [*_thrice("13b_h200_20261121T100000Z", 500.0, accelerator="h200-sxm"),
            *_thrice("13b_h100_20261125T110000Z", 540.0, precision="fp8-delayed")]
    assert best._unlike_note(build_report(runs, (), NO_PUBLISHED, ()).best_rows) == []
    # On the H100, bf16 at DP 2 and fp8 on one GPU are not like with like: named with the GPU.
    runs += _thrice("13b_h100_20261125T100000Z", 440.0, dp=2, global_batch=32)
    note = best._unlike_note(build_report(runs, (), NO_PUBLISHED, ()).best_rows)
    assert note[0].startswith("Not like with like: the best rows of 13B on NVIDIA H100 SXM5 80GB ran")


# --- scaling ------------------------------------------------------------------------------------

def test_dp_runs_pair_with_the_one_replica_run_at_the_same_batch_per_rank() -> None:
    base = _run("13b_dp1_20261125T100000Z", 447.3)
    scaled = _run("13b_dp2_20261125T100100Z", 441.9, dp=2, global_batch=32,
                  argv=(*ARGV, "--overlap-grad-reduce", "--overlap-param-gather"))
    others = [
        _run("13b_dp2_20261125T100200Z", 430.0, dp=2, global_batch=16),  # 8 per rank, not 16
        _run("13b_dp2_20261125T100300Z", 545.0, dp=2, global_batch=32, precision="fp8-delayed"),
        _run("13b_dp2_20261125T100400Z", 445.0, dp=2, global_batch=32, accelerator="h200-sxm"),
        _run("13b_dp2_20261125T100500Z", 450.0, dp=2, global_batch=32, implementation="local"),
        # Other engine flags than DP adds: the kit's defaults changed between the two commits.
        _run("13b_dp2_20261125T100600Z", 460.0, dp=2, global_batch=32,
             argv=(*ARGV, "--cross-entropy-loss-fusion"), variant={"overlap": False}),
        _run("13b_dp2_20261125T100700Z", 450.0, dp=2, global_batch=32, engine="megatron-deepspeed"),
        # Another campaign's run: a figure pairs with its counterpart from one campaign.
        _run("13b_dp2_20261125T100800Z", 580.0, dp=2, global_batch=32, labels={"campaign": "other"},
             argv=(*ARGV, "--overlap-grad-reduce", "--overlap-param-gather")),
    ]
    pairs = scaling_pairs([*others, scaled, base])
    assert [(p.base.run_id, p.scaled.run_id) for p in pairs] == [(base.run_id, scaled.run_id)]
    assert Ratio.of(pairs[0].scaled_runs, pairs[0].base_runs).value == pytest.approx(441.9 / 447.3)
    page = markdown.render(markdown.Page(build_report([base, scaled], (), NO_PUBLISHED, ()), "records",
                                         runs=(base, scaled)))
    scaling = page.split("## Scaling", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in scaling.splitlines() if line.startswith("| 13B | bf16 |"))
    # Each side one run: its figure says n=1, and the efficiency is not drawn from quick sides.
    assert ("| megatron (TE) | NVIDIA H100 SXM5 80GB | 4/16 | tp1pp1dp1 | 1 | 447.3 (n=1) | tp1pp1dp2 "
            "| 2 | 441.9 (n=1) | quick (n=1 / 1) | ") in row
    assert f"(records/{base.run_id}.json)" in row and f"(records/{scaled.run_id}.json)" in row


def test_a_failed_or_lone_run_makes_no_scaling_row() -> None:
    failed = build_record(**failed_fields())
    assert scaling_pairs([failed, _run("13b_dp1_20261125T100000Z", 447.3)]) == ()
    assert "## Scaling" not in markdown.render(markdown.Page(build_report([], (), NO_PUBLISHED, ()), "records"))


def test_repository_page_sets_the_h100_scaling_runs_side_by_side() -> None:
    page = (REPO / "results" / "README.md").read_text()
    scaling = page.split("## Scaling", 1)[1].split("\n## ", 1)[0]
    # One run a side: the figures are shown, the efficiency is not drawn from quick sides.
    for cells, runs in ((("447.3 (n=1)", "441.9 (n=1)", "quick (n=1 / 1)"), ("215321Z-c14", "214842Z-c3")),
                        (("524.5 (n=1)", "543.7 (n=1)", "quick (n=1 / 1)"), ("215337Z-c15", "214856Z-c4"))):
        row = next(line for line in scaling.splitlines() if runs[0] in line)
        assert all(f"| {cell} |" in row for cell in cells) and runs[1] in row
        assert "NVIDIA H100 SXM5 80GB" in row
    assert "NVIDIA H200 SXM 141GB" in scaling  # the no-TE dp4 runs on four H200s pair too


# --- where the time goes ------------------------------------------------------------------------

PROFILE = {"steps": 2, "step_ms": 3000.0, "gemm": 800.0, "attention": 100.0, "optimizer": 50.0,
           "other": 250.0, "comm_exposed": 400.0, "idle": 1400.0, "comm_total": 450.0,
           "kernels": 36000}


def test_profiled_runs_are_set_against_their_measured_step() -> None:
    # 4 samples at 2.0 samples/s: a measured step of 2000 ms; the profiled one took 3000 ms.
    run = _run("6.7b_tp2_20261125T215547Z-c6", 2.0 * 163.0, global_batch=4, profile=PROFILE)
    assert run.metrics.step_time_s_median == pytest.approx(2.0)
    unprofiled = _run("6.7b_tp2_20261125T215600Z", 400.0)
    failed = build_record(**failed_fields(profile=PROFILE))
    (row,) = time_rows([unprofiled, failed, run])
    assert row.step_ms == pytest.approx(2000.0)
    assert row.classes["gemm"] == 800.0 and row.classes["idle"] == pytest.approx(400.0)
    page = markdown.render(markdown.Page(build_report([run], (), NO_PUBLISHED, ()), "records",
                                         profiles=(row,)))
    section = page.split("## Where the time goes", 1)[1].split("\n## ", 1)[0]
    assert "rank 0" in section and "2 steps" in section and "measured median step" in section
    line = next(line for line in section.splitlines() if line.startswith("| 13B |"))
    assert ("| 2000.0 | 800.0 (40.0 %) | 100.0 (5.0 %) | 50.0 (2.5 %) | 250.0 (12.5 %) "
            "| 400.0 (20.0 %) | 400.0 (20.0 %) | 450.0 (22.5 %) | 3000.0 |") in line
    assert "| megatron (TE) | NVIDIA H100 SXM5 80GB |" in line
    assert f"](plots/{TIME_PLOT})" in section


def test_the_time_plot_stacks_each_profiled_runs_classes_to_its_measured_step() -> None:
    run = _run("6.7b_tp2_20261125T215547Z-c6", 2.0 * 163.0, global_batch=4, profile=PROFILE,
               variant={"msamp_modules": "te"})
    assert plan_time_plot(()) is None
    spec = plan_time_plot(time_rows([run]))
    ((label, values),) = spec.bars
    assert label == "13B tp1pp1dp1 4/4 bf16 (TE) msamp_modules=te, NVIDIA H100 SXM5 80GB, kit 0123abc"
    assert dict(zip(STACK, values, strict=True)) == {
        "gemm": 800.0, "attention": 100.0, "optimizer": 50.0, "other": 250.0, "comm_exposed": 400.0,
        "idle": pytest.approx(400.0)}
    assert sum(values) == pytest.approx(2000.0)  # the measured step, not the profiled one


def test_repository_page_shows_the_profiled_6_7b_tp2_runs() -> None:
    """Three on two H100s (2026-11-25), two on two H200s at 80 GB (2026-11-28)."""
    page = (REPO / "results" / "README.md").read_text()
    section = page.split("## Where the time goes", 1)[1].split("\n## ", 1)[0]
    assert sum(line.startswith("| 6.7B | tp2pp1dp1sp |") for line in section.splitlines()) == 5
    assert "| 1725.4 | 845.1 (49.0 %) |" in section  # c6: 845 ms of GEMM in a 1725 ms step
    assert (REPO / "results" / "plots" / TIME_PLOT).is_file()


def test_repository_page_names_the_largest_kernels_where_a_record_keeps_them() -> None:
    """The 2.7b apex run profiled on 2026-11-29 keeps its largest kernels: the page names those
    beside the GEMMs (cuDNN's attention backward first); records made before name none, so the
    page has one line for each record that keeps them (the six host-pace runs of 23:25 UTC too)."""
    page = (REPO / "results" / "README.md").read_text()
    section = page.split("## Where the time goes", 1)[1].split("\n## ", 1)[0]
    kernels = section.split("The host's side of the profiled steps", 1)[0]  # its own lines follow
    lines = [line for line in kernels.splitlines() if line.startswith("- ")]
    records, _ = load_records(REPO / "results" / "records")
    keeping = [record for record in records if record.profile and record.profile.largest]
    assert len(lines) == len(keeping) >= 7
    apex = [line for line in lines if "2.7b_tp1pp1dp1_local_20261129T211030Z-ee6009" in line]
    assert len(apex) == 1 and "megatron (no TE, apex)" in apex[0]
    assert "cudnn_generated_fort_native_sdpa_sm90_flash_bprop" in apex[0].split(";")[0]
    assert "(attention) 206.3 ms, 9.9 %" in apex[0] and apex[0].count(";") == 3


# --- node checks --------------------------------------------------------------------------------

def _smoke(folder: Path, name: str, gpu_model: str, gpus: int, nccl: dict[str, Any],
           gemm: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({
        "schema": "bench.smoke/1", "started_at": f"2026-11-2{gpus}T21:46:11Z", "gpus": gpus,
        "gpu_model": gpu_model, "checks": {"nccl": {"ok": True, "detail": nccl},
                                           "gemm": {"ok": True, "detail": gemm}}}))


SIZES = [{"bytes": 64 * 2**20, "busbw_gbps": 259.34}, {"bytes": 2**30, "busbw_gbps": 326.7}]
SHAPES = {"8192^3 bf16": 798.37, "8192^3 fp8": 1486.2, "2.7b fc1 bf16": 764.6}


def test_node_checks_set_the_all_reduce_beside_the_link(tmp_path: Path) -> None:
    smoke = tmp_path / "docs" / "reports"
    _smoke(smoke / "h100x2", "h100x2-smoke.json", "NVIDIA H100 80GB HBM3", 2,
           {"world_size": 2, "dtype": "bf16", "sizes": SIZES, "nccl_version": "2.28.9"},
           {"tflops_median": 782.02, "shapes": SHAPES})
    # An older report: fp32 at one size, no shapes; and a GPU whose data file names no link.
    _smoke(smoke / "a100", "a100x4-smoke.json", "NVIDIA A100-SXM4-40GB", 4,
           {"world_size": 4, "bytes": 2**28, "busbw_gbps": 200.0}, {"tflops_median": 280.0})
    checks = load_node_checks(smoke)
    assert [c.file for c in checks] == ["h100x2/h100x2-smoke.json", "a100/a100x4-smoke.json"]
    assert checks[1].all_reduce == () and checks[1].shapes == {}
    out = tmp_path / "results"
    write_record(out / "records", _run("13b_dp1_20261125T100000Z", 447.3))
    page = generate(out / "records", out, FIXTURES / "published.toml",
                    FIXTURES / "reference_ranges.toml", draw_plots=False,
                    smoke_dir=smoke).files["README.md"].decode()
    section = page.split("## Node checks", 1)[1].split("\n## ", 1)[0]
    assert "| 64 MiB (GB/s) | 1 GiB (GB/s) | link, one way (GB/s) |" in section
    assert ("| NVIDIA H100 SXM5 80GB | 2 | 2026-11-22 | 2.28.9 | 259.3 | 326.7 | 450 (NVLink 4, 18 "
            "links) | 72.6 | [h100x2-smoke.json](../docs/reports/h100x2/h100x2-smoke.json) |") in section
    assert "| NVIDIA A100 SXM4 40GB | 4 | 2026-11-24 | – | – | – | – | – |" in section
    assert "one direction" in section and "900 GB/s NVLink per GPU" in section
    assert "| 8192^3 bf16 | 8192^3 fp8 | 2.7b fc1 bf16 |" in section
    assert "| 782.0 | 798.4 | 1486.2 | 764.6 |" in section and "| 280.0 | – | – | – |" in section


def test_an_nccl_settings_a_b_is_named_and_runs_no_gemm_row(tmp_path: Path) -> None:
    smoke = tmp_path / "docs" / "reports" / "h200x4"
    _smoke(smoke, "h200x4-smoke.json", "NVIDIA H200", 4,
           {"world_size": 4, "dtype": "bf16", "sizes": SIZES, "nccl_version": "2.28.9"},
           {"tflops_median": 797.3})
    simple = json.loads((smoke / "h200x4-smoke.json").read_text())
    del simple["checks"]["gemm"]  # --checks nccl
    # NCCL_VERSION: an image's version stamp, not a setting (the smoke check of
    # 2026-11-27 recorded it before it was left out).
    simple["nccl_settings"] = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_VERSION": "2.28.3-1"}
    (smoke / "h200x4-nccl-simple-smoke.json").write_text(json.dumps(simple))
    checks = load_node_checks(smoke)
    assert [c.nccl_settings for c in checks] == [("NCCL_ALGO=Ring", "NCCL_PROTO=Simple"), ()]
    section = hardware.section(checks, "reports")
    all_reduce, gemm = "\n".join(section).split("GEMM ceilings", 1)
    assert "| 2.28.9, NCCL_ALGO=Ring, NCCL_PROTO=Simple | 259.3 | 326.7 |" in all_reduce
    assert "| 4 | 2026-11-24 | 2.28.9 | 259.3 |" in all_reduce
    assert "h200x4-nccl-simple-smoke.json" not in gemm and "| 797.3 |" in gemm


def test_repository_page_names_the_measured_nccl_settings() -> None:
    """The four-H200 all-reduce A/B (real smoke reports): each row names its setting, none the
    image's NCCL_VERSION stamp those reports carry."""
    page = (REPO / "results" / "README.md").read_text()
    section = page.split("## Node checks", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if "h200x4-nccl-" in line and "| 450 (" in line]
    assert len(rows) == 8 and not any("NCCL_VERSION" in row for row in rows)
    channels = [row for row in rows if "| 2.28.9, NCCL_MIN_NCHANNELS=32 |" in row]
    assert len(channels) == 3 and all("| 356.8 |" in row or "| 357.7 |" in row for row in channels)
    assert sum("| 2.28.9 |" in row for row in rows) == 3


def test_repository_page_shows_the_h100_node_check() -> None:
    page = (REPO / "results" / "README.md").read_text()
    section = page.split("## Node checks", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if "h100x2-smoke.json" in line
               and "| 450 (" in line)
    assert "| 259.3 | 302.2 | 326.7 |" in row
    assert "| 1404.5 |" in section  # 2.7b fc1 in fp8 on the H100
