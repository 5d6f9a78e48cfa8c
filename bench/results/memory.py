"""Bytes a parameter by part: what records measured beside what a source published.

A record's ``memory_parts`` (rank 0, after its first step: :mod:`bench.train.memory_parts`) is
divided by that rank's parameters. One row per precision, layers' builder, optimizer states
(``--optimizer-states``), model, layout and GPU (the newest record counts), in model-size, then
precision order; the published entries of ``published.toml`` (``[[bytes_per_parameter]]``) follow,
each naming its source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import PRECISIONS
from bench.config.run_options import variant_key
from bench.records.record import Record
from bench.results.data import Published
from bench.results.hardware import hardware_name
from bench.results.table import link, number, table, text
from bench.results.words import layers, model_name, model_sort_key

PARTS = ("weights", "gradients", "master", "moments")
STATES_KEY = variant_key("optimizer_states")  # the variant that changes what the optimizer holds
# Kit commits whose count left the fp8 first moment of ``--optimizer-states paper`` out: Transformer
# Engine 2.20 gives a Float8Tensor an empty storage of its own, which the count took for no bytes
# (bench.train.memory_parts counts its inner tensors since). Their moments read as not counted.
FP8_MOMENT_UNCOUNTED = frozenset({"86553d5548e2", "382c9e2d04a2"})


@dataclass(frozen=True)
class PartsRow:
    """Bytes a parameter per part (None: not counted); ``what`` is the run's model, layout and
    GPU or the source's title; ``link`` a record file name or the source's address."""

    precision: str
    what: str
    link: str | None
    parts: tuple[float | None, ...]  # in PARTS order
    measured: bool

    @property
    def total(self) -> float | None:
        """The sum; a published row sums the parts its source counts, a measured row with a part
        not counted has none."""
        if self.measured and None in self.parts:
            return None
        return sum(part for part in self.parts if part is not None)


def _parts(run: Record) -> tuple[float | None, ...]:
    uncounted = (run.variant.get(STATES_KEY) == "paper"
                 and (run.provenance.kit_commit or "")[:12] in FP8_MOMENT_UNCOUNTED)
    return tuple(None if uncounted and part == "moments" else run.memory_parts.per_parameter(part)
                 for part in PARTS)


def parts_rows(runs: Sequence[Record], published: Published) -> list[PartsRow]:
    """Measured rows, then published ones."""
    newest: dict[tuple, Record] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        if run.memory_parts is not None:
            newest[(run.precision, layers(run), run.variant.get(STATES_KEY), run.preset.name,
                    run.layout.name, run.platform.accelerator)] = run
    order = {p: i for i, p in enumerate(PRECISIONS)}
    measured = sorted(newest.values(), key=lambda r: (model_sort_key(r.preset.name), r.layout.name,
                                                     order.get(r.precision, len(order)), layers(r),
                                                     r.variant.get(STATES_KEY) or ""))
    rows = [PartsRow(
        precision=" ".join(filter(None, (run.precision, layers(run),
                                         run.variant.get(STATES_KEY) and
                                         f"{run.variant[STATES_KEY]} states"))),
        what=f"{model_name(run)} {run.layout.name}, "
             f"{hardware_name(run.platform.accelerator)}",
        link=f"{run.run_id}.json", measured=True,
        parts=_parts(run)) for run in measured]
    rows += [PartsRow(precision=entry.precision, what=published.sources[entry.source].title,
                      link=published.sources[entry.source].link, measured=False,
                      parts=tuple(getattr(entry, part) for part in PARTS))
             for entry in published.bytes_per_parameter]
    return rows


def section(rows: Sequence[PartsRow], records_link: str) -> list[str]:
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
    body = [[text(row.precision),
             link(row.what, f"{records_link}/{row.link}" if row.measured else row.link),
             *(number(part, 2) for part in row.parts), number(row.total, 2)] for row in rows]
    return lines + table(header, body) + [""]
