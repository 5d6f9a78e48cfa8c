"""``--kit-grad-reduce``: megatron-core's DDP reducing its gradient buckets through the kit's FP8
collectives (bench.train.grad_reduce), on CPU over gloo with two ranks (tests/train/grad_reduce_checks.py).

What runs here: a tiny megatron-core GPT in megatron-core's DistributedDataParallel, its real
buckets reduced by the patched ``start_grad_sync`` (all-reduce and distributed-optimizer shard
forms, fp32 and bf16 buffers, sum and average), compared with the exact sum megatron-core's own
collective would compute; and the entry's refusals. What does not: NCCL, CUDA streams, the
overlapped path (refused), and loss parity in training, which needs the GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHECKS_SCRIPT = Path(__file__).with_name("grad_reduce_checks.py")


@pytest.mark.parametrize("check", [
    "ddp",  # both strategies and formats: within eps/2·Σ|x| of the exact sum; the shard is the buffer's view
    "args",  # native by default; overlap, several optimizer instances, fp16 buffers, dp 1 refused with the fix
])
def test_grad_reduce(run_megatron, check: str) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), check], env={"MASTER_ADDR": "127.0.0.1"})
    assert result.returncode == 0, f"{check} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith(f"ok {check}")
