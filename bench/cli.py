"""Command line: ``python -m bench <command>``; the nox sessions call this, so it also works on a
cluster login node where only Python exists. Each command lives with the package that owns it:
``run`` (``bench.running.command``), ``jobs``/``collect``/``check`` (``bench.running.jobs``),
``results`` and ``compare`` (``bench.results``), ``presets``/``platforms`` (``bench.config``),
``data`` (``bench.dataset``) and ``images`` (``bench.images``).
"""

from __future__ import annotations

import argparse
import difflib
import sys

from bench.config import cli as config_cli
from bench.dataset import cli as dataset_cli
from bench.images import cli as images_cli
from bench.results import cli as results_cli
from bench.running import command
from bench.running.arguments import misplaced_flags, split_megatron_args
from bench.running.jobs import cli as jobs_cli

EXIT_USAGE = 2

DESCRIPTION = ("Plan GPT-3-style Megatron throughput benchmarks and run them here (torchrun) or "
               "submit them as Slurm/PBS jobs; follow and collect the jobs into run records; build, "
               "push and pull the images; regenerate the results page. The nox sessions call this, "
               "so it also works on a login node where only Python exists. Each command has --help.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    command.register(sub)
    results_cli.register(sub)
    dataset_cli.register(sub)
    images_cli.register(sub)
    config_cli.register(sub)
    jobs_cli.register(sub)
    return parser


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command that ``args`` ran, e.g. ``run``'s or ``images build``'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse the kit's own arguments. An unknown option is reported by the command it was given
    to, with that command's usage and the nearest option it has (argparse alone answers with the
    top-level usage, which names no option of ``run``)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = _command_parser(parser, args)
        known = [flag for action in command._actions for flag in action.option_strings]
        close = [match for word in unknown if word.startswith("-")
                 for match in difflib.get_close_matches(word.split("=")[0], known, n=1)]
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def main(argv: list[str] | None = None) -> int:
    own, extra = split_megatron_args(sys.argv[1:] if argv is None else argv)
    args = parse(own)
    if extra and not getattr(args, "takes_megatron_args", False):
        print("error: Megatron flags after '--' are for 'run' only", file=sys.stderr)
        return EXIT_USAGE
    error = misplaced_flags(extra)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    args.megatron_args, args.argv = extra, own
    try:
        return args.func(args)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
