"""Help texts are whole sentences: none is cut off at a docstring's line break."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.cli import build_parser

REPO = Path(__file__).resolve().parents[1]


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_description_is_a_whole_sentence() -> None:
    for parser in _parsers(build_parser()):
        if parser.description:
            assert parser.description.rstrip().endswith((".", ")")), (parser.prog,
                                                                       parser.description)


def test_top_level_help_ends_its_description() -> None:
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    description = out.split("\n\n")[1]
    assert description.startswith("Plan GPT-3-style Megatron throughput benchmarks")
    assert description.rstrip().endswith("Each command has --help.")
