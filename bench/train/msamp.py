"""MS-AMP behind ``--kit-msamp {O1,O2}`` (the msamp-o1 / msamp-o2 / fp4 precisions) on megatron-core.

The MS-AMP seed trains with a 2023 Megatron-LM patched where MS-AMP hooks in. The kit's route is
megatron-core's own: its local layer spec, with the four linears of every transformer layer
(``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``) running MS-AMP's FP8 linear
(``msamp.megatron.layers.FP8LinearForMegatronCore``, patches/ms-amp 0006, 0008 and 0009: E4M3 input
and weight, E5M2 output gradient, each scaled in time by the planner's default
``MSAMP_FP8_SCALING=in-time``, or input and output gradient from MS-AMP's amax window with
``delayed``; fused casts, in Transformer Engine's kernels where TE imports; the weight cast once per
step). The embedding and the output layer stay bf16, as under Transformer Engine's
fp8.

- O1: those FP8 GEMMs, with megatron-core's DDP and optimizer (fp32 master weights, fp32 Adam moments).
- O2: also MS-AMP's ``LBAdamW`` as the Adam inside megatron-core's optimizer: fp8 first and fp16
  second moment (3 bytes a parameter instead of 8), fp32 master weights kept by megatron-core.
- fp4: O2 with MS-AMP's FP4 simulation switched on by environment (``FP4_SIMULATION_ENV``): weights
  channel-wise with the differentiable gradient estimator, activations token-wise with the 0.99
  outlier clip.

What this route does not take from MS-AMP: its FP8 data-parallel gradient buffers and distributed
optimizer (``msamp.megatron.distributed`` / ``optimizer``, written for Megatron-LM 2023); weight
gradients are reduced by megatron-core in bf16/fp32.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping

from bench.config.precisions import FP4_SIMULATION_ENV

MSAMP_CHOICES = ("off", "O1", "O2")
INSTALL_HINT = ("build the image with `python -m bench images build cuda --option msamp=1` (MS-AMP "
                "9746ea8 with patches/ms-amp), or use --precision fp8")
# MS-AMP's CUDA extensions: the optimizer's for O2, the FP4 kernels for the simulation.
O2_EXTENSION = "msamp_adamw"
FP4_EXTENSION = "msamp_quantize"


def fp4_switches(env: Mapping[str, str]) -> list[str]:
    """The FP4 simulation variables set to 1 in ``env``."""
    return [name for name, _ in FP4_SIMULATION_ENV if env.get(name, "0") == "1"]


def msamp_problem(level: str, env: Mapping[str, str], transformer_impl: str = "local") -> str | None:
    """What stops ``--kit-msamp level`` in this Python and environment, in one line; None if nothing."""
    switches = fp4_switches(env)
    if level == "off":
        if switches:
            return (f"{', '.join(switches)} set, but MS-AMP is off: the FP4 simulation needs "
                    "--kit-msamp O2 (--precision fp4), or unset them")
        return None
    try:
        importlib.import_module("msamp.megatron.layers")
    except ImportError as error:
        return (f"--kit-msamp {level} needs MS-AMP, which this Python cannot import ({error}): "
                f"{INSTALL_HINT}")
    if switches and level != "O2":
        return (f"the FP4 simulation ({', '.join(switches)}) runs with --kit-msamp O2 (--precision "
                f"fp4), not {level}")
    if transformer_impl != "local":
        return (f"--kit-msamp {level} puts MS-AMP's FP8 linear into megatron-core's local layers: "
                f"pass --transformer-impl local, not {transformer_impl}")
    needed = [(O2_EXTENSION, "--kit-msamp O2")] if level == "O2" else []
    needed += [(FP4_EXTENSION, "the FP4 simulation")] if switches else []
    for module, what in needed:
        if importlib.util.find_spec(module) is None:
            return (f"{what} needs MS-AMP's CUDA extension {module}, which this Python lacks: "
                    f"{INSTALL_HINT}")
    return None


def fp8_linear_class(base: type) -> type:
    """A subclass of megatron-core's ColumnParallelLinear or RowParallelLinear whose GEMMs are MS-AMP's."""
    import torch
    from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

    def __init__(self, *args, **kwargs) -> None:
        base.__init__(self, *args, **kwargs)
        self.msamp_metas = scaling_metas(device=torch.cuda.current_device())

    def _forward_impl(self, input, weight, bias=None, gradient_accumulation_fusion=False,
                      allreduce_dgrad=False, sequence_parallel=False, tp_group=None, **_unused):
        if sequence_parallel:
            raise NotImplementedError("MS-AMP's FP8 linear on megatron-core does not do sequence "
                                      "parallelism: drop 'sp' from the layout")
        return FP8LinearForMegatronCore.apply(input, weight, bias, self.msamp_metas,
                                              gradient_accumulation_fusion, allreduce_dgrad, tp_group)

    return type(f"MsampFP8{base.__name__}", (base,),
                {"__init__": __init__, "_forward_impl": _forward_impl, "__module__": __name__})


def with_fp8_linears(spec):
    """Put MS-AMP's FP8 linears into a local layer spec (attention qkv/proj, MLP fc1/fc2)."""
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    column, row = fp8_linear_class(ColumnParallelLinear), fp8_linear_class(RowParallelLinear)
    layer = spec.submodules
    attention = layer.self_attention.submodules
    mlp = layer.mlp.submodules if hasattr(layer.mlp, "submodules") else layer.mlp.keywords["submodules"]
    slots = ((attention, "linear_qkv", ColumnParallelLinear, column),
             (attention, "linear_proj", RowParallelLinear, row),
             (mlp, "linear_fc1", ColumnParallelLinear, column),
             (mlp, "linear_fc2", RowParallelLinear, row))
    for holder, name, expected, fp8 in slots:
        if getattr(holder, name) is not expected:
            raise ValueError(f"layer spec's {name} is {getattr(holder, name)!r}, not megatron-core's "
                             f"{expected.__name__}: MS-AMP's FP8 linear needs --transformer-impl local")
        setattr(holder, name, fp8)
    return spec


def use_msamp_adam() -> str:
    """O2: megatron-core builds MS-AMP's LBAdamW (fp8 first, fp16 second moment) where it builds Adam."""
    import megatron.core.optimizer as megatron_optimizer
    import torch
    from msamp.optim import LBAdamW

    class MegatronLBAdamW(LBAdamW):
        """LBAdamW with the keyword arguments megatron-core gives a fused Adam."""

        def __init__(self, params, lr, weight_decay, betas, eps, capturable=False, adam_w_mode=True,
                     **unused) -> None:
            if capturable or not adam_w_mode or unused:
                raise ValueError("MS-AMP's LBAdamW is AdamW without CUDA-graph capture: drop "
                                 f"--optimizer-cuda-graph / --no-decoupled-weight-decay ({sorted(unused)})")
            super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                             exp_avg_dtype=torch.uint8, exp_avg_sq_dtype=torch.float16)

    # megatron.core.optimizer reads these two names when it builds the optimizer.
    megatron_optimizer.Adam = MegatronLBAdamW
    megatron_optimizer.USING_PYTORCH_OPTIMIZER = False
    return "msamp-lbadamw"
