"""Where the time goes: the profile of each profiled run against its measured step.

A record made with ``--profile`` holds rank 0's breakdown of two steps profiled after the measured
window (:class:`bench.records.record.Profile`). The profiler's own overhead lengthens those steps,
which shows as GPU idle, while kernels keep their durations; so each busy class is set against the
run's measured median step and idle is what they leave of it (:func:`bench.measure.profile.at_step`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.measure.profile import Breakdown, at_step
from bench.records.record import Profile, Record
from bench.results.aggregate import model_sort_key

MS_PER_S = 1000.0


@dataclass(frozen=True)
class TimeRow:
    """One profiled ok run: ``step_ms`` its measured median step, ``classes`` each class's
    milliseconds at that step (:data:`bench.measure.profile.CLASSES` and ``idle``)."""

    run: Record
    profile: Profile
    step_ms: float
    classes: Mapping[str, float]

    def percent(self, name: str) -> float:
        """A class's share of the measured step, 0-100."""
        return 100 * self.classes[name] / self.step_ms


def _breakdown(profile: Profile) -> Breakdown:
    return Breakdown(**profile.model_dump(exclude={"source"}))


def time_rows(runs: Sequence[Record]) -> tuple[TimeRow, ...]:
    """A row per ok run with a profile (failed runs have no measured step), by model, then run id."""
    rows = []
    for run in runs:
        if run.profile is None or run.metrics is None:
            continue
        step_ms = run.metrics.step_time_s_median * MS_PER_S
        rows.append(TimeRow(run, run.profile, step_ms, at_step(_breakdown(run.profile), step_ms)))
    return tuple(sorted(rows, key=lambda r: (model_sort_key(r.run.preset.name.lower()),
                                             r.run.run_id)))
