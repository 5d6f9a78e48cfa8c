"""Text from shell variables and training logs (an escape sequence, a bell, a ``|``) reaches no
terminal raw and splits no page row: ``compare``, the results page and the run summary show it
escaped; ``compare A A`` is refused rather than reported as a measured null result."""

from __future__ import annotations

from pathlib import Path

from bench.records.checkpoint import Checkpoint, Save
from bench.records.record import build_record
from bench.records.store import write_record
from bench.results.checkpoints import HEADER, section
from bench.running.local import summary
from tests.hostile.test_results_page import _results
from tests.inprocess import run_cli
from tests.record_factory import record_fields

RAW = ("\x1b", "\x07", "\r")
B_ID = "13b_dp4_h200x4_20261121T203000Z"


def _shell_record(**overrides: object):
    """A record of a run whose shell set NCCL_ALGO to an escape sequence."""
    return build_record(**record_fields(variant={"env:NCCL_ALGO": "\x1b[2J\x1b]0;owned\x07Ring"},
                                        env={"NCCL_ALGO": "\x1b[2J\x1b]0;owned\x07Ring"}, **overrides))


def test_compare_shows_record_text_escaped(tmp_path: Path) -> None:
    write_record(tmp_path, _shell_record())
    write_record(tmp_path, _shell_record(run_id=B_ID))
    result = run_cli("compare", record_fields()["run_id"], B_ID, "--records", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not any(c in result.stdout for c in RAW)
    assert "env:NCCL_ALGO=\\x1b[2J\\x1b]0;owned\\x07Ring" in result.stdout


def test_compare_of_a_side_with_itself_is_refused(tmp_path: Path) -> None:
    write_record(tmp_path, build_record(**record_fields()))
    run = record_fields()["run_id"]
    result = run_cli("compare", run, run, "--records", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: A and B share 1 run(s) ({run}): a run compared with itself "
                             "measures no difference; give two sides with no run in common\n")


def _saving(directory: str):
    ckpt = Checkpoint(format="torch_dist", directory=directory, saves=(Save(iteration=5, seconds_max=2.0),),
                      seconds_total=2.0)
    return build_record(**{**record_fields(), "checkpoint": ckpt.model_dump()})


def test_a_pipe_in_a_checkpoint_folder_keeps_its_row_whole() -> None:
    lines = section([_saving("ck|pt\x1b[31m")], "records")
    rows = [line for line in lines if line.startswith("| [")]
    assert len(rows) == 1 and not any(c in rows[0] for c in RAW)
    cells = rows[0].replace("\\|", "").count("|") - 1  # a row's cells: its unescaped bars less one
    assert cells == len(HEADER)
    assert "`ck\\|pt\\x1b[31m`" in rows[0]


def test_the_page_shows_record_text_escaped(tmp_path: Path) -> None:
    records = tmp_path / "records"
    write_record(records, _shell_record())
    failed = record_fields(run_id=B_ID, status="failed", metrics=None,
                           reason="CUDA error\x1b[2J\x1b[H: fake\x07 [rank0]")
    write_record(records, build_record(**failed))
    result = _results(records, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "out" / "README.md").read_text()
    assert not any(c in page for c in RAW)
    assert "\\\\x1b[2J" in page  # shown, literally (its backslash escaped for Markdown)


def test_the_run_summary_shows_a_logs_words_escaped() -> None:
    failed = build_record(**record_fields(status="failed", metrics=None,
                                          reason="killed\x1b[2J\x1b[H\rok"))
    shown = summary([failed, _saving("ck\x1b[31mpt")])
    assert not any(c in shown for c in RAW)
    assert "killed\\x1b[2J\\x1b[H\\rok" in shown and "into ck\\x1b[31mpt (torch_dist)" in shown
