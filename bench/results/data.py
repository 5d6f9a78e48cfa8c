"""Published figures and reference ranges: TOML data files loaded into typed, frozen rows.

``results/published.toml``: ``[source.<id>]`` tables (title, link, date), ``[[row]]`` entries
and ``[[bytes_per_parameter]]`` entries (a training state's bytes a parameter by part), each naming
its source. ``results/reference_ranges.toml``: ``[[range]]`` entries. Errors name the
file, the entry and the key.

FLOPs conventions (``flops_convention``), how a figure's TFLOP/s were counted:

- ``megatron-causal``: Megatron-Core >= 0.12, causal attention counted once (this kit's records);
- ``megatron-noncausal``: Megatron <= 0.11, NeMo, dgxc (full s x s attention counted);
- ``narayanan-recompute``: Narayanan et al. 2021 ``96 B s l h^2 (...)``, counts activation
  recompute (Megatron-DeepSpeed's throughput printout with checkpointing);
- ``unstated``: the source does not say.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from bench.config.schema import Strict, load_toml, validate
from bench.config.tomlfile import DataError
from bench.planning.layout import LayoutSpec, parse_layout_name
from bench.records.record import JsonScalar

FlopsConvention = Literal["megatron-causal", "megatron-noncausal", "narayanan-recompute", "unstated"]
FLOPS_CONVENTIONS = get_args(FlopsConvention)

# Short labels for table cells; the legend under the tables spells them out.
CONVENTION_LABELS = {
    "megatron-causal": "causal",
    "megatron-noncausal": "non-causal",
    "narayanan-recompute": "recompute",
    "unstated": "unstated",
}


class Source(Strict):
    """Where published figures come from: ``date`` is the publication date (YYYY[-MM[-DD]]);
    ``link`` is None for a source without a public address (shown as its title only)."""

    id: str
    title: str
    date: str
    link: str | None = None


class PublishedRow(Strict):
    """One published throughput figure; absent values render as ``–``.

    Units as in run records: samples/s, tokens/s per GPU, TFLOP/s per GPU, % of the dense peak
    (``percent_of_peak``, 0-100), GB.
    """

    source: str
    model: str
    platform: str
    accelerator: str
    engine: str
    precision: str
    flops_convention: FlopsConvention
    nodes: int | None = None
    gpus: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    vp: int | None = None
    cp: int | None = None
    sp: bool | None = None
    zero: int | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    seq_length: int | None = None
    samples_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    percent_of_peak: float | None = None
    peak_mem_gb: float | None = None
    note: str | None = None
    # The model's shape where the source states one the kit has no preset of (Megatron-LM's
    # weak-scaling sizes, NeMo's GPT-3 5B and 20B): layers, hidden size, attention heads and the
    # padded vocabulary; the MLP is 4 x hidden, as in every GPT-3 shape. None: the kit's preset of
    # ``model`` at ``seq_length``.
    layers: Annotated[int, Field(gt=0)] | None = None
    hidden: Annotated[int, Field(gt=0)] | None = None
    heads: Annotated[int, Field(gt=0)] | None = None
    vocab_size: Annotated[int, Field(gt=0)] | None = None
    # Activation recompute the run did ("full" or "selective", bench.config.run_options.RECOMPUTE).
    recompute: Literal["full", "selective"] | None = None
    # The kit precision the step-time model prices the row as, where the row's own words are not
    # one (``fp8`` of MS-AMP's paper: ``msamp-o2``); None: its ``precision``.
    priced_as: str | None = None
    # The kit's platform the row ran on (``azure-h100``), whose GPUs per node and links between
    # nodes the step-time model prices a row over nodes with; None: a row of up to eight GPUs is
    # priced as one node, a larger one has no expectation.
    priced_on: str | None = None


Bytes = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class PublishedBytes(Strict):
    """Bytes a parameter by part as a source gives them (``bench.train.memory_parts`` names the
    parts); a part the source does not count is absent and renders as ``–``."""

    source: str
    precision: str
    weights: Bytes | None = None
    gradients: Bytes | None = None
    master: Bytes | None = None
    moments: Bytes | None = None
    note: str | None = None


@dataclass(frozen=True)
class Published:
    """The contents of ``published.toml``: sources by id, rows and bytes-by-part entries in file order."""

    sources: Mapping[str, Source]
    rows: tuple[PublishedRow, ...]
    bytes_per_parameter: tuple[PublishedBytes, ...] = ()


class ReferenceRange(Strict):
    """Expected causal TFLOP/s/GPU for measured rows it matches, within ``tolerance`` (relative).

    ``platform`` and ``model`` (preset name) must match; ``accelerator`` (the record's
    ``platform.accelerator``), ``layout``, ``precision``, ``engine``, ``micro_batch``,
    ``global_batch``, ``gpus`` and ``variant`` (a subset of the record's variant) narrow the match
    when given; a run with an A/B setting (``bench.planning.tuning``) matches only a range whose
    variant names it.
    ``layout`` is read like a layout name (``tp1pp1dp4``, ``dp4``, ``tp2pp2``) and compared
    by its degrees with the record's layout, so ``dp4`` matches the canonical ``tp1pp1dp4``; a name
    without ``dp`` matches any data-parallel degree. A range without ``precision`` judges bf16 runs
    only, one without ``engine`` judges megatron-engine runs only, and one without ``layers``
    (``TE+apex``, ``TE`` or ``no TE``) judges runs built without Transformer Engine only, as every
    range was measured before the kit ran TE. The first matching
    range in file order applies, so list specific ranges before general ones.
    """

    platform: str
    model: str
    tflops_per_gpu: float
    tolerance: float
    source: str
    accelerator: str | None = None
    layout: str | None = None
    precision: str | None = None
    engine: str | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    gpus: int | None = None
    variant: dict[str, JsonScalar] | None = None
    layers: str | None = None  # TE+apex, TE or no TE (the default): bench.results.words.layers

    @model_validator(mode="after")
    def _sane(self) -> ReferenceRange:
        if self.tflops_per_gpu <= 0 or not 0 < self.tolerance < 1:
            raise ValueError("need tflops_per_gpu > 0 and 0 < tolerance < 1 (a fraction, 0.1 = 10 %), "
                             f"got {self.tflops_per_gpu}, {self.tolerance}")
        return self

    @cached_property
    def layout_spec(self) -> LayoutSpec | None:
        """``layout`` parsed (checked when the file is loaded); None when the range has none."""
        return None if self.layout is None else parse_layout_name(self.layout)

    @property
    def low(self) -> float:
        return self.tflops_per_gpu * (1 - self.tolerance)

    @property
    def high(self) -> float:
        return self.tflops_per_gpu * (1 + self.tolerance)


class PublishedFile(Strict):
    """``published.toml``: ``[source.<id>]`` tables and ``[[row]]`` entries (each checked alone)."""

    source: dict[str, dict[str, Any]] = {}
    row: tuple[dict[str, Any], ...] = ()
    bytes_per_parameter: tuple[dict[str, Any], ...] = ()


class RangesFile(Strict):
    """``reference_ranges.toml``: ``[[range]]`` entries (each checked alone)."""

    range: tuple[dict[str, Any], ...] = ()


def load_published(path: Path | str) -> Published:
    """Load ``published.toml``; raises DataError naming the file, entry and key."""
    path = Path(path)
    data = load_toml(path, PublishedFile)
    sources = {key: validate({"id": key, **table}, Source, f"{path}: [source.{key}]")
               for key, table in data.source.items()}
    entries: dict[str, list[Any]] = {"row": [], "bytes_per_parameter": []}
    for kind, model in (("row", PublishedRow), ("bytes_per_parameter", PublishedBytes)):
        for index, table in enumerate(getattr(data, kind)):
            where = f"{path}: [[{kind}]] #{index + 1}"
            entry = validate(table, model, where)
            if entry.source not in sources:
                raise DataError(f"{where}: source {entry.source!r} is not a [source.<id>] table")
            entries[kind].append(entry)
    return Published(types.MappingProxyType(sources), tuple(entries["row"]),
                     tuple(entries["bytes_per_parameter"]))


def load_ranges(path: Path | str) -> tuple[ReferenceRange, ...]:
    """Load ``reference_ranges.toml``; raises DataError naming the file, entry and key."""
    path = Path(path)
    ranges = []
    for index, table in enumerate(load_toml(path, RangesFile).range):
        where = f"{path}: [[range]] #{index + 1}"
        entry = validate(table, ReferenceRange, where)
        if entry.layout is not None:
            try:
                parse_layout_name(entry.layout)
            except ValueError as error:
                raise DataError(f"{where}: key 'layout': {error}") from None
        ranges.append(entry)
    return tuple(ranges)
