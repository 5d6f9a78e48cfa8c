"""Issue 35, item 13: a run ends as exactly one record, also when the disk fills; the launcher
does not outlive a runner killed with SIGKILL; records are readable by all; ``collect`` and
``jobs`` say the record's status, not the log's.

The full disk is a file-size limit (``RLIMIT_FSIZE``, what ``ulimit -f`` sets) in a child Python
that runs the real runner with ``tests/fixtures/launchers/fake_torchrun.py`` for torchrun.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.records.record import build_record
from bench.records.store import load_record, load_records, write_record
from bench.render.common import END_MARKER
from bench.running.rundir import create_run_dir
from tests.inprocess import run_cli
from tests.record_factory import record_fields
from tests.running.test_reliability import FAKE_TORCHRUN, OK_LOG, REPO, altered_log, gone

RUN_ID = "1.3b_tp1pp1dp1_local_20261121T120000Z"
# The runner in a child: what `python -m bench run` does with the plan of OK_LOG's run.
RUNNER = f"""
import json, sys
from pathlib import Path
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.running import local as runner
from tests.conftest import options
root, fake_args = Path(sys.argv[1]), sys.argv[2:]
launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
              options(gpus_present=1, gpu_name="NVIDIA H200", mbs=4, gbs=32, iters=15))
runner.torchrun.command = lambda plan: [sys.executable, {str(FAKE_TORCHRUN)!r}, *fake_args]
try:
    record = runner.run_local(launch, root, root / "records", 600.0, 600.0)
except ValueError as error:  # what python -m bench prints of it
    print(f"error: {{error}}", file=sys.stderr)
    sys.exit(2)
print(json.dumps({{"status": record.status.value, "reason": record.reason}}))
"""


def _runner(root: Path, *fake_args: str, file_limit: int | None = None) -> subprocess.Popen:
    def limit() -> None:
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.Popen([sys.executable, "-c", RUNNER, str(root), *fake_args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=limit)


def _limited_run(tmp_path: Path, file_limit: int) -> subprocess.CompletedProcess:
    proc = _runner(tmp_path, str(OK_LOG), file_limit=file_limit)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow  # the runner in a real child (file-size limit, signals): half a second and more
def test_a_log_that_fills_the_disk_gives_one_failed_record(tmp_path: Path) -> None:
    # 16 KB: the 44 KB log does not fit, its record (7 KB) does.
    result = _limited_run(tmp_path, 16_000)
    assert result.returncode == 0, result.stderr
    records, problems = load_records(tmp_path / "records")
    assert not problems and [r.run_id for r in records] == [RUN_ID]
    record = records[0]
    assert record.status.value == "failed" and record.metrics is None
    assert re.fullmatch(r"the run was stopped because its log .*/train\.log could not be written "
                        r"\(File too large: a full disk or a file-size limit\)", record.reason)
    assert record.log_tail, "the lines that were written are kept"


@pytest.mark.slow  # the runner in a real child (file-size limit, signals): half a second and more
def test_a_record_that_fits_nowhere_is_one_error_line(tmp_path: Path) -> None:
    result = _limited_run(tmp_path, 4_000)  # plan.json fits, the record does not
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the record could not be written to "), lines
    assert "nor to " in lines[0] and "the run ended failed: the run was stopped because" in lines[0]
    # No record anywhere; the train log, kept compressed before the record was tried, may stay.
    assert not list((tmp_path / "records").glob("*.json"))
    assert {p.name for p in (tmp_path / "records").glob("logs/*")} <= {f"{RUN_ID}.log.gz"}


@pytest.mark.slow  # the runner in a real child (file-size limit, signals): half a second and more
def test_a_plan_that_fills_the_disk_starts_nothing(tmp_path: Path) -> None:
    result = _limited_run(tmp_path, 1_000)  # plan.json (2 KB) does not fit
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: the run directory {tmp_path}/runs/{RUN_ID} could not be written (File too "
        "large); nothing was started"]
    assert not (tmp_path / "runs" / RUN_ID).exists()


def _pids_running(marker: str) -> list[int]:
    """Processes (not zombies) whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.slow  # the runner in a real child (file-size limit, signals): half a second and more
@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_runner_killed_with_sigkill_takes_the_launcher_with_it(tmp_path: Path) -> None:
    log = tmp_path / "marker-of-this-test.log"  # the fake torchrun is found by its argument
    log.write_text(OK_LOG.read_text())
    runner = _runner(tmp_path, str(log), "--then", "hang")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            launchers = [pid for pid in _pids_running(str(log)) if pid != runner.pid]
            if launchers:
                break
            time.sleep(0.1)
        assert launchers, "the fake torchrun never started"
        runner.kill()  # SIGKILL: no handler of the runner's runs
        runner.wait(timeout=30)
        assert all(gone(pid) for pid in launchers), "the launcher outlived its runner"
    finally:
        for pid in _pids_running(str(log)):  # only what this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        runner.stdout.close()
        runner.stderr.close()


def test_records_are_readable_by_everyone(tmp_path: Path) -> None:
    path = write_record(tmp_path, build_record(**record_fields()))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def _finished_run(root: Path, launch, log: Path) -> Path:
    """A Slurm run directory as a finished job leaves it (the terminal state saved)."""
    run = create_run_dir(root, launch, {"job.sbatch": "#!/bin/bash\n"})
    output = run / "slurm-11.out"
    output.write_text(log.read_text() + f"\n{END_MARKER}0\n")
    (run / "submit.json").write_text(json.dumps({
        "kind": "bench", "scheduler": "slurm", "argv": ["sbatch"], "job_id": "11",
        "output": str(output), "workdir": str(root), "submitted_at": "2026-11-21T20:30:00Z",
        "kit_commit": "0123abc"}))
    (run / "state.json").write_text(json.dumps({
        "job_id": "11", "state": "COMPLETED", "exit_code": 0, "signal": 0, "elapsed_s": 40,
        "nodes": "node1", "start_time": None, "end_time": None, "seen_at": 0.0}))
    return run


def test_collect_and_jobs_say_failed_for_a_failed_record(tmp_path: Path, launch) -> None:
    def thousand_times_faster(line: str) -> str:
        return re.sub(r"(elapsed time per iteration \(ms\): )([\d.]+)",
                      lambda m: f"{m[1]}{float(m[2]) / 1000:.4f}", line)

    _finished_run(tmp_path, launch, altered_log(tmp_path, thousand_times_faster))
    jobs = run_cli("jobs", "--root", str(tmp_path), cwd=tmp_path)
    row = next(line for line in jobs.stdout.splitlines() if line.startswith(launch.run_id))
    assert "failed (not collected): the run finished, but its" in row and " ok" not in row
    collected = run_cli("collect", "--root", str(tmp_path), cwd=tmp_path)
    assert f"{launch.run_id}: recorded failed (" in collected.stdout, collected.stdout
    assert "recorded ok" not in collected.stdout
    record = load_record(tmp_path / "results" / "records" / f"{launch.run_id}.json")
    assert record.status.value == "failed"
    jobs = run_cli("jobs", "--root", str(tmp_path), cwd=tmp_path)
    assert f"recorded failed: {record.reason}" in jobs.stdout
