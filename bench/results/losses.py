"""Loss curves: runs that trained the same model on the same data and batch in other precisions.

A record's ``lm_losses`` is the ``lm loss`` of every logged iteration. Ok runs with at least
:data:`MIN_LOSSES` of them that logged every iteration are grouped by everything that shapes the
curve but the precision: preset, engine, parallel degrees, micro and global batch, train
iterations, data set (the record's ``data``: the corpus's name, which the kit's tokenizer names
after a hash of the corpus and tokenizer, or the engine's mock data), accelerator and
the record's variant. An FP8 gradient reduction (``--grad-reduce fp8-*``, and the overlap it turns
off) is part of the treatment, not of the setup: such a run is drawn beside bf16's own reduction,
labelled with it, and so is MS-AMP's FP8 scaling away from the kit's default
(``msamp_scaling``). Of a treatment run twice in a group the newest run counts; a group of two or
more is one :class:`LossPlot`, drawn like the platform plots
(:mod:`bench.results.plots`: same style, inputs key and reuse) and tabled on the page by the final
loss of each precision against bf16's.

The PNG has two panels: the whole run, every loss thin and its moving average solid, its y range
cut above the losses of the first tenth (the initial loss of about 11 would flatten the rest);
and the second half of the run, moving averages only, its y range fitted to them, where the
precisions' few-percent differences show, with each run's final loss as a dashed line.
"""

from __future__ import annotations

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
class LossPlot:
    """One PNG and table: the curves of one group, baseline first; ``setup`` says what they share."""

    filename: str
    title: str
    setup: str
    curves: tuple[Curve, ...]

    @property
    def baseline(self) -> Curve | None:
        return next((curve for curve in self.curves if curve.precision == BASELINE), None)

    def render(self, key: str) -> bytes:
        return _render(self, key)


def difference_error(curve: Curve, baseline: Curve) -> float:
    """Standard error of the difference of two final losses (independent windows)."""
    return math.hypot(curve.final_loss_error, baseline.final_loss_error)


def difference(curve: Curve, baseline: Curve) -> tuple[float, float]:
    """Final loss minus the baseline's, absolute and in % of the baseline's."""
    delta = curve.final_loss - baseline.final_loss
    return delta, delta / baseline.final_loss * 100


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


def plan_losses(runs: Sequence[Record]) -> list[LossPlot]:
    """One plot per group of two or more precisions, smaller models first; the result does not
    depend on the order of ``runs``."""
    newest: dict[tuple, dict[str, Record]] = defaultdict(dict)
    for run in filter(_has_curve, runs):
        group = newest[_setup(run)]
        shown = group.get(_treatment(run))
        if shown is None or (run.started_at, run.run_id) > (shown.started_at, shown.run_id):
            group[_treatment(run)] = run
    groups = sorted(
        (sorted(group.values(), key=lambda r: (_precision_order(r.precision), _treatment(r)))
         for group in newest.values() if len(group) > 1),
        key=lambda group: _group_order(group[0]),
    )  # fmt: skip
    names = [f"loss-{plots.slug(g[0].preset.name)}-{plots.slug(_accelerator(g[0]))}" for g in groups]
    # Groups of one model on one accelerator are told apart by layout, then by number.
    names = [f"{name}-{plots.slug(g[0].layout.name)}" if names.count(name) > 1 else name
             for name, g in zip(names, groups, strict=True)]
    return [
        LossPlot(
            filename=f"{name}-{i}.png" if names.count(name) > 1 else f"{name}.png",
            title=_title(group[0]), setup=_setup_text(group[0]),
            curves=tuple(Curve(_treatment(r), r.run_id, r.lm_losses) for r in group),
        )
        for i, (name, group) in enumerate(zip(names, groups, strict=True), start=1)
    ]  # fmt: skip


def _render(spec: LossPlot, key: str) -> bytes:
    from matplotlib.figure import Figure

    width, height = FIGURE_IN
    figure = Figure(figsize=FIGURE_IN, dpi=plots.DPI)
    bottom, top = 0.55 / height, 1 - 0.75 / height
    whole = figure.add_axes((0.7 / width, bottom, 4.6 / width, top - bottom))
    zoom = figure.add_axes((6.15 / width, bottom, 4.6 / width, top - bottom))
    _draw_whole(whole, spec.curves)
    _draw_zoom(zoom, spec.curves)
    figure.suptitle(spec.title, x=0.01, y=1 - 0.12 / height, ha="left", va="top")
    return plots.png_bytes(figure, key)


def _draw_curves(axes, curves: Sequence[Curve], start: int, raw: bool) -> list[float]:
    """Moving averages solid, from iteration ``start``, and with ``raw`` every loss thin behind
    them; returns the averages drawn."""
    shown = []
    for i, curve in enumerate(curves):
        colour = f"C{i % 10}"
        if raw:
            axes.plot(range(start, len(curve.losses) + 1), curve.losses[start - 1:], color=colour,
                      linewidth=0.6, alpha=0.3)
        first = max(start, SMOOTH_WINDOW)
        average = moving_average(curve.losses, SMOOTH_WINDOW)[first - SMOOTH_WINDOW:]
        axes.plot(range(first, len(curve.losses) + 1), average, color=colour, linewidth=1.5,
                  label=f"{curve.precision} (final {curve.final_loss:.3f})")
        shown += average
    axes.set_xlabel("iteration")
    axes.grid(True, alpha=0.3)
    return shown


def _draw_whole(axes, curves: Sequence[Curve]) -> None:
    _draw_curves(axes, curves, 1, raw=True)
    last = max(len(curve.losses) for curve in curves)
    skip = int(last * CLIP_FRACTION)
    low = min(min(curve.losses) for curve in curves)
    high = max(max(curve.losses[skip:]) for curve in curves)
    axes.set_ylim(low - 0.05 * (high - low), high)
    axes.set_xlim(0, last)
    axes.set_ylabel("lm loss")
    axes.set_title(f"whole run (y range from iteration {skip + 1}); thin: every iteration, "
                   f"solid: {SMOOTH_WINDOW}-iteration mean", fontsize=8)


def _draw_zoom(axes, curves: Sequence[Curve]) -> None:
    last = max(len(curve.losses) for curve in curves)
    start = int(last * (1 - ZOOM_FRACTION)) + 1
    averages = _draw_curves(axes, curves, start, raw=False)
    low, high = min(averages), max(averages)
    axes.set_ylim(low - 0.15 * (high - low), high + 0.15 * (high - low))
    axes.set_xlim(start, last)
    axes.axvspan(last - FINAL_WINDOW + 1, last, color="grey", alpha=0.12,
                 label=f"last {FINAL_WINDOW} iterations: final loss")
    for i, curve in enumerate(curves):
        end = len(curve.losses)
        axes.hlines(curve.final_loss, end - FINAL_WINDOW + 1, end, colors=f"C{i % 10}",
                    linewidth=2.5, linestyles="--")
    axes.set_title(f"last {ZOOM_FRACTION:.0%} of the run, {SMOOTH_WINDOW}-iteration means; dashed: "
                   f"final loss (mean of the last {FINAL_WINDOW})", fontsize=8)
    axes.legend(fontsize=8, loc="upper right")
