"""A Megatron-DeepSpeed run's record: the engine's own logged TFLOP/s beside the kit's, the ZeRO
stage, the DeepSpeed version, the FLOPs a recompute run counts, and as a field the patch series
and whether the tree that ran has it."""

from __future__ import annotations

import importlib.metadata
import statistics
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.measure.flops import flops_per_iteration
from bench.measure.logparse import parse_log
from bench.measure.protocol import window
from bench.planning.plan import plan
from bench.records.engine_notes import installed_version
from bench.records.record import Status
from bench.results.aggregate import configuration
from bench.running.local import make_record
from tests.conftest import options
from tests.snapshots import snapshot_tree

FIXTURE = Path(__file__).parents[1] / "fixtures/logs/megatron_deepspeed_rendered_1.3b_tp1pp1.log"


def _launch(tree: Path, **extra):
    platform = load_platform("local").model_copy(update={"megatron_deepspeed_dir": str(tree)})
    return plan(get_preset("1.3b"), "tp1pp1", platform, options(
        gpus=1, gpus_present=1, gpu_name="NVIDIA H200", engine="megatron-deepspeed", mbs=4, gbs=32,
        iters=12, data_path="/d/gpt2_text_document", vocab_file="v.json", merge_file="m.txt",
        **extra))


def test_megatron_deepspeed_record_carries_engine_facts(patched_tree):
    text = FIXTURE.read_text()
    result = parse_log(text)
    assert result.status is Status.OK and len(result.iterations) == 12
    launch = _launch(patched_tree, recompute="full")
    record = make_record(launch, result, 0.0, 60.0, text)
    assert record.ok and record.engine == "megatron-deepspeed"
    notes = record.engine_notes
    logged = statistics.median(it.tflops_per_gpu for it in window(result.iterations))
    assert notes["engine_tflops_per_gpu"] == pytest.approx(logged, abs=0.01)
    assert "throughput_calculator" in notes["engine_flops"]
    assert notes["zero_stage"] == 1 and record.variant == {"recompute": "full"}
    (series,) = record.patches
    assert (series.upstream, series.applied, len(series.sha256)) == ("megatron-deepspeed", True, 16)
    assert "patch_series" not in notes  # a field of the record now, not a note
    assert record.implementation is None and record.data.kind == "real"
    assert record.data.name == "gpt2_text_document"
    assert "deepspeed" in notes  # None where the training Python has no DeepSpeed
    # The kit's figure is causal model FLOPs; the hardware figure adds the recompute.
    step = statistics.median(it.elapsed_ms for it in window(result.iterations)) / 1000
    assert record.metrics.tflops_per_gpu == pytest.approx(
        flops_per_iteration(launch.preset, 32) / step / 1e12, rel=1e-9)
    assert notes["hardware_tflops_per_gpu"] == pytest.approx(
        flops_per_iteration(launch.preset, 32, recompute="full") / step / 1e12, abs=0.01)
    assert notes["flops_counted"].startswith("model")
    # Megatron-DeepSpeed counts non-causal attention and the recompute: above both kit figures.
    assert notes["engine_tflops_per_gpu"] > notes["hardware_tflops_per_gpu"] > \
        record.metrics.tflops_per_gpu
    # What the engine measured never splits a configuration; its DeepSpeed version, a software
    # version like torch's, does (bench.records.identity), and so does the recompute.
    assert record.notes == {} and record.labels == {}
    measured_otherwise = record.model_copy(update={"engine_notes": {
        **notes, "engine_tflops_per_gpu": 1.0, "hardware_tflops_per_gpu": 2.0}})
    assert configuration(measured_otherwise) == configuration(record)
    other_deepspeed = record.model_copy(update={"engine_notes": {**notes, "deepspeed": "0.0"}})
    assert configuration(other_deepspeed) != configuration(record)
    assert configuration(record.model_copy(update={"variant": {}})) != configuration(record)


def test_a_tree_without_the_series_is_named(tmp_path):
    launch = _launch(snapshot_tree("megatron-deepspeed"))
    record = make_record(launch, parse_log(FIXTURE.read_text()), 0.0, 60.0, "")
    (series,) = record.patches
    assert not series.applied and series.why.startswith("NOT applied in ")
    assert record.variant == {} and "hardware_tflops_per_gpu" not in record.engine_notes


def test_apex_is_noted_only_where_installed_and_splits_configurations(patched_tree):
    """apex changes Megatron-DeepSpeed's layer norm and optimizer, so its version is a note that
    makes a row of its own; this Python has no apex, so the note is absent, not null."""
    assert installed_version("pytest") == importlib.metadata.version("pytest")
    assert installed_version("apex") is None and installed_version("no-such-dist") is None
    record = make_record(_launch(patched_tree), parse_log(FIXTURE.read_text()), 0.0, 60.0, "")
    assert "apex" not in record.engine_notes
    with_apex = record.model_copy(update={"engine_notes": {**record.engine_notes, "apex": "0.1"}})
    assert configuration(with_apex) != configuration(record)
