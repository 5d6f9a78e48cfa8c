"""``--kit-gpu-memory-cap GB``: train as if each GPU had GB of memory (``run --gpu-memory-cap``).

GB is the accelerator files' unit, which is GiB as nvidia-smi counts it (an H100 80GB reports
79.6 GiB, an H200 140.4), so the cap is GB x 2^30 bytes, at most the whole GPU. torch's caching
allocator may then hold that much less what the process already holds outside it when the cap is
set (the CUDA context), as on a GPU of that size. NCCL's buffers, allocated later outside the
allocator, are not counted: the cap is that much (a few hundred MB) more generous than the smaller
GPU. Past the cap an allocation fails with torch's out-of-memory error, as it would there.
"""

from __future__ import annotations

import os

from bench.measure.memory_cap_line import GIB, cap_line


def cap_fraction(cap_gb: float, total_bytes: int, outside_bytes: int) -> float:
    """The fraction of the GPU's memory torch's allocator may hold under a cap of ``cap_gb``."""
    allowed = min(cap_gb * GIB, total_bytes) - outside_bytes
    if allowed <= 0:
        raise ValueError(f"--kit-gpu-memory-cap {cap_gb:g}: the process already holds "
                         f"{outside_bytes / GIB:.1f} GiB outside torch's allocator, so nothing is "
                         "left under the cap: raise it")
    return allowed / total_bytes


def apply(cap_gb: float | None) -> str | None:
    """Cap this rank's allocator on its GPU (``LOCAL_RANK``); returns the line the entry prints, or
    None without a cap. A ValueError where there is no CUDA GPU to cap."""
    if cap_gb is None:
        return None
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"--kit-gpu-memory-cap {cap_gb:g} caps a CUDA GPU's memory, and this process "
                         "sees none: drop it (run --gpu-memory-cap) or run on the GPU machine")
    device = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(device)  # the device Megatron's initialisation picks too
    free, total = torch.cuda.mem_get_info(device)
    outside = total - free - torch.cuda.memory_reserved(device)
    fraction = cap_fraction(cap_gb, total, outside)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return cap_line(cap_gb, fraction * total, total, outside)
