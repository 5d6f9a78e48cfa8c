"""Checks of bench.train.grad_reduce on CPU, run by tests/train in BENCH_MEGATRON_PYTHON (megatron-core).

``python tests/train/grad_reduce_checks.py <check>`` runs one check. ``ddp`` spawns two ranks over
gloo, each with a tiny megatron-core GPT wrapped in megatron-core's DistributedDataParallel, and
reduces its real gradient buckets through the patched ``start_grad_sync``. The reference is the
exact (float64) sum of the buckets as megatron-core hands them to its collective: its own
``start_grad_sync`` cannot run on CPU (it asks CUDA for the current stream), and gloo has no
coalesced reduce-scatter. The one substitute: ``torch.cuda.current_device`` answers ``cpu``, where
megatron-core allocates its buffers (the harness, not the code under test).
"""

from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.train import grad_reduce
from bench.train.fp8_allreduce import FORMATS, power_of_two_scale

WORLD = 2
EPS = {fmt: torch.finfo(dtype).eps for fmt, dtype in FORMATS.items()}  # e4m3 2^-3, e5m2 2^-2
# Half the smallest subnormal step: the rounding error of a value that underflows into subnormals.
TINY = {fmt: torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps / 2 for fmt, dtype in FORMATS.items()}
# (distributed optimizer, fp32 buffer, average in collective) cases
CASES = ((False, True, False), (True, True, False), (False, False, True), (True, False, False))


def _build_ddp(rank: int, distributed_optimizer: bool, fp32_buffer: bool, average: bool):
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    from bench.train.attention import SDPACoreAttention
    from bench.train.spec import with_core_attention

    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(0)  # the same initial weights on both ranks, as megatron-core broadcasts them
    bf16 = not fp32_buffer
    config = TransformerConfig(num_layers=2, hidden_size=32, num_attention_heads=4,
                               use_cpu_initialization=True, attention_dropout=0.0, hidden_dropout=0.0,
                               bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32)
    # The kit's SDPA core attention without dropout: megatron-core's own forks a CUDA RNG state.
    spec = with_core_attention(get_gpt_layer_local_spec(), SDPACoreAttention)
    model = GPTModel(config, spec, vocab_size=64, max_sequence_length=16)
    if bf16:
        model = model.bfloat16()
    # Without --overlap-grad-reduce megatron-core makes one bucket per buffer, whatever bucket_size says.
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=fp32_buffer, use_distributed_optimizer=distributed_optimizer,
        average_in_collective=average, check_for_nan_in_grad=True)
    ddp = DistributedDataParallel(config, ddp_config, model)
    generator = torch.Generator().manual_seed(100 + rank)  # different data on each rank
    tokens = torch.randint(0, 64, (2, 16), generator=generator)
    position_ids = torch.arange(16).expand(2, 16)
    mask = torch.ones(2, 1, 16, 16, dtype=torch.bool).triu(1)
    ddp.zero_grad_buffer()
    loss = ddp(tokens, position_ids, mask, labels=tokens).float().mean()
    loss.backward()
    return ddp


def _buckets(ddp):
    return [(group, idx, bucket) for group in ddp.bucket_groups for idx, bucket in enumerate(group.buckets)]


def _check_case(rank: int, strategy: str, fmt: str, distributed_optimizer: bool, fp32_buffer: bool,
                average: bool) -> str:
    case = f"{strategy} {fmt} dist-opt={distributed_optimizer} fp32={fp32_buffer} average={average}"
    ddp = _build_ddp(rank, distributed_optimizer, fp32_buffer, average)
    buckets = _buckets(ddp)
    assert buckets, f"{case}: no gradient buckets"
    # What megatron-core's collective receives: the bucket times its gradient_scaling_factor.
    sent = [b.grad_data.double() * b.gradient_scaling_factor for _, _, b in buckets]
    # The rest of a reduce-scattered buffer: scaled in place, as megatron-core scales it.
    before = [b.grad_data.clone().mul_(b.gradient_scaling_factor) for _, _, b in buckets]
    ddp.finish_grad_sync()
    for (group, idx, bucket), x, old in zip(buckets, sent, before, strict=True):
        assert bucket.grad_data.dtype == (torch.float32 if fp32_buffer else torch.bfloat16), case
        exact, size = x.clone(), x.abs()
        dist.all_reduce(exact)
        dist.all_reduce(size)
        amaxes = [torch.zeros((), dtype=torch.float64) for _ in range(WORLD)]
        dist.all_gather(amaxes, x.abs().amax())
        scales = power_of_two_scale(torch.stack(amaxes), fmt).double()
        if strategy == "fp8-shared-scale":
            scales = scales.min().expand(WORLD)  # the largest amax sets the one scale
        # Per value eps/2 of it, or half a subnormal step where it underflows; then the buffer's rounding.
        bound = EPS[fmt] / 2 * size + (TINY[fmt] / scales).sum() + exact.abs() * (
            2.0**-24 * WORLD if fp32_buffer else 2.0**-8)
        if average:
            exact, bound = exact / WORLD, bound / WORLD
        got = bucket.grad_data.double()
        if distributed_optimizer:
            shard = exact.numel() // WORLD
            part = slice(rank * shard, (rank + 1) * shard)
            view = group.cached_grad_buffer_shard_list[idx][rank]
            assert view.data_ptr() == bucket.grad_data[part].data_ptr(), f"{case}: shard is not the buffer's view"
            outside = torch.ones(exact.numel(), dtype=torch.bool)
            outside[part] = False
            assert torch.equal(bucket.grad_data[outside], old[outside]), f"{case}: wrote outside the shard"
            got, exact, bound = got[part], exact[part], bound[part]
        error = (got - exact).abs()
        assert bool((error <= bound).all()), (
            f"{case}: bucket {idx} worst error {(error - bound).max().item():.3g} past the bound")
        assert bool((got != 0).any()), f"{case}: all zeros"
        # FP8 is not a no-op: some element differs from the exact sum (else the native path ran).
        assert bool((error > 0).any()), f"{case}: equal to the exact sum; was the FP8 path used?"
    return case


def _ddp_worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    torch.cuda.current_device = lambda: "cpu"  # megatron-core allocates its buffers there
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        for strategy in ("fp8-allgather", "fp8-shared-scale"):
            for fmt in FORMATS:
                grad_reduce.install(strategy, fmt)
                for distributed_optimizer, fp32_buffer, average in CASES:
                    case = _check_case(rank, strategy, fmt, distributed_optimizer, fp32_buffer, average)
                    if rank == 0:
                        print("ok", case, flush=True)
    finally:
        dist.destroy_process_group()


def check_ddp() -> None:
    """Both strategies, both formats, all-reduce and distributed-optimizer shard forms, fp32 and bf16 buffers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(port,), nprocs=WORLD, join=True)


def _parse(argv: list[str], world: int):
    from megatron.training.global_vars import unset_global_variables

    from bench.train import pretrain_gpt

    unset_global_variables()  # Megatron's globals are set once a process; each parse sets them anew
    os.environ.update(RANK="0", WORLD_SIZE=str(world), LOCAL_RANK="0")
    sys.argv = ["pretrain_gpt", *argv]
    return pretrain_gpt.parse_megatron_args()


def check_args() -> None:
    """The entry's flags: native by default; the refusals, each naming the fix, before training."""
    from bench.config.capabilities import Capabilities, megatron_flags
    from bench.train import pretrain_gpt
    from bench.train.smoke import smoke_train_argv

    base = [a for a in smoke_train_argv(1, megatron_flags(Capabilities()))
            if a not in ("--overlap-grad-reduce", "--overlap-param-gather")]
    args = _parse([*base, "--use-cpu-initialization"], world=2)
    assert (args.kit_grad_reduce, args.kit_grad_reduce_format) == ("native", "e5m2")
    assert grad_reduce.grad_reduce_problems(args) == []
    args = _parse([*base, "--use-cpu-initialization", "--kit-grad-reduce", "fp8-shared-scale",
                   "--kit-grad-reduce-format", "e5m2"], world=2)
    assert args.data_parallel_size == 2 and grad_reduce.grad_reduce_problems(args) == [], \
        grad_reduce.grad_reduce_problems(args)
    args.overlap_grad_reduce = True
    args.num_distributed_optimizer_instances = 2
    args.ddp_reduce_scatter_with_fp32_accumulation = True
    args.bf16, args.fp16, args.accumulate_allreduce_grads_in_fp32 = False, True, False
    args.data_parallel_size = 1
    problems = grad_reduce.grad_reduce_problems(args)
    for fix in ("drop --overlap-grad-reduce", "drop --num-distributed-optimizer-instances 2",
                "drop --ddp-reduce-scatter-with-fp32-accumulation", "add --accumulate-allreduce-grads-in-fp32",
                "use --kit-grad-reduce native"):
        assert sum(fix in p for p in problems) == 1, (fix, problems)
    assert len(problems) == 5, problems
    # The entry stops before any model or process group, every problem in one message.
    try:
        pretrain_gpt.build_config_container(args)
    except ValueError as error:
        assert "drop --overlap-grad-reduce" in str(error) and "use --kit-grad-reduce native" in str(error)
    else:
        raise AssertionError("build_config_container accepted an fp8 reduction it cannot run")
    # Megatron's parser refuses what is not a choice.
    try:
        _parse([*base, "--kit-grad-reduce", "fp8"], world=2)
    except SystemExit as stop:
        assert stop.code == 2
    else:
        raise AssertionError("--kit-grad-reduce fp8 was accepted")


CHECKS = {"ddp": check_ddp, "args": check_args}

if __name__ == "__main__":
    check = sys.argv[1]  # the parses replace sys.argv
    CHECKS[check]()
    print(f"ok {check}")
