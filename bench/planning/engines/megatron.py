"""Megatron-Core engine: the kit's training entry ``bench.train.pretrain_gpt``.

Flag names are those of megatron-core 0.19's ``megatron.training`` argument parser; a test runs the
argv the planner makes through that parser.
"""

from __future__ import annotations

from dataclasses import replace

from bench.config.capabilities import Capabilities, for_layers, megatron_flags
from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.config.run_options import DEFAULT_DROPOUT, DEFAULT_MSAMP_MODULES, PAPER_OPTIMIZER_STATES
from bench.measure.profile import PROFILE_LEAD_STEPS
from bench.planning.engines.common import (
    OPTIMIZER_FLAGS,
    batch_flags,
    model_flags,
    parallel_flags,
    recompute_flags,
)
from bench.planning.engines.setting_flags import dropout_flags, graph_flags
from bench.planning.layout import Layout
from bench.planning.tuning import DEFAULT_TUNING, Tuning

ENTRY = ("-m", "bench.train.pretrain_gpt")
# --optimizer-states paper: the FP8-LM paper's optimizer state (Peng et al. 2023, O2) in
# megatron-core's precision-aware optimizer, which steps with Transformer Engine's FusedAdam in one
# multi-tensor kernel: fp16 master weights and fp16 second moment, each with an fp32 per-tensor
# scale, an fp8 (E4M3) first moment, read from bf16 main gradients. Megatron requires its
# distributed optimizer with it (always on here), which shards all three over data-parallel ranks.
PAPER_STATE_FLAGS = ("--use-precision-aware-optimizer", "--main-grads-dtype", "bf16",
                     "--main-params-dtype", "fp16", "--exp-avg-dtype", "fp8",
                     "--exp-avg-sq-dtype", "fp16")
# --optimizer-states paper-kit: the same states, stepped by the kit's PaperAdamW, which the entry
# has megatron-core build where it would build FusedAdam (bench.train.paper_adam).
KIT_PAPER_ADAM_FLAG = "--kit-paper-adam"
# Full recompute in Megatron-Core: every layer, uniformly, one layer per unit.
FULL_RECOMPUTE = ("--recompute-granularity", "full", "--recompute-method", "uniform",
                  "--recompute-num-layers", "1")
# Megatron-Core's checkpointing as the Azure GPT-3 175B guide's 04-gpt175B.sh runs it (seed 001):
# a persistent background process for asynchronous saves, every rank loading its own shard, and
# the sharding plan kept between saves, since the model's structure does not change in a run.
CHECKPOINT_FLAGS = ("--use-persistent-ckpt-worker", "--ckpt-fully-parallel-load",
                    "--ckpt-assume-constant-structure")


def layer_capabilities(capabilities: Capabilities, precision: Precision, layers: str) -> Capabilities:
    """The capabilities the layers are built with: MS-AMP's FP8 linears replace megatron-core's
    local ones, so its precisions get no Transformer Engine layers; ``--layers local`` asks for
    none either (bench.config.capabilities.for_layers)."""
    if precision.msamp:
        return replace(capabilities, transformer_engine=False)
    return for_layers(capabilities, layers)


def check_graphs(tuning: Tuning, layers: str | None, recompute: str | None) -> None:
    """Refuse CUDA graphs megatron-core would refuse at start-up: Transformer Engine's graphs
    capture Transformer Engine's layers, and graphed selective recompute keeps no dropout
    ("attention dropout is not supported with graphed attention recomputation")."""
    if not tuning.graphs:
        return
    if not (layers or "").startswith("te"):
        raise ValueError(f"--cuda-graphs {tuning.cuda_graphs} captures Transformer Engine's layers, "
                         f"and this run builds {layers or 'no'} layers: use a training environment "
                         "with Transformer Engine and a precision it runs, or drop --cuda-graphs")
    if recompute == "selective" and tuning.dropout > 0:
        raise ValueError(f"--cuda-graphs {tuning.cuda_graphs} with --recompute selective needs "
                         f"--dropout 0 (megatron-core graphs no recompute with dropout), not "
                         f"{tuning.dropout:g}: add --dropout 0, or drop --recompute or --cuda-graphs")


def tuning_flags(tuning: Tuning, precision: Precision, dp: int) -> list[str]:
    """The flags of the A/B settings (bench.planning.tuning) and the defaults they turn off."""
    flags: list[str] = []
    if precision.half == "bf16" and tuning.grad_reduce_bf16:
        flags.append("--grad-reduce-in-bf16")
    if tuning.optimizer_states in PAPER_OPTIMIZER_STATES:
        # bf16 main gradients need the bf16 buffer above (bench.planning.checks refuses fp32 ones).
        flags += PAPER_STATE_FLAGS
    if tuning.optimizer_states == "paper-kit":
        flags.append(KIT_PAPER_ADAM_FLAG)
    if tuning.grad_reduce_fp8:
        # The buffer stays as above; the kit's FP8 collectives reduce it (bench.train.grad_reduce).
        flags += ["--kit-grad-reduce", tuning.grad_reduce]
    if tuning.msamp_modules != DEFAULT_MSAMP_MODULES:
        # Transformer Engine's layer norm and attention around MS-AMP's linears (bench.train.spec);
        # the layers stay --transformer-impl local, which MS-AMP's linears need.
        flags += ["--kit-msamp-modules", tuning.msamp_modules]
    if tuning.gpu_memory_cap is not None:
        flags += ["--kit-gpu-memory-cap", f"{tuning.gpu_memory_cap:g}"]
    if dp > 1 and tuning.overlap:
        flags += ["--overlap-grad-reduce", "--overlap-param-gather"]
    if tuning.fused_loss:
        # Megatron's own fused cross entropy (torch.compile'd), not TE's, which Megatron warns about.
        flags += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native"]
    return flags + graph_flags(tuning.cuda_graphs) + dropout_flags(tuning.dropout, DEFAULT_DROPOUT)


def megatron_args(preset: Preset, layout: Layout, precision: Precision, iters: int,
                  capabilities: Capabilities, data_path: str = "",
                  tuning: Tuning = DEFAULT_TUNING, recompute: str | None = None,
                  profile_steps: int = 0) -> list[str]:
    """Megatron flags for one benchmark run; mock data unless ``data_path`` is given.

    Performance defaults (each measured on H200, see the README's results; ``tuning`` turns the
    first three off for A/B runs): gradients reduced in bf16 under bf16 (halves gradient memory
    and traffic); with data parallelism, gradient reduce-scatter and parameter all-gather
    overlapped with compute; the fused cross-entropy loss; the distributed optimizer. The entry
    adds the fused AdamW on the no-TE path (``--kit-torch-adam``). ``capabilities`` (what the
    training environment has) and ``tuning.layers`` choose the layer implementation, and the
    fusions the layers lack are turned off.
    ``profile_steps`` more steps are trained and profiled after the ``iters`` measured ones and
    the profiler's lead steps (:mod:`bench.measure.profile`).
    """
    if layout.zero is not None:
        raise ValueError(f"zero{layout.zero} is a DeepSpeed stage: use --engine megatron-deepspeed,"
                         " or drop it (the Megatron engine shards optimizer state with its "
                         "distributed optimizer, which is on by default)")
    flags = model_flags(preset) + parallel_flags(layout)
    if layout.vp > 1:
        flags += ["--num-layers-per-virtual-pipeline-stage",
                  str(preset.layers // (layout.pp * layout.vp))]
    if layout.cp > 1:
        flags += ["--context-parallel-size", str(layout.cp)]
    profiled = iters + PROFILE_LEAD_STEPS if profile_steps else iters  # the steps before the captured ones
    flags += batch_flags(layout, profiled + profile_steps)
    flags += precision.flags
    flags += recompute_flags(recompute, FULL_RECOMPUTE)
    flags += list(OPTIMIZER_FLAGS)
    flags += tuning_flags(tuning, precision, layout.dp)
    flags += megatron_flags(layer_capabilities(capabilities, precision, tuning.layers))
    flags += ["--use-distributed-optimizer", "--distributed-backend", "nccl",
              "--log-throughput", "--tokenizer-type", "NullTokenizer",
              "--vocab-size", str(preset.vocab_size)]
    if profile_steps:
        # Megatron's torch-profiler hook on rank 0, over the steps after the measured ones; the
        # entry puts the trace in the run's profile folder (bench.measure.profile).
        flags += ["--profile", "--use-pytorch-profiler", "--profile-ranks", "0",
                  "--profile-step-start", str(profiled), "--profile-step-end", str(profiled + profile_steps)]
    if data_path:
        flags += ["--data-path", data_path, "--split", "949,50,1"]
    else:
        flags += ["--mock-data"]
    return flags
