"""Issue 48, item 7: two runs on one machine never share a GPU unknowingly. A second run on a GPU
that a run holds stops before writing anything, naming that run; ``BENCH_GPU_LOCK=wait`` waits for
it, ``BENCH_GPU_LOCK=off`` shares it. Each run here is a real ``python -m bench run`` child."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.records.store import load_records
from bench.running.gpulock import gpus_locked
from tests.hostile.machine import bench_run
from tests.running.test_reliability import OK_LOG

# Real `python -m bench run` children holding, waiting on and sharing GPUs: seconds.
pytestmark = pytest.mark.slow


def _holding(folder: Path, uuid: str = "GPU-test-0") -> tuple[subprocess.Popen[str], str]:
    """A run that holds GPU ``uuid``: it printed its log and now hangs (until a test stops it);
    returns it and its run id."""
    folder.mkdir()
    run = bench_run(folder, fake=f"{OK_LOG} --then hang", uuid=uuid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = list(folder.glob("runs/*/train.log"))
        if logs and "iteration       15/" in logs[0].read_text():
            return run, logs[0].parent.name
        time.sleep(0.1)
    run.kill()
    raise AssertionError("the first run never printed its last iteration")


def _stderr_until(run: subprocess.Popen[str], words: str) -> str:
    """The child's stderr up to the first line holding ``words`` (or to its end), that line included."""
    read = []
    while line := run.stderr.readline():
        read.append(line)
        if words in line:
            break
    return "".join(read)


def _stop(run: subprocess.Popen[str]) -> None:
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=120)


# The GPU of the run that the tests below share (started once); the others hold GPU-test-0.
HELD = "GPU-test-held"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A run holding HELD for the tests that only start a second run beside it; its id."""
    first, first_id = _holding(tmp_path_factory.mktemp("held") / "first", HELD)
    yield first_id
    _stop(first)


def test_a_second_run_on_a_held_gpu_stops_naming_the_first(tmp_path: Path, held: str) -> None:
    first_id = held
    second = bench_run(tmp_path, uuid=HELD)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: GPU {HELD} is in use by run {first_id} (pid ")
    assert "BENCH_GPU_LOCK=wait" in errors[0] and "BENCH_GPU_LOCK=off" in errors[0]
    assert not (tmp_path / "runs").exists()  # nothing written
    assert not (tmp_path / "results").exists()


def test_with_wait_the_second_run_starts_when_the_first_ends(tmp_path: Path) -> None:
    first, first_id = _holding(tmp_path / "first")
    (tmp_path / "second").mkdir()
    second = bench_run(tmp_path / "second", env={"BENCH_GPU_LOCK": "wait"})
    try:
        # The child says it waits just before it blocks on the lock: read up to that line.
        said = _stderr_until(second, "waiting for GPU")
        assert second.poll() is None  # still waiting
        assert not (tmp_path / "second" / "runs").exists()
    finally:
        _stop(first)
    out, err = second.communicate(timeout=120)
    err = said + err
    assert second.returncode == 0, err
    assert f"waiting for GPU GPU-test-0, in use by run {first_id}" in err
    records, problems = load_records(tmp_path / "second" / "results" / "records")
    assert not problems and [r.status.value for r in records] == ["ok"]


@pytest.mark.parametrize("how", [{"BENCH_GPU_LOCK": "off"}, {"TEST_GPU_UUID": "GPU-test-1"}],
                         ids=["lock off", "another GPU"])
def test_runs_share_nothing_or_share_knowingly(tmp_path: Path, held: str, how: dict[str, str]) -> None:
    second = bench_run(tmp_path, uuid=HELD, env=how)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and [r.status.value for r in records] == ["ok"]


def test_an_unknown_mode_is_one_error_line(tmp_path: Path) -> None:
    run = bench_run(tmp_path, env={"BENCH_GPU_LOCK": "sometimes"})
    out, err = run.communicate(timeout=120)
    assert run.returncode == 2
    assert err.strip().splitlines() == [
        "error: BENCH_GPU_LOCK=sometimes is not one of fail, wait, off: unset it to stop at a GPU "
        "another run holds, 'wait' to wait for it, 'off' to share it"]


def test_a_lock_is_released_however_its_holder_ends(tmp_path: Path) -> None:
    first, _ = _holding(tmp_path / "first")
    first.kill()  # SIGKILL: no cleanup ran
    first.communicate(timeout=60)
    with gpus_locked(["GPU-test-0"], "this test", "fail"):
        pass
