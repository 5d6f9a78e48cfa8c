"""``python -m bench run --campaign FILE [--only NAME ...]``: every selected run of a campaign file
planned (and so checked) before the first is launched, then run in file order."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench.config.campaign import load_campaign
from bench.running.arguments import RunCommand, parse_run_argv
from bench.running.machine import Machine
from bench.running.run import execute, launches_for

# The command line's options that choose the campaign's runs rather than set them.
SELECTING = ("--campaign", "--only")


def run_campaign(command: RunCommand, results: list[dict[str, object]],
                 machine: Machine) -> int:
    """Plan every selected run of the campaign file, then execute them in file order; each run's
    options are the file's, then the command line's own (which win)."""
    args = command.args
    if args.preset or args.layout or args.sweep or command.megatron_args:
        raise ValueError("--campaign takes the configurations from its file: give no model, "
                         "layout, --sweep or Megatron flags beside it")
    campaign = load_campaign(args.campaign)
    common = campaign_common_argv(command.argv)
    planned = []
    for entry in campaign.selected(args.only):
        entry_command = parse_run_argv(list(entry.argv_with(common)))
        # The run's name too: a record then says which entry of the file it answers.
        labels = (("campaign", campaign.name), ("campaign_run", entry.name))
        launches = launches_for(entry_command, labels=labels, tag=f"c{entry.number}", machine=machine)
        planned.append((entry, entry_command.args, launches))
    code = 0
    for entry, entry_args, launches in planned:
        print(f"campaign {campaign.name}: {entry.name} ({len(launches)} run(s))", file=sys.stderr)
        code = max(code, execute(entry_args, launches, results, machine))
    return code


def campaign_common_argv(argv: Sequence[str]) -> list[str]:
    """The command line's own ``run`` options, without ``run``, ``--campaign`` and ``--only``."""
    common, skip = [], 0
    for word in argv[1:]:
        if skip:
            skip -= 1
        elif word in SELECTING:
            skip = 1
        elif not word.startswith(tuple(f"{flag}=" for flag in SELECTING)):
            common.append(word)
    return common
