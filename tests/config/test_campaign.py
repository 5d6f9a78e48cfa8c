"""Campaign files and ``run --campaign``, ``--sweep`` on clusters, ``--repeat`` and ``--json`` plans.

Everything here is planned and printed (``--dry-run``); the real submission of a campaign's jobs
to Slurm is in ``tests/running/jobs/test_slurm_sweep.py``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.campaign import load_campaign
from bench.config.capabilities import Capabilities
from bench.running import gpus as hardware
from bench.running.trainenv import Facts
from tests.inprocess import run_cli
from tests.running.test_command import REPO

CAMPAIGNS = sorted((REPO / "results" / "campaigns").glob("*.toml"))


def _plans(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [entry["plan"] for entry in json.loads(result.stdout)["runs"]]


@pytest.mark.parametrize("path", CAMPAIGNS, ids=[p.stem for p in CAMPAIGNS])
def test_every_campaign_file_plans(tmp_path: Path, path: Path) -> None:
    campaign = load_campaign(path)
    # fp8 needs Transformer Engine, which this machine lacks: such a campaign is planned where a
    # platform declares it (the NGC image of azure-h200), the rest on the local platform.
    fp8 = any(arg.startswith("fp8") for run in campaign.runs for arg in run.argv)
    where = ["--platform", "azure-h200"] if fp8 else []
    # MS-AMP's precisions plan where an image built with --option msamp=1 is named.
    if any(arg.startswith(("msamp", "fp4")) for run in campaign.runs for arg in run.argv):
        where = ["--platform", "azure-h200", "--image", "ghcr.io#megatron-bench-kit/cuda:msamp",
                 "--image-option", "msamp=1"]
    plans = _plans(run_cli("run", "--campaign", str(path), "--gpus", "4", *where, "--dry-run",
                           "--json", cwd=tmp_path))
    assert len(plans) >= len(campaign.runs)
    assert len({p["run_id"] for p in plans}) == len(plans), "run ids must be unique"
    assert all(p["labels"]["campaign"] == path.stem for p in plans)
    assert {p["labels"]["campaign_run"] for p in plans} == {run.name for run in campaign.runs}
    assert not list(tmp_path.iterdir())


def test_tuning_campaign_groups_hold_the_ab_settings(tmp_path: Path) -> None:
    path = REPO / "results" / "campaigns" / "h200-tuning.toml"
    plans = _plans(run_cli("run", "--campaign", str(path), "--only", "x4-rest", "--dry-run",
                           "--json", cwd=tmp_path))
    assert [(p["preset"]["name"], p["variant"]) for p in plans] == [
        ("2.7b", {"overlap": "off"}), ("2.7b", {"grad_reduce": "fp32"}), ("6.7b", {}),
        ("2.7b", {"fused_loss": "off"})]
    assert [p["run_id"].rsplit("-", 1)[1] for p in plans] == ["c8", "c9", "c10", "c11"]
    assert all(p["iters"] == 11 for p in plans)


def test_a_campaign_on_a_cluster_renders_one_job_per_run(tmp_path: Path) -> None:
    campaign = tmp_path / "mine.toml"
    campaign.write_text('[defaults]\nmodel = "13b"\nnodes = 1\n'
                        '[[run]]\nname = "dp8"\nlayout = "tp1pp1"\nrepeat = 2\n'
                        '[[run]]\nname = "sweep"\nsweep = true\n'
                        'megatron_args = ["--manual-gc"]\n')
    result = run_cli("run", "--campaign", str(campaign), "--platform", "azure-h200", "--dry-run",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    scripts = result.stdout.count("# job.sbatch for run ")
    # two repeats, then every 13b layout of 8 GPUs: ten splits, fourteen sequence-parallel and
    # interleaved shapes over them
    assert scripts == 2 + 24
    assert "13b_tp1pp1dp8_azure-h200_" in result.stdout and "-c1-r2" in result.stdout
    assert result.stdout.count("--manual-gc") == 24


@pytest.mark.parametrize("text,message", [
    ('[[run]]\nmodel = "13b"\nlayout = "tp1pp1"\nmbz = 2\n', "[[run]] #1: unknown key(s) mbz"),
    ('[[run]]\nmodel = "13b"\nlayout = "tp1pp1"\ngbs = "64"\n', "[[run]] #1: key 'gbs' must be an integer"),
    ('[[run]]\nmodel = "13b"\n', "give a layout or sweep = true"),
    ('[[run]]\nmodel = "13b"\nlayout = "tp3pp1"\n', "not divisible by tp3"),
    ('[[run]]\nname = "a"\nmodel = "13b"\nlayout = "tp1pp1"\n'
     '[[run]]\nname = "a"\nmodel = "13b"\nlayout = "tp2pp1"\n', "name 'a' is used twice"),
    ('[[run]]\nmodel = "13b"\nlayout = "tp1pp1"\nmegatron_args = ["--micro-batch-size", "2"]\n',
     "already sets --micro-batch-size"),
    ('runs = 1\n', "unknown key(s) runs; allowed: description, defaults, run"),
])
def test_bad_campaigns_exit_2_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    campaign = tmp_path / "bad.toml"
    campaign.write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "--campaign", str(campaign), "--platform", "lumi", cwd=work)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not list(work.iterdir())


def test_only_names_a_run_or_group(tmp_path: Path) -> None:
    path = REPO / "results" / "campaigns" / "h200x4.toml"
    result = run_cli("run", "--campaign", str(path), "--only", "x9", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "no run or group x9" in result.stderr
    result = run_cli("run", "--campaign", str(path), "13b", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "give no model" in result.stderr


def test_sweep_on_a_cluster_needs_its_size_and_submits_per_layout(tmp_path: Path) -> None:
    result = run_cli("run", "13b", "--sweep", "--platform", "lumi", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "needs its size: --gpus N or --nodes N" in result.stderr
    plans = _plans(run_cli("run", "13b", "--sweep", "--platform", "lumi", "--nodes", "2",
                           "--account", "project_1", "--dry-run", "--json", cwd=tmp_path))
    assert all(p["world_size"] == 16 and p["labels"]["sweep"].startswith("13b_sweep_lumi_")
               for p in plans)
    assert all(p["layout"]["tp"] <= 8 for p in plans), "tensor parallelism stays in a node"


def test_repeat_numbers_the_runs_of_one_group(tmp_path: Path) -> None:
    plans = _plans(run_cli("run", "2.7b", "tp1pp1", "--repeat", "3", "--dry-run", "--json",
                           cwd=tmp_path))
    ids = [p["run_id"] for p in plans]
    assert [i[-3:] for i in ids] == ["-r1", "-r2", "-r3"]
    assert {p["labels"]["repeat_group"] for p in plans} == {ids[0][:-3]}
    result = run_cli("run", "2.7b", "tp1pp1", "--repeat", "0", cwd=tmp_path)
    assert result.returncode == 2 and "--repeat must be at least 1" in result.stderr


def test_a_campaigns_repeats_run_in_rounds_so_the_sides_alternate(tmp_path: Path) -> None:
    """Two runs of three repeats and one of one: A1 B1 C A2 B2 A3 B3, each run id with its entry
    and repeat, so that an A/B's sides share the machine's drift."""
    path = tmp_path / "ab.toml"
    path.write_text('[defaults]\nmodel = "2.7b"\nlayout = "tp1pp1"\nrepeat = 3\n'
                    '[[run]]\nname = "a"\ngbs = 32\n[[run]]\nname = "b"\ngbs = 128\n'
                    '[[run]]\nname = "c"\nrepeat = 1\n')
    result = run_cli("run", "--campaign", str(path), "--dry-run", "--json", cwd=tmp_path)
    order = [re.search(r"-(c\d)(-r\d)?$", p["run_id"]).group(0) for p in _plans(result)]
    assert order == ["-c1-r1", "-c2-r1", "-c3", "-c1-r2", "-c2-r2", "-c1-r3", "-c2-r3"]
    assert "campaign ab: b (repeat 2 of 3)" in result.stderr


def test_the_fp8_default_group_pairs_fp8_with_bf16_at_the_micro_batch_fp8_picks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On the local platform with two H100 80 GB and Transformer Engine, as the campaign runs."""
    monkeypatch.setattr(hardware, "detect_gpus",
                        lambda: hardware.LocalGPUs(2, "NVIDIA H100 80GB HBM3", "570.00", 85.0))
    monkeypatch.setattr("bench.running.machine.facts", lambda **kw: Facts(
        python="python", capabilities=Capabilities(transformer_engine=True, apex_layer_norm=True)))
    path = REPO / "results" / "campaigns" / "h100x2.toml"
    result = run_cli("run", "--campaign", str(path), "--only", "fp8-default", "--dry-run", "--json",
                     cwd=tmp_path)
    mbs = {(p["preset"]["name"], p["precision"]): p["layout"]["micro_batch"] for p in _plans(result)}
    assert mbs == {("1.3b", "fp8-delayed"): 8, ("1.3b", "bf16"): 8}
    assert result.stderr.count("fp8-delayed default: largest of 4, 8, 16 that fits") == 1
    campaign = load_campaign(path)
    fp8_runs = [r for r in campaign.runs if "fp8-default" in r.groups and "--precision" in r.argv]
    assert fp8_runs and not any("--mbs" in r.argv for r in fp8_runs)  # the planner's pick runs


# The script that runs a campaign's groups on the GPU machine (its one versioned place): its
# ``group`` function puts a group on a stack (Python path and data) by the group's name, the first
# case that matches.
RUNNER = REPO / "docs" / "gpu-machine" / "campaign.sh"


def _runner_stack(group: str) -> str:
    """The settings of the runner's first ``group`` case whose pattern matches ``group``."""
    text = RUNNER.read_text()
    body = text[text.index("group() {"):]
    body = body[:body.index("esac")]
    for patterns, settings in re.findall(r"^\s+([^\s()]+)\)\s+(.*)$", body, re.MULTILINE):
        if any(fnmatch.fnmatchcase(group, pattern) for pattern in patterns.split("|")):
            return settings
    raise AssertionError(f"no case of {RUNNER.name}'s group function matches {group}")


def _stack_of(path: Path, names: list[str]) -> dict[str, str]:
    """The runner's own ``stack_of``, run by bash: per name, the group name that picks its stack."""
    text = RUNNER.read_text()
    function = text[text.index("stack_of() {"):text.index("\ngroup() {")]
    done = subprocess.run(["bash", "-c", f'{function}\nstack_of "$@"', "stack_of", *names],
                          env={**os.environ, "PYTHON": sys.executable, "CAMPAIGN": str(path)},
                          capture_output=True, text=True, check=True)
    return dict(zip(names, done.stdout.split(), strict=True))


def _option(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("path", CAMPAIGNS, ids=[p.stem for p in CAMPAIGNS])
def test_each_group_and_run_lands_on_the_stack_its_runs_need(path: Path) -> None:
    """Megatron-DeepSpeed's groups on apex with GPT-2's BPE files (and nothing else there: the
    megatron engine refuses --vocab-file), MS-AMP's precisions on MS-AMP's path. A run named alone
    (`campaign.sh 13b-tp4-mds-fp16`) lands where its group does."""
    campaign = load_campaign(path)
    selections = {g: [run for run in campaign.runs if g in run.groups]
                  for g in {g for run in campaign.runs for g in run.groups}}
    selections.update({run.name: [run] for run in campaign.runs})
    stacks = _stack_of(path, sorted(selections))
    assert 'case $(stack_of "$name") in' in RUNNER.read_text()  # group() routes by it
    for group, runs in sorted(selections.items()):
        stack = _runner_stack(stacks[group])
        mds = [_option(run.argv, "--engine") == "megatron-deepspeed" for run in runs]
        assert all(mds) == ("data=gpt2" in stack), f"{path.stem} group {group}: {stack}"
        assert all(mds) or not any(mds), f"{path.stem} group {group} mixes the engines"
        if any(str(_option(run.argv, "--precision")).startswith(("msamp", "fp4")) for run in runs):
            assert "$MSAMP_SITE" in stack, f"{path.stem} group {group}: {stack}"


@pytest.mark.parametrize("pair", [("mds-x4-ab", "mds-core-x4-ab"), ("mds-x4-ab-mbs2", "mds-core-x4-ab-mbs2")])
def test_the_four_gpu_engine_ab_is_one_configuration_on_the_same_data(tmp_path: Path,
                                                                       pair: tuple[str, str]) -> None:
    """x4-engines.toml's engine A/Bs: the two sides share layout, batch, recompute and data, and
    every group of the file reads the tokenized data on the GPU machine. At the kit's settings
    (micro-batch 2) both sides run without dropout, and neither with CUDA graphs."""
    path = REPO / "results" / "campaigns" / "x4-engines.toml"
    campaign = load_campaign(path)
    names = sorted({g for run in campaign.runs for g in run.groups} | {r.name for r in campaign.runs})
    assert all("data=" in _runner_stack(g) and "data=none" not in _runner_stack(g)
               for g in _stack_of(path, names).values())
    plans = _plans(run_cli("run", "--campaign", str(path), "--only", pair[0], "--only", pair[1],
                           "--platform", "azure-h200", "--dry-run", "--json", cwd=tmp_path))
    sides = {p["engine"]: p for p in plans}
    assert sorted(sides) == ["megatron", "megatron-deepspeed"]

    def configuration(p: dict) -> tuple:
        layout = {k: v for k, v in p["layout"].items() if k not in ("name", "zero")}
        recompute = _option(tuple(p["train_argv"]), "--recompute-granularity")
        return p["preset"], layout, p["precision"], recompute, p["iters"], p["world_size"], p["data"]
    assert configuration(sides["megatron"]) == configuration(sides["megatron-deepspeed"])
    if pair[0].endswith("-mbs2"):
        for side in sides.values():
            argv = " ".join(side["train_argv"])
            assert "--attention-dropout 0.0" in argv and "--hidden-dropout 0.0" in argv
            assert "--cuda-graph-impl" not in argv


@pytest.mark.slow  # waits one of the script's 5 s polls
def test_a_group_started_with_setup_in_one_command_waits_for_it(tmp_path: Path) -> None:
    """`bg setup` marks setup started before it returns: a group in the same command waits for
    setup's markers instead of stopping as on a machine where setup never ran. Here setup finds no
    carried files and ends at once, so the group stops on that, not on a missing setup."""
    env = {**os.environ, "WORK": str(tmp_path / "work"), "CARRY": str(tmp_path / "carry"),
           "PYTHON": sys.executable, "CAMPAIGN": str(REPO / "results" / "campaigns" / "x4.toml")}
    script = (f'bash {RUNNER} bg setup && test -e "$WORK/setup.started" && '
              f'timeout 60 bash {RUNNER} 13b-tp1pp4vp2-bf16')
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False)
    assert "setup ended without wheels.done" in done.stdout, done.stdout + done.stderr
    assert "setup has not run" not in done.stdout


def test_a_runs_options_and_megatron_flags_are_kept_apart(tmp_path: Path) -> None:
    """The command line's options go after the file's (they win) and before the Megatron flags,
    which stay the file's own: nothing is cut out of an argv by position."""
    path = tmp_path / "c.toml"
    path.write_text('[[run]]\nmodel = "125m"\nlayout = "tp1pp1"\niters = 11\n'
                    'megatron_args = ["--hidden-dropout", "0.0"]\n'
                    '[[run]]\nmodel = "125m"\nlayout = "tp1pp1"\n')
    flagged, plain = load_campaign(path).runs
    assert flagged.options == ("125m", "tp1pp1", "--iters", "11")
    assert flagged.megatron_args == ("--hidden-dropout", "0.0")
    assert flagged.argv_with(["--iters", "20"]) == ("125m", "tp1pp1", "--iters", "11", "--iters", "20",
                                                    "--", "--hidden-dropout", "0.0")
    assert plain.argv == ("125m", "tp1pp1")


TWO_H200_CAMPAIGNS = ("h200x2-te", "h200-te-attention")


@pytest.mark.parametrize("name", TWO_H200_CAMPAIGNS)
def test_a_two_h200_campaign_plans_every_run_on_two_h200s(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, name: str) -> None:
    """At its own size, with the GPU's memory known, so the memory estimate is asked of every run
    (test_every_campaign_file_plans plans on GPUs of unknown memory, or on four, where the
    optimizer state is sharded over twice the ranks, so it never saw h200x2-te's 13b fp8 runs
    refused)."""
    monkeypatch.setattr(hardware, "detect_gpus",
                        lambda: hardware.LocalGPUs(2, "NVIDIA H200", "570.00", 150.0))
    monkeypatch.setattr("bench.running.machine.facts", lambda **kw: Facts(
        python="python", capabilities=Capabilities(transformer_engine=True, apex_layer_norm=True)))
    path = REPO / "results" / "campaigns" / f"{name}.toml"
    campaign = load_campaign(path)
    result = run_cli("run", "--campaign", str(path), "--dry-run", "--json", cwd=tmp_path)
    plans = _plans(result)
    assert {p["labels"]["campaign_run"] for p in plans} == {run.name for run in campaign.runs}
    assert all(p["layout"]["tp"] * p["layout"]["pp"] * p["layout"]["dp"] == 2 for p in plans)
    assert "memory estimate: ~" in result.stderr and "device memory unknown" not in result.stderr
