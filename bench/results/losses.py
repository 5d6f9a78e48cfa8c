"""Loss curves: runs that trained the same model on the same data and batch in other precisions.

A record's ``lm_losses`` is the ``lm loss`` of every logged iteration. Ok runs with at least
:data:`MIN_LOSSES` of them that logged every iteration are grouped by everything that shapes the
curve but the precision: preset, engine, parallel degrees, micro and global batch, train
iterations, data set (the record's ``data``: the corpus's name, which the kit's tokenizer names
after a hash of the corpus and tokenizer, or the engine's mock data), accelerator and
the record's variant. An FP8 gradient reduction (``--grad-reduce fp8-*``, and the overlap it turns
off) is part of the treatment, not of the setup: such a run is drawn beside bf16's own reduction,
labelled with it, and so is MS-AMP's FP8 scaling away from the kit's default
(``msamp_scaling``). Every run of a treatment counts: repeated runs of one setup differ by more
than the noise within one run's last iterations, so a treatment is a :class:`Treatment` of one
curve per run, tabled by the mean of its runs' final losses and their spread. A group of two or
more treatments is one :class:`LossPlot`, drawn like the platform plots
(:mod:`bench.results.plots`: same style, inputs key and reuse) and tabled on the page by each
treatment's mean final loss against bf16's, with the difference's standard error from the spread
between runs where both sides ran twice or more and from the windows alone (a floor) otherwise.

The PNG has two panels: the whole run, every loss thin and its moving average a line, its y range
cut above the losses of the first tenth (the initial loss of about 11 would flatten the rest);
and the second half of the run, moving averages only, its y range fitted to them, where the
precisions' few-percent differences show, with each run's final loss as a dashed line. The runs of
one treatment share a colour, its first run solid and later ones in :data:`REPEAT_STYLES`; the
legend, under the panels, names each treatment once, with its runs and mean final loss.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS
from bench.measure.protocol import WARMUP_ITERS
from bench.records.record import Record
from bench.results import plots
from bench.results.aggregate import display_name, model_sort_key, variant
from bench.results.hardware import accelerator_of, hardware_name

MIN_LOSSES = 100  # fewer: a throughput run's few iterations, still near the initial loss
FINAL_WINDOW = 50  # the final loss is the mean of this many last iterations' losses
SMOOTH_WINDOW = 20  # the moving average drawn over the raw curve
BASELINE = "bf16"  # what the other precisions' final losses are set against
TREATMENT_KEYS = ("grad_reduce", "overlap")  # variant keys an FP8 gradient reduction sets
SCALING_KEY = "msamp_scaling"  # MS-AMP's FP8 scaling: part of the treatment too
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


@dataclass(frozen=True)
class Difference:
    """A treatment's mean final loss minus the baseline's, and that difference's standard error."""

    absolute: float
    percent: float  # of the baseline's mean final loss
    error: float
    floor: bool  # the error is the windows' alone: one side ran once, its run-to-run spread unknown


def difference(treatment: Treatment, baseline: Treatment) -> Difference:
    """Between runs (sqrt(s_t²/n_t + s_b²/n_b)) where both sides ran twice or more, otherwise the
    windows' errors combined, which leave out the run-to-run spread."""
    delta = treatment.final_loss - baseline.final_loss
    if treatment.spread is not None and baseline.spread is not None:
        error = math.hypot(treatment.spread / math.sqrt(treatment.runs),
                           baseline.spread / math.sqrt(baseline.runs))
    else:
        error = math.hypot(treatment.window_error, baseline.window_error)
    return Difference(delta, delta / baseline.final_loss * 100, error,
                      floor=treatment.spread is None or baseline.spread is None)


def moving_average(values: Sequence[float], window: int) -> tuple[float, ...]:
    """Trailing means of ``window`` values, one per value from the ``window``-th on."""
    return tuple(statistics.fmean(values[i - window:i]) for i in range(window, len(values) + 1))


def _data_set(run: Record) -> str:
    """The name of a run's tokenized corpus (the record's ``data``), or mock data."""
    return run.data.name if run.data is not None and run.data.kind == "real" and run.data.name else "mock data"


def _iterations(run: Record) -> int:
    """The iterations of a run that logged every one: one loss each."""
    return len(run.lm_losses)


def _accelerator(run: Record) -> str:
    """The accelerator's data file name (``h200-sxm``) where known: records spell it two ways."""
    accelerator = accelerator_of(run.platform.accelerator)
    return accelerator.name if accelerator else run.platform.accelerator


def _fp8_reduction(run: Record) -> str:
    """The run's FP8 gradient reduction (``fp8-shared-scale``), or "" under the engine's own."""
    reduction = str(run.variant.get("grad_reduce", ""))
    return reduction if reduction.startswith("fp8") else ""


def _treatment(run: Record) -> str:
    """The curve's label: the precision, its MS-AMP scaling away from the default, and an FP8
    gradient reduction where the run had one."""
    scaling, reduction = run.variant.get(SCALING_KEY), _fp8_reduction(run)
    return ", ".join(filter(None, (run.precision, scaling and f"{scaling} scaling",
                                   reduction and f"{reduction} reduction")))


def _shaping_variant(run: Record) -> tuple:
    """The variant's settings that set curves apart. An FP8 gradient reduction is part of the
    treatment (set against bf16's own reduction), and so are the overlap it turns off and MS-AMP's
    scaling."""
    dropped = (*(TREATMENT_KEYS if _fp8_reduction(run) else ()), SCALING_KEY)
    return tuple(sorted((k, v) for k, v in run.variant.items() if k not in dropped))


def _setup(run: Record) -> tuple:
    """What two runs share when their curves differ by precision (and FP8 reduction) only."""
    p, lay = run.preset, run.layout
    return (
        p.name, p.layers, p.hidden, p.heads, p.seq_length, p.vocab_size, run.engine,
        lay.tp, lay.pp, lay.dp, lay.vp or 1, lay.cp, lay.sp, lay.zero, lay.micro_batch,
        lay.global_batch, _iterations(run), _data_set(run), _accelerator(run), _shaping_variant(run),
    )  # fmt: skip


def _has_curve(run: Record) -> bool:
    """An ok run that logged every one of enough iterations: its measured window (every logged
    iteration after the warm-up) and the warm-up then count its losses exactly."""
    return (run.ok and len(run.lm_losses) >= MIN_LOSSES
            and len(run.lm_losses) == run.metrics.window_iters + WARMUP_ITERS)


def _precision_order(precision: str) -> tuple[int, str]:
    return (PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS), precision)


def _title(run: Record) -> str:
    lay = run.layout
    return (f"{display_name(run.preset.name)} {lay.name}, {hardware_name(run.platform.accelerator)}: "
            f"lm loss per iteration by precision (micro/global batch {lay.micro_batch}/"
            f"{lay.global_batch}, {_iterations(run)} iterations)")


def _setup_text(run: Record) -> str:
    p, lay = run.preset, run.layout
    return ", ".join(filter(None, (
        f"{display_name(p.name)} ({p.layers} layers, hidden {p.hidden}, {p.heads} heads, "
        f"sequence {p.seq_length}, vocabulary {p.vocab_size})", f"{run.engine} {lay.name}",
        f"micro/global batch {lay.micro_batch}/{lay.global_batch}",
        f"{_iterations(run)} iterations", f"data `{_data_set(run)}`",
        hardware_name(run.platform.accelerator), variant(dict(_shaping_variant(run))),
    )))  # fmt: skip


def _group_order(run: Record) -> tuple:
    """Smaller models, then accelerator, then smaller batches first; the rest only to be stable."""
    lay = run.layout
    return (model_sort_key(run.preset.name.lower()), _accelerator(run), lay.micro_batch,
            lay.global_batch, repr(_setup(run)))


def _run_order(run: Record) -> tuple:
    """Baseline and precisions in the kit's order, a treatment's runs together and oldest first."""
    return (_precision_order(run.precision), _treatment(run), run.started_at, run.run_id)


def _treatments(group: Sequence[Record]) -> tuple[Treatment, ...]:
    """The treatments of a group of runs sorted by :func:`_run_order`."""
    return tuple(Treatment(label, tuple(Curve(label, r.run_id, r.lm_losses) for r in runs))
                 for label, runs in itertools.groupby(group, key=_treatment))


def plan_losses(runs: Sequence[Record]) -> list[LossPlot]:
    """One plot per group of two or more treatments, smaller models first; the result does not
    depend on the order of ``runs``."""
    by_setup: dict[tuple, list[Record]] = defaultdict(list)
    for run in filter(_has_curve, runs):
        by_setup[_setup(run)].append(run)
    groups = sorted(
        (sorted(group, key=_run_order) for group in by_setup.values()
         if len({_treatment(r) for r in group}) > 1),
        key=lambda group: _group_order(group[0]),
    )  # fmt: skip
    names = [f"loss-{plots.slug(g[0].preset.name)}-{plots.slug(_accelerator(g[0]))}" for g in groups]
    # Groups of one model on one accelerator are told apart by layout, then by number.
    names = [f"{name}-{plots.slug(g[0].layout.name)}" if names.count(name) > 1 else name
             for name, g in zip(names, groups, strict=True)]
    return [
        LossPlot(
            filename=f"{name}-{i}.png" if names.count(name) > 1 else f"{name}.png",
            title=_title(group[0]), setup=_setup_text(group[0]), treatments=_treatments(group),
        )
        for i, (name, group) in enumerate(zip(names, groups, strict=True), start=1)
    ]  # fmt: skip


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
