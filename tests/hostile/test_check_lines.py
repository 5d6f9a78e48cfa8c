"""``bench check`` reads a job's output that every rank writes into: a cut line, two ranks'
lines run into one, a line that is JSON but not a rank's object, values of the wrong kind, and
control characters in what a rank printed each leave the report whole, flagged, and printed safe."""

from __future__ import annotations

import json

from bench.running.jobs.system_check import check_output, format_report
from bench.train.sysinfo import ALLREDUCE_PREFIX, LINE_PREFIX


def _facts(rank: int, **more: object) -> str:
    return LINE_PREFIX + json.dumps({"rank": rank, "host": "node-1", "local_rank": rank, **more})


def _sum(rank: int) -> str:
    return ALLREDUCE_PREFIX + json.dumps({"rank": rank, "ok": True, "backend": "gloo"})


def test_malformed_and_interleaved_rank_lines_leave_the_report_whole() -> None:
    output = "\n".join([
        _facts(0), _sum(0),
        _facts(1)[:25],                                    # cut as the job ended
        _facts(2) + "[rank3]: " + _facts(3),               # rank 3's line after rank 2's
        LINE_PREFIX + '{"rank": 4, "host": "node-1' + _sum(4),  # rank 4's sum inside its facts
        LINE_PREFIX + "[1, 2]",                            # JSON, but no rank's object
        _facts(5, gpus=7, communication="NCCL_NET", devices=[1], host=["a"]),  # wrong kinds
        _facts(True), ALLREDUCE_PREFIX + '{"ok": true}',  # a rank that is no number, a sum of none
        _sum(2), _sum("five"),
    ])
    report = check_output(output, 6, {})
    assert report.flags == (
        "some ranks could not tell their rank (no RANK/SLURM_PROCID/PMI_RANK ...)",
        "missing ranks [1, 4]: expected 6, got 5",
        "3 sysinfo lines could not be read (cut, or interleaved with another rank's output): "
        "their ranks count as not reported",
        "all-reduce: no result from ranks [1, 3, 5] (hung, or the job ended first)")
    assert [r.get("rank") for r in report.ranks] == [0, 2, 3, 5, None]
    assert report.ranks[3] == {"rank": 5, "local_rank": 5}  # its values of the wrong kind dropped
    shown = format_report(report)
    assert shown.startswith("rank  host    local")
    assert "all-reduce (gloo): 3 of 6 ranks summed right" in shown


def test_control_characters_a_rank_printed_are_shown_escaped() -> None:
    output = "\n".join([_facts(0, host="\x1b[2Jnode\n-1", versions={"torch": "2.7\r\x07"}), _sum(0)])
    shown = format_report(check_output(output, 1, {"NCCL_NET": "\x1b]0;title\x07"}))
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "\\x1b[2Jnode\\n-1" in shown and "2.7\\r\\x07" in shown
    assert "FLAG NCCL_NET: the platform sets '\\x1b]0;title\\x07', ranks [0] see otherwise" in shown
