"""Headline grade: which configurations' figures may be called "best", enter a ratio or back a
measured default.

A configuration (:func:`bench.records.identity.config_key`) is *headline grade* when at least
:data:`HEADLINE_RUNS` of its ok runs each measured at least :data:`HEADLINE_STEPS` steps
(``metrics.window_iters``). Anything less is *quick*: shown, with its count, but never ranked
against another. Repeats of one configuration on different machines of one card spread up to 16 %
and a ten-step run measures five steps: one short run cannot tell a 1.05x gain from noise.

A headline figure is made of the long runs only (:func:`long_runs`); a quick run of a headline
configuration stays on the page with the others.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Sequence

from bench.records.identity import ConfigKey, config_key
from bench.records.record import Record

HEADLINE_RUNS = 3
"""Ok runs of one configuration a headline figure needs: 3 by default."""
HEADLINE_STEPS = 20
"""Measured steps (``metrics.window_iters``, after warm-up) each of those runs needs: 20 by default."""


class Grade(enum.StrEnum):
    """What a configuration's runs may back."""

    HEADLINE = "headline"
    QUICK = "quick"


def long_runs(runs: Iterable[Record]) -> tuple[Record, ...]:
    """The ok runs that measured at least :data:`HEADLINE_STEPS` steps, in the given order."""
    return tuple(run for run in runs if run.metrics is not None and run.metrics.window_iters >= HEADLINE_STEPS)


def grade(runs: Sequence[Record]) -> Grade:
    """:attr:`Grade.HEADLINE` for the runs of one configuration with :data:`HEADLINE_RUNS` long
    runs; runs of several configurations are never headline grade together."""
    one_key = len({config_key(run) for run in runs}) == 1
    return Grade.HEADLINE if one_key and len(long_runs(runs)) >= HEADLINE_RUNS else Grade.QUICK


def is_headline_grade(runs: Sequence[Record]) -> bool:
    """Whether the runs may back a "best", a ratio or a measured default (:func:`grade`)."""
    return grade(runs) is Grade.HEADLINE


def headline(records: Iterable[Record]) -> dict[ConfigKey, tuple[Record, ...]]:
    """Every headline-grade configuration among the records with the long runs its figure is made
    of, by key in key order."""
    groups: dict[ConfigKey, list[Record]] = defaultdict(list)
    for run in records:
        if run.ok:
            groups[config_key(run)].append(run)
    return {key: long_runs(groups[key]) for key in sorted(groups) if is_headline_grade(groups[key])}
