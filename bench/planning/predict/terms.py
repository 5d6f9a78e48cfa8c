"""The terms of one step, in seconds at the measured ceilings, before the fit's factors.

The step of the pipeline's last stage (it holds the logits) is ``overlapped(gpu, host) + after``,
the GPU's stream and the host's launches partly overlapping
(:func:`bench.planning.predict.model.overlapped`):

- ``gpu``, the GPU's stream per micro-batch times the micro-batches ``m``, stretched by the
  pipeline bubble ``1 + (pp - 1) / (vp m)``: GEMMs at their shape's ceiling (``gemm``) and a
  small-shape correction (``gemm_small``), causal attention (``attention``), elementwise traffic
  over memory bandwidth (``elementwise``; ``elementwise_local`` for the unfused local layers),
  fp8 casts (``cast_*``), tensor-parallel collectives
  (``tp_comm``) and pipeline sends (``pp_p2p``) over the measured NCCL latency and bandwidth;
- ``host``, what the host spends per micro-batch, stretched the same way: launching each layer's
  kernels, one unit (1 ms) per layer and pass, for the kind of layers (``host_te``,
  ``host_local``, ``host_msamp``) and again for what adds kernels to each layer (``host_tp``:
  tensor parallelism, ``host_fp8``: Transformer Engine's fp8), which CUDA graphs leave out; and
  the training loop's Python and the layers' outside (embedding, loss), one unit a micro-batch
  (``host_micro``), which they do not;
- ``after``, once a step: the data-parallel reduce-scatter and all-gather (``dp_sync``, or
  ``dp_overlap`` where the backward pass hides part of it), the optimizer's pass over its shard
  of the parameters (``optimizer``, ``optimizer_paper``), the host launching the optimizer step's
  kernels, a few per parameter tensor, so one unit per layer of the stage (``host_step``), and a
  fixed cost (``step_fixed``, 10 ms).

The host terms follow the profiles' kernel counts: 125m with local layers launched 6,944 kernels
a step at micro-batch 1 x 8 and 4,744 at 8 x 4, so 46 a layer and micro-batch (15 a pass) and
about 2,500 a step besides, more with more layers (10,418 for 2.7b at 8 x 4); the GPU ran 71 ms
of the first's 390 ms step. The fit prices each launch (a local layer's pass at 0.38 ms: 25 us a
kernel) and the rest of the host's step from the records.

A pass is a forward (1), its backward (2) and, with full recompute, a second forward (1).

Where a run spans nodes (a plan on a platform whose ``[network]`` table gives the links between
them; every record so far is one node), :func:`network_terms` gives what those links add to the
terms above, which price every collective inside a node. The collectives are placed in Megatron's
rank order (tensor-parallel ranks adjacent, then data-parallel, then pipeline stages):
tensor-parallel ones stay inside a node (NVLink); pipeline sends, once the pipeline spans nodes,
go over the node's NICs, each GPU its share of them (``pp_net``); the data-parallel reduce-scatter
and all-gather, once its ranks span nodes, run as NCCL's ring does over nodes (``dp_net``): its
steps inside a node over NVLink, its steps between nodes over the share of the node's NICs the
group's ranks there have, at the slower of the two, with the network's latency per step between
nodes. No record crosses nodes, so these two are not fitted (:mod:`bench.planning.predict.model`).
"""

from __future__ import annotations

import math

from bench.planning.predict.case import Case
from bench.planning.predict.facts import Performance

GPU_TERMS = ("gemm", "gemm_small", "attention", "elementwise", "elementwise_local", "cast_fp8",
             "cast_msamp", "cast_fp4", "tp_comm", "pp_p2p")
HOST_TERMS = ("host_te", "host_local", "host_msamp", "host_tp", "host_fp8", "host_micro")
AFTER_TERMS = ("dp_sync", "dp_overlap", "optimizer", "optimizer_paper", "host_step", "step_fixed")
TERMS = GPU_TERMS + HOST_TERMS + AFTER_TERMS
NETWORK_TERMS = ("pp_net", "dp_net")  # what links between nodes add: not fitted (network_terms)

BF16_BYTES = 2
ELEMENTWISE_TENSORS = 16  # tokens x hidden tensors a layer's forward reads or writes outside GEMMs
CAST_BYTES = 3  # a cast reads 2 bytes (bf16) and writes 1 (fp8)
OPTIMIZER_BYTES = 32  # Adam over fp32 master weights, moments and gradient: read and written
SMALL_GEMM = 2048.0  # sqrt(k n) at which the small-shape correction equals the GEMM term
HOST_UNIT_S = 1e-3
STEP_FIXED_S = 1e-2


def _layer_gemms(case: Case) -> tuple[tuple[int, int], ...]:
    """(k, n) of a layer's weights on one GPU: QKV, projection, MLP up and down."""
    h, tp = case.hidden, case.tp
    return (h, 3 * h // tp), (h // tp, h), (h, 4 * h // tp), (4 * h // tp, h)


def _gemm_terms(case: Case, perf: Performance, tokens: int, passes: int) -> tuple[float, float]:
    """(at the ceilings, the small-shape correction) of one micro-batch's GEMMs on the stage."""
    fp8 = case.family != "bf16"  # MS-AMP's GEMMs are fp8 too, fp4 is simulated over them
    shapes = [(k, n, case.layers // case.pp) for k, n in _layer_gemms(case)]
    shapes.append((case.hidden, case.vocab // case.tp, 1))  # the logits, once
    at_ceiling = small = 0.0
    for k, n, count in shapes:
        seconds = 2 * tokens * k * n * count * passes / (perf.gemm_tflops(k, n, fp8) * 1e12)
        at_ceiling += seconds
        small += seconds * SMALL_GEMM / math.sqrt(k * n)
    return at_ceiling, small


def _collective(perf: Performance, gpus: int, bus_bytes: float) -> float:
    latency, rate = perf.link(gpus)
    return latency + bus_bytes / rate


def _send(case: Case, perf: Performance, size_bytes: float) -> float:
    """One pipeline send of ``size_bytes`` between nodes, over the GPU's share of the NICs."""
    assert case.network is not None
    return case.network.latency_us * 1e-6 + size_bytes / case.network.gpu_bytes_per_s(case.node_gpus)


def _shard_collective(case: Case, perf: Performance, size_bytes: float) -> float:
    """One data-parallel reduce-scatter (or all-gather) of ``size_bytes`` per GPU, a ring over the
    ``dp`` ranks spread over nodes, as NCCL's ring runs it (its tuning model: one bandwidth, a
    latency per step by the link the step crosses): the ring's steps inside a node over NVLink, its
    steps between nodes over the NICs, the group's ranks on a node sharing them with the node's
    other GPUs (other tensor-parallel ranks' groups run theirs at once), the ring moving at its
    slower link."""
    assert case.network is not None
    share = (case.dp - 1) / case.dp
    local = max(1, case.node_gpus // (case.tp * case.cp))  # the group's ranks on one node
    nodes = case.dp // local
    inside_latency, inside_rate = perf.link(local) if local > 1 else (0.0, float("inf"))
    across_rate = local * case.network.gpu_bytes_per_s(case.node_gpus)
    latency = inside_latency + (nodes - 1) * case.network.latency_us * 1e-6
    return latency + share * size_bytes / min(inside_rate, across_rate)


def network_terms(case: Case, perf: Performance) -> dict[str, float]:
    """What the links between nodes add, in seconds, to :func:`step_terms`' pricing of the same
    collectives inside a node: ``pp_net`` (pipeline sends, on the GPU's stream, stretched as its
    other terms) and ``dp_net`` (the data-parallel reduce-scatter and all-gather, once a step);
    both 0 on one node, or where the ranks of each stay inside one."""
    found = {name: 0.0 for name in NETWORK_TERMS}
    if case.network is None or case.nodes == 1:
        return found
    if case.pp > 1:  # the pipeline's ranks lie one data-parallel block apart: it spans the nodes
        act = case.micro_batch * case.seq // case.cp * case.hidden * BF16_BYTES / (case.tp if case.sp else 1)
        m = case.micro_batches
        stretch = m * (1 + (case.pp - 1) / (case.vp * m))
        found["pp_net"] = max(0.0, 2 * case.vp * (_send(case, perf, act) - _collective(perf, 2, act))) * stretch
    if case.dp > 1 and case.tp * case.cp * case.dp > case.node_gpus:
        size = _stage_parameters(case) * BF16_BYTES
        inside = _collective(perf, case.dp, (case.dp - 1) / case.dp * size)
        found["dp_net"] = max(0.0, 2 * (_shard_collective(case, perf, size) - inside))
    return found


def _gpu_terms(case: Case, perf: Performance) -> dict[str, float]:
    """One micro-batch of the last stage."""
    tokens = case.micro_batch * case.seq // case.cp
    passes = 4 if case.recompute == "full" else 3
    stage_layers = case.layers // case.pp
    gemm, small = _gemm_terms(case, perf, tokens, passes)
    act = tokens * case.hidden * BF16_BYTES  # one activation tensor, bytes
    attention_passes = passes + (case.recompute == "selective")
    attention = (2 * tokens * case.seq * case.hidden / case.tp * stage_layers * attention_passes
                 / (perf.gemm_tflops(8192, 8192, False) * 1e12))
    split = case.tp if case.sp else 1
    elementwise = ELEMENTWISE_TENSORS * act / split * stage_layers * passes / (perf.hbm_gbps * 1e9)
    qkv, proj, up, down = gemms = _layer_gemms(case)
    weights = sum(k * n for k, n in gemms)
    # With sequence parallelism Transformer Engine's fp8 casts the norm's output (QKV's and the
    # MLP's first input) on the rank's share of the sequence and gathers it in fp8.
    te_fp8_sp = case.family == "fp8" and case.sp
    inputs = (qkv[0] + up[0]) * tokens // (split if te_fp8_sp else 1) + (proj[0] + down[0]) * tokens
    cast = (inputs + weights) * CAST_BYTES * stage_layers * passes / (perf.hbm_gbps * 1e9)
    local = case.implementation == "local"
    terms = {"gemm": gemm, "gemm_small": small, "attention": attention,
             "elementwise": 0.0 if local else elementwise, "elementwise_local": elementwise if local else 0.0,
             "cast_fp8": cast if case.family == "fp8" else 0.0,
             "cast_msamp": cast if case.family in ("msamp", "fp4") else 0.0,
             "cast_fp4": cast if case.family == "fp4" else 0.0, "tp_comm": 0.0, "pp_p2p": 0.0}
    if case.tp > 1:  # per layer and pass: 2 all-reduces, or with sp 2 all-gathers + 2 reduce-scatters
        share = (case.tp - 1) / case.tp
        each = (_collective(perf, case.tp, share * act) if case.sp
                else _collective(perf, case.tp, 2 * share * act))
        terms["tp_comm"] = each * (4 if case.sp else 2) * stage_layers * passes
        if te_fp8_sp:  # the forward's two all-gathers carry 1 byte an element, not 2
            terms["tp_comm"] -= 2 * (each - _collective(perf, case.tp, share * act / 2)) * stage_layers * (passes - 2)
    if case.pp > 1:  # an activation forward and its gradient back, per virtual stage
        terms["pp_p2p"] = 2 * case.vp * _collective(perf, 2, act / split)
    return terms


def _stage_parameters(case: Case) -> float:
    """Parameters one GPU of the last stage holds: its layers and the (tied) embedding."""
    h = case.hidden
    return (12 * h * h + 13 * h) * (case.layers // case.pp) / case.tp + case.vocab * h / case.tp


def step_terms(case: Case, perf: Performance) -> dict[str, float]:
    """Every term of ``case``'s step in seconds, unfitted, in :data:`TERMS` order."""
    m = case.micro_batches
    stretch = m * (1 + (case.pp - 1) / (case.vp * m))
    terms = {name: seconds * stretch for name, seconds in _gpu_terms(case, perf).items()}
    units = 0.0 if case.graphs else (
        (case.layers // case.pp) * (4 if case.recompute == "full" else 3) * HOST_UNIT_S * stretch)
    host = {"host_msamp" if case.family in ("msamp", "fp4") else f"host_{case.implementation}"}
    host |= ({"host_tp"} if case.tp > 1 else set()) | ({"host_fp8"} if case.family == "fp8" else set())
    terms |= {name: units if name in host else 0.0 for name in HOST_TERMS}
    terms["host_micro"] = HOST_UNIT_S * stretch
    params = _stage_parameters(case)
    dp = 0.0
    if case.dp > 1:  # reduce-scatter the gradients, all-gather the parameters (bf16)
        share = (case.dp - 1) / case.dp
        dp = 2 * _collective(perf, case.dp, share * params * BF16_BYTES)
    optimizer = params / case.dp * OPTIMIZER_BYTES / (perf.hbm_gbps * 1e9)
    terms |= {"dp_sync": 0.0 if case.overlap else dp, "dp_overlap": dp if case.overlap else 0.0,
              "optimizer": 0.0 if case.paper_states else optimizer,
              "optimizer_paper": optimizer if case.paper_states else 0.0,
              "host_step": (case.layers // case.pp) * HOST_UNIT_S, "step_fixed": STEP_FIXED_S}
    return {name: terms[name] for name in TERMS}
