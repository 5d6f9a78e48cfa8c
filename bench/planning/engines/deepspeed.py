"""Megatron-DeepSpeed engine: its ``pretrain_gpt.py`` flags and the DeepSpeed JSON config.

The config is built as a dict here and written by the kit as JSON (never edited with sed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.config.platforms import Data
from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.config.run_options import field_default, unknown_choices, variant_of
from bench.planning.engines.common import (
    OPTIMIZER_FLAGS,
    batch_flags,
    model_flags,
    parallel_flags,
    recompute_flags,
)
from bench.planning.layout import Layout
from bench.planning.memory import deepspeed_frees_zero1_gradients

# Where the kit's images put Megatron-DeepSpeed; a platform without images (Polaris) has a checkout.
DEFAULT_ZERO_STAGE = 1
DS_CONFIG_NAME = "ds_config.json"
# Full recompute in Megatron-DeepSpeed: its DeepSpeed activation checkpointing (what the seeds use),
# both flags as its rebase scripts pass them. --checkpoint-activations alone works only through
# DeepSpeed's pipeline engine (pp > 1); without a pipeline the transformer's checkpointed forward
# needs --deepspeed-activation-checkpointing (or a --recompute-method) and raises "Invalid
# activation recompute method" at the first step otherwise (13b tp4 and dp4 on four GPUs did).
FULL_RECOMPUTE = ("--checkpoint-activations", "--checkpoint-num-layers", "1",
                  "--deepspeed-activation-checkpointing")


@dataclass(frozen=True)
class ZeroSettings:
    """DeepSpeed ZeRO settings beyond the stage (the layout names the stage: ``zero3``).

    ``offload="cpu"``: optimizer state and step on the CPU (ZeRO-Offload; Megatron-DeepSpeed then
    steps with DeepSpeedCPUAdam, ``--cpu-optimizer``, which DeepSpeed requires for offloading).
    ``overlap_comm``: overlap gradient reduction with the backward pass. ``contiguous_gradients``:
    copy gradients into one buffer as they are produced. Bucket sizes are in elements; ``None``
    keeps DeepSpeed's default. Seed 003 sets all of them (ZeRO-3, 2e8-element buckets).
    """

    # Defaults, choices and variant keys are the run options' (bench.config.run_options).
    offload: str = field_default("zero.offload")
    overlap_comm: bool = field_default("zero.overlap_comm")
    contiguous_gradients: bool = field_default("zero.contiguous_gradients")
    reduce_bucket_size: int | None = field_default("zero.reduce_bucket_size")
    allgather_bucket_size: int | None = field_default("zero.allgather_bucket_size")

    def variant(self) -> tuple[tuple[str, str], ...]:
        """The settings away from DeepSpeed's defaults, as (name, value) for a run's notes."""
        return variant_of("zero", self)


DEFAULT_ZERO_SETTINGS = ZeroSettings()


def zero_problems(settings: ZeroSettings, stage: int) -> tuple[list[str], list[str]]:
    """(problems, notes) for ZeRO ``settings`` at ``stage``: every broken rule, and what is inert."""
    problems, notes = [], []
    problems += [f"{option.flag} {value} is not one of {', '.join(option.choices or ())}"
                 for option, value in unknown_choices("zero", settings)]
    for name in ("reduce_bucket_size", "allgather_bucket_size"):
        size = getattr(settings, name)
        if size is not None and size < 1:
            problems.append(f"{name} must be at least 1 element, got {size}")
    if settings.allgather_bucket_size is not None and stage == 3:
        notes.append("zero3 does not read allgather_bucket_size (stage 3 gathers parameters by "
                     "stage3_prefetch_bucket_size); it is written as the seed writes it")
    return problems, notes


def ds_config(layout: Layout, precision: Precision,
              zero: ZeroSettings = DEFAULT_ZERO_SETTINGS) -> dict[str, Any]:
    """DeepSpeed config for one run; batch sizes must agree with the Megatron flags."""
    zero_config: dict[str, Any] = {"stage": zero_stage(layout)}
    # The memory estimate counts ZeRO-1 gradients as sharded there; DeepSpeed frees them only so.
    if zero.overlap_comm or deepspeed_frees_zero1_gradients(layout):
        zero_config["overlap_comm"] = True
    if zero.contiguous_gradients:
        zero_config["contiguous_gradients"] = True
    for name in ("reduce_bucket_size", "allgather_bucket_size"):
        if getattr(zero, name) is not None:
            zero_config[name] = getattr(zero, name)
    if zero.offload == "cpu":
        # The seed's "cpu_offload": true is DeepSpeed's deprecated spelling of this.
        zero_config["offload_optimizer"] = {"device": "cpu"}
    config: dict[str, Any] = {
        "train_batch_size": layout.global_batch,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "steps_per_print": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": zero_config,
        "wall_clock_breakdown": False,
    }
    if precision.half == "fp16":
        # Dynamic loss scaling as in Megatron-DeepSpeed's examples.
        config["fp16"] = {"enabled": True, "loss_scale": 0, "loss_scale_window": 500,
                          "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 12}
    else:
        config["bf16"] = {"enabled": True}
    return config


def zero_stage(layout: Layout) -> int:
    return layout.zero if layout.zero is not None else DEFAULT_ZERO_STAGE


def core_priced(layout: Any, offload: str) -> bool:
    """Whether the step-time model prices a run of this layout (a plan's or a record's, read by
    attribute) and offload as megatron-core's local layers: ZeRO 0-2 keep the step's shape, while
    ZeRO-3 gathers each layer's parameters and ZeRO-Offload steps the optimizer on the CPU."""
    return zero_stage(layout) < 3 and offload == "none"


def default_stage_notes(layout: Layout) -> list[str]:
    """What a layout that names no ZeRO stage runs on one data-parallel rank. The kit always runs
    Megatron-DeepSpeed through DeepSpeed (its loss scaling and optimizer are DeepSpeed's, as in
    every Megatron-DeepSpeed record; the one-VM seed's first script, which passes no --deepspeed,
    ran Megatron's own and is not rendered), so such a run is DeepSpeed at its default stage, 1,
    which has nothing to shard over one rank."""
    if layout.zero is not None or layout.dp > 1:
        return []
    return [f"no ZeRO stage in the layout: DeepSpeed runs stage {DEFAULT_ZERO_STAGE} (--deepspeed "
            f"--zero-stage {DEFAULT_ZERO_STAGE}, the kit's default), which shards nothing over one "
            "data-parallel rank: only DeepSpeed's optimizer and loss scaling act; the kit runs "
            "Megatron-DeepSpeed only through DeepSpeed (docs/megatron-deepspeed.md)"]


def ds_config_json(layout: Layout, precision: Precision,
                   zero: ZeroSettings = DEFAULT_ZERO_SETTINGS) -> str:
    return json.dumps(ds_config(layout, precision, zero), indent=2, sort_keys=True) + "\n"


def deepspeed_args(preset: Preset, layout: Layout, precision: Precision, iters: int, data: Data,
                   config_path: str, zero: ZeroSettings = DEFAULT_ZERO_SETTINGS,
                   flash_attention: bool = False, recompute: str | None = None,
                   fused_attention: bool = True) -> list[str]:
    """Megatron-DeepSpeed flags; it reads real data only, so ``data`` must name it."""
    if precision.fp8_linears is not None:
        # The kit wires MS-AMP's FP8 linears and TE's fp8 into the Megatron engine's entry only.
        raise ValueError(f"{precision.name} needs {precision.fp8_linears} through the Megatron "
                         "engine, which the kit wires it into: use --engine megatron, or --precision bf16/fp16 with "
                         "Megatron-DeepSpeed")
    if layout.vp > 1 or layout.cp > 1:
        raise ValueError(f"layout {layout.name}: Megatron-DeepSpeed's pipeline engine has no "
                         "interleaved (vp) or context (cp) parallelism; use --engine megatron")
    if layout.sp:
        # 13b tp2pp2 + sp crashed at its first step, three times, on four H200s (2026-11-27), the
        # position embedding's gather out of range; tests/train/test_megatron_deepspeed.py shows
        # both paths on CPU with Megatron-DeepSpeed's own code (upstream:
        # deepspeedai/Megatron-DeepSpeed#170, deepspeedai/DeepSpeed#4645).
        raise ValueError(f"layout {layout.name}: Megatron-DeepSpeed splits batches for sequence "
                         "parallelism inconsistently: with a pipeline (get_batch_pipe) every "
                         "tensor-parallel rank gets the whole sequence and the sequence-parallel "
                         "position embedding indexes past its slice; without one, get_batch gives "
                         "a rank its share of the sequence and the embedding splits that again. "
                         "Drop sp from the layout, or use --engine megatron")
    missing = [name for name, value in (("--data-path", data.path), ("--vocab-file",
               data.vocab_file), ("--merge-file", data.merge_file)) if not value]
    if missing:
        raise ValueError("Megatron-DeepSpeed has no mock data: give " + ", ".join(missing) +
                         " (or set them in the platform file's [data] table)")
    flags = model_flags(preset) + parallel_flags(layout)
    if layout.pp == 1:
        flags.append("--no-pipeline-parallel")
    flags += batch_flags(layout, iters)
    flags += precision.flags
    flags += recompute_flags(recompute, FULL_RECOMPUTE)
    flags += list(OPTIMIZER_FLAGS)
    # Its gradient-accumulation fusion is commented out upstream, but the flag (on by default)
    # still demands apex's fused_weight_gradient_mlp_cuda: off, so no apex is needed.
    flags += ["--no-gradient-accumulation-fusion"]
    flags += ["--distributed-backend", "nccl",
              "--data-path", data.path, "--vocab-file", data.vocab_file,
              "--merge-file", data.merge_file, "--tokenizer-type", "GPT2BPETokenizer",
              "--data-impl", "mmap", "--split", "949,50,1",
              "--deepspeed", "--deepspeed_config", config_path,
              "--zero-stage", str(zero_stage(layout))]
    if zero.offload == "cpu":
        flags.append("--cpu-optimizer")
    # Without flash-attn, torch's fused attention (the kit's patch 0011) rather than the unfused
    # core attention, which stores the s x s scores (kept for A/B: --no-fused-attention).
    if fused_attention:
        flags.append("--use-flash-attn-v2" if flash_attention else "--use-torch-sdpa")
    return flags
