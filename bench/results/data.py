"""Published figures and reference ranges: TOML data files loaded into typed, frozen rows.

``results/published.toml``: ``[source.<id>]`` tables (title, link, date) and ``[[row]]`` entries,
each naming its source. ``results/reference_ranges.toml``: ``[[range]]`` entries. Errors name the
file, the entry and the key.

FLOPs conventions (``flops_convention``), how a figure's TFLOP/s were counted:

- ``megatron-causal``: Megatron-Core >= 0.12, causal attention counted once (this kit's records);
- ``megatron-noncausal``: Megatron <= 0.11, NeMo, dgxc (full s x s attention counted);
- ``narayanan-recompute``: Narayanan et al. 2021 ``96 B s l h^2 (...)``, counts activation
  recompute (Megatron-DeepSpeed's throughput printout with checkpointing);
- ``unstated``: the source does not say.
"""

import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from bench.planning.layout import LayoutSpec, parse_layout_name

FLOPS_CONVENTIONS = ("megatron-causal", "megatron-noncausal", "narayanan-recompute", "unstated")

# Short labels for table cells; the legend under the tables spells them out.
CONVENTION_LABELS = {
    "megatron-causal": "causal",
    "megatron-noncausal": "non-causal",
    "narayanan-recompute": "recompute",
    "unstated": "unstated",
}


@dataclass(frozen=True)
class Source:
    """Where published figures come from: ``date`` is the publication date (YYYY[-MM[-DD]]);
    ``link`` is None for a source without a public address (shown as its title only)."""

    id: str
    title: str
    date: str
    link: str | None = None


@dataclass(frozen=True)
class PublishedRow:
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
    flops_convention: str
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


@dataclass(frozen=True)
class Published:
    """The contents of ``published.toml``: sources by id and rows in file order."""

    sources: Mapping[str, Source]
    rows: tuple[PublishedRow, ...]


@dataclass(frozen=True)
class ReferenceRange:
    """Expected causal TFLOP/s/GPU for measured rows it matches, within ``tolerance`` (relative).

    ``platform`` and ``model`` (preset name) must match; ``accelerator`` (the record's
    ``platform.accelerator``), ``layout``, ``precision``, ``engine``, ``micro_batch``,
    ``global_batch``, ``gpus`` and ``notes`` (a subset of the record's notes) narrow the match when
    given; a run with an A/B setting (``bench.planning.tuning``) matches only a range whose notes name it.
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
    notes: Mapping[str, Any] | None = None
    layers: str | None = None  # TE+apex, TE or no TE (the default): bench.config.capabilities.layers_of

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


def _type_ok(value: Any, annotation: Any) -> bool:
    """Whether a TOML value fits a field annotation (str, int, float, bool, Mapping, X | None)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None:
        return isinstance(value, origin)
    return isinstance(value, annotation)


def _build(cls: type, data: Any, where: str) -> Any:
    """Instantiate ``cls`` from a TOML table, rejecting unknown keys, missing keys, wrong types."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a table, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    values: dict[str, Any] = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING:
                raise ValueError(f"{where}: missing key {name!r}")
            continue
        if not _type_ok(data[name], f.type):
            raise ValueError(f"{where}: key {name!r} must be {f.type}, got {data[name]!r}")
        values[name] = float(data[name]) if f.type in (float, float | None) else data[name]
    return cls(**values)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML ({error})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def load_published(path: Path | str) -> Published:
    """Load ``published.toml``; raises ValueError naming the file, entry and key."""
    path = Path(path)
    data = _read_toml(path)
    unknown = sorted(set(data) - {"source", "row"})
    if unknown:
        raise ValueError(f"{path}: unknown top-level key(s) {', '.join(unknown)} (source, row)")
    sources = {
        key: _build(Source, {"id": key, **table}, f"{path}: [source.{key}]")
        for key, table in data.get("source", {}).items()
    }
    rows = []
    for index, table in enumerate(data.get("row", [])):
        where = f"{path}: [[row]] #{index + 1}"
        row = _build(PublishedRow, table, where)
        if row.source not in sources:
            raise ValueError(f"{where}: source {row.source!r} is not a [source.<id>] table")
        if row.flops_convention not in FLOPS_CONVENTIONS:
            raise ValueError(f"{where}: flops_convention {row.flops_convention!r} is not one of "
                             f"{', '.join(FLOPS_CONVENTIONS)}")
        rows.append(row)
    return Published(types.MappingProxyType(sources), tuple(rows))


def load_ranges(path: Path | str) -> tuple[ReferenceRange, ...]:
    """Load ``reference_ranges.toml``; raises ValueError naming the file, entry and key."""
    path = Path(path)
    data = _read_toml(path)
    unknown = sorted(set(data) - {"range"})
    if unknown:
        raise ValueError(f"{path}: unknown top-level key(s) {', '.join(unknown)} (range)")
    ranges = []
    for index, table in enumerate(data.get("range", [])):
        where = f"{path}: [[range]] #{index + 1}"
        entry = _build(ReferenceRange, table, where)
        if entry.tflops_per_gpu <= 0 or not 0 < entry.tolerance < 1:
            raise ValueError(f"{where}: need tflops_per_gpu > 0 and 0 < tolerance < 1 "
                             "(a fraction, 0.1 = 10 %), "
                             f"got {entry.tflops_per_gpu}, {entry.tolerance}")
        if entry.layout is not None:
            try:
                parse_layout_name(entry.layout)
            except ValueError as error:
                raise ValueError(f"{where}: key 'layout': {error}") from None
        ranges.append(entry)
    return tuple(ranges)
