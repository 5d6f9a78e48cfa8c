"""Which Adam kernel runs when Megatron falls back to torch's optimizers (no TE, no apex).

With Transformer Engine or apex, megatron-core steps with their FusedAdam: one pass over
parameters, gradients and both moments. Without them it builds ``torch.optim.AdamW`` with torch's
defaults, which on CUDA is the multi-tensor (``foreach``) form: a pass per operation of the update,
over the whole fp32 optimizer state, every step. torch's ``fused=True`` AdamW is the one-pass kernel
with the same update, so ``--kit-torch-adam fused`` (the default) gives the no-TE path the optimizer
an NGC image would have; ``foreach`` keeps torch's default, for an A/B run.
"""

from __future__ import annotations

TORCH_ADAM_CHOICES = ("fused", "foreach")


def select_torch_adam(choice: str) -> str:
    """Make megatron-core's torch fallback build AdamW in the ``choice`` form.

    Returns what will step the model: ``torch-fused``, ``torch-foreach`` or ``te-or-apex`` (the
    fallback is not in use and ``choice`` does not apply).
    """
    import torch
    from megatron.core import optimizer as megatron_optimizer

    if not megatron_optimizer.USING_PYTORCH_OPTIMIZER:
        return "te-or-apex"
    if choice == "fused":
        # megatron.core.optimizer reads torch.optim.AdamW (or Adam, without decoupled weight decay)
        # when it builds the optimizer; this training process uses no other torch optimizer.
        torch.optim.AdamW = _fused(torch.optim.AdamW)
        torch.optim.Adam = _fused(torch.optim.Adam)
    return f"torch-{choice}"


def _fused(base: type) -> type:
    def __init__(self, params, **kwargs) -> None:
        base.__init__(self, params, **{**kwargs, "fused": True})

    return type(f"Fused{base.__name__}", (base,), {"__init__": __init__})
