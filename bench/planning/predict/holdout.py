"""Held-out checks of the step-time model: whole groups of records left out of the fit together.

Leaving one record out flatters the model where a configuration has near-identical repeats: the
held-out record's twin stays in the fit. So every check here leaves out a *group*:

- a configuration: the records of one configuration key (``bench.records.identity``; repeats
  that differ only in length, paths or seed share it) together with every record the model cannot
  tell from them (the same case: a cap, an environment variable or a software version the terms
  do not see), so that no twin of a held-out record is fitted on;
- a model size: every record of one preset;
- fewer GPUs predicting more: fit on the 1-2 GPU records, predict those on the most GPUs.

An error is ``|predicted - measured| / measured`` of the step time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from bench.planning.predict.fit import Fitter, fitted_step
from bench.planning.predict.terms import TERMS


def groups(keys: Sequence[Hashable], cases: Sequence[Hashable]) -> list[int]:
    """Each record's group number: records sharing a configuration key or a case are one group
    (connected through either), numbered in the order their first record comes."""
    parent = list(range(len(keys)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for labels in (keys, cases):
        first: dict[Hashable, int] = {}
        for i, label in enumerate(labels):
            j = first.setdefault(label, i)
            parent[root(i)] = root(j)
    numbers: dict[int, int] = {}
    return [numbers.setdefault(root(i), len(numbers)) for i in range(len(keys))]


def held_out(fitter: Fitter, labels: Sequence[Hashable]) -> list[float]:
    """Each sample's step predicted by the factors fitted without every sample of its label:
    one fit per label, however many samples share it."""
    members: dict[Hashable, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    predicted = [0.0] * len(labels)
    for indices in members.values():
        factors = fitter.fit(indices)
        x = [factors[n] for n in TERMS]
        for i in indices:
            predicted[i] = fitted_step(fitter.samples[i].terms, x)
    return predicted
