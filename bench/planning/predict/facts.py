"""Measured ceilings of an accelerator: GEMM TFLOP/s per shape, memory bandwidth, NCCL all-reduce
bus bandwidth per GPU count and size. One TOML file per accelerator under
``platforms/performance/``, named as the accelerator file it measures (``h200-sxm.toml``).

A file's ``figures`` says where its ceilings come from: ``measured by the kit`` (the default: the
kit's GEMM check and all-reduce on the card) or ``datasheet and published`` (a card the kit has not
run on: its vendor's datasheet and published GEMM and collective figures, each source named), which
an expectation on that card says beside its band."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from bench.config.paths import PERFORMANCE_DIR
from bench.config.schema import Count, Positive, Strict, load_toml
from bench.config.tomlfile import DataError

Source = Annotated[str, Field(pattern=r"\S")]


class GemmShape(Strict):
    """One measured product (tokens x k) @ (k x n), TFLOP/s in bf16 and fp8 (none where the card
    has no fp8)."""

    name: Source
    tokens: Count
    k: Count
    n: Count
    bf16: Positive
    fp8: Positive | None = None


class Gemm(Strict):
    source: Source
    shapes: tuple[GemmShape, ...] = Field(min_length=1)


class AllReduce(Strict):
    """NCCL bf16 all-reduce on ``gpus`` GPUs of one node: bus bandwidth (GB/s) per size (MiB)."""

    gpus: Annotated[int, Field(ge=2)]
    source: Source
    mib: tuple[Positive, ...] = Field(min_length=1)
    busbw_gbps: tuple[Positive, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _paired(self) -> AllReduce:
        if len(self.mib) != len(self.busbw_gbps):
            raise ValueError(f"mib has {len(self.mib)} sizes but busbw_gbps {len(self.busbw_gbps)} "
                             "figures; give one figure per size")
        if any(b <= a for a, b in zip(self.mib, self.mib[1:], strict=False)):
            raise ValueError(f"mib: sizes {list(self.mib)} do not rise; give each size once, smallest first")
        return self

    def seconds(self, size_bytes: float) -> tuple[float, float]:
        """(latency s, bytes per s) of a straight line through the measured times of the
        bus bytes, least squares; one size gives no latency. Where the line would start below
        zero (bus bandwidth rising steeply with size) it is drawn through the origin and the
        largest size instead, so neither figure is ever negative."""
        xs = [m * 2**20 for m in self.mib]
        ts = [x / (b * 1e9) for x, b in zip(xs, self.busbw_gbps, strict=True)]
        if len(xs) == 1:
            return 0.0, xs[0] / ts[0]
        mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
        slope = (sum((x - mx) * (t - mt) for x, t in zip(xs, ts, strict=True))
                 / sum((x - mx) ** 2 for x in xs))
        latency = mt - slope * mx
        if slope <= 0 or latency < 0:
            return 0.0, xs[-1] / ts[-1]
        return latency, 1 / slope


MEASURED = "measured by the kit"


class Performance(Strict):
    """What one accelerator measured; ``hbm_gbps`` is its memory bandwidth in GB/s; ``figures``
    where the ceilings come from (the default: measured by the kit)."""

    figures: Literal["measured by the kit", "datasheet and published"] = MEASURED
    hbm_gbps: Positive
    hbm_source: Source
    gemm: Gemm
    allreduce: tuple[AllReduce, ...] = ()

    @model_validator(mode="after")
    def _fp8_everywhere_or_nowhere(self) -> Performance:
        given = {shape.fp8 is not None for shape in self.gemm.shapes}
        if len(given) > 1:
            raise ValueError("gemm.shapes: some shapes give an fp8 figure and some do not; give it "
                             "for every shape, or for none where the card has no fp8")
        return self

    @property
    def measured(self) -> bool:
        """Whether the kit measured these ceilings itself."""
        return self.figures == MEASURED

    def gemm_tflops(self, k: int, n: int, fp8: bool) -> float:
        """The ceiling of a (k x n) weight's product: the measured shapes ordered by sqrt(k n),
        interpolated on a log scale and held at the ends (smaller shapes are the fit's)."""
        if fp8 and self.gemm.shapes[0].fp8 is None:
            raise ValueError("no fp8 GEMM figure: this card's platforms/performance file gives bf16 only")
        points = sorted((math.sqrt(s.k * s.n), (s.fp8 or 0.0) if fp8 else s.bf16) for s in self.gemm.shapes)
        size = math.sqrt(k * n)
        if size <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
            if size <= x1:
                w = 0.0 if x1 == x0 else math.log(size / x0) / math.log(x1 / x0)
                return y0 + w * (y1 - y0)
        return points[-1][1]

    def link(self, gpus: int) -> tuple[float, float]:
        """(latency s, bus bytes per s) of NCCL on ``gpus`` GPUs: the figure measured on that
        many, else on the nearest count; the latency of a count measured at one size only is
        the smallest measured on another count."""
        if not self.allreduce:
            raise ValueError("no all-reduce figure: add an [[allreduce]] table to its "
                             "platforms/performance file")
        nearest = min(self.allreduce, key=lambda a: (abs(a.gpus - gpus), -a.gpus))
        latency, rate = nearest.seconds(0)
        if len(nearest.mib) == 1:
            others = [a.seconds(0)[0] for a in self.allreduce if len(a.mib) > 1]
            latency = min(others, default=0.0)
            size = nearest.mib[0] * 2**20
            measured = size / (nearest.busbw_gbps[0] * 1e9)
            # another count's latency cannot exceed this count's whole measured time
            latency = min(latency, measured / 2)
            rate = size / (measured - latency)
        return latency, rate


def load_performance(accelerator: str, folder: Path = PERFORMANCE_DIR) -> Performance:
    """The measured ceilings of ``accelerator`` (``h200-sxm``); a DataError naming the file."""
    path = folder / f"{accelerator}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.toml"))) or "none"
        raise DataError(f"{path}: no measured ceilings for accelerator {accelerator!r} (known: "
                        f"{known}); measure them (python -m bench.train.smoke) and add the file")
    return load_toml(path, Performance)


def load_all(folder: Path = PERFORMANCE_DIR) -> dict[str, Performance]:
    """Every accelerator's measured ceilings, by accelerator name."""
    return {path.stem: load_performance(path.stem, folder) for path in sorted(folder.glob("*.toml"))}
