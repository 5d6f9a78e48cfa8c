"""The step time of a case: its terms times the fit's factors, ``overlapped(gpu, host) + after``.

The host launches a micro-batch's kernels while the GPU runs earlier ones, so the two overlap,
but not wholly: in the profiles of one-GPU runs the GPU waits for the host in a share of the step
that grows as the host's time nears the GPU's, before it exceeds it (with Transformer Engine at
micro-batch 8 x 4, 125m's kernels ran 188 ms of a 260 ms step, 2.7b's 2,085 ms of 2,108 ms),
where ``max(gpu, host)`` would have the GPU wait only past that point. So the two combine as a
p-norm, ``(gpu^p + host^p)^(1/p)``: ``max`` as p grows, their sum at p = 1. :data:`OVERLAP_P` is
the p of the least loss of the fit on the records of 2026-11-29 among 1.25 to 6 (3.19 at 3, 3.26
at 2, 3.23 at 4, 3.69 for ``max``). The p-norm is homogeneous of degree one, so the step is each
term times its side's weight ``d step / d side`` (:func:`overlapped`), which the fit uses
(:mod:`bench.planning.predict.fit`).

A run over nodes adds what the links between them cost (``pp_net``, ``dp_net``:
:func:`bench.planning.predict.terms.network_terms`) at face value, as no record crosses nodes to fit
them on: the pipeline sends' to the GPU's stream, the data-parallel collectives' once a step, where
the backward pass overlaps them (``--overlap-grad-reduce``) in the share of them the fit leaves
exposed inside a node (the ``dp_overlap`` factor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from bench.planning.predict.case import Case
from bench.planning.predict.facts import Performance
from bench.planning.predict.terms import AFTER_TERMS, GPU_TERMS, HOST_TERMS, TERMS, network_terms, step_terms

OVERLAP_P = 3.0


class Overlap(NamedTuple):
    """``seconds`` of the GPU's stream and the host's launches together; ``gpu`` and ``host``:
    the weight of each in them (``seconds == gpu * gpu_s + host * host_s``)."""

    seconds: float
    gpu: float
    host: float


def overlapped(gpu_s: float, host_s: float) -> Overlap:
    """``(gpu_s^p + host_s^p)^(1/p)`` at p = :data:`OVERLAP_P` and each side's weight in it (both 1
    where both are 0)."""
    p = OVERLAP_P
    top = max(gpu_s, host_s)
    if top <= 0:
        return Overlap(0.0, 1.0, 1.0)
    g, h = gpu_s / top, host_s / top  # scaled: no overflow at large p
    norm = (g ** p + h ** p) ** (1 / p)
    return Overlap(top * norm, (g / norm) ** (p - 1), (h / norm) ** (p - 1))


@dataclass(frozen=True)
class Prediction:
    """``step_s``: the expected step in seconds; ``parts``: each term's share of it in seconds
    (its fitted seconds times its side's weight in :func:`overlapped`), adding up to the step;
    ``host_bound``: the host's launches take longer than the GPU's stream."""

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
    both = overlapped(gpu, host)
    parts = ({name: fitted[name] * both.gpu for name in gpu_terms}
             | {name: fitted[name] * both.host for name in HOST_TERMS}
             | {name: fitted[name] for name in after_terms})
    return Prediction(both.seconds + sum(fitted[name] for name in after_terms), parts, host > gpu)


def predict(case: Case, perf: Performance, factors: dict[str, float]) -> Prediction:
    """The expected step of ``case`` on the accelerator ``perf`` measured, with ``factors``."""
    return combine(step_terms(case, perf), factors, network_terms(case, perf), case.overlap)
