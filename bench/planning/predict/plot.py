"""Predicted against measured step time, one point per record (PNG; needs matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.planning.predict.validate import Observed

BAND = 0.15  # the dashed lines: a run this far below or above its prediction is flagged
Point = tuple[float, float, int]  # (predicted step s, measured step s, GPUs)


def draw_predicted(figure: Any, points: Sequence[Point]) -> None:
    """Draw each run's measured step against its prediction on a matplotlib ``figure`` (log-log,
    coloured by GPU count, the diagonal and the +-15 % band)."""
    ax = figure.add_subplot()
    for gpus in sorted({g for _, _, g in points}):
        picked = [(p, m) for p, m, g in points if g == gpus]
        ax.scatter([p for p, _ in picked], [m for _, m in picked], s=14, label=f"{gpus} GPU(s)")
    low = min(min(p, m) for p, m, _ in points) * 0.8
    high = max(max(p, m) for p, m, _ in points) * 1.25
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for factor in (1 - BAND, 1 + BAND):
        ax.plot([low, high], [low * factor, high * factor], color="grey", linestyle="--", linewidth=0.6)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
           xlabel="predicted step (s)", ylabel="measured step (s)",
           title="Step-time model: predicted against measured")
    ax.legend()


def plot_predicted(runs: Sequence[Observed], predicted: Sequence[float], path: Path) -> Path:
    """:func:`draw_predicted` of ``runs`` and their ``predicted`` steps into ``path``; returns it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 6))
    FigureCanvasAgg(figure)
    draw_predicted(figure, [(p, r.sample.step_s, r.gpus) for r, p in zip(runs, predicted, strict=True)])
    figure.savefig(path, dpi=120, bbox_inches="tight")
    return path
