"""Where a published row's layout stands in the kit's sweep at its GPU count: the check that the
model orders layouts as the people who chose them did.

The sweep's candidates are every valid layout of the row's GPUs in each shape
(``bench.planning.layout.shaped_layouts``: sequence parallelism, two virtual stages) at the row's
micro and global batch that fits the card by the kit's memory estimate, each priced by the fit at
the row's precision and layers; the published layout's place among them counts from 1 (the
fastest). Nodes are taken as eight GPUs, as on every machine the published rows ran on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from bench.config.platforms import load_accelerator
from bench.planning.layout import Layout, shaped_layouts
from bench.planning.memory import Counted, fits, state_bytes
from bench.planning.predict.case import Case
from bench.planning.predict.facts import Performance
from bench.planning.predict.model import predict
from bench.planning.predict.published import PublishedCase

GPUS_PER_NODE = 8
TOP = 3  # the published layout should be among the sweep's fastest this many


@dataclass(frozen=True)
class Placed:
    """A priced row's place in its sweep: ``place`` (1: fastest) of ``layouts`` that fit, and the
    name of the sweep's fastest."""

    label: str
    place: int
    layouts: int
    fastest: str

    @property
    def line(self) -> str:
        return (f"  {self.label}: its layout ranks {self.place} of {self.layouts} in the sweep "
                f"(fastest: {self.fastest})")


def place_in_sweep(row: PublishedCase, performance: Mapping[str, Performance],
                   factors: dict[str, float]) -> Placed | None:
    """``row``'s place among the layouts of its GPUs, None where it is not priced."""
    case, preset, precision = row.case, row.preset, row.precision
    if case is None or preset is None or precision is None:
        return None
    device_gb = load_accelerator(case.accelerator).memory_gb
    perf = performance[case.accelerator]

    def step(lay: Layout | Case) -> float:
        return predict(replace(case, tp=lay.tp, pp=lay.pp, dp=lay.dp, vp=lay.vp, sp=lay.sp),
                       perf, factors).step_s

    def counted(lay: Layout) -> Counted:
        return Counted(preset, lay, optimizer_bytes=state_bytes(precision), fp8=precision.fp8)

    shape = (case.tp, case.pp, case.dp, case.vp, case.sp)
    others = sorted((step(lay), lay.name)
                    for lay in shaped_layouts(preset, row.gpus, GPUS_PER_NODE, case.micro_batch, case.global_batch)
                    if (lay.tp, lay.pp, lay.dp, lay.vp, lay.sp) != shape and fits(counted(lay), device_gb))
    own = step(case)
    faster = [name for seconds, name in others if seconds < own]
    return Placed(row.label, len(faster) + 1, len(others) + 1, faster[0] if faster else "its own")
