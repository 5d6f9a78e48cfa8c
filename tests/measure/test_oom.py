"""Out of memory from fragmentation told apart from a plan too large, on real logs (four H100s under
--gpu-memory-cap 80, and one H200 without a cap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure.logparse import OUT_OF_MEMORY, parse_log
from bench.measure.oom import OomAccount, oom_account
from bench.measure.status import Status

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def first_oom_line(name: str) -> str:
    return next(line for line in (LOGS / name).read_text().splitlines() if OUT_OF_MEMORY.search(line))


def test_fragmentation_names_the_allocator_fix() -> None:
    # Megatron-DeepSpeed's 13b tp2pp2 at micro-batch 2 asked 12.24 GiB for its fp32 copy with 11.33
    # stranded: the same run peaked at 66.8 GB on H200s without the cap.
    result = parse_log((LOGS / "megatron_deepspeed_oom_fragmented_13b_tp2pp2_h100x4.log").read_text(),
                       exit_code=1)
    assert result.status is Status.OOM
    assert result.reason.startswith(
        "out of memory, fragmented (fix: --allocator expandable): 12.24 GiB asked, 49.97 GiB allocated "
        "and 11.33 GiB reserved but unallocated of 78.66 GiB allowed; [rank3]: "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.24 GiB")


def test_a_full_device_is_not_called_fragmentation() -> None:
    # megatron-core with CUDA graphs: 73.59 GiB allocated beside the graphs' pools, 1.22 stranded.
    # The tail of the run's log, from its first iteration.
    result = parse_log((LOGS / "megatron_oom_graphs_13b_tp2pp2_h100x4_tail.log").read_text(), exit_code=1)
    assert result.status is Status.OOM
    assert result.reason.startswith("out of memory: [rank1]: torch.OutOfMemoryError: CUDA out of memory. "
                                    "Tried to allocate 80.00 MiB")
    account = oom_account(first_oom_line("megatron_oom_graphs_13b_tp2pp2_h100x4_tail.log"))
    assert account == OomAccount(asked=80 / 1024, allocated=73.59, stranded=1.22, allowed=78.66)
    assert not account.fragmented


def test_without_a_cap_the_device_is_what_is_allowed() -> None:
    # 13b on one H200 uncapped: no "allowed" in torch's account.
    account = oom_account(first_oom_line("megatron_oom_13b_tp1pp1_h200.log"))
    assert account is not None and account.allowed == 139.80 and account.stranded == 2.02
    assert not account.fragmented  # 2.02 of 139.8 GiB stranded: the plan was too large


@pytest.mark.parametrize("line", [
    "[rank1]: torch.AcceleratorError: CUDA error: out of memory",  # a CUDA call's: no account
    "NCCL WARN Cuda failure 'out of memory'",
])
def test_lines_without_an_account_give_none(line: str) -> None:
    assert oom_account(line) is None


@pytest.mark.parametrize(("stranded", "allocated", "fragmented"), [
    (3.94, 60.0, True),  # 5 % of 78.66 stranded, and 12 GiB fit beside 60
    (3.90, 60.0, False),  # too little stranded to be the cause
    (11.0, 70.0, False),  # 70 + 12 is past the 78.66 allowed: too large whatever the segments
])
def test_the_bounds_of_fragmentation(stranded: float, allocated: float, fragmented: bool) -> None:
    assert OomAccount(asked=12.0, allocated=allocated, stranded=stranded, allowed=78.66).fragmented is fragmented
