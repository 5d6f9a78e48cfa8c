"""Each ok record against what the step-time model expected when the run was planned.

A record's ``expected`` (bench.records.expected) was written before the run trained, by the model
of that day: no later refit, no holding out, can flatter it. A record whose configuration key no
earlier record had ran a configuration the model had never seen; the others repeat one it had.
Errors are in step time, as ``python -m bench predict --validate`` counts them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from bench.planning.predict.validate import percentile
from bench.records.identity import config_key
from bench.records.record import Record


@dataclass(frozen=True)
class Side:
    """The step-time errors of one kind of record, and how many fell within the band each quoted."""

    errors: tuple[float, ...]
    in_band: int


@dataclass(frozen=True)
class AsPlanned:
    """``new``: records of a configuration key no earlier record had; ``known``: the others."""

    new: Side
    known: Side


def as_planned(records: Iterable[Record]) -> AsPlanned:
    """The ok records that keep an ``expected``, in the order they started, split by whether an
    earlier record (ok or not, with an expectation or not) had their configuration key."""
    seen: set[str] = set()
    found: dict[bool, list[tuple[float, bool]]] = {True: [], False: []}
    for record in sorted(records, key=lambda r: (r.started_at, r.run_id)):
        key = config_key(record).digest
        if record.ok and record.expected is not None and record.metrics is not None:
            measured = record.metrics.step_time_s_median
            error = abs(record.expected.step_time_s - measured) / measured
            found[key not in seen].append((error, error <= record.expected.band))
        seen.add(key)
    new, known = (Side(tuple(e for e, _ in found[side]), sum(b for _, b in found[side])) for side in (True, False))
    return AsPlanned(new, known)


def describe(found: AsPlanned) -> list[str]:
    """Lines for ``predict --validate``, in the shape of its own."""
    return ["as planned (each record's expected, by the model of its day, written before the run):",
            _line("  new key", found.new), _line("  key run before", found.known)]


def _line(label: str, side: Side) -> str:
    if not side.errors:
        return f"{label:<24} {0:>4}"
    return (f"{label:<24} {len(side.errors):>4}  median {100 * statistics.median(side.errors):5.1f} %  "
            f"p90 {100 * percentile(side.errors, 0.9):5.1f} %  ({side.in_band} within the band they quoted)")
