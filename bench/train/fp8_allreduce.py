"""FP8 gradient reduction on stock NCCL (no MSCCL), and its microbenchmark.

MS-AMP reduces FP8 gradients with an NCCL fork (MSCCL) that adds FP8 to NCCL's reduction ops. Stock
NCCL (and gloo) have no float8 type, but they move bytes: the strategies here only *move* FP8
payloads (as ``uint8``) and add them after arrival, in fp32, so no collective ever adds FP8.

Vocabulary: a *bucket* is a flat 1-D gradient tensor (bf16, fp16 or fp32) of the same length on every
rank of the group; its *format* is ``e4m3`` (``torch.float8_e4m3fn``, max 448) or ``e5m2``
(``torch.float8_e5m2``, max 57344); a *scale* multiplies values into the format.

- ``allgather`` (:func:`allgather_reduce`): each rank scales by its own amax, all-gathers every rank's
  FP8 payload with its fp32 inverse scale (one collective: the scale rides behind its payload), and
  dequantizes and sums all parts locally. Every rank gets the whole reduced bucket.
- ``shared-scale`` (:func:`shared_scale_reduce_scatter`): an all-reduce MAX of the amax first, so every
  rank casts with the same scale; an all-to-all of the ``uint8`` chunks then hands each rank the
  pieces of its own shard, which it sums. Each rank gets its shard of the reduced bucket (what a
  distributed optimizer needs); the bucket is zero-padded to a multiple of the world size.
  :func:`shared_scale_all_reduce` all-gathers the reduced shards in the bucket's dtype (what plain
  data parallelism needs).

Bytes each rank sends per bucket element, for N elements over n ranks (ring algorithms, nccl-tests'
bus-bandwidth convention; :func:`wire_bytes_per_element`):

===============================  ============  ==========================  =====  =====
strategy                         result        bytes per element           n = 2  n = 8
===============================  ============  ==========================  =====  =====
bf16 reduce-scatter (baseline)   shard         2·(n−1)/n                   1      1.75
bf16 all-reduce                  whole bucket  2·2·(n−1)/n                 2      3.5
fp8 allgather                    whole bucket  (n−1) + 4·(n−1)/N           1      7
fp8 shared-scale reduce-scatter  shard         (n−1)/n  (+ one fp32 MAX)   0.5    0.875
fp8 shared-scale all-reduce      whole bucket  (n−1)/n + 2·(n−1)/n         1.5    2.625
===============================  ============  ==========================  =====  =====

The all-gather grows with n: at two ranks it moves half a bf16 all-reduce's bytes, at four the same.
The all-to-all is n−1 point-to-point transfers in NCCL, not a ring; which one wins on two H100s is for
the benchmark to say (``python -m torch.distributed.run --standalone --nproc-per-node 2 -m
bench.train.fp8_allreduce --out fp8_allreduce.json``; on CPU it runs over gloo).

Scale arithmetic (margin 0, as MS-AMP's ``ScalingMeta.compute_scaling_factor``): ``scale = 2^k`` with
``k`` the largest integer such that ``amax · 2^k <= fp8_max``, computed exactly from the exponents
(:func:`power_of_two_scale`). A power of two makes scaling and unscaling exact in fp32, so the only
error is FP8's rounding: per value at most eps/2 of it (eps = 2^-3 for e4m3, 2^-2 for e5m2) away from
underflow, and for a reduced element at most eps/2 · Σ|x_r| over the ranks. The shared scale is set
by the largest amax: a rank whose gradients are much smaller than another's loses its smallest
values to underflow, which the per-rank scales of ``allgather`` avoid.

Zeros: amax 0 gives scale 1 (no division by zero). Inf or NaN anywhere in a rank's bucket is
propagated, not refused: that rank's scale (under shared-scale, the one scale) is NaN, so the whole
reduced bucket is NaN on every rank (refusing would need every rank to agree before raising, or the
others wait in the next collective; a NaN bucket is what megatron-core's NaN check or a loss
scaler's found-inf step skip looks for).
The sums run in rank order on every rank, so all ranks hold bitwise the same result.

Training reaches it through ``--kit-grad-reduce`` (:mod:`bench.train.grad_reduce`), which hands
megatron-core's gradient buckets to these functions.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn import functional as F

from bench.train.timing import clock_for, loop_seconds

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
BUCKET_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# |k| <= 126: the scale 2^k and its inverse stay normal fp32 numbers (amax down to ~5e-36).
MAX_SCALE_EXPONENT = 126
SCHEMA = "bench.fp8_allreduce/1"
# Bucket sizes in MiB of bf16 gradients; megatron-core's default bucket (40M parameters) is ~80 MiB.
DEFAULT_SIZES_MIB = (40.0, 80.0, 160.0, 320.0, 640.0, 1024.0)
USAGE = ("run under torchrun, one process per GPU: python -m torch.distributed.run --standalone "
         "--nproc-per-node 2 -m bench.train.fp8_allreduce [--out fp8_allreduce.json]")


def fp8_dtype(fmt: str) -> torch.dtype:
    """The torch float8 dtype of ``fmt`` (``e4m3`` or ``e5m2``)."""
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"FP8 format {fmt!r}: choose one of {sorted(FORMATS)}") from None


def power_of_two_scale(amax: torch.Tensor, fmt: str) -> torch.Tensor:
    """``2^k`` (float32, amax's shape) with ``k`` the largest integer such that ``amax · 2^k <= fp8_max``;
    1 where amax is 0, NaN where amax is inf or NaN (:func:`power_of_two_scale_below`)."""
    return power_of_two_scale_below(amax, torch.finfo(fp8_dtype(fmt)).max)


def power_of_two_scale_below(amax: torch.Tensor, limit: float | torch.Tensor) -> torch.Tensor:
    """``2^k`` (float32, amax's shape) with ``k`` the largest integer such that ``amax · 2^k <= limit``
    (a format's largest value; a tensor gives each amax its own); 1 where amax is 0, NaN where amax
    is inf or NaN.

    Exact: with ``amax = m·2^e`` and ``limit = M·2^E`` (frexp, m and M in [0.5, 1)), k = E − e when
    m <= M, else E − e − 1; a log2 in floating point can land one binade too high.
    """
    amax = amax.float()
    big_m, big_e = torch.frexp(torch.as_tensor(limit, dtype=torch.float32, device=amax.device))
    m, e = torch.frexp(amax)
    k = (big_e - e - (m > big_m).int()).clamp(-MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT)
    # 2^k exactly on any device: k + 127 in a float32's exponent bits, mantissa zero.
    scale = ((k + 127) << 23).to(torch.int32).view(torch.float32)
    scale = torch.where(amax > 0, scale, torch.ones_like(scale))
    return torch.where(torch.isfinite(amax), scale, torch.full_like(scale, math.nan))


def saturating_cast(x: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x · scale`` in FP8, as ``uint8`` bytes of x's shape, clamped to ±fp8_max before the cast:
    torch's cast does not promise to saturate (e5m2 overflows to inf)."""
    dtype = fp8_dtype(fmt)
    fp8_max = torch.finfo(dtype).max
    return (x.float() * scale).clamp(-fp8_max, fp8_max).to(dtype).view(torch.uint8)


def dequantize(payload: torch.Tensor, scale_inv: torch.Tensor, fmt: str) -> torch.Tensor:
    """FP8 bytes back to float32, times ``scale_inv``."""
    return payload.view(fp8_dtype(fmt)).float() * scale_inv


def check_bucket(bucket: torch.Tensor, fmt: str) -> None:
    """Refuse what the strategies cannot reduce: ValueError naming what is wrong."""
    fp8_dtype(fmt)
    if bucket.dim() != 1 or bucket.numel() == 0 or not bucket.is_contiguous():
        raise ValueError(f"a gradient bucket is a flat, non-empty, contiguous tensor; got shape "
                         f"{tuple(bucket.shape)}, contiguous={bucket.is_contiguous()}")
    if bucket.dtype not in BUCKET_DTYPES:
        raise ValueError(f"a gradient bucket is one of {[str(d) for d in BUCKET_DTYPES]}; got {bucket.dtype}")


def _finish(total: torch.Tensor, world: int, average: bool, dtype: torch.dtype) -> torch.Tensor:
    if average:
        total /= world
    return total.to(dtype)


def allgather_reduce(bucket: torch.Tensor, fmt: str = "e4m3", average: bool = False,
                     group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The sum (or with ``average``, the mean) over the group of ``bucket``, in its dtype, on every rank:
    each rank's FP8 payload and scale all-gathered, dequantized and summed in fp32 in rank order."""
    check_bucket(bucket, fmt)
    world, n = dist.get_world_size(group), bucket.numel()
    scale = power_of_two_scale(bucket.abs().amax(), fmt)
    # One collective a bucket: the inverse scale's four bytes ride behind the payload.
    send = torch.cat([saturating_cast(bucket, scale, fmt), scale.reciprocal().reshape(1).view(torch.uint8)])
    gathered = send.new_empty(world * (n + 4))
    dist.all_gather_into_tensor(gathered, send, group=group)
    parts = gathered.view(world, n + 4)
    scales_inv = parts[:, n:].contiguous().view(torch.float32)
    total = torch.zeros(n, dtype=torch.float32, device=bucket.device)
    for rank in range(world):
        # q · 2^-k is exact in fp32, so this equals dequantize() then add.
        total.addcmul_(parts[rank, :n].view(fp8_dtype(fmt)).float(), scales_inv[rank])
    return _finish(total, world, average, bucket.dtype)


def shard_length(elements: int, world: int) -> int:
    """Elements of each rank's shard: the bucket is zero-padded to ``world · shard_length``."""
    return -(-elements // world)


def shared_scale_reduce_scatter(bucket: torch.Tensor, fmt: str = "e4m3", average: bool = False,
                                group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """This rank's shard (``shard_length`` elements, rank r holding ``[r·s, (r+1)·s)`` of the zero-padded
    bucket) of the sum or mean over the group, in the bucket's dtype: one scale from the group's amax,
    FP8 chunks exchanged all-to-all, this shard's pieces summed in fp32 in rank order."""
    check_bucket(bucket, fmt)
    world, n = dist.get_world_size(group), bucket.numel()
    amax = bucket.abs().amax().float().reshape(1)
    # NCCL's MAX may drop a NaN; as inf it wins, and makes the shared scale NaN on every rank
    # (posinf too: nan_to_num's default would turn inf into fp32's largest finite value).
    dist.all_reduce(amax.nan_to_num_(nan=math.inf, posinf=math.inf), op=dist.ReduceOp.MAX, group=group)
    scale = power_of_two_scale(amax, fmt)
    shard = shard_length(n, world)
    # Zero bytes are +0 in both formats: the padding adds nothing.
    payload = F.pad(saturating_cast(bucket, scale, fmt), (0, world * shard - n))
    pieces = torch.empty_like(payload)
    dist.all_to_all_single(pieces, payload, group=group)
    total = torch.zeros(shard, dtype=torch.float32, device=bucket.device)
    for piece in pieces.view(world, shard):
        total += piece.view(fp8_dtype(fmt)).float()
    total *= scale.reciprocal()
    return _finish(total, world, average, bucket.dtype)


def shared_scale_all_reduce(bucket: torch.Tensor, fmt: str = "e4m3", average: bool = False,
                            group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The whole reduced bucket on every rank: :func:`shared_scale_reduce_scatter`, then the shards
    all-gathered in the bucket's dtype."""
    shard = shared_scale_reduce_scatter(bucket, fmt, average, group)
    full = shard.new_empty(dist.get_world_size(group) * shard.numel())
    dist.all_gather_into_tensor(full, shard, group=group)
    return full[:bucket.numel()]


# --- the microbenchmark ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Strategy:
    """One way to reduce a bf16 bucket: what each rank ends with and the bytes it sends an element."""

    name: str
    result: str  # "shard" or "full"
    wire: Callable[[int, int], float]  # (world size n, elements N) -> bytes sent per element
    reduce: Callable[[torch.Tensor, str, dist.ProcessGroup | None], torch.Tensor]


def _bf16_reduce_scatter(bucket: torch.Tensor, fmt: str, group: dist.ProcessGroup | None) -> torch.Tensor:
    out = bucket.new_empty(shard_length(bucket.numel(), dist.get_world_size(group)))
    dist.reduce_scatter_tensor(out, bucket, group=group)
    return out


def _bf16_all_reduce(bucket: torch.Tensor, fmt: str, group: dist.ProcessGroup | None) -> torch.Tensor:
    out = bucket.clone()  # the bucket is reused: reduce a copy
    dist.all_reduce(out, group=group)
    return out


STRATEGIES = (
    Strategy("bf16-reduce-scatter", "shard", lambda n, _: 2 * (n - 1) / n, _bf16_reduce_scatter),
    Strategy("bf16-all-reduce", "full", lambda n, _: 4 * (n - 1) / n, _bf16_all_reduce),
    Strategy("fp8-allgather", "full", lambda n, elements: (n - 1) * (1 + 4 / elements),
             lambda b, fmt, g: allgather_reduce(b, fmt, group=g)),
    Strategy("fp8-shared-scale-reduce-scatter", "shard", lambda n, _: (n - 1) / n,
             lambda b, fmt, g: shared_scale_reduce_scatter(b, fmt, group=g)),
    Strategy("fp8-shared-scale-all-reduce", "full", lambda n, _: 3 * (n - 1) / n,
             lambda b, fmt, g: shared_scale_all_reduce(b, fmt, group=g)),
)


def wire_bytes_per_element(strategy: str, world: int, elements: int) -> float:
    """Bytes each rank sends per bucket element under ``strategy`` (the module docstring's table)."""
    return next(s for s in STRATEGIES if s.name == strategy).wire(world, elements)


@dataclass(frozen=True)
class Row:
    """One strategy at one bucket size: the slowest rank's mean time and the worst rank's error."""

    strategy: str
    result: str
    bucket_mib: float
    elements: int
    wire_bytes_per_element: float
    time_ms: float
    bucket_gbps: float  # bf16 bucket bytes reduced per second
    rel_error: float  # ‖result − fp32 sum‖ / ‖fp32 sum‖ on this rank's part


def _max_over_ranks(value: float, device: torch.device) -> float:
    held = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(held, op=dist.ReduceOp.MAX)
    return held.item()


def _time_ms(call: Callable[[], object], device: torch.device, warmup: int, iters: int) -> float:
    seconds = loop_seconds(call, iters, clock_for(device), warmup=warmup, line_up=dist.barrier)
    # The slowest rank sets the pace of a collective.
    return _max_over_ranks(seconds * 1e3, device)


def measure(sizes_mib: Sequence[float], fmt: str, warmup: int, iters: int, device: torch.device) -> list[Row]:
    """Every strategy at every size on the default group, a bf16 bucket of normal random values."""
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = []
    for size in sizes_mib:
        # A multiple of the world size: megatron-core pads its buckets so, and reduce_scatter_tensor needs it.
        elements = max(world, int(size * 2**20) // 2 // world * world)
        generator = torch.Generator(device=device).manual_seed(rank)
        bucket = torch.randn(elements, generator=generator, device=device).to(torch.bfloat16)
        exact = bucket.float()
        dist.all_reduce(exact)
        shard = shard_length(elements, world)
        for strategy in STRATEGIES:
            got = strategy.reduce(bucket, fmt, None).float()
            want = exact if strategy.result == "full" else exact[rank * shard:(rank + 1) * shard]
            error = _max_over_ranks(((got - want).norm() / want.norm()).item(), device)
            ms = _time_ms(functools.partial(strategy.reduce, bucket, fmt, None), device, warmup, iters)
            rows.append(Row(strategy.name, strategy.result, size, elements,
                            strategy.wire(world, elements), ms, elements * 2 / ms / 1e6, error))
    return rows


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a fixed-width table, each time also as a multiple of bf16 reduce-scatter's."""
    baseline = {r.bucket_mib: r.time_ms for r in rows if r.strategy == "bf16-reduce-scatter"}
    lines = [f"{'MiB':>7} {'strategy':<32} {'result':<6} {'B/elem':>6} {'ms':>9} {'GB/s':>8} "
             f"{'x bf16 RS':>9} {'rel err':>9}"]
    for r in rows:
        lines.append(f"{r.bucket_mib:>7g} {r.strategy:<32} {r.result:<6} {r.wire_bytes_per_element:>6.3f} "
                     f"{r.time_ms:>9.3f} {r.bucket_gbps:>8.1f} {baseline[r.bucket_mib] / r.time_ms:>9.2f} "
                     f"{r.rel_error:>9.2e}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.train.fp8_allreduce", description=(
        "Time the FP8 gradient reductions against bf16 reduce-scatter and all-reduce; " + USAGE))
    parser.add_argument("--sizes-mib", type=lambda text: [float(s) for s in text.split(",")],
                        default=list(DEFAULT_SIZES_MIB),
                        help="bf16 bucket sizes in MiB, comma-separated (default: %(default)s)")
    parser.add_argument("--format", choices=sorted(FORMATS), default="e4m3",
                        help="FP8 format of the payload (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per case (default: %(default)s)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per case (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write the table as JSON (schema bench.fp8_allreduce/1)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Rank 0 prints the table and writes ``--out``. NCCL on GPUs, gloo on CPU."""
    args = parse_args(argv)
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        print(f"fp8_allreduce: needs two or more ranks; {USAGE}", file=sys.stderr)
        return 2
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        rows = measure(args.sizes_mib, args.format, args.warmup, args.iters, device)
        if dist.get_rank() == 0:
            print(format_table(rows))
            if args.out:
                report = {
                    "schema": SCHEMA,
                    "backend": dist.get_backend(),
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "world_size": dist.get_world_size(),
                    "format": args.format,
                    "warmup": args.warmup,
                    "iters": args.iters,
                    "torch": torch.__version__,
                    "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
                    "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
                    "rows": [asdict(r) for r in rows],
                }
                args.out.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
