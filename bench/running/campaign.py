"""``python -m bench run --campaign FILE [--only NAME ...]``: every selected run of a campaign file
planned (and so checked) before the first is launched, then run round by round: each run's first
repeat in file order, then each one's second, and so on (a sweep's repeat is all its layouts). So
the sides of an A/B alternate on one machine, and what drifts while they run (clocks, the host's
load) falls on both sides, not on the one that ran last."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench.config.campaign import CampaignRun, load_campaign
from bench.planning.plan import LaunchPlan
from bench.running.arguments import RunCommand, parse_run_argv
from bench.running.machine import Machine
from bench.running.run import execute, launches_for, timeout_problems

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
    # A limit no run can meet is refused before the first run; a tight one warns at its run's start.
    cut = [words for _, entry_args, launches in planned
           for level, words in timeout_problems(entry_args, launches) if level == "error"]
    if cut:
        raise ValueError("; ".join(cut))
    code = 0
    for entry, entry_args, launches, (index, count) in in_rounds(planned):
        print(f"campaign {campaign.name}: {entry.name}"
              + (f" (repeat {index} of {count})" if count > 1 else f" ({len(launches)} run(s))"),
              file=sys.stderr)
        code = max(code, execute(entry_args, launches, results, machine))
    return code


Planned = tuple[CampaignRun, argparse.Namespace, list[LaunchPlan]]


def in_rounds(planned: Sequence[Planned]) -> list[tuple[CampaignRun, argparse.Namespace,
                                                         list[LaunchPlan], tuple[int, int]]]:
    """Each entry's launches split by repeat (``repeat`` equal parts: one run, or a sweep's layouts
    once), ordered by repeat, then by the file: with two runs of three repeats, A1 B1 A2 B2 A3 B3.
    Each part carries (its repeat, the entry's repeats)."""
    parts = []
    for order, (entry, args, launches) in enumerate(planned):
        size = len(launches) // args.repeat
        parts += [(index, order, entry, args, launches[(index - 1) * size:index * size], args.repeat)
                  for index in range(1, args.repeat + 1)]
    parts.sort(key=lambda part: part[:2])
    return [(entry, args, launches, (index, count))
            for index, _, entry, args, launches, count in parts if launches]


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
