"""One loss figure: the curves of a group's runs, treatment by treatment, and how the PNG is drawn.

A :class:`Curve` is one run's ``lm loss`` per iteration; a :class:`Treatment` the runs of one
precision (with its FP8 reduction or scaling) in a group; a :class:`LossPlot` one group's figure
(:mod:`bench.results.losses` picks the groups and tables them).

The PNG has two panels: the whole run, every loss thin and its moving average a line, its y range
cut above the losses of the first tenth (the initial loss of about 11 would flatten the rest);
and the second half of the run, moving averages only, its y range fitted to them, where the
precisions' few-percent differences show, with each run's final loss as a dashed line. The runs of
one treatment share a colour, its first run solid and later ones in :data:`REPEAT_STYLES`; the
legend, under the panels, names each treatment once, with its runs and mean final loss.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.results import plots

FINAL_WINDOW = 50  # the final loss is the mean of this many last iterations' losses
SMOOTH_WINDOW = 20  # the moving average drawn over the raw curve
BASELINE = "bf16"  # what the other precisions' final losses are set against
ZOOM_FRACTION = 0.5  # the right panel shows this last part of the run
CLIP_FRACTION = 0.1  # the left panel's y range ignores this first part (the initial loss)
FIGURE_IN = (11.0, 4.4)
REPEAT_STYLES = (":", "-.")  # a treatment's second, third, ... run (dashed marks final losses)
LEGEND_ROW_IN = 0.2  # the legend under the panels: height of one row of entries


@dataclass(frozen=True)
class Curve:
    """The losses of one run, one per iteration from the first."""

    precision: str  # the label: the precision, with an FP8 gradient reduction where one ran
    run_id: str
    losses: tuple[float, ...]

    @property
    def final_loss(self) -> float:
        """Mean loss of the last :data:`FINAL_WINDOW` iterations: one iteration's loss is noisy."""
        return statistics.fmean(self.losses[-FINAL_WINDOW:])

    @property
    def final_loss_error(self) -> float:
        """Standard error of :attr:`final_loss`: the window's standard deviation over the square root
        of its length, the noise between batches (it ignores seed-to-seed spread, so it is a floor)."""
        window = self.losses[-FINAL_WINDOW:]
        return statistics.stdev(window) / math.sqrt(len(window)) if len(window) > 1 else 0.0


@dataclass(frozen=True)
class Treatment:
    """The runs of one treatment in a group, oldest first: one curve each."""

    label: str
    curves: tuple[Curve, ...]

    @property
    def runs(self) -> int:
        return len(self.curves)

    @property
    def final_losses(self) -> tuple[float, ...]:
        return tuple(curve.final_loss for curve in self.curves)

    @property
    def final_loss(self) -> float:
        """Mean final loss of the runs."""
        return statistics.fmean(self.final_losses)

    @property
    def spread(self) -> float | None:
        """Sample standard deviation of the runs' final losses (None for one run): the run-to-run
        noise that one run's window does not show."""
        return statistics.stdev(self.final_losses) if self.runs > 1 else None

    @property
    def window_error(self) -> float:
        """Standard error of :attr:`final_loss` from the windows alone (independent runs): a floor."""
        return math.sqrt(sum(curve.final_loss_error ** 2 for curve in self.curves)) / self.runs


@dataclass(frozen=True)
class LossPlot:
    """One PNG and table: the treatments of one group, baseline first; ``setup`` says what they
    share."""

    filename: str
    title: str
    setup: str
    treatments: tuple[Treatment, ...]

    @property
    def curves(self) -> tuple[Curve, ...]:
        """Every run's curve, treatment by treatment."""
        return tuple(curve for treatment in self.treatments for curve in treatment.curves)

    @property
    def baseline(self) -> Treatment | None:
        return next((t for t in self.treatments if t.label == BASELINE), None)

    @property
    def repeat_range(self) -> float | None:
        """The largest difference between two final losses of one treatment; None if none repeated."""
        return max((max(t.final_losses) - min(t.final_losses) for t in self.treatments if t.runs > 1),
                   default=None)

    def render(self, key: str) -> bytes:
        return _render(self, key)


def moving_average(values: Sequence[float], window: int) -> tuple[float, ...]:
    """Trailing means of ``window`` values, one per value from the ``window``-th on."""
    return tuple(statistics.fmean(values[i - window:i]) for i in range(window, len(values) + 1))


def _render(spec: LossPlot, key: str) -> bytes:
    from matplotlib.figure import Figure

    # The legend goes under the panels, two entries a row: over the zoom panel it hid the curves.
    entries = len(spec.treatments) + 1 + len(_repeat_keys(spec.treatments))  # 1: the final window
    legend = math.ceil(entries / 2) * LEGEND_ROW_IN + 0.1
    width, height = FIGURE_IN[0], FIGURE_IN[1] + legend
    figure = Figure(figsize=(width, height), dpi=plots.DPI)
    bottom, top = (0.55 + legend) / height, 1 - 0.75 / height
    whole = figure.add_axes((0.7 / width, bottom, 4.6 / width, top - bottom))
    zoom = figure.add_axes((6.15 / width, bottom, 4.6 / width, top - bottom))
    _draw_whole(whole, spec.treatments)
    _draw_zoom(zoom, spec.treatments)
    figure.legend(*zoom.get_legend_handles_labels(), loc="lower left", ncols=2, fontsize=8,
                  frameon=False, bbox_to_anchor=(0.7 / width, 0.05 / height))
    figure.suptitle(spec.title, x=0.01, y=1 - 0.12 / height, ha="left", va="top")
    return plots.png_bytes(figure, key)


def _style(run: int) -> str:
    """The line style of a treatment's ``run``-th run from 0: solid, then the repeats' styles, the
    last of them for every later run."""
    return "-" if run == 0 else REPEAT_STYLES[min(run, len(REPEAT_STYLES)) - 1]


def _repeat_keys(treatments: Sequence[Treatment]) -> list[tuple[str, str]]:
    """The line style and legend label of each style of a repeated run the plot uses."""
    repeats = max(treatment.runs for treatment in treatments)
    return [(_style(j), f"a treatment's run {j + 1}"
             + (" and later" if j == len(REPEAT_STYLES) and repeats > j + 1 else ""))
            for j in range(1, min(repeats, len(REPEAT_STYLES) + 1))]


def _legend_label(treatment: Treatment) -> str:
    if treatment.runs == 1:
        return f"{treatment.label}: 1 run, final {treatment.final_loss:.3f}"
    return f"{treatment.label}: {treatment.runs} runs, mean final {treatment.final_loss:.3f}"


def _draw_curves(axes, treatments: Sequence[Treatment], start: int, raw: bool) -> list[float]:
    """Moving averages, from iteration ``start``, and with ``raw`` every loss thin behind them; a
    treatment's runs in its colour, its first run labelled for the legend. Returns the averages."""
    shown = []
    for i, treatment in enumerate(treatments):
        for j, curve in enumerate(treatment.curves):
            if raw:
                axes.plot(range(start, len(curve.losses) + 1), curve.losses[start - 1:],
                          color=f"C{i % 10}", linewidth=0.6, alpha=0.3)
            first = max(start, SMOOTH_WINDOW)
            average = moving_average(curve.losses, SMOOTH_WINDOW)[first - SMOOTH_WINDOW:]
            axes.plot(range(first, len(curve.losses) + 1), average, color=f"C{i % 10}",
                      linewidth=1.5, linestyle=_style(j),
                      label=_legend_label(treatment) if j == 0 else None)
            shown += average
    axes.set_xlabel("iteration")
    axes.grid(True, alpha=0.3)
    return shown


def _draw_whole(axes, treatments: Sequence[Treatment]) -> None:
    curves = [curve for treatment in treatments for curve in treatment.curves]
    _draw_curves(axes, treatments, 1, raw=True)
    last = max(len(curve.losses) for curve in curves)
    skip = int(last * CLIP_FRACTION)
    low = min(min(curve.losses) for curve in curves)
    high = max(max(curve.losses[skip:]) for curve in curves)
    axes.set_ylim(low - 0.05 * (high - low), high)
    axes.set_xlim(0, last)
    axes.set_ylabel("lm loss")
    axes.set_title(f"whole run (y range from iteration {skip + 1}); thin: every iteration, "
                   f"lines: {SMOOTH_WINDOW}-iteration mean", fontsize=8)


def _draw_zoom(axes, treatments: Sequence[Treatment]) -> None:
    last = max(len(curve.losses) for treatment in treatments for curve in treatment.curves)
    start = int(last * (1 - ZOOM_FRACTION)) + 1
    averages = _draw_curves(axes, treatments, start, raw=False)
    low, high = min(averages), max(averages)
    axes.set_ylim(low - 0.15 * (high - low), high + 0.15 * (high - low))
    axes.set_xlim(start, last)
    axes.axvspan(last - FINAL_WINDOW + 1, last, color="grey", alpha=0.12,
                 label=f"last {FINAL_WINDOW} iterations: final loss")
    for i, treatment in enumerate(treatments):
        for curve in treatment.curves:
            end = len(curve.losses)
            axes.hlines(curve.final_loss, end - FINAL_WINDOW + 1, end, colors=f"C{i % 10}",
                        linewidth=2.5, linestyles="--")
    for style, label in _repeat_keys(treatments):  # in grey, lines without data: a key only
        axes.plot([], [], color="grey", linewidth=1.5, linestyle=style, label=label)
    axes.set_title(f"last {ZOOM_FRACTION:.0%} of the run, {SMOOTH_WINDOW}-iteration means; dashed: "
                   f"a run's final loss (mean of the last {FINAL_WINDOW})", fontsize=8)
