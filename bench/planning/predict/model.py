"""The step time of a case: its terms times the fit's factors, ``max(gpu, host) + after``.

A run over nodes adds what the links between them cost (``pp_net``, ``dp_net``:
:func:`bench.planning.predict.terms.network_terms`) at face value, as no record crosses nodes to fit
them on: the pipeline sends' to the GPU's stream, the data-parallel collectives' once a step, where
the backward pass overlaps them (``--overlap-grad-reduce``) in the share of them the fit leaves
exposed inside a node (the ``dp_overlap`` factor)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.planning.predict.case import Case
from bench.planning.predict.facts import Performance
from bench.planning.predict.terms import AFTER_TERMS, GPU_TERMS, HOST_TERMS, TERMS, network_terms, step_terms


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


def combine(terms: dict[str, float], factors: dict[str, float], network: dict[str, float] | None = None,
            overlap: bool = False) -> Prediction:
    """The step from unfitted ``terms`` and the fit's ``factors`` (a missing factor counts 0), with
    what links between nodes add (``network``, none by default) for a run whose data-parallel
    reduction is overlapped or not (``overlap``)."""
    fitted = {name: terms[name] * factors.get(name, 0.0) for name in TERMS}
    if network and any(network.values()):
        fitted["pp_net"] = network["pp_net"]
        fitted["dp_net"] = network["dp_net"] * (factors.get("dp_overlap", 0.0) if overlap else 1.0)
        gpu_terms, after_terms = (*GPU_TERMS, "pp_net"), (*AFTER_TERMS, "dp_net")
    else:
        gpu_terms, after_terms = GPU_TERMS, AFTER_TERMS
    gpu = sum(fitted[name] for name in gpu_terms)
    host = sum(fitted[name] for name in HOST_TERMS)
    bound = host > gpu
    parts = {name: fitted[name] for name in (HOST_TERMS if bound else gpu_terms) + after_terms}
    return Prediction(max(gpu, host) + sum(fitted[name] for name in after_terms), parts, bound)


def predict(case: Case, perf: Performance, factors: dict[str, float]) -> Prediction:
    """The expected step of ``case`` on the accelerator ``perf`` measured, with ``factors``."""
    return combine(step_terms(case, perf), factors, network_terms(case, perf), case.overlap)
