"""Model FLOPs of one training iteration of a GPT-3-style model: the kit's one FLOPs function.

Derivation (dense decoder, multi-head attention, 4h MLP, no activation recomputation counted; a
multiply-add is 2 FLOPs and the backward pass costs twice the forward, so training = 3 x forward).
Per layer and token, the forward pass does:

- QKV and output projections: 4 GEMMs of h x h           -> 2 * 4h^2  = 8h^2
- MLP: h -> 4h -> h                                        -> 2 * 8h^2  = 16h^2
- attention scores QK^T and the weighted sum with V        -> 2 * 2*s*h = 4sh

so 24h^2 + 4sh per token per layer. The logit layer adds 2hV per token. Training:

    F = 3 * B * s * (l * (24h^2 + 4sh) + 2hV) = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))

This is the **non-causal** convention (Megatron <= 0.11, NeMo, NVIDIA dgxc-benchmarking, the
Megatron-LM 2021 paper without recompute). A causal mask lets flash attention skip the upper
triangle, so Megatron-Core >= 0.12 counts the attention term once instead of twice:

    F_causal = 72 B s l h^2 (1 + s/(12h) + V/(12 l h))

The kit reports the **causal** convention first ("megatron-causal") and carries the non-causal
figure beside it, so its rows compare with either kind of published table. B is the global batch
in sequences, s the sequence length, l layers, h hidden size, V the padded vocabulary.

**Activation recompute** does work that the model does not need, so it is not in these *model*
FLOPs (MFU). Counting it gives *hardware* FLOPs (the seeds' published rows with
``--checkpoint-activations``, and Megatron-DeepSpeed's own logged "TFLOPs", count them):

- full recompute runs each layer's forward pass again in the backward pass: the layers cost
  4 x forward instead of 3 x (the logit layer is not recomputed);
- selective recompute (Megatron's ``--recompute-granularity selective``) recomputes core attention
  only: the attention-score term once more.

The kit's TFLOP/s/GPU and MFU are model FLOPs whatever the recompute; a record of a run with
recompute says so and carries the hardware figure beside it.
"""

from __future__ import annotations

from bench.config.presets import Preset
from bench.config.run_options import RECOMPUTE  # the --recompute modes

CAUSAL = "megatron-causal"


def flops_per_iteration(preset: Preset, global_batch: int, causal: bool = True,
                        recompute: str | None = None) -> float:
    """FLOPs of one training iteration (forward + backward) over ``global_batch`` sequences.

    ``causal=True`` is Megatron-Core >= 0.12's convention; ``False`` the older non-causal one.
    The MLP term uses the preset's ffn_hidden (4h for GPT-3), which the 72-form assumes.
    ``recompute=None`` gives model FLOPs; ``"full"`` or ``"selective"`` the hardware FLOPs of a run
    with that activation recompute (the module docstring says what each adds).
    """
    if recompute not in (None, *RECOMPUTE):
        raise ValueError(f"recompute {recompute!r} is not one of {RECOMPUTE}")
    b, s, h, v = global_batch, preset.seq_length, preset.hidden, preset.vocab_size
    layers = preset.layers
    attention_scores = (2 if causal else 4) * s * h  # per token per layer, forward
    projections = 8 * h * h
    mlp = 4 * h * preset.ffn_hidden
    logits = 2 * h * v
    layer_forward = projections + mlp + attention_scores
    per_token = 3.0 * (layers * layer_forward + logits)
    if recompute == "full":
        per_token += layers * layer_forward
    elif recompute == "selective":
        per_token += layers * attention_scores
    return b * s * per_token


def mfu(tflops_per_gpu: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved over the platform's dense peak for the precision used."""
    if peak_tflops <= 0:
        raise ValueError(f"peak TFLOP/s must be positive, got {peak_tflops}")
    return tflops_per_gpu / peak_tflops
