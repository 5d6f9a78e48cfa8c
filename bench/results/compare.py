"""``python -m bench compare A B``: the difference between two configurations, against its noise.

A side is a run id (``13b_tp1pp1dp4_local_20261121T204416Z``), several run ids joined by commas,
or a *selector*: ``key=value`` words (shell-quoted values may hold spaces) that every ok record of
the side must match, e.g. ``model=2.7b layout=dp4 gbs=128 overlap=off``. Selector keys:
``model``, ``layout`` (read like a layout name, ``dp4`` matches ``tp1pp1dp4``), ``platform``,
``accelerator``, ``engine``, ``precision``, ``gpus``, ``nodes``, ``mbs``, ``gbs``, ``commit``
(a prefix of the kit commit), ``notes`` (the results page's notes text; ``notes=any`` for any),
and any other key is one of the record's variant settings, labels, engine notes or notes
(``overlap=off``, ``sweep=...``, ``repeat_group=...``, ``zero_stage=1``). Without
an A/B key (``overlap``, ``grad_reduce``, ``optimizer_states``, ``msamp_scaling``,
``msamp_modules``, ``fused_loss``, ``core_attention``, ``megatron_args``) or ``notes``, a selector
takes only runs at the kit's defaults. A side must be one configuration, as the results page groups
them; its runs are pooled.

Noise. Each run's TFLOP/s/GPU is the model FLOPs over its *median* step time. Its uncertainty is
estimated from the step-time spread the record keeps: sigma = (p90 - p10) / 2.563 (the p10-p90
width of a normal distribution), and the standard error of a median of ``n`` window steps is
1.2533 sigma / sqrt(n). A side of several runs (``--repeat``) takes the mean of its runs, with the
larger of two standard errors: the runs' own (pooled within-run errors / k) and the spread between
them (standard deviation / sqrt(k)), which is what catches run-to-run noise (another node, another
process beside it). The band is two standard errors of the difference (about 95 % for normal
noise); a difference beyond it *exceeds the noise*. With one run a side, only the within-run noise
is known, and the output says so: run-to-run variation then needs ``--repeat``.

Peak memory is the allocator's high-water mark and repeats exactly for one configuration; its band
is the widest range of a side's runs (zero with one run each).
"""

from __future__ import annotations

import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config.text import visible
from bench.planning.layout import parse_layout_name
from bench.planning.tuning import TUNING_NOTE_KEYS, flag_names
from bench.records.record import Record
from bench.records.store import Problem, load_records
from bench.results.aggregate import configuration, layout_matches
from bench.results.spread import run_se
from bench.results.words import settings, variant

BAND_SIGMAS = 2.0

_FIELDS = {
    "model": lambda r: r.preset.name.lower(),
    "platform": lambda r: r.platform.name,
    "accelerator": lambda r: r.platform.accelerator,
    "engine": lambda r: r.engine,
    "precision": lambda r: r.precision,
    "gpus": lambda r: str(r.gpus),
    "nodes": lambda r: str(r.nodes),
    "mbs": lambda r: str(r.layout.micro_batch),
    "gbs": lambda r: str(r.layout.global_batch),
}
SELECTOR_KEYS = (*_FIELDS, "layout", "commit", "notes")


@dataclass(frozen=True)
class Side:
    """The ok runs of one side, pooled: ``text`` is what the user wrote."""

    text: str
    runs: tuple[Record, ...]

    @property
    def tflops(self) -> float:
        return statistics.fmean(r.metrics.tflops_per_gpu for r in self.runs)  # type: ignore[union-attr]

    @property
    def within_se(self) -> float:
        """Standard error of the mean TFLOP/s/GPU from the runs' step-time spreads."""
        return math.sqrt(sum(run_se(r) ** 2 for r in self.runs)) / len(self.runs)

    @property
    def between_se(self) -> float | None:
        """Standard error of the mean from the spread between the runs; None for one run."""
        if len(self.runs) < 2:
            return None
        values = [r.metrics.tflops_per_gpu for r in self.runs]  # type: ignore[union-attr]
        return statistics.stdev(values) / math.sqrt(len(values))

    @property
    def se(self) -> float:
        return max(self.within_se, self.between_se or 0.0)

    @property
    def mixed_flags(self) -> list[str]:
        """Flags in some but not all of the runs' argv: the kit's defaults changed between them."""
        sets = [flag_names(r.argv) for r in self.runs]
        return sorted(set.union(*sets) - set.intersection(*sets))

    @property
    def memory(self) -> tuple[float, float] | None:
        """(mean, max - min) of the peak memory in GB; None when a run did not report it."""
        values = [r.metrics.peak_mem_gb for r in self.runs]  # type: ignore[union-attr]
        if None in values:
            return None
        return statistics.fmean(values), max(values) - min(values)  # type: ignore[type-var]



def parse_selector(text: str) -> dict[str, str]:
    """``key=value`` words -> {key: value}; a ValueError names the word that is not one."""
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise ValueError(f"selector {text!r}: {error} (quote values with spaces)") from None
    wanted: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"selector {text!r}: {word!r} is not key=value (keys: "
                             f"{', '.join(SELECTOR_KEYS)}, or a note key such as overlap)")
        if key in wanted:
            raise ValueError(f"selector {text!r}: {key} is given twice")
        wanted[key] = value
    if "layout" in wanted:
        try:
            parse_layout_name(wanted["layout"])
        except ValueError as error:
            raise ValueError(f"selector {text!r}: layout: {error}") from None
    return wanted


def matches(record: Record, wanted: dict[str, str]) -> bool:
    """Whether a record satisfies every ``key=value`` of a parsed selector."""
    for key, value in wanted.items():
        if key in _FIELDS:
            have = _FIELDS[key](record)
            if have != (value.lower() if key == "model" else value):
                return False
        elif key == "layout":
            if not layout_matches(parse_layout_name(value), record.layout):
                return False
        elif key == "commit":
            if not (record.provenance.kit_commit or "").startswith(value):
                return False
        elif key == "notes":
            if value != "any" and variant(settings(record)) != ("" if value == "none" else value):
                return False
        elif str(_noted(record).get(key)) != value:
            return False
    if "notes" not in wanted and not any(key in wanted for key in TUNING_NOTE_KEYS):
        # Without an A/B key, the kit's defaults: a variant run is never pooled with them.
        return not any(key in record.variant for key in TUNING_NOTE_KEYS)
    return True


def _noted(record: Record) -> dict[str, object]:
    """What a selector's other keys are looked up in: everything the record says of the run
    beyond its fields (variant, labels, engine notes, notes)."""
    return {**record.notes, **record.engine_notes, **record.labels, **record.variant}


def select(records: Sequence[Record], text: str, skipped: Sequence[Problem] = ()) -> Side:
    """The side ``text`` names; a ValueError says what is missing or ambiguous and how to narrow.
    ``skipped``: the record files that did not load, named where a run id's file is one of them."""
    by_id = {r.run_id: r for r in records}
    ids = [part.strip().removesuffix(".json") for part in text.split(",")]
    if "=" not in text:
        unreadable = {p.file: p for p in skipped}
        for i in ids:
            if i not in by_id and f"{i}.json" in unreadable:  # there, but not a record
                raise ValueError(f"the record of {i} cannot be read: {unreadable[f'{i}.json']}")
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"no record {', '.join(missing)} in the records folder (give run "
                             "ids, or a selector like 'model=2.7b layout=dp4 gbs=128')")
        chosen = [by_id[i] for i in ids]
        failed = [r.run_id for r in chosen if r.metrics is None]
        if failed:
            raise ValueError(f"{', '.join(failed)}: status is not ok, so there is nothing to "
                             "compare")
    else:
        wanted = parse_selector(text)
        chosen = [r for r in records if r.metrics is not None and matches(r, wanted)]
        if not chosen:
            unread = (f"; {len(skipped)} record file(s) could not be read, e.g. {skipped[0]}"
                      if skipped else "")
            raise ValueError(f"no ok record matches {text!r} (without an A/B key or notes=..., "
                             f"a selector takes runs at the kit's defaults only){unread}")
    configs = {configuration(r) for r in chosen}  # a side pools commits
    if len(configs) > 1:
        raise ValueError(f"{text!r} matches {len(configs)} configurations; narrow it with "
                         f"{_differences(chosen)}")
    return Side(text, tuple(sorted(chosen, key=lambda r: r.run_id)))


def _differences(runs: Sequence[Record]) -> str:
    """What tells the matched configurations apart, as selector words."""
    keys = {"model": _FIELDS["model"], "layout": lambda r: r.layout.name,
            **{k: f for k, f in _FIELDS.items() if k != "model"},
            "notes": lambda r: variant(settings(r)) or "none"}
    words = []
    for key, get in keys.items():
        values = sorted({get(r) for r in runs}, key=lambda v: (not v.isdigit(), len(v), v))
        if len(values) > 1:
            words.append(f"{key}={'|'.join(values)}")
    return "one of " + ", ".join(words) if words else "run ids"


def machine(record: Record) -> str | None:
    """The GPUs a run saw, as one name: the first eight hex digits of each GPU's UUID, joined by
    ``+``; None where the record names none (made before the kit kept them)."""
    uuids = record.provenance.gpu_uuids
    return "+".join(u.removeprefix("GPU-")[:8] for u in uuids) if uuids else None


@dataclass(frozen=True)
class Comparison:
    """B against A: TFLOP/s/GPU and peak memory differences with their noise bands, and the
    machines the runs ran on: on one machine, what drifts between machines (GPU-bound steps of one
    configuration have differed by over 1 % between machines of one kind, host-bound ones by far
    more) is out of the difference."""

    a: Side
    b: Side

    @property
    def machines(self) -> list[str | None]:
        """The distinct machines of both sides' runs, in run order (None: a run names none)."""
        return list(dict.fromkeys(machine(r) for r in (*self.a.runs, *self.b.runs)))

    @property
    def machine_words(self) -> str:
        """One line: on one machine, on several, or not known for some runs."""
        known = [m for m in self.machines if m is not None]
        unknown = sum(machine(r) is None for r in (*self.a.runs, *self.b.runs))
        if unknown:
            return (f"{unknown} run(s) name no GPUs (records made before the kit kept their "
                    "UUIDs), so whether the sides shared a machine is not known")
        if len(known) == 1:
            return f"Both sides ran on one machine (GPUs {known[0]})"
        return (f"The runs ran on {len(known)} machines ({', '.join(known)}): the difference also "
                "holds what differs between them; compare runs of one machine where that matters")

    @property
    def delta(self) -> float:
        return self.b.tflops - self.a.tflops

    @property
    def band(self) -> float:
        return BAND_SIGMAS * math.hypot(self.a.se, self.b.se)

    @property
    def exceeds(self) -> bool:
        return abs(self.delta) > self.band

    @property
    def repeated(self) -> bool:
        """Whether both sides have run-to-run noise in their band (two or more runs each)."""
        return len(self.a.runs) > 1 and len(self.b.runs) > 1

    @property
    def memory(self) -> tuple[float, float] | None:
        """(B - A in GB, band in GB), or None when a side has no memory figure."""
        if self.a.memory is None or self.b.memory is None:
            return None
        return self.b.memory[0] - self.a.memory[0], max(self.a.memory[1], self.b.memory[1])

    @property
    def verdict(self) -> str:
        pct, band = 100 * self.delta / self.a.tflops, 100 * self.band / self.a.tflops
        if self.exceeds:
            text = (f"B is {'faster' if self.delta > 0 else 'slower'} by {abs(pct):.2f} %, more "
                    f"than the noise (±{band:.2f} %)")
        else:
            text = f"No difference beyond the noise: {pct:+.2f} % within ±{band:.2f} %"
        if not self.repeated:
            text += ("; the band holds only the within-run step-time noise of a side with one run"
                     " (run-to-run noise unknown: measure it with --repeat 3)")
        return text


def _side_rows(name: str, side: Side) -> list[str]:
    first = side.runs[0]
    lay = first.layout
    notes = variant(settings(first)) or "kit defaults"
    lines = [f"{name}: {side.text}",
             f"   {first.preset.name} {lay.name} on {first.gpus} GPU(s) of {first.platform.name} "
             f"({first.platform.accelerator}), {first.engine} {first.precision}, micro/global "
             f"batch {lay.micro_batch}/{lay.global_batch}; {notes}"]
    mixed = side.mixed_flags
    if mixed:
        lines.append(f"   note: its runs differ in {', '.join(mixed)} (the kit's defaults changed "
                     "between their commits); pick runs by id or commit=... to keep them apart")
    for r in side.runs:
        m = r.metrics
        assert m is not None
        lines.append(f"   {r.run_id}  {m.tflops_per_gpu:6.1f} TFLOP/s/GPU (s.e. {run_se(r):.1f})  "
                     f"step {m.step_time_s_median:.3f} s (p10 {m.step_time_s_p10:.3f}, p90 "
                     f"{m.step_time_s_p90:.3f}, {m.window_iters} steps)  commit "
                     f"{(r.provenance.kit_commit or '?')[:7]}  GPUs {machine(r) or '?'}")
    return lines


def format_text(c: Comparison) -> str:
    """The human report: each side's runs, then the differences and the verdict."""
    a, b = c.a, c.b
    lines = [*_side_rows("A", a), *_side_rows("B", b), ""]
    lines.append(f"{'':14}{'A':>9}{'B':>9}{'B - A':>18}{'noise band (2 s.e.)':>24}")
    pct = 100 * c.delta / a.tflops
    lines.append(f"{'TFLOP/s/GPU':14}{a.tflops:9.1f}{b.tflops:9.1f}"
                 f"{f'{c.delta:+.1f} ({pct:+.2f} %)':>18}"
                 f"{f'±{c.band:.1f} (±{100 * c.band / a.tflops:.2f} %)':>24}")
    memory = c.memory
    if memory is not None:
        assert a.memory is not None and b.memory is not None
        delta, band = memory
        lines.append(f"{'peak mem GB':14}{a.memory[0]:9.1f}{b.memory[0]:9.1f}"
                     f"{f'{delta:+.1f} ({100 * delta / a.memory[0]:+.1f} %)':>18}"
                     f"{f'±{band:.1f}':>24}")
    lines += ["", f"{c.verdict}.", f"{c.machine_words}."]
    # Record text (a platform's name, a shell variable's value) shown with its control characters
    # escaped: it never redraws the terminal.
    return "\n".join(map(visible, lines))


def _side_json(side: Side) -> dict[str, Any]:
    memory = side.memory
    return {
        "selector": side.text,
        "runs": [r.run_id for r in side.runs],
        "mixed_flags": side.mixed_flags,
        "tflops_per_gpu": side.tflops,
        "tflops_se": side.se,
        "tflops_se_within": side.within_se,
        "tflops_se_between": side.between_se,
        "peak_mem_gb": None if memory is None else memory[0],
        "peak_mem_range_gb": None if memory is None else memory[1],
    }


def to_json(c: Comparison) -> dict[str, Any]:
    """The comparison as plain data (``compare --json``)."""
    memory = c.memory
    return {
        "a": _side_json(c.a),
        "b": _side_json(c.b),
        "tflops_delta": c.delta,
        "tflops_delta_percent": 100 * c.delta / c.a.tflops,
        "tflops_band": c.band,
        "tflops_band_percent": 100 * c.band / c.a.tflops,
        "exceeds_noise": c.exceeds,
        "run_to_run_noise_known": c.repeated,
        "peak_mem_delta_gb": None if memory is None else memory[0],
        "peak_mem_band_gb": None if memory is None else memory[1],
        "verdict": c.verdict,
        "machines": c.machines,
    }


def compare_in(records_dir: Path, a: str, b: str) -> Comparison:
    """Load the records of ``records_dir`` and compare side ``b`` against side ``a``."""
    if not records_dir.is_dir():
        raise ValueError(f"{records_dir} is not a folder of run records (give --records DIR)")
    records, skipped = load_records(records_dir)
    sides = select(records, a, skipped), select(records, b, skipped)
    shared = sorted({r.run_id for r in sides[0].runs} & {r.run_id for r in sides[1].runs})
    if shared:
        raise ValueError(f"A and B share {len(shared)} run(s) ({', '.join(shared[:3])}"
                         f"{', ...' if len(shared) > 3 else ''}): a run compared with itself "
                         "measures no difference; give two sides with no run in common")
    return Comparison(*sides)
