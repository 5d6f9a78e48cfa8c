"""The training engines, and :data:`ENGINES`, the table the kit looks an engine up in by its name.

The planner and the rest of the kit ask an engine (``bench.planning.engines.base.Engine``) what
differs between engines. No code outside ``bench.planning.engines`` branches on an engine's name;
the engines' flags live in their modules.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.config.capabilities import Capabilities, implementation
from bench.config.platforms import Platform
from bench.config.precisions import Precision
from bench.config.run_options import DEFAULT_DROPOUT
from bench.planning.engines.base import Engine, EngineFlags, Preflight, Resolved, capabilities_source
from bench.planning.engines.common import checkpoint_flags
from bench.planning.engines.deepspeed import (
    DS_CONFIG_NAME,
    deepspeed_args,
    default_stage_notes,
    ds_config_json,
    zero_problems,
    zero_stage,
)
from bench.planning.engines.megatron import (
    CHECKPOINT_FLAGS,
    ENTRY,
    check_graphs,
    layer_capabilities,
    megatron_args,
)
from bench.planning.engines.setting_flags import dropout_flags
from bench.planning.layout import Layout
from bench.planning.memory import (
    DO_FP32_GRAD_BYTES,
    DS_FP32_GRAD_BYTES,
    PAPER_STEP_BYTES,
    deepspeed_frees_zero1_gradients,
)


def check_capabilities(caps: Capabilities, precision: Precision, layout: Layout,
                       platform: Platform) -> None:
    """What the Megatron engine cannot do without an extension, refused before anything runs."""
    where = capabilities_source(platform)
    if precision.fp8_linears == "Transformer Engine" and not caps.transformer_engine:
        raise ValueError(f"{precision.name} needs Transformer Engine, which this environment lacks "
                         f"({where}): use --precision bf16, or an image with Transformer Engine")
    if precision.msamp and not caps.msamp:
        raise ValueError(f"{precision.name} needs MS-AMP, which this environment lacks ({where}): build "
                         "the image with `python -m bench images build cuda --option msamp=1` and "
                         "pass it as --image with --image-option msamp=1, or use --precision fp8")
    if layout.sp and not caps.sequence_parallel:
        raise ValueError(f"layout {layout.name}: sequence parallelism needs Transformer Engine or "
                         f"apex layer norm, which this environment lacks ({where}); drop 'sp'")


class Megatron(Engine):
    """Megatron-Core through the kit's entry (bench.planning.engines.megatron)."""

    name = "megatron"
    display = "Megatron-Core"
    kit_layers = True
    flops_counting = "megatron-core num_floating_point_operations (causal attention; counts recompute)"
    chooses_layers = True
    step_model = True
    preflight = Preflight("megatron-core", "megatron_core", no_deps=True, must_import=True)

    def flags(self, run: Resolved) -> EngineFlags:
        check_capabilities(run.capabilities, run.precision, run.layout, run.platform)
        args = megatron_args(run.preset, run.layout, run.precision, run.iters, run.capabilities,
                             run.data.path, run.tuning, run.recompute, run.profile_steps)
        assumed = ()
        if not run.capabilities_known:
            where = (f"the image {run.image}" if run.platform.container_runtime == "docker"
                     and run.image else "this Python")
            assumed = (f"megatron-core did not import in {where}, so Transformer Engine and apex "
                       "could not be detected: the plan assumes neither",)
        layers = implementation(layer_capabilities(run.capabilities, run.precision, run.tuning.layers))
        check_graphs(run.tuning, layers, run.recompute)
        notes = ()
        if run.tuning.layers == "local" and run.capabilities.transformer_engine and not run.precision.msamp:
            notes = ("--layers local: megatron-core's local layers and torch's SDPA attention, "
                     "though Transformer Engine is present (the record's implementation: local)",)
        return EngineFlags(ENTRY, tuple(args), notes=notes, assumed=assumed, implementation=layers)

    def grad_bytes(self, precision: Precision, grad_reduce_bf16: bool) -> int:
        """fp32 main gradients unless they are reduced in bf16 (any precision but fp16)."""
        return 2 if precision.half == "bf16" and grad_reduce_bf16 else 4

    def step_bytes(self, optimizer_states: str, grad_bytes: int) -> int:
        """bench.planning.memory says what each holds: the distributed optimizer's fp32 copy of
        bf16 gradients, TE FusedAdam's fp32 unscaled states (``paper``), none for ``paper-kit``."""
        if optimizer_states == "paper":
            return PAPER_STEP_BYTES
        if optimizer_states == "paper-kit" or grad_bytes == 4:  # fp32 main gradients are Adam's own
            return 0
        return DO_FP32_GRAD_BYTES

    def checkpoint_flags(self, save_dir: str, interval: int) -> list[str]:
        return checkpoint_flags(save_dir, interval, CHECKPOINT_FLAGS)


# torchrun sets OMP_NUM_THREADS=1 where it is unset (its log says so); DeepSpeed's launcher, which
# the seeds used, leaves OpenMP its default. Seed 003's 345m row ran at 1.04 samples/s so on four
# H200s, against the seed's 6.16. On four H100s (64 cores) it ran at 0.79 with one thread a rank and
# 0.98 with OMP_NUM_THREADS=16 (step 5.09 s against 4.08): the threads are worth 1.25x, and most
# of the gap to the seed is elsewhere (not yet profiled).
OFFLOAD_THREADS_NOTE = ("ZeRO-Offload steps Adam on the CPU with DeepSpeed's OpenMP kernel, and "
                        "torchrun sets OMP_NUM_THREADS=1 where it is unset: one core per rank; set "
                        "OMP_NUM_THREADS (a node's cores over its GPUs) in the platform's [env] or "
                        "the shell")


def offload_threads(run: Resolved, engine: str) -> tuple[tuple[str, str], ...]:
    """``OMP_NUM_THREADS`` for a ZeRO-Offload run here: its cores over its ranks (at least 1);
    nothing where the platform's [env] sets it, the cores are unknown (or the shell sets it:
    Options.cpus_present) or the run offloads nothing."""
    if run.zero.offload != "cpu" or not run.cpus or "OMP_NUM_THREADS" in run.platform.env_for(engine):
        return ()
    return (("OMP_NUM_THREADS", str(max(1, run.cpus // run.layout.gpus))),)


class MegatronDeepSpeed(Engine):
    """Megatron-DeepSpeed's ``pretrain_gpt.py`` with a DeepSpeed config
    (bench.planning.engines.deepspeed)."""

    name = "megatron-deepspeed"
    display = "Megatron-DeepSpeed"
    kit_layers = False
    flops_counting = ("Megatron-DeepSpeed throughput_calculator (non-causal attention; counts "
                      "recompute: hardware FLOPs)")
    chooses_layers = False
    step_model = False  # its records vary with the kit's patches to it, which no term carries
    priced_as_core = True  # Megatron-LM's own layers, as megatron-core's local ones; ZeRO-1/2 move
    # the gradients and parameters the distributed optimizer moves
    one_piece_step = True  # DeepSpeed's fp32 partition
    plain_splits = True  # its pipeline engine has no virtual stages; its sp splits batches twice
    preflight = Preflight("deepspeed", "deepspeed", no_deps=False, needs_tree=True)

    def flags(self, run: Resolved) -> EngineFlags:
        problems, notes = zero_problems(run.zero, zero_stage(run.layout))
        if problems:
            raise ValueError("DeepSpeed settings are not possible: " + "; ".join(problems))
        notes += default_stage_notes(run.layout)
        env = offload_threads(run, self.name)
        if env:
            notes.append(f"ZeRO-Offload: OMP_NUM_THREADS={env[0][1]} for DeepSpeed's CPU Adam, the "
                         f"{run.cpus} cores this process may run on over {run.layout.gpus} ranks")
        elif run.zero.offload == "cpu" and "OMP_NUM_THREADS" not in run.platform.env_for(self.name):
            notes.append(OFFLOAD_THREADS_NOTE)
        args = deepspeed_args(run.preset, run.layout, run.precision, run.iters, run.data,
                              f"{run.run_dir}/{DS_CONFIG_NAME}", run.zero,
                              run.platform.flash_attention, run.recompute, run.tuning.fused_attention)
        args += dropout_flags(run.tuning.dropout, DEFAULT_DROPOUT)
        tree = run.platform.megatron_deepspeed_dir
        # Its script has none of the kit's hooks: the kit's entry probes the host's pace, caps
        # the allocator where asked, then runs it (bench.train.script_entry).
        cap = run.tuning.gpu_memory_cap
        script = ("-m", "bench.train.script_entry",
                  *(("--kit-gpu-memory-cap", f"{cap:g}") if cap is not None else ()),
                  f"{tree}/pretrain_gpt.py")
        return EngineFlags(script, tuple(args),
                           ds_config_json(run.layout, run.precision, run.zero), tuple(notes),
                           patched_trees=(("megatron-deepspeed", tree),), env=env)

    def grad_bytes(self, precision: Precision, grad_reduce_bf16: bool) -> int:
        """DeepSpeed keeps gradients in the training precision."""
        return 2

    def step_bytes(self, optimizer_states: str, grad_bytes: int) -> int:
        """DeepSpeed's ZeRO step (stages 1 and 2, ``stage_1_and_2.py``) copies each parameter
        group's gradient partition into fp32 before Adam steps it: 4 B per parameter of the
        partition. 13b dp4 ZeRO-2 fp16 peaked at 83.8 GB on four H200s, 74.8 estimated without
        them and 85.6 with them (with CPU offload the copy is on the host: an over-count there)."""
        return DS_FP32_GRAD_BYTES

    def sharded_stage(self, layout: Layout) -> int:
        """2 for stage 1 where DeepSpeed frees each gradient once reduced
        (bench.planning.memory.deepspeed_frees_zero1_gradients)."""
        return 2 if deepspeed_frees_zero1_gradients(layout) else super().sharded_stage(layout)

    def record_notes(self, layout: Layout, version: Callable[[str], str | None]
                     ) -> dict[str, str | int | None]:
        """The ZeRO stage it ran, DeepSpeed's version, and apex's where the training Python has
        it (Megatron-DeepSpeed then uses its fused layer norm and FusedAdam, patch 0002)."""
        notes: dict[str, str | int | None] = {
            "zero_stage": zero_stage(layout),
            "deepspeed": version("deepspeed")}
        if apex := version("apex"):
            notes["apex"] = apex
        return notes


ENGINES: dict[str, Engine] = {engine.name: engine for engine in (Megatron(), MegatronDeepSpeed())}
