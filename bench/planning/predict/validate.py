"""Checking the model on the kit's records: configurations held out whole, model sizes held out,
fewer GPUs predicting more, whether it ranks the fastest layout first, published rows it was
never fitted on (:mod:`bench.planning.predict.published`), and the records of an engine it prices
as megatron-core's local layers without fitting on them (Megatron-DeepSpeed at ZeRO 0-2).

Every check fits on some ok records and predicts others it did not see, leaving out together the
records the model cannot tell apart (:mod:`bench.planning.predict.holdout`); an error is
``|predicted - measured| / measured`` of the step time (the throughput's error is the same to
first order).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.config.precisions import PRECISIONS
from bench.config.run_options import variant_key
from bench.planning.engines.deepspeed import core_priced
from bench.planning.engines.registry import ENGINES
from bench.planning.predict import holdout
from bench.planning.predict.case import Case, case_from_record
from bench.planning.predict.facts import Performance, load_all
from bench.planning.predict.fit import BAND_PREFIX, GPU_BOUND, HOST_BOUND, Fitter, Sample, fitted_step, kind_of
from bench.planning.predict.model import combine
from bench.planning.predict.published import PublishedCase
from bench.planning.predict.published_rank import TOP, Placed, place_in_sweep
from bench.planning.predict.terms import TERMS, step_terms

MODELLED = tuple(name for name, engine in ENGINES.items() if engine.step_model)
PRICED_AS_CORE = tuple(name for name, engine in ENGINES.items() if engine.priced_as_core)
OFFLOAD_KEY = variant_key("zero_offload")
MIN_LAYOUTS = 3  # a ranking group has at least this many layouts
# A predicted fastest layout whose best run measured within this of the measured fastest is a tie,
# not a wrong pick: the kit's default on 13b tp2pp2 + sp reproduced within 1.1 % across two
# machines of four H200s, and the same run differed 5.4 % on two others.
RANK_TIE = 0.02


@dataclass(frozen=True)
class Observed:
    """One ok record as the checks use it."""

    sample: Sample
    engine: str
    precision: str
    gpus: int
    preset: str
    layout: str
    global_batch: int
    key: Hashable = ""  # the record's configuration key ("": its run id stands alone)
    case: Case | None = None


def observed(records: Iterable[Any], performance: dict[str, Performance],
             key_of: Callable[[Any], Hashable] | None = None, engines: Sequence[str] = MODELLED) -> list[Observed]:
    """The ok records of the modelled engines (``engines``) on an accelerator with measured
    ceilings, without context parallelism (:data:`bench.planning.predict.expect.UNMODELLED_CP`), of
    a precision the kit offers (another has no family in the model), in order; ``key_of`` gives a
    record's configuration key (``bench.records.identity.config_key``; None: each record its own)."""
    found = []
    for record in records:
        if not (record.ok and record.engine in engines and record.layout.cp == 1
                and record.platform.accelerator in performance and record.precision in PRECISIONS):
            continue
        case = case_from_record(record)
        terms = step_terms(case, performance[case.accelerator])
        sample = Sample(record.run_id, tuple(terms[n] for n in TERMS), record.metrics.step_time_s_median)
        found.append(Observed(sample, record.engine, record.precision, record.gpus,
                              record.preset.name, record.layout.name, record.layout.global_batch,
                              key_of(record) if key_of else record.run_id, case))
    return found


def priced_as_core(records: Iterable[Any], performance: dict[str, Performance]) -> list[Observed]:
    """The ok records of the engines priced as megatron-core's local layers, at ZeRO 0-2 without
    offload (as :func:`bench.planning.plan.plan` prices them), never fitted on."""
    return observed([r for r in records if core_priced(r.layout, r.variant.get(OFFLOAD_KEY, "none"))],
                    performance, engines=PRICED_AS_CORE)


def by_configuration(runs: Sequence[Observed]) -> list[int]:
    """Each run's group: its configuration key joined with every run of the same case."""
    return holdout.groups([r.key or r.sample.run_id for r in runs],
                          [r.case if r.case is not None else r.sample.run_id for r in runs])


def group_held_out(runs: Sequence[Observed], fitter: Fitter | None = None) -> list[float]:
    """Each run's step predicted by the factors fitted without its whole group
    (:func:`by_configuration`)."""
    return holdout.held_out(fitter or Fitter([r.sample for r in runs]), by_configuration(runs))


def within_group(runs: Sequence[Observed]) -> list[float]:
    """Each run's step against the median step of its group (:func:`by_configuration`): the error
    left to a model that gives one step per configuration, as this one does, even were it to hit
    every group's median; runs of one configuration differ between machines and hours, most where
    the host bounds the step."""
    groups = by_configuration(runs)
    steps: dict[int, list[float]] = {}
    for group, run in zip(groups, runs, strict=True):
        steps.setdefault(group, []).append(run.sample.step_s)
    return errors(runs, [statistics.median(steps[group]) for group in groups])


def host_bound(runs: Sequence[Observed], factors: Mapping[str, float]) -> list[bool]:
    """Whether the fit prices each run's step host-bound: the host's launches longer than the GPU's
    stream (:attr:`bench.planning.predict.model.Prediction.host_bound`), as a plan's expectation
    is priced; such steps err most, so an expectation quotes the band of its own kind."""
    return [combine(dict(zip(TERMS, r.sample.terms, strict=True)), dict(factors)).host_bound for r in runs]


# A band of a precision and a kind needs this many records: the p90 of fewer is their largest error.
MIN_BAND_RECORDS = 10


def bands(runs: Sequence[Observed], errs: Sequence[float], bound: Sequence[bool]) -> dict[str, float]:
    """The 90th-percentile group-held-out error of the records of each kind (``GPU-bound``,
    ``host-bound``), of each precision, and of each precision and kind with at least
    :data:`MIN_BAND_RECORDS` records (``bf16 host-bound``): the bands a plan's expectation quotes,
    the most particular first (:func:`bench.planning.predict.expect.band_for`)."""
    groups: dict[str, list[float]] = {}
    for run, err, b in zip(runs, errs, bound, strict=True):
        for key in (kind_of(b), run.precision, f"{run.precision} {kind_of(b)}"):
            groups.setdefault(key, []).append(err)
    return {key: percentile(group, 0.9) for key, group in groups.items()
            if " " not in key or len(group) >= MIN_BAND_RECORDS}


def size_held_out(runs: Sequence[Observed], fitter: Fitter | None = None) -> list[float]:
    """Each run's step predicted by the factors fitted without every run of its model size."""
    return holdout.held_out(fitter or Fitter([r.sample for r in runs]), [r.preset for r in runs])


def predict_from(train: Sequence[Observed], test: Sequence[Observed]) -> list[float]:
    """The steps of ``test`` predicted by the factors fitted on ``train``."""
    factors = Fitter([r.sample for r in train]).full
    return [fitted_step(r.sample.terms, [factors[n] for n in TERMS]) for r in test]


def errors(runs: Sequence[Observed], predicted: Sequence[float]) -> list[float]:
    return [abs(p - r.sample.step_s) / r.sample.step_s for r, p in zip(runs, predicted, strict=True)]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between the nearest ranks."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (at - low) * (ordered[high] - ordered[low])


def ranking(runs: Sequence[Observed], predicted: Sequence[float]) -> list[tuple[str, str, str, float]]:
    """Per group of one preset on one GPU count with :data:`MIN_LAYOUTS` or more layouts: (group,
    the measured fastest layout, the predicted fastest, how much slower the predicted fastest
    measured). A layout's speed is its best run's samples per second, measured or predicted."""
    groups: dict[tuple[str, int], dict[str, list[float]]] = {}
    for run, step in zip(runs, predicted, strict=True):
        best = groups.setdefault((run.preset, run.gpus), {}).setdefault(run.layout, [0.0, 0.0])
        best[0] = max(best[0], run.global_batch / run.sample.step_s)
        best[1] = max(best[1], run.global_batch / step)
    found = []
    for (preset, gpus), layouts in sorted(groups.items()):
        if len(layouts) >= MIN_LAYOUTS:
            measured = max(layouts, key=lambda n: layouts[n][0])
            guessed = max(layouts, key=lambda n: layouts[n][1])
            found.append((f"{preset} on {gpus} GPUs", measured, guessed,
                          1 - layouts[guessed][0] / layouts[measured][0]))
    return found


def _line(label: str, errs: Sequence[float]) -> str:
    return (f"{label:<24} {len(errs):>4}  median {100 * statistics.median(errs):5.1f} %  "
            f"p90 {100 * percentile(errs, 0.9):5.1f} %")


def _parameters(preset: str) -> float:
    """A preset's size for ordering (``125m`` before ``1.3b``); a name without one sorts last."""
    number, unit = preset[:-1], preset[-1:]
    scale = {"m": 1e6, "b": 1e9}.get(unit)
    return float(number) * scale if scale and number.replace(".", "", 1).isdigit() else float("inf")


def _group_lines(runs: Sequence[Observed], errs: Sequence[float]) -> list[str]:
    lines = [f"group-held-out over {len(runs)} ok {' '.join(MODELLED)} records in "
             f"{len(set(by_configuration(runs)))} groups (a configuration key with every record the "
             "model cannot tell from it, left out together: fit on the others, predict the group): "
             "absolute error of the step time; last, the within-group spread: each run against its "
             "group's median step, what a model of one step per configuration errs even where it hits "
             "every median"]
    for key in ("engine", "precision", "gpus"):
        for value in sorted({getattr(r, key) for r in runs}):
            picked = [e for r, e in zip(runs, errs, strict=True) if getattr(r, key) == value]
            lines.append(_line(f"{key} {value}", picked))
    return lines


def _ranking_lines(ranked: Sequence[tuple[str, str, str, float]]) -> list[str]:
    right = sum(slower <= RANK_TIE for *_, slower in ranked)
    return [*(f"  {group}: measured fastest {measured}, predicted {guessed}"
              + (f" (measured {100 * slower:.1f} % slower{': a tie' if slower <= RANK_TIE else ''})"
                 if guessed != measured else "")
              for group, measured, guessed, slower in ranked),
            f"ranking: {right} of {len(ranked)} groups with >= {MIN_LAYOUTS} layouts rank the measured "
            f"fastest first (or one within {100 * RANK_TIE:.0f} % of it), each predicted with its group held out"]


def _published_lines(rows: Sequence[PublishedCase], factors: dict[str, float]) -> tuple[list[str], list[float]]:
    """One line per published row (its error, or why it has none), the priced rows' errors by how
    the fit prices them (GPU-bound, or host-bound: the host terms are the records' hosts', whose
    pace the published hosts need not share), and the priced rows' errors."""
    x = [factors[n] for n in TERMS]
    lines, errs = [f"published rows ({len(rows)}), never fitted on, predicted by the fit on every record:"], []
    bound: list[bool] = []
    for row in rows:
        if row.why_not:
            lines.append(f"  {row.label}: no expectation: {row.why_not}")
            continue
        network = dict(row.network)
        priced = combine(dict(zip(TERMS, row.terms, strict=True)), factors, network, overlap=True)
        step = priced.step_s if any(network.values()) else fitted_step(row.terms, x)
        errs.append(abs(step - row.step_s) / row.step_s)
        bound.append(priced.host_bound)
        expected = row.causal_flops / step / row.gpus / 1e12
        lines.append(f"  {row.label}: published {row.causal_tflops:.0f} TFLOP/s/GPU (causal count), "
                     f"expected {expected:.0f}, error {100 * errs[-1]:.1f} %")
    for kind in (GPU_BOUND, HOST_BOUND):
        if of_kind := [e for e, b in zip(errs, bound, strict=True) if kind_of(b) == kind]:
            lines.append(_line(f"  {kind} by the fit", of_kind))
    return lines, errs


def _placement_lines(placed: Sequence[Placed]) -> list[str]:
    """Each priced row's place in the sweep at its GPU count, then how many made the top."""
    if not placed:
        return []
    top = sum(p.place <= TOP for p in placed)
    return (["published layouts in the sweep at their GPU count (every valid layout and shape that "
             "fits, priced by the fit on every record), 1 = fastest:"]
            + [p.line for p in placed]
            + [f"published layouts in the sweep's top {TOP}: {top} of {len(placed)} rows"])


def summary(label: str, errs: Sequence[float], count: str = "") -> str:
    """``label: median X % p90 Y %`` (``n/a`` where nothing was predicted), then ``count``."""
    figures = (f"median {100 * statistics.median(errs):.1f} % p90 {100 * percentile(errs, 0.9):.1f} %"
               if errs else "median n/a p90 n/a")
    return f"{label}: {figures}{count}"


def _as_core_lines(as_core: Sequence[Observed], factors: dict[str, float]) -> tuple[list[str], dict[str, float]]:
    """The line and figures of the records priced as megatron-core's local layers (:func:`priced_as_core`)
    by the fit on the modelled records: the errors, and the share that ran slower than priced."""
    if not as_core:
        return [], {}
    x = [factors[n] for n in TERMS]
    priced = [fitted_step(r.sample.terms, x) for r in as_core]
    errs = errors(as_core, priced)
    slower = sum(r.sample.step_s > p for r, p in zip(as_core, priced, strict=True)) / len(as_core)
    line = (_line(f"{'/'.join(PRICED_AS_CORE)} as core", errs)
            + f"  ({100 * slower:.0f} % slower than priced; ZeRO 0-2, priced as megatron-core's local "
            "layers, never fitted on)")
    return [line], {"core_priced_median": statistics.median(errs), "core_priced_p90": percentile(errs, 0.9),
                    "core_priced_slower": slower, "core_priced_records": float(len(as_core))}


def report(runs: Sequence[Observed], published: Sequence[PublishedCase] = (),
           performance: Mapping[str, Performance] | None = None,
           as_core: Sequence[Observed] = ()) -> tuple[list[str], dict[str, float]]:
    """The validation's lines, the last two ``group-held-out: median X % p90 Y %`` and
    ``published: median X % p90 Y % (N rows)``, and its figures by name; ``performance``: the
    ceilings the published rows' sweeps are priced on (default: ``platforms/performance/``);
    ``as_core``: records of an engine priced as megatron-core's, checked, never fitted on."""
    fitter = Fitter([r.sample for r in runs])
    predicted = group_held_out(runs, fitter)
    errs = errors(runs, predicted)
    spread = within_group(runs)
    bound = host_bound(runs, fitter.full)
    def of_kind(values: Sequence[float], kind: str) -> list[float]:
        return [v for v, b in zip(values, bound, strict=True) if kind_of(b) == kind]

    # Beside each kind's errors, its runs' own spread: host-bound runs of one configuration differ
    # between hosts, which no model of one step per configuration follows.
    lines = [*_group_lines(runs, errs),
             *(_line(f"{kind} by the fit", of_kind(errs, kind)) for kind in (GPU_BOUND, HOST_BOUND)),
             _line("within-group spread", spread),
             *(_line(f"  of the {kind}", of_kind(spread, kind)) for kind in (GPU_BOUND, HOST_BOUND))]
    by_size = errors(runs, size_held_out(runs, fitter))
    lines += [_line(f"size {size} held out", [e for r, e in zip(runs, by_size, strict=True) if r.preset == size])
              for size in sorted({r.preset for r in runs}, key=_parameters)]
    small = [r for r in runs if r.gpus <= 2]
    large = [r for r in runs if r.gpus == max(r.gpus for r in runs)]
    cross = errors(large, predict_from(small, large))
    lines.append(_line(f"fit on 1-2 GPUs ({len(small)}), predict {large[0].gpus}", cross))
    core_lines, core_figures = _as_core_lines(as_core, fitter.full)
    lines += core_lines
    ranked = ranking(runs, predicted)
    lines += _ranking_lines(ranked)
    shown, published_errs = _published_lines(published, fitter.full)
    lines += shown
    ceilings = load_all() if performance is None else performance
    placed = [p for row in published if (p := place_in_sweep(row, ceilings, fitter.full)) is not None]
    lines += _placement_lines(placed)
    figures = {"median": statistics.median(errs), "p90": percentile(errs, 0.9),
               "spread_median": statistics.median(spread), "spread_p90": percentile(spread, 0.9),
               "size_median": statistics.median(by_size), "cross_median": statistics.median(cross),
               "ranking": sum(s <= RANK_TIE for *_, s in ranked) / len(ranked) if ranked else 0.0,
               "published_rows": float(len(published_errs))} | core_figures
    figures |= {f"{BAND_PREFIX}{name}": value for name, value in bands(runs, errs, bound).items()}
    if published_errs:
        figures |= {"published_median": statistics.median(published_errs),
                    "published_p90": percentile(published_errs, 0.9),
                    "published_top": sum(p.place <= TOP for p in placed) / len(placed)}
    unpriced = len(published) - len(published_errs)
    lines += [summary("group-held-out", errs),
              summary("published", published_errs, f" ({len(published_errs)} rows"
                      + (f"; {unpriced} more without an expectation, said above)" if unpriced else ")"))]
    return lines, figures
