"""Checks of bench.train.fp8_allreduce on CPU, run by tests/train in BENCH_MEGATRON_PYTHON (torch).

``python tests/train/fp8_allreduce_checks.py <check> [world]`` runs one check: the arithmetic ones in
this process, the collective ones in ``world`` processes over gloo (FP8 carried as ``uint8``, as on
NCCL). It prints ``ok <check>`` and exits 0, or fails with the reason.

Every rank builds every rank's bucket from the same seeds, so each computes the one-process
reference itself: the same casts and sums without a collective.
"""

from __future__ import annotations

import math
import socket
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.train.fp8_allreduce import (
    FORMATS,
    allgather_reduce,
    check_bucket,
    dequantize,
    power_of_two_scale,
    saturating_cast,
    shard_length,
    shared_scale_all_reduce,
    shared_scale_reduce_scatter,
)

EPS = {fmt: torch.finfo(dtype).eps for fmt, dtype in FORMATS.items()}  # e4m3 2^-3, e5m2 2^-2
# Reductions that return the whole bucket on every rank.
FULL = {"allgather": allgather_reduce, "shared-scale all-reduce": shared_scale_all_reduce}


def buckets(world: int, elements: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    """Every rank's bucket: normal values of a different magnitude per rank (2^r), so scales differ."""
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(elements, generator=generator) * 2.0**r).to(dtype) for r in range(world)]


def reference_allgather(parts: list[torch.Tensor], fmt: str, average: bool) -> torch.Tensor:
    total = torch.zeros(parts[0].numel())
    for x in parts:
        scale = power_of_two_scale(x.abs().amax(), fmt)
        total += dequantize(saturating_cast(x, scale, fmt), scale.reciprocal(), fmt)
    return (total / len(parts) if average else total).to(parts[0].dtype)


def reference_shared_scale(parts: list[torch.Tensor], fmt: str, average: bool) -> torch.Tensor:
    """The whole bucket (padded to a multiple of the world size) reduced with one shared scale."""
    world, n = len(parts), parts[0].numel()
    padded = world * shard_length(n, world)
    scale = power_of_two_scale(torch.stack([x.abs().amax().float() for x in parts]).amax(), fmt)
    total = torch.zeros(padded)
    for x in parts:
        total += torch.nn.functional.pad(dequantize(saturating_cast(x, scale, fmt), 1.0, fmt), (0, padded - n))
    total *= scale.reciprocal()
    return (total / world if average else total).to(parts[0].dtype)


def _all_nan_everywhere(x: torch.Tensor) -> bool:
    flag = torch.tensor([int(bool(torch.isnan(x).all()))])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


# --- collective checks: each runs on every rank -----------------------------------------------

def check_reference(rank: int, world: int) -> None:
    """Both strategies equal the one-process reference bit for bit, with and without padding."""
    for fmt in FORMATS:
        for dtype in (torch.float32, torch.bfloat16):
            for elements in (world * 64, world * 64 + 1, 7):  # divides, does not, shorter than 2·world
                for average in (False, True):
                    parts = buckets(world, elements, dtype, seed=elements)
                    case = f"{fmt} {dtype} n={elements} average={average}"
                    got = allgather_reduce(parts[rank], fmt, average)
                    assert got.dtype == dtype and torch.equal(got, reference_allgather(parts, fmt, average)), case
                    want = reference_shared_scale(parts, fmt, average)
                    shard = shard_length(elements, world)
                    got = shared_scale_reduce_scatter(parts[rank], fmt, average)
                    assert got.dtype == dtype and got.shape == (shard,), case
                    assert torch.equal(got, want[rank * shard:(rank + 1) * shard]), case
                    got = shared_scale_all_reduce(parts[rank], fmt, average)
                    assert torch.equal(got, want[:elements]), case
    # The padding adds exact zeros: the last shard's tail is 0 after the reduction.
    n = world * 5 + 1
    tail = shared_scale_reduce_scatter(torch.ones(n), "e4m3")
    if rank == world - 1:
        kept = n - (world - 1) * shard_length(n, world)
        assert torch.equal(tail[kept:], torch.zeros(tail.numel() - kept)), tail


def check_error_bound(rank: int, world: int) -> None:
    """Against the exact sum: |error| <= eps/2 · Σ|x_r| (+ fp32 rounding) per element, away from underflow."""
    n = 4096
    generator = torch.Generator().manual_seed(1)
    parts = []
    for r in range(world):
        # Magnitudes log-uniform over 2^-10..1 of amax 2^r, random signs: every scaled value stays a
        # normal FP8 number under either scale (the shared one is set by the largest amax, 2^(n-1)).
        magnitude = torch.exp2(-10 * torch.rand(n, generator=generator) + r)
        sign = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
        parts.append(magnitude * sign)
    exact = torch.stack(parts).double().sum(0)
    size = torch.stack(parts).double().abs().sum(0)
    for fmt in FORMATS:
        bound = EPS[fmt] / 2 * size + world * 2.0**-24 * size
        for name, reduce in FULL.items():
            error = (reduce(parts[rank], fmt).double() - exact).abs()
            assert bool((error <= bound).all()), f"{name} {fmt}: worst {(error / size).max():.3g} of Σ|x|"
            # Same-sign values: the relative error is at most eps/2, within the eps · n of a loose bound.
            same = reduce(parts[rank].abs(), fmt).double()
            rel = ((same - size) / size).abs().max().item()
            assert rel <= EPS[fmt] / 2 + world * 2.0**-24, f"{name} {fmt}: relative error {rel}"
    # Where the ranks' gradients differ by 2^20, the shared scale (set by the large one) loses the
    # small rank's values to underflow; per-rank scales keep them.
    tiny = 2.0**-20 * torch.ones(n)
    x = tiny if rank == 0 else torch.ones(n)
    want = 1.0 * (world - 1) + 2.0**-20
    assert torch.equal(allgather_reduce(x, "e4m3"), torch.full((n,), want))
    assert torch.equal(shared_scale_all_reduce(x, "e4m3"), torch.full((n,), float(world - 1)))


def check_zeros(rank: int, world: int) -> None:
    """amax 0 (a bucket of zeros) reduces to zeros, no NaN; on one rank only, to the others' sum."""
    n = world * 8 + 3
    for fmt in FORMATS:
        for name, reduce in FULL.items():
            assert torch.equal(reduce(torch.zeros(n), fmt), torch.zeros(n)), (name, fmt)
            assert torch.equal(reduce(torch.zeros(n, dtype=torch.bfloat16), fmt),
                               torch.zeros(n, dtype=torch.bfloat16)), (name, fmt)
            x = torch.zeros(n) if rank == 0 else torch.full((n,), 0.5)
            assert torch.equal(reduce(x, fmt), torch.full((n,), 0.5 * (world - 1))), (name, fmt)
            x = torch.zeros(n)
            x[rank] = -1.5  # zeros beside values: zero bytes stay +0
            assert torch.equal(reduce(x, fmt), torch.tensor([-1.5] * world + [0.0] * (n - world))), (name, fmt)
        assert not torch.isnan(shared_scale_reduce_scatter(torch.zeros(n), fmt)).any()


def check_nonfinite(rank: int, world: int) -> None:
    """inf, -inf or NaN in one rank's bucket: the whole reduced bucket is NaN on every rank (propagated)."""
    n = world * 8 + 1
    for fmt in FORMATS:
        for bad in (math.inf, -math.inf, math.nan):
            for culprit in (0, world - 1):
                x = torch.randn(n)
                if rank == culprit:
                    x[3] = bad
                for name, reduce in {**FULL, "shared-scale reduce-scatter": shared_scale_reduce_scatter}.items():
                    assert _all_nan_everywhere(reduce(x, fmt)), (name, fmt, bad, culprit)
                    # The group is still in step: a collective afterwards completes with the right sum.
                    ok = allgather_reduce(torch.ones(n), fmt)
                    assert torch.equal(ok, torch.full((n,), float(world))), (name, fmt, bad)


# --- arithmetic checks: one process --------------------------------------------------------------

def check_saturating_cast() -> None:
    one = torch.ones(())
    x = torch.tensor([448.0, 449.0, 464.0, 500.0, 1e6, -1e6, 3.0e38, 0.0, -0.0, 1.0])
    got = dequantize(saturating_cast(x, one, "e4m3"), one, "e4m3")
    assert got.tolist() == [448.0, 448.0, 448.0, 448.0, 448.0, -448.0, 448.0, 0.0, 0.0, 1.0], got
    x = torch.tensor([57344.0, 61439.0, 62000.0, 1e6, -1e6])
    got = dequantize(saturating_cast(x, one, "e5m2"), one, "e5m2")
    assert got.tolist() == [57344.0, 57344.0, 57344.0, 57344.0, -57344.0], got
    # Why the clamp is there: without it torch's cast overflows e5m2 to inf.
    assert torch.isinf(torch.tensor([1e6]).to(torch.float8_e5m2).float()).all()
    # Bytes: one per value, the bit pattern of torch's own float8 for in-range values.
    y = torch.randn(1000) * 100
    q = saturating_cast(y, one, "e4m3")
    assert q.dtype == torch.uint8 and q.shape == y.shape
    assert torch.equal(q, y.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8))
    # The scale multiplies before the cast; the inverse scale undoes it exactly.
    scale = torch.tensor(2.0**6)
    assert torch.equal(dequantize(saturating_cast(y / 64, scale, "e4m3"), 1 / scale, "e4m3"),
                       y.clamp(-448, 448).to(torch.float8_e4m3fn).float() / 64)
    # NaN stays NaN (the non-finite path relies on it).
    for fmt in FORMATS:
        assert torch.isnan(dequantize(saturating_cast(torch.tensor([math.nan]), one, fmt), one, fmt)).all()


def check_scale() -> None:
    generator = torch.Generator().manual_seed(2)
    amax = torch.exp2(torch.rand(10000, generator=generator) * 200 - 100)
    edges = torch.tensor([448.0, 224.0, 448.0 * 2**-20, 448.0 * 2**20, 447.99, 448.01, 1.0, 1e-30, 3.0e38])
    amax = torch.cat([amax, edges, edges * 1.0000001])
    for fmt, dtype in FORMATS.items():
        fmax = torch.finfo(dtype).max
        scale = power_of_two_scale(amax, fmt)
        # A power of two, the largest that keeps amax in range: amax·scale in (fmax/2, fmax].
        mantissa, _ = torch.frexp(scale)
        assert bool((mantissa == 0.5).all())
        scaled = amax.double() * scale.double()
        assert bool((scaled <= fmax).all()) and bool((scaled > fmax / 2).all()), fmt
        # MS-AMP's formula, 2^floor(log2(fmax / amax)), where no rounding blurs the floor.
        exponent = torch.log2(fmax / amax.double())
        clear = (exponent - exponent.floor() > 1e-6) & (exponent.ceil() - exponent > 1e-6)
        assert torch.equal(scale[clear].double(), torch.exp2(exponent.floor())[clear]), fmt
        special = power_of_two_scale(torch.tensor([0.0, math.inf, math.nan, 1e-40]), fmt)
        assert special[0].item() == 1.0 and math.isnan(special[1]) and math.isnan(special[2])
        assert special[3].item() == 2.0**126  # capped: scale and 1/scale stay normal fp32 numbers
        assert power_of_two_scale(torch.tensor(fmax), fmt).item() == 1.0
    assert power_of_two_scale(torch.tensor(1.0, dtype=torch.bfloat16), "e4m3").item() == 256.0


def check_refusals() -> None:
    for bad, phrase in ((torch.zeros(2, 3), "flat"), (torch.zeros(0), "flat"),
                        (torch.zeros(8)[::2], "contiguous=False"), (torch.zeros(4, dtype=torch.int32), "int32")):
        try:
            check_bucket(bad, "e4m3")
        except ValueError as error:
            assert phrase in str(error), error
        else:
            raise AssertionError(f"accepted {bad}")
    try:
        check_bucket(torch.zeros(4), "e3m4")
    except ValueError as error:
        assert "['e4m3', 'e5m2']" in str(error), error
    else:
        raise AssertionError("accepted format e3m4")


COLLECTIVE: dict[str, Callable[[int, int], None]] = {
    "reference": check_reference,
    "error_bound": check_error_bound,
    "zeros": check_zeros,
    "nonfinite": check_nonfinite,
}
LOCAL: dict[str, Callable[[], None]] = {
    "saturating_cast": check_saturating_cast,
    "scale": check_scale,
    "refusals": check_refusals,
}


def _rank(rank: int, world: int, port: int, check: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        COLLECTIVE[check](rank, world)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(check: str, world: int = 0) -> None:
    torch.set_num_threads(1)  # several ranks share the CPU
    if check in LOCAL:
        LOCAL[check]()
    else:
        mp.spawn(_rank, args=(world, _free_port(), check), nprocs=world)
    print(f"ok {check}")


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
