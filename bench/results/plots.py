"""PNG plots of measured rows: per platform (TFLOP/s/GPU and % of peak per model and layout) and
per model with several GPU counts (samples/s against GPUs, one line per platform).

Plots are drawn from the aggregated rows, never from raw records, so their cost does not grow
with the number of runs. Output is deterministic: Agg backend, matplotlib's default style plus
fixed sizes, dpi and font, and no ``Software`` PNG text chunk (matplotlib writes no date into
PNGs). The bytes can still differ between matplotlib or FreeType versions.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.results.aggregate import Report, Row, display_name, model_sort_key

DPI = 100
WIDTH_IN = 10.0
BAR_HEIGHT_IN = 0.28
FIXED_RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
    "path.simplify": False,
    "svg.hashsalt": "bench",
}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Bar:
    label: str
    tflops_per_gpu: float
    percent_of_peak: float


@dataclass(frozen=True)
class Series:
    label: str
    gpus: tuple[int, ...]
    samples_per_s: tuple[float, ...]


@dataclass(frozen=True)
class PlotSpec:
    """One PNG to draw: ``bars`` for a platform plot, ``series`` for a scaling plot."""

    filename: str
    title: str
    bars: tuple[Bar, ...] = ()
    series: tuple[Series, ...] = ()


def _slug(name: str) -> str:
    return _UNSAFE.sub("-", name).strip("-") or "unnamed"


def _bar_label(row: Row) -> str:
    parts = [row.model, row.layout or "", row.precision, f"{row.micro_batch}/{row.global_batch}"]
    if row.variant:
        parts.append(row.variant)
    return " ".join(parts)


def plan_plots(report: Report) -> list[PlotSpec]:
    """Which plots the report gets, in a stable order (platforms, then models by size)."""
    by_platform: dict[str, list[Row]] = defaultdict(list)
    for table in report.tables:  # tables are already ordered by model size
        for row in table.rows:
            if not row.published:
                by_platform[row.platform].append(row)
    specs = [
        PlotSpec(
            filename=f"platform-{_slug(platform)}.png",
            title=f"{platform}: TFLOP/s per GPU and % of peak (causal count) per model and layout",
            bars=tuple(
                Bar(_bar_label(r), r.tflops_per_gpu or 0.0, r.percent_of_peak or 0.0) for r in rows
            ),
        )
        for platform, rows in sorted(by_platform.items())
    ]
    for table in sorted(report.tables, key=lambda t: model_sort_key(t.model)):
        best: dict[str, dict[int, float]] = defaultdict(dict)
        for row in table.rows:
            if row.published or row.gpus is None or row.samples_per_s is None:
                continue
            line = best[f"{row.platform} {row.engine} {row.precision}"]
            line[row.gpus] = max(line.get(row.gpus, 0.0), row.samples_per_s)
        if len({gpus for line in best.values() for gpus in line}) < 2:
            continue
        series = tuple(
            Series(label, tuple(sorted(points)), tuple(points[g] for g in sorted(points)))
            for label, points in sorted(best.items())
        )
        specs.append(PlotSpec(
            filename=f"scaling-{_slug(table.model)}.png",
            title=f"{display_name(table.model)}: samples/s against GPUs (best layout per count)",
            series=series,
        ))
    return specs


def render_pngs(specs: Sequence[PlotSpec]) -> list[bytes]:
    """Draw the plots (one style context for all: setting it up costs as much as a plot)."""
    if not specs:
        return []
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import style

    with style.context("default"), matplotlib.rc_context(FIXED_RC):
        return [_render(spec) for spec in specs]


def _render(spec: PlotSpec) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if spec.bars:
        height = 1.2 + BAR_HEIGHT_IN * len(spec.bars)
        figure = Figure(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
        left, right = figure.subplots(1, 2, sharey=True)
        positions = range(len(spec.bars))
        left.barh(positions, [b.tflops_per_gpu for b in spec.bars], color="tab:blue")
        right.barh(positions, [b.percent_of_peak for b in spec.bars], color="tab:orange")
        left.set_yticks(list(positions), [b.label for b in spec.bars])
        left.invert_yaxis()
        left.set_xlabel("TFLOP/s per GPU")
        right.set_xlabel("% of peak")
    else:
        figure = Figure(figsize=(WIDTH_IN * 0.7, 4.5), dpi=DPI, layout="constrained")
        axes = figure.subplots()
        for line in spec.series:
            axes.plot(line.gpus, line.samples_per_s, marker="o", label=line.label)
        axes.set_xscale("log", base=2)
        ticks = sorted({g for line in spec.series for g in line.gpus})
        axes.set_xticks(ticks, [str(g) for g in ticks])
        axes.minorticks_off()
        axes.set_xlabel("GPUs")
        axes.set_ylabel("samples/s")
        axes.legend()
        axes.grid(True, alpha=0.3)
    figure.suptitle(spec.title)
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()
