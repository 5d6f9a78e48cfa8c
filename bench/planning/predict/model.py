"""The step time of a case: its terms times the fit's factors, ``max(gpu, host) + after``."""

from __future__ import annotations

from dataclasses import dataclass

from bench.planning.predict.case import Case
from bench.planning.predict.facts import Performance
from bench.planning.predict.terms import AFTER_TERMS, GPU_TERMS, HOST_TERMS, TERMS, step_terms


@dataclass(frozen=True)
class Prediction:
    """``step_s``: the expected step in seconds; ``parts``: each term's fitted seconds, the host's
    only where the step is launch-bound (``host_bound``) and the GPU's otherwise."""

    step_s: float
    parts: dict[str, float]
    host_bound: bool

    @property
    def dominant(self) -> tuple[str, ...]:
        """The terms that make up most of the step, largest first (at least half of it)."""
        ordered = sorted(self.parts, key=lambda name: -self.parts[name])
        found, total = [], 0.0
        for name in ordered:
            found.append(name)
            total += self.parts[name]
            if total >= self.step_s / 2:
                break
        return tuple(found)


def combine(terms: dict[str, float], factors: dict[str, float]) -> Prediction:
    """The step from unfitted ``terms`` and the fit's ``factors`` (a missing factor counts 0)."""
    fitted = {name: terms[name] * factors.get(name, 0.0) for name in TERMS}
    gpu = sum(fitted[name] for name in GPU_TERMS)
    host = sum(fitted[name] for name in HOST_TERMS)
    bound = host > gpu
    parts = {name: fitted[name] for name in (HOST_TERMS if bound else GPU_TERMS) + AFTER_TERMS}
    return Prediction(max(gpu, host) + sum(fitted[name] for name in AFTER_TERMS), parts, bound)


def predict(case: Case, perf: Performance, factors: dict[str, float]) -> Prediction:
    """The expected step of ``case`` on the accelerator ``perf`` measured, with ``factors``."""
    return combine(step_terms(case, perf), factors)
