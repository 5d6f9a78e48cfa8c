"""How the results page names a run: its model, engine and the layers' builder, its settings away
from the kit's defaults, its data, and the titles of the groups a section sets side by side.

Every section names a run with these words, so that one run reads alike in every table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from bench.config.environment import VERSION_STAMPS
from bench.records.record import Record
from bench.results.hardware import hardware_name

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmbt])$")
_SIZE_FACTOR = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# A record's implementation as the page names it (reference ranges name it so too).
LAYERS = {"te+apex": "TE+apex", "te": "TE", "local": "no TE", None: ""}
# MS-AMP's FP8 linears are the kit's own (implementation ``local``); with ``--msamp-modules te``
# the layer norms and core attention around them are Transformer Engine's: not "no TE".
TE_MODULES = "TE modules"
CAP_KEY = "gpu_memory_cap_gb"  # the variant key of --gpu-memory-cap (bench.planning.tuning)
# Kit changes after which a variant runs other code, as (variant key, value, the new code's first
# start time, the setting a run started before it shows): the tables then do not pool the two.
CODE_CHANGES = (
    # Kit 74d8988: PaperAdamW steps with its Triton kernel, where it had a chunked torch step.
    ("optimizer_states", "paper-kit", "2026-11-26T11:27:50Z", ("paper_adam", "chunked")),
)


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
    the engine has no choice (the record's ``implementation``); ``TE modules`` for MS-AMP's
    linears among Transformer Engine's modules (variant ``msamp_modules=te``)."""
    if run.implementation == "local" and run.variant.get("msamp_modules") == "te":
        return TE_MODULES
    return LAYERS[run.implementation]


def engine_words(run: Record) -> str:
    """The engine with what built its layers: ``megatron (TE)``."""
    built_by = layers(run)
    return f"{run.engine} ({built_by})" if built_by else run.engine


def variant(settings: Mapping[str, object]) -> str:
    """Settings as ``key=value, ...`` in key order (booleans lower-case)."""
    return ", ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}"
                     for key, value in sorted(settings.items()))


def settings(run: Record) -> dict[str, object]:
    """What ran away from the kit's defaults: the record's variant, the apex version where the
    training Python had NVIDIA apex (Megatron-DeepSpeed then uses its kernels: other code), and
    the older code of a :data:`CODE_CHANGES` entry where the run started before that change."""
    apex = run.engine_notes.get("apex")
    older = dict(setting for key, value, since, setting in CODE_CHANGES
                 if run.variant.get(key) == value and run.started_at < since)
    # Records from before VERSION_STAMPS was kept out of variants carry them: not a setting.
    chosen = {key: value for key, value in run.variant.items()
              if key.removeprefix("env:") not in VERSION_STAMPS}
    return {**chosen, **({"apex": apex} if apex is not None else {}), **older}


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
    """The variant text of a run's row: its settings, its patch series, and ``data=real`` for a
    run on a tokenized corpus rather than the engine's mock data, which the kit's throughput rows
    otherwise use."""
    return ", ".join(filter(None, (variant(settings(run)), _patches(run),
                                   "data=real" if real_data(run) else "")))


def hardware_words(run: Record) -> str:
    """The GPU model a run ran on, with the cap it ran under: ``NVIDIA H200 SXM 141GB capped at
    80 GB`` (a capped run never stands for the larger GPU's best)."""
    cap = run.variant.get(CAP_KEY)
    name = hardware_name(run.platform.accelerator)
    return f"{name} capped at {cap} GB" if cap is not None else name


def group_title(run: Record, *details: str, head: str = "") -> str:
    """A group's title in a section: ``head`` (the model and layout unless given), ``details``,
    the GPU model (with its cap) and the data, as in ``13B tp2, global batch 32, NVIDIA H200 SXM
    141GB, mock data``."""
    return ", ".join((head or f"{model_name(run)} {run.layout.name}", *details,
                      hardware_words(run), data_words(run)))
