"""Checkpoint writes: each save a run timed, with the estimated size and bandwidth beside it.

A record's ``checkpoint`` (:mod:`bench.records.checkpoint`) lists the saves the log timed; one row
per save, runs in model-size order, then by layout and start. Records written before the field
have none, and the section is left out where no record has one.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.records.checkpoint import BYTES_PER_PARAMETER, Checkpoint, Save
from bench.records.record import Record
from bench.results.hardware import hardware_name
from bench.results.table import DASH, cell_code, integer, link, number, table, text
from bench.results.words import model_name, model_sort_key

HEADER = (("run", False), ("GPUs", False), ("format", False), ("folder", False), ("iteration", True),
          ("wait s (max)", True), ("min s", True), ("estimated GB", True), ("estimated GB/s", True))


def saving_runs(runs: Sequence[Record]) -> list[Record]:
    """The runs that timed a save, in model-size order, then by layout and start."""
    return sorted((run for run in runs if run.checkpoint is not None),
                  key=lambda r: (model_sort_key(r.preset.name), r.layout.name, r.started_at))


def _row(run: Record, ckpt: Checkpoint, save: Save, records_link: str) -> list[str]:
    size = None if ckpt.estimated_bytes is None else ckpt.estimated_bytes / 1e9
    return [link(f"{model_name(run)} {run.layout.name}", f"{records_link}/{run.run_id}.json"),
            text(f"{run.gpus} × {hardware_name(run.platform.accelerator)}"),
            cell_code(ckpt.format) if ckpt.format else DASH,
            cell_code(ckpt.directory), integer(save.iteration), number(save.seconds_max, 1),
            number(save.seconds_min, 1), number(size, 1), number(ckpt.gb_per_s(save), 2)]


def section(runs: Sequence[Record], records_link: str) -> list[str]:
    """One row per timed save; none without one."""
    saving = saving_runs(runs)
    if not saving:
        return []
    lines = ["## Checkpoint writes", "",
             "Each checkpoint save a run timed (`--save`): Megatron's `save-checkpoint` timer across "
             "ranks, whose max is the time the job waited on the save (the steps' times leave it "
             "out). The size is not measured but estimated from the model: its parameters times "
             f"{BYTES_PER_PARAMETER} B (16-bit weights, Adam's fp32 master weights and two moments), "
             "written once however the ranks shard them; the bandwidth is that estimate over the "
             "wait. A dash: the optimizer keeps other state, whose saved bytes the kit does not "
             "estimate.", ""]
    body = [_row(run, run.checkpoint, save, records_link) for run in saving for save in run.checkpoint.saves]
    return lines + table(HEADER, body) + [""]
