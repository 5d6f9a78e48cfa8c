"""What would lose a run's record is refused before launch, and what a record cannot hold is left
out of it with a note: a shell variable or an argument over the record's limits stops the run with
one ``error:`` line before anything is written; checkpoint lines the record refuses (a save at
iteration 0, a min above the max, a timer too large to be a number) leave the run its record; a
record file far larger than any record is a problem named, never read into memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.measure.logparse import parse_log
from bench.records.build import PlanSummary, build_run_record
from bench.records.checkpoint import checkpoint_notes
from bench.records.record import MAX_TEXT_CHARS
from bench.records.store import MAX_RECORD_BYTES, load_records
from tests.hostile.machine import RUN_ARGS, bench_run
from tests.running.test_reliability import OK_LOG

LONG = "x" * (MAX_TEXT_CHARS + 1)


@pytest.mark.parametrize("args,env,words", [
    ((), {"NCCL_SOCKET_IFNAME": LONG},
     "error: the value of the environment variable NCCL_SOCKET_IFNAME (xxx"),
    ((*RUN_ARGS, "--data-path", "/d" + LONG), {}, "error: the training command's --data-path value (/dxxx")],
    ids=["shell variable", "argument"])
def test_a_value_over_the_records_limits_is_refused_before_launch(
        tmp_path: Path, args: tuple[str, ...], env: dict[str, str], words: str) -> None:
    run = bench_run(tmp_path, *args, env=env)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith(words), err
    assert (f"...) is {len(LONG) + 2 * bool(args):,} characters, more than a run's record keeps "
            f"({MAX_TEXT_CHARS:,}), so the run would lose its record: shorten it or leave it out; "
            "nothing was run\n") in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()


def _with_save(lines: list[str]) -> str:
    """OK_LOG with ``lines`` after its fifth iteration."""
    log = OK_LOG.read_text().splitlines()
    at = next(i for i, line in enumerate(log) if "iteration        5/" in line) + 1
    return "\n".join([*log[:at], *lines, *log[at:]]) + "\n"


REFUSED = {
    "at iteration 0": (["saving checkpoint at iteration       0 to ck in torch_dist format",
                        "    save-checkpoint ................................: (100.00, 200.00)"],
                       "key 'iteration' Input should be greater than or equal to 1, got 0"),
    "min above max": (["saving checkpoint at iteration       5 to ck in torch_dist format",
                       "    save-checkpoint ................................: (900.00, 200.00)"],
                      "seconds_min 0.9 is above seconds_max 0.2"),
    "huge timer": (["saving checkpoint at iteration       5 to ck in torch_dist format",
                    "    save-checkpoint ................................: " + "9" * 400],
                   "key 'seconds_max' must be a finite number, got inf"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_checkpoint_lines_the_record_refuses_leave_the_run_its_record(summary: PlanSummary, case: str) -> None:
    lines, why = REFUSED[case]
    parsed = parse_log(_with_save(lines))
    assert parsed.checkpoint_saves  # the log's lines were read as a save
    record = build_run_record(summary, parsed.status, parsed.reason, "2026-11-21T20:31:00Z",
                              "2026-11-21T20:32:00Z", parsed, _with_save(lines), {}, {})
    assert record.status.value == "ok" and record.checkpoint is None
    note = checkpoint_notes(parsed.checkpoint_saves)["checkpoint"]
    assert note == ("the saves the log timed were left out, as a record takes none of them as they "
                    f"are: {why}")


def test_a_record_file_of_3_gb_is_a_problem_not_a_memory_error(tmp_path: Path) -> None:
    huge = tmp_path / "1.3b_tp1pp1dp1_local_20261121T120000Z.json"
    with huge.open("wb") as handle:  # sparse: 3 GB to read, nothing on disk
        handle.truncate(3 * 10**9)
    records, problems = load_records(tmp_path)
    assert records == []
    assert [str(p) for p in problems] == [
        f"{huge.name}: over {MAX_RECORD_BYTES // 2**20} MiB (3,000,000,000 bytes), far more than a "
        "run's record: not one the kit wrote; move it out of the records folder"]
    assert os.path.getsize(huge) == 3 * 10**9  # left as it was
