"""How the results page names a run: its model, engine and the layers' builder, its settings away
from the kit's defaults, its data, and the titles of the groups a section sets side by side.

Every section names a run with these words, so that one run reads alike in every table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from bench.config.precisions import PRECISIONS
from bench.config.run_options import variant_key
from bench.records import identity
from bench.records.identity import CAP_KEY
from bench.records.record import Record
from bench.results.hardware import accelerator_of, hardware_name

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmbt])$")
_SIZE_FACTOR = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# A record's implementation as the page names it (reference ranges name it so too).
LAYERS = {"te+apex": "TE+apex", "te": "TE", "local": "no TE", None: ""}
# MS-AMP's FP8 linears are the kit's own (implementation ``local``); with ``--msamp-modules te``
# the layer norms and core attention around them are Transformer Engine's: not "no TE".
TE_MODULES = "TE modules"
# Transformer Engine without apex whose own layers accumulated their weight gradients into main_grad
# (the kit at fa1e3a2, withdrawn as slower): its argv chose the layers but lacks the flag every
# other such run's has.
TE_FUSED_WGRAD = "TE, wgrad fused"
NO_WGRAD_FUSION = "--no-gradient-accumulation-fusion"
FP8_ATTENTION_FLAG = "--kit-fp8-attention"  # the training entry's (bench/train/pretrain_gpt.py)
# megatron-core's local layers chosen (``--layers local``) where Transformer Engine is installed,
# as the record's provenance says: the optimizer is TE's FusedAdam there, torch's without TE, so
# it is another configuration. Records made before the kit recorded TE's version stay "no TE",
# though some of them ran beside an installed TE: their kept logs tell (without TE, megatron-core
# warns "Transformer Engine and Apex are not installed"), their records do not.
LOCAL_BESIDE_TE = "local, TE installed"
# megatron-core's local layers with apex's extensions (fused layer norm, masked softmax, wgrad
# accumulation), as Megatron-LM trained before Transformer Engine: the argv lacks the flags the kit
# adds without them (bench.config.capabilities.megatron_flags).
WITH_APEX = ", apex"
STATES_KEY, DROPOUT_KEY = variant_key("optimizer_states"), variant_key("dropout")
MODULES_KEY = variant_key("msamp_modules")


def model_sort_key(name: str) -> tuple[float, str]:
    """Order model names by parameter count ("125m" < "1.3b" < "13b"); others last by name."""
    match = _SIZE.match(name.lower())
    size = float(match[1]) * _SIZE_FACTOR[match[2]] if match else math.inf
    return size, name


def display_name(model: str) -> str:
    """``13b`` -> ``13B``, ``125m`` -> ``125M``; other names unchanged."""
    return model[:-1] + model[-1].upper() if _SIZE.match(model) else model


def model_name(run: Record) -> str:
    """The run's preset as the page names it (``13B``)."""
    return display_name(run.preset.name.lower())


def layers(run: Record) -> str:
    """What built a run's layers as the page names it: ``TE+apex``, ``TE``, ``no TE``; "" where
    the engine has no choice (the record's ``implementation``); ``local, TE installed``
    (:data:`LOCAL_BESIDE_TE`) for local layers where the record names a TE version; ``TE modules`` for MS-AMP's
    linears among Transformer Engine's modules (variant ``msamp_modules=te``); ``TE, wgrad fused``
    for Transformer Engine without apex with gradient accumulation fusion (:data:`TE_FUSED_WGRAD`);
    local layers built with apex's extensions add ``, apex`` (:data:`WITH_APEX`)."""
    if run.implementation == "local" and run.variant.get(MODULES_KEY) == "te":
        return TE_MODULES
    if run.implementation == "te" and "--transformer-impl" in run.argv and NO_WGRAD_FUSION not in run.argv:
        return TE_FUSED_WGRAD
    if run.implementation != "local":
        return LAYERS[run.implementation]
    built_by = LOCAL_BESIDE_TE if run.provenance.transformer_engine is not None else LAYERS["local"]
    local_argv = "--transformer-impl" in run.argv
    return built_by + WITH_APEX if local_argv and NO_WGRAD_FUSION not in run.argv else built_by


def engine_words(run: Record) -> str:
    """The engine with what built its layers: ``megatron (TE)``."""
    built_by = layers(run)
    return f"{run.engine} ({built_by})" if built_by else run.engine


def variant(settings: Mapping[str, object]) -> str:
    """Settings as ``key=value, ...`` in key order (booleans lower-case)."""
    return ", ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}"
                     for key, value in sorted(settings.items()))


def settings(run: Record) -> dict[str, object]:
    """What ran away from the kit's defaults: the record's variant (with the older code a run
    ran, ``paper_adam``, :data:`bench.records.migrate.CODE_CHANGES`) and the apex version where
    the training Python had NVIDIA apex (Megatron-DeepSpeed then uses its kernels: other code)."""
    apex = run.engine_notes.get("apex")
    return {**identity.settings(run), **({"apex": apex} if apex is not None else {})}


def recipe(run: Record) -> str:
    """The ways a run changes the training math, not only its speed, in words (``MS-AMP o2``,
    ``fp4``, ``optimizer states paper-kit``, ``dropout 0``, ``FP8 attention``), "" for none: such a
    run is a recipe row of its own, never the plain precision's. Dropout is the ``dropout``
    setting, read from the flags of a record made before it was one
    (:func:`bench.records.identity.typed_settings`). Attention in FP8 (the entry's
    ``--kit-fp8-attention``) quantizes the softmax's inputs and outputs too: at 1.3b its loss
    jumped to 12.0 and 11.0 mid-run where the same key without it fell smoothly
    (docs/reports/2026-11-30-h200-host-side.md)."""
    chosen = identity.settings(run)
    states = chosen.get(STATES_KEY)
    return ", ".join(filter(None, (
        _precision_recipe(run.precision),
        f"optimizer states {states}" if states not in (None, "default") else "",
        "dropout 0" if chosen.get(DROPOUT_KEY) == "0" else "",
        "FP8 attention" if FP8_ATTENTION_FLAG in run.argv else "")))


def _precision_recipe(name: str) -> str:
    """A precision whose training math is not bf16's with other number formats, in words: MS-AMP's
    modes (fp8 weights, gradients and optimizer states: ``MS-AMP o2``) and the FP4 simulation's
    weights (``fp4``) are recipes of their own; "" for the rest."""
    precision = PRECISIONS.get(name)
    if precision is None or precision.msamp_level is None:
        return ""
    return precision.name if precision.fp4_simulation else f"MS-AMP {precision.msamp_level.lower()}"


def precision_words(run: Record) -> str:
    """The precision with the run's settings: ``fp8-delayed overlap=false``."""
    return " ".join(filter(None, (run.precision, variant(settings(run)))))


def _patches(run: Record) -> str:
    """``patches=<sha256 prefix>`` of each patch series the record says the run's tree has:
    another series is other code (patches 11 and 12 moved 1.3b from 260 to 420 TFLOP/s), so its
    runs are not pooled; ``(not all applied)`` where the tree lacked part of it."""
    return ", ".join(f"patches={series.sha256[:8]}{'' if series.applied else ' (not all applied)'}"
                     for series in run.patches)


def real_data(run: Record) -> bool:
    """Whether the run trained on a tokenized corpus rather than the engine's mock data."""
    return run.data is not None and run.data.kind == "real"


def data_words(run: Record) -> str:
    """``real data`` for a run on a tokenized corpus, ``mock data`` for the engine's own, in titles."""
    return "real data" if real_data(run) else "mock data"


def variant_text(run: Record) -> str:
    """The variant text of a run's row: its settings but the memory cap (every row names its
    hardware with the cap: :func:`hardware_words`), its patch series, and ``data=real`` for a run on
    a tokenized corpus rather than the engine's mock data, which the kit's throughput rows
    otherwise use."""
    shown = {key: value for key, value in settings(run).items() if key != CAP_KEY}
    return ", ".join(filter(None, (variant(shown), _patches(run),
                                   "data=real" if real_data(run) else "")))


def hardware_words(run: Record) -> str:
    """The GPU model a run ran on, with the cap it ran under: ``NVIDIA H200 SXM 141GB capped at
    80 GB`` (a capped run never stands for the larger GPU's best)."""
    return hardware_name(run.platform.accelerator) + cap_words(run.platform.accelerator,
                                                               run.variant.get(CAP_KEY))


def cap_words(accelerator: str, cap: object) -> str:
    """`` capped at 80 GB`` for a run under ``--gpu-memory-cap``, "" for none. A cap at or above
    the card's nominal memory says that the card holds more than its name (an H100 80GB has
    81,559 MiB, 85.5 GB): `` capped at 80 GB (the card holds more than its nominal 80)``."""
    if cap is None:
        return ""
    card = accelerator_of(accelerator)
    if card is not None and float(str(cap)) >= card.memory_gb:
        return f" capped at {cap} GB (the card holds more than its nominal {card.memory_gb:g})"
    return f" capped at {cap} GB"


def group_title(run: Record, *details: str, head: str = "") -> str:
    """A group's title in a section: ``head`` (the model and layout unless given), ``details``,
    the GPU model (with its cap) and the data, as in ``13B tp2, global batch 32, NVIDIA H200 SXM
    141GB, mock data``."""
    return ", ".join((head or f"{model_name(run)} {run.layout.name}", *details,
                      hardware_words(run), data_words(run)))
