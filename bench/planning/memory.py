"""A first-order estimate of peak GPU memory for a layout: plans that cannot fit are refused and
sweeps skip them.

Per GPU, in bytes (Korthikanti et al. 2022 for activations, with flash-style attention that keeps
no s x s scores):

- weights 2 B/param (bf16/fp16), gradients 2 B/param (reduced in bf16) or 4 B (fp32);
- Adam state and fp32 master weights 12 B/param (MS-AMP O2: 7, ``--optimizer-states paper``: 6,
  ``paper-kit``: 5; :func:`state_bytes`), divided by DP (Megatron's distributed optimizer, DeepSpeed ZeRO-1);
  ZeRO-2 also divides the gradients, ZeRO-3 the weights;
- activations s*b*h*(10 + 24/tp) B per layer and micro-batch (s*b*h*34/tp with sequence
  parallelism; s is divided by cp), for the layers of one pipeline stage and the micro-batches the
  1F1B schedule keeps in flight on the first stage (up to pp). Full activation recompute keeps
  only each layer's input, 2*s*b*h B (divided by tp with sequence parallelism), plus one layer's
  activations while it is recomputed; selective recompute drops the s x s attention scores, which
  this estimate does not count anyway, so it changes nothing here;
- logits s*b*V/tp in fp32 plus their gradient; 2 GB for the CUDA context and NCCL buffers;
- the optimizer step, when activations and logits are freed, needs its own transient bytes per
  parameter, divided by DP (an engine's ``step_bytes``, bench.planning.engines.registry): the peak
  is the larger of the two moments. With
  little activation memory (6.7b at micro-batch 1) the step binds: every 6.7b run on two 80 GB
  GPUs (H200s capped at 80 GB) and on one 80 GB H100 ran out of memory in the step, where the
  activation peak alone was estimated at 70-73 GB;
- fp8 (Transformer Engine's and MS-AMP's FP8 linears): an fp8 copy of every weight and its
  transpose, kept between micro-batches (2 B/param), while the four GEMM inputs a layer keeps for
  its backward pass are kept in fp8, half their bf16 bytes (7 of the 34 s*b*h). Without it, 6.7b
  with 5 B/param of optimizer state was estimated at 71.9 GB on one 80 GB H100, where it ran out
  of memory at 75 GiB allocated.
- ``--dropout 0`` (``Tuning.dropout``): the layer keeps none of its two dropout masks (2 of the 34 s*b*h).

Against the peaks measured on H200 and H100 (``results/records/``, tests/planning/test_memory.py) it
is within -15% to +18% of every megatron-engine run, half of them within 2.5%; it is a filter, not
a promise.
Megatron-DeepSpeed's unfused attention (``--no-fused-attention``) keeps the s x s scores, which
it does not model: 62 GB for 1.3b where it says 40 GB. With torch SDPA (the kit's default for it)
the same runs used 28-32 GB.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.planning.layout import Layout, valid_layouts

GB = 1e9
# Of the device's memory; the allocator needs head-room. The planner picks micro-batches and sweep
# layouts within FIT_FRACTION, and refuses a plan the user asked for only beyond REFUSE_FRACTION.
# The records on 80 GB bound the refusal: 13b tp1pp4 fp8-delayed under --gpu-memory-cap 80 on
# four H200s trained (estimate 76.7 GB, the step binding; 74.7 GB allocated), 2.7b dp2 te fp8 at
# micro-batch 8 under the same cap ran out of memory (estimate 79.2 GB; 6.6 GiB of the cap reserved
# but unallocated by torch's allocator).
FIT_FRACTION = 0.92
REFUSE_FRACTION = 0.96
# With expandable segments (--allocator expandable) torch's allocator strands no reserved memory,
# so a plan is refused only beyond the device. Bounded by records under --gpu-memory-cap 80 on two
# H200s: 2.7b dp2 te at micro-batch 8 (estimate 79.2 GB, out of memory with the default allocator)
# trained at a 79.3 GB peak, and 6.7b dp2 msamp-o2 at micro-batch 1 (estimate 78.6) at 77.0.
EXPANDABLE_REFUSE_FRACTION = 1.0

MAX_GROWTH_DOUBLINGS = 10  # a refusal looks for layouts that fit on up to 2**10 times the GPUs
_CONTEXT_BYTES = 2 * GB


def refuse_fraction(allocator: str) -> float:
    """The fraction of the device beyond which a plan is refused, for torch's allocator setting."""
    return EXPANDABLE_REFUSE_FRACTION if allocator == "expandable" else REFUSE_FRACTION


def _layer_parameters(preset: Preset) -> int:
    h = preset.hidden
    return 4 * h * h + 2 * h * preset.ffn_hidden + 13 * h  # QKV, proj, MLP, biases, norms


def _linear_parameters(preset: Preset) -> int:
    h = preset.hidden
    return 4 * h * h + 2 * h * preset.ffn_hidden  # QKV, proj, fc1, fc2 weights


def params_per_gpu(preset: Preset, layout: Layout) -> float:
    """Parameters held by the most loaded GPU (a first pipeline stage, with the embeddings)."""
    h, s, v = preset.hidden, preset.seq_length, preset.vocab_size
    return preset.layers * _layer_parameters(preset) / (layout.tp * layout.pp) + (v * h + s * h) / layout.tp


def model_parameters(preset: Preset) -> int:
    """Parameters of the whole model: the layers, the word and position embeddings (the output
    layer shares the word embedding) and the final norm; 1,317,654,528 for 1.3b, as Megatron-Core
    counted it (``memory_parts`` of its 1.3b tp1pp1 records)."""
    h = preset.hidden
    return preset.layers * _layer_parameters(preset) + (preset.vocab_size + preset.seq_length) * h + 2 * h


# --optimizer-states paper (Transformer Engine's FusedAdam): fp16 master weights, fp8 first moment
# with the transposed copy TE 2.20's Float8Quantizer allocates on Hopper, fp16 second moment
# (2 + 2 + 2 = 6 B; their per-tensor fp32 scales are a few bytes a tensor). With 6, the peak of 2.7b
# dp2 at micro-batch 8 on two H200s (71.5 GB) is matched by the measured parts; with 5 it is not.
PAPER_STATE_BYTES = 6
# --optimizer-states paper-kit (the kit's PaperAdamW, bench.train.paper_adam): the same states, the
# fp8 moment without a transposed copy (2 + 1 + 2 = 5 B).
PAPER_KIT_STATE_BYTES = 5


# Transient bytes per parameter (of a DP shard) at the optimizer step, on top of what is held.
# Megatron's distributed optimizer with bf16 gradients hands Adam an fp32 copy of its shard's
# gradient (``_copy_model_grads_to_main_grads``), kept until the next ``zero_grad``: 4 B. TE 2.20's
# FusedAdam with scaled states (``paper``) first unscales the first and second moment and the master
# weights of every tensor of a group into fp32 and keeps them in lists until its one kernel runs
# (``FusedAdam.step``): 12 B; its gradients are the bf16 buffer itself (``decoupled_grad``).
# ``paper-kit`` steps in registers (bench.train.paper_adam_kernel): no temporaries.
DO_FP32_GRAD_BYTES = 4
# DeepSpeed's ZeRO step (stages 1 and 2) likewise hands Adam an fp32 copy of each parameter group's
# gradient partition (``stage_1_and_2.py``, ``step``): 4 B.
DS_FP32_GRAD_BYTES = 4
PAPER_STEP_BYTES = 12


FP8_WEIGHT_COPY_BYTES = 2  # the fp8 weight and its transpose
# fp8 saves fewer activation bytes than half of the four linears' inputs (2+2+2+8 sbh: 7): fitted
# to 2.7b dp2 te fp8 at micro-batch 8, whose activations bind its peak (79.3 GB allocated with
# expandable segments; 7 put it 4.8 GB short, 5 within 2.1 GB).
FP8_SAVED_INPUTS_SBH = 5
# The two hidden-dropout masks a layer keeps (a byte each, outside tensor parallelism unless sp):
# --dropout 0 keeps none. 13b tp1pp4vp2 on four H200s at 80 GB peaked at 73.6 GB without
# them and 74.8 GB with them, where 55 layers' masks are 1.15 GB.
DROPOUT_MASKS_SBH = 2


def state_bytes(precision: Precision, optimizer_states: str = "default") -> int:
    """Optimizer state bytes per parameter: the precision's own (12, fp32 master weights and
    moments, unless MS-AMP O2 keeps it smaller) unless ``--optimizer-states paper``/``paper-kit``
    replaces it."""
    if optimizer_states == "paper":
        return PAPER_STATE_BYTES
    if optimizer_states == "paper-kit":
        return PAPER_KIT_STATE_BYTES
    return precision.state_bytes


def deepspeed_frees_zero1_gradients(layout: Layout) -> bool:
    """Whether a Megatron-DeepSpeed ZeRO-1 run frees each gradient once reduced, as the estimate
    then counts it; the kit's DeepSpeed config turns ``overlap_comm`` on there. In DeepSpeed 0.18's
    ``stage_1_and_2.py`` stage 1 reduces during the backward pass only with ``overlap_comm``
    (``process_gradients``), and only on the micro-batch that ends an accumulation; each gradient is
    then moved into a reused bucket (``contiguous_gradients``, on by default). Without it every
    gradient is kept until the backward pass ends, and the engine turns it off for a pipeline
    (``PipelineModule``, any pp > 1). The seed's 13B DP16 ZeRO-1 row (seed 004, pp 1) trained on
    64 GB GCDs, where weights, full fp16 gradients and sharded Adam state alone take ~61 GB: it
    needs the gradients freed, so the kit asks for it rather than count them full. The two
    reduce buckets (2 GB at DeepSpeed's default size) are not counted, as for stage 2."""
    return (layout.zero or 1) == 1 and layout.grad_accumulation == 1 and layout.pp == 1


@dataclass(frozen=True)
class Counted:
    """What the estimate counts of a run at one layout (the planner's ``MemoryQuestion``,
    bench.planning.question, gives one per layout). ``grad_bytes``: 2 when gradients are kept and
    reduced in bf16, else 4. ``zero_stage``: what is sharded over DP (1: optimizer state, as
    Megatron's distributed optimizer; 2: + gradients; 3: + weights). ``optimizer_bytes``: optimizer
    state per parameter (:func:`state_bytes`). ``recompute``: activation recompute (None, "full" or
    "selective"). ``fp8``: FP8 linears (``Precision.fp8``). ``optimizer_step_bytes``: the step's
    transient bytes per parameter (an engine's ``step_bytes``); the estimate is the larger of the
    activation peak and the step. ``hidden_dropout``: False with ``--hidden-dropout 0.0``, which
    keeps no masks."""

    preset: Preset
    layout: Layout
    grad_bytes: int = 2
    zero_stage: int = 1
    optimizer_bytes: int = 12
    recompute: str | None = None
    fp8: bool = False
    optimizer_step_bytes: int = 0
    hidden_dropout: bool = True

    def at(self, layout: Layout) -> Counted:
        """The same run at another layout, sharded at the same stage."""
        return replace(self, layout=layout)


def estimate_bytes(counted: Counted) -> float:
    """The estimated peak of the most loaded GPU, bytes."""
    preset, layout, zero_stage = counted.preset, counted.layout, counted.zero_stage
    params = params_per_gpu(preset, layout)
    # Megatron shards the distributed optimizer over data and context parallel ranks together
    # (its dp-cp group): 1.3b cp2 at sequence 8192 on two H200s peaked at 22.4 GB, 33 by the
    # estimate when sharded over dp alone.
    dp = layout.dp * layout.cp
    # Only the layers' linears get fp8 copies: the embeddings stay in 16 bits.
    fp8_linears = preset.layers * _linear_parameters(preset) / (layout.tp * layout.pp) if counted.fp8 else 0
    states = ((params * 2 + fp8_linears * FP8_WEIGHT_COPY_BYTES) / (dp if zero_stage >= 3 else 1)
              + params * counted.grad_bytes / (dp if zero_stage >= 2 else 1)
              + params * counted.optimizer_bytes / (dp if zero_stage >= 1 else 1))
    s, b, h = preset.seq_length / layout.cp, layout.micro_batch, preset.hidden
    per_sbh = 34 / layout.tp if layout.sp else 10 + 24 / layout.tp
    if counted.fp8:
        per_sbh -= FP8_SAVED_INPUTS_SBH / layout.tp
    if not counted.hidden_dropout:
        per_sbh -= DROPOUT_MASKS_SBH / (layout.tp if layout.sp else 1)
    layers = preset.layers / layout.pp
    kept = _layers_in_flight(preset, layout)
    if counted.recompute == "full":  # layer inputs kept, one layer's activations rebuilt at a time
        activations = (kept * s * b * h * 2 / (layout.tp if layout.sp else 1)
                       + s * b * h * per_sbh)
    else:
        activations = kept * s * b * h * per_sbh
    logits = 2 * 4 * s * b * preset.vocab_size / layout.tp
    if layout.pp > 1:  # the logits are the last stage's, which keeps one micro-batch in flight
        activations = max(activations, layers * s * b * h * per_sbh + logits)
    else:
        activations += logits
    step = params * counted.optimizer_step_bytes / (dp if zero_stage >= 1 else 1)
    return states + max(activations, step) + _CONTEXT_BYTES


def _layers_in_flight(preset: Preset, layout: Layout) -> float:
    """Layer activations the first pipeline stage keeps at its peak: 1F1B warms it up with pp
    micro-batches of its layers; the interleaved schedule with 2(pp - 1) + (vp - 1)pp + 1 chunks of
    layers / (pp vp) (Megatron's warm-up count), 55 layers of 13b tp1pp4vp2 against 40 without vp,
    5.4 GB more measured on four H200s."""
    if layout.vp > 1:
        chunks = min(2 * (layout.pp - 1) + (layout.vp - 1) * layout.pp + 1,
                     layout.grad_accumulation * layout.vp)
        return chunks * preset.layers / (layout.pp * layout.vp)
    return min(layout.pp, layout.grad_accumulation) * preset.layers / layout.pp


def fits(counted: Counted, device_gb: float) -> bool:
    """Whether the estimate is within FIT_FRACTION of ``device_gb``, the head-room of the planner's
    own picks."""
    return estimate_bytes(counted) <= FIT_FRACTION * device_gb * GB


def check_fits(counted: Counted, device_gb: float, device: str, gpus_per_node: int, *,
               node_gpus: int | None = None, also: str = "", refuse_at: float = REFUSE_FRACTION,
               rate: Callable[[Layout], float] | None = None) -> float:
    """The estimate in GB; when it does not fit, a ValueError naming it, the device memory and the
    nearest layouts that fit (same GPUs and micro batch first, then smaller micro batches, then
    twice the GPUs, and so on up to 1024x until three are found), each counted as ``counted`` at
    its layout. ``node_gpus``: the GPUs of one node where the platform runs jobs over nodes, so a
    larger run is named by ``--nodes``. ``also``: another way to fit, said after the layouts.
    ``refuse_at``: the fraction of the device beyond which it refuses (:func:`refuse_fraction`).
    ``rate``: a layout's expected TFLOP/s/GPU (the step-time model); with it, the layouts on one
    GPU count go fastest first."""
    preset, layout = counted.preset, counted.layout
    need = estimate_bytes(counted) / GB
    limit = refuse_at * device_gb
    if need <= limit:
        return need
    fitting = []
    for gpus in (layout.gpus * 2**k for k in range(MAX_GROWTH_DOUBLINGS + 1)):
        if len(fitting) >= 3:  # sorted by GPUs first: larger counts cannot come before these
            break
        for mbs in sorted({layout.micro_batch // 2**k or 1 for k in range(4)}, reverse=True):
            # across nodes, TP stays inside one node of the platform's size
            for lay in valid_layouts(preset, gpus, node_gpus or gpus_per_node, mbs, layout.global_batch,
                                     cp=layout.cp, zero=layout.zero):
                gb = estimate_bytes(counted.at(lay)) / GB
                distance = abs(math.log2(lay.tp / layout.tp)) + abs(math.log2(lay.pp / layout.pp))
                if gb <= limit:
                    expected = rate(lay) if rate else 0.0
                    fitting.append(((gpus, -expected, -mbs, distance, gb), lay, gb, expected))
    fitting.sort(key=lambda item: item[0])
    hints = []
    for _, lay, gb, expected in fitting[:3]:
        size = (("--nodes", lay.gpus // node_gpus, max(1, layout.gpus // node_gpus))
                if node_gpus and lay.gpus > node_gpus else ("--gpus", lay.gpus, layout.gpus))
        changes = "".join(f" {flag} {value}" for flag, value, same in (
            size, ("--mbs", lay.micro_batch, layout.micro_batch)) if value != same)
        speed = f", ~{expected:.0f} TFLOP/s/GPU expected" if rate else ""
        hints.append(f"{lay.name}{changes} (~{gb:.0f} GB{speed})")
    order = ", fastest expected first" if rate else ""
    hint = (f"nearest that fit{order}: " + ", ".join(hints) if hints
            else f"no layout of {preset.name} fits up to {layout.gpus * 2**MAX_GROWTH_DOUBLINGS} GPUs")
    raise ValueError(
        f"{preset.name} {layout.name} (mbs {layout.micro_batch}) needs ~{need:.1f} GB per GPU by "
        f"the memory estimate (bench/planning/memory.py), more than {refuse_at:.0%} of the "
        f"{device_gb:g} GB of each {device}; {hint}{'; ' + also if also else ''}; --force plans it anyway")


# Buffers the estimate does not count, by the Megatron flag that makes them: CUDA graphs keep
# static inputs and outputs per captured layer and micro-batch. Measured (4 x H200 capped at 80 GB):
# 13b tp1pp4 peaked at 69.4 GB without them and ran out of memory with them; 13b tp2pp2sp
# peaked at 66.3 GB with them, 67.2 without. The deferred output-layer weight gradient keeps the
# layer's input and logit gradient of every micro-batch on the last stage until the flush: 13b
# tp1pp4vp2 (64 micro-batches) peaked at 82.5 GB with it, 74.2 without. Transformer Engine's
# userbuffers, which overlap tensor parallelism's communication with the GEMMs: 13b tp4 + sp fp8 with
# graphs at micro-batch 2 (estimate 72.6 GB) peaked at 71.2 GB without them on four H100s capped at
# 80 GB, and ran out of memory with them as its graphs were captured.
GRAPHS_UNCOUNTED = "CUDA graphs' static buffers"
UNCOUNTED = {"--defer-embedding-wgrad-compute": "the deferred output-layer inputs and logit "
                                                "gradients of every micro-batch",
             "--tp-comm-overlap": "Transformer Engine's userbuffers"}


# Torch's default allocator and Megatron-DeepSpeed's pipeline: DeepSpeed asks its fp32 copy of a
# rank's parameters (12.24 GiB at 13b tp2pp2) in one piece at the step, after the pipeline's
# activations have cut the cache into pieces. On 80 GB, 13b tp2pp2 ran out of memory so twice:
# fp16 with full recompute at 85% of the device by the estimate (four H200s capped at 80, 17.34 GiB
# reserved but unallocated), bf16 at micro-batch 2 at 89% (four H100s). With expandable segments
# the bf16 run trained at 89% (four H200s capped at 80); 13b tp4 (no pipeline) trained at 83%
# without them.
FRAGMENTS_PAST = 0.80


def fragmentation_note(one_piece_step: bool, engine: str, pp: int, allocator: str,
                       need_gb: float, device_gb: float) -> list[str]:
    """A warning where a plan is where torch's default allocator has failed from fragmentation:
    an engine (named as ``engine``) whose step asks its fp32 copy in one piece
    (``Engine.one_piece_step``), behind a pipeline, past FRAGMENTS_PAST of the device."""
    if not one_piece_step or pp == 1 or allocator != "default" or need_gb <= FRAGMENTS_PAST * device_gb:
        return []
    return [f"{engine}'s pipeline past {FRAGMENTS_PAST:.0%} of the device (~{need_gb:.1f} of "
            f"{device_gb:g} GB) has run out of memory from fragmentation with torch's default "
            "allocator (13b tp2pp2 on 80 GB, at 85% and 89%): --allocator expandable trained it"]


def uncounted_note(train_args: tuple[str, ...], graphs: bool) -> list[str]:
    """A note for CUDA graphs (``graphs``: the run's ``--cuda-graphs`` setting) and for each flag
    whose memory the estimate leaves out."""
    left_out = [("--cuda-graphs", GRAPHS_UNCOUNTED)] if graphs else []
    left_out += [(flag, what) for flag, what in UNCOUNTED.items() if flag in train_args]
    return [f"the memory estimate does not count {what} ({flag}): it can run out of memory where "
            "the estimate fits" for flag, what in left_out]
