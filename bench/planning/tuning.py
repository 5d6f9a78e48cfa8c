"""Performance settings a user may move away from the kit's defaults, for A/B runs.

The defaults are the kit's measured choice (see the README's results). A run that changes any of
them is a *variant*: its non-default settings go into its record's ``notes`` and name its own row on
the results page, so it is never averaged with runs of the default configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from bench.config.precisions import Precision
from bench.config.run_options import (
    FP8_GRAD_REDUCE,
    OLDER_CODE_KEYS,
    VARIANT_KEYS,
    field_default,
    unknown_choices,
    variant_of,
)

# The smallest --gpu-memory-cap (GB): each rank's CUDA context held 0.51-0.52 GiB outside torch's
# allocator on an H200 (the memory-cap lines of the kept train logs), which the cap must cover.
MIN_GPU_MEMORY_CAP_GB = 1.0


@dataclass(frozen=True)
class Tuning:
    """The A/B settings; each field's default, choices, engine and variant key are its entry in
    :data:`bench.config.run_options.RUN_OPTIONS` (``field="tuning.<name>"``).

    ``overlap``: overlap the data-parallel gradient reduce-scatter and parameter all-gather with
    compute (dp > 1). ``grad_reduce``: how gradients are kept and reduced under bf16/fp8: ``bf16``,
    ``fp32``, or kept in bf16 and reduced in FP8 by the kit's collectives (``fp8-allgather``,
    ``fp8-shared-scale``: ``--kit-grad-reduce``, see bench.train.grad_reduce; synchronous, so they
    turn the overlap off). ``optimizer_states``: where Adam's state lives: megatron-core's default,
    ``paper``, the FP8-LM paper's layout in Transformer Engine's FusedAdam, or ``paper-kit``, the
    same layout stepped by the kit's PaperAdamW (bench.train.paper_adam). ``fused_loss``:
    Megatron's fused cross-entropy loss. ``msamp_scaling``: how MS-AMP's FP8 linear scales its
    casts (the run's ``MSAMP_FP8_SCALING``). ``msamp_modules``: the layer norm and core attention
    around MS-AMP's FP8 linears, torch's or Transformer Engine's (``--kit-msamp-modules te``).
    ``fused_attention``: Megatron-DeepSpeed's attention through flash-attn or torch's SDPA (patch
    0011) instead of its unfused core attention, which stores the s x s scores.
    ``cuda_graphs``: ``none``, or ``te``, Transformer Engine's CUDA graphs of each layer
    (``--cuda-graph-impl transformer_engine``). ``dropout``: the attention and hidden dropout
    probability (default 0.1, Megatron's; 0 is a recipe: it changes the training math).
    ``gpu_memory_cap``: the GPU memory (GB, the accelerator files' unit) the run plans with and the
    entry caps torch's allocator to, below the GPU's own (None: the GPU's). ``allocator``: torch's
    caching allocator, its default segments or ``expandable`` ones (the run's
    ``PYTORCH_CUDA_ALLOC_CONF``). ``layers``: what builds a Megatron-engine run's layers: ``auto``
    (what the environment has), ``te`` (Transformer Engine's) or ``local`` (megatron-core's local
    layers even where Transformer Engine imports); no variant, the record's ``implementation`` says
    it. ``extra_args``: more Megatron flags, appended after the kit's."""

    # Defaults, choices and variant keys are the run options' (bench.config.run_options).
    overlap: bool = field_default("tuning.overlap")
    grad_reduce: str = field_default("tuning.grad_reduce")
    optimizer_states: str = field_default("tuning.optimizer_states")
    msamp_scaling: str = field_default("tuning.msamp_scaling")
    msamp_modules: str = field_default("tuning.msamp_modules")
    fused_loss: bool = field_default("tuning.fused_loss")
    fused_attention: bool = field_default("tuning.fused_attention")
    cuda_graphs: str = field_default("tuning.cuda_graphs")
    dropout: float = field_default("tuning.dropout")
    gpu_memory_cap: float | None = field_default("tuning.gpu_memory_cap")
    allocator: str = field_default("tuning.allocator")
    layers: str = field_default("tuning.layers")
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for option, value in unknown_choices("tuning", self):
            raise ValueError(f"{option.flag} {value}: use one of {', '.join(option.choices or ())}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"--dropout {self.dropout:g}: give a probability from 0 up to, not "
                             "including, 1 (0: no dropout)")
        if self.gpu_memory_cap is not None and not self.gpu_memory_cap > 0:
            raise ValueError(f"--gpu-memory-cap {self.gpu_memory_cap:g}: give the GB a GPU may use, "
                             "more than 0 (80 for an 80 GB GPU)")
        if self.gpu_memory_cap is not None and self.gpu_memory_cap < MIN_GPU_MEMORY_CAP_GB:
            # Said here, before --force can skip the memory estimate: the entry would refuse it
            # only on the GPU, after the launch.
            raise ValueError(f"--gpu-memory-cap {self.gpu_memory_cap:g}: below {MIN_GPU_MEMORY_CAP_GB:g} "
                             "GB the CUDA context alone (0.5 GiB outside torch's allocator) leaves "
                             "training nothing; give at least 1 (80 for an 80 GB GPU)")

    @property
    def grad_reduce_bf16(self) -> bool:
        """Whether the gradient buffer is bf16 under bf16/fp8 (every choice but fp32)."""
        return self.grad_reduce != "fp32"

    @property
    def graphs(self) -> bool:
        """Whether the layers run as CUDA graphs (any ``cuda_graphs`` but none)."""
        return self.cuda_graphs != field_default("tuning.cuda_graphs")

    @property
    def grad_reduce_fp8(self) -> bool:
        """Whether the kit's FP8 collectives reduce the gradients."""
        return self.grad_reduce in FP8_GRAD_REDUCE

    def at_layout(self, dp: int, precision: Precision) -> tuple[Tuning, tuple[str, ...]]:
        """The settings with those that change nothing at this layout and precision put back to
        the default (so the run is not recorded as a variant), and a note for each."""
        tuning, notes = self, []
        if not self.overlap and dp == 1:
            tuning = replace(tuning, overlap=True)
            notes.append("--no-overlap changes nothing with DP 1 (there is no data-parallel "
                         "reduce to overlap): dropped, the run is the default configuration")
        if self.grad_reduce == "fp32" and precision.half == "fp16":
            tuning = replace(tuning, grad_reduce="bf16")
            notes.append(f"--grad-reduce fp32 changes nothing under {precision.name} (gradients are "
                         "reduced in fp32 already): dropped, the run is the default configuration")
        if self.grad_reduce_fp8 and self.overlap and dp > 1:
            tuning = replace(tuning, overlap=False)
            notes.append(f"--grad-reduce {self.grad_reduce} reduces after the backward pass, not "
                         "overlapped with it: the run is recorded with overlap off")
        return tuning, tuple(notes)

    def variant(self) -> tuple[tuple[str, str], ...]:
        """The non-default settings as (note key, value) pairs, in the run options' order, then
        the extra Megatron flags."""
        extra = (("megatron_args", " ".join(self.extra_args)),) if self.extra_args else ()
        return variant_of("tuning", self) + extra


DEFAULT_TUNING = Tuning()
# The note keys a plan's variant may use: these settings, the DeepSpeed ZeRO settings, a sequence
# length away from the preset's and the activation recompute (all declared in the run options);
# not the older code's, which only an older record's variant carries.
TUNING_NOTE_KEYS = tuple(key for key in VARIANT_KEYS if key not in OLDER_CODE_KEYS)


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
