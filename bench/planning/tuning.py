"""Performance settings a user may move away from the kit's defaults, for A/B runs.

The defaults are the kit's measured choice (see the README's results). A run that changes any of
them is a *variant*: its non-default settings go into its record's ``notes`` and name its own row on
the results page, so it is never averaged with runs of the default configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from bench.config.run_options import (
    ALLOCATORS,
    DEFAULT_MSAMP_MODULES,
    DEFAULT_MSAMP_SCALING,
    FP8_GRAD_REDUCE,
    GRAD_REDUCE,
    MSAMP_MODULES,
    MSAMP_SCALINGS,
    OPTIMIZER_STATES,
)


@dataclass(frozen=True)
class Tuning:
    """``overlap``: overlap the data-parallel gradient reduce-scatter and parameter all-gather with
    compute (dp > 1). ``grad_reduce``: how gradients are kept and reduced under bf16/fp8 (one of
    :data:`GRAD_REDUCE`): ``bf16`` (the default), ``fp32``, or kept in bf16 and reduced in FP8 by
    the kit's collectives (``fp8-allgather``, ``fp8-shared-scale``: ``--kit-grad-reduce``, see
    bench.train.grad_reduce; synchronous, so they turn the overlap off). ``optimizer_states``:
    where Adam's state lives (one of :data:`OPTIMIZER_STATES`): megatron-core's default, or
    ``paper``, the FP8-LM paper's layout in Transformer Engine's FusedAdam, or ``paper-kit``, the
    same layout stepped by the kit's PaperAdamW (bench.train.paper_adam). ``fused_loss``:
    Megatron's fused cross-entropy loss. All four are Megatron engine settings.
    ``msamp_scaling``: how MS-AMP's FP8 linear scales its casts (one of :data:`MSAMP_SCALINGS`,
    the ``MSAMP_FP8_SCALING`` of the run's environment); a setting of the MS-AMP precisions.
    ``msamp_modules``: the layer norm and core attention around MS-AMP's FP8 linears (one of
    :data:`MSAMP_MODULES`): torch's, or Transformer Engine's (``--kit-msamp-modules te``); a
    setting of the MS-AMP precisions on the Megatron engine.
    ``fused_attention``: Megatron-DeepSpeed's attention through flash-attn or torch's SDPA (patch
    0011) instead of its unfused core attention, which stores the s x s scores; a
    Megatron-DeepSpeed setting. ``gpu_memory_cap``: the GPU memory (GB, the accelerator files'
    unit) the run plans with and the entry caps torch's allocator to, below the GPU's own (None:
    the GPU's); a megatron-engine setting. ``allocator``: torch's caching allocator (one of
    :data:`ALLOCATORS`): its default segments, or ``expandable`` ones (the run's
    ``PYTORCH_CUDA_ALLOC_CONF``). ``extra_args``: more Megatron flags, appended after the kit's."""

    overlap: bool = True
    grad_reduce: str = "bf16"
    optimizer_states: str = "default"
    msamp_scaling: str = DEFAULT_MSAMP_SCALING
    msamp_modules: str = DEFAULT_MSAMP_MODULES
    fused_loss: bool = True
    fused_attention: bool = True
    gpu_memory_cap: float | None = None
    allocator: str = "default"
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.grad_reduce not in GRAD_REDUCE:
            raise ValueError(f"--grad-reduce {self.grad_reduce}: use one of {', '.join(GRAD_REDUCE)}")
        if self.optimizer_states not in OPTIMIZER_STATES:
            raise ValueError(f"--optimizer-states {self.optimizer_states}: use one of "
                             f"{', '.join(OPTIMIZER_STATES)}")
        if self.msamp_scaling not in MSAMP_SCALINGS:
            raise ValueError(f"--msamp-scaling {self.msamp_scaling}: use one of "
                             f"{', '.join(MSAMP_SCALINGS)}")
        if self.msamp_modules not in MSAMP_MODULES:
            raise ValueError(f"--msamp-modules {self.msamp_modules}: use one of "
                             f"{', '.join(MSAMP_MODULES)}")
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"--allocator {self.allocator}: use one of {', '.join(ALLOCATORS)}")
        if self.gpu_memory_cap is not None and not self.gpu_memory_cap > 0:
            raise ValueError(f"--gpu-memory-cap {self.gpu_memory_cap:g}: give the GB a GPU may use, "
                             "more than 0 (80 for an 80 GB GPU)")

    @property
    def grad_reduce_bf16(self) -> bool:
        """Whether the gradient buffer is bf16 under bf16/fp8 (every choice but fp32)."""
        return self.grad_reduce != "fp32"

    @property
    def grad_reduce_fp8(self) -> bool:
        """Whether the kit's FP8 collectives reduce the gradients."""
        return self.grad_reduce in FP8_GRAD_REDUCE

    @property
    def changes_megatron_defaults(self) -> bool:
        """Whether a Megatron-engine setting is off its default."""
        return not (self.overlap and self.grad_reduce == "bf16" and self.fused_loss)

    def at_layout(self, dp: int, precision: str) -> tuple[Tuning, tuple[str, ...]]:
        """The settings with those that change nothing at this layout and precision put back to
        the default (so the run is not recorded as a variant), and a note for each."""
        tuning, notes = self, []
        if not self.overlap and dp == 1:
            tuning = replace(tuning, overlap=True)
            notes.append("--no-overlap changes nothing with DP 1 (there is no data-parallel "
                         "reduce to overlap): dropped, the run is the default configuration")
        if self.grad_reduce == "fp32" and precision == "fp16":
            tuning = replace(tuning, grad_reduce="bf16")
            notes.append(f"--grad-reduce fp32 changes nothing under {precision} (gradients are "
                         "reduced in fp32 already): dropped, the run is the default configuration")
        if self.grad_reduce_fp8 and self.overlap and dp > 1:
            tuning = replace(tuning, overlap=False)
            notes.append(f"--grad-reduce {self.grad_reduce} reduces after the backward pass, not "
                         "overlapped with it: the run is recorded with overlap off")
        return tuning, tuple(notes)

    def variant(self) -> tuple[tuple[str, str], ...]:
        """The non-default settings as (note key, value) pairs, in a fixed order."""
        pairs = []
        if not self.overlap:
            pairs.append(("overlap", "off"))
        if self.grad_reduce != "bf16":
            pairs.append(("grad_reduce", self.grad_reduce))
        if self.optimizer_states != "default":
            pairs.append(("optimizer_states", self.optimizer_states))
        if self.msamp_scaling != DEFAULT_MSAMP_SCALING:
            pairs.append(("msamp_scaling", self.msamp_scaling))
        if self.msamp_modules != DEFAULT_MSAMP_MODULES:
            pairs.append(("msamp_modules", self.msamp_modules))
        if not self.fused_loss:
            pairs.append(("fused_loss", "off"))
        if not self.fused_attention:
            pairs.append(("core_attention", "unfused"))
        if self.gpu_memory_cap is not None:
            pairs.append(("gpu_memory_cap_gb", f"{self.gpu_memory_cap:g}"))
        if self.allocator != "default":
            pairs.append(("allocator", self.allocator))
        if self.extra_args:
            pairs.append(("megatron_args", " ".join(self.extra_args)))
        return tuple(pairs)


DEFAULT_TUNING = Tuning()
# The note keys a plan's variant may use: these settings, then the DeepSpeed ZeRO settings
# (bench.planning.engines.deepspeed.ZeroSettings.variant), a sequence length away from the preset's and the
# activation recompute (--recompute).
TUNING_NOTE_KEYS = ("overlap", "grad_reduce", "optimizer_states", "msamp_scaling", "msamp_modules",
                    "fused_loss", "core_attention", "gpu_memory_cap_gb", "allocator", "megatron_args",
                    "zero_offload",
                    "overlap_comm", "contiguous_gradients", "reduce_bucket_size",
                    "allgather_bucket_size", "seq_length", "recompute")


def flag_names(argv: Iterable[str]) -> set[str]:
    """The ``--flag`` names in an argv (``--flag=value`` counts as ``--flag``)."""
    return {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}


def check_extra_args(extra: tuple[str, ...], kit_args: Iterable[str]) -> None:
    """Refuse extra Megatron flags that are not flags, or that the kit already sets.

    A flag the kit sets (layout, batch, precision, data...) would silently override what the plan,
    the FLOPs count and the record say ran; those change through the kit's own options.
    """
    if extra and not extra[0].startswith("--"):
        raise ValueError(f"extra Megatron arguments must start with a flag, got '{extra[0]}' "
                         "(write them after '--', e.g. -- --manual-gc)")
    taken = sorted(flag_names(extra) & flag_names(kit_args))
    if taken:
        raise ValueError(f"the kit already sets {', '.join(taken)} from the preset, layout and "
                         "options; change it with the kit's options (see python -m bench run "
                         "--help), not as an extra Megatron flag")
