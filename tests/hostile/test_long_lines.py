"""A log line of any length is read in time linear in its length.

Before, ``ERROR_LINE``'s leading ``\\w*`` backtracked over every run of word characters (a 40 KB
line took 16 s; a 10 MB line would take days), and ``collect``'s last-error pattern did the same.
The bound below is on the work this process does (its CPU time, ``ITIMER_PROF``), not the wall
clock, so a machine busy with other processes cannot trip it; it is generous (the fixed parser takes
a fraction of a second of CPU on 10 MB) so that a slow CPU cannot either, while the quadratic parser
cannot come near it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bench.measure.logparse import ERROR_LINE, MAX_LINE_CHARS, first_error_lines, parse_log
from bench.records.build import PlanSummary, build_run_record
from bench.records.record import Status
from bench.render.common import END_MARKER
from bench.running.jobs.outcome import PYTHON_ERROR_LINE, output_verdict

TEN_MB = 10_000_000
BOUND_S = 5.0  # CPU seconds of this process

LINES = {
    "word characters": "a" * TEN_MB,
    "a rank prefix and word characters": "[rank0]: " + "a" * TEN_MB,
    "dotted words": "a." * (TEN_MB // 2),
    "a carriage-return progress bar": "\r".join(["step 1/9 " + "#" * 50] * (TEN_MB // 60)),
}


class TooSlow(Exception):
    pass


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Fail (not hang) when the block uses more than ``seconds`` of this process's CPU time (user
    and system, whatever else the machine runs): the regex engine checks signals as it goes."""
    def expire(signum: int, frame: Any) -> None:
        raise TooSlow(f"took more than {seconds} s of CPU")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _within_bound(call: Callable[[], Any]) -> Any:
    with _deadline(BOUND_S):
        return call()


@pytest.mark.parametrize("line", LINES.values(), ids=LINES)
def test_a_10_mb_line_is_parsed_in_linear_time(line: str) -> None:
    text = f"{line}\n[rank0]: RuntimeError: boom\n"
    parsed = _within_bound(lambda: parse_log(text, exit_code=1))
    assert parsed.reason == "exit code 1: RuntimeError: boom"
    verdict = _within_bound(lambda: output_verdict(f"{text}{END_MARKER}1\n"))
    assert "RuntimeError: boom" in verdict[1]


def test_the_error_patterns_are_linear_on_a_10_mb_word() -> None:
    word = "a" * TEN_MB
    assert _within_bound(lambda: ERROR_LINE.search(word)) is None
    assert _within_bound(lambda: PYTHON_ERROR_LINE.match(word)) is None
    assert _within_bound(lambda: first_error_lines([word, "TypeError: x"])) == ["TypeError: x"]


def test_the_error_patterns_still_find_what_they_found() -> None:
    found = first_error_lines(["TypeError: x", "nvcc fatal : no", "make: *** Error 1",
                               "all fine", "Traceback (most recent call last):", "ok: errors=0"])
    assert found == ["TypeError: x", "nvcc fatal : no", "make: *** Error 1",
                     "Traceback (most recent call last):"]
    assert PYTHON_ERROR_LINE.match("  (ModuleNotFoundError: no module)")
    assert not PYTHON_ERROR_LINE.match("srun: error: node1: task 0: Exited with exit code 1")


def test_a_record_keeps_long_lines_cut(summary: PlanSummary) -> None:
    record = build_run_record(summary, Status.CRASHED, "exit code 1", "2026-11-21T20:15:00Z",
                              None, None, "x" * TEN_MB + "\nlast\n", {}, {})
    assert [len(line) for line in record.log_tail] == [MAX_LINE_CHARS, 4]
