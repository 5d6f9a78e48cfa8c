"""Sweep: every valid layout of a preset on the run's GPUs, minus those that cannot fit.

A layout is a tp x pp x dp split, and with it the shapes Megatron offers over that split:
sequence parallelism where tp > 1 (where the layers can: Transformer Engine or apex's layer norm)
and two virtual stages a pipeline stage (the interleaved schedule) where pp > 1; the measured
defaults of a shape (``bench.planning.winners``) come with its plan as they do for one layout.

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
from bench.planning.layout import Layout, batch_sizes, shaped_layouts
from bench.planning.memory import GB, Counted, estimate_bytes, fits, state_bytes
from bench.planning.options import Options
from bench.planning.plan import LaunchPlan, layers_take_sp, plan

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
    for lay in shaped_layouts(preset, gpus, gpus_per_node or gpus, mbs, gbs):
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
    plain, sp_ok = engine.plain_splits, layers_take_sp(platform, options)

    def runnable(lay: Layout) -> bool:  # what the engine and the layers can run of the shapes
        return (lay.vp == 1 and not lay.sp) if plain else (sp_ok or not lay.sp)

    keep = [lay for lay in keep if runnable(lay)]
    skipped = [(lay, gb) for lay, gb in skipped if runnable(lay)]
    if not keep:
        raise ValueError(f"no layout of {preset.name} fits {gpus} GPUs of {device_gb:.0f} GB by "
                         "the memory estimate; try a smaller --mbs or more GPUs")
    opts = replace(options, gpus=gpus)
    return [plan(preset, lay.spec, platform, opts) for lay in keep], skipped


def ranking(plans: list[LaunchPlan]) -> str:
    """The sweep's layouts by expected TFLOP/s/GPU, fastest first (the step-time model), with the
    dominant term and the memory estimate of each; "" where the model expects nothing of them (it
    says why in each plan)."""
    expected = sorted((p for p in plans if p.expected is not None),
                      key=lambda p: -p.expected.tflops_per_gpu)  # type: ignore[union-attr]
    if not expected:
        return ""
    bands = sorted({round(100 * p.expected.band) for p in expected})  # type: ignore[union-attr]
    band = (f"±{bands[0]} %" if len(bands) == 1 else
            f"±{bands[0]}-{bands[-1]} %, the wider where the host bounds the step")
    shown = ", ".join(f"{p.layout.name} {p.expected.tflops_per_gpu:.0f} ({p.expected.largest}, "  # type: ignore[union-attr]
                      f"{p.memory_gb:.0f} GB)" for p in expected)
    bound = [p.layout.name for p in expected if p.expected.largest.startswith("host_")]  # type: ignore[union-attr]
    hint = (f"; {len(bound)} of them launch-bound (largest term the host's): with Transformer "
            "Engine's CUDA graphs (--cuda-graphs te) the launches leave the step, as the measured "
            "defaults each plan quotes show" if bound else "")
    return (f"expected, fastest first (TFLOP/s/GPU {band}, largest term, memory "
            f"estimate per GPU): {shown}{hint}")
