"""Four GPUs: the 13b layouts side by side with their time breakdowns, and data-parallel scaling
over 1, 2 and 4 GPUs at one batch per GPU.

A 13b row is one configuration key's ok four-GPU runs (split by kit commit with ``by_commit``):
its median TFLOP/s/GPU with run count and spread, its ratio to the fastest headline-grade row on the
same hardware, precision, recipe and global batch with that ratio's noise (``quick`` where either
is not headline grade), and where one of its runs was made with ``--profile``, that run's time at
the measured step by class (:mod:`bench.results.profiles`). The layouts and precisions of the
four-GPU campaign (``results/campaigns/x4.toml``) without a row are named as missing. The plot
draws each row's median with its runs' lowest–highest.

A scaling row is one pure data-parallel configuration (TP 1, PP 1) measured on four GPUs: model,
engine, layers, precision, hardware with its cap, micro-batch, batch per GPU (global batch / GPUs)
and settings. Its 1- and 2-GPU cells are all runs at that count (with ``by_commit``, those of the
four-GPU cell's kit commit where there are some, else of the newest commit there), and ``not
measured`` where none ran.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS, Precision
from bench.config.presets import get_preset
from bench.planning.engines.registry import ENGINES
from bench.planning.layout import build_layout
from bench.planning.memory import GB, REFUSE_FRACTION, Counted, estimate_bytes
from bench.records.headline import is_headline_grade
from bench.records.identity import config_key
from bench.records.record import Record
from bench.results import plots
from bench.results.aggregate import configuration, median_run
from bench.results.profiles import STACK, STACK_COLOURS, STACK_NAMES, TimeRow, time_rows
from bench.results.spread import RATIO_WORDS, Figure, commits_words, kit_commit, ratio_text
from bench.results.table import DASH, record_link, table, text
from bench.results.words import (
    CAP_KEY,
    engine_words,
    hardware_words,
    layers,
    model_sort_key,
    recipe,
    settings,
    variant,
    variant_text,
)

MODEL, GPUS = "13b", 4
PLOT = "four-gpus-13b.png"
# The four-GPU campaign for 13b (results/campaigns/x4.toml): (name, tp, pp, dp, sp, virtual stages) in bf16 and fp8.
CAMPAIGN_LAYOUTS = (("tp2pp2sp", 2, 2, 1, True, False), ("tp4sp", 4, 1, 1, True, False),
                    ("tp1pp4 with virtual stages", 1, 4, 1, False, True), ("tp2sp dp2", 2, 1, 2, True, False))
CAMPAIGN_PRECISIONS = ("bf16", "fp8-delayed", "fp8-current")
SCALING_GPUS = (1, 2, 4)


@dataclass(frozen=True)
class LayoutRow:
    """One four-GPU 13b configuration; ``best`` the runs of the fastest headline-grade row on its
    hardware, precision, recipe and global batch (none where no row there is headline grade)."""

    runs: tuple[Record, ...]
    best: tuple[Record, ...]
    profile: TimeRow | None

    @property
    def run(self) -> Record:
        return median_run(self.runs)


def layout_rows(runs: Sequence[Record], by_commit: bool = False) -> tuple[LayoutRow, ...]:
    """The ok 13b four-GPU configurations, fastest first within each hardware and precision."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for run in runs:
        if run.ok and run.preset.name.lower() == MODEL and run.gpus == GPUS:
            groups[configuration(run, by_commit)].append(run)
    members = [tuple(sorted(group, key=lambda r: r.run_id)) for group in groups.values()]
    members.sort(key=lambda g: (*_alike(g[0]), -Figure.of_runs(g).median, g[0].run_id))
    profiled = {row.run.run_id: row for row in time_rows(runs)}
    best: dict[tuple, tuple[Record, ...]] = {}
    for group in members:  # fastest first: the first headline row of each setup is its best
        if is_headline_grade(group):
            best.setdefault(_alike(group[0]), group)
    return tuple(LayoutRow(group, best.get(_alike(group[0]), ()),
                           next((profiled[r.run_id] for r in (median_run(group), *reversed(group))
                                 if r.run_id in profiled), None))
                 for group in members)


def _alike(run: Record) -> tuple[str, str, str, int]:
    """What rows share to be set against each other: hardware, precision, recipe, global batch."""
    return hardware_words(run), run.precision, recipe(run), run.layout.global_batch


def missing_layouts(rows: Sequence[LayoutRow]) -> list[str]:
    """The campaign's 13b layouts and precisions (Transformer Engine) no four-GPU row has, each
    that the memory estimate refuses on 80 GB said so with its figure (the campaign runs each
    "if it fits")."""
    have = {(r.run.layout.tp, r.run.layout.pp, r.run.layout.dp, r.run.layout.sp,
             (r.run.layout.vp or 1) > 1, r.run.precision) for r in rows if layers(r.run).startswith("TE")}
    return [f"{name} {precision}" + _beyond_80_gb(tp, pp, sp, vp, PRECISIONS[precision])
            for name, tp, pp, dp, sp, vp in CAMPAIGN_LAYOUTS
            for precision in CAMPAIGN_PRECISIONS if (tp, pp, dp, sp, vp, precision) not in have]


def _beyond_80_gb(tp: int, pp: int, sp: bool, vp: bool, precision: Precision) -> str:
    """`` (beyond 80 GB: ~N GB by the memory estimate)`` where the planner refuses the layout at
    its smallest micro-batch under a cap of 80 GB, else ``""``."""
    preset = get_preset(MODEL)
    name = f"tp{tp}pp{pp}" + ("vp2" if vp else "") + ("sp" if sp else "")
    layout = build_layout(name, preset, GPUS, GPUS, 1, 64)
    need = estimate_bytes(Counted(preset, layout, 2, fp8=precision.fp8,
                                  optimizer_step_bytes=ENGINES["megatron"].step_bytes("default", 2))) / GB
    return f" (beyond 80 GB: ~{need:.1f} GB by the memory estimate)" if need > REFUSE_FRACTION * 80 else ""


def _scaling_key(run: Record) -> tuple:
    lay = run.layout
    return (model_sort_key(run.preset.name.lower()), run.preset.name.lower(), run.engine, layers(run),
            run.precision, hardware_words(run), str(run.variant.get(CAP_KEY)), lay.micro_batch,
            lay.global_batch / run.gpus, variant_text(run))


def scaling_rows(runs: Sequence[Record], by_commit: bool = False) -> list[dict[int, tuple[Record, ...]]]:
    """Per pure data-parallel configuration measured on four GPUs: its runs at 1, 2 and 4 GPUs."""
    by_key: dict[tuple, dict[int, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        lay = run.layout
        if run.ok and run.gpus in SCALING_GPUS and lay.tp == lay.pp == 1 and lay.dp == run.gpus:
            by_key[_scaling_key(run)][run.gpus].append(run)
    rows = []
    for key in sorted(by_key):
        counts = by_key[key]
        if GPUS not in counts:
            continue
        top = _one_commit(counts[GPUS], None, by_commit)
        rows.append({gpus: _one_commit(counts[gpus], kit_commit(median_run(top)), by_commit)
                     for gpus in SCALING_GPUS if gpus in counts})
    return rows


def _one_commit(runs: Sequence[Record], wanted: str | None, by_commit: bool) -> tuple[Record, ...]:
    """The runs of ``wanted``'s commit, else of the newest commit among them; all of them unless
    ``by_commit``."""
    if not by_commit:
        return tuple(runs)
    commits = {kit_commit(run) for run in runs}
    commit = wanted if wanted in commits else kit_commit(max(runs, key=lambda r: r.started_at))
    return tuple(run for run in runs if kit_commit(run) == commit)


LAYOUT_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("layout", False), ("precision", False), ("engine", False), ("hardware", False),
    ("micro/global batch", True), ("TFLOP/s/GPU", True), ("% of peak", True), ("× fastest", True),
    ("peak mem (GB)", True), *((f"{STACK_NAMES[name]} (%)", True) for name in STACK),
    ("kit", False), ("record", False))


def _layout_cells(row: LayoutRow, records_link: str) -> list[str]:
    run, lay = row.run, row.run.layout
    m = run.metrics
    assert m is not None  # only ok runs are rows
    shares = ([f"{row.profile.percent(name):.1f}" for name in STACK] if row.profile is not None
              else [DASH] * len(STACK))
    return [text(lay.name), text(" ".join(filter(None, (run.precision, variant_text(run))))),
            text(engine_words(run)), text(hardware_words(run)), f"{lay.micro_batch}/{lay.global_batch}",
            Figure.of_runs(row.runs).text(), f"{m.mfu * 100:.1f}",
            _times_fastest(row),
            DASH if m.peak_mem_gb is None else f"{m.peak_mem_gb:.1f}", *shares,
            text(commits_words(row.runs)), record_link(run, records_link)]


def _times_fastest(row: LayoutRow) -> str:
    if row.runs == row.best:
        return "1"
    return ratio_text(row.runs, row.best) if row.best else f"quick (n={len(row.runs)}; no headline row)"


def _scaling_cells(cells: dict[int, tuple[Record, ...]], records_link: str) -> list[str]:
    top = median_run(cells[GPUS])
    lay = top.layout
    figures = [f"{Figure.of_runs(cells[g]).text()}, {commits_words(cells[g])}" if g in cells
               else "not measured" for g in SCALING_GPUS]
    efficiency = ratio_text(cells[GPUS], cells[1], 3) if 1 in cells else DASH
    return [text(top.preset.name.upper()), text(top.precision), text(engine_words(top)),
            text(hardware_words(top)), f"{lay.micro_batch}/{lay.global_batch // top.gpus}",
            *map(text, figures), efficiency, text(variant_text(top)), record_link(top, records_link)]


SCALING_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("precision", False), ("engine", False), ("hardware", False),
    ("micro batch / batch per GPU", True), *((f"TFLOP/s/GPU, {g} GPU{'s' if g > 1 else ''}", True)
                                             for g in SCALING_GPUS),
    ("efficiency, 4 / 1 GPU", True), ("notes", False), ("record, 4 GPUs", False))


def section(rows: Sequence[LayoutRow], scaling: Sequence[dict[int, tuple[Record, ...]]],
            plot: LayoutBars | None, records_link: str) -> list[str]:
    """The 13b layouts on four GPUs, what is missing of them, the plot, the scaling table."""
    lines = ["## Four GPUs", "", "### 13B layouts on four GPUs", "",
             ("Every ok 13B configuration on four GPUs, fastest first per hardware, precision and global batch: "
              "median TFLOP/s/GPU (causal count) with run count and lowest–highest, its ratio to the "
              "fastest headline-grade row on the same hardware, precision, recipe and global batch, and "
              "where a run of it was profiled "
              "(`bench run --profile`), that run's step by class as a share of the measured step "
              f"(`{DASH}`: no profile). " + RATIO_WORDS), ""]
    lines += (table(LAYOUT_COLUMNS, [_layout_cells(row, records_link) for row in rows]) if rows
              else ["No 13B run on four GPUs yet."])
    missing = missing_layouts(rows)
    if missing:
        lines += ["", ("Missing: no four-GPU record yet of 13B with Transformer Engine in "
                       f"{'; '.join(missing)} (the four-GPU campaign, results/campaigns/x4.toml).")]
    if plot is not None:
        lines += ["", f"![{plot.title}](plots/{plot.filename})"]
    lines += ["", "### Data-parallel scaling over 1, 2 and 4 GPUs", "",
              ("Each pure data-parallel configuration (TP 1, PP 1) measured on four GPUs, beside "
               "the same configuration on one and two GPUs at the same micro-batch and batch per "
               "GPU (global batch / GPUs): model, engine and layers, precision, hardware and its "
               "cap, settings. A cell is every run at that count, their kit commits named in the cell. `efficiency` = "
               "TFLOP/s/GPU on 4 GPUs over 1 GPU (1.000: perfect scaling)."), ""]
    lines += (table(SCALING_COLUMNS, [_scaling_cells(c, records_link) for c in scaling]) if scaling
              else ["No data-parallel run on four GPUs yet."])
    return lines + [""]


@dataclass(frozen=True)
class LayoutBars:
    """Each 13b row's median TFLOP/s/GPU as a bar with its runs' lowest–highest as an error bar;
    quick rows are drawn pale (a profile's time split is in the table and the time plot, never
    here: most rows have no profile)."""

    filename: str
    title: str
    bars: tuple[tuple[str, Figure, bool], ...]  # label, figure, headline grade

    def render(self, key: str) -> bytes:
        return _render(self, key)


# Plot labels only: Megatron flags of the four-GPU campaign in a few words (the table has them whole).
SHORT_FLAGS = (("megatron_args=", ""), ("cuda_graphs=te", "TE CUDA graphs"), ("dropout=0", "dropout 0"),
               ("recompute=selective", "selective recompute"))


def plan_plot(rows: Sequence[LayoutRow]) -> LayoutBars | None:
    if not rows:
        return None
    bars = []
    for row in rows:
        run = row.run
        # What ran away from the defaults tells two runs of one layout apart (the cap is in the hardware).
        changed = variant({k: v for k, v in settings(run).items() if k != CAP_KEY})
        for flags, short in SHORT_FLAGS:
            changed = changed.replace(flags, short)
        label = (f"{run.layout.name} {run.layout.micro_batch}/{run.layout.global_batch} {run.precision} "
                 f"{engine_words(run)}{f' {changed}' if changed else ''}, {hardware_words(run)}, "
                 f"key {config_key(run).digest}")
        bars.append((label, Figure.of_runs(row.runs), is_headline_grade(row.runs)))
    return LayoutBars(PLOT, "13B on four GPUs: median TFLOP/s per GPU, bars from the lowest to the "
                      "highest run; pale: quick (fewer than 3 runs of 20 measured steps)", tuple(bars))


def _render(spec: LayoutBars, key: str) -> bytes:
    from matplotlib.figure import Figure as Drawing

    count = len(spec.bars)
    label_in = plots.label_width_in([label for label, _, _ in spec.bars], 8)
    width, height = label_in + 6.9, count * 0.32 + 1.3
    figure = Drawing(figsize=(width, height), dpi=plots.DPI)
    axes = figure.add_axes((label_in / width, 0.85 / height, 6.0 / width, count * 0.32 / height))
    positions = list(range(count - 1, -1, -1))
    medians = [fig.median for _, fig, _ in spec.bars]
    axes.barh(positions, medians, height=0.7, edgecolor="white",
              color=[STACK_COLOURS["gemm"] if headline else "#c6c6c6" for _, _, headline in spec.bars])
    axes.errorbar(medians, positions, fmt="none", ecolor="black", elinewidth=0.8, capsize=2,
                  xerr=[[fig.median - fig.low for _, fig, _ in spec.bars],
                        [fig.high - fig.median for _, fig, _ in spec.bars]])
    for position, (_, fig, _) in zip(positions, spec.bars, strict=True):
        axes.text(fig.high, position, f"  {fig.median:.0f} (n={fig.n})", va="center", fontsize=8)
    axes.set_yticks(positions, [label for label, _, _ in spec.bars], fontsize=8)
    axes.set_ylim(-0.5, count - 0.5)
    axes.set_xlim(0, max(fig.high for _, fig, _ in spec.bars) * 1.2)
    axes.set_xlabel("TFLOP/s per GPU (causal count): median, lowest–highest of the runs")
    axes.grid(axis="x", linewidth=0.4, alpha=0.5)
    axes.set_axisbelow(True)
    figure.suptitle(spec.title, x=0.01, y=1 - 0.12 / height, ha="left", va="top", fontsize=9)
    return plots.png_bytes(figure, key)
