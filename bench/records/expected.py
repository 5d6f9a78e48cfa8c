"""What the step-time model expected of a run when it was planned, kept beside what it measured.

A record's ``expected`` (null in records made before it, and where the model expects nothing: an
engine outside it, an accelerator without measured ceilings) holds the expected TFLOP/s/GPU, its
step, the validation's error band and the step's terms; :func:`shortfall` flags a run more than
15 % below it (``bench.planning.predict.expect.BELOW``) and names the largest term. An engine the
model is not fitted on but prices as another's (``priced_as``: Megatron-DeepSpeed as megatron-core's
local layers) is flagged only beyond its band, which its own records gave that pricing.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bench.config.schema import Positive, Strict
from bench.planning.predict.expect import BELOW, Expectation
from bench.planning.predict.terms import HOST_TERMS

Band = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Term = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=40)]


class Expected(Strict):
    """``tflops_per_gpu``: expected, counted as ``metrics.tflops_per_gpu`` is; ``step_time_s``
    its step; ``band``: the validation's 90th-percentile error (0.21 is ±21 %); ``terms``: seconds
    of each term of the step the model found, largest first (``docs/running.md``); ``priced_as``:
    what the run's engine was priced as, where the model is not fitted on it (null otherwise, and
    in records made before it)."""

    tflops_per_gpu: Positive
    step_time_s: Positive
    band: Band
    terms: dict[Term, Positive] = Field(min_length=1)
    priced_as: str | None = Field(default=None, max_length=80)

    @property
    def largest(self) -> str:
        return max(self.terms, key=lambda name: self.terms[name])


def expected_of(expectation: Expectation | None) -> Expected | None:
    """The record's field of a plan's expectation."""
    if expectation is None:
        return None
    return Expected(tflops_per_gpu=round(expectation.tflops_per_gpu, 3),
                    step_time_s=round(expectation.step_s, 6), band=round(expectation.band, 4),
                    terms={name: round(s, 6) for name, s in expectation.parts if round(s, 6) > 0},
                    priced_as=expectation.priced_as or None)


def shortfall(expected: Expected | None, measured_tflops: float | None, host_op_us: float | None = None) -> str:
    """"" unless the measured TFLOP/s/GPU is more than 15 % below the expectation (more than its band,
    where wider, for an engine priced as another's); then the words that say by how much and the
    largest term of the expected step. Where that term is the host's,
    the words say the host's pace decides, with ``host_op_us`` (the run's ``conditions``) where
    measured: hosts of one machine kind launched kernels 1.45x apart (docs/running.md)."""
    if expected is None or measured_tflops is None:
        return ""
    below = 1 - measured_tflops / expected.tflops_per_gpu
    if below <= (max(BELOW, expected.band) if expected.priced_as else BELOW):
        return ""
    host = ""
    if expected.largest in HOST_TERMS:
        pace = "" if host_op_us is None else f", here {host_op_us:.2f} us a torch op"
        host = f"; a host-bound step goes at its host's pace{pace}"
    proxy = f", priced as {expected.priced_as}, beyond its ±{100 * expected.band:.0f} %" if expected.priced_as else ""
    return (f"{100 * below:.0f} % below its expected {expected.tflops_per_gpu:.0f} TFLOP/s/GPU{proxy} "
            f"(largest term: {expected.largest}{host})")
