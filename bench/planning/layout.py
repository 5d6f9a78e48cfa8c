"""Parallel layouts: parsed from names like ``tp2pp8``, checked against a preset and a GPU count.

Grammar (order free, each part at most once): ``tp<N>`` tensor, ``pp<N>`` pipeline, ``dp<N>`` data,
``cp<N>`` context parallel, ``vp<N>`` virtual pipeline stages per rank (interleaved schedule),
``sp`` sequence parallel, ``zero1|zero2|zero3`` DeepSpeed ZeRO stage. Missing degrees are 1, except
DP, which is derived from the GPU count. Every rule Megatron enforces at start-up is checked here,
before anything is written or launched, and a refusal names the numbers and the nearest valid layouts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.config.presets import Preset

_PART = re.compile(r"(?P<dim>tp|pp|dp|cp|vp)(?P<n>\d+)|(?P<sp>sp)|zero(?P<zero>[123])")


@dataclass(frozen=True)
class Layout:
    """A validated split of one preset over ``gpus`` GPUs; batches are in sequences."""

    tp: int
    pp: int
    dp: int
    cp: int
    vp: int  # virtual pipeline stages per pipeline rank; 1 = no interleaving
    sp: bool
    zero: int | None  # DeepSpeed ZeRO stage, Megatron-DeepSpeed engine only
    micro_batch: int
    global_batch: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def name(self) -> str:
        """Canonical name, e.g. ``tp2pp4dp2`` or ``tp1pp4vp2dp1sp``."""
        name = f"tp{self.tp}pp{self.pp}"
        if self.vp > 1:
            name += f"vp{self.vp}"
        if self.cp > 1:
            name += f"cp{self.cp}"
        name += f"dp{self.dp}"
        if self.sp:
            name += "sp"
        if self.zero is not None:
            name += f"zero{self.zero}"
        return name

    @property
    def grad_accumulation(self) -> int:
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def spec(self) -> LayoutSpec:
        """The layout as asked for, DP included (planning it again needs no name round trip)."""
        return LayoutSpec(self.tp, self.pp, self.dp, self.cp, self.vp, self.sp, self.zero)


@dataclass(frozen=True)
class LayoutSpec:
    """What a layout name asks for, before the GPU count fills in DP."""

    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    vp: int = 1
    sp: bool = False
    zero: int | None = None
    typed: str = field(default="", compare=False)  # the name as the user wrote it, for errors

    def __str__(self) -> str:
        """The layout as typed; a spec built in code reads as its canonical name (``tp2pp8``)."""
        if self.typed:
            return self.typed
        parts = [f"tp{self.tp}pp{self.pp}", f"vp{self.vp}" if self.vp > 1 else "",
                 f"cp{self.cp}" if self.cp > 1 else "", f"dp{self.dp}" if self.dp else "",
                 "sp" if self.sp else "", "" if self.zero is None else f"zero{self.zero}"]
        return "".join(parts)

    @property
    def model_parallel_gpus(self) -> int:
        """GPUs of one model replica, times DP when the name gives it: the size the name asks for."""
        return self.tp * self.pp * self.cp * (self.dp or 1)


def parse_layout_name(name: str) -> LayoutSpec:
    """Parse ``tp2pp8``-style names; a ValueError says which part is not understood."""
    text = name.strip().lower()
    if not text:
        raise ValueError("empty layout; write it like tp2pp8, tp4pp2dp2 or tp1pp1")
    values: dict[str, object] = {}
    pos = 0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        key = match.group("dim") or ("sp" if match.group("sp") else "zero")
        if key in values:
            raise ValueError(f"layout '{name}': '{key}' is given twice")
        if match.group("dim"):
            number = int(match.group("n"))
            if number < 1:
                raise ValueError(f"layout '{name}': {key}{number} must be at least 1")
            values[key] = number
        elif key == "sp":
            values["sp"] = True
        else:
            values["zero"] = int(match.group("zero"))
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"layout '{name}': cannot read '{text[pos:]}'; parts are tp<N> pp<N> "
                         "dp<N> cp<N> vp<N> sp zero1|zero2|zero3, e.g. tp2pp8 or tp4pp2dp2")
    return LayoutSpec(**values, typed=name.strip())  # type: ignore[arg-type]


def _problems(spec: LayoutSpec, dp: int, preset: Preset, gpus: int, gpus_per_node: int,
              mbs: int, gbs: int) -> list[str]:
    """Every rule the layout breaks, each as a sentence with its numbers (empty when valid)."""
    tp, pp, cp, vp = spec.tp, spec.pp, spec.cp, spec.vp
    problems = []
    if tp * pp * cp * dp != gpus:
        problems.append(f"tp{tp} x pp{pp} x cp{cp} x dp{dp} = {tp * pp * cp * dp} GPUs, "
                        f"but the run has {gpus} GPUs")
    if preset.heads % tp:
        problems.append(f"{preset.name} has {preset.heads} attention heads, not divisible by "
                        f"tp{tp}")
    if preset.layers % (pp * vp):
        problems.append(f"{preset.name} has {preset.layers} layers, not divisible by "
                        f"pp{pp} x vp{vp} = {pp * vp}")
    if vp > 1 and pp < 2:
        problems.append(f"vp{vp} (interleaved pipeline) needs pp of at least 2, got pp{pp}")
    if gbs % (mbs * dp):
        problems.append(f"global batch {gbs} is not divisible by micro batch {mbs} x dp{dp} = "
                        f"{mbs * dp}")
    if tp > gpus_per_node:
        problems.append(f"tp{tp} is larger than the {gpus_per_node} GPUs of one node "
                        "(tensor parallelism must stay inside a node)")
    if spec.sp and tp < 2:
        problems.append("sp (sequence parallel) needs tensor parallelism, but tp is 1")
    if cp > 1 and preset.seq_length % (2 * cp):
        problems.append(f"sequence length {preset.seq_length} is not divisible by 2 x cp{cp}")
    if spec.zero is not None and spec.zero > 1 and pp > 1:
        problems.append(f"zero{spec.zero} shards gradients, which DeepSpeed does not combine "
                        f"with pipeline parallelism (pp{pp}); use zero1 or pp1")
    return problems


def _log2_distance(a: int, b: int) -> float:
    return abs(math.log2(a) - math.log2(b))


def valid_layouts(preset: Preset, gpus: int, gpus_per_node: int, mbs: int, gbs: int,
                  cp: int = 1, vp: int = 1, sp: bool = False,
                  zero: int | None = None) -> list[Layout]:
    """Every tp x pp x dp split of ``gpus`` that passes all checks (powers of two for tp/pp)."""
    out = []
    tp = 1
    while tp <= min(gpus, gpus_per_node):
        pp = 1
        while tp * pp * cp <= gpus:
            if gpus % (tp * pp * cp) == 0:
                dp = gpus // (tp * pp * cp)
                spec = LayoutSpec(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, sp=sp, zero=zero)
                if not _problems(spec, dp, preset, gpus, gpus_per_node, mbs, gbs):
                    out.append(Layout(tp, pp, dp, cp, vp, sp, zero, mbs, gbs))
            pp *= 2
        tp *= 2
    return out


# (vp, sp) a sweep tries over every split; valid_layouts drops those a split cannot take (sp with
# tp1, vp with pp1, layers that pp x vp does not divide).
SHAPES = ((1, False), (1, True), (2, False), (2, True))


def shaped_layouts(preset: Preset, gpus: int, gpus_per_node: int, mbs: int, gbs: int) -> list[Layout]:
    """Every valid layout of every tp x pp x dp split in each of :data:`SHAPES`, split by split."""
    found = [lay for vp, sp in SHAPES for lay in valid_layouts(preset, gpus, gpus_per_node, mbs, gbs, vp=vp, sp=sp)]
    return sorted(found, key=lambda lay: (lay.tp, lay.pp, lay.vp, lay.sp))


def nearest_layouts(spec: LayoutSpec, preset: Preset, gpus: int, gpus_per_node: int, mbs: int,
                    gbs: int, count: int = 3, fits: Callable[[Layout], bool] | None = None) -> list[Layout]:
    """Valid layouts closest to ``spec`` (tp and pp on a log scale), best first; with ``fits``
    (the run's memory check), only those it passes."""
    def candidates(**kw: object) -> list[Layout]:
        found = valid_layouts(preset, gpus, gpus_per_node, mbs, gbs, cp=spec.cp, **kw)
        return [lay for lay in found if fits(lay)] if fits else found

    found = candidates(vp=spec.vp, sp=spec.sp, zero=spec.zero) or candidates(zero=spec.zero)
    found.sort(key=lambda lay: (_log2_distance(lay.tp, spec.tp) + _log2_distance(lay.pp, spec.pp),
                                lay.tp, lay.pp))
    return found[:count]


def batch_sizes(preset: Preset, mbs: int | None, gbs: int | None) -> tuple[int, int]:
    """(micro, global) batch in sequences: the options where given, else the preset's."""
    mbs = mbs or preset.micro_batch
    gbs = gbs or preset.global_batch
    if mbs < 1 or gbs < 1:
        raise ValueError(f"micro batch ({mbs}) and global batch ({gbs}) must be at least 1")
    return mbs, gbs


def build_layout(layout: str | LayoutSpec, preset: Preset, gpus: int, gpus_per_node: int,
                 mbs: int | None = None, gbs: int | None = None, *,
                 sized_by_layout: bool = False, fits: Callable[[Layout], bool] | None = None) -> Layout:
    """Check a layout (its name or parsed spec) for ``preset`` on ``gpus`` GPUs; DP fills the GPUs
    when absent.

    ``mbs``/``gbs`` override the preset's micro and global batch (sequences). ``sized_by_layout``
    says that ``gpus`` was not asked for but derived from the layout itself (no --gpus or --nodes),
    so a refusal suggests layouts at nearby sizes rather than claim that nothing fits that count.
    ``fits``: whether a layout fits the run's GPU by the memory estimate (None, the default: not
    checked); a refusal suggests only layouts that pass it, or says that none does.
    Raises ValueError listing every broken rule with its numbers and the nearest valid layouts.
    """
    spec = parse_layout_name(layout) if isinstance(layout, str) else layout
    mbs, gbs = batch_sizes(preset, mbs, gbs)
    model_parallel = spec.tp * spec.pp * spec.cp
    dp = spec.dp if spec.dp is not None else max(1, gpus // model_parallel)
    problems = _problems(spec, dp, preset, gpus, gpus_per_node, mbs, gbs)
    if problems:
        hint = (_hint_at_nearby_sizes(spec, preset, gpus, gpus_per_node, mbs, gbs, fits) if sized_by_layout
                else _hint_at(spec, preset, gpus, gpus_per_node, mbs, gbs, fits))
        raise ValueError(f"layout '{spec}' is not possible: " + "; ".join(problems) + ". " + hint)
    return Layout(spec.tp, spec.pp, dp, spec.cp, spec.vp, spec.sp, spec.zero, mbs, gbs)


def _hint_at(spec: LayoutSpec, preset: Preset, gpus: int, gpus_per_node: int, mbs: int,
             gbs: int, fits: Callable[[Layout], bool] | None) -> str:
    near = nearest_layouts(spec, preset, gpus, gpus_per_node, mbs, gbs, fits=fits)
    if near:
        return (f"nearest valid layouts for {preset.name} on {gpus} GPUs (mbs {mbs}, gbs {gbs}): "
                + ", ".join(lay.name for lay in near))
    valid = nearest_layouts(spec, preset, gpus, gpus_per_node, mbs, gbs) if fits else []
    if valid:
        return (f"no layout of {preset.name} on {gpus} GPUs fits their memory: "
                f"{', '.join(lay.name for lay in valid)} and the other valid ones are refused by the "
                "memory estimate (bench/planning/memory.py); use more GPUs (--gpus/--nodes)")
    return (f"no layout of {preset.name} fits {gpus} GPUs with mbs {mbs}, gbs {gbs}; "
            "change --gpus/--nodes or --gbs")


# How many doublings past the layout's own size a refusal looks for layouts that fit the memory
# (a 175b layout without --nodes on 80 GB GPUs first fits at 16 nodes of 8).
MEMORY_DOUBLINGS = 10


def _hint_at_nearby_sizes(spec: LayoutSpec, preset: Preset, gpus: int, gpus_per_node: int,
                          mbs: int, gbs: int, fits: Callable[[Layout], bool] | None) -> str:
    """Valid layouts at the powers of two around the size the layout implies, each with its size;
    where none of them fits the memory (``fits``), at the next doublings that give one that does,
    up to :data:`MEMORY_DOUBLINGS` of them."""
    below = 2 ** int(math.log2(gpus))
    sizes = sorted({below, below * 2} if below != gpus else {gpus})
    near = [lay for size in sizes for lay in nearest_layouts(spec, preset, size, gpus_per_node,
                                                             mbs, gbs, count=2, fits=fits)]
    for size in (sizes[-1] * 2**k for k in range(1, MEMORY_DOUBLINGS + 1) if fits and not near):
        near = nearest_layouts(spec, preset, size, gpus_per_node, mbs, gbs, count=3, fits=fits)
    near.sort(key=lambda lay: (_log2_distance(lay.tp, spec.tp) + _log2_distance(lay.pp, spec.pp),
                               lay.gpus))
    if not near:
        valid = fits and any(nearest_layouts(spec, preset, size, gpus_per_node, mbs, gbs) for size in sizes)
        why = " within their memory (the memory estimate, bench/planning/memory.py)" if valid else ""
        return (f"no layout of {preset.name} fits {' or '.join(map(str, sizes))} GPUs{why} with mbs "
                f"{mbs}, gbs {gbs}; change --gbs, or --gpus/--nodes")
    return (f"nearest valid layouts for {preset.name} (mbs {mbs}, gbs {gbs}): "
            + ", ".join(f"{lay.name} ({lay.gpus} GPUs)" for lay in near[:3])
            + " (--gpus or --nodes sets the run's size)")
