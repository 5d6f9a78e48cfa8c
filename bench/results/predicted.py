"""The step-time model against the records: each ok record's step predicted by the model fitted on
all the others (leave-one-out, as ``python -m bench predict --validate``), drawn against what it
measured, and the runs more than 15 % below their expectation with the largest term of it.

A run's expectation is the ``expected`` its record holds (what the model said when it was
planned), else its leave-one-out prediction; the largest term is the expected step's, by the
stored fit's factors where the record holds none.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.planning.predict import facts, fit, validate
from bench.planning.predict.expect import BELOW
from bench.planning.predict.model import combine
from bench.planning.predict.plot import Point, draw_predicted
from bench.planning.predict.terms import TERMS
from bench.records.record import Record
from bench.results import plots
from bench.results.table import record_link, table, text
from bench.results.words import display_name, hardware_words

PLOT = "predicted-vs-measured.png"
MIN_RUNS = 3  # fewer cannot be fitted leaving one out
LOW_COLUMNS = (("run", False), ("model", False), ("layout", False), ("precision", False),
               ("hardware", False), ("TFLOP/s/GPU", True), ("expected", True), ("below", True),
               ("largest term", False), ("expected by", False))


@dataclass(frozen=True)
class PredictedPlot:
    """The points drawn: (predicted step s, measured step s, GPUs), one per record."""

    filename: str
    points: tuple[Point, ...]

    def render(self, key: str) -> bytes:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(6, 6), dpi=plots.DPI)
        draw_predicted(figure, self.points)
        return plots.png_bytes(figure, key)


@dataclass(frozen=True)
class Low:
    """A run more than 15 % below its expectation (``recorded``: its record's own)."""

    run: Record
    expected_tflops: float
    largest: str
    recorded: bool

    @property
    def below(self) -> float:
        assert self.run.metrics is not None  # only ok runs are checked
        return 1 - self.run.metrics.tflops_per_gpu / self.expected_tflops


@dataclass(frozen=True)
class Checked:
    """The leave-one-out errors' median and 90th percentile over ``count`` records, the runs
    below their expectation (most below first) and the plot."""

    count: int
    median: float
    p90: float
    low: tuple[Low, ...]
    plot: PredictedPlot


def checked(runs: Sequence[Record]) -> Checked | None:
    """The model checked on ``runs``; None where fewer than :data:`MIN_RUNS` are modelled."""
    performance = facts.load_all()
    found = validate.observed(runs, performance)
    if len(found) < MIN_RUNS:
        return None
    predicted = validate.leave_one_out(found)
    errors = validate.errors(found, predicted)
    by_id = {run.run_id: run for run in runs}
    factors = fit.load_fit()
    low = []
    for observed, step in zip(found, predicted, strict=True):
        run = by_id[observed.sample.run_id]
        assert run.metrics is not None  # observed() keeps ok runs
        if run.expected is not None:
            expected, largest, recorded = run.expected.tflops_per_gpu, run.expected.largest, True
        else:
            expected = run.metrics.tflops_per_gpu * observed.sample.step_s / step
            parts = combine(dict(zip(TERMS, observed.sample.terms, strict=True)), factors).parts
            largest, recorded = max(parts, key=lambda name: parts[name]), False
        if run.metrics.tflops_per_gpu < (1 - BELOW) * expected:
            low.append(Low(run, expected, largest, recorded))
    low.sort(key=lambda item: (-item.below, item.run.run_id))
    points = tuple(sorted((round(p, 6), r.sample.step_s, r.gpus) for r, p in zip(found, predicted, strict=True)))
    return Checked(len(found), statistics.median(errors), validate.percentile(errors, 0.9),
                   tuple(low), PredictedPlot(PLOT, points))


def _cells(item: Low, records_link: str) -> list[str]:
    run = item.run
    assert run.metrics is not None
    return [record_link(run, records_link), text(display_name(run.preset.name)), text(run.layout.name),
            text(run.precision), text(hardware_words(run)), f"{run.metrics.tflops_per_gpu:.1f}",
            f"{item.expected_tflops:.1f}", f"{100 * item.below:.0f} %", f"`{item.largest}`",
            "its record" if item.recorded else "leave-one-out"]


def section(found: Checked | None, records_link: str) -> list[str]:
    """The model's errors on the records, the plot, the runs below their expectation."""
    if found is None:
        return []
    lines = ["## Step-time model against the records", "",
             (f"The step-time model (`bench/planning/predict`, docs/running.md) predicts each of the "
              f"{found.count} ok megatron records on a GPU with measured ceilings after a fit on all "
              "the others (leave-one-out, `python -m bench predict --validate`): median error "
              f"{100 * found.median:.1f} %, 90th percentile {100 * found.p90:.1f} %. The dashed lines "
              "are ±15 %."), "", f"![Step-time model: predicted against measured](plots/{found.plot.filename})",
             ""]
    if not found.low:
        return [*lines, f"No run is more than {100 * BELOW:.0f} % below its expectation.", ""]
    return [*lines, (f"Runs more than {100 * BELOW:.0f} % below their expectation (the `expected` their "
                     "record holds, else the leave-one-out prediction), most below first, with the "
                     "largest term of the expected step:"), "",
            *table(LOW_COLUMNS, [_cells(item, records_link) for item in found.low]), ""]
