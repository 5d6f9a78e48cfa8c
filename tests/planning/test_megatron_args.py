"""The Megatron argv the planner makes is accepted by Megatron's own parser and validator."""

from __future__ import annotations

import itertools
import json
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import load_presets
from bench.planning.engines.megatron import ENTRY
from bench.planning.layout import valid_layouts
from bench.planning.plan import plan
from bench.planning.tuning import Tuning
from tests.conftest import megatron_python, options

CHECKER = Path(__file__).parents[1] / "megatron_argcheck.py"


def _cases() -> list[tuple[str, str, int]]:
    """Every preset at tp1pp1 on one GPU, and every valid tp/pp split of it on 8 and 16 GPUs."""
    cases = []
    for preset in load_presets().values():
        cases.append((preset.name, "tp1pp1", 1))
        for gpus in (8, 16):
            for lay in valid_layouts(preset, gpus, 8, preset.micro_batch, preset.global_batch):
                cases.append((preset.name, f"tp{lay.tp}pp{lay.pp}", gpus))
    cases += [("13b", "tp2pp4vp2", 8), ("13b", "tp2pp2cp2", 8)]
    return cases


def _check(plans: list, capabilities: list[Capabilities] | None = None) -> list[dict]:
    """Megatron's parser and validator (and, given capabilities, the entry's checks) on each plan."""
    python = megatron_python()
    payload = [{"argv": list(p.train_args), "env": dict(p.env), "world_size": p.world_size}
               for p in plans]
    for case, caps in zip(payload, capabilities or [], strict=False):
        case["capabilities"] = asdict(caps)
    out = subprocess.run([python, str(CHECKER)], input=json.dumps(payload), capture_output=True,
                         text=True, timeout=600, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    failures = [f"{p.run_id}: {r['error']}" for p, r in zip(plans, results, strict=True) if not r["ok"]]
    assert not failures, "\n".join(failures)
    return results


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_planner_argv_is_accepted_by_megatron() -> None:
    platform = load_platform("local")
    plans = [plan(load_presets()[p], lay, platform, options(gpus=gpus, gpus_present=gpus))
             for p, lay, gpus in _cases()]
    # An A/B variant: every default turned off, plus an extra Megatron flag.
    tuned = Tuning(overlap=False, grad_reduce="fp32", fused_loss=False, extra_args=("--manual-gc",))
    plans.append(plan(load_presets()["6.7b"], "tp1pp1", platform,
                      options(gpus=8, gpus_present=8, tuning=tuned)))
    # The FP8 gradient reduction at the loss-parity run's size: 345m over two data-parallel ranks.
    plans += [plan(load_presets()["345m"], "tp1pp1", platform,
                   options(gpus=2, gpus_present=2, tuning=Tuning(grad_reduce=choice)))
              for choice in ("fp8-allgather", "fp8-shared-scale")]
    # Checkpoints, real data and a longer sequence (the Azure and Polaris seeds' options).
    plans.append(plan(load_presets()["1.3b"], "tp2pp1", platform,
                      options(gpus=8, gpus_present=8, seq_length=4096, save="/tmp/ck",
                              save_interval=5, data_path="/tmp/data/my-gpt3_00_text_document")))
    # Activation recompute, full and selective, with and without pipelining.
    recompute = [plan(load_presets()[p], lay, platform, options(gpus=g, gpus_present=g, recompute=r))
                 for p, lay, g, r in (("1.3b", "tp1pp1", 1, "full"), ("13b", "tp2pp4", 8, "full"),
                                      ("2.7b", "tp1pp1", 1, "selective"))]
    plans += recompute
    for launch in plans:
        assert launch.entry == ENTRY
    results = _check(plans)
    # Megatron derives the same data-parallel size as the kit's layout.
    assert [r["dp"] for r in results] == [p.layout.dp for p in plans]
    assert [r["recompute"] for r in results[-3:]] == [
        ["full", "uniform", 1], ["full", "uniform", 1], ["selective", None, None]]
    assert results[0]["recompute"][0] is None


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_every_capability_combination_is_accepted_by_megatron_and_the_entry() -> None:
    """For each of the 16 environments (TE with/without apex and its kernels, no TE), the flags the
    planner emits pass Megatron's validator and the entry's own checks for that environment: bf16
    and fp16 everywhere, both fp8 recipes and sequence parallelism wherever they are allowed."""
    platform = load_platform("local")
    plans, caps_of = [], []
    for bits in itertools.product((False, True), repeat=4):
        caps = Capabilities(*bits)
        cases = [("1.3b", "tp1pp1", 1, "bf16"), ("1.3b", "tp1pp1", 1, "fp16")]
        if caps.transformer_engine:
            cases += [("2.7b", "tp1pp1", 1, "fp8-delayed"), ("6.7b", "tp1pp1", 2, "fp8-current"),
                      ("13b", "tp2pp1", 2, "fp8-delayed")]
        if caps.transformer_engine or caps.apex_layer_norm:
            cases += [("6.7b", "tp2pp1sp", 2, "bf16"), ("13b", "tp4pp1sp", 4, "bf16")]
        for preset, lay, gpus, precision in cases:
            plans.append(plan(load_presets()[preset], lay, platform,
                              options(gpus=gpus, gpus_present=gpus, precision=precision, capabilities=caps)))
            caps_of.append(caps)
    _check(plans, caps_of)


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_msamp_precisions_are_accepted_by_megatron_and_the_entry() -> None:
    """msamp-o1/msamp-o2/fp4 argv (--kit-msamp on the local layers) through Megatron's parser with the entry's
    flags, on the environment they need (Transformer Engine and MS-AMP)."""
    caps = Capabilities(transformer_engine=True, fused_wgrad=True, msamp=True)
    plans = [plan(load_presets()[preset], lay, load_platform("local"),
                  options(gpus=gpus, gpus_present=gpus, precision=precision, capabilities=caps))
             for preset, lay, gpus, precision in (("345m", "tp1pp1", 1, "msamp-o1"),
                                                  ("1.3b", "tp1pp1", 1, "msamp-o2"),
                                                  ("6.7b", "tp1pp2", 2, "fp4"))]
    _check(plans, [caps] * len(plans))


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_msamp_te_modules_are_accepted_by_megatron_and_the_entry() -> None:
    """--msamp-modules te under each MS-AMP precision (--kit-msamp-modules te on the local layers)
    through Megatron's parser and validator with the entry's flags and checks, on the environment
    it needs (Transformer Engine and MS-AMP); the same precisions without TE are refused by both."""
    caps = Capabilities(transformer_engine=True, apex_layer_norm=True, fused_wgrad=True, msamp=True)
    plans = [plan(load_presets()[preset], lay, load_platform("local"),
                  options(gpus=gpus, gpus_present=gpus, precision=precision, capabilities=caps,
                          tuning=Tuning(msamp_modules="te")))
             for preset, lay, gpus, precision in (("345m", "tp1pp1", 1, "msamp-o1"),
                                                  ("1.3b", "tp1pp1", 2, "msamp-o2"),
                                                  ("6.7b", "tp1pp2", 2, "fp4"))]
    assert all("--kit-msamp-modules" in p.train_args for p in plans)
    _check(plans, [caps] * len(plans))
    python = megatron_python()
    payload = [{"argv": list(plans[0].train_args), "env": dict(plans[0].env), "world_size": 1,
                "capabilities": asdict(replace(caps, transformer_engine=False))}]
    out = subprocess.run([python, str(CHECKER)], input=json.dumps(payload), capture_output=True,
                         text=True, timeout=300, check=True)
    (refused,) = json.loads(out.stdout.strip().splitlines()[-1])
    assert not refused["ok"] and "Transformer Engine is not importable here" in refused["error"]


@pytest.mark.slow
@pytest.mark.needs_megatron
@pytest.mark.parametrize("states", ["paper", "paper-kit"])
def test_paper_optimizer_states_are_accepted_by_megatron_and_the_entry(states: str) -> None:
    """--optimizer-states paper (and paper-kit, whose --kit-paper-adam the entry's checks accept
    with these dtypes only) on 1.3b dp2 under each precision that allows it (and beside the FP8
    gradient reduction): Megatron's validator leaves the optimizer its precision-aware,
    distributed form with the paper's dtypes (fp8 is torch.uint8 in Megatron), bf16 gradients."""
    te = Capabilities(transformer_engine=True, fused_wgrad=True)
    cases = [("bf16", "bf16", te), ("fp8-delayed", "bf16", te), ("fp8-current", "bf16", te),
             ("msamp-o1", "bf16", replace(te, msamp=True)), ("bf16", "fp8-shared-scale", te)]
    plans = [plan(load_presets()["1.3b"], "tp1pp1", load_platform("local"),
                  options(gpus=2, gpus_present=2, precision=precision, capabilities=caps,
                          tuning=Tuning(optimizer_states=states, grad_reduce=reduce)))
             for precision, reduce, caps in cases]
    results = _check(plans, [caps for *_, caps in cases])
    assert all(r["optimizer"] == {
        "optimizer": "adam", "use_distributed_optimizer": "True",
        "use_precision_aware_optimizer": "True", "accumulate_allreduce_grads_in_fp32": "False",
        "main_grads_dtype": "torch.bfloat16", "main_params_dtype": "torch.float16",
        "exp_avg_dtype": "torch.uint8", "exp_avg_sq_dtype": "torch.float16"} for r in results)
    assert all(p.variant[-1] == ("optimizer_states", states) for p in plans)
    assert all(("--kit-paper-adam" in p.train_args) == (states == "paper-kit") for p in plans)


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_the_entry_refuses_kit_paper_adam_without_the_paper_s_dtypes() -> None:
    """--kit-paper-adam beside megatron-core's default optimizer (or other state dtypes) is refused
    by the entry's checks, naming the flags that make it the paper's states."""
    te = Capabilities(transformer_engine=True, fused_wgrad=True)
    launch = plan(load_presets()["345m"], "tp1pp1", load_platform("local"),
                  options(gpus=1, gpus_present=1, capabilities=te))
    argv = list(launch.train_args)
    payload = [{"argv": [*argv, "--kit-paper-adam"], "env": dict(launch.env), "world_size": 1,
                "capabilities": asdict(te)},
               {"argv": [*argv, "--kit-paper-adam", "--use-precision-aware-optimizer",
                         "--main-grads-dtype", "bf16", "--main-params-dtype", "fp16",
                         "--exp-avg-dtype", "fp16", "--exp-avg-sq-dtype", "fp16"],
                "env": dict(launch.env), "world_size": 1, "capabilities": asdict(te)}]
    out = subprocess.run([megatron_python(), str(CHECKER)], input=json.dumps(payload),
                         capture_output=True, text=True, timeout=300, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(not r["ok"] and "--kit-paper-adam steps the FP8-LM paper's states" in r["error"]
               and "--exp-avg-dtype fp8" in r["error"] for r in results), results


@pytest.mark.needs_megatron
@pytest.mark.parametrize("flag", ["--no-such-megatron-flag"])
def test_checker_rejects_unknown_flags(flag: str) -> None:
    """The check has teeth: a flag Megatron does not know is reported."""
    python = megatron_python()
    launch = plan(load_presets()["125m"], "tp1pp1", load_platform("local"),
                  options(gpus=1, gpus_present=1))
    payload = [{"argv": [*launch.train_args, flag], "env": dict(launch.env), "world_size": 1}]
    out = subprocess.run([python, str(CHECKER)], input=json.dumps(payload), capture_output=True,
                         text=True, timeout=300, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])[0]
    assert not result["ok"] and flag in result["error"]


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_every_campaign_run_for_two_h100s_is_accepted_by_megatron_and_the_entry(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The megatron-engine runs of the two-GPU campaign files, planned as the GPU machine plans them
    (two H100 80 GB; Transformer Engine, MS-AMP), pass Megatron's validator and the entry's checks:
    extra Megatron flags (CUDA graphs, TP overlap) and options fail here, not after a machine's setup."""
    from bench.running import gpus as hardware
    from bench.running.trainenv import Facts
    from tests.inprocess import run_cli
    from tests.running.test_command import REPO

    caps = Capabilities(transformer_engine=True, msamp=True)
    monkeypatch.setattr(hardware, "detect_gpus",
                        lambda: hardware.LocalGPUs(2, "NVIDIA H100 80GB HBM3", "570.00", 85.0))
    monkeypatch.setattr("bench.running.machine.facts", lambda **kw: Facts(python="python", capabilities=caps))
    cases = []
    # Megatron-DeepSpeed's groups are left out: another engine, planned with real data only.
    groups = {"h100x2": ["te", "scaling", "apex", "no-te", "mds-core", "fp8-default", "cuda-graph",
                         "rest-te-last"],
              "msamp-h100x2": ["msamp-dp2", "msamp-loss", "msamp-paper", "msamp-paper-profiled",
                               "msamp-headline", "msamp-1gpu", "msamp-te-modules",
                               "msamp-te-cuda-graph", "msamp-headline-80gb-te8", "msamp-6.7b-80gb",
                               "msamp-80gb-allocator", "msamp-6.7b-80gb-fit",
                               "msamp-paper-kit-kernel", "msamp-6.7b-80gb-layouts"]}
    for name, only in groups.items():
        result = run_cli("run", "--campaign", str(REPO / "results" / "campaigns" / f"{name}.toml"),
                         *(arg for group in only for arg in ("--only", group)), "--dry-run", "--json",
                         cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        cases += [entry["plan"] for entry in json.loads(result.stdout)["runs"]
                  if entry["plan"]["engine"] == "megatron"]
    # The plan's argv starts with the entry's command (python -m bench.train.pretrain_gpt).
    payload = [{"argv": p["train_argv"][p["train_argv"].index(ENTRY[1]) + 1:], "env": p["env"],
                "world_size": p["world_size"], "capabilities": asdict(caps)} for p in cases]
    out = subprocess.run([megatron_python(), str(CHECKER)], input=json.dumps(payload),
                         capture_output=True, text=True, timeout=600, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    failures = [f"{p['run_id']}: {r['error']}" for p, r in zip(cases, results, strict=True) if not r["ok"]]
    assert len(cases) > 30 and not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.needs_megatron
@pytest.mark.parametrize("name,caps,apex,least", [
    ("x4", Capabilities(transformer_engine=True), False, 20),
    ("x4", Capabilities(transformer_engine=True, fused_wgrad=True), True, 5),
    ("x4-engines", Capabilities(transformer_engine=True, msamp=True), False, 7)])
def test_every_megatron_run_of_the_four_gpu_campaigns_is_accepted_by_megatron_and_the_entry(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, caps: Capabilities,
        apex: bool, least: int) -> None:
    """results/campaigns/x4.toml and x4-engines.toml's megatron-engine runs as four H200s capped
    at 80 GB plan them (Transformer Engine; MS-AMP for x4-engines; apex's fused weight-gradient
    accumulation for the runs whose first group is an apex one, as docs/gpu-machine/campaign.sh puts
    apex on their path): its CUDA-graph runs, dropout off where Megatron needs it, the deferred
    output-layer gradient, pass Megatron's validator and the TransformerConfig it builds, where
    one crashed on the GPU machine before. (x4-engines' Megatron-DeepSpeed runs go through
    Megatron-DeepSpeed's own parser: tests/train/test_megatron_deepspeed.py.)"""
    from bench.config.campaign import load_campaign
    from bench.running import gpus as hardware
    from bench.running.trainenv import Facts
    from tests.inprocess import run_cli
    from tests.running.test_command import REPO

    monkeypatch.setattr(hardware, "detect_gpus",
                        lambda: hardware.LocalGPUs(4, "NVIDIA H200", "580.00", 150.0))
    monkeypatch.setattr("bench.running.machine.facts", lambda **kw: Facts(python="python", capabilities=caps))
    path = REPO / "results" / "campaigns" / f"{name}.toml"
    only = [arg for run in load_campaign(path).runs if "megatron-deepspeed" not in run.argv
            and apex == (run.groups[0] == "apex" or run.groups[0].endswith("-apex"))
            for arg in ("--only", run.name)]
    result = run_cli("run", "--campaign", str(path), *only, "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cases = [entry["plan"] for entry in json.loads(result.stdout)["runs"]]
    assert all(p["engine"] == "megatron" for p in cases)
    payload = [{"argv": p["train_argv"][p["train_argv"].index(ENTRY[1]) + 1:], "env": p["env"],
                "world_size": p["world_size"], "capabilities": asdict(caps), "config": True}
               for p in cases]
    out = subprocess.run([megatron_python(), str(CHECKER)], input=json.dumps(payload),
                         capture_output=True, text=True, timeout=600, check=True)
    results = json.loads(out.stdout.strip().splitlines()[-1])
    failures = [f"{p['run_id']}: {r['error']}" for p, r in zip(cases, results, strict=True) if not r["ok"]]
    assert len(cases) >= least and not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_the_config_check_refuses_what_crashed_on_the_gpu_machine() -> None:
    """The record of 13b tp2pp2 + sp with TE's CUDA graphs and selective recompute that crashed on
    four H200s: Megatron's parser takes its argv, its TransformerConfig refuses it, as training did."""
    from tests.running.test_command import REPO
    record = json.loads((REPO / "results" / "records"
                         / "13b_tp2pp2dp1sp_local_20261127T071443Z-aecc15-c3.json").read_text())
    argv = record["argv"][record["argv"].index(ENTRY[1]) + 1:]
    payload = [{"argv": argv, "env": record["env"], "world_size": 4, "config": config}
               for config in (False, True)]
    out = subprocess.run([megatron_python(), str(CHECKER)], input=json.dumps(payload),
                         capture_output=True, text=True, timeout=300, check=True)
    parsed, configured = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed["ok"] and record["status"] == "crashed"
    assert not configured["ok"] and "attention dropout is not supported" in configured["error"]
    assert "attention dropout is not supported" in record["reason"]
