"""``python -m bench presets`` and ``python -m bench platforms``: what the data files define."""

from __future__ import annotations

import argparse

from bench.config.paths import PLATFORMS_DIR, platforms_dirs
from bench.config.platforms import (
    accelerator_files,
    load_platform,
    misnamed_files,
    origin,
    platform_files,
)
from bench.config.presets import load_presets
from bench.config.text import visible


def cmd_presets(_: argparse.Namespace) -> int:
    print(f"{'preset':>7} {'layers':>6} {'hidden':>6} {'heads':>5} {'seq':>5} {'vocab':>6} "
          f"{'mbs':>4} {'gbs':>5}")
    for p in load_presets().values():
        print(f"{p.name:>7} {p.layers:>6} {p.hidden:>6} {p.heads:>5} {p.seq_length:>5} "
              f"{p.vocab_size:>6} {p.micro_batch:>4} {p.global_batch:>5}")
    return 0

def cmd_platforms(_: argparse.Namespace) -> int:
    """Each platform and accelerator with where its file came from (the kit's, or the user's)."""
    print(f"{'platform':<12} {'from':<5} {'sched':<6} {'launcher':<9} {'runtime':<12} description")
    for path in platform_files():
        p = load_platform(path.stem)
        print(f"{p.name:<12} {origin(path):<5} {p.scheduler:<6} {p.launcher:<9} "
              f"{p.container_runtime:<12} {p.description}")
    accelerators = ", ".join(f"{path.stem} ({origin(path)})" for path in accelerator_files())
    print(f"accelerators: {accelerators}")
    for path in misnamed_files():
        print(f"not listed: {visible(str(path))} (--platform takes no such name: rename the file "
              "with letters, digits, '.', '_' or '-', starting with a letter or digit)")
    print(f"kit: {PLATFORMS_DIR}" + "".join(
        f"; user: {folder} (BENCH_PLATFORMS_DIR, wins over the kit)" for folder in platforms_dirs()[1:]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``presets`` and ``platforms`` on the kit's command line."""
    sub.add_parser("presets", help="list model presets").set_defaults(func=cmd_presets)
    sub.add_parser("platforms", help="list platforms").set_defaults(func=cmd_platforms)
