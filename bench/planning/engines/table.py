"""The engines as a table: each turns a resolved run into what python runs and its flags.

The planner looks an engine up in :data:`ENGINES` and calls it; what differs between engines (the
entry, their flags, a DeepSpeed config, what they refuse) lives here and in their modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.config.capabilities import Capabilities, implementation
from bench.config.platforms import Data, Platform
from bench.config.precisions import MSAMP_PRECISIONS, peak_format
from bench.config.presets import Preset
from bench.planning.engines.deepspeed import (
    DS_CONFIG_NAME,
    ZeroSettings,
    deepspeed_args,
    ds_config_json,
    zero_problems,
    zero_stage,
)
from bench.planning.engines.megatron import ENTRY, layer_capabilities, megatron_args
from bench.planning.layout import Layout
from bench.planning.tuning import Tuning


@dataclass(frozen=True)
class Resolved:
    """A run as the planner resolved it, before the engine's flags: ``run_dir`` is relative to
    the submit folder; ``capabilities_known`` says whether the capabilities were declared or
    detected (False: assumed, megatron-core did not import where the run trains)."""

    preset: Preset
    layout: Layout
    platform: Platform
    precision: str
    iters: int
    capabilities: Capabilities
    capabilities_known: bool
    data: Data
    tuning: Tuning
    zero: ZeroSettings
    recompute: str | None
    run_dir: str
    image: str
    profile_steps: int = 0  # steps trained and profiled after the ``iters`` measured ones


@dataclass(frozen=True)
class EngineFlags:
    """What an engine makes of a run: the python entry, its flags, DeepSpeed's config text (or
    None) and what the user should know: of its settings (``notes``), and of what it assumed the
    training environment has (``assumed``, said after what the machine has)."""

    entry: tuple[str, ...]
    args: tuple[str, ...]
    ds_config: str | None = None
    notes: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    implementation: str | None = None  # what builds the layers, where the engine chooses
    # (upstream, tree): the kit's patch series that the tree the run trains with must have.
    patched_trees: tuple[tuple[str, str], ...] = ()


def capabilities_source(platform: Platform) -> str:
    """Whence a plan's capabilities come, for a refusal: declared by the platform, or detected."""
    if platform.capabilities is None:
        return "detected in this Python"
    return f"declared by {platform.source or platform.name}"


def check_capabilities(caps: Capabilities, precision: str, layout: Layout,
                       platform: Platform) -> None:
    """What the Megatron engine cannot do without an extension, refused before anything runs."""
    where = capabilities_source(platform)
    if peak_format(precision) == "fp8" and precision not in MSAMP_PRECISIONS and not caps.transformer_engine:
        raise ValueError(f"{precision} needs Transformer Engine, which this environment lacks "
                         f"({where}): use --precision bf16, or an image with Transformer Engine")
    if precision in MSAMP_PRECISIONS and not caps.msamp:
        raise ValueError(f"{precision} needs MS-AMP, which this environment lacks ({where}): build "
                         "the image with `python -m bench images build cuda --option msamp=1` and "
                         "pass it as --image with --image-option msamp=1, or use --precision fp8")
    if layout.sp and not (caps.transformer_engine or caps.apex_layer_norm):
        raise ValueError(f"layout {layout.name}: sequence parallelism needs Transformer Engine or "
                         f"apex layer norm, which this environment lacks ({where}); drop 'sp'")


def _megatron(run: Resolved) -> EngineFlags:
    check_capabilities(run.capabilities, run.precision, run.layout, run.platform)
    args = megatron_args(run.preset, run.layout, run.precision, run.iters, run.capabilities,
                         run.data.path, run.tuning, run.recompute, run.profile_steps)

    assumed = ()
    if not run.capabilities_known:
        where = (f"the image {run.image}" if run.platform.container_runtime == "docker" and run.image
                 else "this Python")
        assumed = (f"megatron-core did not import in {where}, so Transformer Engine and apex could "
                 "not be detected: the plan assumes neither",)
    layers = implementation(layer_capabilities(run.capabilities, run.precision))
    return EngineFlags(ENTRY, tuple(args), assumed=assumed, implementation=layers)


def _megatron_deepspeed(run: Resolved) -> EngineFlags:
    problems, notes = zero_problems(run.zero, zero_stage(run.layout))
    if problems:
        raise ValueError("DeepSpeed settings are not possible: " + "; ".join(problems))
    args = deepspeed_args(run.preset, run.layout, run.precision, run.iters, run.data,
                          f"{run.run_dir}/{DS_CONFIG_NAME}", run.zero,
                          run.platform.flash_attention, run.recompute, run.tuning.fused_attention)
    tree = run.platform.megatron_deepspeed_dir
    return EngineFlags((f"{tree}/pretrain_gpt.py",), tuple(args),
                       ds_config_json(run.layout, run.precision, run.zero), tuple(notes),
                       patched_trees=(("megatron-deepspeed", tree),))


ENGINES: dict[str, Callable[[Resolved], EngineFlags]] = {
    "megatron": _megatron,
    "megatron-deepspeed": _megatron_deepspeed,
}
