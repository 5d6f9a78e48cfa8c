"""Precisions side by side: the runs of one campaign that differ only in precision or in what built
the layers, one small table each, so that "fp8 is 1.23x bf16" is read from records, not typed.

Ok Megatron-Core records are grouped by campaign (``labels.campaign``: runs measured side by side
on one machine, one after the other; a run made outside a campaign file by its day), preset,
layout, micro and global batch, accelerator, data (mock, or the corpus's name) and measured
iterations: fp8 is set beside bf16 only at the same batch, so an fp8 run at its larger default
micro-batch (``bench.planning.microbatch``) needs a bf16 run given that micro-batch. Within a
group each column is a precision, with the layers' builder added where a group holds more than one
(``bf16 TE``, ``bf16 TE+apex``), and the variant where one is set; of a column run twice the
newest run counts. A campaign's runs are grouped by the command that ran them (the stamp their run
ids share): its groups run one after the other, and one H200 pair ran te at 468.2 and 537.2
TFLOP/s/GPU in two groups ten minutes apart, so a run is set only beside those of its own. A
group of two or more columns is a table on the page
(``bench.results.markdown``): TFLOP/s per GPU, its ratio to the group's bf16 column, peak memory.

A group is also one machine, since machines of one GPU model differ by 10 % and more: the run's
GPU UUIDs (``provenance.gpu_uuids``). Records without them are taken for one machine while each
run starts within an hour of the end of the one before (``MACHINE_GAP_S``): a GPU machine runs its
groups back to back, the next machine comes hours later and often with another kit commit, which
does not split one machine's runs. Groups whose titles would be equal are told apart by the day
of their first run, then its minute, then the first GPU's UUID.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bench.config.precisions import PRECISIONS
from bench.measure.protocol import WARMUP_ITERS
from bench.records.record import Record
from bench.results.losses import BASELINE  # the precision others are set against
from bench.results.table import heading, link, number, table, text
from bench.results.words import group_title, layers, model_sort_key, settings, variant

UUID_CHARS = 12  # "GPU-8442300b": enough of a UUID to tell a machine's GPUs apart on the page
MACHINE_GAP_S = 3600  # records without GPU UUIDs: a longer pause between runs is another machine
# A campaign run's id: {preset}_{layout}_{platform}_{the command's UTC stamp}-{nonce}-c{index}.
CAMPAIGN_RUN_ID = re.compile(r"_(\d{8}T\d{6}Z)-[0-9a-f]+-c\d+$")


@dataclass(frozen=True)
class Column:
    name: str  # precision, then the layers and variant where they tell columns apart
    run: Record


@dataclass(frozen=True)
class PrecisionGroup:
    title: str
    columns: tuple[Column, ...]

    @property
    def baseline(self) -> Column | None:
        return next((c for c in self.columns if c.run.precision == BASELINE), None)


def _made(run: Record) -> str:
    """The campaign of a run, or the day of one made outside a campaign file."""
    campaign = run.labels.get("campaign")
    return f"campaign {campaign}" if campaign else f"runs of {run.started_at[:10]}"


def _command(run: Record) -> str:
    """The stamp of the command that ran a campaign run (one ``--only`` group, back to back), or ""."""
    match = CAMPAIGN_RUN_ID.search(run.run_id) if run.labels.get("campaign") else None
    return match.group(1) if match else ""


def _key(run: Record) -> tuple:
    data = run.data.name if run.data is not None and run.data.kind == "real" else "mock"
    lay = run.layout
    return (_made(run), _command(run), run.preset.name, lay.name, lay.micro_batch,
            lay.global_batch, run.platform.accelerator, data, run.metrics.window_iters)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _machines(runs: Sequence[Record]) -> list[list[Record]]:
    """``runs`` split by machine: their GPUs' UUIDs, or for records without them, runs less than
    :data:`MACHINE_GAP_S` apart."""
    by_gpus: dict[tuple[str, ...], list[Record]] = defaultdict(list)
    sessions: list[list[Record]] = []
    for run in sorted(runs, key=lambda r: r.started_at):
        if run.provenance.gpu_uuids:
            by_gpus[tuple(sorted(run.provenance.gpu_uuids))].append(run)
            continue
        last = sessions[-1][-1] if sessions else None
        if last is not None and (_seconds(run.started_at) - _seconds(last.finished_at or last.started_at)
                                 <= MACHINE_GAP_S):
            sessions[-1].append(run)
        else:
            sessions.append([run])
    return [*by_gpus.values(), *sessions]


def _title(run: Record) -> str:
    lay = run.layout
    return (group_title(run, f"micro/global batch {lay.micro_batch}/{lay.global_batch}",
                  f"{run.metrics.window_iters + WARMUP_ITERS} iterations") + f", {_made(run)}")


def side_by_side(runs: Sequence[Record]) -> list[PrecisionGroup]:
    """The groups of two or more columns, in model-size order, then by title."""
    grouped: dict[tuple, list[Record]] = defaultdict(list)
    for run in runs:
        if run.ok and run.engine == "megatron":
            grouped[_key(run)].append(run)
    groups = []
    for members in (machine for same in grouped.values() for machine in _machines(same)):
        builders = {layers(run) for run in members}
        newest: dict[str, Record] = {}
        for run in sorted(members, key=lambda r: r.started_at):
            parts = [run.precision, layers(run) if len(builders) > 1 else "", variant(settings(run))]
            newest[" ".join(filter(None, parts))] = run
        if len(newest) < 2:
            continue
        order = {p: i for i, p in enumerate(PRECISIONS)}
        columns = sorted((Column(name, run) for name, run in newest.items()),
                         key=lambda c: (order.get(c.run.precision, len(order)), c.name))
        groups.append(PrecisionGroup(_title(columns[0].run), tuple(columns)))
    groups = _told_apart(groups)
    return sorted(groups, key=lambda g: (model_sort_key(g.columns[0].run.preset.name), g.title))


def _told_apart(groups: list[PrecisionGroup]) -> list[PrecisionGroup]:
    """Groups of one title (one setup on several machines) with a detail appended that tells them
    apart: the day of the group's first run, else its minute, else its first GPU, else all three."""
    by_title: dict[str, list[PrecisionGroup]] = defaultdict(list)
    for group in groups:
        by_title[group.title].append(group)
    told = []
    for title, same in by_title.items():
        if len(same) == 1:
            told += same
            continue
        details = [_details(group) for group in same]
        pick = next((pick for pick in ((0,), (1,), (2,), (0, 1, 2))
                     if len({tuple(d[i] for i in pick) for d in details}) == len(same)), (0, 1, 2))
        told += [PrecisionGroup(f"{title}, {', '.join(d[i] for i in pick)}", group.columns)
                 for group, d in zip(same, details, strict=True)]
    return told


def _details(group: PrecisionGroup) -> tuple[str, str, str]:
    """What may tell a group's machine apart: its first run's day, that run's minute, its first GPU."""
    first = min((c.run for c in group.columns), key=lambda r: r.started_at)
    uuids = sorted(first.provenance.gpu_uuids or ["GPUs unknown"])
    return (f"first run {first.started_at[:10]}",
            f"first run {first.started_at[:10]} {first.started_at[11:16]}", uuids[0][:UUID_CHARS])


def section(groups: Sequence[PrecisionGroup], records_link: str) -> list[str]:
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
        lines += [*heading(group.title), *_group_table(group, records_link), ""]
    return lines


def _group_table(group: PrecisionGroup, records_link: str) -> list[str]:
    """A column per precision: TFLOP/s per GPU, the ratio to the baseline's, peak memory."""
    base = group.baseline
    runs = [c.run for c in group.columns]
    header = [("", False), *((link(text(c.name), f"{records_link}/{c.run.run_id}.json"), True)
                             for c in group.columns)]
    ratio = [[f"× {BASELINE}", *(number(r.metrics.tflops_per_gpu / base.run.metrics.tflops_per_gpu, 2)
                                 for r in runs)]] if base is not None else []
    return table(header, [["TFLOP/s/GPU", *(number(r.metrics.tflops_per_gpu, 1) for r in runs)],
                          *ratio, ["peak memory (GB)", *(number(r.metrics.peak_mem_gb, 1) for r in runs)]])
