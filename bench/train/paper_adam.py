"""The FP8-LM paper's Adam state stepped by the kit: ``PaperAdamW`` (``--optimizer-states paper-kit``).

megatron-core's precision-aware distributed optimizer builds Transformer Engine's ``FusedAdam`` with
an fp16 master weight, an fp8 first moment and an fp16 second moment. FusedAdam unscales every
state of every parameter into fp32 temporaries at once (12 bytes a shard element), runs its
multi-tensor Adam, then rescales tensor by tensor (``aminmax``, a division, a multiply and a copy
each; the fp8 moment's ``Float8Tensor.copy_`` also writes a transposed copy): thousands of small
launches and as many Python calls a step. ``PaperAdamW`` keeps the same state and steps a whole
parameter group with two launches of one Triton kernel (:mod:`bench.train.paper_adam_kernel`).

State per parameter (the shard megatron-core hands it: a bf16 view of the parameter buffer):

- ``master_param``: fp16, scaled; ``exp_avg``: ``torch.float8_e4m3fn`` (one byte, no transposed
  copy), scaled; ``exp_avg_sq``: fp16, scaled. 5 bytes a parameter.
- One fp32 scale per state in ``self._scales[param][name]``, as FusedAdam keeps it: the factor that
  turns the stored value back into the true one (``true = stored · scale``). The kit's memory count
  (:mod:`bench.train.memory_parts`) reads ``state`` and ``_scales``. Once a group has stepped, its
  scales are one-element views of one tensor per state (its tensors' scales side by side), which
  the kernel reads and the step rewrites on the device.
- Scales are powers of two with margin 0, as MS-AMP's: after each update, the largest ``2^k`` with
  ``amax · 2^k <= format max`` (65504 for fp16, 448 for E4M3;
  :func:`bench.train.fp8_allreduce.power_of_two_scale_below`). A power of two makes scaling and
  unscaling exact, so the only error is the format's rounding. The casts saturate by
  construction (and the kernel clamps as well); an inf or NaN amax gives a NaN scale, propagated
  as megatron-core's NaN checks expect, not clamped away.

Step, per parameter group: pass 1 computes every element's AdamW update in registers and keeps
only each state's per-tensor amax; a few torch kernels make the new scales from them; pass 2
recomputes the update and writes the bf16 weight (the fp32 master rounded once), the master and
both moments, scaled. No host sync, no temporaries beyond 24 bytes a tensor; 21 bytes of memory
traffic an element, against ~110 for FusedAdam's path. Triton comes with torch's CUDA wheels; the
tests run the kernel on CPU under Triton's interpreter.

What megatron-core calls on its inner optimizer in precision-aware mode is here: ``step``,
``zero_grad``, ``initialize_state``, ``get_unscaled_state``, ``set_scaled_state``, and
``state_dict``/``load_state_dict`` in FusedAdam's form (states unscaled to fp32). Refused, each with
its fix: CUDA-graph capture, AMSGrad, Adam without decoupled weight decay, no bias correction, state
dtypes other than the paper's, fp32 parameters, non-contiguous ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from bench.train.fp8_allreduce import power_of_two_scale_below
from bench.train.paper_adam_kernel import BLOCK, paper_adamw_pass

STATE_NAMES = ("master_param", "exp_avg", "exp_avg_sq")
STATE_DTYPES = {"master_param": torch.float16, "exp_avg": torch.float8_e4m3fn,
                "exp_avg_sq": torch.float16}
# megatron-core's --exp-avg-dtype fp8 arrives as torch.uint8 (TE's name for E4M3 state).
FP8_STATE_DTYPES = (torch.uint8, torch.float8_e4m3fn)
PARAM_DTYPES = (torch.bfloat16, torch.float16)


def _format_max(name: str) -> float:
    return torch.finfo(STATE_DTYPES[name]).max


def _refusals(amsgrad: bool, capturable: bool, adam_w_mode: bool, bias_correction: bool,
              master_weights: bool, master_weight_dtype: torch.dtype, exp_avg_dtype: torch.dtype,
              exp_avg_sq_dtype: torch.dtype) -> list[str]:
    """What PaperAdamW does not do, each with the fix."""
    problems = []
    if amsgrad:
        problems.append("AMSGrad: drop it")
    if capturable:
        problems.append("CUDA-graph capture (its kernel's table is built on the host): drop "
                        "--optimizer-cuda-graph")
    if not adam_w_mode:
        problems.append("Adam with L2 regularization: it is AdamW, drop "
                        "--no-decoupled-weight-decay")
    if not bias_correction:
        problems.append("Adam without bias correction: its kernel always corrects")
    if not master_weights or master_weight_dtype != torch.float16:
        problems.append(f"master weights {master_weight_dtype if master_weights else 'off'}: the "
                        "paper's are fp16 (--main-params-dtype fp16)")
    if exp_avg_dtype not in FP8_STATE_DTYPES:
        problems.append(f"first moment {exp_avg_dtype}: the paper's is fp8 (--exp-avg-dtype fp8)")
    if exp_avg_sq_dtype != torch.float16:
        problems.append(f"second moment {exp_avg_sq_dtype}: the paper's is fp16 "
                        "(--exp-avg-sq-dtype fp16)")
    return problems


@dataclass(frozen=True)
class _Layout:
    """Where the kernel finds a group's tensors: the first of each list (weight, gradient, master,
    both moments) and every tensor's element offset from it, the blocks, and the scales, one
    tensor a state with the group's tensors side by side."""

    key: tuple[int, ...]
    bases: tuple[torch.Tensor, ...]
    offsets: torch.Tensor  # int64 [5, T]
    numels: torch.Tensor  # int64 [T]
    block_tensor: torch.Tensor  # int32 [blocks]
    block_start: torch.Tensor  # int64 [blocks]
    scales: tuple[torch.Tensor, ...]  # fp32 [T] a state, STATE_NAMES' order
    limits: torch.Tensor  # fp32 [3, 1]: each state's format maximum


class PaperAdamW(torch.optim.Optimizer):
    """AdamW over fp16 master weights and an fp8/fp16 moment pair, each scaled per tensor.

    Takes the keyword arguments megatron-core gives Transformer Engine's FusedAdam under
    ``--use-precision-aware-optimizer``. ``store_param_remainders`` is accepted and has no effect,
    as in FusedAdam with fp16 master weights (it concerns fp32 ones). ``block``: the elements one
    kernel program steps, a power of two.
    """

    def __init__(self, params: Iterable[torch.Tensor | dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, bias_correction: bool = True,
                 adam_w_mode: bool = True, capturable: bool = False, master_weights: bool = True,
                 master_weight_dtype: torch.dtype = torch.float16,
                 exp_avg_dtype: torch.dtype = torch.uint8,
                 exp_avg_sq_dtype: torch.dtype = torch.float16, use_decoupled_grad: bool = True,
                 store_param_remainders: bool = False, block: int = BLOCK) -> None:
        problems = _refusals(amsgrad, capturable, adam_w_mode, bias_correction, master_weights,
                             master_weight_dtype, exp_avg_dtype, exp_avg_sq_dtype)
        if problems:
            raise ValueError("PaperAdamW (--optimizer-states paper-kit) does not do: "
                             + "; ".join(problems)
                             + ". Or use --optimizer-states paper (Transformer Engine's FusedAdam)")
        if block < 16 or block & (block - 1):
            raise ValueError(f"block {block}: give a power of two of at least 16 (default {BLOCK})")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "bias_correction": True}
        super().__init__(params, defaults)
        self.use_decoupled_grad = use_decoupled_grad
        self.block = block
        # What megatron-core reads of FusedAdam's attributes.
        self.master_weights = True
        self.capturable = False
        self.store_param_remainders = False
        self._scales: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        self._layouts: dict[int, _Layout] = {}  # by group index

    # --- megatron-core's calls ------------------------------------------------------------------

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients the step reads (``decoupled_grad`` under megatron-core)."""
        if not self.use_decoupled_grad:
            super().zero_grad(set_to_none=set_to_none)
            return
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.decoupled_grad = None
                elif getattr(p, "decoupled_grad", None) is not None:
                    p.decoupled_grad.zero_()

    @torch.no_grad()
    def initialize_state(self, param: torch.Tensor, store_param_remainders: bool = False) -> None:
        """Zero moments and the master from ``param`` (megatron-core's ``init_state_fn``)."""
        self._initialize(param)

    def get_unscaled_state(self, param: torch.Tensor, state_name: str,
                           skip_unscale: bool = False) -> torch.Tensor:
        """The true value of one state, in fp32."""
        if skip_unscale:
            raise ValueError("skip_unscale is for bf16 states (FusedAdam's fused unscale); "
                             "PaperAdamW's are fp16 and fp8: call without it")
        self._check_name(state_name)
        return self.state[param][state_name].float() * self._scales[param][state_name]

    @torch.no_grad()
    def set_scaled_state(self, param: torch.Tensor, state_name: str,
                         unscaled_state: torch.Tensor) -> None:
        """Store the fp32 ``unscaled_state`` scaled into the state's format (checkpoint loading)."""
        self._check_name(state_name)
        if unscaled_state.dtype != torch.float32:
            raise ValueError(f"set_scaled_state({state_name}) takes an fp32 tensor, got "
                             f"{unscaled_state.dtype}: pass .float() of it")
        if not self.state[param]:
            self._allocate(param)
        self._store(param, state_name, unscaled_state.detach().to(param.device).view(param.shape))

    def state_dict(self) -> dict:
        """torch's state dict with every state unscaled to fp32, as FusedAdam gives it."""
        state_dict = super().state_dict()
        params = self._flat_params()
        state_dict["state"] = {index: {name: self.get_unscaled_state(params[index], name)
                                       for name in state}
                               for index, state in state_dict["state"].items()}
        return state_dict

    def load_state_dict(self, state_dict: dict) -> None:
        """Load fp32 states (as :meth:`state_dict` gives them) back into the scaled formats."""
        super().load_state_dict(state_dict)  # casts states to the parameter's dtype: redone below
        params = self._flat_params()
        for index, state in state_dict["state"].items():
            param = params[index]
            self.state[param] = {}
            for name, value in state.items():
                self.set_scaled_state(param, name, value.float())

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step of every parameter with a gradient: two kernel launches a group."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, group in enumerate(self.param_groups):
            # Counted for empty groups too, as FusedAdam does: ranks sharing a shard stay in step.
            group["step"] = group.get("step", 0) + 1
            params = [p for p in group["params"] if p.numel() and self._grad(p) is not None]
            for p in params:
                if not self.state[p]:
                    self._initialize(p)
            if params:
                self._step_group(index, params, group)
        return loss

    # --- the step ---------------------------------------------------------------------------------

    def _step_group(self, index: int, params: list[torch.Tensor], group: dict) -> None:
        layout = self._layout(index, params)
        n = len(params)
        device = params[0].device
        amax_bits = torch.zeros(3 * n, dtype=torch.int32, device=device)
        into = torch.empty(3 * n, dtype=torch.float32, device=device)
        beta1, beta2 = group["betas"]
        t = group["step"]
        scalars = (n, beta1, 1.0 - beta1, beta2, 1.0 - beta2, group["eps"],
                   1.0 - group["lr"] * group["weight_decay"], group["lr"] / (1.0 - beta1**t),
                   math.sqrt(1.0 - beta2**t))
        grid = (layout.block_tensor.numel(),)
        tables = (layout.offsets, layout.numels, layout.block_tensor, layout.block_start,
                  *layout.scales, into, amax_bits)
        bf16 = layout.bases[0].dtype == torch.bfloat16
        paper_adamw_pass[grid](*layout.bases, *tables, *scalars, STORE=False, PARAM_BF16=bf16,
                               BLOCK=self.block)
        into.copy_(power_of_two_scale_below(amax_bits.view(torch.float32).view(3, n),
                                            layout.limits).view(-1))
        paper_adamw_pass[grid](*layout.bases, *tables, *scalars, STORE=True, PARAM_BF16=bf16,
                               BLOCK=self.block)
        # Powers of two: the reciprocals are exact.
        for scale, factor in zip(layout.scales, into.view(3, n), strict=True):
            torch.reciprocal(factor, out=scale)

    def _layout(self, index: int, params: list[torch.Tensor]) -> _Layout:
        """The group's table, rebuilt when a tensor moved (a new state, another gradient buffer)."""
        lists = [params, [self._grad(p) for p in params],
                 *([self.state[p][name] for p in params] for name in STATE_NAMES)]
        key = (self.block, *(t.data_ptr() for tensors in lists for t in tensors))
        layout = self._layouts.get(index)
        if layout is not None and layout.key == key:
            return layout
        for tensors in lists:
            self._check_kernel_inputs(tensors)
        device = params[0].device
        offsets = torch.tensor([[(t.data_ptr() - tensors[0].data_ptr()) // t.element_size()
                                 for t in tensors] for tensors in lists], dtype=torch.int64)
        numels = torch.tensor([p.numel() for p in params], dtype=torch.int64)
        blocks = (numels + self.block - 1) // self.block
        block_tensor = torch.repeat_interleave(torch.arange(len(params), dtype=torch.int32),
                                               blocks)
        first = torch.repeat_interleave(torch.cumsum(blocks, 0) - blocks, blocks)
        block_start = (torch.arange(int(blocks.sum())) - first) * self.block
        scales = tuple(torch.cat([self._scales[p][name] for p in params]).to(device)
                       for name in STATE_NAMES)
        for name, packed in zip(STATE_NAMES, scales, strict=True):
            for i, p in enumerate(params):
                self._scales[p][name] = packed[i:i + 1]
        limits = torch.tensor([[_format_max(name)] for name in STATE_NAMES], device=device)
        layout = _Layout(key, tuple(tensors[0] for tensors in lists), offsets.to(device),
                         numels.to(device), block_tensor.to(device), block_start.to(device),
                         scales, limits)
        self._layouts[index] = layout
        return layout

    @staticmethod
    def _check_kernel_inputs(tensors: list[torch.Tensor]) -> None:
        """One dtype and device a list, each tensor contiguous: what the kernel's offsets assume."""
        first = tensors[0]
        for t in tensors:
            if not t.is_contiguous():
                raise ValueError(f"PaperAdamW steps contiguous tensors, got a {tuple(t.shape)} one "
                                 f"with strides {t.stride()}: give it a contiguous view (as "
                                 "megatron-core's distributed optimizer does)")
            if (t.dtype, t.device) != (first.dtype, first.device):
                raise ValueError(f"PaperAdamW steps a group's tensors in one launch: {t.dtype} on "
                                 f"{t.device} beside {first.dtype} on {first.device}; put "
                                 "parameters of another dtype or device in a group of their own")

    # --- initial and loaded states --------------------------------------------------------------

    @torch.no_grad()
    def _initialize(self, p: torch.Tensor) -> None:
        """Zero moments (scale 1) and the master from the parameter."""
        self._allocate(p)
        self._store(p, "master_param", p.float())

    def _store(self, p: torch.Tensor, name: str, value: torch.Tensor) -> None:
        """Scale the fp32 ``value`` by the power of two its amax allows, into the state."""
        amax = value.abs().amax() if value.numel() else value.new_zeros(())
        into = power_of_two_scale_below(amax, _format_max(name)).view(1)
        self.state[p][name].copy_(value * into)
        self._scales[p][name].copy_(into.reciprocal())

    def _allocate(self, p: torch.Tensor) -> None:
        if p.dtype not in PARAM_DTYPES:
            raise ValueError(f"PaperAdamW steps bf16 or fp16 parameters (an fp16 master copy of "
                             f"them), got {p.dtype} {tuple(p.shape)}: keep every parameter in "
                             "--bf16, or use --optimizer-states paper")
        self.state[p] = {name: torch.zeros_like(p, dtype=dtype)
                         for name, dtype in STATE_DTYPES.items()}
        self._scales[p] = {name: torch.ones(1, dtype=torch.float32, device=p.device)
                           for name in STATE_NAMES}

    def _grad(self, p: torch.Tensor) -> torch.Tensor | None:
        return getattr(p, "decoupled_grad", None) if self.use_decoupled_grad else p.grad

    def _flat_params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    @staticmethod
    def _check_name(state_name: str) -> None:
        if state_name not in STATE_NAMES:
            raise KeyError(f"PaperAdamW has no state {state_name!r}: it keeps "
                           f"{', '.join(STATE_NAMES)}")


def use_paper_adam() -> str:
    """megatron-core builds :class:`PaperAdamW` where it builds Transformer Engine's FusedAdam
    (its precision-aware optimizer passes FusedAdam's keyword arguments, which PaperAdamW takes)."""
    import megatron.core.optimizer as megatron_optimizer

    # megatron.core.optimizer reads these two names when it builds the optimizer: Adam, and
    # whether to give it FusedAdam's keyword arguments (adam_w_mode and the state dtypes).
    megatron_optimizer.Adam = PaperAdamW
    megatron_optimizer.USING_PYTORCH_OPTIMIZER = False
    return "kit-paper-adamw"
