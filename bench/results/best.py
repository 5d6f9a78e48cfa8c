"""The page's best rows: the fastest headline-grade configuration per model, precision (or
recipe) and hardware, and *best vs best*, each precision's best set against bf16's best on the same
hardware, a table of its own because the two rows may differ in layout, batch and more.

Only headline-grade rows (:mod:`bench.records.headline`) are ranked: a quick row is never a best.
A like-for-like ratio, two keys that differ in the compared thing only, is in the precisions'
section (:mod:`bench.results.precisions`), never here.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.results.aggregate import Report, Row
from bench.results.hardware import hardware_id, hardware_name
from bench.results.losses import BASELINE
from bench.results.table import cell_code, integer, link, number, table, text
from bench.results.words import cap_words, display_name

SUMMARY_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("precision", False), ("recipe", False), ("hardware", False), ("platform", False),
    ("GPUs", True), ("layout", False), ("micro/global batch", True), ("TFLOP/s/GPU", True),
    ("% of peak", True), ("tokens/s/GPU", True), ("peak mem (GB)", True), ("notes", False),
    ("configuration key", False), ("record", False),
)
BEST_VS_BEST_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("model", False), ("hardware", False), ("precision and recipe", False), ("TFLOP/s/GPU", True),
    ("key", False), (f"best {BASELINE} TFLOP/s/GPU", True), (f"{BASELINE} key", False),
    ("best / best", True),
)


def tflops_cell(row: Row) -> str:
    """A measured row's median TFLOP/s/GPU with its run count and spread; a published figure."""
    return number(row.tflops_per_gpu, 1) if row.figure is None else row.figure.text()


def percent_cell(row: Row) -> str:
    """% of the precision's dense peak; an fp8 row also says its share of the bf16 peak."""
    if row.percent_of_bf16_peak is None:
        return number(row.percent_of_peak, 1)
    return f"{number(row.percent_of_peak, 1)} of fp8 ({number(row.percent_of_bf16_peak, 1)} of bf16)"


def hardware_cell(row: Row) -> str:
    return hardware_name(row.accelerator) + cap_words(row.accelerator, row.memory_cap_gb)


def section(report: Report, records_link: str) -> list[str]:
    """The best table (or why there is none), then best vs best."""
    rows = report.best_rows
    head = ["## Best measured per model, precision and hardware", "",
            ("The headline-grade row (n ≥ 3 runs of ≥ 20 measured steps on one configuration key) "
             "with the most median TFLOP/s/GPU (causal count, of its long runs) of each model, "
             "precision or recipe, and GPU model, from the full tables below: a figure from one GPU "
             "model never stands for another's, a GPU run under `--gpu-memory-cap` is its own "
             "hardware (`capped at 80 GB`), and a quick row is never a best. "
             f"{report.quick_rows} of {len(report.measured_rows)} measured rows are quick."), ""]
    if not rows:
        return [*head, "No configuration is headline grade yet.", ""]
    cells = [
        [text(display_name(row.model)), text(row.precision), text(row.recipe), text(hardware_cell(row)),
         text(row.platform), integer(row.gpus), text(row.layout),
         f"{integer(row.micro_batch)}/{integer(row.global_batch)}",
         row.best_figure.text() if row.best_figure else tflops_cell(row), percent_cell(row),
         number(row.tokens_per_s_per_gpu, 0), number(row.peak_mem_gb, 1), text(row.variant),
         cell_code(row.key), link(row.label, f"{records_link}/{row.link}")]
        for row in rows
    ]
    return [*head, *table(SUMMARY_COLUMNS, cells), "", *_unlike_note(rows), *_best_vs_best(rows)]


def _hardware_key(row: Row) -> tuple[str, str, str | None]:
    return row.model, hardware_id(row.accelerator), row.memory_cap_gb


def _best_vs_best(rows: Sequence[Row]) -> list[str]:
    """Each best row beside the plain bf16 best of its model and hardware: not like for like."""
    baselines = {_hardware_key(r): r for r in rows if r.precision == BASELINE and not r.recipe}
    pairs = [(row, baselines[_hardware_key(row)]) for row in rows
             if row.precision != BASELINE or row.recipe if _hardware_key(row) in baselines]
    if not pairs:
        return []
    cells = [[text(display_name(row.model)), text(hardware_cell(row)),
              text(" ".join(filter(None, (row.precision, row.recipe)))), row.best_figure.text(),  # type: ignore[union-attr]
              cell_code(row.key), base.best_figure.text(), cell_code(base.key),  # type: ignore[union-attr]
              f"{row.best_figure.median / base.best_figure.median:.2f}"]  # type: ignore[union-attr]
             for row, base in pairs]
    return ["### Best vs best", "",
            ("Each best row above over the plain bf16 best of its model and hardware: the ratio of "
             "the two medians, **not like for like** (the two keys may differ in layout, batch, "
             "settings and recipe, not only in precision), so it says what the fastest of each "
             "reached, never what the precision alone gains; the precisions' section has the "
             "like-for-like ratios."), "", *table(BEST_VS_BEST_COLUMNS, cells), ""]


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
