"""``python -m bench.train.script_entry [--kit-gpu-memory-cap GB] SCRIPT [ARG...]``: run a training
script that has none of the kit's hooks (Megatron-DeepSpeed's ``pretrain_gpt.py``) with what the
kit's own megatron-core entry does before Megatron starts.

That is: rank 0 prints how long its host takes to issue a torch op (:mod:`bench.train.host_probe`;
the record's ``conditions.host_op_us``), and, where ``--kit-gpu-memory-cap`` is given
(``run --gpu-memory-cap``), the rank's allocator is capped as on a GPU of GB
(:mod:`bench.train.memory_cap`). Then the script runs as Python would run it: as ``__main__``,
with its folder first on ``sys.path`` (its ``megatron`` package before any other) and
``sys.argv`` its own.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from bench.train import memory_cap

CAP_FLAG = "--kit-gpu-memory-cap"
USAGE = f"usage: python -m bench.train.script_entry [{CAP_FLAG} GB] SCRIPT [ARG...]"


def parse(argv: list[str]) -> tuple[float | None, str, list[str]]:
    """(the cap in GB or None, the script, its arguments); a ValueError naming the usage otherwise."""
    cap = None
    if argv[:1] == [CAP_FLAG]:
        if len(argv) < 3:
            raise ValueError(USAGE)
        try:
            cap = float(argv[1])
        except ValueError:
            raise ValueError(f"{CAP_FLAG} {argv[1]}: give the GB a GPU may use; {USAGE}") from None
        argv = argv[2:]
    if not argv or argv[0].startswith("-"):
        raise ValueError(USAGE)
    return cap, argv[0], argv[1:]


def run_script(script: str, args: list[str]) -> None:
    """Run ``script`` as ``python SCRIPT ARG...`` would, in this process."""
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")


def main(argv: list[str]) -> int:
    try:
        cap, script, args = parse(argv)
        line = memory_cap.apply(cap) if cap is not None else None
    except ValueError as error:
        print(f"bench.train.script_entry: {error}", file=sys.stderr, flush=True)
        return 2
    from bench.train import host_probe  # torch: imported in the training Python, not to parse

    if line and os.environ.get("RANK", "0") == "0":  # once, as the megatron-core entry says it
        print(f"> bench kit: {line}", flush=True)
    probe = host_probe.report()  # rank 0's line, None on the others
    if probe:
        print(probe, flush=True)
    run_script(script, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
