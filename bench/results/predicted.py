"""The step-time model against the records: each ok record's step predicted by the stored fit
(``platforms/performance/fit.json``), drawn against what it measured, with the errors of the
fit's own validation (configurations held out whole, ``python -m bench predict --validate``, run
at its refit), and the runs more than 15 % below their expectation with the largest term of it.

The page never refits: a fit per record cost 90 s at 1,000 records; the stored fit's prediction is
one pass over each record's terms. A run's expectation is the ``expected`` its record holds (what
the model said when it was planned), else the stored fit's prediction.
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
from bench.records.as_planned import AsPlanned, as_planned
from bench.records.record import Record
from bench.results import plots
from bench.results.table import record_link, table, text
from bench.results.words import display_name, hardware_words

PLOT = "predicted-vs-measured.png"
MIN_RUNS = 3  # fewer make no plot worth drawing
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
    """``count`` records predicted by the stored fit (``fitted`` of them fitted on), its
    validation's group-held-out median and 90th-percentile errors (``bound_p90``: those of the
    records it prices GPU-bound and host-bound, where the refit kept them), the runs below their
    expectation (most below first) and the plot."""

    count: int
    fitted: int
    median: float
    p90: float
    low: tuple[Low, ...]
    plot: PredictedPlot
    bound_p90: tuple[float, float] | None = None
    planned: AsPlanned | None = None


def checked(runs: Sequence[Record]) -> Checked | None:
    """The model checked on ``runs``; None where fewer than :data:`MIN_RUNS` are modelled."""
    found = validate.observed(runs, facts.load_all())
    if len(found) < MIN_RUNS:
        return None
    factors, validation = fit.load_stored()
    fitted_on = set(fit.load_run_ids())
    x = [factors[name] for name in TERMS]
    by_id = {run.run_id: run for run in runs}
    low, points = [], []
    for observed in found:
        run, step = by_id[observed.sample.run_id], fit.fitted_step(observed.sample.terms, x)
        assert run.metrics is not None  # observed() keeps ok runs
        points.append((round(step, 6), observed.sample.step_s, observed.gpus))
        if run.expected is not None:
            expected, largest, recorded = run.expected.tflops_per_gpu, run.expected.largest, True
        else:
            expected = run.metrics.tflops_per_gpu * observed.sample.step_s / step
            parts = combine(dict(zip(TERMS, observed.sample.terms, strict=True)), factors).parts
            largest, recorded = max(parts, key=lambda name: parts[name]), False
        if run.metrics.tflops_per_gpu < (1 - BELOW) * expected:
            low.append(Low(run, expected, largest, recorded))
    low.sort(key=lambda item: (-item.below, item.run.run_id))
    fitted = sum(o.sample.run_id in fitted_on for o in found)
    kinds = tuple(validation.get(f"{fit.BAND_PREFIX}{kind}") for kind in (fit.GPU_BOUND, fit.HOST_BOUND))
    return Checked(len(found), fitted, validation["median"], validation["p90"], tuple(low),
                   PredictedPlot(PLOT, tuple(sorted(points))),
                   kinds if None not in kinds else None, as_planned(runs))  # type: ignore[arg-type]


def _cells(item: Low, records_link: str) -> list[str]:
    run = item.run
    assert run.metrics is not None
    return [record_link(run, records_link), text(display_name(run.preset.name)), text(run.layout.name),
            text(run.precision), text(hardware_words(run)), f"{run.metrics.tflops_per_gpu:.1f}",
            f"{item.expected_tflops:.1f}", f"{100 * item.below:.0f} %", f"`{item.largest}`",
            "its record" if item.recorded else "the stored fit"]


def _planned_words(planned: AsPlanned | None) -> str:
    """The records against what the model expected when each was planned (bench.records.as_planned)."""
    if planned is None or not planned.new.errors:
        return ""

    def side(errors: Sequence[float], in_band: int) -> str:
        return (f"median {100 * statistics.median(errors):.1f} %, 90th percentile "
                f"{100 * validate.percentile(errors, 0.9):.1f} %, {in_band} of {len(errors)} within "
                "the band they quoted")
    known = (f"; the {len(planned.known.errors)} that repeated a configuration already run, "
             f"{side(planned.known.errors, planned.known.in_band)}" if planned.known.errors else "")
    return (" Against what it expected when each run was planned (the `expected` its record holds, "
            "written before the run by the model of that day, never refitted): the "
            f"{len(planned.new.errors)} records of a configuration no earlier record had, "
            f"{side(planned.new.errors, planned.new.in_band)}{known}.")


def section(found: Checked | None, records_link: str) -> list[str]:
    """The model's errors on the records, the plot, the runs below their expectation."""
    if found is None:
        return []
    lines = ["## Step-time model against the records", "",
             (f"The step-time model (`bench/planning/predict`, docs/running.md) predicts each of the "
              f"{found.count} ok megatron records on a GPU with measured ceilings with its stored fit "
              f"(`fit.json`, fitted on {found.fitted} of them). Its error where it was not fitted, "
              "each configuration held out whole (`python -m bench predict --validate` at the refit): "
              f"median {100 * found.median:.1f} %, 90th percentile {100 * found.p90:.1f} %"
              + (f"; {100 * found.bound_p90[0]:.1f} % where it prices the step GPU-bound, "
                 f"{100 * found.bound_p90[1]:.1f} % where host-bound (the host's launches longer than "
                 "the GPU's stream: hosts differ), the bands an expectation quotes by its kind"
                 if found.bound_p90 else "")
              + "." + _planned_words(found.planned) + " The dashed lines are ±15 %."), "",
             f"![Step-time model: predicted against measured](plots/{found.plot.filename})", ""]
    if not found.low:
        return [*lines, f"No run is more than {100 * BELOW:.0f} % below its expectation.", ""]
    return [*lines, (f"Runs more than {100 * BELOW:.0f} % below their expectation (the `expected` their "
                     "record holds, else the stored fit's prediction), most below first, with the "
                     "largest term of the expected step:"), "",
            *table(LOW_COLUMNS, [_cells(item, records_link) for item in found.low]), ""]
