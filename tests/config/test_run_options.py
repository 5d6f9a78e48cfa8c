"""The run options are declared once: the command line, the campaign file and the planner's
``Options`` all come from ``bench.config.run_options.RUN_OPTIONS``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench.config.campaign import RunTable, load_campaign
from bench.config.run_options import BY_NAME, RUN_OPTIONS
from bench.planning.engines.deepspeed import ZeroSettings
from bench.planning.options import Options
from bench.planning.tuning import Tuning
from bench.running.arguments import options_from, parse_run_argv, run_parser

# What the caller observes or the command decides, not what a user sets.
OBSERVED = {"now", "nonce", "gpus_present", "gpu_name", "gpu_memory_gb", "capabilities", "repeat", "labels", "tag"}


def test_the_command_line_is_the_table() -> None:
    flags = {flag for action in run_parser()._actions for flag in action.option_strings}
    declared = {o.flag for o in RUN_OPTIONS} | {a for o in RUN_OPTIONS for a in o.aliases}
    assert flags - {"-h", "--help"} == declared


def test_every_option_of_a_configuration_is_a_campaign_key() -> None:
    special = {"name", "group", "model", "layout", "megatron_args"}
    assert set(RunTable.model_fields) == special | {o.name for o in RUN_OPTIONS if o.campaign}
    command_only = {o.name for o in RUN_OPTIONS if not o.campaign}
    assert command_only == {"dry_run", "json", "campaign", "only"}


def test_every_user_setting_of_options_has_one_table_entry() -> None:
    wanted = ({f.name for f in dataclasses.fields(Options)} - OBSERVED - {"tuning", "zero"}
              | {f"tuning.{f.name}" for f in dataclasses.fields(Tuning)} - {"tuning.extra_args"}
              | {f"zero.{f.name}" for f in dataclasses.fields(ZeroSettings)})
    targets = [o.field for o in RUN_OPTIONS if o.field is not None]
    assert sorted(targets) == sorted(wanted)


def test_a_campaign_sets_what_the_command_line_sets(tmp_path: Path) -> None:
    """Options once missing from campaigns (recompute, sequence length, checkpoints, ZeRO)."""
    path = tmp_path / "all.toml"
    path.write_text('[[run]]\nmodel = "345m"\nlayout = "tp1pp1zero3"\nengine = "megatron-deepspeed"\n'
                    'recompute = "full"\nseq_length = 4096\nsave = "ckpt"\nsave_interval = 5\n'
                    'zero_offload = "cpu"\noverlap_comm = true\nreduce_bucket = 2e8\n'
                    'force = true\nimage_option = "msamp=1"\ngrad_reduce = "fp8-shared-scale"\n'
                    'optimizer_states = "paper"\n')
    (run,) = load_campaign(path).runs
    from_file = options_from(parse_run_argv(list(run.argv)), 0, "")
    line = ["345m", "tp1pp1zero3", "--engine", "megatron-deepspeed", "--recompute", "full",
            "--seq-length", "4096", "--save", "ckpt", "--save-interval", "5", "--zero-offload",
            "cpu", "--overlap-comm", "--reduce-bucket", "2e8", "--force", "--image-option",
            "msamp=1", "--grad-reduce", "fp8-shared-scale", "--optimizer-states", "paper"]
    from_line = options_from(parse_run_argv(line), 0, "")
    assert dataclasses.replace(from_file, now=from_line.now, nonce=from_line.nonce) == from_line
    assert from_line.zero == ZeroSettings(offload="cpu", overlap_comm=True,
                                          reduce_bucket_size=200_000_000)
    assert (from_line.recompute, from_line.seq_length, from_line.save, from_line.image_msamp) == (
        "full", 4096, "ckpt", True)
    assert (from_line.tuning.grad_reduce, from_line.tuning.optimizer_states) == (
        "fp8-shared-scale", "paper")


def test_environment_variables_give_the_defaults(monkeypatch) -> None:
    monkeypatch.setenv("BENCH_PLATFORM", "lumi")
    monkeypatch.setenv("BENCH_ACCOUNT", "project_1")
    args = run_parser().parse_args(["13b", "tp2pp8"])
    assert (args.platform, args.account) == ("lumi", "project_1")
    assert {o.name for o in RUN_OPTIONS if o.env} == {"platform", "account", "partition", "queue",
                                                      "walltime"}
    assert BY_NAME["platform"].env == "BENCH_PLATFORM"
