"""Markdown for ``results/README.md``: the best row per model and precision, then one table per
model size, the plots with the measured GEMM ceilings, loss curves by precision, failed runs,
skipped files.

Every number column is right-aligned with a fixed number of decimals (samples/s 2, tokens/s 0,
TFLOP/s 1, % 1, GB 1, loss 4, loss difference in % 2); units are in the headers; a dash means
"not used" for measured rows and "not published" for published ones. No timestamps: the page
depends only on its inputs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bench.records.record import Record
from bench.results.aggregate import ModelTable, Report, Row, display_name
from bench.results.data import CONVENTION_LABELS
from bench.results.hardware import hardware_name
from bench.results.losses import (
    BASELINE,
    FINAL_WINDOW,
    MIN_LOSSES,
    SMOOTH_WINDOW,
    LossPlot,
    difference,
    difference_error,
)
from bench.results.plots import PlotSpec
from bench.results.runs import failure_reason, label_of

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
    return ["## Best measured per model and precision", "",
            ("The measured row with the most TFLOP/s/GPU (causal count) of each model and "
             "precision, from the full tables below; `notes` names an A/B setting it ran with."),
            "", *_table(SUMMARY_COLUMNS, cells), "", *_unlike_note(rows)]


def _unlike_note(rows: Sequence[Row]) -> list[str]:
    """Say where one model's best rows ran on other hardware, GPU counts or batches: their
    precisions are then not compared like with like, and a reader should not rank them."""
    setups: dict[str, set[tuple[object, ...]]] = {}
    for row in rows:
        setups.setdefault(row.model, set()).add(
            (row.accelerator, row.gpus, row.micro_batch, row.global_batch))
    unlike = [display_name(model) for model, seen in setups.items() if len(seen) > 1]
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


LOSS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("precision", False), ("final loss", True), ("± s.e.", True), (f"vs {BASELINE}", True),
    (f"vs {BASELINE} (%)", True), ("difference / s.e.", True), ("iterations", True), ("record", False),
)


def _loss_table(spec: LossPlot, records_link: str) -> list[str]:
    baseline = spec.baseline
    rows = []
    for curve in spec.curves:
        delta = percent = ratio = ""  # no baseline in the group: against nothing
        if baseline is curve:
            delta = percent = ratio = DASH
        elif baseline is not None:
            absolute, relative = difference(curve, baseline)
            error = difference_error(curve, baseline)
            delta, percent = f"{absolute:+.4f}", f"{relative:+.2f} %"
            ratio = f"{absolute / error:+.1f}" if error else DASH
        rows.append([_text(curve.precision), f"{curve.final_loss:.4f}",
                     f"{curve.final_loss_error:.4f}", delta, percent, ratio,
                     str(len(curve.losses)),
                     _link(curve.run_id, f"{records_link}/{curve.run_id}.json")])
    return _table(LOSS_COLUMNS, rows)


def _loss_section(losses: Sequence[LossPlot], records_link: str) -> list[str]:
    if not losses:
        return []
    lines = ["## Loss curves", "",
             (f"Ok runs that logged the loss of every iteration (at least {MIN_LOSSES}) and trained "
              "the same model, layout, batch, sequence length, iterations and settings on the same "
              "data and accelerator, in different precisions (the newest run of each precision): "
              f"the `lm loss` of every iteration (thin) and its {SMOOTH_WINDOW}-iteration mean "
              "(solid)."), ""]
    for spec in losses:
        lines += [f"![{_text(spec.title)}](plots/{spec.filename})", "",
                  f"Shared: {_with_code(spec.setup)}.", ""]
        lines += _loss_table(spec, records_link)
        lines += ["", (f"Final loss: the mean `lm loss` of a run's last {FINAL_WINDOW} iterations, "
                       "with its standard error (the window's standard deviation over "
                       f"√{FINAL_WINDOW}: the noise between batches); `vs {BASELINE}` is it minus "
                       f"{BASELINE}'s final loss (negative: lower), and `difference / s.e.` that "
                       "difference in standard errors of the difference. Within about ±2 it is "
                       "noise; one run per precision shows no seed-to-seed spread, so even a "
                       "larger one is not a ranking of precisions.")]
        if spec.baseline is None:
            lines.append(f"This group has no {BASELINE} run: its differences are blank.")
        lines.append("")
    return lines


def render(report: Report, plots: Sequence[PlotSpec], records_link: str,
           losses: Sequence[LossPlot] = ()) -> str:
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

