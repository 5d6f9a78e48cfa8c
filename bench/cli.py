"""``python -m bench <subcommand>``: each feature registers its subcommand here."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.results import cli as results_cli


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the subcommand; returns its status."""
    parser = argparse.ArgumentParser(prog="bench", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    results_cli.add_parser(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)
