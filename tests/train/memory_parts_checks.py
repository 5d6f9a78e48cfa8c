"""Checks of bench.train.memory_parts on CPU, run by tests/train in BENCH_MEGATRON_PYTHON.

``python tests/train/memory_parts_checks.py <check>`` runs one check in a fresh process. The model
is megatron-core's GPT as the training entry builds it (the smoke argv, float32 or bf16, on CPU);
megatron-core's DDP and mixed-precision optimizer need CUDA, so the bf16 check lays out what they
hold by hand: one contiguous fp32 gradient buffer whose views are the parameters' ``main_grad``,
fp32 master copies stepped by torch's AdamW, each master's ``.grad`` a view of its ``main_grad``.
"""

from __future__ import annotations

import inspect
import sys

import torch

from bench.measure.logparse import MemoryParts
from bench.train.memory_parts import line, measure, report_after_first_step
from tests.train.megatron_checks import _build_model


def _parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(model.parameters())


def _backward(model: torch.nn.Module) -> None:
    """One forward and backward of a tiny batch (token ids 0..15, two sequences)."""
    seq = model.max_sequence_length
    tokens = torch.arange(2 * seq).remainder(16).view(2, seq)
    positions = torch.arange(seq).expand(2, seq)
    model(tokens, positions, None, labels=tokens).float().mean().backward()


def check_fp32_adamw() -> None:
    """float32 GPT, torch AdamW: 4 bytes weights, 4 gradients, no master, 8 moments a parameter."""
    _, model = _build_model("sdpa", bf16=False)
    params = _parameters(model)
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    _backward(model)
    optimizer.step()
    n = sum(p.numel() for p in params)
    got = measure(params, [optimizer])
    assert got == MemoryParts(parameters=n, weights=4 * n, gradients=4 * n, master=0,
                              moments=8 * n), got


def _mixed_precision(model: torch.nn.Module) -> tuple[list[torch.nn.Parameter], torch.optim.AdamW]:
    """bf16 weights, a gradient buffer of fp32 ``main_grad`` views, fp32 masters, one AdamW step."""
    model.bfloat16()
    params = _parameters(model)
    buffer = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32)
    start = 0
    for p in params:
        p.main_grad = buffer[start:start + p.numel()].view_as(p)
        start += p.numel()
    masters = [p.detach().float() for p in params]
    optimizer = torch.optim.AdamW(masters, lr=1e-3)
    _backward(model)
    for p, master in zip(params, masters, strict=True):
        p.main_grad.add_(p.grad)  # what DDP's backward hook does
        p.grad = None
        master.grad = p.main_grad.float()  # fp32 already: the same view, as megatron-core's copy
    optimizer.step()
    return params, optimizer


def check_mixed_precision() -> None:
    """bf16 GPT, fp32 grads and masters, AdamW: 2 + 4 + 4 + 8 bytes a parameter."""
    _, model = _build_model("sdpa", bf16=True)
    params, optimizer = _mixed_precision(model)
    n = sum(p.numel() for p in params)
    got = measure(params, [optimizer])
    assert got == MemoryParts(parameters=n, weights=2 * n, gradients=4 * n, master=4 * n,
                              moments=8 * n), got


class _Float8Stand(torch.Tensor):
    """What Transformer Engine 2.x's FusedAdam keeps as an fp8 ``exp_avg``: a ``Float8Tensor``, a
    wrapper subclass with no storage of its own, holding uint8 ``_data``, a uint8 ``_transpose``
    (made by TE 2.20's ``Float8Quantizer`` on Hopper, whose default usage is row- and column-wise;
    None where it is not), an fp32 ``_scale_inv`` and a quantizer with fp32 ``scale`` and ``amax``
    (TE's optimizers/fused_adam.py ``_initialize_state``, tensor/float8_tensor.py). Its own storage
    either cannot be read (torch raises) or, as TE 2.20's ``QuantizedTensor.untyped_storage``
    returns, is empty. TE is not in the CPU environment, so this is its layout, not TE's class."""

    @staticmethod
    def __new__(cls, shape: torch.Size, transpose: bool, empty_storage: bool) -> _Float8Stand:
        tensor = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32)
        tensor._data = torch.zeros(shape, dtype=torch.uint8)
        tensor._transpose = torch.zeros(shape[::-1], dtype=torch.uint8) if transpose else None
        tensor._scale_inv = torch.ones(1)
        tensor._quantizer = type("Float8Quantizer", (), {})()
        tensor._quantizer.scale, tensor._quantizer.amax = torch.ones(1), torch.zeros(1)
        tensor._empty_storage = empty_storage
        return tensor

    def untyped_storage(self) -> torch.UntypedStorage:
        if self._empty_storage:
            return torch.UntypedStorage(0)
        return super().untyped_storage()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{func}: the stand-in only holds bytes")


class _PaperAdamStand(torch.optim.Optimizer):
    """FusedAdam's state under megatron-core's precision-aware optimizer with --optimizer-states
    paper, as TE's source lays it out: fp16 ``master_param`` and ``exp_avg_sq``, fp8 ``exp_avg``,
    one fp32 scale per state in ``_scales[param][name]``. Its step is not the thing under test."""

    def __init__(self, params: list[torch.Tensor], transpose: bool, empty_storage: bool) -> None:
        super().__init__(params, {})
        self._scales = {}
        for p in params:
            self.state[p] = {"step": 1, "master_param": p.detach().half(),
                             "exp_avg": _Float8Stand(p.shape, transpose, empty_storage),
                             "exp_avg_sq": torch.zeros_like(p, dtype=torch.float16)}
            self._scales[p] = {name: torch.ones(1) for name in ("master_param", "exp_avg",
                                                                 "exp_avg_sq")}


def check_paper_states() -> None:
    """bf16 GPT under --optimizer-states paper on one data-parallel rank: the distributed
    optimizer steps flat views of the bf16 weights, each ``decoupled_grad`` a view of the bf16
    gradient buffer; 2 + 2 + 2 + 3 bytes a parameter (4 of moments with the fp8 moment's
    transposed copy), plus 4 bytes a scale."""
    _, model = _build_model("sdpa", bf16=True)
    model.bfloat16()
    params = _parameters(model)
    n = sum(p.numel() for p in params)
    buffer = torch.zeros(n, dtype=torch.bfloat16)
    shards, start = [], 0
    for p in params:
        p.main_grad = buffer[start:start + p.numel()].view_as(p)
        shard = p.detach().view(-1)  # megatron-core's shard_model_param: a view of the weight
        shard.decoupled_grad = buffer[start:start + p.numel()]
        shards.append(shard)
        start += p.numel()
    tensors = len(shards)
    # Both ways a wrapper's own storage reads (raising, TE 2.20's empty one), with and without the
    # fp8 moment's transposed copy: the copy is a byte of moments more.
    for transpose in (False, True):
        for empty_storage in (False, True):
            got = measure(params, [_PaperAdamStand(shards, transpose, empty_storage)])
            # master: the fp16 copy and its scale; moments: the fp8 data (and transpose), its
            # scale_inv, the quantizer's scale and amax, FusedAdam's scale of it, the fp16 second
            # moment and its scale.
            moments = (4 if transpose else 3) * n + 5 * 4 * tensors
            assert got == MemoryParts(parameters=n, weights=2 * n, gradients=2 * n,
                                      master=2 * n + 4 * tensors, moments=moments), \
                (transpose, empty_storage, got)


def check_report_line() -> None:
    """The wrapper megatron-core's train() calls: it prints the parts once, after the first step
    that was not skipped, from the model chunks and the (chained) optimizer it was given."""
    import megatron.training.training as training

    _, model = _build_model("sdpa", bf16=True)
    params, optimizer = _mixed_precision(model)

    class Member:  # a megatron-core optimizer: the torch one as .optimizer
        def __init__(self, inner: torch.optim.Optimizer) -> None:
            self.optimizer = inner

    class Chain:
        chained_optimizers = [Member(optimizer)]

    skips = iter([1, 0, 0])

    def train_step(*args, **kwargs):
        return {}, next(skips), False, False, 0, 1.0, 0, 0

    train_step.__signature__ = inspect.signature(training.train_step)
    training.train_step = train_step
    report_after_first_step()
    for _ in range(3):
        training.train_step(None, None, [model], Chain(), None, None, None, iteration=0)
    print(line(measure(params, [optimizer])), file=sys.stderr)  # what it must have printed


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"ok {name}")
