"""The run options are declared once: the command line, the campaign file and the planner's
``Options`` all come from ``bench.config.run_options.RUN_OPTIONS``."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.config.campaign import RunTable, load_campaign
from bench.config.platforms import ENGINE_NAMES
from bench.config.run_options import BY_NAME, DEFAULT_ITERS, RUN_OPTIONS, VARIANT_KEYS, RunOption, misplaced
from bench.planning.engines.deepspeed import ZeroSettings, zero_problems
from bench.planning.options import Options
from bench.planning.tuning import TUNING_NOTE_KEYS, Tuning
from bench.running.arguments import options_from, parse_run_argv, run_parser

REPO = Path(__file__).resolve().parents[2]
# What the caller observes or the command decides, not what a user sets.
OBSERVED = {"now", "nonce", "gpus_present", "gpu_name", "gpu_memory_gb", "cpus_present", "capabilities", "repeat",
            "labels", "tag", "step_model"}


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


# The command fills these in (bench.running.arguments.options_from): a sweep measures briefly.
FILLED_BY_THE_COMMAND = {"iters": DEFAULT_ITERS}
SETTINGS = {"": Options, "tuning": Tuning, "zero": ZeroSettings}


def _dataclass_default(field: str) -> object:
    part, _, name = field.rpartition(".")
    (found,) = (f for f in dataclasses.fields(SETTINGS[part]) if f.name == name)
    return found.default


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.field], ids=lambda o: o.name)
def test_every_field_default_is_its_options(option: RunOption) -> None:
    want = FILLED_BY_THE_COMMAND.get(option.field, option.field_default)
    assert _dataclass_default(option.field) == want
    if option.field not in FILLED_BY_THE_COMMAND:  # and what a bare command line gives
        args = parse_run_argv(["13b", "tp1pp1"])
        assert _value(options_from(args, 0, ""), option.field) == option.field_default


def _value(options: object, field: str) -> object:
    for name in field.split("."):
        options = getattr(options, name)
    return options


def _other(option: RunOption) -> object:
    """A value of the option's field away from its default."""
    if option.choices:
        return next(c for c in option.choices if c != option.field_default)
    if option.kind is bool:
        return not option.field_default
    if option.name == "dropout":  # a probability
        return 0.0
    return {int: 4, float: 80.0}.get(option.kind, "x")


SETTINGS_WITH_CHOICES = [o for o in RUN_OPTIONS if o.choices and o.field
                         and o.field.startswith(("tuning.", "zero."))]


@pytest.mark.parametrize("option", SETTINGS_WITH_CHOICES, ids=lambda o: o.name)
def test_every_choice_is_taken_and_nothing_else(option: RunOption) -> None:
    part, _, name = option.field.rpartition(".")
    for choice in option.choices:
        assert getattr(SETTINGS[part](**{name: choice}), name) == choice
    if part == "tuning":
        with pytest.raises(ValueError, match=f"{option.flag} bogus: use one of "
                                             f"{', '.join(option.choices)}"):
            Tuning(**{name: "bogus"})
    else:
        problems, _ = zero_problems(ZeroSettings(**{name: "bogus"}), 1)
        assert problems == [f"{option.flag} bogus is not one of {', '.join(option.choices)}"]


def test_the_choices_the_command_line_takes_are_the_tables() -> None:
    actions = {a.dest: a for a in run_parser()._actions}
    for option in RUN_OPTIONS:
        assert tuple(actions[option.name].choices or ()) == (option.choices or ())


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.variant and o.field
                                    and o.field.startswith(("tuning.", "zero."))],
                         ids=lambda o: o.name)
def test_a_setting_off_its_default_is_its_variant(option: RunOption) -> None:
    part, _, name = option.field.rpartition(".")
    value = _other(option)
    settings = SETTINGS[part](**{name: value})
    assert settings.variant() == ((option.variant, option.variant_text(value)),)
    assert SETTINGS[part]().variant() == ()
    assert option.variant in TUNING_NOTE_KEYS


def test_the_variant_keys_a_record_may_hold() -> None:
    assert set(TUNING_NOTE_KEYS) == {
        "overlap", "grad_reduce", "optimizer_states", "msamp_scaling", "msamp_modules",
        "fused_loss", "core_attention", "gpu_memory_cap_gb", "allocator", "megatron_args",
        "zero_offload", "overlap_comm", "contiguous_gradients", "reduce_bucket_size",
        "allgather_bucket_size", "seq_length", "recompute", "cuda_graphs", "dropout"}
    # and the older code an older record's variant names, which no plan sets (bench.records.migrate)
    assert set(VARIANT_KEYS) == {*TUNING_NOTE_KEYS, "paper_adam"}


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.engine], ids=lambda o: o.name)
def test_a_setting_of_one_engine_is_refused_under_the_other(option: RunOption) -> None:
    assert option.engine in ENGINE_NAMES and option.refusal
    part, _, name = option.field.rpartition(".")
    value = _other(option)
    given = {name: value} if not part else {part: SETTINGS[part](**{name: value})}
    options = Options(now=datetime.now(UTC), **given)
    (other,) = set(ENGINE_NAMES) - {option.engine}
    assert misplaced(options, other) == option.refusal.format(value=value)
    assert misplaced(options, option.engine) is None


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_help_is_short_and_points_to_the_docs() -> None:
    text = (REPO / "docs" / "running.md").read_text()
    anchors = {_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
    for option in RUN_OPTIONS:
        assert len(option.help) <= 300, option.name  # the rest goes to docs/running.md
        if option.doc:
            assert option.doc in anchors, option.doc
