"""``python -m bench.train.capped --kit-gpu-memory-cap GB SCRIPT [ARG...]``: run a training script
with torch's allocator capped as on a GPU of GB (``run --gpu-memory-cap``).

The kit's megatron-core entry takes the cap as a flag of its own; Megatron-DeepSpeed's
``pretrain_gpt.py`` has no such hook, so the launcher starts this module in its place, which caps
the rank's GPU (:mod:`bench.train.memory_cap`) and then runs the script as Python would: as
``__main__``, with its folder first on ``sys.path`` (its ``megatron`` package before any other)
and ``sys.argv`` its own.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from bench.train import memory_cap

USAGE = "usage: python -m bench.train.capped --kit-gpu-memory-cap GB SCRIPT [ARG...]"


def parse(argv: list[str]) -> tuple[float, str, list[str]]:
    """(the cap in GB, the script, its arguments); a ValueError naming the usage otherwise."""
    if len(argv) < 3 or argv[0] != "--kit-gpu-memory-cap":
        raise ValueError(USAGE)
    try:
        cap = float(argv[1])
    except ValueError:
        raise ValueError(f"--kit-gpu-memory-cap {argv[1]}: give the GB a GPU may use; {USAGE}") from None
    return cap, argv[2], argv[3:]


def run_script(script: str, args: list[str]) -> None:
    """Run ``script`` as ``python SCRIPT ARG...`` would, in this process."""
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")


def main(argv: list[str]) -> int:
    try:
        cap, script, args = parse(argv)
        line = memory_cap.apply(cap)
    except ValueError as error:
        print(f"bench.train.capped: {error}", file=sys.stderr, flush=True)
        return 2
    if os.environ.get("RANK", "0") == "0":  # once, as the megatron-core entry says it
        print(f"> bench kit: {line}", flush=True)
    run_script(script, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
