"""PNG plots of measured rows: one figure per platform, or per platform and model where a platform
has more than :data:`MAX_BARS` rows (a figure of hundreds of bars is taller than any screen).

Left panel: TFLOP/s per GPU of every measured configuration (one bar per table row, grouped and
coloured by model, pale where the row is quick), each bar its median with its runs'
lowest–highest as an error bar and labelled with its TFLOP/s and % of peak (MFU, causal count)
and its configuration key, its reference range drawn as a black line, bars of runs from a sweep
hatched, and the GEMM ceiling the smoke check measured on the platform's GPU as a dashed vertical
line. Right panel, when a
model was measured on several GPU counts at one micro-batch and batch per GPU: tokens/s of all
GPUs against GPUs for the best row per count, with dashed ideal linear scaling from the smallest
count. A line joins like with like only: one engine, precision, micro-batch and batch per GPU
(global batch / GPUs), each named in its label.

These plots are drawn from the aggregated rows, never from raw records, so their cost does not
grow with the number of runs. Loss curves (:mod:`bench.results.losses`) draw the losses of the few
runs they compare, the same way: anything with a file name and a ``render`` method is a
:class:`Drawable`.
Drawing is the slow part of regeneration (matplotlib's import alone takes most of a second), so
every PNG carries :func:`inputs_key` of what it shows and how it is drawn in a
``bench-plot-inputs`` text chunk, and :func:`reuse_or_render` keeps an existing PNG whose key
matches instead of drawing it again: the bytes are the ones drawing would give. Output is
deterministic: Agg backend, matplotlib's default style plus fixed sizes, dpi and font, no
``Software`` chunk and no date. The bytes can differ between matplotlib, FreeType or Pillow
versions, which are part of the key.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import re
import struct
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Protocol

from bench.planning.engines.registry import ENGINES
from bench.records.headline import Grade
from bench.results.aggregate import Report, Row
from bench.results.hardware import Ceiling, accelerator_of
from bench.results.words import display_name

DPI = 100
PANEL_WIDTH_IN = 6.5  # the bar panel, without its labels
SCALING_WIDTH_IN = 4.2
BAR_HEIGHT_IN = 0.24
MAX_BARS = 60  # more rows on one platform: a plot per model
NOTES_CHARS = 70  # a bar's notes are cut to this many characters: the table has them whole
FIXED_RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
    "path.simplify": False,
    "hatch.linewidth": 0.8,
    # Unhinted glyphs: a fifth less drawing time, and as legible at 9 pt and 100 dpi.
    "text.hinting": "no_hinting",
}
KEY_CHUNK = "bench-plot-inputs"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Bar:
    """One measured row: ``model`` picks the colour; ``low``/``high`` is its reference range."""

    label: str
    model: str
    tflops_per_gpu: float
    percent_of_peak: float
    sweep: bool
    low: float | None
    high: float | None
    peak: str = ""  # the peak % of peak is against, when it is not the bf16 one ("fp8")
    low_run: float | None = None  # the lowest and highest run's TFLOP/s/GPU, for an error bar
    high_run: float | None = None
    quick: bool = False  # drawn pale: not headline grade


@dataclass(frozen=True)
class Series:
    """Best tokens/s (all GPUs) per GPU count of one model."""

    label: str
    gpus: tuple[int, ...]
    tokens_per_s: tuple[float, ...]


@dataclass(frozen=True)
class PlotSpec:
    """One PNG to draw: the bars of a platform and, if any, its scaling series."""

    filename: str
    title: str
    bars: tuple[Bar, ...]
    series: tuple[Series, ...] = ()
    ceiling: float | None = None  # measured GEMM TFLOP/s per GPU, drawn as a line
    ceiling_label: str = ""
    ceiling_source: str = ""  # where the ceiling was measured, for the page

    def render(self, key: str) -> bytes:
        return _render(self, key)


class Drawable(Protocol):
    """A PNG to draw: its file name, and the drawing of it that carries its inputs key."""

    @property
    def filename(self) -> str: ...

    def render(self, key: str) -> bytes: ...


def slug(name: str) -> str:
    return _UNSAFE.sub("-", name).strip("-") or "unnamed"


def _bar(row: Row, with_precision: bool) -> Bar:
    parts = [display_name(row.model), row.layout or "", f"{row.micro_batch}/{row.global_batch}"]
    if with_precision:
        parts.append(row.precision)
    if row.engine.endswith(")"):  # Megatron-Core's layers: "megatron (TE+apex)" -> "TE+apex"
        parts.append(row.engine[row.engine.index("(") + 1:-1])
    elif row.engine in ENGINES and not ENGINES[row.engine].kit_layers:  # beside Megatron-Core's bars
        parts.append(ENGINES[row.engine].display)
    if row.memory_cap_gb:
        parts.append(f"cap {row.memory_cap_gb} GB")
    if row.variant:
        parts.append(row.variant if len(row.variant) <= NOTES_CHARS else row.variant[:NOTES_CHARS - 1] + "…")
    parts.append(f"[{row.key}]")
    ref, figure = row.reference, row.figure
    return Bar(
        label=" ".join(parts), model=row.model,
        tflops_per_gpu=figure.median if figure else row.tflops_per_gpu or 0.0,
        percent_of_peak=row.percent_of_peak or 0.0, sweep=row.sweep is not None,
        peak="fp8" if row.percent_of_bf16_peak is not None else "",
        low=None if ref is None else ref.low, high=None if ref is None else ref.high,
        low_run=figure.low if figure else None, high_run=figure.high if figure else None,
        quick=row.grade is Grade.QUICK,
    )  # fmt: skip


def _distinct(bars: Sequence[Bar], rows: Sequence[Row]) -> tuple[Bar, ...]:
    """Bars whose labels recur (one configuration of several kit commits) named with their kit
    commit: every bar its own label."""
    labels = [bar.label for bar in bars]
    return tuple(replace(bar, label=f"{bar.label} {row.commits}") if labels.count(bar.label) > 1 else bar
                 for bar, row in zip(bars, rows, strict=True))


def _series(rows: Sequence[Row]) -> tuple[Series, ...]:
    """A line per model, engine, precision, micro-batch and batch per GPU with two or more GPU
    counts: runs of other batches are other workloads, never joined."""
    best: dict[str, dict[int, float]] = defaultdict(dict)
    for row in rows:
        if row.gpus is None or row.tokens_per_s_per_gpu is None or row.global_batch is None:
            continue
        label = (f"{display_name(row.model)} {row.engine} {row.precision}, micro-batch "
                 f"{row.micro_batch}, {row.global_batch / row.gpus:g} a GPU")
        line = best[label]
        line[row.gpus] = max(line.get(row.gpus, 0.0), row.tokens_per_s_per_gpu * row.gpus)
    return tuple(
        Series(label, tuple(sorted(points)), tuple(points[g] for g in sorted(points)))
        for label, points in best.items()  # rows come in model-size order
        if len(points) > 1
    )


def _ceiling(rows: Sequence[Row], ceilings: Mapping[str, Ceiling]) -> Ceiling | None:
    """The measured ceiling of the one accelerator all rows ran on, if there is one."""
    names = set()
    for row in rows:
        accelerator = accelerator_of(row.accelerator)
        if accelerator is None:
            return None
        names.add(accelerator.name)
    return ceilings.get(names.pop()) if len(names) == 1 else None


def plan_plots(report: Report, ceilings: Mapping[str, Ceiling] | None = None) -> list[PlotSpec]:
    """One plot per platform with measured rows (per platform and model past :data:`MAX_BARS`
    rows), in platform order; bars in table order."""
    by_platform: dict[str, list[Row]] = defaultdict(list)
    for row in report.measured_rows:  # tables are ordered by model size
        by_platform[row.platform].append(row)
    specs = []
    for name, rows in sorted(by_platform.items()):
        if len(rows) <= MAX_BARS:
            specs.append(_platform_plot(name, name, rows, ceilings))
            continue
        by_model: dict[str, list[Row]] = defaultdict(list)
        for row in rows:
            by_model[row.model].append(row)
        specs += [_platform_plot(f"{name} {model}", f"{name}, {display_name(model)}", model_rows, ceilings)
                  for model, model_rows in by_model.items()]
    return specs


def _platform_plot(name: str, platform: str, rows: Sequence[Row],
                   ceilings: Mapping[str, Ceiling] | None) -> PlotSpec:
    """The plot of one platform's (or one platform's model's) rows, named ``platform-<name>.png``."""
    with_precision = len({row.precision for row in rows}) > 1
    series = _series(rows)
    title = f"{platform}: TFLOP/s per GPU (median, lowest–highest run) and % of peak (causal count)"
    if series:
        title += "; tokens/s against GPUs"
    ceiling = _ceiling(rows, ceilings or {})
    return PlotSpec(
        filename=f"platform-{slug(name)}.png", title=title,
        bars=_distinct([_bar(row, with_precision) for row in rows], rows), series=series,
        ceiling=ceiling.tflops_per_gpu if ceiling else None,
        ceiling_label=(f"measured {ceiling.dtype} GEMM ceiling, {ceiling.gpu_model}: "
                       f"{ceiling.tflops_per_gpu:.0f}" if ceiling else ""),
        ceiling_source=(f"{ceiling.gpu_model}: {ceiling.tflops_per_gpu:.1f} TFLOP/s "
                        f"({ceiling.dtype}, {ceiling.date}, `{ceiling.file}`)"
                        if ceiling else ""),
    )  # fmt: skip


def label_width_in(labels: Sequence[str], fontsize: float) -> float:
    """Inches the widest label takes in DejaVu Sans at ``fontsize`` points, measured by
    matplotlib's text layout (an average character width clipped wide labels), plus a margin."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    font, measure = FontProperties(family="DejaVu Sans", size=fontsize), TextToPath()
    widest = max(measure.get_text_width_height_descent(label, font, ismath=False)[0] for label in labels)
    return 0.3 + widest / 72  # points to inches

def inputs_key(spec: Drawable) -> str:
    """Hash of the spec, the code that draws it and the versions that shape the PNG bytes."""
    digest = hashlib.sha256(_drawing_inputs(inspect.getfile(type(spec))))
    digest.update(repr(spec).encode())
    return digest.hexdigest()


@functools.cache
def _drawing_inputs(source: str) -> bytes:
    """This module's code (style, PNG writing), the spec's module's code, and the versions."""
    # Looking up a version scans sys.path: done once, not once per plot.
    versions = "".join(f"{p} {metadata.version(p)}\n" for p in ("matplotlib", "pillow"))
    code = b"".join(Path(path).read_bytes() for path in dict.fromkeys((__file__, source)))
    return code + versions.encode()


def png_text(data: bytes) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG (keyword -> text); empty for anything that is not a PNG."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return {}
    texts, pos = {}, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        crc = data[pos + 8 + length : pos + 12 + length]
        if len(body) != length or len(crc) != 4 or struct.unpack(">I", crc)[0] != zlib.crc32(
            kind + body
        ):
            return {}  # truncated or damaged: draw it again
        if kind == b"tEXt" and b"\0" in body:
            keyword, text = body.split(b"\0", 1)
            texts[keyword.decode("latin-1")] = text.decode("latin-1")
        if kind in (b"IDAT", b"IEND"):
            break  # matplotlib writes text chunks before the image data
        pos += 12 + length
    return texts


def reuse_or_render(specs: Sequence[Drawable], existing: Mapping[str, bytes]) -> list[bytes]:
    """PNG bytes per spec: ``existing[filename]`` when its key matches, else drawn anew."""
    keys = [inputs_key(spec) for spec in specs]
    reused = {
        spec.filename: existing[spec.filename]
        for spec, key in zip(specs, keys, strict=True)
        if png_text(existing.get(spec.filename, b"")).get(KEY_CHUNK) == key
    }
    todo = [(spec, key) for spec, key in zip(specs, keys, strict=True)
            if spec.filename not in reused]
    drawn = dict(zip((spec.filename for spec, _ in todo), render_pngs(todo), strict=True))
    return [reused.get(spec.filename) or drawn[spec.filename] for spec in specs]


def render_pngs(specs: Sequence[tuple[Drawable, str]]) -> list[bytes]:
    """Draw (spec, inputs key) pairs; matplotlib is imported only when something is drawn."""
    if not specs:
        return []
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import style

    # One style context for all: setting it up costs as much as a plot.
    with style.context("default"), matplotlib.rc_context(FIXED_RC):
        return [spec.render(key) for spec, key in specs]


def _render(spec: PlotSpec, key: str) -> bytes:
    from matplotlib.figure import Figure

    label_in = label_width_in([bar.label for bar in spec.bars], FIXED_RC["font.size"])
    scaling_in = SCALING_WIDTH_IN + 0.9 if spec.series else 0.0
    width = label_in + PANEL_WIDTH_IN + 0.3 + scaling_in
    height = max(3.2, 1.3 + BAR_HEIGHT_IN * len(spec.bars))
    figure = Figure(figsize=(width, height), dpi=DPI)
    # Fixed margins in inches instead of a layout engine, which would draw the figure twice.
    bottom, top = 0.6 / height, 1 - 0.75 / height
    bars = figure.add_axes((label_in / width, bottom, PANEL_WIDTH_IN / width, top - bottom))
    _draw_bars(bars, spec.bars, spec.ceiling, spec.ceiling_label)
    if spec.series:
        left = (label_in + PANEL_WIDTH_IN + 0.3 + 0.75) / width
        scaling = figure.add_axes((left, bottom, SCALING_WIDTH_IN / width, top - bottom))
        _draw_scaling(scaling, spec.series)
    figure.suptitle(spec.title, x=0.01, y=1 - 0.12 / height, ha="left", va="top")
    return png_bytes(figure, key)


def png_bytes(figure, key: str) -> bytes:
    """The figure as PNG with its inputs key in a text chunk, and no ``Software`` chunk."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    # zlib level 3 instead of 6: measured faster and, on these plots, smaller.
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None, KEY_CHUNK: key},
                   pil_kwargs={"compress_level": 3})
    return buffer.getvalue()


def _draw_bars(axes, bars: Sequence[Bar], ceiling: float | None, ceiling_label: str) -> None:
    from matplotlib.colors import to_rgba

    models = list(dict.fromkeys(bar.model for bar in bars))
    colours = {model: f"C{i % 10}" for i, model in enumerate(models)}
    positions = range(len(bars))
    axes.barh(
        positions, [bar.tflops_per_gpu for bar in bars], height=0.7,
        color=[to_rgba(colours[bar.model], 0.45 if bar.quick else 1.0) for bar in bars],
        edgecolor="white", hatch=["///" if bar.sweep else "" for bar in bars],
    )  # fmt: skip
    spread = [(i, bar) for i, bar in enumerate(bars) if bar.low_run is not None and bar.high_run is not None]
    if spread:
        axes.errorbar([b.tflops_per_gpu for _, b in spread], [i for i, _ in spread], fmt="none",
                      ecolor="dimgray", elinewidth=0.8, capsize=2,
                      xerr=[[b.tflops_per_gpu - b.low_run for _, b in spread],  # type: ignore[operator]
                            [b.high_run - b.tflops_per_gpu for _, b in spread]])  # type: ignore[operator]
    ranged = [(i, bar) for i, bar in enumerate(bars) if bar.low is not None]
    if ranged:
        axes.hlines([i for i, _ in ranged], [b.low for _, b in ranged],
                    [b.high for _, b in ranged], colors="black", linewidth=1.2,
                    label="reference range (±tolerance)")
    if ceiling is not None:
        axes.axvline(ceiling, color="dimgray", linestyle="--", linewidth=1.2, label=ceiling_label)
    top = max(max(bar.tflops_per_gpu for bar in bars), max(b.high or 0.0 for b in bars),
              max(b.high_run or 0.0 for b in bars), ceiling or 0.0)
    axes.set_xlim(0, top * 1.22)  # room for the value labels
    axes.set_ylim(len(bars) - 0.5, -0.5)  # first row on top, like the tables
    axes.set_yticks([])
    transform = axes.get_yaxis_transform()  # x in axes fraction, y in data
    for i, bar in enumerate(bars):
        axes.text(-0.01, i, bar.label, transform=transform, ha="right", va="center")
        axes.text(max(bar.tflops_per_gpu, bar.high or 0.0, bar.high_run or 0.0) + top * 0.015, i,
                  f"{bar.tflops_per_gpu:.0f} · {bar.percent_of_peak:.1f} %"
                  + (f" of {bar.peak} peak" if bar.peak else ""),
                  va="center", fontsize=8)
    axes.set_xlabel("TFLOP/s per GPU (labels: TFLOP/s · % of peak)")
    axes.grid(True, axis="x", alpha=0.3)
    axes.set_axisbelow(True)
    handles = axes.get_legend_handles_labels()[0]
    if any(bar.sweep for bar in bars):
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="white", edgecolor="grey", hatch="///",
                             label="run from a sweep"))
    if handles:  # above the bars, where it hides none of them
        axes.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1), ncols=2,
                    fontsize=8, frameon=False, borderaxespad=0.2)


def _thousands(value: float) -> str:
    """``27100.0`` -> ``27.1k``; plain below 1000."""
    return f"{value / 1000:.3g}k" if value >= 1000 else f"{value:.3g}"


def _draw_scaling(axes, series: Sequence[Series]) -> None:
    for line in series:
        (drawn,) = axes.plot(line.gpus, line.tokens_per_s, marker="o", label=line.label)
        ideal = [line.tokens_per_s[0] * g / line.gpus[0] for g in line.gpus]
        axes.plot(line.gpus, ideal, linestyle="--", linewidth=1, color=drawn.get_color())
        for gpus, tokens in zip(line.gpus, line.tokens_per_s, strict=True):
            axes.annotate(_thousands(tokens), (gpus, tokens), textcoords="offset points",
                          xytext=(6, -3), ha="left", va="top", fontsize=8)
    from matplotlib.ticker import FuncFormatter, LogLocator

    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    ticks = sorted({g for line in series for g in line.gpus})
    axes.set_xticks(ticks, [str(g) for g in ticks])
    axes.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)
    axes.margins(y=0.12)
    axes.minorticks_off()
    axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _thousands(value)))
    axes.set_xlabel("GPUs")
    axes.set_ylabel("tokens/s, all GPUs (best row per count)")
    axes.set_title("dashed: linear scaling from the fewest GPUs", fontsize=8)
    axes.legend(fontsize=8)
    axes.grid(True, alpha=0.3)
