"""The targets the kit's numbers are held to (``results/targets.toml``), each beside the fastest
headline-grade configuration that answers it: its figure (median, n, lowest–highest), its
hardware, layout and recipe, its like-for-like partner, and whether it is met.

A figure target (``mfu``: % of the dense bf16 peak; ``tflops``: TFLOP/s per GPU) is answered by
the measured rows of its model, GPU count, precision (and layout, where it names one) that are
headline grade (:mod:`bench.records.headline`); a ratio target by the columns of the precisions'
section (:mod:`bench.results.precisions`) of its model, GPU count and precision whose bf16 partner
differs in the precision alone, both sides headline grade. A quick row never answers a target.
A figure's partner differs in the precision or the layers alone, or, where its batch has no such
key, in the global batch alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, model_validator

from bench.config.schema import Positive, Strict, load_toml
from bench.records.headline import Grade, is_headline_grade, long_runs
from bench.records.identity import config_key
from bench.results.aggregate import Row
from bench.results.best import hardware_cell
from bench.results.precisions import Column, PrecisionGroup, partner
from bench.results.spread import Figure, Ratio
from bench.results.table import DASH, cell_code, link, number, table, text


class Target(Strict):
    """One target: exactly one of ``mfu``, ``tflops`` and ``ratio``."""

    name: str = Field(pattern=r"\S")
    model: str
    gpus: int = Field(ge=1)
    precision: str
    layout: str | None = None  # a layout name's prefix, e.g. tp1pp1dp4
    mfu: Positive | None = None
    tflops: Positive | None = None
    ratio: Positive | None = None
    anchor: str = Field(pattern=r"\S")

    @model_validator(mode="after")
    def _one_aim(self) -> Target:
        aims = [name for name in ("mfu", "tflops", "ratio") if getattr(self, name) is not None]
        if len(aims) != 1:
            raise ValueError(f"give exactly one of mfu, tflops and ratio (got {', '.join(aims) or 'none'})")
        return self

    @property
    def aim(self) -> str:
        if self.mfu is not None:
            return f"≥ {self.mfu:g} % MFU"
        if self.tflops is not None:
            return f"≥ {self.tflops:g} TFLOP/s/GPU"
        return f"≥ {self.ratio:.2f}× bf16"


class TargetsFile(Strict):
    target: tuple[Target, ...] = Field(min_length=1)


def load_targets(path: Path) -> tuple[Target, ...]:
    """``results/targets.toml``; a DataError names the file, the entry and the key."""
    return load_toml(path, TargetsFile).target


@dataclass(frozen=True)
class Answer:
    """What answers a target: the cells of its row and whether it is met."""

    measured: str
    where: str
    partner: str
    record: str
    met: bool | None  # None: nothing answers it yet


COLUMNS: tuple[tuple[str, bool], ...] = (
    ("target", False), ("aim", False), ("measured (median, n, lowest–highest)", True),
    ("hardware, layout, micro/global batch, recipe", False),
    ("like-for-like partner: this over it", False),
    ("met", False), ("record", False), ("anchor", False))


def _headline_rows(target: Target, rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows
            if row.grade is Grade.HEADLINE and row.model == target.model and row.gpus == target.gpus
            and row.precision == target.precision
            and (target.layout is None or (row.layout or "").startswith(target.layout))]


def _column_of(key: str, groups: Sequence[PrecisionGroup]) -> tuple[Column, PrecisionGroup] | None:
    return next(((column, group) for group in groups for column in group.columns
                 if config_key(column.run).digest == key), None)


def _partner_text(column: Column, group: PrecisionGroup, groups: Sequence[PrecisionGroup]) -> str:
    """The partner of ``column`` in its group; where it has none there, a key of another group
    that differs from it in the global batch alone (a batch's gain is a recipe's, said so)."""
    found = partner(column, group) or partner(
        column, PrecisionGroup("", tuple(c for g in groups for c in g.columns)))
    if found is None or not is_headline_grade(found[0].runs):
        return DASH
    other, thing = found
    ratio = Ratio.of(long_runs(column.runs), long_runs(other.runs))
    return f"{text(other.name)} {cell_code(config_key(other.run).digest)}: {ratio.text()} ({thing})"


def _where(row: Row) -> str:
    recipe = f", {row.recipe}" if row.recipe else ""
    return f"{hardware_cell(row)}, {row.layout}, {row.micro_batch}/{row.global_batch}{recipe}"


def _figure_answer(target: Target, rows: Sequence[Row], groups: Sequence[PrecisionGroup],
                   records_link: str) -> Answer | None:
    candidates = _headline_rows(target, rows)
    if not candidates:
        return None
    best = max(candidates, key=lambda row: (row.best_figure or row.figure).median)  # type: ignore[union-attr]
    figure = best.best_figure or best.figure
    assert figure is not None  # a measured row has its figure
    reached = (figure.median / best.tflops_per_gpu * best.percent_of_peak  # type: ignore[operator]
               if target.mfu is not None else figure.median)
    shown = (f"{figure.text()}, {number(reached, 1)} % MFU" if target.mfu is not None else figure.text())
    found = _column_of(best.key, groups)
    return Answer(shown, text(_where(best)), _partner_text(*found, groups) if found else DASH,
                  link(best.label, f"{records_link}/{best.link}"),
                  reached >= (target.mfu if target.mfu is not None else target.tflops))  # type: ignore[operator]


def _ratio_answer(target: Target, groups: Sequence[PrecisionGroup], records_link: str) -> Answer | None:
    pairs = []
    for group in groups:
        for column in group.columns:
            run = column.run
            if (run.preset.name, run.gpus, run.precision) != (target.model, target.gpus, target.precision):
                continue
            found = partner(column, group)
            if found and found[1] == "precision" and is_headline_grade(column.runs) \
                    and is_headline_grade(found[0].runs):
                pairs.append((Ratio.of(long_runs(column.runs), long_runs(found[0].runs)), column, found[0]))
    if not pairs:
        return None
    ratio, column, other = max(pairs, key=lambda pair: pair[0].value)
    return Answer(f"{ratio.text()} ({Figure.of_runs(long_runs(column.runs)).text()} over "
                  f"{Figure.of_runs(long_runs(other.runs)).text()})",
                  text(f"{column.name}, {column.run.layout.name}, "
                       f"{column.run.layout.micro_batch}/{column.run.layout.global_batch}"),
                  f"{text(other.name)} {cell_code(config_key(other.run).digest)} (precision)",
                  link(column.run.run_id, f"{records_link}/{column.run.run_id}.json"),
                  ratio.value >= target.ratio)  # type: ignore[operator]


def section(targets: Sequence[Target], rows: Sequence[Row], groups: Sequence[PrecisionGroup],
            records_link: str) -> list[str]:
    """The targets' table: one row per target, in the file's order."""
    if not targets:
        return []
    cells = []
    for target in targets:
        answer = (_ratio_answer(target, groups, records_link) if target.ratio is not None
                  else _figure_answer(target, rows, groups, records_link))
        if answer is None:
            answer = Answer("no headline-grade configuration yet", DASH, DASH, DASH, None)
        met = "not yet measured" if answer.met is None else ("met" if answer.met else "not met")
        cells.append([text(target.name), text(target.aim),
                      answer.measured, answer.where, answer.partner, met, answer.record,
                      text(target.anchor)])
    return ["## Targets", "",
            ("Each target of `targets.toml` beside the fastest headline-grade configuration that "
             "answers it (n ≥ 3 runs of ≥ 20 measured steps on one configuration key; a quick row "
             "never does), with that key's like-for-like partner from the precisions' section: a "
             "key that differs in the precision, or in what built the layers, alone; where none "
             "does, a key that differs in the global batch alone. A ratio target takes the "
             "precision's partner only. A recipe (dropout 0) is named with its row."), "",
            *table(COLUMNS, cells), ""]
