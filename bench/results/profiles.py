"""Where the time goes: the profile of each profiled run against its measured step.

A record made with ``--profile`` holds rank 0's breakdown of two steps profiled after the measured
window (:class:`bench.records.record.Profile`). The profiler's own overhead lengthens those steps,
which shows as GPU idle, while kernels keep their durations; so each busy class is set against the
run's measured median step and idle is what they leave of it (:func:`bench.measure.profile.at_step`).

:class:`TimePlot` draws the same rows as stacked bars, one a run, so that two runs' steps can be
compared at a glance: where one is longer, and in which class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.measure.profile import CLASSES, Breakdown, at_step
from bench.records.record import Profile, Record
from bench.results import plots
from bench.results.spread import kit_commit
from bench.results.table import record_link, table, text
from bench.results.words import (
    CAP_KEY,
    engine_words,
    hardware_words,
    layers,
    model_name,
    model_sort_key,
    precision_words,
    settings,
    variant,
)

MS_PER_S = 1000.0


@dataclass(frozen=True)
class TimeRow:
    """One profiled ok run: ``step_ms`` its measured median step, ``classes`` each class's
    milliseconds at that step (:data:`bench.measure.profile.CLASSES` and ``idle``)."""

    run: Record
    profile: Profile
    step_ms: float
    classes: Mapping[str, float]

    def percent(self, name: str) -> float:
        """A class's share of the measured step, 0-100."""
        return 100 * self.classes[name] / self.step_ms


def _breakdown(profile: Profile) -> Breakdown:
    return Breakdown(**profile.model_dump(exclude={"source", "host"}))


def time_rows(runs: Sequence[Record]) -> tuple[TimeRow, ...]:
    """A row per ok run with a profile (failed runs have no measured step), by model, then run id."""
    rows = []
    for run in runs:
        if run.profile is None or run.metrics is None:
            continue
        step_ms = run.metrics.step_time_s_median * MS_PER_S
        rows.append(TimeRow(run, run.profile, step_ms, at_step(_breakdown(run.profile), step_ms)))
    return tuple(sorted(rows, key=lambda r: (model_sort_key(r.run.preset.name.lower()),
                                             r.run.run_id)))


TIME_PLOT = "where-the-time-goes.png"
STACK = (*CLASSES, "idle")  # the bars' segments, left to right, in the order the profile gives time
STACK_NAMES = {"gemm": "GEMM", "attention": "attention", "optimizer": "optimizer",
               "other": "other kernels", "comm_exposed": "communication not hidden",
               "idle": "GPU idle"}
STACK_COLOURS = {"gemm": "#1f77b4", "attention": "#ff7f0e", "optimizer": "#2ca02c",
                 "other": "#9467bd", "comm_exposed": "#d62728", "idle": "#d9d9d9"}
BAR_IN, BOTTOM_IN, TOP_IN, LABEL_IN, PANEL_IN = 0.32, 1.1, 0.45, 4.4, 6.0
LABEL_CHAR_IN = 0.061  # average width of one 8 pt DejaVu Sans character


def run_label(run: Record) -> str:
    """How a profiled run is named on the page: model, layout, micro/global batch, precision with
    what built its layers and its variant (the cap in the hardware), hardware, kit commit."""
    shown = {key: value for key, value in settings(run).items() if key != CAP_KEY}
    precision = " ".join(filter(None, (run.precision, layers(run) and f"({layers(run)})", variant(shown))))
    lay = run.layout
    return (f"{model_name(run)} {lay.name} {lay.micro_batch}/{lay.global_batch} {precision}, "
            f"{hardware_words(run)}, kit {kit_commit(run)}")


def distinct_labels(runs: Sequence[Record]) -> list[str]:
    """:func:`run_label` of each run, with its start where runs share one (``2026-11-26 09:51``,
    to the second where two short runs started within one minute): every bar its own name."""
    labels = [run_label(run) for run in runs]
    starts = [run.started_at[:10] + " " + run.started_at[11:16] for run in runs]
    keyed = [(label, start) for label, start in zip(labels, starts, strict=True)]
    return [label if labels.count(label) == 1
            else f"{label}, {start}" if keyed.count((label, start)) == 1
            else f"{label}, {start}{run.started_at[16:19]}"
            for label, start, run in zip(labels, starts, runs, strict=True)]


@dataclass(frozen=True)
class TimePlot:
    """The stacked bars of :data:`STACK` milliseconds at each profiled run's measured step."""

    filename: str
    title: str
    bars: tuple[tuple[str, tuple[float, ...]], ...]  # (run label, ms per STACK class)

    def render(self, key: str) -> bytes:
        return _render(self, key)


def plan_time_plot(rows: Sequence[TimeRow]) -> TimePlot | None:
    """One plot of every profiled run, in the table's order; None without any."""
    if not rows:
        return None
    labels = distinct_labels([row.run for row in rows])
    return TimePlot(TIME_PLOT, "Where a measured step's time goes (ms, rank 0)",
                    tuple((label, tuple(row.classes[name] for name in STACK))
                          for label, row in zip(labels, rows, strict=True)))


def _render(spec: TimePlot, key: str) -> bytes:
    from matplotlib.figure import Figure

    count = len(spec.bars)
    # Labels at 8 pt take about 0.061 in a character: the label column fits the longest one.
    label_in = max(LABEL_IN, 0.3 + LABEL_CHAR_IN * max(len(label) for label, _ in spec.bars))
    width = label_in + PANEL_IN + 0.9
    height = count * BAR_IN + BOTTOM_IN + TOP_IN
    figure = Figure(figsize=(width, height), dpi=plots.DPI)
    axes = figure.add_axes((label_in / width, BOTTOM_IN / height, PANEL_IN / width,
                            count * BAR_IN / height))
    positions = range(count - 1, -1, -1)  # the first row on top, as in the table
    for position, (_, values) in zip(positions, spec.bars, strict=True):
        left = 0.0
        for name, value in zip(STACK, values, strict=True):
            axes.barh(position, value, left=left, height=0.7, color=STACK_COLOURS[name],
                      edgecolor="white", linewidth=0.5,
                      label=STACK_NAMES[name] if position == count - 1 else None)
            left += value
        axes.text(left, position, f" {left:.0f}", va="center", fontsize=8)
    axes.set_yticks(list(positions), [label for label, _ in spec.bars], fontsize=8)
    axes.set_ylim(-0.5, count - 0.5)
    axes.set_xlim(0, max(sum(values) for _, values in spec.bars) * 1.1)
    axes.set_xlabel("milliseconds per measured step")
    axes.grid(axis="x", linewidth=0.4, alpha=0.5)
    axes.set_axisbelow(True)
    figure.legend(*axes.get_legend_handles_labels(), loc="lower left", ncols=3, fontsize=8,
                  frameon=False, bbox_to_anchor=(label_in / width, 0.05 / height))
    figure.suptitle(spec.title, x=0.01, y=1 - 0.12 / height, ha="left", va="top")
    return plots.png_bytes(figure, key)


# (profile class, header) in the order the profile gives an instant to a class; the plot's names.
TIME_CLASSES: tuple[tuple[str, str], ...] = tuple((name, STACK_NAMES[name]) for name in STACK)
TIME_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("layout", False), ("precision", False), ("engine", False),
    ("hardware", False), ("measured step (ms)", True),
    *((f"{header} (ms, %)", True) for _, header in TIME_CLASSES),
    ("all communication (ms, %)", True), ("profiled step (ms)", True), ("record", False),
)


def _ms(value: float, step_ms: float) -> str:
    return f"{value:.1f} ({100 * value / step_ms:.1f} %)"


def _time_cells(row: TimeRow, records_link: str) -> list[str]:
    run = row.run
    return [text(model_name(run)), text(run.layout.name), text(precision_words(run)),
            text(engine_words(run)), text(hardware_words(run)),
            f"{row.step_ms:.1f}", *(_ms(row.classes[name], row.step_ms) for name, _ in TIME_CLASSES),
            _ms(row.profile.comm_total, row.step_ms), f"{row.profile.step_ms:.1f}",
            record_link(run, records_link)]


def section(rows: Sequence[TimeRow], records_link: str) -> list[str]:
    """Each profiled run a row: its classes against the measured step, then the plot."""
    if not rows:
        return []
    steps = " or ".join(str(n) for n in sorted({row.profile.steps for row in rows}))
    sources = ", ".join(text(s) for s in sorted({row.profile.source for row in rows}))
    return ["## Where the time goes", "",
            (f"Runs made with `bench run --profile`: the torch profiler's trace ({sources}) of "
             f"{steps} steps trained after the measured window, its CUDA kernels classed by name "
             "(GEMM: cuBLAS, CUTLASS and Transformer Engine's fp8 GEMMs; attention: flash, cuDNN "
             "fused and SDPA kernels; optimizer: multi-tensor Adam, and every kernel within torch's "
             "optimizer-step span; communication: NCCL and "
             "userbuffers; other kernels: the rest, memory copies and sets included). Where "
             "kernels overlap, each instant counts once and goes to compute first (in the "
             "columns' order), to communication only where no compute runs: `communication not "
             "hidden` is that part, `all communication` every communication kernel, hidden or "
             "not. The profiler's own overhead lengthens the profiled steps (`profiled step`) "
             "while kernels keep their durations, so the classes are milliseconds per step set "
             "against the run's measured median step, and `GPU idle` is what the busy classes "
             "leave of it (0 where they fill it); percentages are of the measured step."),
            "", *table(TIME_COLUMNS, [_time_cells(row, records_link) for row in rows]), "",
            f"![Where a measured step's time goes](plots/{TIME_PLOT})", "", *_largest(rows, records_link),
            *_host(rows, records_link)]


LARGEST_SHOWN = 4  # kernels beside the GEMMs a run's line names
KERNEL_CHARS = 64  # of a kernel's name shown (the record keeps more)


def _largest(rows: Sequence[TimeRow], records_link: str) -> list[str]:
    """A line per run whose record names its largest kernels: those beside the GEMMs, with their
    milliseconds a step and share of the measured step (whole durations, overlapped or not)."""
    named = [row for row in rows if any(k.cls != "gemm" for k in row.profile.largest)]
    if not named:
        return []
    lines = ["The largest kernels beside the GEMMs, where the record names them (records made "
             "since the kit's profile kept them), milliseconds a step and share of the measured "
             "step, whole durations:", ""]
    for row in named:
        kernels = [k for k in row.profile.largest if k.cls != "gemm"][:LARGEST_SHOWN]
        words = "; ".join(f"{text(k.name[:KERNEL_CHARS])} ({k.cls}) {k.ms:.1f} ms, "
                          f"{100 * k.ms / row.step_ms:.1f} %" for k in kernels)
        run = row.run
        lines.append(f"- {text(model_name(run))} {text(run.layout.name)} {text(precision_words(run))}, "
                     f"{text(engine_words(run))} ({record_link(run, records_link)}): {words}")
    return [*lines, ""]


HOST_OPS_SHOWN = 3  # host ops a run's line names


def _host(rows: Sequence[TimeRow], records_link: str) -> list[str]:
    """A line per run whose record keeps the host's side of its profiled steps
    (:mod:`bench.measure.host_side`): what the host spent in ops, launches and compiled code, and
    its largest ops, in milliseconds a profiled step (the profiler slows the host: shares of the
    host's op time, not of the measured step)."""
    kept = [row for row in rows if row.profile.host is not None]
    if not kept:
        return []
    lines = ["The host's side of the profiled steps, where the record keeps it (records made since "
             "the kit's profile read it): milliseconds a profiled step in the training loop's ops and "
             "in autograd's (the backward pass, while the loop waits), what the kernel launch calls and "
             "the calls of `torch.compile`d code took of them, and the largest host ops; the profiler "
             "slows the host, so the shares are of the host's op time:", ""]
    for row in kept:
        host, run = row.profile.host, row.run
        ops = host.loop_ms + host.backward_ms
        kernels = sum(getattr(row.profile, name) for name in CLASSES)  # GPU busy, a profiled step
        largest = "; ".join(f"{text(op.name[:KERNEL_CHARS])} ({op.thread}) {op.ms:.1f} ms"
                            for op in host.largest[:HOST_OPS_SHOWN])
        lines.append(
            f"- {text(model_name(run))} {text(run.layout.name)} {text(precision_words(run))}, "
            f"{text(engine_words(run))} ({record_link(run, records_link)}): {ops:.0f} ms in ops "
            f"({host.loop_ms:.0f} loop, {host.backward_ms:.0f} backward) against {kernels:.0f} ms of "
            f"kernels; {host.launches} launches, {100 * host.launch_ms / ops:.0f} % of the ops' time; "
            f"compiled code {100 * host.compiled_ms / ops:.0f} %; largest: {largest}")
    return [*lines, ""]
