"""Gradient-accumulation fusion for Transformer Engine's layers where apex is missing.

With ``--gradient-accumulation-fusion`` (Megatron's default) a linear layer's weight-gradient GEMM
accumulates straight into the fp32 ``main_grad`` buffer, instead of writing a bf16 gradient that
megatron-core's DDP hook then adds to it: one kernel and one pass over the gradients fewer per
weight and micro-batch. Transformer Engine's layers do this with their own GEMM
(``fuse_wgrad_accumulation``); megatron-core's own ``ColumnParallelLinear`` needs apex's
``fused_weight_gradient_mlp_cuda`` for it, and raises at construction when apex is missing. Under
``--transformer-impl transformer_engine`` the only such layer is the GPT's output layer (the logits),
so without apex Megatron would have the flag off for every layer because of that one.

:func:`exempt_plain_linears` lets the output layer build with the fusion off for itself alone (the
unfused path it would take with ``--no-gradient-accumulation-fusion``), while Transformer Engine's
layers keep theirs: what an NGC image with apex runs, but for the logits' weight gradient.
"""

from __future__ import annotations

import functools


def exempt_plain_linears() -> bool:
    """Build megatron-core's ``ColumnParallelLinear`` with the fusion off where apex's kernel is
    missing, leaving the shared configuration as it was; False (nothing changed) where apex has it."""
    from megatron.core.tensor_parallel import layers

    if layers._grad_accum_fusion_available:
        return False
    build = layers.ColumnParallelLinear.__init__

    @functools.wraps(build)
    def without_fusion(self, *args, config, **kwargs):
        fused = config.gradient_accumulation_fusion
        config.gradient_accumulation_fusion = False  # read once, here: the layer keeps its own copy
        try:
            build(self, *args, config=config, **kwargs)
        finally:
            config.gradient_accumulation_fusion = fused

    layers.ColumnParallelLinear.__init__ = without_fusion
    return True
