"""The Megatron argv the planner makes is accepted by Megatron's own parser and validator."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.engines.megatron import ENTRY
from bench.layout import valid_layouts
from bench.plan import plan
from bench.platforms import load_platform
from bench.presets import load_presets
from bench.tuning import Tuning
from tests.conftest import options, require

CHECKER = Path(__file__).with_name("megatron_argcheck.py")


def _cases() -> list[tuple[str, str, int]]:
    """Every preset at tp1pp1 on one GPU, and every valid tp/pp split of it on 8 and 16 GPUs."""
    cases = []
    for preset in load_presets().values():
        cases.append((preset.name, "tp1pp1", 1))
        for gpus in (8, 16):
            for lay in valid_layouts(preset, gpus, 8, preset.micro_batch, preset.global_batch):
                cases.append((preset.name, f"tp{lay.tp}pp{lay.pp}", gpus))
    cases += [("13b", "tp2pp4vp2", 8), ("13b", "tp2pp2cp2", 8), ("6.7b", "tp4pp1sp", 4)]
    return cases


def test_planner_argv_is_accepted_by_megatron() -> None:
    python = os.environ.get("BENCH_MEGATRON_PYTHON", "")
    require(bool(python) and Path(python).exists(),
            "BENCH_MEGATRON_PYTHON: a Python 3.12 with torch and megatron-core 0.19.2 "
            "(nox -s tests makes one)")
    platform = load_platform("local")
    plans = [plan(load_presets()[p], lay, platform, options(gpus=gpus, gpus_present=gpus))
             for p, lay, gpus in _cases()]
    # An A/B variant: every default turned off, plus an extra Megatron flag.
    tuned = Tuning(overlap=False, grad_reduce_bf16=False, fused_loss=False, extra_args=("--manual-gc",))
    plans.append(plan(load_presets()["6.7b"], "tp1pp1", platform,
                      options(gpus=8, gpus_present=8, tuning=tuned)))
    # Activation recompute, full and selective, with and without pipelining.
    recompute = [plan(load_presets()[p], lay, platform, options(gpus=g, gpus_present=g, recompute=r))
                 for p, lay, g, r in (("1.3b", "tp1pp1", 1, "full"), ("13b", "tp2pp4", 8, "full"),
                                      ("2.7b", "tp1pp1", 1, "selective"))]
    plans += recompute
    for launch in plans:
        assert launch.entry == ENTRY
    payload = [{"argv": list(p.train_args), "env": dict(p.env), "world_size": p.world_size}
               for p in plans]
    out = subprocess.run([python, str(CHECKER)], input=json.dumps(payload), capture_output=True,
                         text=True, timeout=600, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    failures = [f"{p.run_id}: {r['error']}" for p, r in zip(plans, results, strict=True) if not r["ok"]]
    assert not failures, "\n".join(failures)
    # Megatron derives the same data-parallel size as the kit's layout.
    assert [r["dp"] for r in results] == [p.layout.dp for p in plans]
    assert [r["recompute"] for r in results[-3:]] == [
        ["full", "uniform", 1], ["full", "uniform", 1], ["selective", None, None]]
    assert results[0]["recompute"][0] is None


@pytest.mark.parametrize("flag", ["--no-such-megatron-flag"])
def test_checker_rejects_unknown_flags(flag: str) -> None:
    """The check has teeth: a flag Megatron does not know is reported."""
    python = os.environ.get("BENCH_MEGATRON_PYTHON", "")
    require(bool(python) and Path(python).exists(), "BENCH_MEGATRON_PYTHON not set")
    launch = plan(load_presets()["125m"], "tp1pp1", load_platform("local"),
                  options(gpus=1, gpus_present=1))
    payload = [{"argv": [*launch.train_args, flag], "env": dict(launch.env), "world_size": 1}]
    out = subprocess.run([python, str(CHECKER)], input=json.dumps(payload), capture_output=True,
                         text=True, timeout=300, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])[0]
    assert not result["ok"] and flag in result["error"]
