"""Published throughput rows as the step-time model sees them: a check on what it was never fitted on.

A row (``results/published.toml``, read by attribute) is *priced* where everything a case needs
is stated: a model shape (the row's own ``layers``, ``hidden``, ``heads`` and ``vocab_size`` at
its sequence, else the kit's preset of its size at that sequence), an accelerator with measured
ceilings (``platforms/performance/``), an engine the model covers (NeMo trains with
Megatron-Core), the tensor, pipeline and data-parallel degrees, micro and global batch, and a
throughput whose FLOPs count is known. Any other row is counted with why it has no expectation,
never dropped.

The measured step a row implies: ``global_batch / samples_per_s`` where it gives samples per
second, else ``global_batch x seq / (tokens_per_s_per_gpu x gpus)`` where it gives tokens per
second and GPU (neither needs a FLOPs count), else its FLOPs per iteration in its own convention
over its TFLOP/s per GPU and GPU count. Its throughput in the kit's causal count is the causal
FLOPs of that step: ``published x F_causal / F_its_convention``.

A row over more than one node names the kit's platform it ran on (``priced_on``): its GPUs per
node and the links between its nodes (the platform's ``[network]``) price the collectives that
cross them. A row over more GPUs than a node of eight that names none has no expectation: pricing
its links as NVLink would flatter it. A row's activation recompute (``recompute``) is priced as
the kit prices its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.config.platforms import Platform, load_platform
from bench.config.precisions import PRECISIONS, Precision
from bench.config.presets import Preset
from bench.measure.flops import flops_per_iteration
from bench.planning.predict.case import Case
from bench.planning.predict.facts import Performance
from bench.planning.predict.terms import TERMS, network_terms, step_terms

PRICED_ENGINES = ("megatron", "nemo")  # NeMo's GPT training is Megatron-Core's
NODE_GPUS = 8  # GPUs a row without a platform may span and still be priced as one node
SHAPE = ("layers", "hidden", "heads", "vocab_size", "seq_length")  # a row's own model shape
# FLOPs per iteration in each convention a row may state, as (causal, recompute) of the kit's count
CONVENTIONS = {"megatron-causal": (True, None), "megatron-noncausal": (False, None),
               "narayanan-recompute": (False, "full")}


@dataclass(frozen=True)
class PublishedCase:
    """One published row: ``label`` names it; where priced, its unfitted ``terms`` (TERMS order),
    the ``step_s`` its throughput implies, its TFLOP/s/GPU in the kit's causal count
    (``causal_tflops``), the FLOPs of a step at the causal count (``causal_flops``), its ``case``,
    the ``preset`` of its model and the kit's ``precision`` it is priced as; else ``why_not``;
    ``network``: what the links between nodes add (``pp_net``, ``dp_net``; none on one node)."""

    label: str
    terms: tuple[float, ...] = ()
    step_s: float = 0.0
    causal_tflops: float = 0.0
    causal_flops: float = 0.0
    gpus: int = 0
    why_not: str = ""
    network: tuple[tuple[str, float], ...] = ()
    case: Case | None = None  # the row's layout as the model sees it, where priced
    preset: Preset | None = None
    precision: Precision | None = None  # the kit's precision it is priced as


def label_of(row: Any) -> str:
    """``source model precision layout on N accelerator``, as far as the row states them."""
    degrees = "".join(f"{name}{value}" for name in ("tp", "pp", "vp", "dp")
                      if (value := getattr(row, name)) is not None)
    gpus = f" on {row.gpus}" if row.gpus else ""
    return (f"{row.source} {row.model} {row.priced_as or row.precision} "
            f"{degrees or 'layout not stated'}{gpus} {row.accelerator}")


def accelerator_name(row: Any) -> str:
    """The kit's accelerator file name of a row's accelerator (``H100 SXM`` -> ``h100-sxm``)."""
    return "-".join(row.accelerator.lower().split())


def _missing(row: Any, presets: Mapping[str, Preset], performance: Mapping[str, Performance],
             platforms: Mapping[str, Platform]) -> str:
    """What keeps ``row`` from a case ("" where nothing does)."""
    if row.priced_on is not None and row.priced_on not in platforms:
        return f"priced_on names platform {row.priced_on!r}, not one of {', '.join(sorted(platforms)) or 'none'}"
    if row.engine not in PRICED_ENGINES:
        return f"the {row.engine} engine is outside the model"
    if accelerator_name(row) not in performance:
        return f"{row.accelerator} has no measured ceilings in platforms/performance/"
    stated = [name for name in SHAPE[:4] if getattr(row, name) is not None]
    if stated and (len(stated) < 4 or row.seq_length is None):
        missing = [name for name in SHAPE if getattr(row, name) is None]
        return f"its shape is stated in part: {', '.join(missing)} not stated"
    preset = presets.get(row.model.lower())
    if not stated and (preset is None or (row.seq_length or preset.seq_length) != preset.seq_length):
        return f"no preset of {row.model} at sequence {row.seq_length}: its shape is not stated"
    unstated = [name for name in ("tp", "pp", "dp", "gpus", "micro_batch", "global_batch")
                if getattr(row, name) is None]
    if unstated:
        return f"{', '.join(unstated)} not stated"
    if row.tp * row.pp * row.dp != row.gpus:
        return f"tp {row.tp} x pp {row.pp} x dp {row.dp} is not its {row.gpus} GPUs"
    if row.priced_on is None and (row.gpus > NODE_GPUS or (row.nodes or 1) > 1):
        return (f"its {row.gpus} GPUs span nodes and it names no kit platform (priced_on) whose links "
                "between nodes would price them")
    if (row.priced_as or row.precision) not in PRECISIONS:
        return f"precision {row.priced_as or row.precision} is none the kit offers"
    if (row.samples_per_s is None and row.tokens_per_s_per_gpu is None
            and (row.tflops_per_gpu is None or row.flops_convention not in CONVENTIONS)):
        return "no samples/s or tokens/s, and its TFLOP/s count is unstated"
    return ""


def row_preset(row: Any, presets: Mapping[str, Preset]) -> Preset:
    """The model shape of a row that :func:`_missing` passes: its own where it states one (MLP
    4 x hidden, its micro and global batch), else the kit's preset of its size."""
    if row.layers is None:
        return presets[row.model.lower()]
    return Preset(name=row.model, layers=row.layers, hidden=row.hidden, heads=row.heads,
                  seq_length=row.seq_length, vocab_size=row.vocab_size, micro_batch=row.micro_batch,
                  global_batch=row.global_batch, ffn_hidden=4 * row.hidden)


def _case(row: Any, preset: Preset, accelerator: str, platform: Platform | None) -> Case:
    return Case(accelerator=accelerator, layers=preset.layers, hidden=preset.hidden, heads=preset.heads,
                seq=preset.seq_length, vocab=preset.vocab_size, tp=row.tp, pp=row.pp, dp=row.dp,
                vp=row.vp or 1, cp=row.cp or 1, sp=bool(row.sp), micro_batch=row.micro_batch,
                global_batch=row.global_batch, family=PRECISIONS[row.priced_as or row.precision].family,
                implementation="te", recompute=row.recompute, overlap=True,
                node_gpus=platform.gpus_per_node if platform is not None else 0,
                network=platform.network if platform is not None else None)


def published_case(row: Any, presets: Mapping[str, Preset], performance: Mapping[str, Performance],
                   platforms: Mapping[str, Platform] | None = None) -> PublishedCase:
    """The model's view of one published row (see the module's docstring); ``platforms``: the
    kit's platforms by name, for rows that name theirs (none by default)."""
    platforms = platforms or {}
    why = _missing(row, presets, performance, platforms)
    if why:
        return PublishedCase(label_of(row), why_not=why)
    preset, accelerator = row_preset(row, presets), accelerator_name(row)
    causal = flops_per_iteration(preset, row.global_batch)
    if row.samples_per_s is not None:
        step = row.global_batch / row.samples_per_s
    elif row.tokens_per_s_per_gpu is not None:
        step = row.global_batch * preset.seq_length / (row.tokens_per_s_per_gpu * row.gpus)
    else:
        counted, recompute = CONVENTIONS[row.flops_convention]
        stated = flops_per_iteration(preset, row.global_batch, causal=counted, recompute=recompute)
        step = stated / (row.tflops_per_gpu * 1e12 * row.gpus)
    platform = platforms[row.priced_on] if row.priced_on is not None else None
    case = _case(row, preset, accelerator, platform)
    terms = step_terms(case, performance[accelerator])
    return PublishedCase(label_of(row), tuple(terms[n] for n in TERMS), step,
                         causal / step / row.gpus / 1e12, causal, row.gpus,
                         network=tuple(network_terms(case, performance[accelerator]).items()),
                         case=case, preset=preset, precision=PRECISIONS[row.priced_as or row.precision])


def published_cases(rows: Iterable[Any], presets: Mapping[str, Preset], performance: Mapping[str, Performance],
                    platforms: Mapping[str, Platform] | None = None) -> list[PublishedCase]:
    """Every published row's :class:`PublishedCase`, in file order."""
    return [published_case(row, presets, performance, platforms) for row in rows]


def row_platforms(rows: Iterable[Any]) -> dict[str, Platform]:
    """The kit's platforms the rows name (``priced_on``), loaded, by name; a name that is no
    platform's is left out, and its row says so."""
    names = {row.priced_on for row in rows if row.priced_on is not None}
    found = {}
    for name in sorted(names):
        try:
            found[name] = load_platform(name)
        except (ValueError, OSError):  # DataError is a ValueError: the row's why_not names it
            continue
    return found
