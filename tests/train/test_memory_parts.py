"""Bytes a parameter by part (bench.train.memory_parts) on megatron-core's GPT, on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure.logparse import MEMORY_BY_PART

CHECKS_SCRIPT = Path(__file__).with_name("memory_parts_checks.py")
# The wrapper's stdout on CPU (memory_parts_checks.py report_line), kept for the parser's tests.
CPU_LOG = Path(__file__).parents[1] / "fixtures" / "logs" / "megatron_memory_parts_cpu_bf16.log"


@pytest.mark.parametrize("check", ["fp32_adamw", "mixed_precision", "paper_states", "report_line"])
def test_memory_parts_check(run_megatron, check: str) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), check])
    assert result.returncode == 0, f"{check} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith(f"ok {check}")


def test_the_line_is_printed_once_as_the_fixture_has_it(run_megatron) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), "report_line"])
    printed = [line for line in result.stdout.splitlines() if MEMORY_BY_PART.search(line)]
    expected = result.stderr.strip().splitlines()[-1]
    kept = [line for line in CPU_LOG.read_text().splitlines() if MEMORY_BY_PART.search(line)]
    assert printed == [expected] == kept, (printed, expected, kept)
