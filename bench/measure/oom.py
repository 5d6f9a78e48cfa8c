"""torch's account of an allocation that failed, and whether fragmentation caused it.

torch's caching allocator ends an out-of-memory error with its own account (torch 2.11; "N GiB
allowed" only under a per-process cap, as --gpu-memory-cap sets one):

    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.24 GiB. GPU 3 has a total
    capacity of 79.18 GiB of which 11.86 GiB is free. Including non-PyTorch memory, this process has
    67.31 GiB memory in use. 78.66 GiB allowed; Of the allocated memory 49.97 GiB is allocated by
    PyTorch, and 11.33 GiB is reserved by PyTorch but unallocated. If reserved but unallocated ...

Memory reserved but unallocated sits in segments partly in use, which the allocator can neither
hand out whole nor give back: with expandable segments (--allocator expandable) it is not stranded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_SIZE = r"[\d.]+ (?:bytes|KiB|MiB|GiB|TiB)"
ACCOUNT = re.compile(
    rf"Tried to allocate (?P<asked>{_SIZE})\. GPU \d+ has a total capacity of (?P<total>{_SIZE})"
    rf" of which .*?(?:(?P<allowed>{_SIZE}) allowed; )?Of the allocated memory (?P<allocated>{_SIZE})"
    rf" is allocated by PyTorch, and (?P<stranded>{_SIZE}) is reserved by PyTorch but unallocated")
_UNIT_GIB = {"bytes": 2**-30, "KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "TiB": 2**10}

# Fragmentation, not a plan too large: the stranded memory is at least this share of the memory
# allowed, and the allocation would have fit beside what was allocated. Bounded by records under
# --gpu-memory-cap 80 (78.66 GiB allowed): on four H100s, Megatron-DeepSpeed's 13b tp2pp2 at
# micro-batch 2 failed asking 12.24 GiB with 11.33 stranded and 49.97 allocated (it peaked at 66.8 GB
# on H200s without the cap); megatron-core's with CUDA graphs, 80 MiB with 1.22 stranded and 73.59
# allocated beside graphs' pools (a full device); on two H200s, 2.7b dp2 te fp8 at micro-batch 8
# and 6.7b dp2 msamp-o2 at 1 stranded 6.6 and 8.6 GiB, and both trained with expandable segments.
STRANDED_SHARE = 0.05


def _gib(size: str) -> float:
    number, unit = size.split()
    return float(number) * _UNIT_GIB[unit]


@dataclass(frozen=True)
class OomAccount:
    """The allocator's figures at the failure, in GiB."""

    asked: float
    allocated: float  # by PyTorch's tensors
    stranded: float  # reserved by the allocator but unallocated
    allowed: float  # the per-process cap, or the device's capacity where none is set

    @property
    def fragmented(self) -> bool:
        return (self.stranded >= STRANDED_SHARE * self.allowed
                and self.allocated + self.asked <= self.allowed)

    def figures(self) -> str:
        return (f"{self.asked:.2f} GiB asked, {self.allocated:.2f} GiB allocated and {self.stranded:.2f} "
                f"GiB reserved but unallocated of {self.allowed:.2f} GiB allowed")


def oom_account(line: str) -> OomAccount | None:
    """The account in an out-of-memory line, or None where the line has none (a CUDA call's error,
    NCCL's, ROCm's older wording)."""
    found = ACCOUNT.search(line)
    if found is None:
        return None
    allowed = found["allowed"] or found["total"]
    return OomAccount(_gib(found["asked"]), _gib(found["allocated"]), _gib(found["stranded"]),
                      _gib(allowed))


def fragmented(lines: Iterable[str]) -> bool:
    """Whether any of these lines (a record's ``log_errors``) is torch's account of a failure that
    fragmentation caused."""
    return any(account is not None and account.fragmented for account in map(oom_account, lines))
