"""``python -m bench.train.pretrain_gpt`` run for real on this GPU-less machine.

A good argv goes through Megatron's parser, the kit's checks and the config container into
``megatron.training.pretrain``, which stops at its CUDA assertion: everything up to the hardware
boundary ran. A bad argv is refused before that, with exit status 2 and a message naming the fix. (Tensor or
context parallel argv makes Megatron's validator ask the GPU for its architecture, so the
sequence-parallel refusal is checked in megatron_checks.py with that one query answered.)
"""

from __future__ import annotations

import pytest

from bench.config.capabilities import Capabilities, megatron_flags
from bench.train.smoke import smoke_train_argv

ENTRY = ["-m", "bench.train.pretrain_gpt"]
GOOD_ARGV = smoke_train_argv(1, megatron_flags(Capabilities()))
CUDA_BOUNDARY = "Megatron requires CUDA"


def without(argv: list[str], *flags: str) -> list[str]:
    return [arg for arg in argv if arg not in flags]


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    index = argv.index(flag)
    return [*argv[:index + 1], value, *argv[index + 2:]]


def test_good_argv_reaches_megatron_pretrain(run_megatron) -> None:
    result = run_megatron([*ENTRY, *GOOD_ARGV])
    assert "> bench kit: attention sdpa, transformer_impl local" in result.stdout, result.stderr[-3000:]
    assert CUDA_BOUNDARY in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (without(GOOD_ARGV, "--no-persist-layer-norm"), {}, "--no-persist-layer-norm"),
        (without(GOOD_ARGV, "--no-gradient-accumulation-fusion"), {}, "--no-gradient-accumulation-fusion"),
        (with_value(GOOD_ARGV, "--transformer-impl", "transformer_engine"), {},
         "Transformer Engine is not importable here: pass --transformer-impl local"),
        ([*GOOD_ARGV, "--kit-no-such-flag"], {}, None),
        ([*without(GOOD_ARGV, "--no-masked-softmax-fusion"), "--kit-attention", "local"], {},
         "--no-masked-softmax-fusion"),
        ([*GOOD_ARGV, "--kit-attention", "te"], {}, "--kit-attention te needs --transformer-impl transformer_engine"),
        ([*GOOD_ARGV, "--reset-attention-mask"], {}, "--reset-attention-mask is ignored by causal SDPA"),
        ([*GOOD_ARGV, "--kit-fp8-attention"], {},
         "--kit-fp8-attention runs Transformer Engine's attention in FP8: it needs --fp8-format"),
        ([*GOOD_ARGV, "--kit-msamp", "O2"], {},
         "--kit-msamp O2 needs MS-AMP, which this Python cannot import (No module named 'msamp'): "
         "build the image with `python -m bench images build cuda --option msamp=1`"),
        (GOOD_ARGV, {"MSAMP_USE_WEIGHT_SIMULATE_FP4": "1"},
         "MSAMP_USE_WEIGHT_SIMULATE_FP4 set, but MS-AMP is off"),
        ([*GOOD_ARGV, "--kit-gpu-memory-cap", "80"], {},
         "--kit-gpu-memory-cap 80 caps a CUDA GPU's memory, and this process sees none"),
        ([*GOOD_ARGV, "--kit-msamp-modules", "te"], {},
         "--kit-msamp-modules te chooses the modules around MS-AMP's FP8 linears, and --kit-msamp is "
         "off: pass --kit-msamp O1 or O2, or drop --kit-msamp-modules."),
        ([*GOOD_ARGV, "--kit-msamp-modules", "te"], {},
         "--kit-msamp-modules te builds Transformer Engine's TENorm and TEDotProductAttention, and "
         "Transformer Engine is not importable here"),
        ([*GOOD_ARGV, "--kit-msamp-modules", "te", "--kit-attention", "sdpa"], {},
         "--kit-attention sdpa with --kit-msamp-modules te: the latter brings Transformer Engine's "
         "attention; drop --kit-attention."),
        ([*GOOD_ARGV, "--kit-msamp", "O1", "--kit-msamp-modules", "te"], {},
         "--kit-msamp O1 needs MS-AMP, which this Python cannot import"),
    ],
    ids=["persist-layer-norm", "grad-accum-fusion", "te-missing",
         "unknown-flag", "local-softmax-fusion", "te-attention-on-local", "reset-attention-mask",
         "fp8-attention-without-fp8",
         "msamp-missing", "fp4-without-msamp", "memory-cap-without-gpu", "te-modules-without-msamp",
         "te-modules-without-te", "te-modules-with-sdpa", "te-modules-msamp-missing"],
)
def test_bad_argv_is_refused_before_training(run_megatron, argv, env, message) -> None:
    result = run_megatron([*ENTRY, *argv], env=env)
    assert result.returncode == 2, result.stderr[-3000:]
    assert CUDA_BOUNDARY not in result.stderr
    if message is None:  # Megatron's own parser rejects a flag it does not know
        assert "unrecognized arguments" in result.stderr
    else:
        assert message in result.stderr, result.stderr[-3000:]


def test_kit_attention_choices_are_enforced_by_megatrons_parser(run_megatron) -> None:
    result = run_megatron([*ENTRY, *GOOD_ARGV, "--kit-attention", "flash"])
    assert result.returncode == 2 and "invalid choice: 'flash'" in result.stderr


def test_msamp_refusal_is_one_line_with_the_install_hint(run_megatron) -> None:
    result = run_megatron([*ENTRY, *GOOD_ARGV, "--kit-msamp", "O1"])
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("bench.train.pretrain_gpt:")]
    assert "needs MS-AMP" in line and "--option msamp=1" in line and "--precision fp8" in line
    assert CUDA_BOUNDARY not in result.stderr


def test_kit_msamp_choices_are_enforced_by_megatrons_parser(run_megatron) -> None:
    result = run_megatron([*ENTRY, *GOOD_ARGV, "--kit-msamp", "O3"])
    assert result.returncode == 2 and "invalid choice: 'O3'" in result.stderr


def test_kit_msamp_modules_choices_are_enforced_by_megatrons_parser(run_megatron) -> None:
    result = run_megatron([*ENTRY, *GOOD_ARGV, "--kit-msamp-modules", "apex"])
    assert result.returncode == 2 and "invalid choice: 'apex'" in result.stderr
