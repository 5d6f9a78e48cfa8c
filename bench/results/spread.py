"""One figure per claim: a configuration's median with its run count and spread, and a ratio of
two configurations with its noise.

A figure is the median TFLOP/s/GPU of a configuration's ok runs (the lower median for an even
count: the run whose record a row shows), written with ``n`` and, for two or more runs, the lowest
and highest (``586.8 (n=3, 578.0–587.1)``), so that a reader sees how far one
run could have landed from another. A ratio (precision against bf16, DP N against DP 1, one layout
against another) is the ratio of the two sides' figures with two standard errors, from the noise
``python -m bench compare`` gives a difference: per run from its p10/p90 step times
(:func:`run_se`), per side the larger of the pooled within-run error and the spread between its
runs. Where a side ran once, its run-to-run noise is unknown and the ratio says ``1 run``.

Runs of different kit commits are kept apart (:func:`kit_commit` is part of a configuration)
unless the user pools them (``python -m bench results --pool-commits``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

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
    """A configuration's TFLOP/s/GPU: the median of its ``n`` runs, their lowest and highest."""

    median: float
    n: int
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        ranked = sorted(values)
        return cls(ranked[(len(ranked) - 1) // 2], len(ranked), ranked[0], ranked[-1])

    @classmethod
    def of_runs(cls, runs: Sequence[Record]) -> Figure:
        return cls.of([tflops(run) for run in runs])

    def text(self, decimals: int = 1) -> str:
        """``578.0 (n=1)``; ``586.8 (n=3, 578.0–587.1)``."""
        spread = f", {self.low:.{decimals}f}–{self.high:.{decimals}f}" if self.n > 1 else ""
        return f"{self.median:.{decimals}f} (n={self.n}{spread})"


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


RATIO_WORDS = ("Every ratio is the ratio of the two sides' median TFLOP/s/GPU ± two standard "
               "errors (from the noise `python -m bench compare` gives: each run's from its p10/p90 step times, a "
               "side's the larger of those and the spread between its runs); `1 run` marks a ratio "
               "one of whose sides ran once, whose run-to-run noise (often larger) is then not in it.")
