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
Curves, treatments and the figure are :mod:`bench.results.loss_plot`'s.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS
from bench.config.run_options import EXTRA_ARGS_KEY, OLDER_CODE_KEYS, variant_key
from bench.measure.protocol import WARMUP_ITERS
from bench.records.identity import typed_settings
from bench.records.record import Record
from bench.results import plots
from bench.results.hardware import hardware_id, hardware_name
from bench.results.loss_plot import BASELINE, FINAL_WINDOW, SMOOTH_WINDOW, Curve, LossPlot, Treatment
from bench.results.table import DASH, link, number, table, text, with_code
from bench.results.words import FP8_ATTENTION_FLAG, display_name, model_sort_key, recipe, variant

MIN_LOSSES = 100  # fewer: a throughput run's few iterations, still near the initial loss
# Variant keys (through the run-option table): those an FP8 gradient reduction sets, MS-AMP's FP8
# scaling (part of the treatment too) and a recipe's settings (treatments, not setups).
TREATMENT_KEYS = (variant_key("grad_reduce"), variant_key("no_overlap"))
SCALING_KEY = variant_key("msamp_scaling")
RECIPE_KEYS = (variant_key("optimizer_states"), variant_key("dropout"))
WORSE_PERCENT = 1.0  # a treatment's final loss this much above bf16's is marked worse
LOSS_CHECK_ITERATIONS = 300  # a recipe's loss check: this many steps on real data at least


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


def _data_set(run: Record) -> str:
    """The name of a run's tokenized corpus (the record's ``data``), or mock data."""
    return run.data.name if run.data is not None and run.data.kind == "real" and run.data.name else "mock data"


def _iterations(run: Record) -> int:
    """The iterations of a run that logged every one: one loss each."""
    return len(run.lm_losses)


def _accelerator(run: Record) -> str:
    """The accelerator's data file name (``h200-sxm``) where known: records spell it two ways."""
    return hardware_id(run.platform.accelerator)


def _fp8_reduction(run: Record) -> str:
    """The run's FP8 gradient reduction (``fp8-shared-scale``), or "" under the engine's own."""
    reduction = str(run.variant.get(TREATMENT_KEYS[0], ""))
    return reduction if reduction.startswith("fp8") else ""


def _math_recipe(run: Record) -> str:
    """What of the run's recipe the precision does not already say: the optimizer states, dropout 0
    and attention in FP8 (:func:`bench.results.words.recipe`)."""
    return ", ".join(part for part in recipe(run).split(", ")
                     if part.startswith(("optimizer states", "dropout", "FP8 attention")))


def _treatment(run: Record) -> str:
    """The curve's label: the precision, a recipe that changes the training math (the optimizer
    states, dropout 0, attention in FP8), its MS-AMP scaling away from the default, and an FP8 gradient reduction
    where the run had one."""
    scaling, reduction = run.variant.get(SCALING_KEY), _fp8_reduction(run)
    return ", ".join(filter(None, (run.precision, _math_recipe(run), scaling and f"{scaling} scaling",
                                   reduction and f"{reduction} reduction")))


def _shaping_variant(run: Record) -> tuple:
    """The variant's settings that set curves apart. An FP8 gradient reduction is part of the
    treatment (set against bf16's own reduction), and so are the overlap it turns off, MS-AMP's
    scaling and the recipe's optimizer states and dropout: a recipe's loss is checked against
    the plain precision's. The older code that stepped the optimizer states (``paper_adam``,
    records written before ``bench.record/3``) keeps the recipe's math: its curves are not apart."""
    dropped = (*(TREATMENT_KEYS if _fp8_reduction(run) else ()), SCALING_KEY, *RECIPE_KEYS, *OLDER_CODE_KEYS)
    kept = {k: v for k, v in typed_settings(run).items() if k not in dropped}
    # Attention in FP8 is a recipe typed as a Megatron flag: the rest of those flags shape the curve.
    flags = [flag for flag in kept.pop(EXTRA_ARGS_KEY, "").split() if flag != FP8_ATTENTION_FLAG]
    return tuple(sorted({**kept, **({EXTRA_ARGS_KEY: " ".join(flags)} if flags else {})}.items()))


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


def _precision_order(name: str) -> tuple[int, str]:
    """A record's precision in the kit's order, one the kit does not offer after them."""
    return (list(PRECISIONS).index(name) if name in PRECISIONS else len(PRECISIONS), name)


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

LOSS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("precision", False), ("runs", True), ("final loss of each run", True),
    ("mean final loss", True), ("s.d. between runs", True), ("s.e. in window", True),
    (f"vs {BASELINE}", True), ("± s.e.", True), (f"vs {BASELINE} (%)", True),
    ("difference / s.e.", True), ("iterations", True), ("loss check", False),
)


def _final_losses(treatment: Treatment, records_link: str) -> str:
    """Each run's final loss, oldest first, linked to its record."""
    return ", ".join(link(f"{curve.final_loss:.4f}", f"{records_link}/{curve.run_id}.json")
                     for curve in treatment.curves)


def _against_baseline(treatment: Treatment, baseline: Treatment | None) -> list[str]:
    """The difference to the baseline's mean, its error (marked where only the windows' floor),
    in % and in errors; blank with no baseline in the group, a dash on the baseline's row."""
    if baseline is None:
        return [""] * 4
    if baseline is treatment:
        return [DASH] * 4
    diff = difference(treatment, baseline)
    error = f"{diff.error:.4f}" + (" (floor)" if diff.floor else "")
    ratio = f"{diff.absolute / diff.error:+.1f}" if diff.error else DASH
    return [f"{diff.absolute:+.4f}", error, f"{diff.percent:+.2f} %", ratio]


def _verdict(treatment: Treatment, spec: LossPlot) -> str:
    """**worse** where the final loss is more than :data:`WORSE_PERCENT` above bf16's, else
    within; a loss check needs real data and :data:`LOSS_CHECK_ITERATIONS` steps (``quick``
    where the group has fewer or trained on mock data); a dash for bf16 itself."""
    baseline = spec.baseline
    if baseline is None or baseline is treatment:
        return DASH
    percent = difference(treatment, baseline).percent
    verdict = (f"**worse by more than {WORSE_PERCENT:g} %**" if percent > WORSE_PERCENT
               else f"within {WORSE_PERCENT:g} %")
    checked = "mock data" not in spec.setup and len(treatment.curves[0].losses) >= LOSS_CHECK_ITERATIONS
    return verdict if checked else f"{verdict} (quick: mock data or under {LOSS_CHECK_ITERATIONS} steps)"


def _loss_table(spec: LossPlot, records_link: str) -> list[str]:
    rows = [[text(t.label), str(t.runs), _final_losses(t, records_link), f"{t.final_loss:.4f}",
             number(t.spread, 4), f"{t.window_error:.4f}", *_against_baseline(t, spec.baseline),
             str(len(t.curves[0].losses)), _verdict(t, spec)]
            for t in spec.treatments]
    return table(LOSS_COLUMNS, rows)


def _spread_note(spec: LossPlot) -> str:
    """What the runs of this group say about the spread between runs."""
    if spec.repeat_range is None:
        return ("Every precision here ran once: each error is the windows' floor, and a difference "
                "smaller than the spread between repeated runs of one precision is not resolved.")
    window = max(curve.final_loss_error for curve in spec.curves)
    return (f"Runs of one precision here differ by up to {spec.repeat_range:.4f} in final loss, "
            f"against a run's window error of at most {window:.4f}: a precision that ran once has "
            "only that floor as its uncertainty, and a difference smaller than the spread between "
            "runs is not resolved.")


def section(losses: Sequence[LossPlot], records_link: str) -> list[str]:
    """Each group's plot, what its runs share, and its table of final losses against bf16's."""
    if not losses:
        return []
    lines = ["## Loss curves", "",
             (f"Ok runs that logged the loss of every iteration (at least {MIN_LOSSES}) and trained "
              "the same model, layout, batch, sequence length, iterations and settings on the same "
              "data and accelerator, in different precisions, every run of each: the `lm loss` of "
              f"every iteration (thin) and its {SMOOTH_WINDOW}-iteration mean (lines). The runs of "
              "one precision share a colour, its first run solid, the second dotted and later ones "
              "dash-dotted; the legend gives each precision's runs and mean final loss. A recipe that "
              "changes the training math (MS-AMP's modes, fp4, the paper's optimizer states, "
              "dropout 0) is a treatment beside bf16 here: its **loss check** is a run of at least "
              f"{LOSS_CHECK_ITERATIONS} steps on real data, and a final loss more than "
              f"{WORSE_PERCENT:g} % above bf16's is marked worse."), ""]
    for spec in losses:
        lines += _group_lines(spec, records_link)
    return lines


def _group_lines(spec: LossPlot, records_link: str) -> list[str]:
    lines = [f"![{text(spec.title)}](plots/{spec.filename})", "",
             f"Shared: {with_code(spec.setup)}.", "", *_loss_table(spec, records_link), "",
             (f"`final loss of each run`: the mean `lm loss` of its last {FINAL_WINDOW} "
              "iterations, oldest run first, each linked to its record. `mean final loss` "
              "is their mean, `s.d. between runs` their sample standard deviation (two runs "
              "or more) and `s.e. in window` the mean's standard error from the windows "
              f"alone (each window's standard deviation over √{FINAL_WINDOW}: the noise "
              "between batches, not between runs, so a floor). "
              f"`vs {BASELINE}` is the mean minus {BASELINE}'s (negative: lower), `± s.e.` "
              "its standard error and `difference / s.e.` the difference in those errors: "
              f"within about ±2 it is noise. Where the precision and {BASELINE} both ran "
              "twice or more the error is from the spread between runs, √(s_t²/n_t + "
              f"s_b²/n_b) (s: s.d. between runs, n: runs, t: the precision, b: {BASELINE}); "
              "otherwise it is the windows' errors combined, marked `(floor)`: the true "
              "error is larger."),
             "", _spread_note(spec)]
    if spec.baseline is None:
        lines.append(f"This group has no {BASELINE} run: its differences are blank.")
    return [*lines, ""]
