"""collect builds records from plan.json alone; a plan.json it cannot read is said, not fatal.

The run directories here are written as a finished Slurm run leaves them (state.json holds the
terminal state, so no scheduler is asked); the job's output is a real Megatron log of ours.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.cli import main
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.records.store import load_records
from bench.render.common import END_MARKER
from bench.running.rundir import create_run_dir
from tests.conftest import options

LOG = Path(__file__).parents[2] / "fixtures" / "logs" / "megatron_ok_1.3b_tp1pp1_h200.log"


def _finished_run(root: Path, preset: str, job_id: str) -> Path:
    launch = plan(get_preset(preset), "tp1pp1", load_platform("azure-h200"),
                  options(gpus=1, mbs=4, gbs=32, iters=15))
    run = create_run_dir(root, launch, {"job.sbatch": "#!/bin/bash\n"})
    output = run / f"slurm-{job_id}.out"
    output.write_text(LOG.read_text() + f"\n{END_MARKER}0\n")
    (run / "submit.json").write_text(json.dumps({
        "kind": "bench", "scheduler": "slurm", "argv": ["sbatch"], "job_id": job_id,
        "output": str(output), "workdir": str(root), "submitted_at": "2026-11-21T20:30:00Z",
        "kit_commit": "0123abc"}))
    (run / "state.json").write_text(json.dumps({
        "job_id": job_id, "state": "COMPLETED", "exit_code": 0, "signal": 0, "elapsed_s": 40,
        "nodes": "node1", "start_time": None, "end_time": None, "seen_at": 0.0}))
    return run


def test_collect_takes_the_peak_from_plan_json_and_says_which_plan_it_cannot_read(
        tmp_path: Path, capsys) -> None:
    good = _finished_run(tmp_path, "1.3b", "11")
    broken = _finished_run(tmp_path, "2.7b", "12")
    plan_json = json.loads((broken / "plan.json").read_text())
    del plan_json["platform"]["peak_tflops"]  # as an older kit wrote it
    (broken / "plan.json").write_text(json.dumps(plan_json))
    assert main(["collect", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{broken.name}: not recorded: " in err and "missing key 'platform.peak_tflops'" in err
    records, problems = load_records(tmp_path / "results" / "records")
    assert [r.run_id for r in records] == [good.name] and not problems
    record = records[0]
    assert record.ok and record.platform.peak_tflops == 989.0
    assert record.notes["nodelist"] == "node1" and record.provenance.hostname is None
    assert record.provenance.gpu_uuids is None  # the login node cannot see the job's GPUs
    assert record.argv[:3] == ("python", "-m", "bench.train.pretrain_gpt")
