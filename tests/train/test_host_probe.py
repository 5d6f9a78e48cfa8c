"""The host probe run for real on this GPU-less machine: on the CPU, under the Megatron Python."""

from __future__ import annotations

import math

from bench.measure.host_probe_line import read_probe_line
from tests.train.test_entry import ENTRY, GOOD_ARGV

# The probe as the entry calls it, on rank 0 and on rank 1, and timed whole.
SCRIPT = """
import os, time
from bench.train import host_probe

start = time.perf_counter()
line = host_probe.report()
print(line)
print("seconds", time.perf_counter() - start)
os.environ["RANK"] = "1"
print("rank 1", host_probe.report())
"""


def test_the_probe_times_ops_on_the_cpu_and_prints_on_rank_0_only(run_megatron) -> None:
    result = run_megatron(["-c", SCRIPT])
    assert result.returncode == 0, result.stderr[-3000:]
    line, seconds, rank_1 = result.stdout.splitlines()
    read = read_probe_line(line)
    assert read is not None, result.stdout
    assert read.device == "cpu" and read.op_us > 0 and math.isfinite(read.op_us)
    assert (read.ops, read.repeats) == (2000, 5)
    assert float(seconds.split()[1]) < 1.0  # cheap beside a run's start-up
    assert rank_1 == "rank 1 None"


def test_the_entry_prints_the_probe_line_before_training(run_megatron) -> None:
    result = run_megatron([*ENTRY, *GOOD_ARGV])
    read = read_probe_line(result.stdout)
    assert read is not None and read.device == "cpu" and read.op_us > 0, result.stdout[-3000:]
