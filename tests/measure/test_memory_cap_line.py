"""The line the training entry prints of its memory cap, read back for the record's conditions."""

from __future__ import annotations

import pytest

from bench.measure.memory_cap_line import CapLine, cap_line, read_cap_line

# As the training entry printed them on an H200 and an H100 80GB (kept train logs).
CAP_LINES = [
    ("> bench kit: attention te, transformer_impl transformer_engine, adam te-or-apex, msamp off, "
     "grad reduce native, megatron-core 0.19.2, torch 2.11.0+cu130, gpu memory cap 80 GiB: torch's "
     "allocator may hold 79.5 of the GPU's 139.8 GiB (0.51 GiB held outside it)",
     CapLine(80.0, 79.5, 139.8, 0.51)),
    ("> bench kit: gpu memory cap 80 GiB: torch's allocator may hold 78.7 of the GPU's 79.2 GiB "
     "(0.52 GiB held outside it)", CapLine(80.0, 78.7, 79.2, 0.52)),
]


@pytest.mark.parametrize("line,read", CAP_LINES)
def test_the_cap_line_of_a_real_log_is_read(line: str, read: CapLine) -> None:
    assert read_cap_line(f"some line\n{line}\nanother\n") == read


def test_the_cap_line_the_entry_writes_is_the_one_read() -> None:
    gib = 2**30
    line = cap_line(80.0, 79.49 * gib, int(139.8 * gib), int(0.51 * gib))
    assert read_cap_line(line) == CapLine(80.0, 79.5, 139.8, 0.51)
    assert read_cap_line("no cap here") is None
