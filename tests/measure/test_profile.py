"""Where a step's time goes: the breakdown of a real torch-profiler trace from the GPU machine.

The fixture is rank 0's trace of the two profiled steps of a 6.7b tp2+sp bf16 run (Transformer
Engine with apex, two H100, 2026-11-25, record 6.7b_tp2pp1dp1sp_local_20261125T220509Z-c17), cut
to the events the breakdown reads (GPU kernels, memory copies and sets, the ProfilerStep spans):
561 KB instead of 10 MB, the same breakdown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure.profile import CLASSES, LARGEST, NAME_CHARS, at_step, breakdown, kernel_class, read_trace

TRACE = Path(__file__).parents[1] / "fixtures" / "traces" / "6.7b_tp2pp1dp1sp_h100x2_te-apex_bf16.trace.json.gz"


@pytest.fixture(scope="module")
def profile():
    return breakdown(read_trace(TRACE))


def test_the_classes_add_up_to_the_profiled_step(profile) -> None:
    parts = sum(getattr(profile, name) for name in (*CLASSES, "idle"))
    assert parts == pytest.approx(profile.step_ms, rel=1e-9)
    assert sum(profile.fractions().values()) == pytest.approx(1.0)
    assert profile.steps == 2 and profile.kernels > 30_000


def test_the_real_trace_gives_the_breakdown_its_record_holds(profile) -> None:
    # ms per step, as the run's record has them (written on the GPU machine from the full trace;
    # comm_exposed there is 175.1: memory copies, counted since, hide 0.6 ms of it)
    assert profile.step_ms == pytest.approx(2451.6, abs=0.1)
    assert profile.gemm == pytest.approx(876.4, abs=0.1)
    assert profile.attention == pytest.approx(115.0, abs=0.1)
    assert profile.optimizer == pytest.approx(51.3, abs=0.1)
    assert profile.comm_exposed == pytest.approx(174.5, abs=0.1)
    # all communication is more than what shows: the rest ran under compute
    assert profile.comm_total == pytest.approx(273.7, abs=0.1) and profile.comm_total > profile.comm_exposed


def test_at_the_measured_step_idle_is_what_the_busy_classes_leave(profile) -> None:
    # the record's median step was 1.780 s: the profiler's overhead made the profiled ones longer
    measured = at_step(profile, 1780.0)
    busy = sum(measured[name] for name in CLASSES)
    assert measured["idle"] == pytest.approx(1780.0 - busy)
    assert at_step(profile, busy / 2)["idle"] == 0.0


@pytest.mark.parametrize(("name", "cls"), [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128", "attention"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4, false>, "
     "transformer_engine::multi_tensor_adam::AdamFunctor", "optimizer"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
    ("triton_poi_fused_add_native_dropout_0", "other"),
    ("void transformer_engine::normalization::ln_bwd_tuned_kernel<...>", "other"),
])
def test_kernels_are_classed_by_their_names(name: str, cls: str) -> None:
    assert kernel_class(name) == cls


def test_a_trace_without_kernels_is_refused() -> None:
    with pytest.raises(ValueError, match="no CUDA kernel"):
        breakdown({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]})


OPTIMIZER_STEPS = TRACE.parent / "2.7b_tp1pp1dp2_h200x2_msamp-o2_optimizer-steps.trace.json.gz"


def test_every_kernel_of_an_optimizer_step_is_the_optimizers() -> None:
    """A real trace cut to the two optimizer steps of a 2.7b dp2 msamp-o2 run (two H200s,
    2026-11-26, record 2.7b_tp1pp1dp2_local_20261126T080219Z-a7c7cf-c18) with 0.5 ms on each side:
    LBAdamW's kernels, and 96 kernels inside torch's ``Optimizer.step#`` span whose names are no
    optimizer's (its casts, copies and scale arithmetic). They count as the optimizer's; without
    the span they would be other kernels."""
    trace = read_trace(OPTIMIZER_STEPS)
    events = trace["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] == "gpu_user_annotation"]
    assert [e["name"] for e in events if e["cat"] == "gpu_user_annotation"] == [
        "Optimizer.step#MegatronLBAdamW.step"] * 2
    inside = [e for e in events if e["cat"] != "gpu_user_annotation"
              and any(lo <= e["ts"] + e["dur"] / 2 <= hi for lo, hi in spans)]
    by_name_other = [e for e in inside if e["cat"] != "kernel" or kernel_class(e["name"]) != "optimizer"]
    assert len(inside) == 1040 and len(by_name_other) == 96
    profile = breakdown(trace)
    assert profile.optimizer == pytest.approx(27.80, abs=0.01)
    assert profile.other == pytest.approx(0.46, abs=0.01)  # the kernels just outside the steps
    unmarked = breakdown({"traceEvents": [e for e in events if e["cat"] != "gpu_user_annotation"]})
    assert unmarked.optimizer < profile.optimizer and unmarked.other > profile.other
    assert unmarked.optimizer + unmarked.other == pytest.approx(profile.optimizer + profile.other)


def test_the_largest_kernels_are_named_with_their_time(profile) -> None:
    """The breakdown names the kernels that took the most time, so that ``other`` says what is in
    it: on the real 6.7b tp2+sp trace, the GEMMs first, then the all-gathers of sequence
    parallelism, cuDNN's attention, TE's Adam, and the first kernels of ``other``."""
    largest = profile.largest
    assert len(largest) == LARGEST
    assert [k.ms for k in largest] == sorted((k.ms for k in largest), reverse=True)
    assert largest[0].cls == "gemm" and largest[0].name.startswith("nvjet_sm90_tst_256x128")
    assert largest[0].ms == pytest.approx(303.5, abs=0.1) and largest[0].launches == 2064
    by_class = {k.cls for k in largest}
    assert by_class == {"gemm", "comm", "attention", "optimizer", "other"}
    # a kernel's whole duration, hidden or not: more than the classes' exclusive shares
    assert sum(k.ms for k in largest if k.cls == "comm") <= profile.comm_total + 1e-6
    assert sum(k.ms for k in largest if k.cls == "other") <= profile.other + 1e-6
    assert all(len(k.name) <= NAME_CHARS and not k.name.startswith("void ") for k in largest)


def test_a_record_keeps_the_largest_kernels_and_older_records_have_none(profile) -> None:
    from dataclasses import asdict

    from bench.records.metrics import Profile
    from bench.running.local import _profile_line

    kept = Profile(**asdict(profile))
    assert [k.name for k in kept.largest] == [k.name for k in profile.largest]
    assert Profile.model_validate_json(kept.model_dump_json()) == kept
    older = kept.model_dump(exclude={"largest"})
    assert Profile(**older).largest == []
    line = _profile_line(kept)
    assert line.startswith("gemm 35.7 %, attention 4.7 %, other 8.0 %")
    assert "largest besides GEMMs: ncclDevKernel_AllGather_RING_LL" in line and "162.5 ms" in line
