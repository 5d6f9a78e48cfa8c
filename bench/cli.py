"""Command line: ``python -m bench <command>``; the nox sessions call this, so it also works on a
cluster login node where only Python exists. Each command lives with the package that owns it:
``run`` (``bench.running.command``), ``jobs``/``collect``/``check`` (``bench.running.jobs``),
``results`` and ``compare`` (``bench.results``), ``presets``/``platforms`` (``bench.config``),
``data`` (``bench.dataset``) and ``images`` (``bench.images``).
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    own, extra = split_megatron_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
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
