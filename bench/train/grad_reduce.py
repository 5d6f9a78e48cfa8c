"""``--kit-grad-reduce``: megatron-core's data-parallel gradient reduction through the kit's FP8 collectives.

``native`` (the default) leaves megatron-core's DDP alone: its buckets are all-reduced, or
reduce-scattered under ``--use-distributed-optimizer``, in the gradient buffer's dtype. The FP8
strategies replace ``_ParamAndGradBucketGroup.start_grad_sync`` with :func:`fp8_start_grad_sync`,
which keeps megatron-core's steps before the collective (CUDA-graph events, main_grad copy-in, the
NaN/large-gradient check, ``gradient_scaling_factor``, sum or average) and reduces each bucket with
:mod:`bench.train.fp8_allreduce`:

- ``fp8-allgather``: :func:`~bench.train.fp8_allreduce.allgather_reduce` (per-rank scales); under the
  distributed optimizer the rank keeps its shard of the result.
- ``fp8-shared-scale``: :func:`~bench.train.fp8_allreduce.shared_scale_reduce_scatter` under the
  distributed optimizer, :func:`~bench.train.fp8_allreduce.shared_scale_all_reduce` without it.

Results go back where megatron-core's collectives put them: the whole ``bucket.grad_data``
(all-reduce), or this rank's shard view of it (reduce-scatter). Megatron-core runs its collectives
inside ``_coalescing_manager``, which batches them into one NCCL group; the shared scale's all-to-all
needs its amax all-reduce's result first, so the FP8 path runs bucket by bucket, outside it, and
synchronously: ``--overlap-grad-reduce`` is refused (:func:`grad_reduce_problems`), as are the
set-ups whose collectives the replacement does not reproduce.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable

import torch
import torch.distributed as dist

from bench.train.fp8_allreduce import (
    FORMATS,
    allgather_reduce,
    shard_length,
    shared_scale_all_reduce,
    shared_scale_reduce_scatter,
)

GRAD_REDUCE_CHOICES = ("native", "fp8-allgather", "fp8-shared-scale")
FP8_FORMAT_CHOICES = tuple(FORMATS)
# e5m2, as Transformer Engine's HYBRID recipe carries gradients: one scale covers a whole bucket
# (without overlap, the whole buffer), and Adam updates a tensor whose gradients are all small as
# much as one whose gradients are large. e4m3 flushes to zero what lies 2^18 below the bucket's
# amax; e5m2 keeps 2^31, at one mantissa bit less.
DEFAULT_FP8_FORMAT = "e5m2"

Reduce = Callable[..., torch.Tensor]  # (bucket, fmt, average, group) -> reduced tensor


def _allgather_shard(bucket: torch.Tensor, fmt: str, average: bool,
                     group: dist.ProcessGroup) -> torch.Tensor:
    """This rank's shard of the all-gathered reduction (what a reduce-scatter would leave)."""
    shard = shard_length(bucket.numel(), dist.get_world_size(group))
    start = dist.get_rank(group) * shard
    return allgather_reduce(bucket, fmt, average, group)[start:start + shard]


# strategy -> (whole-bucket reduction, this rank's shard of it)
_REDUCTIONS: dict[str, tuple[Reduce, Reduce]] = {
    "fp8-allgather": (allgather_reduce, _allgather_shard),
    "fp8-shared-scale": (shared_scale_all_reduce, shared_scale_reduce_scatter),
}


def grad_reduce_problems(args: Namespace) -> list[str]:
    """What stops ``--kit-grad-reduce`` with these parsed Megatron args, one line each (none for native)."""
    choice = args.kit_grad_reduce
    if choice == "native":
        return []
    problems = []
    if args.overlap_grad_reduce:
        problems.append(f"--kit-grad-reduce {choice} reduces synchronously after the backward pass: "
                        "drop --overlap-grad-reduce (and --overlap-param-gather)")
    if args.num_distributed_optimizer_instances != 1:
        problems.append(f"--kit-grad-reduce {choice} reduces within one distributed-optimizer "
                        "instance: drop --num-distributed-optimizer-instances "
                        f"{args.num_distributed_optimizer_instances}")
    if args.ddp_reduce_scatter_with_fp32_accumulation:
        problems.append(f"--kit-grad-reduce {choice} replaces the reduce-scatter: drop "
                        "--ddp-reduce-scatter-with-fp32-accumulation")
    if args.use_megatron_fsdp or args.use_torch_fsdp2:
        problems.append(f"--kit-grad-reduce {choice} hooks megatron-core's DistributedDataParallel, "
                        "not FSDP: drop --use-megatron-fsdp / --use-torch-fsdp2")
    if args.fp16 and not args.accumulate_allreduce_grads_in_fp32:
        problems.append(f"--kit-grad-reduce {choice} reduces bf16 or fp32 gradient buffers; under "
                        "--fp16 they are fp16: add --accumulate-allreduce-grads-in-fp32")
    if args.data_parallel_size == 1:
        problems.append(f"--kit-grad-reduce {choice} has nothing to reduce with data-parallel size 1:"
                        " use --kit-grad-reduce native, or more GPUs than tp x pp x cp")
    return problems


def _wait_for_cuda_graph_replays(bucket_group) -> None:
    """As megatron-core: a local CUDA-graph replay accumulates into the buckets asynchronously."""
    events = {id(e): e for bucket in bucket_group.buckets for p in bucket.params_list
              if (e := getattr(p, "_cudagraph_wgrad_ready_event", None)) is not None}
    if events:
        stream = torch.cuda.current_stream()
        for event in events.values():
            stream.wait_event(event)


def fp8_start_grad_sync(bucket_group, strategy: str, fmt: str, force_all_reduce: bool = False) -> None:
    """``_ParamAndGradBucketGroup.start_grad_sync`` (megatron-core 0.19.2) with each bucket reduced by
    ``strategy`` in FP8 ``fmt``; synchronous, so no handle is left for ``finish_grad_sync``."""
    reduce_full, reduce_shard = _REDUCTIONS[strategy]
    ddp_config = bucket_group.ddp_config
    _wait_for_cuda_graph_replays(bucket_group)
    for bucket in bucket_group.buckets:
        for param in bucket.params_with_extra_main_grads:
            if getattr(param, "main_grad_copy_in_grad_buffer", None) is not None:
                param.main_grad_copy_in_grad_buffer.copy_(param.main_grad)
    if ddp_config.check_for_nan_in_grad or ddp_config.check_for_large_grads:
        bucket_group.check_grads(check_for_nan_or_inf=ddp_config.check_for_nan_in_grad,
                                 check_for_large=ddp_config.check_for_large_grads)
    sharded = ddp_config.use_distributed_optimizer and not force_all_reduce
    if ddp_config.use_distributed_optimizer:
        group = bucket_group.intra_distributed_optimizer_instance_group
    else:
        group = bucket_group.data_parallel_group
    # gradient_scaling_factor is 1 when the collective averages, 1/dp-like when it sums.
    average = ddp_config.average_in_collective
    with torch.no_grad():
        for idx, bucket in enumerate(bucket_group.buckets):
            if bucket.gradient_scaling_factor != 1.0:
                bucket.grad_data *= bucket.gradient_scaling_factor
            if sharded:
                bucket_shard(bucket_group, idx).copy_(reduce_shard(bucket.grad_data, fmt, average, group))
            else:
                bucket.grad_data.copy_(reduce_full(bucket.grad_data, fmt, average, group))
    bucket_group.grad_reduce_handle = None


def bucket_shard(bucket_group, idx: int) -> torch.Tensor:
    """This rank's shard view of bucket ``idx``'s ``grad_data``, cached as megatron-core caches it."""
    from megatron.core.distributed.param_and_grad_buffer import shard_buffer

    if bucket_group.cached_grad_buffer_shard_list[idx] is None:
        bucket_group.cached_grad_buffer_shard_list[idx] = shard_buffer(
            bucket_group.buckets[idx].grad_data, bucket_group.intra_distributed_optimizer_instance_size)
    return bucket_group.cached_grad_buffer_shard_list[idx][bucket_group.intra_distributed_optimizer_instance_rank]


def install(strategy: str, fmt: str = DEFAULT_FP8_FORMAT) -> None:
    """Make every megatron-core bucket group reduce with ``strategy`` (``native``: leave it be)."""
    if strategy not in GRAD_REDUCE_CHOICES or fmt not in FORMATS:
        raise ValueError(f"--kit-grad-reduce {strategy} --kit-grad-reduce-format {fmt}: choose from "
                         f"{GRAD_REDUCE_CHOICES} and {FP8_FORMAT_CHOICES}")
    if strategy == "native":
        return
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

    def start_grad_sync(self, force_all_reduce: bool | None = False) -> None:
        fp8_start_grad_sync(self, strategy, fmt, bool(force_all_reduce))

    start_grad_sync.__doc__ = f"megatron-core's start_grad_sync, reduced by the kit's {strategy} ({fmt})."
    _ParamAndGradBucketGroup.start_grad_sync = start_grad_sync
