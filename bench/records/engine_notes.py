"""A run's engine notes (``Record.engine_notes``): how its numbers were made, beyond the shared schema.

- ``engine_tflops_per_gpu``: the median over the protocol's window of the TFLOP/s the engine itself
  logged, beside the kit's own figure (``metrics.tflops_per_gpu``, causal model FLOPs);
  ``engine_flops`` says how that engine counts. Megatron-DeepSpeed's ``throughput_calculator``
  counts attention non-causally and adds the recompute (hardware FLOPs), so its figure is higher
  than the kit's for the same step time.
- with ``recompute`` (in the plan's variant: its own configuration), ``flops_counted`` and
  ``hardware_tflops_per_gpu``: the kit's TFLOP/s/GPU stay model FLOPs; the hardware figure counts
  the recomputed forward work (``bench.measure.flops``).
- Megatron-DeepSpeed runs: ``zero_stage`` (the stage DeepSpeed ran with), ``deepspeed`` (its
  version in the training Python); ``apex`` (its version) where the training Python has NVIDIA
  apex, whose fused layer norm and FusedAdam Megatron-DeepSpeed then uses instead of torch's (patch
  0002): a configuration of its own on the results page. The patch series is the record's
  ``patches`` (``bench.running.patches``); records written before it hold it here as
  ``patch_series``.
"""

from __future__ import annotations

import importlib.metadata
import statistics

from bench.measure.flops import flops_per_iteration
from bench.measure.logparse import ParseResult
from bench.measure.protocol import window
from bench.planning.engines.registry import ENGINES
from bench.planning.plan import LaunchPlan


def _median_step_s(result: ParseResult) -> float | None:
    steady = window(result.iterations)
    return statistics.median(it.elapsed_ms for it in steady) / 1000.0 if steady else None


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_notes(launch: LaunchPlan, result: ParseResult) -> dict[str, str | float | int | None]:
    notes: dict[str, str | float | int | None] = {}
    lay = launch.layout
    step = _median_step_s(result)
    logged = [it.tflops_per_gpu for it in window(result.iterations) if it.tflops_per_gpu]
    if logged:
        notes["engine_tflops_per_gpu"] = round(statistics.median(logged), 2)
        notes["engine_flops"] = ENGINES[launch.engine].flops_counting
    if launch.recompute:  # itself in the plan's variant
        notes["flops_counted"] = "model (the recompute is not counted; hardware_tflops_per_gpu counts it)"
        if step:
            hardware = flops_per_iteration(launch.preset, lay.global_batch,
                                           recompute=launch.recompute)
            notes["hardware_tflops_per_gpu"] = round(hardware / step / launch.world_size / 1e12, 2)
    notes.update(ENGINES[launch.engine].record_notes(lay, installed_version))
    return notes
