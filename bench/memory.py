"""A first-order estimate of peak GPU memory for a layout, to skip sweeps that cannot fit.

Per GPU, in bytes (Korthikanti et al. 2022 for activations, with flash-style attention that keeps
no s x s scores, and no activation recomputation):

- weights 2 B/param (bf16/fp16), gradients 2 B/param (reduced in bf16) or 4 B (fp32);
- Adam state and fp32 master weights 12 B/param, divided by DP (distributed optimizer);
- activations s*b*h*(10 + 24/tp) B per layer and micro-batch, for the layers of one pipeline stage
  and the micro-batches the 1F1B schedule keeps in flight on the first stage (up to pp);
- logits s*b*V/tp in fp32 plus their gradient; 2 GB for the CUDA context and NCCL buffers.

It lands within ~10% of what was measured on H200 for 1.3B-13B; it is a filter, not a promise.
"""

from __future__ import annotations

from bench.layout import Layout
from bench.presets import Preset

GB = 1e9
FIT_FRACTION = 0.92  # of the device's memory; the allocator needs head-room
_CONTEXT_BYTES = 2 * GB


def params_per_gpu(preset: Preset, layout: Layout) -> float:
    """Parameters held by the most loaded GPU (a first pipeline stage, with the embeddings)."""
    h, s, v = preset.hidden, preset.seq_length, preset.vocab_size
    per_layer = 4 * h * h + 2 * h * preset.ffn_hidden + 13 * h  # QKV, proj, MLP, biases, norms
    return preset.layers * per_layer / (layout.tp * layout.pp) + (v * h + s * h) / layout.tp


def estimate_bytes(preset: Preset, layout: Layout, grad_bytes: int = 2) -> float:
    params = params_per_gpu(preset, layout)
    states = params * (2 + grad_bytes) + params * 12 / layout.dp
    s, b, h = preset.seq_length, layout.micro_batch, preset.hidden
    in_flight = min(layout.pp, layout.grad_accumulation)
    activations = (preset.layers / layout.pp) * in_flight * s * b * h * (10 + 24 / layout.tp)
    logits = 2 * 4 * s * b * preset.vocab_size / layout.tp
    return states + activations + logits + _CONTEXT_BYTES


def fits(preset: Preset, layout: Layout, device_gb: float) -> bool:
    return estimate_bytes(preset, layout) <= FIT_FRACTION * device_gb * GB
