"""The kit's PaperAdamW (bench.train.paper_adam, --optimizer-states paper-kit) on CPU, its Triton
kernel under Triton's interpreter.

Each check is a fresh process of the Python with torch and megatron-core
(tests/train/paper_adam_checks.py, whose docstrings derive the bounds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHECKS_SCRIPT = Path(__file__).with_name("paper_adam_checks.py")


@pytest.mark.parametrize("check", [
    "against_fp32_adamw",  # 5 steps, wd on and off, within the E4M3/fp16 error bound element by element
    "kernel_matches_torch",  # 3 steps byte for byte against the same fp32 arithmetic in torch
    "roundings",  # the kernel's bf16 and E4M3 rounding: every tie, subnormals, saturation, -0
    "compiles_for_hopper",  # both passes to an sm_90 cubin, as the GPU compiler (not the interpreter) checks
    "state_layout",  # 5 bytes a parameter, fp32 power-of-two scales, no transposed copy; memory_parts
    "refusals",  # capturable, AMSGrad, Adam-L2, no bias correction, other dtypes, fp32 parameters
    "state_dict_roundtrip",  # fp32 states out, scaled back in, the next step bit for bit alike
    "megatron_builds_it",  # megatron-core's own constructor call and init_state_fn; a GPT's loss falls
])
def test_paper_adam(run_megatron, check: str) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), check])
    assert result.returncode == 0, f"{check} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith(f"ok {check}")
