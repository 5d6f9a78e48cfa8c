"""Sweep: every valid layout of a preset on the run's GPUs, minus those that cannot fit.

Locally the GPUs are those present and each candidate runs briefly (``SWEEP_ITERS`` iterations: the
warm-up plus a short window), then the best by TFLOP/s/GPU is reported; on a cluster each candidate
is its own job, gathered by ``collect``. Every run's record carries the sweep's id in its notes.
Without ``--mbs`` layouts are kept by the preset's micro-batch; each fp8 plan then takes its
precision's default micro-batch for its layout (``bench.planning.microbatch``).
"""

from __future__ import annotations

from dataclasses import replace

from bench.config.platforms import Platform
from bench.config.precisions import resolve_precision
from bench.config.presets import Preset
from bench.measure.protocol import MIN_WINDOW_ITERS, WARMUP_ITERS
from bench.planning.engines.registry import ENGINES
from bench.planning.layout import Layout, batch_sizes, valid_layouts
from bench.planning.memory import GB, Counted, estimate_bytes, fits, state_bytes
from bench.planning.options import Options
from bench.planning.plan import LaunchPlan, plan

SWEEP_ITERS = WARMUP_ITERS + MIN_WINDOW_ITERS + 2


def candidates(preset: Preset, gpus: int, mbs: int, gbs: int, device_gb: float,
               grad: int = 2, gpus_per_node: int | None = None, optimizer_bytes: int = 12,
               fp8: bool = False, optimizer_step_bytes: int = 0,
               ) -> tuple[list[Layout], list[tuple[Layout, float]]]:
    """(layouts to run, [(skipped layout, estimated GB)]) for ``gpus`` GPUs of ``device_gb``;
    ``grad``, ``optimizer_bytes`` and ``optimizer_step_bytes``: bytes per gradient, of optimizer
    state and of the step's transients per parameter (the engine's ``grad_bytes``,
    ``bench.planning.memory.state_bytes`` and the engine's ``step_bytes``), as the planner
    counts them, and ``fp8`` its FP8 linears (``Precision.fp8``);
    tensor parallelism stays within ``gpus_per_node`` (default: all GPUs are one node)."""
    keep, skipped = [], []
    for lay in valid_layouts(preset, gpus, gpus_per_node or gpus, mbs, gbs):
        counted = Counted(preset, lay, grad, optimizer_bytes=optimizer_bytes, fp8=fp8,
                          optimizer_step_bytes=optimizer_step_bytes)
        if fits(counted, device_gb):
            keep.append(lay)
        else:
            skipped.append((lay, estimate_bytes(counted) / GB))
    return keep, skipped


def sweep_plans(preset: Preset, platform: Platform, options: Options,
                device_gb: float) -> tuple[list[LaunchPlan], list[tuple[Layout, float]]]:
    """Plans for every candidate layout; iterations default to ``SWEEP_ITERS``.

    Locally the GPUs are those present (or ``--gpus``); on a cluster ``--gpus`` or ``--nodes``.
    """
    per_node = platform.gpus_per_node
    gpus = options.gpus or (options.nodes or 0) * per_node or options.gpus_present
    if not gpus:
        raise ValueError("a sweep needs the GPUs present (none found) or --gpus"
                         if platform.scheduler == "none" else
                         f"a sweep on {platform.name} needs its size: --gpus N or --nodes N")
    mbs, gbs = batch_sizes(preset, options.mbs, options.gbs)
    precision = resolve_precision(options.precision or platform.default_precision)
    engine = ENGINES[options.engine or platform.default_engine]
    grad = engine.grad_bytes(precision, options.tuning.grad_reduce_bf16)
    keep, skipped = candidates(preset, gpus, mbs, gbs, device_gb, grad, per_node or None,
                               state_bytes(precision, options.tuning.optimizer_states), precision.fp8,
                               engine.step_bytes(options.tuning.optimizer_states, grad))
    if not keep:
        raise ValueError(f"no layout of {preset.name} fits {gpus} GPUs of {device_gb:.0f} GB by "
                         "the memory estimate; try a smaller --mbs or more GPUs")
    opts = replace(options, gpus=gpus)
    return [plan(preset, lay.spec, platform, opts) for lay in keep], skipped


def ranking(plans: list[LaunchPlan]) -> str:
    """The sweep's layouts by expected TFLOP/s/GPU, fastest first (the step-time model), with the
    dominant term of each; "" where the model expects nothing of them (it says why in each plan)."""
    expected = sorted(((p.expected, p.layout) for p in plans if p.expected is not None),
                      key=lambda pair: -pair[0].tflops_per_gpu)
    if not expected:
        return ""
    band = expected[0][0].band
    shown = ", ".join(f"{lay.name} {exp.tflops_per_gpu:.0f} ({exp.largest})" for exp, lay in expected)
    return (f"expected, fastest first (TFLOP/s/GPU ±{100 * band:.0f} %, largest term): {shown}")
