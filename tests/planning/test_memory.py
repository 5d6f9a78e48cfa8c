"""The memory estimate against the peaks measured on H200 (results/records), and the refusal of
plans that cannot fit."""

from __future__ import annotations

import dataclasses
import functools
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from bench.config.platforms import load_accelerator
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.config.run_options import DEFAULT_DROPOUT
from bench.planning.engines.deepspeed import ds_config
from bench.planning.engines.registry import ENGINES
from bench.planning.engines.setting_flags import keeps_dropout_masks
from bench.planning.layout import Layout, build_layout
from bench.planning.memory import (
    GB,
    Counted,
    check_fits,
    estimate_bytes,
    fits,
    fragmentation_note,
    refuse_fraction,
    state_bytes,
    uncounted_note,
)
from bench.planning.predict.case import record_graphs
from bench.records.store import load_records
from bench.running.provenance import DIRTY
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
MIB_TO_GB_COMMIT = "8884924"  # "Peak memory converted from Megatron's MiB in one place"


@pytest.mark.parametrize("preset,layout,gpus,mbs,gbs,measured_gb", [
    ("1.3b", "tp1pp1", 1, 4, 32, 41), ("6.7b", "dp4", 4, 2, 64, 65), ("13b", "dp4", 4, 1, 64, 110),
])
def test_estimate_is_near_measured(preset: str, layout: str, gpus: int, mbs: int, gbs: int,
                                   measured_gb: float) -> None:
    lay = build_layout(layout, get_preset(preset), gpus, gpus, mbs, gbs)
    assert estimate_bytes(Counted(get_preset(preset), lay)) / GB == pytest.approx(measured_gb, rel=0.15)


def test_fit_filter() -> None:
    p = get_preset("13b")
    assert fits(Counted(p, build_layout("dp4", p, 4, 4)), 141)
    assert not fits(Counted(p, build_layout("tp1pp1", p, 1, 1)), 141)  # 13B on one GPU: ~230 GB


def _record_layout(r) -> Layout:
    lay = r.layout
    return Layout(lay.tp, lay.pp, lay.dp, lay.cp, lay.vp, lay.sp, lay.zero, lay.micro_batch,
                  lay.global_batch)


@functools.cache  # one git call per commit, not two per record
def _converts_mib(commit: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", MIB_TO_GB_COMMIT,
                           commit.removesuffix(DIRTY)], cwd=REPO, check=False).returncode == 0


def _measured_gb(r) -> float:
    """Records made before the runner converted Megatron's MiB to GB stored MiB / 1000."""
    return r.metrics.peak_mem_gb * (1 if _converts_mib(r.provenance.kit_commit) else 2**20 / 1e6)


# Below this peak the estimate's 2 GB for the CUDA context and NCCL, which torch's peak does not
# see, is a fifth of the figure or more (125m at micro-batch 1 on one GPU: 3.8 GB measured, 5.5
# estimated; 345m at micro-batch 1: 7.2 measured, 9.1 estimated): such a run is held to that
# allowance in GB, the others to a relative error.
SMALL_PEAK_GB = 10.0
CONTEXT_GB = 2.0


def test_estimate_against_every_measured_peak() -> None:
    """The error the docs state: every run of results/records with a measured peak."""
    records, _ = load_records(REPO / "results" / "records")
    # The estimate models flash-style attention (bench/planning/memory.py); Megatron-DeepSpeed's own attention
    # keeps the s x s scores (1.3b: 62 GB measured, 40 GB estimated), which it does not model.
    measured = [r for r in records if r.metrics is not None and r.metrics.peak_mem_gb
                and r.engine == "megatron"]
    assert len(measured) >= 30
    errors, small = [], []
    for r in measured:
        grad_bytes = 2 if "--grad-reduce-in-bf16" in r.argv else 4
        estimate = estimate_bytes(Counted(
            _preset(r), _record_layout(r), grad_bytes,
            optimizer_bytes=state_bytes(PRECISIONS[r.precision], _setting(r, "optimizer_states")),
            recompute=_setting(r, "recompute"), fp8=PRECISIONS[r.precision].fp8,
            optimizer_step_bytes=_step(r, grad_bytes), hidden_dropout=_keeps_masks(r))) / GB
        if _measured_gb(r) < SMALL_PEAK_GB:  # the context's 2 GB, which torch's peak does not see, dominates
            small.append(estimate - _measured_gb(r))
        else:
            errors.append((estimate - _measured_gb(r)) / _measured_gb(r))
    print(f"\nmemory estimate vs {len(errors)} measured peaks of {SMALL_PEAK_GB:g} GB or more: "
          f"{min(errors):+.1%} to {max(errors):+.1%}, median |error| "
          f"{statistics.median(map(abs, errors)):.1%}; {len(small)} smaller: {min(small):+.1f} to "
          f"{max(small):+.1f} GB")
    assert -0.15 <= min(errors) and max(errors) <= 0.18
    assert statistics.median(map(abs, errors)) <= 0.035
    assert small and all(0 <= gb <= CONTEXT_GB for gb in small)


def test_megatron_deepspeed_peaks_with_its_fp32_gradient_partition() -> None:
    """13b on four H200s with torch's fused attention (uncapped): dp4 ZeRO-2 and tp4 in fp16 and
    tp2pp2 in bf16 peaked within 4 % below the estimate, DeepSpeed's fp32 gradient partition at the
    step counted (without it dp4 ZeRO-2's 83.8 GB was 11 % above)."""
    records, _ = load_records(REPO / "results" / "records")
    ids = ("13b_tp1pp1dp4zero2_local_20261127T131414Z-8e33fa-c3",
           "13b_tp4pp1dp1_local_20261127T131929Z-112bce-c2",
           "13b_tp2pp2dp1_local_20261127T114748Z-585a97-c6")
    runs = [r for r in records if r.run_id in ids]
    assert len(runs) == len(ids)
    for r in runs:
        engine = ENGINES[r.engine]
        layout = _record_layout(r)
        estimate = estimate_bytes(Counted(get_preset("13b"), layout, 2, engine.sharded_stage(layout),
                                          recompute=_setting(r, "recompute"),
                                          optimizer_step_bytes=_step(r, 2))) / GB
        assert 0 <= estimate - _measured_gb(r) <= 0.04 * _measured_gb(r), (r.run_id, estimate)


def _preset(r):
    """The record's model: its preset at the sequence length it trained (a campaign may set it)."""
    return dataclasses.replace(get_preset(r.preset.name), seq_length=r.preset.seq_length)


def _step(r, grad_bytes: int) -> int:
    return ENGINES[r.engine].step_bytes(_setting(r, "optimizer_states"), grad_bytes)


def _keeps_masks(r) -> bool:
    """Whether a record's run kept dropout masks: the last --hidden-dropout of its argv above 0,
    or none given (Megatron's default)."""
    return keeps_dropout_masks(DEFAULT_DROPOUT, r.argv)


def _setting(r, key: str):
    """A run's A/B setting from its record's variant (None or the default where it has none)."""
    return r.variant.get(key, "default" if key == "optimizer_states" else None)


# Runs forced past the refusal line that trained. The line cannot sit above them: 6.7b dp2
# msamp-o2 (estimate 78.2 GB, 97.7 % of 80) ran out of memory with 8.9 GiB of the cap reserved
# but unallocated, where this pipeline run (78.6 GB, 98.2 %) trained at 77.6 GB allocated. Each
# stays refused, so a better estimate that admits it fails here and drops it from the list. 6.7b
# tp1pp2vp2 fp8-delayed on two H200s at 80 GB (77.2 GB, 96.5 %) trained at 75.3, and in fp8-current
# on two H100s at 75.3 too. The 13b run twice more (2026-11-27, group 13b-fp8-apex): profiled at
# 77.6 GB, and with --fp8-param-gather at 75.9.
PAST_THE_LINE = {"13b_tp1pp4vp2dp1_local_20261127T172438Z-a04f5e-c23",
                 "13b_tp1pp4vp2dp1_local_20261127T230014Z-e6507e-c27",
                 "13b_tp1pp4vp2dp1_local_20261127T230014Z-3beb63-c28",
                 "6.7b_tp1pp2vp2dp1_local_20261127T205243Z-922ba0-c29",
                 "6.7b_tp1pp2vp2dp1_local_20261128T030845Z-881441-c30",
                 "6.7b_tp1pp2vp2dp1_local_20261128T043414Z-5f8727-c29"}


def test_the_check_refuses_the_run_that_ran_out_of_memory_and_no_run_that_finished() -> None:
    """Each record on its own GPU (or its --gpu-memory-cap), with its precision, optimizer states,
    recompute and allocator."""
    records, _ = load_records(REPO / "results" / "records")
    oom = [r for r in records if r.status == "oom"]
    finished = [r for r in records if r.metrics is not None]
    assert oom and finished

    def device_gb(r) -> float:
        return float(r.variant.get("gpu_memory_cap_gb", load_accelerator(r.platform.accelerator).memory_gb))

    def check(r) -> float:
        grad_bytes = 2 if "--grad-reduce-in-bf16" in r.argv else 4
        counted = Counted(_preset(r), _record_layout(r), grad_bytes,
                          recompute=_setting(r, "recompute"), fp8=PRECISIONS[r.precision].fp8,
                          optimizer_bytes=state_bytes(PRECISIONS[r.precision], _setting(r, "optimizer_states")),
                          optimizer_step_bytes=_step(r, grad_bytes), hidden_dropout=_keeps_masks(r))
        return check_fits(counted, device_gb(r), load_accelerator(r.platform.accelerator).model, 8,
                          refuse_at=refuse_fraction(r.variant.get("allocator", "default")))

    def fragments(r) -> list[str]:
        """The plan's warning of fragmentation, on the estimate as the plan makes it."""
        engine, layout = ENGINES[r.engine], _record_layout(r)
        grad_bytes = engine.grad_bytes(PRECISIONS[r.precision], "--grad-reduce-in-bf16" in r.argv)
        need = estimate_bytes(Counted(_preset(r), layout, grad_bytes, engine.sharded_stage(layout),
                                      state_bytes(PRECISIONS[r.precision], _setting(r, "optimizer_states")),
                                      _setting(r, "recompute"), PRECISIONS[r.precision].fp8,
                                      _step(r, grad_bytes), _keeps_masks(r))) / GB
        return fragmentation_note(engine.one_piece_step, engine.display, layout.pp,
                                  r.variant.get("allocator", "default"), need, device_gb(r))

    # The estimate leaves some buffers out (UNCOUNTED: CUDA graphs'); a run out of memory with such
    # a flag is one the plan warned of, not one it should have refused. So is one that fragmented
    # torch's default allocator where the plan warns of it.
    warned = [r for r in oom if uncounted_note(tuple(r.argv), record_graphs(r)) or fragments(r)]
    for r in (r for r in oom if r not in warned):
        with pytest.raises(ValueError, match=r"needs ~\d+\.\d GB per GPU"):
            check(r)
    # The two that did (Megatron-DeepSpeed's 13b tp2pp2 on 80 GB) are the ones it warns of.
    assert {r.run_id for r in oom if fragments(r)} == {
        "13b_tp2pp2dp1_local_20261128T024235Z-24c6a5-c8", "13b_tp2pp2dp1_local_20261128T064101Z-80f690-c1"}
    for r in finished:
        if r.run_id in PAST_THE_LINE:
            with pytest.raises(ValueError, match=r"needs ~\d+\.\d GB per GPU"):
                check(r)
        else:
            check(r)


def test_refusal_names_estimate_device_and_layouts_that_fit() -> None:
    """The README's old Polaris example: 6.7b tp2pp1 on two 40 GB A100s."""
    p = get_preset("6.7b")
    with pytest.raises(ValueError) as refused:
        check_fits(Counted(p, build_layout("tp2pp1", p, 2, 4)), 40, "NVIDIA A100 SXM4 40GB", 4)
    message = str(refused.value)
    assert message.startswith("6.7b tp2pp1dp1 (mbs 2) needs ~67.9 GB per GPU by the memory estimate")
    assert "more than 96% of the 40 GB of each NVIDIA A100 SXM4 40GB" in message
    assert ("nearest that fit: tp4pp1dp1 --gpus 4 (~38 GB), tp4pp1dp1 --gpus 4 --mbs 1 (~33 GB), "
            "tp2pp2dp1 --gpus 4 --mbs 1 (~35 GB)") in message
    assert message.endswith("--force plans it anyway")


def test_zero_stages_and_sequence_parallelism_lower_the_estimate() -> None:
    p = get_preset("13b")
    lay = build_layout("tp1pp1dp8zero1", p, 8, 8)
    zero1, zero2, zero3 = (estimate_bytes(Counted(p, lay, zero_stage=z)) for z in (1, 2, 3))
    assert zero1 > zero2 > zero3
    assert estimate_bytes(Counted(p, build_layout("tp4pp1sp", p, 4, 4))) < estimate_bytes(
        Counted(p, build_layout("tp4pp1", p, 4, 4)))


def test_hidden_dropout_off_drops_the_masks_the_pair_of_records_shows() -> None:
    """13b tp1pp4vp2 on four H200s capped at 80 GB, dropout on and off: the masks' bytes are the
    peaks' difference."""
    records, _ = load_records(REPO / "results" / "records")
    peaks = {r.run_id: r.metrics.peak_mem_gb for r in records if r.metrics is not None}
    with_masks = peaks["13b_tp1pp4vp2dp1_local_20261127T094709Z-c995f3-c13"]
    without = peaks["13b_tp1pp4vp2dp1_local_20261127T114020Z-e266cd-c14"]
    p = get_preset("13b")
    lay = build_layout("tp1pp4vp2", p, 4, 4, mbs=1, gbs=64)
    saved = (estimate_bytes(Counted(p, lay)) - estimate_bytes(Counted(p, lay, hidden_dropout=False))) / GB
    assert saved == pytest.approx(with_masks - without, abs=0.1)
    assert keeps_dropout_masks(0.1, ()) and not keeps_dropout_masks(0.0, ())
    assert not keeps_dropout_masks(0.1, ("--hidden-dropout", "0.0"))  # the user's flag is read last
    assert keeps_dropout_masks(0.0, ("--hidden-dropout", "0.1"))
    assert keeps_dropout_masks(0.1, ("--hidden-dropout", "none"))  # Megatron refuses it


def test_the_plan_counts_the_dropout_flag_passed_through(tmp_path: Path) -> None:
    """A plan with ``--hidden-dropout 0.0`` after '--' says an estimate without the masks."""
    notes = []
    for extra in ((), ("--", "--hidden-dropout", "0.0")):
        result = run_cli("run", "13b", "tp1pp4", "--gpus", "4", "--mbs", "1", "--gbs", "64",
                         "--dry-run", *extra, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        notes.append(float(re.search(r"memory estimate: ~([\d.]+) GB", result.stderr).group(1)))
    # 40 layers in flight on the first stage hold 0.84 GB of masks (two of s*b*h bytes each, s 2048,
    # b 1, h 5120); without them the optimizer step binds, 0.6 GB lower
    assert notes[0] - notes[1] == pytest.approx(0.6, abs=0.05)


def test_run_refuses_a_plan_that_cannot_fit_before_writing_anything(tmp_path: Path) -> None:
    refused = run_cli("run", "6.7b", "tp2pp1", "--platform", "polaris", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: 6.7b tp2pp1dp1 (mbs 2) needs ~68.6 GB per GPU")
    assert len(refused.stderr.splitlines()) == 1
    assert not list(tmp_path.iterdir())
    forced = run_cli("run", "6.7b", "tp2pp1", "--platform", "polaris", "--dry-run", "--force",
                     "--account", "datascience",
                     cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "note: memory estimate: ~68.6 GB per GPU of 40 GB (--force)" in forced.stderr
    fits_ = run_cli("run", "6.7b", "tp4pp1", "--mbs", "1", "--platform", "polaris", "--dry-run",
                    "--account", "datascience", cwd=tmp_path)
    assert "note: memory estimate: ~35.3 GB per GPU of 40 GB" in fits_.stderr


def test_full_recompute_keeps_only_layer_inputs() -> None:
    """Full recompute: 2*s*b*h bytes per layer and micro-batch in flight, plus one layer rebuilt."""
    preset = get_preset("13b")
    lay = build_layout("dp16zero2", preset, 16, 8, 2, 64)
    s, b, h, layers = preset.seq_length, 2, preset.hidden, preset.layers
    saved = layers * s * b * h * (10 + 24) - (layers * s * b * h * 2 + s * b * h * (10 + 24))
    without, full = estimate_bytes(Counted(preset, lay)), estimate_bytes(Counted(preset, lay, recompute="full"))
    assert without - full == pytest.approx(saved)
    # Selective recompute drops the s x s scores, which the estimate never counts.
    assert estimate_bytes(Counted(preset, lay, recompute="selective")) == without


def test_lumi_13b_data_parallel_plans_with_full_recompute(tmp_path: Path) -> None:
    """Refused without recompute (~69 GB of a 64 GB GCD), planned with it (~43 GB)."""
    argv = ["run", "13b", "dp16zero2", "--platform", "lumi", "--nodes", "2", "--mbs", "2",
            "--account", "project_1", "--dry-run"]
    refused = run_cli(*argv, cwd=tmp_path)
    assert refused.returncode != 0 and "needs ~69.2 GB" in refused.stderr
    planned = run_cli(*argv, "--recompute", "full", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "memory estimate: ~43.0 GB per GPU of 64 GB" in planned.stdout + planned.stderr
def test_a_model_too_large_for_a_node_is_pointed_at_nodes_and_a_layout(tmp_path: Path) -> None:
    # 175b unsplit needs ~2.9 TB per GPU: the layouts that fit lie beyond one node of 8, named by
    # --nodes (Azure schedules whole nodes), not "no layout fits up to 8 GPUs"
    refused = run_cli("run", "175b", "tp1pp1", "--platform", "azure-h100", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2
    assert re.search(r"nearest that fit, fastest expected first: tp\dpp\d+dp\d+ --nodes \d+ "
                     r"\(~\d+ GB, ~\d+ TFLOP/s/GPU expected\)", refused.stderr), refused.stderr
    assert "--gpus" not in refused.stderr


@pytest.mark.parametrize(("argv", "plans"), [
    (["13b", "dp8zero1", "--nodes", "1", "--gbs", "8"], True),  # seed 004's 1-node row
    (["13b", "dp16zero1", "--nodes", "2", "--gbs", "16"], True),  # its 2-node ZeRO-1 row
    (["13b", "dp8zero1", "--nodes", "1", "--gbs", "16"], False),  # 2 micro-batches: full gradients
])
def test_deepspeed_zero1_without_accumulation_keeps_no_full_gradient(tmp_path: Path, argv: list[str],
                                                                       plans: bool) -> None:
    """LUMI's 13B data-parallel ZeRO-1 rows (seed 004) plan with full recompute when each step is
    one micro-batch: DeepSpeed's stage 1 then frees every gradient bucket once reduced, which it
    does only with overlap_comm, so the job's DeepSpeed config turns it on."""
    done = run_cli("run", *argv, "--platform", "lumi", "--mbs", "1", "--recompute", "full",
                   "--account", "project_1", "--dry-run", cwd=tmp_path)
    assert (done.returncode == 0) is plans, done.stderr
    if plans:
        assert '"overlap_comm": true' in done.stdout
    else:
        assert "needs ~79.1 GB" in done.stderr  # with the step's fp32 gradient partition


def test_only_deepspeed_frees_stage_one_gradients() -> None:
    preset = get_preset("13b")
    one_step = build_layout("dp8zero1", preset, 8, 8, 1, 8)
    assert ENGINES["megatron-deepspeed"].sharded_stage(one_step) == 2
    assert ENGINES["megatron-deepspeed"].sharded_stage(build_layout("dp8zero1", preset, 8, 8, 1, 16)) == 1
    assert ENGINES["megatron"].sharded_stage(build_layout("dp8", preset, 8, 8, 1, 8)) == 1


@pytest.mark.parametrize("name,gpus,gbs,sharded", [
    ("dp8zero1", 8, 8, True), ("dp8zero1", 8, 16, False),  # 2 micro-batches: reduced at the end
    ("tp1pp2dp4zero1", 8, 4, False),  # DeepSpeed turns overlap_comm off for a pipeline
    ("dp8zero2", 8, 8, False),  # stage 2 shards gradients by itself
])
def test_deepspeed_config_asks_for_the_gradient_freeing_the_estimate_counts(
        name: str, gpus: int, gbs: int, sharded: bool) -> None:
    """overlap_comm is rendered exactly where the estimate counts ZeRO-1 gradients as sharded."""
    preset = get_preset("13b")
    layout = build_layout(name, preset, gpus, 8, 1, gbs)
    zero = ds_config(layout, PRECISIONS["fp16"])["zero_optimization"]
    assert zero.get("overlap_comm", False) is sharded
    assert (ENGINES["megatron-deepspeed"].sharded_stage(layout) == 2) is (sharded or layout.zero == 2)


def test_expandable_segments_refuse_only_beyond_the_device() -> None:
    """te 2.7b dp2 fp8 at micro-batch 8 under an 80 GB cap (~79.2 GB): refused with torch's default
    allocator, where it ran out of memory; planned with expandable segments, where it trained."""
    p = get_preset("2.7b")
    lay = build_layout("tp1pp1", p, 2, 8, 8, 32)
    args = (Counted(p, lay, fp8=True, optimizer_step_bytes=ENGINES["megatron"].step_bytes("default", 2)),
            80, "NVIDIA H200 SXM 141GB", 8)
    with pytest.raises(ValueError, match="more than 96% of the 80 GB"):
        check_fits(*args, refuse_at=refuse_fraction("default"))
    assert check_fits(*args, refuse_at=refuse_fraction("expandable")) == pytest.approx(79.2, abs=0.05)


def test_the_plan_warns_of_fragmentation_where_megatron_deepspeed_failed_so(tmp_path: Path) -> None:
    """LUMI's 13b tp2pp2 fp16 row on 80 GB (it fragmented), beside what the warning spares: tp4 (no
    pipeline, trained at 83 %), the same with expandable segments, and megatron-core."""
    options = ("--gpus", "4", "--gbs", "64", "--mbs", "2", "--recompute", "full",
               "--gpu-memory-cap", "80", "--platform", "azure-h100", "--dry-run")
    mds = ("--engine", "megatron-deepspeed", "--precision", "fp16")
    warned = run_cli("run", "13b", "tp2pp2", *options, *mds, cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert ("note: Megatron-DeepSpeed's pipeline past 80% of the device (~67.7 of 80 GB) has run out of "
            "memory from fragmentation with torch's default allocator") in warned.stderr
    assert "--allocator expandable trained it" in warned.stderr
    for layout, *rest in (("tp4pp1", *mds), ("tp2pp2", *mds, "--allocator", "expandable"), ("tp2pp2sp",)):
        result = run_cli("run", "13b", layout, *options, *rest, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "fragmentation" not in result.stderr, (layout, rest)
