"""FP8 gradient reduction (bench.train.fp8_allreduce) on CPU over gloo, FP8 carried as uint8 bytes.

Each check is a fresh process of the Python with torch (tests/train/fp8_allreduce_checks.py); the
collective ones spawn two and three ranks. The benchmark runs as the GPU campaign runs it, under
torchrun, here with gloo and small buckets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CHECKS_SCRIPT = Path(__file__).with_name("fp8_allreduce_checks.py")
STRATEGIES = ["bf16-reduce-scatter", "bf16-all-reduce", "fp8-allgather", "fp8-shared-scale-reduce-scatter",
              "fp8-shared-scale-all-reduce"]


@pytest.mark.parametrize("check", [
    "saturating_cast",  # values past the format's max clamp to it (e4m3 448, e5m2 57344); bytes are torch's
    "scale",  # the largest power of two keeping amax in range; 1 for amax 0, NaN for inf/NaN
    "refusals",  # a bucket that is not flat, non-empty, contiguous and floating; an unknown format
])
def test_fp8_arithmetic(run_megatron, check: str) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), check])
    assert result.returncode == 0, f"{check} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith(f"ok {check}")


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("check", [
    "reference",  # both strategies == the one-process reference, bit for bit; padding; sum and mean
    "error_bound",  # |error| <= eps/2 · Σ|x_r| against the exact sum; the shared scale's underflow
    "zeros",  # amax 0: zeros, no NaN
    "nonfinite",  # inf/NaN on one rank: the whole bucket NaN on every rank, the group still in step
])
def test_fp8_collectives(run_megatron, check: str, world: int) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), check, str(world)])
    assert result.returncode == 0, f"{check} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith(f"ok {check}")


def test_benchmark_runs_under_torchrun_on_gloo(run_megatron, tmp_path: Path) -> None:
    out = tmp_path / "fp8_allreduce.json"
    result = run_megatron(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "bench.train.fp8_allreduce", "--sizes-mib", "0.25,1", "--warmup", "1",
                           "--iters", "2", "--format", "e5m2", "--out", str(out)])
    assert result.returncode == 0, result.stderr[-5000:]
    report = json.loads(out.read_text())
    assert (report["schema"], report["backend"], report["world_size"], report["format"]) == (
        "bench.fp8_allreduce/1", "gloo", 2, "e5m2")
    rows = report["rows"]
    assert [(r["bucket_mib"], r["strategy"]) for r in rows] == [
        (size, name) for size in (0.25, 1.0) for name in STRATEGIES]
    wire = {r["strategy"]: r["wire_bytes_per_element"] for r in rows if r["bucket_mib"] == 1.0}
    assert wire["bf16-reduce-scatter"] == 1.0 and wire["bf16-all-reduce"] == 2.0
    assert wire["fp8-shared-scale-reduce-scatter"] == 0.5 and wire["fp8-shared-scale-all-reduce"] == 1.5
    assert wire["fp8-allgather"] == 1 + 4 / 2**19
    for r in rows:
        assert r["elements"] == int(r["bucket_mib"] * 2**20) // 2 and r["time_ms"] > 0, r
        # Norm-wise: a bf16 sum rounds once (unit roundoff 2^-9), fp8 rounds each part (e5m2: 2^-3).
        assert r["rel_error"] < (0.01 if r["strategy"].startswith("bf16") else 0.1), r
    for name in STRATEGIES:
        assert name in result.stdout


def test_benchmark_refuses_one_rank(run_megatron) -> None:
    result = run_megatron(["-m", "bench.train.fp8_allreduce", "--sizes-mib", "1"])
    assert result.returncode == 2 and "needs two or more ranks" in result.stderr, result.stderr[-3000:]
