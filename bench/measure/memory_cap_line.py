"""The line the training entry prints of its ``--kit-gpu-memory-cap`` (:mod:`bench.train.memory_cap`),
written and read here so that the two cannot drift apart.

E.g. ``gpu memory cap 80 GiB: torch's allocator may hold 79.5 of the GPU's 139.8 GiB (0.51 GiB held
outside it)``: rank 0's allocator limit under the cap, the GPU's memory and what the rank held
outside the allocator when the cap was set (the CUDA context), all in GiB (2^30 bytes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30
_NUMBER = r"\d+(?:\.\d+)?"
GPU_MEMORY_CAP = re.compile(
    rf"gpu memory cap (?P<cap>{_NUMBER}) GiB: torch's allocator may hold (?P<allocator>{_NUMBER}) "
    rf"of the GPU's (?P<total>{_NUMBER}) GiB \((?P<outside>{_NUMBER}) GiB held outside it\)")


@dataclass(frozen=True)
class CapLine:
    """What the line says: the cap (GB, the accelerator files' unit, which is GiB) and, in GiB,
    the allocator's limit, the GPU's memory and what was held outside the allocator."""

    cap_gb: float
    allocator_gib: float
    total_gib: float
    outside_gib: float


def cap_line(cap_gb: float, allocator_bytes: float, total_bytes: int, outside_bytes: int) -> str:
    """The line for a cap of ``cap_gb`` leaving the allocator ``allocator_bytes`` of the GPU's
    ``total_bytes``, with ``outside_bytes`` held outside it."""
    return (f"gpu memory cap {cap_gb:g} GiB: torch's allocator may hold {allocator_bytes / GIB:.1f} "
            f"of the GPU's {total_bytes / GIB:.1f} GiB ({outside_bytes / GIB:.2f} GiB held outside it)")


def read_cap_line(log_text: str) -> CapLine | None:
    """The first such line of a run's log (rank 0 prints it once), or None."""
    found = GPU_MEMORY_CAP.search(log_text)
    if found is None:
        return None
    return CapLine(float(found["cap"]), float(found["allocator"]), float(found["total"]),
                   float(found["outside"]))
