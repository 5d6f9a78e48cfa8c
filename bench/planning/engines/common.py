"""Flags Megatron-LM and Megatron-DeepSpeed share (both descend from Megatron-LM's parser)."""

from __future__ import annotations

from bench.config.presets import Preset
from bench.planning.layout import Layout

# GPT-3 optimiser settings (Brown et al. 2020, appendix B); they do not change throughput but make
# the loss curve of a benchmark run meaningful.
OPTIMIZER_FLAGS = (
    "--lr", "6.0e-5", "--min-lr", "6.0e-6", "--lr-decay-style", "cosine",
    "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95",
    "--clip-grad", "1.0", "--init-method-std", "0.006",
)


def model_flags(preset: Preset) -> list[str]:
    return ["--num-layers", str(preset.layers), "--hidden-size", str(preset.hidden),
            "--ffn-hidden-size", str(preset.ffn_hidden),
            "--num-attention-heads", str(preset.heads), "--seq-length", str(preset.seq_length),
            "--max-position-embeddings", str(preset.seq_length)]


def parallel_flags(layout: Layout) -> list[str]:
    flags = ["--tensor-model-parallel-size", str(layout.tp),
             "--pipeline-model-parallel-size", str(layout.pp)]
    if layout.sp:
        flags.append("--sequence-parallel")
    return flags


def batch_flags(layout: Layout, iters: int) -> list[str]:
    return ["--micro-batch-size", str(layout.micro_batch),
            "--global-batch-size", str(layout.global_batch),
            "--train-iters", str(iters), "--log-interval", "1",
            # No evaluation: a throughput run measures training steps only.
            "--eval-iters", "0", "--eval-interval", str(iters)]


ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"  # torch reads it on ROCm too


def allocator_env(allocator: str, platform_env: dict[str, str]) -> dict[str, str]:
    """Environment of ``--allocator``: none at the default; ``expandable`` sets torch's allocator
    configuration, refused where the platform's own environment sets it already."""
    if allocator == "default":
        return {}
    if ALLOC_CONF_ENV in platform_env:
        raise ValueError(f"--allocator {allocator}: the platform's [env] sets {ALLOC_CONF_ENV}="
                         f"{platform_env[ALLOC_CONF_ENV]} already; drop --allocator or that line")
    return {ALLOC_CONF_ENV: "expandable_segments:True"}


def checkpoint_flags(save_dir: str, interval: int, extra: tuple[str, ...] = ()) -> list[str]:
    """Save checkpoints to ``save_dir`` with an engine's ``extra`` flags; both engines also save
    once after the last iteration."""
    flags = [*extra, "--save", save_dir]
    if interval:
        flags += ["--save-interval", str(interval)]
    return flags


SELECTIVE_RECOMPUTE = ("--recompute-granularity", "selective")  # Megatron's; both engines have it


def recompute_flags(recompute: str | None, full: tuple[str, ...]) -> list[str]:
    """Activation recompute (``bench.measure.flops`` says how its FLOPs are counted): selective
    (core attention only) is Megatron's flag, which both engines have; ``full`` is the engine's
    own recompute of every layer."""
    if recompute is None:
        return []
    return list(SELECTIVE_RECOMPUTE if recompute == "selective" else full)
