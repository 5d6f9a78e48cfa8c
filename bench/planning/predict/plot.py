"""Predicted against measured step time, one point per record (PNG; needs matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.planning.predict.validate import Observed

BAND = 0.15  # the dashed lines: a run this far below or above its prediction is flagged


def plot_predicted(runs: Sequence[Observed], predicted: Sequence[float], path: Path) -> Path:
    """Draw each run's measured step against its prediction (log-log, coloured by GPU count,
    the diagonal and the +-15 % band) into ``path``; returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for gpus in sorted({r.gpus for r in runs}):
        picked = [(p, r.sample.step_s) for r, p in zip(runs, predicted, strict=True) if r.gpus == gpus]
        ax.scatter([p for p, _ in picked], [m for _, m in picked], s=14, label=f"{gpus} GPU(s)")
    low = min(min(predicted), *(r.sample.step_s for r in runs)) * 0.8
    high = max(max(predicted), *(r.sample.step_s for r in runs)) * 1.25
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for factor in (1 - BAND, 1 + BAND):
        ax.plot([low, high], [low * factor, high * factor], color="grey", linestyle="--", linewidth=0.6)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
           xlabel="predicted step (s)", ylabel="measured step (s)",
           title="Step-time model: predicted against measured")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
