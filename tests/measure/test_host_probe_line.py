"""The line the training entry prints of its host probe, read back for the record's conditions."""

from __future__ import annotations

import pytest

from bench.measure.host_probe_line import ProbeLine, probe_line, read_probe_line


def test_the_probe_line_the_entry_writes_is_the_one_read() -> None:
    line = probe_line(4.1234, "cuda", 2000, 5)
    assert line == "host probe: 4.12 us to issue a torch op on cuda (2000 ops, median of 5)"
    assert read_probe_line(f"> bench kit: attention te\n{line}\n iteration 1/ 10 |\n") == ProbeLine(
        4.12, "cuda", 2000, 5)
    assert read_probe_line(probe_line(0.9, "cpu", 300, 3)) == ProbeLine(0.9, "cpu", 300, 3)


def test_a_log_without_the_line_reads_none() -> None:
    assert read_probe_line("> bench kit: attention te, transformer_impl transformer_engine\n") is None
    assert read_probe_line("host probe: 4.12 us to issue a torch op on xpu (2000 ops, median of 5)") is None


def test_a_device_the_line_cannot_name_is_refused() -> None:
    with pytest.raises(ValueError, match="cuda, cpu"):
        probe_line(4.1, "xpu", 2000, 5)
