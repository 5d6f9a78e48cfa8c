"""Megatron-DeepSpeed engine: its ``pretrain_gpt.py`` flags and the DeepSpeed JSON config.

The config is built as a dict here and written by the kit as JSON (never edited with sed).
"""

from __future__ import annotations

import json
from typing import Any

from bench.engines.common import (
    OPTIMIZER_FLAGS,
    batch_flags,
    model_flags,
    parallel_flags,
    precision_flags,
)
from bench.layout import Layout
from bench.platforms import Data
from bench.presets import Preset

# Where the kit's images put Megatron-DeepSpeed; a platform without images (Polaris) has a checkout.
DEFAULT_ZERO_STAGE = 1
DS_CONFIG_NAME = "ds_config.json"


def ds_config(layout: Layout, precision: str) -> dict[str, Any]:
    """DeepSpeed config for one run; batch sizes must agree with the Megatron flags."""
    config: dict[str, Any] = {
        "train_batch_size": layout.global_batch,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "steps_per_print": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": layout.zero if layout.zero is not None
                              else DEFAULT_ZERO_STAGE},
        "wall_clock_breakdown": False,
    }
    if precision == "fp16":
        # Dynamic loss scaling as in Megatron-DeepSpeed's examples.
        config["fp16"] = {"enabled": True, "loss_scale": 0, "loss_scale_window": 500,
                          "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 12}
    else:
        config["bf16"] = {"enabled": True}
    return config


def ds_config_json(layout: Layout, precision: str) -> str:
    return json.dumps(ds_config(layout, precision), indent=2, sort_keys=True) + "\n"


def deepspeed_args(preset: Preset, layout: Layout, precision: str, iters: int, data: Data,
                   config_path: str) -> list[str]:
    """Megatron-DeepSpeed flags; it reads real data only, so ``data`` must name it."""
    if precision.startswith("fp8"):
        raise ValueError(f"{precision} needs Transformer Engine through the Megatron engine: use "
                         "--engine megatron, or --precision bf16/fp16 with Megatron-DeepSpeed")
    if layout.vp > 1 or layout.cp > 1:
        raise ValueError(f"layout {layout.name}: Megatron-DeepSpeed's pipeline engine has no "
                         "interleaved (vp) or context (cp) parallelism; use --engine megatron")
    missing = [name for name, value in (("--data-path", data.path), ("--vocab-file",
               data.vocab_file), ("--merge-file", data.merge_file)) if not value]
    if missing:
        raise ValueError("Megatron-DeepSpeed has no mock data: give " + ", ".join(missing) +
                         " (or set them in the platform file's [data] table)")
    flags = model_flags(preset) + parallel_flags(layout)
    if layout.pp == 1:
        flags.append("--no-pipeline-parallel")
    flags += batch_flags(layout, iters)
    flags += precision_flags(precision)
    flags += list(OPTIMIZER_FLAGS)
    flags += ["--distributed-backend", "nccl",
              "--data-path", data.path, "--vocab-file", data.vocab_file,
              "--merge-file", data.merge_file, "--tokenizer-type", "GPT2BPETokenizer",
              "--data-impl", "mmap", "--split", "949,50,1",
              "--deepspeed", "--deepspeed_config", config_path,
              "--zero-stage", str(layout.zero if layout.zero is not None else DEFAULT_ZERO_STAGE)]
    return flags
