"""Bytes a parameter by part, as held in training: weights, gradients, master, moments.

After the first optimizer step (Adam's moments are made lazily, in the first ``step``), the training
entry walks what this rank holds and prints one line (``LINE_PREFIX``), which the log parser reads
(:mod:`bench.measure.logparse`):

- ``weights``: the model's parameters, whatever their dtype;
- ``gradients``: megatron-core DDP's gradient buffers (each parameter's ``main_grad`` is a view of
  one), any ``.grad`` left on a parameter, and the ``.grad`` megatron-core's optimizer gives its
  master copies (a view of the buffer, or an fp32 copy of bf16 gradients, which lives from the step
  to the next step's ``zero_grad`` and so is not held at the activation peak), or the
  ``.decoupled_grad`` it gives them under its precision-aware optimizer (a view of the buffer);
- ``master``: the tensors the torch optimizer updates that are not the model's own (megatron-core's
  fp32 copies, ``fp32_from_float16_groups`` or the distributed optimizer's shards), and a
  ``master_param`` kept in optimizer state (precision-aware optimizers) with its scale;
- ``moments``: every other optimizer state tensor (``exp_avg``, ``exp_avg_sq``) and its scales.
  MS-AMP's LBAdamW keeps each as a ``ScalingTensor``: a uint8 or fp16 ``value`` and the scale,
  inverse scale and amax history of its ``meta``. ``step`` counters are bookkeeping, not counted.

Transformer Engine's FusedAdam (megatron-core's precision-aware optimizer, ``--optimizer-states
paper``) keeps an fp16 ``master_param`` and ``exp_avg_sq`` plain, an fp8 ``exp_avg`` as a
``Float8Tensor`` (a tensor with no storage of its own: its uint8 ``_data``, a ``_transpose`` where
one is made, which TE 2.20 makes on Hopper, its ``_scale_inv`` and its quantizer's ``scale`` and
``amax`` hold the bytes), and one
fp32 scale per fp16/fp8 state in ``optimizer._scales[param][name]``; all are counted in their part.

Bytes are those of whole storages (a view counts the buffer it views, padding included), each
storage once, in the order above: an fp32 parameter that is its own master is a weight.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from bench.measure.logparse import MemoryParts

LINE_PREFIX = "kit memory by part:"  # what bench.measure.logparse's MEMORY_BY_PART reads
PARTS = ("weights", "gradients", "master", "moments")
UNCOUNTED_STATE = frozenset({"step"})  # a scalar per tensor: bookkeeping, not a moment
MASTER_STATE = frozenset({"master_param"})  # fp32 master weights kept as optimizer state


def line(parts: MemoryParts) -> str:
    """The log line, e.g. ``kit memory by part: parameters 1024 | weights 2048 | ...``."""
    fields = [f"parameters {parts.parameters}", *(f"{p} {getattr(parts, p)}" for p in PARTS)]
    return f"{LINE_PREFIX} " + " | ".join(fields)


def _state_tensors(value: object) -> Iterator[torch.Tensor]:
    """The tensors of one optimizer state value: a tensor, or a scaled tensor (MS-AMP's
    ``ScalingTensor``: ``value`` and the tensors of its ``meta``)."""
    if isinstance(value, torch.Tensor):
        yield value
        return
    inner, meta = getattr(value, "value", None), getattr(value, "meta", None)
    if isinstance(inner, torch.Tensor):
        yield inner
        yield from (t for t in vars(meta).values() if isinstance(t, torch.Tensor)) if meta else ()


def _has_storage(tensor: torch.Tensor) -> bool:
    """False for a tensor subclass made as a wrapper (Transformer Engine's ``Float8Tensor``): its
    bytes are in the tensors it holds. Its own storage cannot be read (torch raises), or, from TE
    2.20 on, is an empty one TE returns for it: elements without bytes."""
    try:
        storage = tensor.untyped_storage()
        storage.data_ptr()
    except RuntimeError:
        return False
    return storage.nbytes() > 0 or tensor.numel() == 0


def _stored(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensors that hold a tensor's bytes: itself, or for a wrapper those among its attributes
    and its quantizer's (``_data``, ``_transpose``, ``_scale_inv``; ``scale``, ``amax``)."""
    if _has_storage(tensor):
        yield tensor
        return
    quantizer = getattr(tensor, "_quantizer", None)
    for holder in (tensor, quantizer) if quantizer is not None else (tensor,):
        for inner in vars(holder).values():
            if isinstance(inner, torch.Tensor):
                yield from _stored(inner)


class _Ledger:
    """Storages seen so far, so that each is counted once, by the first part that holds it."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, int]] = set()

    def count(self, tensors: Iterable[torch.Tensor | None]) -> int:
        total = 0
        for stored in (t for tensor in tensors if tensor is not None for t in _stored(tensor)):
            storage = stored.untyped_storage()
            key = (str(stored.device), storage.data_ptr())
            if storage.nbytes() and key not in self._seen:
                self._seen.add(key)
                total += storage.nbytes()
        return total


def measure(model_params: Iterable[torch.Tensor],
            optimizers: Iterable[torch.optim.Optimizer]) -> MemoryParts:
    """The parts held for ``model_params`` (every model chunk's) and the torch ``optimizers``
    that step them (:func:`torch_optimizers` of megatron-core's)."""
    params = list({id(p): p for p in model_params}.values())
    optimizers = list(optimizers)
    stepped = [p for opt in optimizers for group in opt.param_groups for p in group["params"]]
    states = [(key, value) for opt in optimizers for state in opt.state.values()
              for key, value in state.items() if key not in UNCOUNTED_STATE]
    # Transformer Engine's FusedAdam keeps the scale of each fp16/fp8 state beside the state.
    states += [(key, scale) for opt in optimizers
               for scales in getattr(opt, "_scales", {}).values() for key, scale in scales.items()]
    ledger = _Ledger()
    weights = ledger.count(params)
    gradients = ledger.count([getattr(p, "main_grad", None) for p in params]
                             + [p.grad for p in params] + [p.grad for p in stepped]
                             + [getattr(p, "decoupled_grad", None) for p in stepped])
    master = ledger.count([*stepped, *(t for key, value in states if key in MASTER_STATE
                                       for t in _state_tensors(value))])
    moments = ledger.count(t for key, value in states if key not in MASTER_STATE
                           for t in _state_tensors(value))
    return MemoryParts(parameters=sum(p.numel() for p in params), weights=weights,
                       gradients=gradients, master=master, moments=moments)


def torch_optimizers(optimizer: object) -> list[torch.optim.Optimizer]:
    """The torch optimizers inside megatron-core's: a ``ChainedOptimizer``'s members' ``.optimizer``
    (a rank without parameters has a chain of none, or members without one)."""
    members = getattr(optimizer, "chained_optimizers", [optimizer])
    inner = [getattr(member, "optimizer", None) for member in members]
    return [opt for opt in inner if isinstance(opt, torch.optim.Optimizer)]


def report_after_first_step() -> None:
    """Have megatron-core's ``train()`` print this rank's parts once, after the first step that
    updated the parameters (a skipped step, an fp16 overflow, has made no moments yet).

    ``megatron.training.training.train`` calls its module's ``train_step`` by name each
    iteration, so the wrapper put there sees the model chunks and the optimizer; rank 0 prints
    (a first pipeline stage: the embeddings, the most parameters).
    """
    import inspect

    import megatron.training.training as training
    from megatron.training import print_rank_0

    original = training.train_step
    signature = inspect.signature(original)
    done = False

    def train_step(*args, **kwargs):
        nonlocal done
        result = original(*args, **kwargs)
        skipped = result[1]  # (losses, skipped_iter, should_checkpoint, ...)
        if not done and not skipped:
            done = True
            bound = signature.bind(*args, **kwargs).arguments
            parts = measure((p for chunk in bound["model"] for p in chunk.parameters()),
                            torch_optimizers(bound["optimizer"]))
            print_rank_0(line(parts))
        return result

    training.train_step = train_step
