"""Each term of the step-time model against a hand computation on a tiny case."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bench.config.network import Network
from bench.config.precisions import PRECISIONS
from bench.planning.predict.case import Case
from bench.planning.predict.facts import AllReduce, Gemm, GemmShape, Performance, load_all
from bench.planning.predict.model import OVERLAP_P, combine, overlapped, predict
from bench.planning.predict.terms import HOST_UNIT_S, TERMS, network_terms, step_terms

GIB = 2**30
# 100 TFLOP/s bf16 at every shape, 1000 GB/s of memory, NCCL at 100 GB/s with no latency.
PERF = Performance(hbm_gbps=1000.0, hbm_source="test",
                   gemm=Gemm(source="test", shapes=(GemmShape(name="s", tokens=8, k=64, n=64,
                                                              bf16=100.0, fp8=200.0),)),
                   allreduce=(AllReduce(gpus=2, source="test", mib=(1024.0,), busbw_gbps=(100.0,)),))
TINY = Case(accelerator="x", layers=2, hidden=64, heads=4, seq=32, vocab=128, tp=1, pp=1, dp=1,
            vp=1, cp=1, sp=False, micro_batch=1, global_batch=2, family="bf16", implementation="te")


def test_gemm_is_the_layers_and_logits_flops_over_the_ceiling() -> None:
    # per micro-batch and pass: 2 x 32 tokens x (64x192 + 64x64 + 64x256 + 256x64) x 2 layers,
    # plus the logits 2 x 32 x 64 x 128; 3 passes (forward, backward twice), 2 micro-batches
    flops = (2 * 32 * (64 * 192 + 64 * 64 + 64 * 256 + 256 * 64) * 2 + 2 * 32 * 64 * 128) * 3 * 2
    assert step_terms(TINY, PERF)["gemm"] == pytest.approx(flops / 100e12)


def test_fp8_gemms_run_at_the_fp8_ceiling() -> None:
    bf16 = step_terms(TINY, PERF)["gemm"]
    for precision in ("fp8-delayed", "msamp-o2", "fp4"):
        case = replace(TINY, family=PRECISIONS[precision].family)
        assert step_terms(case, PERF)["gemm"] == pytest.approx(bf16 / 2)


def test_attention_and_elementwise() -> None:
    terms = step_terms(TINY, PERF)
    # causal: 2 x tokens x seq x hidden per layer and pass, at the bf16 ceiling
    assert terms["attention"] == pytest.approx(2 * 32 * 32 * 64 * 2 * 3 * 2 / 100e12)
    # 16 tensors of 32 x 64 bf16 values per layer and pass, over 1000 GB/s
    assert terms["elementwise"] == pytest.approx(16 * 32 * 64 * 2 * 2 * 3 * 2 / 1e12)
    assert terms["elementwise_local"] == 0.0
    assert step_terms(replace(TINY, recompute="selective"), PERF)["attention"] == pytest.approx(
        terms["attention"] * 4 / 3)


def test_fp8_casts_read_two_bytes_and_write_one() -> None:
    # inputs 32 x (64 + 64 + 64 + 256), weights 64x192 + 64x64 + 64x256 + 256x64, 3 bytes each
    cast = (32 * (64 + 64 + 64 + 256) + 49152) * 3 * 2 * 3 * 2 / 1e12
    terms = step_terms(replace(TINY, family="fp8"), PERF)
    assert terms["cast_fp8"] == pytest.approx(cast)
    assert terms["cast_msamp"] == step_terms(TINY, PERF)["cast_fp8"] == 0.0


def test_tensor_parallel_collectives() -> None:
    act = 32 * 64 * 2  # one activation, bytes
    plain = step_terms(replace(TINY, tp=2), PERF)["tp_comm"]
    # 2 all-reduces per layer and pass, each 2 (n-1)/n of the activation over 100 GB/s
    assert plain == pytest.approx(2 * (2 * 0.5 * act / 100e9) * 2 * 3 * 2)
    # sequence parallel: 2 all-gathers and 2 reduce-scatters, each (n-1)/n of it: the same bytes
    assert step_terms(replace(TINY, tp=2, sp=True), PERF)["tp_comm"] == pytest.approx(plain)


def test_fp8_with_sequence_parallelism_casts_the_norm_shard_and_gathers_it_in_fp8() -> None:
    """Transformer Engine quantizes the norm's output (QKV's and the MLP's first input) on the
    rank's share of the sequence, then all-gathers it in fp8: the forward's two gathers carry half
    the bytes, and those two inputs are cast on 32 / 2 tokens."""
    act = 32 * 64 * 2
    fp8 = step_terms(replace(TINY, tp=2, sp=True, family="fp8"), PERF)
    bf16 = step_terms(replace(TINY, tp=2, sp=True), PERF)
    saved = 2 * (0.5 * act / 100e9 - 0.5 * act / 2 / 100e9) * 2 * 1 * 2  # layers, forward, micro-batches
    assert fp8["tp_comm"] == pytest.approx(bf16["tp_comm"] - saved)
    inputs = 16 * (64 + 64) + 32 * (32 + 128)  # QKV and MLP up on 16 tokens; projection, MLP down on 32
    weights = 64 * 96 + 32 * 64 + 64 * 128 + 128 * 64
    assert fp8["cast_fp8"] == pytest.approx((inputs + weights) * 3 * 2 * 3 * 2 / 1e12)
    unsplit = step_terms(replace(TINY, tp=2, family="fp8"), PERF)  # no sp: every token, bf16 gathers
    assert unsplit["cast_fp8"] == pytest.approx((32 * (64 + 32 + 64 + 128) + weights) * 3 * 2 * 3 * 2 / 1e12)
    assert unsplit["tp_comm"] == pytest.approx(step_terms(replace(TINY, tp=2), PERF)["tp_comm"])


def test_pipeline_bubble_sends_and_virtual_stages() -> None:
    case = replace(TINY, pp=2, global_batch=4)  # 4 micro-batches, one layer per stage
    terms = step_terms(case, PERF)
    stretch = 4 * (1 + 1 / 4)
    flops = (2 * 32 * 49152 * 1 + 2 * 32 * 64 * 128) * 3
    assert terms["gemm"] == pytest.approx(flops / 100e12 * stretch)
    assert terms["pp_p2p"] == pytest.approx(2 * (32 * 64 * 2 / 100e9) * stretch)
    interleaved = step_terms(replace(case, layers=4, vp=2), PERF)
    assert interleaved["pp_p2p"] == pytest.approx(2 * 2 * (32 * 64 * 2 / 100e9) * 4 * (1 + 1 / 8))


def test_data_parallel_reduction_and_optimizer() -> None:
    params = (12 * 64 * 64 + 13 * 64) * 2 + 128 * 64
    case = replace(TINY, dp=2, global_batch=4)
    terms = step_terms(case, PERF)
    reduction = 2 * (0.5 * params * 2 / 100e9)  # reduce-scatter + all-gather of bf16
    assert (terms["dp_sync"], terms["dp_overlap"]) == (pytest.approx(reduction), 0.0)
    overlapped = step_terms(replace(case, overlap=True), PERF)
    assert (overlapped["dp_sync"], overlapped["dp_overlap"]) == (0.0, pytest.approx(reduction))
    assert terms["optimizer"] == pytest.approx(params / 2 * 32 / 1e12)


def test_host_units_and_cuda_graphs() -> None:
    terms = step_terms(replace(TINY, tp=2, family="fp8"), PERF)
    units = 2 * 3 * HOST_UNIT_S * 2  # layers x passes x 1 ms x micro-batches
    assert (terms["host_te"], terms["host_tp"], terms["host_fp8"]) == pytest.approx((units,) * 3)
    assert terms["host_local"] == terms["host_msamp"] == 0.0
    graphed = step_terms(replace(TINY, graphs=True), PERF)
    assert all(graphed[name] == 0.0 for name in ("host_te", "host_tp", "host_fp8"))
    # the loop's Python per micro-batch and the optimizer step's launches per layer stay with graphs
    assert graphed["host_micro"] == terms["host_micro"] == pytest.approx(2 * HOST_UNIT_S)
    assert graphed["host_step"] == terms["host_step"] == pytest.approx(2 * HOST_UNIT_S)


def test_step_is_gpu_and_host_partly_overlapped_plus_what_follows() -> None:
    terms = dict.fromkeys(TERMS, 0.0) | {"gemm": 2.0, "host_te": 3.0, "optimizer": 0.5}
    gpu_bound = combine(terms, {"gemm": 1.0, "host_te": 0.5, "optimizer": 1.0})
    both = (2.0**OVERLAP_P + 1.5**OVERLAP_P) ** (1 / OVERLAP_P)  # the p-norm of 2 s and 1.5 s
    assert 2.0 < both < 3.5
    assert (gpu_bound.step_s, gpu_bound.host_bound, gpu_bound.dominant) == (
        pytest.approx(both + 0.5), False, ("gemm",))
    assert sum(gpu_bound.parts.values()) == pytest.approx(gpu_bound.step_s)  # each term's share
    host_bound = combine(terms, {"gemm": 1.0, "host_te": 1.0, "optimizer": 2.0})
    assert (host_bound.step_s, host_bound.host_bound) == (
        pytest.approx((2.0**OVERLAP_P + 3.0**OVERLAP_P) ** (1 / OVERLAP_P) + 1.0), True)
    assert host_bound.dominant == ("host_te",)
    # far apart, the larger one alone; equal, each hides part of the other
    assert overlapped(1.0, 1e-3).seconds == pytest.approx(1.0) and overlapped(1.0, 0.0).host == 0.0
    assert overlapped(1.0, 1.0).seconds == pytest.approx(2 ** (1 / OVERLAP_P))


def test_gemm_ceiling_interpolates_between_shapes_and_holds_at_the_ends() -> None:
    gemm = Gemm(source="t", shapes=(GemmShape(name="a", tokens=1, k=1024, n=1024, bf16=100.0, fp8=200.0),
                                    GemmShape(name="b", tokens=1, k=4096, n=4096, bf16=300.0, fp8=600.0)))
    perf = PERF.model_copy(update={"gemm": gemm})
    assert perf.gemm_tflops(2048, 2048, fp8=False) == pytest.approx(200.0)  # halfway on a log scale
    assert perf.gemm_tflops(512, 512, fp8=True) == 200.0
    assert perf.gemm_tflops(8192, 8192, fp8=False) == 300.0


def test_nccl_latency_and_bandwidth_from_measured_sizes() -> None:
    # 1 GiB in 10 ms and 2 GiB in 19 ms: a line of 1 ms latency and 1 GiB per 9 ms
    sizes = AllReduce(gpus=2, source="t", mib=(1024.0, 2048.0),
                      busbw_gbps=(GIB / 10e-3 / 1e9, 2 * GIB / 19e-3 / 1e9))
    latency, rate = sizes.seconds(0)
    assert (latency, rate) == (pytest.approx(1e-3), pytest.approx(GIB / 9e-3))
    one = AllReduce(gpus=4, source="t", mib=(1024.0,), busbw_gbps=(GIB / 11e-3 / 1e9,))
    perf = PERF.model_copy(update={"allreduce": (sizes, one)})
    assert perf.link(4) == (pytest.approx(1e-3), pytest.approx(GIB / 10e-3))  # the 2-GPU latency
    assert perf.link(8)[1] == pytest.approx(GIB / 10e-3)  # the nearest count measured


def test_every_performance_file_loads_and_predicts() -> None:
    found = load_all()
    assert {"h100-sxm", "h200-sxm"} <= set(found)
    for perf in found.values():
        step = predict(TINY, perf, dict.fromkeys(TERMS, 1.0)).step_s
        assert math.isfinite(step) and step > 0


# Eight GPUs a node, eight 100 Gb/s NICs (12.5 GB/s a GPU when all send), 10 us a step between nodes.
NET = Network(name="test net", nics=8, gbits=100.0, source="datasheet: test", latency_us=10.0,
              latency_source="published: test")
SPREAD = replace(TINY, dp=16, tp=2, global_batch=32, node_gpus=8, network=NET, overlap=True)


def test_one_node_adds_nothing_for_links_between_nodes() -> None:
    assert replace(SPREAD, network=None).nodes == 1 and SPREAD.nodes == 4
    assert network_terms(replace(SPREAD, network=None), PERF) == {"pp_net": 0.0, "dp_net": 0.0}
    inside = replace(SPREAD, dp=4, global_batch=8)  # tp2 x dp4 = one node of 8
    assert inside.nodes == 1 and network_terms(inside, PERF) == {"pp_net": 0.0, "dp_net": 0.0}
    # the fitted terms price every collective inside a node, over nodes or not
    assert step_terms(SPREAD, PERF) == step_terms(replace(SPREAD, network=None), PERF)


def test_data_parallel_over_nodes_is_a_ring_at_its_slower_link_and_costs_more() -> None:
    params = (12 * 64 * 64 + 13 * 64) * 2 / 2 + 128 * 64 / 2  # the stage's share at tp 2
    size = params * 2
    # 4 ranks of the group on each of 4 nodes: the NICs give them 4 x 12.5 GB/s, below NVLink's
    # 100; 3 steps between nodes of 10 us each
    over_nodes = 3 * 10e-6 + 15 / 16 * size / 50e9
    inside = 15 / 16 * size / 100e9
    found = network_terms(SPREAD, PERF)
    assert found["dp_net"] == pytest.approx(2 * (over_nodes - inside))
    assert found["pp_net"] == 0.0  # no pipeline
    factors = {"gemm": 1.0, "dp_overlap": 0.5}
    far = predict(SPREAD, PERF, factors)
    near = predict(replace(SPREAD, network=None), PERF, factors)
    assert far.step_s == pytest.approx(near.step_s + 0.5 * found["dp_net"])  # overlapped: the fit's share
    synced = replace(SPREAD, overlap=False)
    assert predict(synced, PERF, factors).step_s == pytest.approx(
        predict(replace(synced, network=None), PERF, factors).step_s + found["dp_net"])
    assert far.parts["dp_net"] > 0


def test_pipeline_sends_over_nodes_go_over_the_gpus_share_of_the_nics() -> None:
    case = replace(TINY, pp=2, global_batch=2, node_gpus=1, network=NET)  # one GPU a node, 2 nodes
    act = 32 * 64 * 2  # tokens x hidden, bf16
    per_gpu = 8 * 100e9 / 8 / 1  # all eight NICs for the node's one GPU
    stretch = 2 * (1 + 1 / 2)  # two micro-batches, the bubble of two stages
    send = 10e-6 + act / per_gpu
    assert network_terms(case, PERF)["pp_net"] == pytest.approx(2 * (send - act / 100e9) * stretch)
