"""Markdown for ``results/README.md``: the best row per model, precision and hardware, data-parallel
scaling, where profiled runs' time goes, the smoke reports' node checks, then one table per model
size, the plots with the measured GEMM ceilings, loss curves by precision, failed runs, skipped
files.

Every number column is right-aligned with a fixed number of decimals (samples/s 2, tokens/s 0,
TFLOP/s 1, % 1, GB 1, loss 4, loss difference in % 2); units are in the headers; a dash means
"not used" for measured rows and "not published" for published ones. No timestamps: the page
depends only on its inputs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bench.records.record import Record
from bench.results.aggregate import ModelTable, Report, Row, display_name, layers, settings, variant
from bench.results.data import CONVENTION_LABELS
from bench.results.fits import FitGroup, best_layouts
from bench.results.hardware import NodeCheck, hardware_id, hardware_name
from bench.results.losses import (
    BASELINE,
    FINAL_WINDOW,
    MIN_LOSSES,
    SMOOTH_WINDOW,
    LossPlot,
    Treatment,
    difference,
)
from bench.results.memory import PARTS, PartsRow
from bench.results.plots import PlotSpec
from bench.results.precisions import PrecisionGroup
from bench.results.profiles import STACK, STACK_NAMES, TIME_PLOT, TimeRow
from bench.results.runs import failure_reason, label_of
from bench.results.scaling import ScalingPair

DASH = "–"

# (header, right-aligned) in table order.
COLUMNS: tuple[tuple[str, bool], ...] = (
    ("platform", False),
    ("engine", False),
    ("precision", False),
    ("nodes", True),
    ("GPUs", True),
    ("TP", True),
    ("PP", True),
    ("DP", True),
    ("VP/CP/SP", True),
    ("ZeRO", True),
    ("micro/global batch", True),
    ("samples/s", True),
    ("tokens/s/GPU", True),
    ("TFLOP/s/GPU", True),
    ("% of peak", True),
    ("FLOPs count", False),
    ("peak mem (GB)", True),
    ("notes", False),
    ("sweep", False),
    ("runs", True),
    ("date", False),
    ("record / source", False),
    ("reference TFLOP/s/GPU", True),
    ("check", False),
)


def _number(value: float | None, decimals: int) -> str:
    return DASH if value is None else f"{value:.{decimals}f}"


def _integer(value: int | None) -> str:
    return DASH if value is None else str(value)


# What lets record text (variant keys and values, labels, reasons, names) make HTML, a link, code,
# emphasis or a new table cell. An underscore inside a word emphasises nothing (13b_sweep_lumi),
# and brackets make a link only as "](" (the page defines no reference links): both stay as they
# are, as in "[rank0]: ...".
_MARKUP = re.compile(r"[\\`*<>|~&]|\](?=\()|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LABEL_MARKUP = re.compile(_MARKUP.pattern + r"|[\[\]]")
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _escape(text: str) -> str:
    """Record text as literal Markdown on one line."""
    return _escape_markup(" ".join(text.split()))


def _escape_markup(text: str) -> str:
    return _MARKUP.sub(lambda m: "\\" + m[0], text)


def _text(value: str | None) -> str:
    return _escape(value) if value else DASH


def _with_code(text: str) -> str:
    """Text with the kit's code spans (`` `name` ``) kept and everything between escaped: what is
    inside a code span is shown literally, HTML included."""
    return "".join(part if i % 2 else _escape_markup(part)
                   for i, part in enumerate(_CODE_SPAN.split(" ".join(text.split()))))


def _code(text: str) -> str:
    """``text`` (a file name, which may hold anything) as an inline code span showing it
    literally: control characters as escapes (a newline as ``\\n``), the fence longer than any
    run of backticks inside."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    fence = "`" * (max(map(len, re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown[:1] in ("`", " ") or shown[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def _plain(text: str) -> str:
    """Untrusted text (a skipped file's problem, quoting its contents) as literal Markdown:
    one line, with every character that could start a link, emphasis, code or HTML escaped."""
    return re.sub(r"([\\`*_\[\]<>|~&])", r"\\\1", " ".join(text.split())) or DASH


def _link(text: str, target: str | None) -> str:
    # A link's text ends at its first "]": every bracket in it is escaped.
    label = _LABEL_MARKUP.sub(lambda m: "\\" + m[0], " ".join(text.split())) or DASH
    return label if target is None else f"[{label}]({target.replace(' ', '%20')})"


def _sp(value: bool | None) -> str:
    return DASH if value is None else ("on" if value else "off")


def _check(row: Row) -> str:
    return f"**{row.verdict}**" if row.flagged else str(row.verdict)


def _row_cells(row: Row, records_link: str) -> list[str]:
    batch = f"{_integer(row.micro_batch)}/{_integer(row.global_batch)}"
    if row.micro_batch is None and row.global_batch is None:
        batch = DASH
    reference = DASH
    if row.reference is not None:
        reference = f"{row.reference.tflops_per_gpu:.0f} ± {row.reference.tolerance * 100:.0f} %"
    link = row.link if row.published else f"{records_link}/{row.link}"
    return [
        f"published: {_text(row.platform)}" if row.published else _text(row.platform),
        _text(row.engine),
        _text(row.precision),
        _integer(row.nodes),
        _integer(row.gpus),
        _integer(row.tp),
        _integer(row.pp),
        _integer(row.dp),
        f"{_integer(row.vp)}/{_integer(row.cp)}/{_sp(row.sp)}",
        _integer(row.zero),
        batch,
        _number(row.samples_per_s, 2),
        _number(row.tokens_per_s_per_gpu, 0),
        _number(row.tflops_per_gpu, 1),
        _percent(row),
        CONVENTION_LABELS.get(row.flops_convention, row.flops_convention),
        _number(row.peak_mem_gb, 1),
        _text(row.variant),
        _text(row.sweep),
        _integer(row.runs),
        _text(row.date),
        _link(row.label, link),
        reference,
        _check(row),
    ]


def _table(header: Sequence[tuple[str, bool]], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(name for name, _ in header) + " |"]
    lines.append("| " + " | ".join("---:" if right else "---" for _, right in header) + " |")
    lines.extend("| " + " | ".join(cells) + " |" for cells in rows)
    return lines


def _model_section(table: ModelTable, records_link: str) -> list[str]:
    lines = [f"## {_text(display_name(table.model))}", ""]
    for shape in table.shapes:
        lines += [f"Measured preset: {_text(shape)}.", ""]
    lines += _table(COLUMNS, [_row_cells(row, records_link) for row in table.rows])
    return lines + [""]


def _failed_section(failed: Sequence[Record], records_link: str) -> list[str]:
    lines = ["## Failed runs", ""]
    if not failed:
        return lines + ["No failed runs.", ""]
    header = (("record", False), ("status", False), ("reason", False), ("platform", False),
              ("model", False), ("layout", False), ("GPUs", True), ("date", False))
    rows = [
        [_link(r.run_id, f"{records_link}/{r.run_id}.json"), r.status.value, _text(failure_reason(r)),
         _text(label_of(r)), _text(display_name(r.preset.name.lower())), _text(r.layout.name),
         str(r.gpus), r.started_at[:10]]
        for r in failed
    ]
    return lines + _table(header, rows) + [""]


def _legend() -> list[str]:
    return [
        "## How to read the tables",
        "",
        ("- A measured row is one configuration; with several ok runs it shows the median run by "
        "TFLOP/s/GPU (`runs` counts them) and links that run's record."),
        ("- Rows whose platform starts with `published:` are copied from the linked source "
        "(`results/published.toml`); tokens/s/GPU is derived from samples/s where the source "
        "gives samples/s, sequence length and GPU count."),
        ("- `% of peak` is TFLOP/s/GPU over the platform's dense peak for the precision used "
        "(no sparsity), in the row's FLOPs count:"),
        ("  `causal` = Megatron-Core >= 0.12, causal attention counted once (all measured rows); "
        "`non-causal` = Megatron <= 0.11, NeMo, dgxc (about 11 % more at 345M, 1.4 % at 175B); "
        "`recompute` = Narayanan et al. 2021, counts activation recompute (4/3 of non-causal); "
        "`unstated` = the source does not say. Compare across counts with tokens/s/GPU."),
        ("- fp8 rows (`fp8-delayed`, `fp8-current`) are measured against the dense fp8 peak, twice "
        "the bf16 one; their `% of peak` cell also gives the same TFLOP/s as a share of the bf16 "
        "peak, the figure to set beside bf16 rows."),
        ("- `engine`: for Megatron-Core, what built the layers (the record's `implementation`): "
        "`TE+apex` (Transformer Engine with apex's fused kernels, as in NGC images), `TE` "
        "(Transformer Engine without apex), `no TE` (torch layers with SDPA attention)."),
        ("- `reference TFLOP/s/GPU` is the expected causal TFLOP/s/GPU and relative tolerance from "
        "`results/reference_ranges.toml`; `check` flags measured rows outside it in bold, and "
        "`nox -s results -- --check` fails on them."),
        ("- `sweep`: the sweep id of the row's shown run (`labels.sweep` in its record), so rows "
        "measured side by side in one sweep can be told apart; hatched bars in the plots."),
        ("- `VP/CP/SP`: virtual pipeline chunks / context parallel / sequence parallel. "
        f"`{DASH}`: not used (measured) or not published."),
        "",
    ]


def _summary(report: Report, records_link: str) -> list[str]:
    rows = report.measured_rows
    if report.ok_runs == 0 and not report.failed:
        lines = [(f"**No measured runs yet**: `{records_link}/` holds no run records. The tables "
                 "below show published figures only.")]
    else:
        lines = [(f"Measured: {report.ok_runs + len(report.failed)} runs "
                 f"({report.ok_runs} ok in {len(rows)} configurations, "
                 f"{len(report.failed)} failed).")]
    flagged = report.flagged_rows
    if flagged:
        lines.append(f"**{len(flagged)} measured row(s) outside their reference range** "
                     "(bold in the `check` column).")
    if report.problems:
        lines.append(f"{len(report.problems)} file(s) in `{records_link}/` were skipped; "
                     "see the end.")
    return [" ".join(lines), ""]


SUMMARY_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("precision", False), ("hardware", False), ("platform", False),
    ("GPUs", True), ("layout", False), ("micro/global batch", True), ("TFLOP/s/GPU", True),
    ("% of peak", True), ("tokens/s/GPU", True), ("peak mem (GB)", True), ("notes", False),
    ("record", False),
)


def _percent(row: Row) -> str:
    """% of the precision's dense peak; an fp8 row also says its share of the bf16 peak."""
    if row.percent_of_bf16_peak is None:
        return _number(row.percent_of_peak, 1)
    return f"{_number(row.percent_of_peak, 1)} of fp8 ({_number(row.percent_of_bf16_peak, 1)} of bf16)"


def _best_section(report: Report, records_link: str) -> list[str]:
    rows = report.best_rows
    if not rows:
        return []
    cells = [
        [_text(display_name(row.model)), _text(row.precision), _text(hardware_name(row.accelerator)),
         _text(row.platform), _integer(row.gpus), _text(row.layout),
         f"{_integer(row.micro_batch)}/{_integer(row.global_batch)}",
         _number(row.tflops_per_gpu, 1), _percent(row),
         _number(row.tokens_per_s_per_gpu, 0), _number(row.peak_mem_gb, 1), _text(row.variant),
         _link(row.label, f"{records_link}/{row.link}")]
        for row in rows
    ]
    return ["## Best measured per model, precision and hardware", "",
            ("The measured row with the most TFLOP/s/GPU (causal count) of each model, precision "
             "and GPU model, from the full tables below: a figure from one GPU model never stands "
             "for another's, so each precision's rows on different hardware sit side by side. "
             "`notes` names an A/B setting a row ran with."),
            "", *_table(SUMMARY_COLUMNS, cells), "", *_unlike_note(rows)]


def _unlike_note(rows: Sequence[Row]) -> list[str]:
    """Say where one model's best rows on one GPU model ran on other hardware, GPU counts or
    batches: their precisions are then not compared like with like, and a reader should not rank
    them. Rows on other GPU models are apart already; a model with rows on several is named
    with the GPU model whose rows differ."""
    setups: dict[tuple[str, str], set[tuple[object, ...]]] = {}
    for row in rows:
        setups.setdefault((row.model, hardware_id(row.accelerator)), set()).add(
            (row.accelerator, row.gpus, row.micro_batch, row.global_batch))
    several = {model for model, _ in setups if sum(m == model for m, _ in setups) > 1}
    unlike = [display_name(model) + (f" on {hardware_name(hardware)}" if model in several else "")
              for (model, hardware), seen in setups.items() if len(seen) > 1]
    if not unlike:
        return []
    return [(f"Not like with like: the best rows of {', '.join(unlike)} ran on different "
             "hardware, GPU counts or batches, so their precisions are not compared here; the "
             "model's table below has the rows that share a setup."), ""]


def _ceiling_lines(plots: Sequence[PlotSpec]) -> list[str]:
    sources = sorted({spec.ceiling_source for spec in plots if spec.ceiling_source})
    if not sources:
        return []
    return ["Dashed line: the GEMM ceiling the smoke check measured (`python -m bench.train.smoke`, "
            "the median rate of 8192³ matrix products on one GPU), the most a GEMM-bound "
            "training step could reach there:", "", *(f"- {_with_code(source)}" for source in sources), ""]


@dataclass(frozen=True)
class Findings:
    """What the page shows beyond the tables: data-parallel scaling pairs, profiled runs, and the
    smoke reports' node checks; ``smoke_link`` is the smoke folder relative to the page."""

    scaling: tuple[ScalingPair, ...] = ()
    profiles: tuple[TimeRow, ...] = ()
    node_checks: tuple[NodeCheck, ...] = ()
    smoke_link: str = ""
    precisions: tuple[PrecisionGroup, ...] = ()
    memory_parts: tuple[PartsRow, ...] = ()
    fits: tuple[FitGroup, ...] = ()


def _memory_section(rows: Sequence[PartsRow], records_link: str) -> list[str]:
    """Bytes a parameter by part, measured rows then the published ones."""
    if not any(row.measured for row in rows):
        return []
    lines = ["## Bytes a parameter by part", "",
             "What rank 0 held after its first optimizer step, over its parameters "
             "(`bench/train/memory_parts.py`): weights (the model's parameters), gradients (the "
             "gradient buffers), master (the optimizer's master copies), moments (Adam's state "
             "and its scales); sharded parts (the distributed optimizer's) are rank 0's shard. "
             "Gradients include the fp32 copy of its shard's gradients that the distributed "
             "optimizer gives Adam (4/dp bytes over a bf16 buffer): made at the step, freed at the "
             "next step's zero_grad, so not held at the activation peak. "
             "Published rows give the parts their source counts (`published.toml`).", ""]
    header = [("precision", False), ("run or source", False), *((part, True) for part in PARTS),
              ("total", True)]
    body = [[_text(row.precision),
             _link(row.what, f"{records_link}/{row.link}" if row.measured else row.link),
             *(_number(part, 2) for part in row.parts), _number(row.total, 2)] for row in rows]
    return lines + _table(header, body) + [""]


def _precisions_section(groups: Sequence[PrecisionGroup], records_link: str) -> list[str]:
    """One small table per group of runs that differ only in precision or layers."""
    if not groups:
        return []
    lines = ["## Precisions side by side", "",
             "Runs of one campaign (or, outside a campaign file, one day) that differ only in "
             "precision or in what built the layers (TE, TE+apex, no TE): same model, layout, "
             "micro and global batch, GPU, data and iterations (an fp8 run at its larger default "
             "micro-batch is set beside a bf16 run at that micro-batch only), on one machine: "
             "the same GPUs by UUID, or for records without them runs less than an hour apart (a "
             "title that recurs names the day, minute or GPU that tells its tables apart). TFLOP/s per GPU "
             "(causal count), the ratio to the "
             f"group's {BASELINE} column, peak memory; each column links its record "
             "(`bench/results/precisions.py`).", ""]
    for group in groups:
        base = group.baseline
        runs = [c.run for c in group.columns]
        lines += [f"### {_text(group.title)}", ""]
        lines += _table([("", False), *((_link(_text(c.name), f"{records_link}/{c.run.run_id}.json"), True)
                                        for c in group.columns)], [
            ["TFLOP/s/GPU", *(_number(r.metrics.tflops_per_gpu, 1) for r in runs)],
            *([[f"× {BASELINE}", *(_number(r.metrics.tflops_per_gpu / base.run.metrics.tflops_per_gpu, 2)
                                   for r in runs)]] if base is not None else []),
            ["peak memory (GB)", *(_number(r.metrics.peak_mem_gb, 1) for r in runs)],
        ]) + [""]
    return lines


FIT_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("configuration", False), ("micro-batch", True), ("status", False), ("TFLOP/s/GPU", True),
    ("peak memory (GB)", True), ("day", False), ("record", False))


def _fit_cells(run: Record, configuration: str, records_link: str) -> list[str]:
    ok = run.metrics is not None
    return [_text(configuration), str(run.layout.micro_batch), "ok" if ok else "out of memory",
            _number(run.metrics.tflops_per_gpu, 1) if ok else "–",
            _number(run.metrics.peak_mem_gb, 1) if ok else "–", run.started_at[:10],
            _record_link(run, records_link)]


ACROSS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("configuration", False), ("layout", False), ("micro-batch", True), ("TFLOP/s/GPU", True),
    ("peak memory (GB)", True), ("day", False), ("record", False))


def _across_cells(run: Record, configuration: str, records_link: str) -> list[str]:
    assert run.metrics is not None  # best_layouts keeps runs that trained
    return [_text(configuration), run.layout.name, str(run.layout.micro_batch),
            _number(run.metrics.tflops_per_gpu, 1), _number(run.metrics.peak_mem_gb, 1),
            run.started_at[:10], _record_link(run, records_link)]


def _fits_section(groups: Sequence[FitGroup], records_link: str) -> list[str]:
    """What trained and what ran out of memory under --gpu-memory-cap."""
    if not groups:
        return []
    lines = ["## What fits a smaller GPU", "",
             "Megatron-Core runs planned and trained with `--gpu-memory-cap` (torch's allocator "
             "capped, docs/running.md), every one a row: the configuration (precision, layers, "
             "variant), micro-batch, whether it trained or ran out of memory, TFLOP/s per GPU "
             "(causal count) and peak memory. Whether a micro-batch fits is the same on any "
             "machine; TFLOP/s are the day's machine's, so compare them within a day "
             "(`bench/results/fits.py`).", ""]
    for group in groups:
        lines += [f"### {_text(group.title)}", ""]
        lines += _table(FIT_COLUMNS, [_fit_cells(row.run, row.configuration, records_link)
                                      for row in group.rows]) + [""]
        largest, fastest = group.largest(), group.fastest()
        for configuration, run in largest.items():
            best = fastest[configuration]
            lines.append(f"- {_text(configuration)}: largest micro-batch that trained "
                         f"{run.layout.micro_batch}; fastest {_number(best.metrics.tflops_per_gpu, 1)} "
                         f"TFLOP/s/GPU at micro-batch {best.layout.micro_batch} "
                         f"({_record_link(best, records_link)})")
        if not largest:
            lines.append("- Nothing trained under this cap.")
        lines.append("")
    for across in best_layouts(groups):
        lines += [f"### {_text(across.title)}: each configuration at its fastest layout", "",
                  "Where memory binds, a configuration that does not fit one layout may train in "
                  "another (tensor parallelism where data parallelism does not fit): the fastest "
                  "run of each, over the tables above, fastest first.", ""]
        lines += _table(ACROSS_COLUMNS, [_across_cells(row.run, row.configuration, records_link)
                                         for row in across.best]) + [""]
        if across.none_trained:
            lines += [f"- Trained in no layout: {', '.join(map(_text, across.none_trained))}.", ""]
    return lines


def _engine(run: Record) -> str:
    built_by = layers(run)
    return f"{run.engine} ({built_by})" if built_by else run.engine


def _record_link(run: Record, records_link: str) -> str:
    return _link(run.run_id, f"{records_link}/{run.run_id}.json")


SCALING_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("precision", False), ("engine", False), ("hardware", False),
    ("micro batch / batch per DP rank", True), ("layout, DP 1", False), ("GPUs, DP 1", True),
    ("TFLOP/s/GPU, DP 1", True), ("layout, DP N", False), ("GPUs, DP N", True),
    ("TFLOP/s/GPU, DP N", True), ("efficiency", True), ("record, DP 1", False),
    ("record, DP N", False),
)


def _scaling_cells(pair: ScalingPair, records_link: str) -> list[str]:
    base, scaled = pair.base, pair.scaled
    lay = base.layout
    return [_text(display_name(base.preset.name.lower())), _text(base.precision), _text(_engine(base)),
            _text(hardware_name(base.platform.accelerator)),
            f"{lay.micro_batch}/{lay.global_batch // lay.dp}", _text(lay.name), str(base.gpus),
            _number(_tflops(base), 1), _text(scaled.layout.name), str(scaled.gpus),
            _number(_tflops(scaled), 1), f"{pair.efficiency:.3f}",
            _record_link(base, records_link), _record_link(scaled, records_link)]


def _tflops(run: Record) -> float | None:
    return None if run.metrics is None else run.metrics.tflops_per_gpu


def _scaling_section(pairs: Sequence[ScalingPair], records_link: str) -> list[str]:
    if not pairs:
        return []
    return ["## Scaling", "",
            ("Each ok Megatron-Core configuration with data parallelism (DP N) beside the one-replica "
             "run (DP 1) it differs from in DP only: same model, precision, engine and what built "
             "its layers, platform and hardware, tensor/pipeline/context/sequence parallelism, "
             "micro-batch, batch per DP rank (global batch / DP), notes and campaign (runs "
             "without a campaign label pair with each other), and the same engine "
             "flags but those DP adds (runs of commits between which the kit's defaults changed "
             "do not pair). Each side is its configuration's median run, as in the tables below. "
             "`efficiency` = TFLOP/s/GPU at DP N / TFLOP/s/GPU at DP 1 (1.000: perfect scaling)."),
            "", *_table(SCALING_COLUMNS, [_scaling_cells(p, records_link) for p in pairs]), ""]


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
    precision = " ".join(filter(None, (run.precision, variant(settings(run)))))
    return [_text(display_name(run.preset.name.lower())), _text(run.layout.name), _text(precision),
            _text(_engine(run)), _text(hardware_name(run.platform.accelerator)),
            f"{row.step_ms:.1f}", *(_ms(row.classes[name], row.step_ms) for name, _ in TIME_CLASSES),
            _ms(row.profile.comm_total, row.step_ms), f"{row.profile.step_ms:.1f}",
            _record_link(run, records_link)]


def _time_section(rows: Sequence[TimeRow], records_link: str) -> list[str]:
    if not rows:
        return []
    steps = " or ".join(str(n) for n in sorted({row.profile.steps for row in rows}))
    sources = ", ".join(_text(s) for s in sorted({row.profile.source for row in rows}))
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
            "", *_table(TIME_COLUMNS, [_time_cells(row, records_link) for row in rows]), "",
            f"![Where a measured step's time goes](plots/{TIME_PLOT})", ""]


def _size(n: int) -> str:
    """Bytes as ``64 MiB`` / ``1 GiB`` (binary units, as the smoke check sizes its tensors)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _machine(check: NodeCheck) -> str:
    return _text(check.accelerator.model if check.accelerator else check.gpu_model)


def _report_link(check: NodeCheck, smoke_link: str) -> str:
    return _link(check.file.rsplit("/", 1)[-1], f"{smoke_link}/{check.file}")


def _link_cells(check: NodeCheck) -> list[str]:
    """The nominal link and the largest size's bus bandwidth as a share of it."""
    link = check.accelerator.link if check.accelerator else None
    if link is None:
        return [DASH, DASH]
    share = (f"{100 * max(check.all_reduce, key=lambda a: a.bytes).busbw_gbps / link.gbps:.1f}"
             if check.all_reduce else DASH)
    return [f"{link.gbps:.0f} ({_text(link.name)})", share]


def _all_reduce_table(checks: Sequence[NodeCheck], smoke_link: str) -> list[str]:
    sizes = sorted({a.bytes for check in checks for a in check.all_reduce})
    header = (("machine", False), ("GPUs", True), ("date", False), ("NCCL", False),
              *((f"{_size(n)} (GB/s)", True) for n in sizes),
              ("link, one way (GB/s)", True), ("largest size / link (%)", True), ("report", False))
    rows = []
    for check in checks:
        measured = {a.bytes: a.busbw_gbps for a in check.all_reduce}
        rows.append([_machine(check), str(check.gpus), _text(check.date), _text(check.nccl_version),
                     *(_number(measured.get(n), 1) for n in sizes), *_link_cells(check),
                     _report_link(check, smoke_link)])
    return _table(header, rows)


def _gemm_table(checks: Sequence[NodeCheck], smoke_link: str) -> list[str]:
    shapes = list(dict.fromkeys(name for check in checks for name in check.shapes))
    header = (("machine", False), ("GPUs", True), ("date", False),
              ("bf16 8192³, median per GPU", True), *((_text(name), True) for name in shapes),
              ("report", False))
    rows = [[_machine(check), str(check.gpus), _text(check.date), _number(check.gemm_tflops, 1),
             *(_number(check.shapes.get(name), 1) for name in shapes),
             _report_link(check, smoke_link)] for check in checks]
    return _table(header, rows)


def _link_sources(checks: Sequence[NodeCheck]) -> list[str]:
    accelerators = {c.accelerator.name: c.accelerator for c in checks if c.accelerator}
    return [f"- {_text(a.model)}: {_text(a.link.name)}, {a.link.gbps:.0f} GB/s each way "
            f"({_text(a.link.source)})"
            for _, a in sorted(accelerators.items()) if a.link is not None]


def _node_section(checks: Sequence[NodeCheck], smoke_link: str) -> list[str]:
    if not checks:
        return []
    return ["## Node checks", "",
            ("From the smoke check's reports (`python -m bench.train.smoke`, kept with the dated "
             "report of the campaign that ran it), one row per report. All-reduce: the bus "
             "bandwidth (nccl-tests' convention) of bf16 all-reduces over all the machine's GPUs "
             "per size, set beside the link's nominal bandwidth per GPU in one direction from the "
             "accelerator's data file: NCCL's bus bandwidth counts what each GPU sends one way, so "
             "the one-way figure, not the bidirectional one datasheets headline, is its ceiling. "
             f"`{DASH}`: not measured (one GPU crosses no link; reports before the check timed bf16 "
             "sizes) or no link figure in the data."), "",
            *_all_reduce_table(checks, smoke_link), "", *_link_sources(checks), "",
            ("GEMM ceilings, TFLOP/s: the bf16 8192³ product's median over the GPUs, then, where "
             "the report has them, the preset shapes (`2.7b fc1`: the 2.7b preset's first MLP "
             "GEMM at 8192 tokens) in bf16 and fp8 on the first GPU."), "",
            *_gemm_table(checks, smoke_link), ""]


LOSS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("precision", False), ("runs", True), ("final loss of each run", True),
    ("mean final loss", True), ("s.d. between runs", True), ("s.e. in window", True),
    (f"vs {BASELINE}", True), ("± s.e.", True), (f"vs {BASELINE} (%)", True),
    ("difference / s.e.", True), ("iterations", True),
)


def _final_losses(treatment: Treatment, records_link: str) -> str:
    """Each run's final loss, oldest first, linked to its record."""
    return ", ".join(_link(f"{curve.final_loss:.4f}", f"{records_link}/{curve.run_id}.json")
                     for curve in treatment.curves)


def _against_baseline(treatment: Treatment, baseline: Treatment | None) -> list[str]:
    """The difference to the baseline's mean, its error (marked where only the windows' floor),
    in % and in errors; blank with no baseline in the group, a dash on the baseline's row."""
    if baseline is None:
        return [""] * 4
    if baseline is treatment:
        return [DASH] * 4
    diff = difference(treatment, baseline)
    error = f"{diff.error:.4f}" + (" (floor)" if diff.floor else "")
    ratio = f"{diff.absolute / diff.error:+.1f}" if diff.error else DASH
    return [f"{diff.absolute:+.4f}", error, f"{diff.percent:+.2f} %", ratio]


def _loss_table(spec: LossPlot, records_link: str) -> list[str]:
    rows = [[_text(t.label), str(t.runs), _final_losses(t, records_link), f"{t.final_loss:.4f}",
             _number(t.spread, 4), f"{t.window_error:.4f}", *_against_baseline(t, spec.baseline),
             str(len(t.curves[0].losses))]
            for t in spec.treatments]
    return _table(LOSS_COLUMNS, rows)


def _spread_note(spec: LossPlot) -> str:
    """What the runs of this group say about the spread between runs."""
    if spec.repeat_range is None:
        return ("Every precision here ran once: each error is the windows' floor, and a difference "
                "smaller than the spread between repeated runs of one precision is not resolved.")
    window = max(curve.final_loss_error for curve in spec.curves)
    return (f"Runs of one precision here differ by up to {spec.repeat_range:.4f} in final loss, "
            f"against a run's window error of at most {window:.4f}: a precision that ran once has "
            "only that floor as its uncertainty, and a difference smaller than the spread between "
            "runs is not resolved.")


def _loss_section(losses: Sequence[LossPlot], records_link: str) -> list[str]:
    if not losses:
        return []
    lines = ["## Loss curves", "",
             (f"Ok runs that logged the loss of every iteration (at least {MIN_LOSSES}) and trained "
              "the same model, layout, batch, sequence length, iterations and settings on the same "
              "data and accelerator, in different precisions, every run of each: the `lm loss` of "
              f"every iteration (thin) and its {SMOOTH_WINDOW}-iteration mean (lines). The runs of "
              "one precision share a colour, its first run solid, the second dotted and later ones "
              "dash-dotted; the legend gives each precision's runs and mean final loss."), ""]
    for spec in losses:
        lines += [f"![{_text(spec.title)}](plots/{spec.filename})", "",
                  f"Shared: {_with_code(spec.setup)}.", ""]
        lines += _loss_table(spec, records_link)
        lines += ["", (f"`final loss of each run`: the mean `lm loss` of its last {FINAL_WINDOW} "
                       "iterations, oldest run first, each linked to its record. `mean final loss` "
                       "is their mean, `s.d. between runs` their sample standard deviation (two runs "
                       "or more) and `s.e. in window` the mean's standard error from the windows "
                       f"alone (each window's standard deviation over √{FINAL_WINDOW}: the noise "
                       "between batches, not between runs, so a floor). "
                       f"`vs {BASELINE}` is the mean minus {BASELINE}'s (negative: lower), `± s.e.` "
                       "its standard error and `difference / s.e.` the difference in those errors: "
                       f"within about ±2 it is noise. Where the precision and {BASELINE} both ran "
                       "twice or more the error is from the spread between runs, √(s_t²/n_t + "
                       f"s_b²/n_b) (s: s.d. between runs, n: runs, t: the precision, b: {BASELINE}); "
                       "otherwise it is the windows' errors combined, marked `(floor)`: the true "
                       "error is larger."),
                  "", _spread_note(spec)]
        if spec.baseline is None:
            lines.append(f"This group has no {BASELINE} run: its differences are blank.")
        lines.append("")
    return lines


def render(report: Report, plots: Sequence[PlotSpec], records_link: str,
           losses: Sequence[LossPlot] = (), findings: Findings = Findings()) -> str:
    """The whole page; ``records_link`` is the records directory relative to the page."""
    lines = [
        "# Results",
        "",
        ("Generated by `nox -s results` (`python -m bench results`) from the run records in "
        f"`{records_link}/`, `published.toml` and `reference_ranges.toml`. Do not edit: the page "
        "and its plots are regenerated byte for byte from those files."),
        "",
        *_summary(report, records_link),
        *_best_section(report, records_link),
        *_scaling_section(findings.scaling, records_link),
        *_time_section(findings.profiles, records_link),
        *_node_section(findings.node_checks, findings.smoke_link),
        *_precisions_section(findings.precisions, records_link),
        *_fits_section(findings.fits, records_link),
        *_memory_section(findings.memory_parts, records_link),
        *_legend(),
    ]
    for table in report.tables:
        lines += _model_section(table, records_link)
    if plots:
        lines += ["## Plots", ""]
        lines += _ceiling_lines(plots)
        for spec in plots:
            lines += [f"![{_text(spec.title)}](plots/{spec.filename})", ""]
    lines += _loss_section(losses, records_link)
    lines += _failed_section(report.failed, records_link)
    lines += ["## Skipped files", ""]
    if report.problems:
        lines += [f"- {_code(p.file)}: {_plain(p.message)}" for p in report.problems] + [""]
    else:
        lines += ["None.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"

