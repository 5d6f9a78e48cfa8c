"""What a plan should do: the step-time model asked of one resolved plan.

A :class:`StepModel` is the stored fit and every accelerator's measured ceilings, loaded once before
planning (:func:`load_step_model`), as the platforms' accelerators are; the planner reads no files.
:func:`expectation` gives a plan's :class:`Expectation` (the expected TFLOP/s/GPU, the error band
of the validation, the terms of the step) or says why there is none: an engine outside the model,
an accelerator without ceilings, a GPU not known. An expectation beyond what the fit saw (more GPUs
than its records, a run over nodes, priced over the platform's links between nodes where its file
gives them) says so, and one on a card whose ceilings are datasheet and published figures, not the
kit's measurements, says so beside its band. An engine the model is not fitted on but prices as
megatron-core's local layers (Megatron-DeepSpeed at ZeRO 0-2) quotes the band its own records gave
that pricing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.config.network import Network
from bench.config.platforms import load_accelerator
from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.measure.flops import flops_per_iteration
from bench.planning.layout import Layout
from bench.planning.predict.case import case_of
from bench.planning.predict.facts import PERFORMANCE_DIR, Performance, load_all
from bench.planning.predict.fit import BAND_PREFIX, FIT_FILE, HOST_BOUND, kind_of, load_stored
from bench.planning.predict.model import predict

BELOW = 0.15  # a run this far below its expectation is flagged (the run summary, the results page)


@dataclass(frozen=True, eq=False)
class StepModel:
    """The fit's factors, the measured ceilings by accelerator name, the validation's figures
    (``median`` and ``p90`` leave-one-out errors, ``gpus`` the most GPUs of a record fitted on)
    and each measured accelerator's dense peaks (TFLOP/s by peak format, from its accelerator
    file), which no expectation exceeds."""

    factors: dict[str, float]
    performance: dict[str, Performance]
    validation: dict[str, float]
    peaks: dict[str, dict[str, float]]


@functools.cache  # read once per command, however many runs it plans
def load_step_model(fit_file: Path = FIT_FILE, folder: Path = PERFORMANCE_DIR) -> StepModel:
    factors, validation = load_stored(fit_file)
    performance = load_all(folder)
    peaks = {name: dict(load_accelerator(name).peak_tflops) for name in performance}
    return StepModel(factors, performance, validation, peaks)


@dataclass(frozen=True)
class Expectation:
    """``tflops_per_gpu``: the expected throughput (causal count, as records measure it);
    ``step_s`` its step; ``band``: the validation's 90th-percentile error over the records of its
    precision and kind (priced GPU-bound or host-bound; :func:`band_for`); ``parts``: (term,
    seconds) of the step, largest first; ``dominant``: the terms that make at least half of it;
    ``beyond``: where the plan lies outside what the fit saw; ``basis``: where the ceilings and
    the band come from, where not the kit's own measurements ("" by default); ``priced_as``: what
    an engine the model is not fitted on is priced as ("" for the engines it is fitted on)."""

    tflops_per_gpu: float
    step_s: float
    band: float
    parts: tuple[tuple[str, float], ...]
    dominant: tuple[str, ...]
    beyond: tuple[str, ...] = ()
    basis: str = ""
    priced_as: str = ""

    @property
    def largest(self) -> str:
        return self.parts[0][0]

    def share(self, term: str) -> float:
        return dict(self.parts)[term] / self.step_s

    def text(self) -> str:
        """``expected: X TFLOP/s/GPU (±Y %)`` (and where its figures come from, where not the kit's
        measurements), the dominant terms' shares of the step, what is beyond the fit."""
        terms = ", ".join(f"{name} {100 * self.share(name):.0f} %" for name in self.dominant)
        beyond = f"; beyond the fit's records: {'; '.join(self.beyond)}" if self.beyond else ""
        basis = f"; {self.basis}" if self.basis else ""
        return (f"expected: {self.tflops_per_gpu:.0f} TFLOP/s/GPU (±{100 * self.band:.0f} %{basis}), "
                f"step {self.step_s:.2f} s: {terms} (bench/planning/predict){beyond}")


@dataclass(frozen=True)
class Asked:
    """What the model is asked of a plan beside its layout: the accelerator's name (None: not
    known), the engine, whether it is modelled, the preset, precision, layers, the rank's argv,
    the optimizer states setting, the nodes the run spans and whether it runs CUDA graphs (the
    ``--cuda-graphs`` setting); the platform's name, its GPUs per node and the links between its
    nodes (its ``[network]``; None where its file gives none); ``as_core``: an engine the model is
    not fitted on, priced as megatron-core's local layers (Megatron-DeepSpeed at ZeRO 0-2 without
    offload: :attr:`bench.planning.engines.base.Engine.priced_as_core`)."""

    accelerator: str | None
    engine: str
    modelled: bool
    preset: Preset
    precision: Precision
    implementation: str | None
    argv: tuple[str, ...]
    optimizer_states: str
    nodes: int
    graphs: bool = False
    platform: str = ""
    node_gpus: int = 0
    network: Network | None = None
    as_core: bool = False


def why_not(model: StepModel, asked: Asked) -> str:
    """Why the model gives no expectation of this plan; "" where it gives one."""
    reasons = []
    if asked.accelerator is None:
        reasons.append("the GPU is not known, so neither are its measured ceilings")
    elif asked.accelerator not in model.performance:
        reasons.append(f"{asked.accelerator} has no GEMM, memory and NCCL figures in "
                       "platforms/performance/ and no record to fit on: measure them with "
                       "python -m bench.train.smoke and add its file")
    if not (asked.modelled or asked.as_core):
        reasons.append(f"the {asked.engine} engine is outside the model at ZeRO-3 and with "
                       "ZeRO-Offload: their gathers of each layer's parameters and the optimizer "
                       "step on the CPU have no terms (ZeRO 0-2 is priced as megatron-core's local "
                       "layers)")
    return "; ".join(reasons)


def expect(model: StepModel, asked: Asked, layout: Layout) -> Expectation:
    """The expectation of a plan the model covers (:func:`why_not` gave "")."""
    assert asked.accelerator is not None
    # Another layout of the same plan (a refusal's, a sweep's) may span another number of nodes.
    nodes = -(-layout.gpus // asked.node_gpus) if asked.node_gpus else asked.nodes
    network = asked.network if nodes > 1 else None
    case = case_of(asked.accelerator, asked.preset, layout, asked.precision, asked.implementation,
                   asked.argv, asked.optimizer_states, asked.graphs, asked.node_gpus, network)
    perf = model.performance[asked.accelerator]
    found = predict(case, perf, model.factors)
    flops = flops_per_iteration(asked.preset, layout.global_batch)
    parts = tuple(sorted(((n, s) for n, s in found.parts.items() if s > 0), key=lambda p: -p[1]))
    seen = int(model.validation["gpus"])
    beyond = ([f"{layout.gpus} GPUs, the records up to {seen}"] if layout.gpus > seen else []) + (
        [_between_nodes(asked, nodes)] if nodes > 1 else [])
    step_s = found.step_s
    # The terms are fitted factors times ceilings, so an extrapolation can outrun the card itself;
    # a step never beats the card's dense peak for the precision (its accelerator file's figure).
    peak = model.peaks.get(asked.accelerator, {}).get(asked.precision.peak)
    if peak is not None and flops / step_s / layout.gpus / 1e12 > peak:
        beyond.append(f"the terms gave {flops / step_s / layout.gpus / 1e12:.0f} TFLOP/s/GPU, above "
                      f"the dense {asked.precision.peak} peak of {peak:.0f}: held at the peak")
        step_s = flops / layout.gpus / (peak * 1e12)
    band, whose = (_as_core(model, asked.engine) if asked.as_core
                   else band_for(model.validation, asked.precision.name, found.host_bound))
    basis = "; ".join(b for b in (whose, "" if perf.measured else
                                  _unmeasured(model, asked.accelerator, perf.figures)) if b)
    return Expectation(flops / step_s / layout.gpus / 1e12, step_s, band, parts, found.dominant,
                       tuple(beyond), basis, AS_CORE if asked.as_core else "")


AS_CORE = "megatron-core's local layers"


def _as_core(model: StepModel, engine: str) -> tuple[float, str]:
    """(the band, its note) of an engine priced as megatron-core's local layers: how far its own
    records, never fitted on, ran from that pricing at the refit (``python -m bench predict
    --validate``'s line for it), or the fit's band where the refit had none of them."""
    checked = model.validation
    if "core_priced_p90" not in checked:
        return checked["p90"], f"{engine} priced as {AS_CORE}, not checked against its records"
    return checked["core_priced_p90"], (
        f"{engine} priced as {AS_CORE}, never fitted on its records: "
        f"{checked['core_priced_records']:.0f} of them {100 * checked['core_priced_median']:.0f} % "
        f"off at the median, {100 * checked['core_priced_slower']:.0f} % of them slower than priced")


def band_for(checked: dict[str, float], precision: str, host_bound: bool) -> tuple[float, str]:
    """(the band, its note) of a step of ``precision`` the fit prices host-bound or GPU-bound: the
    90th-percentile group-held-out error at the refit of the records of that precision and kind,
    else of that precision, else of that kind (host-bound steps erred about twice as far as
    GPU-bound ones: hosts differ), else of all records (a fit stored before the bands)."""
    kind = kind_of(host_bound)
    for key, note in ((f"{precision} {kind}", ""), (precision, f"the band of {precision}'s records"),
                      (kind, "")):
        if f"{BAND_PREFIX}{key}" in checked:
            words = "; ".join(w for w in (note, HOST_BOUND if host_bound else "") if w)
            return checked[f"{BAND_PREFIX}{key}"], words
    return checked["p90"], ""


def _between_nodes(asked: Asked, nodes: int) -> str:
    """What the expectation of a run over ``nodes`` nodes prices the links between them with."""
    if asked.network is None:
        return f"{nodes} nodes: links between nodes are not modelled (counted as NVLink)"
    net = asked.network
    kind = net.source.split(":", 1)[0]
    return (f"{nodes} nodes: links between nodes priced as {net.name}, {net.nics} x {net.gbits:g} Gb/s "
            f"per node ({kind} figures, platforms/{asked.platform}.toml [network])")


def _unmeasured(model: StepModel, accelerator: str, figures: str) -> str:
    """The band's note on a card the kit has not measured: where its ceilings come from and which
    cards' records the factors were fitted on."""
    fitted = "/".join(sorted(name.split("-")[0].upper() for name, perf in model.performance.items()
                             if perf.measured))
    return (f"the factors fitted on {fitted} records only; {accelerator}'s ceilings are {figures} "
            f"figures, not measured by the kit: platforms/performance/{accelerator}.toml")


# Context parallelism's ring exchange of keys and values has no term, and one record (1.3b cp2 at
# sequence 8192) cannot fit one: fitted in, it moved the 1-2 -> 4 GPU error from 10.6 to 14.7 %.
UNMODELLED_CP = ("context parallelism is outside the model: its exchange of keys and values "
                 "has no term")


def expectation(model: StepModel | None, asked: Asked, layout: Layout
                ) -> tuple[Expectation | None, str]:
    """(the plan's expectation, why there is none): (None, "") where no model was loaded."""
    if model is None:
        return None, ""
    reason = "; ".join(r for r in (why_not(model, asked), UNMODELLED_CP if layout.cp > 1 else "") if r)
    return (None, reason) if reason else (expect(model, asked, layout), "")


def rate(model: StepModel | None, asked: Asked) -> Callable[[Layout], float] | None:
    """Expected TFLOP/s/GPU of another layout of the same plan (the refusal's nearest layouts are
    ordered by it); None where the model gives none."""
    if model is None or why_not(model, asked) or asked.as_core:  # a proxy orders no layouts
        return None
    return lambda layout: expect(model, asked, layout).tflops_per_gpu


def expected_line(expected: Expectation | None, none_why: str) -> str:
    """The line a dry run shows: the expectation, or why there is none ("" where neither)."""
    if expected is not None:
        return expected.text()
    return f"expected: none; {none_why}" if none_why else ""
