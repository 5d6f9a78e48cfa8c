"""How fast this host issues work: the time the training process takes to issue one small torch op,
measured on rank 0 before Megatron starts, for the record's ``conditions.host_op_us``.

Host-bound steps (small models at micro-batch 1-8) go as fast as the host issues kernels, and hosts
of one machine kind differ: 125m at micro-batch 8 took 0.26 s a step on one H200 machine and
0.37-0.40 s on another, 4,025 kernels a step on both, while both CPUs called themselves "Intel(R)
Xeon(R) Processor" with 16 cores. So the entry times :data:`OPS` in-place adds on a one-element
tensor on the run's device by the host clock, :data:`REPEATS` times after one untimed round, and
prints the median per op (:mod:`bench.measure.host_probe_line`). That is 12,000 ops: 0.04-0.05 s
on the CPU of the 2-core development machine (2.8-4.1 us an op), 0.06 s at 5 us an op.
"""

from __future__ import annotations

import os

import torch

from bench.measure.host_probe_line import probe_line
from bench.train.timing import HostClock, median_seconds

OPS = 2000
REPEATS = 5


def op_issue_us(device: torch.device, ops: int = OPS, repeats: int = REPEATS) -> float:
    """The median host time of issuing one in-place add on a one-element tensor on ``device``, µs
    (``repeats`` timings of ``ops`` adds in a row, after one untimed round)."""
    one = torch.zeros(1, device=device)

    def issue() -> None:
        for _ in range(ops):
            one.add_(1.0)

    # No synchronisation between the rounds: a GPU runs such an add faster than a host issues it,
    # so the queue never fills and the host clock times the issuing alone.
    seconds = median_seconds(issue, warmup=1, iters=repeats, clock=HostClock())
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the probe's adds end here, before training starts
    return seconds / ops * 1e6


def report() -> str | None:
    """Rank 0's line, its ops on the GPU of ``LOCAL_RANK`` (the one Megatron will use) where CUDA is
    there, else on the CPU; None on the other ranks and where the probe failed."""
    try:
        if int(os.environ.get("RANK", "0")) != 0:
            return None  # one figure a run: rank 0's, like the other lines the record reads
        cuda = torch.cuda.is_available()
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
        return probe_line(op_issue_us(device), device.type, OPS, REPEATS)
    except Exception:  # a side figure must never cost the run it describes: its field stays null
        return None
