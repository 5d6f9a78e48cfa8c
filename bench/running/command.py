"""``python -m bench run``: plan a benchmark, then print it (``--dry-run``), submit it as a job on a
cluster, or run it here and write its record; ``--sweep``, ``--repeat`` and ``--campaign`` make
several runs of one command, all planned before any is launched.

The command stores nothing on its arguments; planning and executing one command's runs
is :mod:`bench.running.run`, a campaign file's :mod:`bench.running.campaign`, what is printed
:mod:`bench.running.output`.
"""

from __future__ import annotations

import argparse
import json

from bench.running.arguments import RunCommand, add_run_options
from bench.running.campaign import run_campaign
from bench.running.machine import Machine
from bench.running.run import execute, launches_for


def cmd_run(command: RunCommand) -> int:
    args = command.args
    results: list[dict[str, object]] = []
    machine = Machine()  # asked once for the whole command
    if args.campaign:
        code = run_campaign(command, results, machine)
    else:
        if args.only:  # it selects a campaign's runs; alone it would be silently ignored
            raise ValueError("--only selects runs of a campaign: give --campaign FILE with it")
        if not args.preset:
            raise ValueError("give a model preset and a layout (python -m bench run 13b tp2pp8), "
                             "or --campaign FILE")
        code = execute(args, launches_for(command, machine=machine), results, machine)
    if args.json:
        print(json.dumps({"runs": results}, indent=2))
    return code


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``run`` on the kit's command line."""
    run = sub.add_parser("run", help="plan a benchmark and print, submit or run it")
    add_run_options(run)
    run.set_defaults(func=cmd_run, takes_megatron_args=True)
