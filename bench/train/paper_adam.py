"""The FP8-LM paper's Adam state stepped by the kit: ``PaperAdamW`` (``--optimizer-states paper-kit``).

megatron-core's precision-aware distributed optimizer builds Transformer Engine's ``FusedAdam`` with
an fp16 master weight, an fp8 first moment and an fp16 second moment. FusedAdam unscales every
state of every parameter into fp32 temporaries at once (12 bytes a shard element), runs its
multi-tensor Adam, then rescales tensor by tensor (``aminmax``, a division, a multiply and a copy
each; the fp8 moment's ``Float8Tensor.copy_`` also writes a transposed copy): thousands of small
launches and as many Python calls a step. ``PaperAdamW`` keeps the same state and steps it with
torch's multi-tensor ops, chunk by chunk, so that a step is a few dozen large launches.

State per parameter (the shard megatron-core hands it: a bf16 view of the parameter buffer):

- ``master_param``: fp16, scaled; ``exp_avg``: ``torch.float8_e4m3fn`` (one byte, no transposed
  copy), scaled; ``exp_avg_sq``: fp16, scaled. 5 bytes a parameter.
- One fp32 scale per state in ``self._scales[param][name]``, as FusedAdam keeps it: the factor that
  turns the stored value back into the true one (``true = stored · scale``). The kit's memory count
  (:mod:`bench.train.memory_parts`) reads ``state`` and ``_scales``. A host copy of each scale
  (``_host_scales``) lets the next step unscale with Python scalars, without a device read.
- Scales are powers of two with margin 0, as MS-AMP's: after each update, the largest ``2^k`` with
  ``amax · 2^k <= format max`` (65504 for fp16, 448 for E4M3;
  :func:`bench.train.fp8_allreduce.power_of_two_scale_below`). A power of two makes scaling and
  unscaling exact, so the only error is the format's rounding. The casts saturate by
  construction: the scaled amax is at most the format's largest value, which rounding to nearest
  does not pass; an inf or NaN amax gives a NaN scale, propagated as megatron-core's NaN checks
  expect, not clamped away.

Step, per parameter group, over chunks of whole tensors of at most ``chunk_elements`` elements (a
tensor larger than that is a chunk alone). Per chunk, each line one ``torch._foreach_*`` call (a
multi-tensor launch, which CUDA splits every ~110 tensors or ~21M elements) unless said:

1. unscale: copy master, moments (3 casts) and the gradient (1 cast) into fp32 temporaries, and
   multiply the three states by their host scales (3);
2. ``torch._fused_adamw_`` on the fp32 temporaries: weight decay, moments, bias-corrected update of
   the master (1);
3. write the model's bf16 parameters from the fp32 master (1);
4. per-tensor amax of the three states (3 ``_foreach_norm(ord=inf)``), their scales (~10 small
   kernels over one stacked tensor of 3 scales a tensor), and one device-to-host read of them
   (``.tolist()``): the only host sync, one per chunk, needed because the rescale below takes its
   per-tensor factors as Python scalars (torch's multi-tensor ops take a per-tensor factor only so;
   a list of device scalars falls back to one launch per tensor);
5. rescale the states (3) and cast them into their stored formats (3); copy the new scales into
   ``_scales`` (1).

That is 18 multi-tensor calls, ~10 small kernels and one sync a chunk, whatever the tensor count.
Memory traffic a shard element: ~134 bytes (casts in 7 + 16, unscale 24, Adam 28, amax 12,
rescale 24, casts out 12 + 5, parameter 4 + 2), against ~110 for FusedAdam's path, whose cost is
its per-tensor launches and Python rather than bytes. Temporary memory: 16 bytes an element of the
chunk (fp32 master, gradient and both moments), so at most ``16 · max(chunk_elements, largest
shard tensor)`` bytes (2 GiB at the default 2^27), against FusedAdam's 12 bytes for every element
of the shard at once.

What megatron-core calls on its inner optimizer in precision-aware mode is here: ``step``,
``zero_grad``, ``initialize_state``, ``get_unscaled_state``, ``set_scaled_state``, and
``state_dict``/``load_state_dict`` in FusedAdam's form (states unscaled to fp32). Refused, each with
its fix: CUDA-graph capture, AMSGrad, Adam without decoupled weight decay, no bias correction, state
dtypes other than the paper's, fp32 parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import torch

from bench.train.fp8_allreduce import power_of_two_scale_below

DEFAULT_CHUNK_ELEMENTS = 2**27  # 2 GiB of fp32 temporaries a chunk
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
        problems.append("CUDA-graph capture (its per-chunk scales are read on the host): drop "
                        "--optimizer-cuda-graph")
    if not adam_w_mode:
        problems.append("Adam with L2 regularization: it is AdamW, drop "
                        "--no-decoupled-weight-decay")
    if not bias_correction:
        problems.append("Adam without bias correction: torch's fused AdamW always corrects")
    if not master_weights or master_weight_dtype != torch.float16:
        problems.append(f"master weights {master_weight_dtype if master_weights else 'off'}: the "
                        "paper's are fp16 (--main-params-dtype fp16)")
    if exp_avg_dtype not in FP8_STATE_DTYPES:
        problems.append(f"first moment {exp_avg_dtype}: the paper's is fp8 (--exp-avg-dtype fp8)")
    if exp_avg_sq_dtype != torch.float16:
        problems.append(f"second moment {exp_avg_sq_dtype}: the paper's is fp16 "
                        "(--exp-avg-sq-dtype fp16)")
    return problems


class PaperAdamW(torch.optim.Optimizer):
    """AdamW over fp16 master weights and an fp8/fp16 moment pair, each scaled per tensor.

    Takes the keyword arguments megatron-core gives Transformer Engine's FusedAdam under
    ``--use-precision-aware-optimizer``. ``store_param_remainders`` is accepted and has no effect,
    as in FusedAdam with fp16 master weights (it concerns fp32 ones). ``chunk_elements``: the
    elements stepped at once, which bound the fp32 temporaries (16 bytes an element).
    """

    def __init__(self, params: Iterable[torch.Tensor | dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, bias_correction: bool = True,
                 adam_w_mode: bool = True, capturable: bool = False, master_weights: bool = True,
                 master_weight_dtype: torch.dtype = torch.float16,
                 exp_avg_dtype: torch.dtype = torch.uint8,
                 exp_avg_sq_dtype: torch.dtype = torch.float16, use_decoupled_grad: bool = True,
                 store_param_remainders: bool = False,
                 chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> None:
        problems = _refusals(amsgrad, capturable, adam_w_mode, bias_correction, master_weights,
                             master_weight_dtype, exp_avg_dtype, exp_avg_sq_dtype)
        if problems:
            raise ValueError("PaperAdamW (--optimizer-states paper-kit) does not do: "
                             + "; ".join(problems)
                             + ". Or use --optimizer-states paper (Transformer Engine's FusedAdam)")
        if chunk_elements < 1:
            raise ValueError(f"chunk_elements {chunk_elements}: give at least 1 (default "
                             f"{DEFAULT_CHUNK_ELEMENTS})")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "bias_correction": True}
        super().__init__(params, defaults)
        self.chunk_elements = chunk_elements
        self.use_decoupled_grad = use_decoupled_grad
        # What megatron-core reads of FusedAdam's attributes.
        self.master_weights = True
        self.capturable = False
        self.store_param_remainders = False
        self._scales: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        self._host_scales: dict[torch.Tensor, dict[str, float]] = {}

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
        self._initialize([param])

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
        temp = unscaled_state.detach().to(param.device).clone().view(param.shape)
        self._store([param], {state_name: [temp]})

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
        """One AdamW step of every parameter with a gradient, chunk by chunk."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            # Counted for empty groups too, as FusedAdam does: ranks sharing a shard stay in step.
            group["step"] = group.get("step", 0) + 1
            params = [p for p in group["params"] if p.numel() and self._grad(p) is not None]
            self._initialize([p for p in params if not self.state[p]])
            for chunk in self._chunks(params):
                self._step_chunk(chunk, group)
        return loss

    # --- the step ---------------------------------------------------------------------------------

    def _step_chunk(self, chunk: list[torch.Tensor], group: dict) -> None:
        master, grad, exp_avg, exp_avg_sq = self._temporaries(chunk, 4)
        temps = {"master_param": master, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        for name, temp in temps.items():
            torch._foreach_copy_(temp, [self.state[p][name] for p in chunk])
            torch._foreach_mul_(temp, [self._host_scales[p][name] for p in chunk])
        torch._foreach_copy_(grad, [self._grad(p) for p in chunk])
        beta1, beta2 = group["betas"]
        # One step counter for the group, read (not written) by the kernel for every tensor.
        step = torch.tensor(float(group["step"]), device=chunk[0].device)
        torch._fused_adamw_(master, grad, exp_avg, exp_avg_sq, [], [step] * len(chunk),
                            lr=group["lr"], beta1=beta1, beta2=beta2,
                            weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=False,
                            maximize=False)
        del grad
        torch._foreach_copy_(chunk, master)  # the model's weights: the fp32 master, rounded once
        self._store(chunk, temps)

    def _store(self, chunk: list[torch.Tensor], temps: dict[str, list[torch.Tensor]]) -> None:
        """Scale the fp32 ``temps`` (state name: one tensor a parameter) by powers of two from
        their amaxes, cast them into the states, and keep the scales. Consumes ``temps``."""
        names = list(temps)
        amax = torch.stack([a for name in names
                            for a in torch._foreach_norm(temps[name], ord=math.inf)])
        limits = torch.tensor([_format_max(name) for name in names for _ in chunk],
                              device=amax.device)
        into = power_of_two_scale_below(amax, limits)
        factors = into.tolist()  # the host sync: the rescale takes Python scalars
        n = len(chunk)
        for i, name in enumerate(names):
            torch._foreach_mul_(temps[name], factors[i * n:(i + 1) * n])
            torch._foreach_copy_([self.state[p][name] for p in chunk], temps[name])
        # Powers of two: the reciprocals are exact, on the device and on the host.
        torch._foreach_copy_([self._scales[p][name] for name in names for p in chunk],
                             list(into.reciprocal().view(-1, 1).unbind(0)))
        for i, name in enumerate(names):
            for p, factor in zip(chunk, factors[i * n:(i + 1) * n], strict=True):
                self._host_scales[p][name] = 1.0 / factor

    # --- helpers ------------------------------------------------------------------------------

    @torch.no_grad()
    def _initialize(self, params: list[torch.Tensor]) -> None:
        """Zero moments (scale 1) and the master from the parameter, chunk by chunk."""
        for p in params:
            self._allocate(p)
        for chunk in self._chunks(params):
            (master,) = self._temporaries(chunk, 1)
            torch._foreach_copy_(master, chunk)
            self._store(chunk, {"master_param": master})

    def _allocate(self, p: torch.Tensor) -> None:
        if p.dtype not in PARAM_DTYPES:
            raise ValueError(f"PaperAdamW steps bf16 or fp16 parameters (an fp16 master copy of "
                             f"them), got {p.dtype} {tuple(p.shape)}: keep every parameter in "
                             "--bf16, or use --optimizer-states paper")
        self.state[p] = {name: torch.zeros_like(p, dtype=dtype)
                         for name, dtype in STATE_DTYPES.items()}
        self._scales[p] = {name: torch.ones(1, dtype=torch.float32, device=p.device)
                           for name in STATE_NAMES}
        self._host_scales[p] = dict.fromkeys(STATE_NAMES, 1.0)

    def _temporaries(self, chunk: list[torch.Tensor], count: int) -> list[list[torch.Tensor]]:
        """``count`` lists of fp32 tensors shaped as the chunk's, views of one allocation."""
        sizes = [p.numel() for p in chunk]
        flat = torch.empty(count * sum(sizes), dtype=torch.float32, device=chunk[0].device)
        views = [v.view(p.shape) for v, p in zip(flat.split(sizes * count), chunk * count,
                                                 strict=True)]
        return [views[i * len(chunk):(i + 1) * len(chunk)] for i in range(count)]

    def _chunks(self, params: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
        """Consecutive whole tensors of at most ``chunk_elements`` elements together (a larger
        tensor alone)."""
        chunk, elements = [], 0
        for p in params:
            if chunk and elements + p.numel() > self.chunk_elements:
                yield chunk
                chunk, elements = [], 0
            chunk.append(p)
            elements += p.numel()
        if chunk:
            yield chunk

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
