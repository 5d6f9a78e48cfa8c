"""Precisions side by side: the runs of one setup that differ only in precision or in what built
the layers, one small table each, so that "fp8 is 1.23x bf16" is read from records, not typed.

Ok Megatron-Core records are grouped by setup: preset, layout, micro and global batch, the GPU
model with its memory cap (a run under ``--gpu-memory-cap`` is other hardware), data (mock, or the
corpus's name), and with ``by_commit`` the kit commit: fp8 is set beside bf16 only at the same
batch, so an fp8 run at its larger default micro-batch (``bench.planning.microbatch``) needs a bf16
run given that micro-batch. Within a group each column is one configuration key
(:func:`bench.records.identity.config_key`): a precision, with the layers' builder added where a
group holds more than one (``bf16 TE``, ``bf16 TE+apex``, ``msamp-o2 TE modules``), the variant where
one is set, and the key where two columns would share a name. One claim has one figure: the median
TFLOP/s/GPU with its run count and spread (:class:`bench.results.spread.Figure`). A ratio is like
for like: to a bf16 column whose key differs from the column's in the precision alone, or in what
built the layers alone (:data:`COMPARED_PARTS`), named with its key, and drawn only between
headline-grade columns (:func:`bench.results.spread.ratio_text`). A recipe that changes the
training math (:func:`bench.results.words.recipe`) is said so in its column. The title names the
hardware the runs ran on, never a campaign's name. A group of two or more columns is a table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS
from bench.planning.engines.registry import ENGINES
from bench.records.identity import config_key, differences, key_fields
from bench.records.record import Record
from bench.results.aggregate import median_run
from bench.results.losses import BASELINE  # the precision others are set against
from bench.results.spread import RATIO_WORDS, Figure, commits_words, kit_commit, ratio_text
from bench.results.table import cell_code, heading, link, number, table, text
from bench.results.words import (
    CAP_KEY,
    MODULES_KEY,
    TE_MODULES,
    group_title,
    layers,
    model_sort_key,
    recipe,
    settings,
    variant,
)

# The parts of a configuration key (bench.records.identity.key_fields) that are the precision, what
# built the layers, or the global batch; a name ending in * is a prefix. A like-for-like ratio
# differs in one set. A group holds one batch, so its ratios are of the precision or the layers;
# the targets' section (bench.results.targets) looks across groups for a global batch's partner.
COMPARED_PARTS = {
    "precision": ("precision", "argv.--bf16", "argv.--fp16", "argv.--fp8-*", "argv.--kit-msamp*",
                  "env.MSAMP_*", "settings.msamp_*"),
    "layers": ("implementation", "argv.--transformer-impl", "argv.--no-persist-layer-norm",
               "argv.--no-rope-fusion", "argv.--no-masked-softmax-fusion", "argv.--kit-attention",
               "settings.msamp_modules", "software.apex", "software.transformer_engine"),
    "global batch": ("layout.global_batch", "argv.--global-batch-size"),
}


@dataclass(frozen=True)
class Column:
    name: str  # precision, then the layers and variant where they tell columns apart
    runs: tuple[Record, ...]

    @property
    def run(self) -> Record:
        """The median run, whose record the column links."""
        return median_run(self.runs)


@dataclass(frozen=True)
class PrecisionGroup:
    title: str
    columns: tuple[Column, ...]


def _key(run: Record, by_commit: bool) -> tuple:
    data = run.data.name if run.data is not None and run.data.kind == "real" else "mock"
    lay = run.layout
    return (run.preset.name, lay.name, lay.micro_batch, lay.global_batch, run.platform.accelerator,
            run.variant.get(CAP_KEY), data, kit_commit(run) if by_commit else None)


def _title(runs: Sequence[Record]) -> str:
    run, lay = runs[0], runs[0].layout
    return (group_title(run, f"micro/global batch {lay.micro_batch}/{lay.global_batch}")
            + f", {commits_words(runs)}")


def _name(run: Record, builders: int) -> str:
    # The cap is in the title; TE's modules around MS-AMP's linears are in the layers' name.
    hidden = {CAP_KEY, MODULES_KEY} if layers(run) == TE_MODULES else {CAP_KEY}
    shown = {key: value for key, value in settings(run).items() if key not in hidden}
    return " ".join(filter(None, (run.precision, layers(run) if builders > 1 else "", variant(shown))))


def compared(part: str) -> str | None:
    """What a difference between two keys (:func:`bench.records.identity.differences`) compares:
    ``precision``, ``layers`` or ``global batch``; None for anything else (a version, a setting,
    the micro-batch)."""
    for thing, parts in COMPARED_PARTS.items():
        if part in parts or part.startswith(tuple(p[:-1] for p in parts if p.endswith("*"))):
            return thing
    return None


def like_for_like(run: Record, base: Record) -> str | None:
    """The one thing two runs' keys differ in (``precision``, ``layers`` or ``global batch``), or
    None where they differ in anything else as well (or in two of them)."""
    things = {compared(part) for part in differences(run, base) if not _unrecorded(part, run, base)}
    return things.pop() if len(things) == 1 and None not in things else None


def _unrecorded(part: str, run: Record, base: Record) -> bool:
    """Whether ``part`` is a software version one of the two records does not carry (records made
    before the kit recorded Transformer Engine's version): unknown there, so not a difference to
    compare, though it keeps the two keys apart."""
    name = part.removeprefix("software.")
    return name != part and any(name not in key_fields(r)["software"] for r in (run, base))


def side_by_side(runs: Sequence[Record], by_commit: bool = False) -> list[PrecisionGroup]:
    """The groups of two or more columns, in model-size order, then by title."""
    grouped: dict[tuple, list[Record]] = defaultdict(list)
    for run in runs:
        if run.ok and ENGINES[run.engine].kit_layers:
            grouped[_key(run, by_commit)].append(run)
    order = {p: i for i, p in enumerate(PRECISIONS)}
    groups = []
    for members in grouped.values():
        builders = len({layers(run) for run in members})
        columns: dict[str, list[Record]] = defaultdict(list)
        for run in members:  # a column is one key; a name two keys share gets the key's digest
            columns[_name(run, builders)].append(run)
        columns = _one_key_each(columns)
        if len(columns) < 2:
            continue
        ordered = sorted((Column(name, tuple(sorted(col, key=lambda r: r.run_id)))
                          for name, col in columns.items()),
                         key=lambda c: (order.get(c.run.precision, len(order)), c.name))
        groups.append(PrecisionGroup(_title(members), tuple(ordered)))
    return sorted(groups, key=lambda g: (model_sort_key(g.columns[0].run.preset.name), g.title))


def _one_key_each(columns: dict[str, list[Record]]) -> dict[str, list[Record]]:
    split: dict[str, list[Record]] = {}
    for name, runs in columns.items():
        keys: dict[str, list[Record]] = defaultdict(list)
        for run in runs:
            keys[config_key(run).digest].append(run)
        for digest, keyed in keys.items():
            split[name if len(keys) == 1 else f"{name} [{digest}]"] = keyed
    return split


def section(groups: Sequence[PrecisionGroup], records_link: str) -> list[str]:
    """One small table per group of runs that differ only in precision or layers."""
    if not groups:
        return []
    lines = ["## Precisions side by side", "",
             "Runs of one model, layout, micro and global batch, GPU model and memory cap and data "
             "(an fp8 run at its larger default micro-batch is set beside a bf16 run at that "
             "micro-batch only). A column is every run of one configuration key: its median "
             "TFLOP/s per GPU (causal count) with the run count, lowest–highest and CV, and its "
             f"ratio to a {BASELINE} column whose key differs from its own in one thing only, the "
             "precision or what built the layers (TE, TE+apex, no TE, TE modules: MS-AMP's FP8 "
             "linears among Transformer Engine's modules), named with that key; `not like for "
             "like` where no column differs in that alone (another version, setting or recipe). "
             "A recipe (MS-AMP's modes, fp4, the paper's optimizer states, dropout 0) changes the "
             "training math: its ratio says what the recipe gains, not what the number format "
             "does. Each column links its median run's record (`bench/results/precisions.py`). "
             + RATIO_WORDS, ""]
    for group in groups:
        lines += [*heading(group.title), *_group_table(group, records_link), ""]
    return lines


def partner(column: Column, group: PrecisionGroup) -> tuple[Column, str] | None:
    """The group's bf16 column whose key differs from ``column``'s in one compared thing
    (:data:`COMPARED_PARTS`), with that thing; None where there is none. Of several, the one
    whose key differs in the fewest parts (a partner that also differs in a recorded version
    is the farther), then the first in the group's order."""
    found = [(len(differences(column.run, other.run)), i, other, thing)
             for i, other in enumerate(group.columns)
             if other is not column and other.run.precision == BASELINE
             and (thing := like_for_like(column.run, other.run)) is not None]
    if not found:
        return None
    *_, other, thing = min(found, key=lambda f: f[:2])
    return other, thing


def _ratio_cell(column: Column, group: PrecisionGroup) -> str:
    found = partner(column, group)
    if found is None:
        return "1" if column.run.precision == BASELINE else "not like for like"
    other, thing = found
    return f"{ratio_text(column.runs, other.runs)} ({thing}, vs {config_key(other.run).digest})"


def _group_table(group: PrecisionGroup, records_link: str) -> list[str]:
    """A column per key: TFLOP/s per GPU, the like-for-like ratio to a bf16 column, the key, the
    recipe, peak memory."""
    runs = [c.run for c in group.columns]
    header = [("", False), *((link(text(c.name), f"{records_link}/{c.run.run_id}.json"), True)
                             for c in group.columns)]
    return table(header, [["TFLOP/s/GPU", *(Figure.of_runs(c.runs).text() for c in group.columns)],
                          [f"× {BASELINE}, like for like", *(_ratio_cell(c, group) for c in group.columns)],
                          ["configuration key", *(cell_code(config_key(r).digest) for r in runs)],
                          ["recipe", *(text(recipe(r)) for r in runs)],
                          ["peak memory (GB)", *(number(r.metrics.peak_mem_gb, 1) for r in runs)]])
