"""One record builder for local and cluster runs: the same plan gives the same record, save for
what truly differs (times, where it ran, the scheduler's bookkeeping)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.measure.logparse import parse_log
from bench.planning.plan import plan
from bench.records.build import PlanSummary, build_run_record, plan_summary
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
