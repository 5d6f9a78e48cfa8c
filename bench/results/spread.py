"""One figure per claim: a configuration's median with its run count and spread, and a ratio of
two configurations with its noise.

A figure is the median TFLOP/s/GPU of a configuration's ok runs (for an even count the mean of
the middle two, and said so), written with ``n`` and, for two or more runs, the lowest and highest
and the coefficient of variation (``586.8 (n=3, 578.0–587.1, CV 0.9 %)``), so that a reader sees
how far one run could have landed from another. A ratio (precision against bf16, DP N against DP 1, one layout
against another) is the ratio of the two sides' figures with two standard errors, from the noise
``python -m bench compare`` gives a difference: per run from its p10/p90 step times
(:func:`run_se`), per side the larger of the pooled within-run error and the spread between its
runs. Where a side ran once, its run-to-run noise is unknown and the ratio says ``1 run``.

A configuration is its key (:func:`bench.records.identity.config_key`), whatever kit commit ran
it; ``python -m bench results --by-commit`` splits each by :func:`kit_commit`. A ratio is only
drawn between headline-grade sides (:mod:`bench.records.headline`): :func:`ratio_text` says
``quick`` otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.records.headline import is_headline_grade, long_runs
from bench.records.record import Record

NORMAL_P10_P90_WIDTH = 2.5631  # p90 - p10 of a standard normal distribution
MEDIAN_SE_FACTOR = 1.2533  # sqrt(pi / 2): standard error of a median over that of a mean
COMMIT_CHARS = 7
UNKNOWN_COMMIT = "unknown"


def kit_commit(run: Record) -> str:
    """The kit commit a run ran (``provenance.kit_commit``, 7 characters), or ``unknown``."""
    commit = run.provenance.kit_commit
    return commit[:COMMIT_CHARS] if commit else UNKNOWN_COMMIT


def commits_words(runs: Sequence[Record]) -> str:
    """``kit 74d8988``, or ``kits 382c9e2, 74d8988`` for runs pooled over commits."""
    commits = sorted({kit_commit(run) for run in runs})
    return f"kit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"


def tflops(run: Record) -> float:
    assert run.metrics is not None  # figures are made of ok runs only
    return run.metrics.tflops_per_gpu


def run_se(record: Record) -> float:
    """Standard error of one run's TFLOP/s/GPU, from its window's p10/p90 step times."""
    m = record.metrics
    assert m is not None  # only ok runs are selected
    sigma = (m.step_time_s_p90 - m.step_time_s_p10) / NORMAL_P10_P90_WIDTH
    step_se = MEDIAN_SE_FACTOR * sigma / math.sqrt(m.window_iters)
    return m.tflops_per_gpu * step_se / m.step_time_s_median


@dataclass(frozen=True)
class Figure:
    """A configuration's TFLOP/s/GPU: the median of its ``n`` runs (the mean of the middle two
    for an even ``n``), their lowest and highest, and ``cv`` their sample standard deviation over
    their mean (a fraction; None for one run)."""

    median: float
    n: int
    low: float
    high: float
    cv: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        ranked = sorted(values)
        cv = statistics.stdev(ranked) / statistics.fmean(ranked) if len(ranked) > 1 else None
        return cls(statistics.median(ranked), len(ranked), ranked[0], ranked[-1], cv)

    @classmethod
    def of_runs(cls, runs: Sequence[Record]) -> Figure:
        return cls.of([tflops(run) for run in runs])

    def text(self, decimals: int = 1) -> str:
        """``578.0 (n=1)``; ``586.8 (n=3, 578.0–587.1, CV 0.9 %)``; ``142.5 (n=2, mean of the
        middle two, 121.5–163.4, CV 20.8 %)``."""
        if self.n == 1:
            return f"{self.median:.{decimals}f} (n=1)"
        even = ", mean of the middle two" if self.n % 2 == 0 else ""
        return (f"{self.median:.{decimals}f} (n={self.n}{even}, {self.low:.{decimals}f}–"
                f"{self.high:.{decimals}f}, CV {100 * (self.cv or 0.0):.1f} %)")


def side_se(runs: Sequence[Record]) -> float:
    """Standard error of the runs' mean TFLOP/s/GPU: the larger of the pooled within-run error
    and, for two or more runs, the spread between them (stdev / sqrt(k))."""
    within = math.sqrt(sum(run_se(r) ** 2 for r in runs)) / len(runs)
    between = statistics.stdev(map(tflops, runs)) / math.sqrt(len(runs)) if len(runs) > 1 else 0.0
    return max(within, between)


@dataclass(frozen=True)
class Ratio:
    """``value`` = the median TFLOP/s/GPU of ``top`` over that of ``bottom`` (their figures);
    ``noise`` two standard errors of it, from each side's standard error of the mean;
    ``single`` when a side ran once (its run-to-run noise is not in ``noise``)."""

    value: float
    noise: float
    single: bool

    @classmethod
    def of(cls, top: Sequence[Record], bottom: Sequence[Record]) -> Ratio:
        a, b = Figure.of_runs(bottom).median, Figure.of_runs(top).median
        relative = math.hypot(side_se(bottom) / statistics.fmean(map(tflops, bottom)),
                              side_se(top) / statistics.fmean(map(tflops, top)))
        return cls(b / a, 2 * (b / a) * relative, min(len(top), len(bottom)) < 2)

    def text(self, decimals: int = 2) -> str:
        """``0.90 ± 0.05``, with ``, 1 run`` where a side ran once."""
        return f"{self.value:.{decimals}f} ± {self.noise:.{decimals}f}{', 1 run' if self.single else ''}"


def ratio_text(top: Sequence[Record], bottom: Sequence[Record], decimals: int = 2) -> str:
    """:meth:`Ratio.text` of two configurations' long runs where both are headline grade, else
    ``quick (n=1 / 2)``: a quick side's figure is shown, never set against another."""
    if not (is_headline_grade(top) and is_headline_grade(bottom)):
        return f"quick (n={len(top)} / {len(bottom)})"
    return Ratio.of(long_runs(top), long_runs(bottom)).text(decimals)


RATIO_WORDS = ("A ratio is drawn only between headline-grade sides (n ≥ 3 runs of ≥ 20 measured "
               "steps on one configuration key, `bench/records/headline.py`), from their long runs; "
               "`quick (n=a / b)` marks a pair that is not. A ratio is the ratio of the two sides' "
               "median TFLOP/s/GPU ± two standard errors (from the noise `python -m bench compare` "
               "gives: each run's from its p10/p90 step times, a side's the larger of those and the "
               "spread between its runs).")
