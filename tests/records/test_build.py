"""One record builder for local and cluster runs: the same plan gives the same record, save for
what truly differs (times, where it ran, the scheduler's bookkeeping)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.measure.logparse import parse_log
from bench.planning.plan import plan
from bench.records.build import PlanSummary, build_run_record, plan_summary
from bench.records.record import record_from_json
from tests.conftest import options

LOG = Path(__file__).parents[1] / "fixtures" / "logs" / "megatron_ok_1.3b_tp1pp1_h200.log"


def test_a_local_and_a_cluster_record_of_one_plan_differ_only_where_runs_differ() -> None:
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                  options(gpus_present=1, gpu_name="NVIDIA H200", mbs=4, gbs=32, iters=15))
    summary = plan_summary(launch)
    # What collect reads back from plan.json is what the runner had: the peak and its source too.
    saved = PlanSummary.model_validate_json(json.dumps(summary.model_dump(mode="json")))
    assert saved == summary and saved.platform.peak_tflops == 989.0
    text = LOG.read_text()
    parsed = parse_log(text, timed_out=False, exit_code=0)
    local = build_run_record(summary, parsed.status, parsed.reason, "2026-11-21T20:31:40Z",
                             "2026-11-21T20:32:20Z", parsed, text,
                             {"kit_commit": "0123abc", "hostname": "vm", "gpu_count": 1}, {})
    cluster = build_run_record(saved, parsed.status, parsed.reason, "2026-11-21T21:00:00Z",
                               "2026-11-21T21:01:00Z", parsed, text, {"kit_commit": "0123abc"},
                               {"job_id": "12", "scheduler": "slurm", "nodelist": "node[1-2]"})
    assert local.ok and local.metrics == cluster.metrics
    a, b = local.to_dict(), cluster.to_dict()
    assert {key for key in a if a[key] != b[key]} == {"started_at", "finished_at", "provenance",
                                                     "notes"}
    assert a["argv"] == list(launch.train_argv)


def test_the_record_keeps_every_iterations_lm_loss_in_order() -> None:
    """Loss curves are drawn from records: the real log's ``lm loss`` values, one per iteration."""
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                  options(gpus_present=1, gpu_name="NVIDIA H200", mbs=4, gbs=32, iters=15))
    text = LOG.read_text()
    parsed = parse_log(text, timed_out=False, exit_code=0)
    record = build_run_record(plan_summary(launch), parsed.status, parsed.reason, "2026-11-21T20:31:40Z",
                              "2026-11-21T20:32:20Z", parsed, text, {"kit_commit": "0123abc"}, {})
    logged = [float(v) for v in __import__("re").findall(r"lm loss: ([0-9.E+-]+)", text)]
    assert len(logged) == 15 and list(record.lm_losses) == logged
    assert json.loads(json.dumps(record.to_dict()))["lm_losses"] == logged


def test_steps_profiled_after_the_window_are_not_measured() -> None:
    """A --profile run trains 2 lead and 2 profiled steps after its measured ones; the profiler
    slows them all (real log of a 6.7b tp2+sp run on two H100, profiled at steps 13 and 14 after
    10 measured ones), so the window ends at the plan's last measured iteration."""
    log = LOG.parent / "megatron_ok_6.7b_tp2sp_profiled_h100x2.log"
    launch = plan(get_preset("6.7b"), "tp2pp1sp", load_platform("local"),
                  options(gpus_present=2, gpu_name="NVIDIA H100 80GB HBM3", mbs=2, gbs=16, iters=10,
                          profile=True, capabilities=Capabilities(transformer_engine=True)))
    assert launch.train_args[launch.train_args.index("--train-iters") + 1] == "14"
    text = log.read_text()
    parsed = parse_log(text, timed_out=False, exit_code=0)
    assert [it.index for it in parsed.iterations][-1] == 14
    record = build_run_record(plan_summary(launch), parsed.status, parsed.reason, "2026-11-25T22:05:09Z",
                              "2026-11-25T22:06:45Z", parsed, text, {"kit_commit": "0123abc"}, {})
    assert record.metrics.window_iters == 10 - 5  # iterations 6..10
    profiled = [it.elapsed_ms for it in parsed.iterations if it.index > 10]
    assert min(profiled) / 1000 > record.metrics.step_time_s_median


def test_bytes_by_part_are_kept_whatever_the_status() -> None:
    """The CPU log of the entry's wrapper (no iterations: incomplete) still gives its parts; the
    record round-trips them, and a record without them (an older one) reads as null."""
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                  options(gpus_present=1, gpu_name="NVIDIA H200", mbs=4, gbs=32, iters=15))
    text = (LOG.parent / "megatron_memory_parts_cpu_bf16.log").read_text()
    parsed = parse_log(text, timed_out=False, exit_code=0)
    record = build_run_record(plan_summary(launch), parsed.status, parsed.reason, "2026-11-21T20:31:40Z",
                              "2026-11-21T20:32:20Z", parsed, text, {"kit_commit": "0123abc"}, {})
    assert record.status.value == "incomplete"
    assert record.memory_parts is not None and vars(parsed.memory_parts) == record.memory_parts.model_dump()
    assert record.memory_parts.per_parameter("moments") == 8.0
    assert record_from_json(record.to_json()) == record
    old = record.to_dict()
    del old["memory_parts"]
    assert record_from_json(json.dumps(old)).memory_parts is None
