"""The checkpoints a run saved (``--save``): how long each save kept the job waiting, and an
estimate of how many bytes it wrote.

A record's ``checkpoint`` (null where the run timed no save, and in records made before it) lists
every save the log timed (:func:`bench.measure.logparse.checkpoint_saves`): Megatron's
``save-checkpoint`` timer across ranks, its max the time the job waited. ``seconds_total`` sums
the maxes: what saving cost the run. ``estimated_bytes`` is not measured: the whole model's
parameters times 14 B, the 16-bit weights and Adam's fp32 master weights and two moments, which
Megatron-Core's distributed optimizer and DeepSpeed's ZeRO write once however their shards are
spread over the ranks (175B: 2.2 TiB, where seed 001 says about 2.3); null where the optimizer keeps
other state (MS-AMP, ``--optimizer-states paper``), whose saved bytes the kit does not know.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field, ValidationError, model_validator

from bench.config.precisions import PRECISIONS, Precision
from bench.config.presets import Preset
from bench.config.run_options import variant_key
from bench.config.schema import Count, Strict, problems
from bench.config.text import visible
from bench.measure.logparse import MAX_LINE_CHARS, CheckpointSave
from bench.planning.memory import model_parameters, state_bytes

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Format = Annotated[str, Field(pattern=r"^\w+$", max_length=40)]  # as the save's line names it
Directory = Annotated[str, Field(min_length=1, max_length=MAX_LINE_CHARS)]  # part of a log line
# The estimate holds for precisions without MS-AMP, whose weights are bf16 or fp16 parameters beside
# megatron-core's (or DeepSpeed's) fp32 Adam state: Transformer Engine's fp8 casts its weights for
# each GEMM and keeps no fp8 master.
WEIGHT_BYTES = 2
BYTES_PER_PARAMETER = WEIGHT_BYTES + state_bytes(PRECISIONS["bf16"])  # 14: 2 + fp32 master 4 + moments 4 + 4
LISTED_SAVES = 4  # a run's summary lists this many saves one by one
STATES_VARIANT = variant_key("optimizer_states")  # the variant of a run whose optimizer keeps other state
TOTAL_RTOL = 1e-6
NOTE = "checkpoint"  # the record's note of saves it leaves out (checkpoint_notes)
NOTE_CHARS = 1000  # of that note's reasons, at most


class Save(Strict):
    """One timed save, after ``iteration``: the max and min across ranks of Megatron's
    save-checkpoint timer in seconds (the min null where the timer printed the max alone)."""

    iteration: Count
    seconds_max: Seconds
    seconds_min: Seconds | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Save:
        if self.seconds_min is not None and self.seconds_min > self.seconds_max:
            raise ValueError(f"seconds_min {self.seconds_min} is above seconds_max {self.seconds_max}")
        return self


class Checkpoint(Strict):
    """The saves of a run into ``directory`` (as ``--save`` named it) in ``format`` (Megatron-Core's,
    ``torch_dist``; null for Megatron-DeepSpeed, which does not print it), their total wait and the
    estimated bytes of one checkpoint (the module's docstring says how it is estimated)."""

    format: Format | None
    directory: Directory
    saves: tuple[Save, ...] = Field(min_length=1)
    seconds_total: Seconds
    estimated_bytes: Count | None = None

    @model_validator(mode="after")
    def _total(self) -> Checkpoint:
        total = sum(save.seconds_max for save in self.saves)
        if not math.isclose(self.seconds_total, total, rel_tol=TOTAL_RTOL, abs_tol=1e-3):
            raise ValueError(f"seconds_total {self.seconds_total} is not the saves' seconds_max "
                             f"summed ({total:.6g})")
        return self

    def gb_per_s(self, save: Save) -> float | None:
        """The estimated bytes over the save's max, in GB/s (10^9 bytes): an estimate too."""
        if self.estimated_bytes is None or save.seconds_max == 0:
            return None
        return self.estimated_bytes / 1e9 / save.seconds_max

    def describe(self) -> str:
        """One line for a run's summary: the saves (the slowest and the median past
        :data:`LISTED_SAVES`), their wait and the estimated bandwidth of the slowest."""
        # The folder as the log named it: its control characters shown, never sent raw.
        n, where = len(self.saves), visible(self.directory) + (f" ({self.format})" if self.format else "")
        slowest = max(self.saves, key=lambda save: save.seconds_max)
        median = statistics.median(save.seconds_max for save in self.saves)
        each = (", ".join(f"iteration {save.iteration} {save.seconds_max:.1f} s" for save in self.saves)
                if n <= LISTED_SAVES else f"slowest {slowest.seconds_max:.1f} s, median {median:.1f} s")
        line = f"{n} checkpoint save{'s' * (n > 1)} into {where}, {self.seconds_total:.1f} s waited: {each}"
        if self.estimated_bytes is None:
            return line
        rate = self.gb_per_s(slowest)
        return (f"{line}; ~{self.estimated_bytes / 1e9:.1f} GB each (estimated, {BYTES_PER_PARAMETER} B "
                "a parameter)" + (f", ~{rate:.2f} GB/s at the slowest" if rate is not None else ""))


def estimated_bytes(preset: Preset, precision: Precision | None, optimizer_states: str) -> int | None:
    """The bytes of one checkpoint of ``preset`` (module docstring), or None where not known: under
    MS-AMP, with other optimizer states, or for a precision the kit does not offer (None)."""
    if precision is None or precision.msamp or optimizer_states != "default":
        return None
    return model_parameters(preset) * BYTES_PER_PARAMETER


def _checkpoint(saves: Sequence[CheckpointSave], size: int | None) -> Checkpoint:
    """The :class:`Checkpoint` of ``saves``; a ``ValidationError`` where the record refuses them."""
    kept = tuple(Save(iteration=save.iteration, seconds_max=round(save.ms_max / 1000, 5),
                      seconds_min=None if save.ms_min is None else round(save.ms_min / 1000, 5))
                 for save in saves)
    return Checkpoint(format=saves[0].format, directory=saves[0].directory, saves=kept,
                      seconds_total=round(sum(save.seconds_max for save in kept), 5),
                      estimated_bytes=size)


def checkpoint_of(saves: Sequence[CheckpointSave], preset: Preset, precision: Precision | None,
                  optimizer_states: str) -> Checkpoint | None:
    """The record's field of the saves a log timed; None without one, and where the record
    refuses what the log says (:func:`checkpoint_notes` says why): the run keeps its record. The
    directory and format are the first save's, as one run saves into one folder in one format."""
    if not saves:
        return None
    try:
        return _checkpoint(saves, estimated_bytes(preset, precision, optimizer_states))
    except ValidationError:
        return None


def checkpoint_notes(saves: Sequence[CheckpointSave]) -> dict[str, str]:
    """``{"checkpoint": why}`` where the record refuses the saves a log timed (a save at
    iteration 0, a min above the max, a timer too large to be a time), else empty: the record's
    note of the checkpoint :func:`checkpoint_of` leaves out, one line."""
    if not saves:
        return {}
    try:
        _checkpoint(saves, None)
    except ValidationError as error:
        why = "; ".join(problems(error, Checkpoint))
        return {NOTE: f"the saves the log timed were left out, as a record takes none of them "
                      f"as they are: {visible(why)[:NOTE_CHARS]}"}
    return {}
