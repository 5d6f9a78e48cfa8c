"""--gpu-memory-cap: plan and train as if each GPU had less memory (e.g. what fits an 80 GB GPU, on
a 141 GB H200): the memory estimate and the default micro-batch use the cap, the entry gets
``--kit-gpu-memory-cap`` (Megatron-DeepSpeed's script runs under the kit's capping wrapper), the
record carries it as a variant, and a cap that cannot be is refused before anything runs. The
cap's arithmetic in the entry (bench.train.memory_cap) is checked here too; setting it on a GPU
is the GPU machine's part."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.config.campaign import load_campaign
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.config.run_options import CAMPAIGN_KEYS
from bench.planning.plan import plan
from bench.planning.tuning import DEFAULT_TUNING, Tuning
from bench.records.build import plan_summary
from bench.running.arguments import options_from, parse_run_argv
from bench.train.memory_cap import GIB, cap_fraction
from tests.conftest import options
from tests.inprocess import run_cli

CAP_80 = Tuning(gpu_memory_cap=80)


def _plan(tuning: Tuning = DEFAULT_TUNING, model: str = "2.7b", **kw: object):
    """2.7b dp2 fp8 on one node of two H200s (141 GB), no micro-batch given: the planner picks it."""
    return plan(get_preset(model), "tp1pp1", load_platform("azure-h200"),
                options(gpus=2, gbs=32, precision="fp8-delayed", tuning=tuning, **kw))


def test_the_option_parses_and_is_a_campaign_key(tmp_path: Path) -> None:
    line = ["2.7b", "tp1pp1", "--gpu-memory-cap", "80"]
    from_line = options_from(parse_run_argv(line), 0, "")
    assert from_line.tuning.gpu_memory_cap == 80
    assert options_from(parse_run_argv(line[:2]), 0, "").tuning.gpu_memory_cap is None
    assert "gpu_memory_cap" in CAMPAIGN_KEYS
    path = tmp_path / "c.toml"
    path.write_text('[[run]]\nmodel = "2.7b"\nlayout = "tp1pp1"\ngpu_memory_cap = 80\n')
    (run,) = load_campaign(path).runs
    from_file = options_from(parse_run_argv(list(run.argv)), 0, "")
    assert dataclasses.replace(from_file, now=from_line.now, nonce=from_line.nonce) == from_line


def test_the_cap_sets_the_memory_the_plan_checks_and_the_micro_batch_it_picks() -> None:
    whole, capped = _plan(), _plan(CAP_80)
    assert whole.layout.micro_batch == 16 and capped.layout.micro_batch == 4
    assert "of 141 GB" in " ".join(whole.notes)
    assert "of 80 GB (--gpu-memory-cap)" in " ".join(capped.notes)
    with pytest.raises(ValueError, match=r"capped at 40 GB \(--gpu-memory-cap\).*--force plans it anyway"):
        _plan(Tuning(gpu_memory_cap=40), mbs=4)


def test_the_entry_gets_the_cap_and_the_record_keeps_it_as_a_variant() -> None:
    whole, capped = _plan(mbs=4), _plan(CAP_80, mbs=4)
    args = list(capped.train_args)
    assert args[args.index("--kit-gpu-memory-cap") + 1] == "80"
    assert "--kit-gpu-memory-cap" not in whole.train_args
    assert whole.variant == () and capped.variant == (("gpu_memory_cap_gb", "80"),)
    assert plan_summary(capped).variant == {"gpu_memory_cap_gb": "80"}


def test_a_cap_above_the_gpu_or_not_above_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="--gpu-memory-cap 200 is more than the NVIDIA H200 .*141 GB: "
                       "a cap can only lower it"):
        _plan(Tuning(gpu_memory_cap=200))
    with pytest.raises(ValueError, match="--gpu-memory-cap 0: give the GB a GPU may use, more than 0"):
        Tuning(gpu_memory_cap=0)


def test_a_cap_below_what_the_cuda_context_holds_is_refused_even_with_force(tmp_path: Path) -> None:
    """The entry would refuse 0.001 GB only on the GPU, after the launch; --force skips the memory
    estimate, never this."""
    with pytest.raises(ValueError, match=r"--gpu-memory-cap 0.001: below 1 GB the CUDA context alone "
                                         r"\(0.5 GiB outside torch's allocator\) leaves training nothing"):
        Tuning(gpu_memory_cap=0.001)
    done = run_cli("run", "1.3b", "tp1pp1", "--gpus", "1", "--gpu-memory-cap", "0.001", "--force",
                   "--dry-run", "--records", str(tmp_path / "records"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: --gpu-memory-cap 0.001: below 1 GB")
    assert done.stderr.count("\n") == 1 and not list(tmp_path.iterdir())
    assert Tuning(gpu_memory_cap=1).gpu_memory_cap == 1


def test_megatron_deepspeed_runs_its_script_through_the_kits_entry() -> None:
    """Its pretrain_gpt.py has none of the kit's hooks: bench.train.script_entry probes the host,
    caps the GPU where asked, then runs it."""
    def mds(tuning: Tuning):
        return plan(get_preset("1.3b"), "tp1pp1zero1", load_platform("azure-h200"),
                    options(gpus=2, engine="megatron-deepspeed", tuning=tuning))
    whole, capped = mds(DEFAULT_TUNING), mds(CAP_80)
    script = "/opt/Megatron-DeepSpeed/pretrain_gpt.py"
    assert whole.entry == ("-m", "bench.train.script_entry", script)
    assert capped.entry == ("-m", "bench.train.script_entry", "--kit-gpu-memory-cap", "80", script)
    assert capped.train_args == whole.train_args
    assert capped.variant == (("gpu_memory_cap_gb", "80"),)
    assert "of 80 GB (--gpu-memory-cap)" in " ".join(capped.notes)


def test_the_allocator_gets_the_cap_less_what_the_process_holds_outside_it() -> None:
    h200 = 150_754_820_096  # bytes an H200 reports
    assert cap_fraction(80, h200, GIB // 2) == pytest.approx((80 * GIB - GIB // 2) / h200)
    assert cap_fraction(200, h200, 0) == 1.0  # never more than the GPU
    with pytest.raises(ValueError, match="already holds 2.0 GiB outside torch's allocator.*raise it"):
        cap_fraction(1, h200, 2 * GIB)
