"""Test-only builders of run records (fixtures; never written to results/records/)."""

from __future__ import annotations

from typing import Any

from bench.records.provenance import Provenance
from bench.records.record import Record, build_record, record_from_dict


def record_fields(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments of a valid ok record (13b dp4 on a 4-GPU H200 node); override any key.

    Metrics are consistent: 13b at seq 2048 counts 163.0 TFLOP per sample (causal), so 9.3
    samples/s on 4 GPUs is 379 TFLOP/s per GPU.
    """
    samples_per_s = 9.3
    tflops = 163.0 * samples_per_s / 4
    fields: dict[str, Any] = {
        "run_id": "13b_dp4_h200x4_20261121T201500Z",
        "status": "ok",
        "reason": None,
        "started_at": "2026-11-21T20:15:00Z",
        "finished_at": "2026-11-21T20:25:00Z",
        "engine": "megatron",
        "precision": "bf16",
        "preset": {
            "name": "13b",
            "layers": 40,
            "hidden": 5120,
            "heads": 40,
            "seq_length": 2048,
            "vocab_size": 51200,
        },
        "layout": {
            "name": "dp4",
            "tp": 1,
            "pp": 1,
            "dp": 4,
            "vp": None,
            "cp": 1,
            "sp": False,
            "zero": None,
            "micro_batch": 1,
            "global_batch": 64,
        },
        "platform": {
            "name": "h200x4",
            "accelerator": "H200 SXM",
            "peak_tflops": 989.0,
            "peak_source": "NVIDIA H200 datasheet",
        },
        "nodes": 1,
        "gpus": 4,
        "argv": ["python", "-m", "bench.train.pretrain_gpt", "--num-layers", "40"],
        "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        "provenance": {
            "kit_commit": "0123abc",
            "megatron_core": "0.19.2",
            "torch": "2.11.0",
            "gpu_model": "NVIDIA H200",
            "gpu_count": 4,
        },
        "metrics": {
            "warmup_iters": 10,
            "window_iters": 20,
            "step_time_s_median": 64 / samples_per_s,
            "step_time_s_p10": 64 / samples_per_s - 0.05,
            "step_time_s_p90": 64 / samples_per_s + 0.05,
            "samples_per_s": samples_per_s,
            "tokens_per_s_per_gpu": samples_per_s * 2048 / 4,
            "tflops_per_gpu": tflops,
            "mfu": tflops / 989.0,
            "flops_convention": "megatron-causal",
            "tflops_per_gpu_noncausal": 168.1 * samples_per_s / 4,
            "mfu_noncausal": 168.1 * samples_per_s / 4 / 989.0,
            "peak_mem_gb": 110.0,
        },
        "log_tail": [],
        "variant": {"attention": "sdpa"},
        "data": {"kind": "mock", "name": None, "path_sha256": None},
    }
    fields.update(overrides)
    return fields


def make_record(**overrides: Any) -> Record:
    """A validated record built from :func:`record_fields` with ``overrides``."""
    return build_record(**record_fields(**overrides))


def read_old_record(**overrides: Any) -> Record:
    """:func:`record_fields` with ``overrides`` as a ``bench.record/1`` file held them (notes of
    every kind in ``notes``, the facts only in the argv, MS-AMP's scaling only in the environment),
    read as the kit reads one: upgraded to today's version."""
    fields = {**record_fields(**overrides), "schema": "bench.record/1"}
    fields.pop("data")  # the argv says it
    fields["provenance"] = {**dict.fromkeys(Provenance.model_fields), **fields["provenance"]}
    return record_from_dict(fields)


def failed_fields(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments of an out-of-memory run: metrics null, reason given."""
    return record_fields(
        **{
            "run_id": "13b_dp4_h200x4_20261121T203000Z",
            "status": "oom",
            "reason": "CUDA out of memory in iteration 1",
            "metrics": None,
            "started_at": "2026-11-21T20:30:00Z",
            "finished_at": "2026-11-21T20:31:00Z",
            "log_tail": ["torch.OutOfMemoryError: CUDA out of memory."],
            **overrides,
        }
    )
