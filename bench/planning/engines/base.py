"""The engine as an object: what differs between training engines is asked of one :class:`Engine`.

An engine is asked its flags for a resolved run (:class:`Resolved`: what python runs, a DeepSpeed
config, what it refuses), how it keeps gradients and what its optimizer step holds (the memory
estimate's bytes), its checkpoint flags, what the pre-flight of its training Python checks
(:class:`Preflight`), and the notes its records get. The engines themselves, and the table that
names them, are in ``bench.planning.engines.registry``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from bench.config.capabilities import Capabilities
from bench.config.platforms import Data, Platform
from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.planning.engines.common import checkpoint_flags
from bench.planning.engines.deepspeed import ZeroSettings
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
    precision: Precision
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
    cpus: int = 0  # the cores a run here may use (Options.cpus_present); 0: unknown, or a cluster's


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
    env: tuple[tuple[str, str], ...] = ()  # what the run exports beside the platform's [env]


def capabilities_source(platform: Platform) -> str:
    """Whence a plan's capabilities come, for a refusal: declared by the platform, or detected."""
    if platform.capabilities is None:
        return "detected in this Python"
    return f"declared by {platform.source or platform.name}"


@dataclass(frozen=True)
class Preflight:
    """What the pre-flight of a run's training Python checks for an engine
    (bench.running.trainenv.problems): the package that must be installed at its pinned version
    (its distribution, and the probe's field holding its version), whether pip installs it without
    its dependencies, whether it must also import, and whether the Megatron-DeepSpeed tree must be
    there."""

    package: str
    version_field: str
    no_deps: bool
    must_import: bool = False
    needs_tree: bool = False


class Engine(ABC):
    """A training engine. ``name``: as platforms, options and records write it. ``flops_counting``:
    how the TFLOP/s it logs itself are counted (a record's ``engine_flops``). ``chooses_layers``:
    whether the environment's capabilities choose its layers (the plan then says what it assumed).
    ``step_model``: whether the step-time model (bench.planning.predict) is fitted on its records.
    ``priced_as_core``: whether, without being fitted on its records, the model prices its plans as
    megatron-core's local layers (where its ZeRO stage and offload leave the step alike); its
    records then check that pricing, never fit it.
    ``display``: its name in the results page's labels. ``kit_layers``: whether its runs are built
    from the kit's own layer and precision choices (TE or not, apex, fp8, MS-AMP, the A/B settings),
    so the results page sets them side by side by precision, memory cap and GPU count.
    ``one_piece_step``: whether its optimizer step asks a rank's fp32 copy of the parameters in one
    piece, which torch's default allocator has failed from fragmentation behind a pipeline
    (``bench.planning.memory.fragmentation_note``). ``plain_splits``: whether it runs only plain
    tp x pp x dp splits, without sequence parallelism or virtual stages (a sweep offers it no
    others)."""

    name: str
    display: str
    kit_layers: bool
    flops_counting: str
    chooses_layers: bool
    step_model: bool
    preflight: Preflight
    priced_as_core: bool = False
    one_piece_step: bool = False
    plain_splits: bool = False

    @abstractmethod
    def flags(self, run: Resolved) -> EngineFlags:
        """What python runs and its flags; a ValueError for what the engine cannot do."""

    @abstractmethod
    def grad_bytes(self, precision: Precision, grad_reduce_bf16: bool) -> int:
        """Bytes per gradient as the engine keeps them."""

    @abstractmethod
    def step_bytes(self, optimizer_states: str, grad_bytes: int) -> int:
        """Transient bytes per parameter of the optimizer step, divided by DP in the estimate."""

    def sharded_stage(self, layout: Layout) -> int:
        """What ``bench.planning.memory.estimate_bytes`` counts as sharded over DP (its
        ``zero_stage``): the layout's ZeRO stage, else 1 (Megatron's distributed optimizer and
        DeepSpeed's default shard the optimizer state)."""
        return layout.zero or 1

    def checkpoint_flags(self, save_dir: str, interval: int) -> list[str]:
        """Save checkpoints to ``save_dir`` every ``interval`` iterations (0: once at the end)."""
        return checkpoint_flags(save_dir, interval)

    def record_notes(self, layout: Layout, version: Callable[[str], str | None]
                     ) -> dict[str, str | int | None]:
        """The engine's own notes for a run's record; ``version`` reads an installed package's
        version where the run trained."""
        return {}
