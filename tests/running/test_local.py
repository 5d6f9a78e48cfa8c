"""The local runner's watchdog and records, with real processes standing in for training ranks.

The workload is a small Python program (no GPU here) that behaves like a rank: it prints, then
hangs, and starts a child of its own; the runner under test is the real one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.measure.logparse import parse_log
from bench.planning.plan import plan
from bench.planning.tuning import Tuning
from bench.records.record import Status
from bench.records.store import load_records
from bench.running import local as runner
from tests.conftest import options

HANGING_RANK = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
print("rank 0 up", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split()[2] != "Z"


def _hanging(tmp_path: Path) -> tuple[list[str], Path]:
    script = tmp_path / "rank.py"
    script.write_text(HANGING_RANK)
    pid_file = tmp_path / "child.pid"
    return [sys.executable, str(script), str(pid_file)], pid_file


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
@pytest.mark.parametrize("timeout_s,hang_s", [(60.0, 2.0), (3.0, 60.0)], ids=["hang", "wall"])
def test_watchdog_kills_the_whole_process_group(tmp_path: Path, timeout_s: float,
                                                hang_s: float) -> None:
    argv, pid_file = _hanging(tmp_path)
    log = tmp_path / "train.log"
    start = time.monotonic()
    code, timed_out = runner.execute(argv, dict(os.environ), log, timeout_s, hang_s)
    assert timed_out and time.monotonic() - start < 40
    assert "rank 0 up" in log.read_text() and "bench: stopping the run" in log.read_text()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "a grandchild of the run survived the timeout"
    assert parse_log(log.read_text(), timed_out=True, exit_code=code).status is Status.TIMEOUT


@pytest.fixture()
def launch():
    return plan(get_preset("125m"), "tp1pp1", load_platform("local"),
                options(gpus_present=1, gpu_name="NVIDIA H200", iters=10))


def _run_with(monkeypatch: pytest.MonkeyPatch, argv: list[str], launch, tmp_path: Path,
              **kw: float):
    monkeypatch.setattr(runner.torchrun, "command", lambda plan: argv)
    return runner.run_local(launch, tmp_path, tmp_path / "records", kw.get("timeout_s", 60.0),
                            kw.get("hang_s", 60.0))


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
def test_timeout_is_recorded_as_timeout(monkeypatch, launch, tmp_path: Path) -> None:
    argv, _ = _hanging(tmp_path)
    record = _run_with(monkeypatch, argv, launch, tmp_path, hang_s=2.0)
    assert record.status is Status.TIMEOUT and record.metrics is None
    assert any("rank 0 up" in line for line in record.log_tail)
    records, problems = load_records(tmp_path / "records")
    assert [r.run_id for r in records] == [launch.run_id] and not problems
    assert (tmp_path / launch.run_dir / "train.log").exists()


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
def test_sigterm_records_a_failed_run_and_no_partial_file(monkeypatch, launch,
                                                          tmp_path: Path) -> None:
    argv, pid_file = _hanging(tmp_path)
    threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(SystemExit) as stopped:
        _run_with(monkeypatch, argv, launch, tmp_path)
    assert stopped.value.code == 143
    assert not _alive(int(pid_file.read_text()))
    files = sorted(p.name for p in (tmp_path / "records").iterdir())
    assert files == [f"{launch.run_id}.json", "logs"], "only the finished record, no temporary file"
    assert [p.name for p in (tmp_path / "records" / "logs").iterdir()] == [f"{launch.run_id}.log.gz"]
    saved = json.loads((tmp_path / "records" / files[0]).read_text())
    assert saved["status"] == "failed" and "SIGTERM" in saved["reason"]


def test_crash_is_recorded_with_its_error(monkeypatch, launch, tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "raise RuntimeError('CUDA error: an illegal memory access')"]
    record = _run_with(monkeypatch, argv, launch, tmp_path)
    assert record.status is Status.CRASHED and "illegal memory access" in record.reason


def test_run_directory_is_never_reused(monkeypatch, launch, tmp_path: Path) -> None:
    _run_with(monkeypatch, [sys.executable, "-c", "print('x')"], launch, tmp_path)
    with pytest.raises(FileExistsError, match="never reuses a run directory"):
        _run_with(monkeypatch, [sys.executable, "-c", "print('x')"], launch, tmp_path)


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
def test_ctrl_c_records_a_failed_run_and_stops(monkeypatch, launch, tmp_path: Path) -> None:
    # Ctrl-C raises KeyboardInterrupt under Python's own SIGINT handler, which a terminal's process
    # has; a test process started where SIGINT is ignored (a background job) has not.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        argv, pid_file = _hanging(tmp_path)
        threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            _run_with(monkeypatch, argv, launch, tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not _alive(int(pid_file.read_text()))
    files = sorted(p.name for p in (tmp_path / "records").iterdir())
    assert files == [f"{launch.run_id}.json", "logs"]
    saved = json.loads((tmp_path / "records" / files[0]).read_text())
    assert saved["status"] == "failed" and "Ctrl-C" in saved["reason"]


def test_a_variant_is_named_in_the_records_variant(monkeypatch, tmp_path: Path) -> None:
    tuned = plan(get_preset("125m"), "tp1pp1", load_platform("local"),
                 options(gpus_present=1, gpu_name="NVIDIA H200", iters=10,
                         tuning=Tuning(grad_reduce="fp32", extra_args=("--kit-torch-adam", "foreach"))))
    argv = [sys.executable, "-c", "raise RuntimeError('CUDA error: out of memory')"]
    record = _run_with(monkeypatch, argv, tuned, tmp_path)
    assert dict(record.variant) == {"grad_reduce": "fp32", "megatron_args": "--kit-torch-adam foreach"}
    assert record.notes == {} and record.labels == {}


def test_a_crash_keeps_the_first_error_lines_and_argv_is_the_ranks_command(
        monkeypatch, launch, tmp_path: Path) -> None:
    # The nvcc error that explains the crash scrolls out of the 200-line tail behind a traceback.
    program = ("print(\"nvcc fatal   : Unsupported gpu architecture 'compute_100a'\")\n"
               "for i in range(250): print(f'filler line {i}')\n"
               "raise RuntimeError('extension build failed')")
    record = _run_with(monkeypatch, [sys.executable, "-c", program], launch, tmp_path)
    assert record.status is Status.CRASHED
    assert not any("nvcc fatal" in line for line in record.log_tail)
    assert record.log_errors == ("nvcc fatal   : Unsupported gpu architecture 'compute_100a'",)
    assert record.argv == launch.train_argv and record.argv[:3] == ("python", "-m",
                                                                    "bench.train.pretrain_gpt")


def test_a_watch_of_the_gpus_that_fails_is_a_note_and_the_run_keeps_its_record(
        monkeypatch, launch, tmp_path: Path) -> None:
    def broken():
        raise RuntimeError("nvidia-smi crashed")
    monkeypatch.setattr(runner.watching, "detect_gpus", broken)
    record = _run_with(monkeypatch, [sys.executable, "-c", "print('x')"], launch, tmp_path)
    assert "nvidia-smi crashed" in record.notes["conditions"]
    assert record.conditions.gpus == [] and record.conditions.cpu_count
    assert [r.run_id for r in load_records(tmp_path / "records")[0]] == [launch.run_id]
