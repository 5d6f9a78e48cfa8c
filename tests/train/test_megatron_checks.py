"""The training entry against megatron-core 0.19.2 itself, on CPU (each check a fresh process)."""

from __future__ import annotations

from pathlib import Path

import pytest

CHECKS_SCRIPT = Path(__file__).with_name("megatron_checks.py")


@pytest.mark.parametrize(
    "check",
    [
        "imports",  # the entry imports on Python 3.12 with the pinned megatron-core
        "attention",  # SDPA core attention == naive softmax attention == Megatron's DotProductAttention
        "parser",  # Megatron's parser takes the smoke argv + --kit-attention; config container builds
        "model_sdpa",  # GPT with SDPA attention builds, trains a few CPU steps, loss falls
        "model_local",  # --kit-attention local keeps Megatron's DotProductAttention
        "datasets_mock",  # MockGPTDataset without --data-path
        "datasets_bin",  # GPTDataset over Megatron .bin/.idx with --data-path
        "refuse_sequence_parallel",  # --sequence-parallel without TE/apex: a clear refusal
        "fp8_attention_field",  # --kit-fp8-attention sets a TransformerConfig field that exists
    ],
)
def test_megatron_check(run_megatron, check: str) -> None:
    result = run_megatron([str(CHECKS_SCRIPT), check])
    assert result.returncode == 0, f"{check} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith(f"ok {check}")
