"""The ``run`` command's options: the plan's options on the command line (and in a campaign's
runs), and the Megatron flags after ``--``."""

from __future__ import annotations

import argparse
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.config.capabilities import Capabilities
from bench.config.run_options import DEFAULT_ITERS, GROUPS, RUN_OPTIONS, field_default
from bench.planning.engines.deepspeed import ZeroSettings
from bench.planning.engines.setting_flags import lift
from bench.planning.options import Options
from bench.planning.predict.expect import load_step_model
from bench.planning.sweep import SWEEP_ITERS
from bench.planning.tuning import Tuning, flag_names


@dataclass(frozen=True)
class RunCommand:
    """One ``run`` command: argparse's reading of the kit's options (``args``), the words they were
    read from (``argv``, ``run`` first; none for arguments built in code) and the Megatron flags
    after '--'. The namespace stays argparse's: nothing is stored on it."""

    args: argparse.Namespace
    argv: tuple[str, ...] = ()
    megatron_args: tuple[str, ...] = ()


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``run``'s arguments: the preset and layout, then every option of the table
    (:data:`bench.config.run_options.RUN_OPTIONS`), in its groups."""
    parser.add_argument("preset", nargs="?",
                        help="model preset, e.g. 1.3b or 13b (see: python -m bench presets)")
    parser.add_argument("layout", nargs="?", help="parallel layout, e.g. tp1pp1, tp2pp8, tp4pp2dp2")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for option in RUN_OPTIONS:
        where: argparse.ArgumentParser | argparse._ArgumentGroup = parser
        if option.group is not None:
            if option.group not in groups:
                groups[option.group] = parser.add_argument_group(*GROUPS[option.group])
            where = groups[option.group]
        option.add_to(where, sweep_iters=SWEEP_ITERS)


def options_from(command: RunCommand, gpus_present: int, gpu_name: str,
                 capabilities: Capabilities | None = None) -> Options:
    """The planner's options from a ``run`` command, each where its table entry says, with what
    the caller observed of the machine."""
    args = command.args
    top: dict[str, object] = {}
    nested: dict[str, dict[str, object]] = {"tuning": {}, "zero": {}}
    for option in RUN_OPTIONS:
        if option.field is None:
            continue
        value = getattr(args, option.name)
        if option.to_field is not None:
            value = option.to_field(value)
        part, _, name = option.field.rpartition(".")
        (nested[part] if part else top)[name] = value
    if top["iters"] is None:  # a sweep measures each layout briefly
        top["iters"] = SWEEP_ITERS if getattr(args, "sweep", False) else DEFAULT_ITERS
    return Options(now=datetime.now(UTC), gpus_present=gpus_present, gpu_name=gpu_name,
                   nonce=secrets.token_hex(3),  # run ids of two checkouts in one second stay apart
                   capabilities=capabilities, step_model=load_step_model(), **top,
                   zero=ZeroSettings(**nested["zero"]),
                   tuning=Tuning(**typed_settings(nested["tuning"], command.megatron_args)))


def typed_settings(tuning: dict[str, object], extra: tuple[str, ...]) -> dict[str, object]:
    """The tuning fields with the graph and dropout flags typed after '--' read as the settings
    they are (``bench.planning.engines.setting_flags.lift``) and out of the extra flags, where the
    user left those settings at their defaults: the run is recorded as a run of the settings. Any
    other mix stays as typed, for the plan to refuse the flags the kit then renders itself."""
    found = lift(extra)
    given = {name: value for name, value in (("cuda_graphs", found.cuda_graphs),
                                             ("dropout", found.dropout)) if value is not None}
    if not given or any(tuning[name] != field_default(f"tuning.{name}") for name in given):
        return {**tuning, "extra_args": extra}
    return {**tuning, **given, "extra_args": found.rest}


def run_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m bench run`` alone (a campaign's runs are checked with it)."""
    parser = argparse.ArgumentParser(prog="python -m bench run")
    add_run_options(parser)
    return parser


def kit_run_flags() -> set[str]:
    """Every option string of ``python -m bench run``."""
    parser = argparse.ArgumentParser(add_help=False)
    add_run_options(parser)
    return {flag for action in parser._actions for flag in action.option_strings}

def split_megatron_args(argv: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """(the kit's arguments, the Megatron flags after the first '--')."""
    if "--" not in argv:
        return argv, ()
    cut = argv.index("--")
    return argv[:cut], tuple(argv[cut + 1:])

def misplaced_flags(extra: tuple[str, ...]) -> str | None:
    """The error for kit options written after '--', or None."""
    misplaced = sorted(flag_names(extra) & kit_run_flags())
    if not misplaced:
        return None
    return (f"{', '.join(misplaced)} after '--' would go to Megatron, but it is an option of "
            "'python -m bench run': put it before '--'")


def parse_run_argv(argv: list[str]) -> RunCommand:
    """A campaign run's ``run`` arguments, checked like a command line; ValueError if bad."""
    own, extra = split_megatron_args(argv)
    try:
        args = run_parser().parse_args(own)
    except SystemExit:  # argparse has printed what is wrong
        raise ValueError(f"campaign run '{' '.join(argv)}' is not valid (see above)") from None
    error = misplaced_flags(extra)
    if error:
        raise ValueError(error)
    return RunCommand(args, ("run", *own), extra)
