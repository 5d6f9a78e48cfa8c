"""Issue 48, item 7: whatever a profiled run's profiler left, the run ends as its one record; Ctrl-C
ends the command quietly (exit 130) after that record."""

from __future__ import annotations

import gzip
import json
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.measure.logparse import parse_log
from bench.measure.profile import PROFILE_DIR, TRACE_NAME
from bench.records.record import Status
from bench.records.store import load_records
from bench.running.local import make_record
from tests.hostile.machine import bench_run
from tests.running.test_reliability import OK_LOG

KERNELS = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 0, "dur": 10},
                           {"ph": "X", "cat": "kernel", "name": "ncclKernel", "ts": 5, "dur": 10}]}
WHOLE = gzip.compress(json.dumps(KERNELS).encode())
TRACES = {
    "cut short": WHOLE[: len(WHOLE) // 2],  # gzip raises EOFError
    "empty": b"",
    "not gzip": b"{}",
    "a JSON list": gzip.compress(b"[1, 2]"),
    "an event of text times": gzip.compress(json.dumps(
        {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x", "dur": 1}]}).encode()),
    "an event that is a number": gzip.compress(b'{"traceEvents": [7]}'),
    "not UTF-8": gzip.compress(b'{"traceEvents": "\xff"}'),
    "nested 100000 deep": gzip.compress(b"[" * 100_000 + b"]" * 100_000),
}


def _profiled_record(run_dir: Path, launch, trace_bytes: bytes):
    """The record of a finished profiled run whose profiler left these bytes as its trace."""
    trace = run_dir / PROFILE_DIR / TRACE_NAME
    trace.parent.mkdir(parents=True)
    trace.write_bytes(trace_bytes)
    log = OK_LOG.read_text()
    return make_record(replace(launch, profile_steps=2), parse_log(log, exit_code=0), 0.0, 60.0,
                       log, run_dir=run_dir)


@pytest.mark.parametrize("data", TRACES.values(), ids=TRACES)
def test_a_profiled_run_keeps_its_record_whatever_its_trace(tmp_path: Path, launch,
                                                            data: bytes) -> None:
    record = _profiled_record(tmp_path, launch, data)
    trace = tmp_path / PROFILE_DIR / TRACE_NAME
    assert record.status is Status.OK and record.metrics is not None and record.profile is None
    note = record.notes["profile"]
    assert note.startswith(f"--profile: the trace {trace} could not be read (") and len(note) < 800


def test_a_whole_trace_still_gives_its_breakdown(tmp_path: Path, launch) -> None:
    record = _profiled_record(tmp_path, launch, WHOLE)
    assert record.profile is not None and "profile" not in record.notes


def _wait_for_line(folder: Path, text: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = list(folder.glob("runs/*/train.log"))
        if logs and text in logs[0].read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"the run never printed {text!r}")


@pytest.mark.slow  # a real `python -m bench run` child: half a second and more
def test_ctrl_c_ends_quietly_after_the_record(tmp_path: Path) -> None:
    run = bench_run(tmp_path, fake=f"{OK_LOG} --then hang")
    try:
        _wait_for_line(tmp_path, "iteration       15/")
        run.send_signal(signal.SIGINT)  # what the terminal sends the foreground process
        out, err = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and len(records) == 1
    assert (records[0].status, records[0].reason) == (Status.FAILED, "interrupted by the user (Ctrl-C)")
    tail = err.strip().splitlines()[-2:]
    assert tail[0].startswith("record: ") and tail[0].endswith(
        f"{records[0].run_id}.json (failed: interrupted by the user (Ctrl-C))")
    assert tail[1] == "interrupted (Ctrl-C)"
