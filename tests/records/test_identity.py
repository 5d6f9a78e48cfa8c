"""A configuration's key on the records in ``results/records/``: repeats of one configuration from
different kit commits share it, runs that differ in one flag do not, and what a run's length,
paths, launcher or profiler changes is not part of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.records.identity import KEY_CHARS, config_key, differences, normalised_argv
from bench.records.record import PatchSeries, Record, record_from_json
from tests.record_factory import make_record

RECORDS = Path(__file__).resolve().parents[2] / "results" / "records"


def kept(run_id: str) -> Record:
    return record_from_json((RECORDS / f"{run_id}.json").read_text())


def test_repeats_from_different_commits_and_lengths_share_a_key() -> None:
    # 1.3b bf16 on one H200, repeated by five kit commits with 10 and 14 iterations.
    runs = [kept(f"1.3b_tp1pp1dp1_local_2026112{stamp}") for stamp in
            ("3T165107Z", "3T192956Z", "3T195513Z", "3T215158Z")]
    assert len({run.provenance.kit_commit for run in runs}) > 1
    assert len({config_key(run) for run in runs}) == 1
    key = config_key(runs[0])
    assert len(key.digest) == KEY_CHARS
    assert key.name == "1.3b tp1pp1dp1 bf16 4/32, megatron local, 1x h200-sxm"


@pytest.mark.parametrize(("a", "b", "parts"), [
    ("1.3b_tp1pp1dp1_local_20261123T220602Z", "1.3b_tp1pp1dp1_local_20261123T221102Z",
     ["layout.micro_batch", "argv.--micro-batch-size"]),
    ("1.3b_tp1pp1dp2zero2_local_20261128T083243Z-f3ec0b-c21",
     "1.3b_tp1pp1dp2zero3_local_20261128T083425Z-7feb40-c22", ["layout.zero", "argv.--zero-stage"]),
    ("13b_tp1pp4dp1_local_20261127T065609Z-cc761c-c2", "13b_tp1pp4vp2dp1_local_20261127T094709Z-c995f3-c13",
     ["layout.vp", "argv.--num-layers-per-virtual-pipeline-stage"]),
])  # fmt: skip
def test_runs_that_differ_in_one_flag_have_two_keys_and_say_which(a: str, b: str, parts: list[str]) -> None:
    # The flag and the record's fact it sets: one setting, said twice.
    first, second = kept(a), kept(b)
    assert config_key(first) != config_key(second)
    assert differences(first, second) == parts


def test_the_launcher_length_paths_and_profiler_are_not_the_configuration() -> None:
    flags = ["--num-layers", "40", "--bf16", "--data-path", "/tmp/a/gpt2_text_document"]
    torchrun = ["torchrun", "--nnodes=1", "--nproc-per-node=4", "--standalone", "-m",
                "bench.train.pretrain_gpt", *flags, "--train-iters", "10", "--save", "/ckpt"]
    python = ["python", "-m", "bench.train.pretrain_gpt", *flags, "--train-iters", "30", "--profile",
              "--profile-step-start", "31", "--profile-step-end", "33", "--seed", "7"]
    assert normalised_argv(torchrun) == normalised_argv(python) == (("--bf16", ()), ("--num-layers", ("40",)))
    one, other = make_record(argv=torchrun), make_record(argv=python, provenance={
        "kit_commit": "fedcba9", "megatron_core": "0.19.2", "torch": "2.11.0", "gpu_model": "NVIDIA H200"})
    assert config_key(one) == config_key(other)


def test_an_entry_script_after_the_cap_is_not_its_value() -> None:
    argv = ["python", "-m", "bench.train.script_entry", "--kit-gpu-memory-cap", "80",
            "/opt/Megatron-DeepSpeed/pretrain_gpt.py", "--num-layers", "40"]
    assert normalised_argv(argv) == (("--kit-gpu-memory-cap", ("80",)), ("--num-layers", ("40",)))


@pytest.mark.parametrize(("change", "part"), [
    ({"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
     "env.PYTORCH_CUDA_ALLOC_CONF"),
    ({"provenance": {"torch": "2.10.0", "megatron_core": "0.19.2", "gpu_model": "NVIDIA H200"}},
     "software.torch"),
    ({"variant": {"gpu_memory_cap_gb": 80}}, "hardware.cap_gb"),
    ({"precision": "fp8-delayed"}, "precision"),
])  # fmt: skip
def test_the_environment_software_cap_and_precision_are(change: dict, part: str) -> None:
    base = make_record()
    assert part in differences(base, make_record(**change))


def test_version_stamps_and_labels_are_not() -> None:
    base = make_record()
    stamped = make_record(env={"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_VERSION": "2.28.9"},
                          labels={"campaign": "x4"}, run_id="13b_dp4_h200x4_20261122T201500Z")
    assert config_key(base) == config_key(stamped)


def test_a_series_reworded_with_its_code_unchanged_keeps_its_key() -> None:
    # The 28 Megatron-DeepSpeed records carry the series' digest from before its messages were
    # reworded; a run of today's series is the same configuration.
    before, after = (PatchSeries(upstream="megatron-deepspeed", sha256=digest, applied=True)
                     for digest in ("7c5051a71637d60d", "03083893cfbd9373"))
    assert config_key(make_record(patches=[before])) == config_key(make_record(patches=[after]))
    other = PatchSeries(upstream="megatron-deepspeed", sha256="0123456789abcdef", applied=True)
    assert config_key(make_record(patches=[before])) != config_key(make_record(patches=[other]))


def _with_te(version: str | None) -> Record:
    return make_record(provenance={"kit_commit": "0123abc", "megatron_core": "0.19.2", "torch": "2.11.0",
                                   "gpu_model": "NVIDIA H200", "gpu_count": 4,
                                   "transformer_engine": version})


def test_transformer_engine_s_version_is_the_configuration() -> None:
    # With TE on the path megatron-core steps Adam with TE's FusedAdam, even on the local layers:
    # a run without TE, one with TE 2.20.2 and one with another TE are three configurations.
    without, te, other = _with_te(None), _with_te("2.20.2"), _with_te("2.21.0")
    assert len({config_key(without), config_key(te), config_key(other)}) == 3
    assert differences(without, te) == differences(te, other) == ["software.transformer_engine"]


def test_a_record_without_transformer_engine_s_version_keeps_its_key() -> None:
    # Keyed only where named: the key of a record written before the field, as the results page
    # quotes it (2.7b bf16 dropout 0 on the local layers, one H200), and of a run without TE.
    before = kept("2.7b_tp1pp1dp1_local_20261129T060521Z-1dcf15")
    assert before.provenance.transformer_engine is None
    assert config_key(before).digest == "dd79f5cc46"
    assert config_key(_with_te(None)) == config_key(make_record())
