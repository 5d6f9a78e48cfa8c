"""Sweeps and campaigns on the real test Slurm: one job per configuration, gathered by collect.

``run --sweep`` and ``run --campaign`` (with ``--repeat``) go through the kit's command line to
the one-node Slurm of ``tests/running/jobs/slurm_cluster.py``. The jobs run the kit's real training entry,
which cannot train here (no GPU, no Megatron in the job's Python), so every run ends failed; what
is under test is that each configuration is its own job, that ``collect --json`` and ``jobs
--json`` see every one of them, and that their records carry the sweep, campaign and repeat group.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.records.store import load_records
from bench.running.jobs.follow import follow
from bench.running.jobs.scheduler import SLURM
from bench.running.rundir import list_runs
from tests.running.jobs.test_slurm_lifecycle import MAX_WAIT_S, _kit, kit_env  # noqa: F401 (fixture)

CAMPAIGN = """description = "test campaign"
[defaults]
walltime = "00:02:00"
[[run]]
name = "350m-twice"
model = "350m"
layout = "tp1pp1"
gpus = 1
repeat = 2
"""


def test_sweep_and_campaign_submit_one_job_each_and_collect_gathers_them(kit_env,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    sweep = _kit(tmp_path, "run", "125m", "--sweep", "--platform", "ci-slurm", "--gpus", "2",
                 "--walltime", "00:02:00", "--json")
    assert sweep.returncode == 0, sweep.stderr
    swept = json.loads(sweep.stdout)["runs"]
    assert sorted(entry["plan"]["layout"]["name"] for entry in swept) == [
        "tp1pp1dp2", "tp1pp2dp1", "tp1pp2vp2dp1", "tp2pp1dp1"]  # no sp: the test platform declares neither TE nor apex
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    campaign = _kit(tmp_path, "run", "--campaign", "campaign.toml", "--platform", "ci-slurm",
                    "--json")
    assert campaign.returncode == 0, campaign.stderr
    repeated = json.loads(campaign.stdout)["runs"]
    submitted = [entry["job"] for entry in swept + repeated]
    assert len({job["job_id"] for job in submitted}) == 6, "one job per configuration and repeat"

    runs = list_runs(tmp_path)
    assert sorted(r.run_id for r in runs) == sorted(job["run_id"] for job in submitted)
    for run in runs:
        follow(run, SLURM, poll_s=0.5, max_wait_s=MAX_WAIT_S, echo=lambda _: None)

    collected = _kit(tmp_path, "collect", "--json")
    assert collected.returncode == 0, collected.stderr
    items = json.loads(collected.stdout)
    assert sorted(i["action"] for i in items) == ["recorded"] * 6
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and len(records) == 6
    assert all(r.status == "failed" and r.reason for r in records)  # nothing can train here
    sweep_ids = {r.labels.get("sweep") for r in records if r.preset.name == "125m"}
    assert len(sweep_ids) == 1 and next(iter(sweep_ids)).startswith("125m_sweep_ci-slurm_")
    twice = [r for r in records if r.preset.name == "350m"]
    assert {r.run_id[-6:] for r in twice} == {"-c1-r1", "-c1-r2"}
    assert {r.labels["repeat_group"] for r in twice} == {twice[0].run_id[:-3]}
    assert {r.labels["campaign"] for r in twice} == {"campaign"}

    again = json.loads(_kit(tmp_path, "collect", "--json").stdout)
    assert sorted(i["action"] for i in again) == ["exists"] * 6
    listed = json.loads(_kit(tmp_path, "jobs", "--json").stdout)
    assert sorted(j["run_id"] for j in listed) == sorted(r.run_id for r in records)
    assert all(j["result"].startswith("recorded failed") for j in listed)
