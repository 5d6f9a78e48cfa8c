"""How often a run with ``--save`` saves its checkpoint, so that its record times the saves.

Megatron times a save it makes in the loop, every ``--save-interval`` iterations; the save after
the last iteration, where the interval does not fall on it, is not timed
(:func:`bench.measure.logparse.checkpoint_saves`). A platform's interval is a training run's (the
Azure seed's 100), longer than a benchmark's few iterations: left as it is, the run would write
one untimed checkpoint and its record's ``checkpoint`` would stay null.
"""

from __future__ import annotations

TIMED_SAVES = 2  # the fewest timed saves the kit plans for: the first is often slower


def timed_saves(iters: int, interval: int) -> int:
    """The saves Megatron times in ``iters`` iterations saving every ``interval`` (0: none)."""
    return iters // interval if interval else 0


def save_interval(iters: int, asked: int | None, platform_interval: int) -> tuple[int, list[str]]:
    """The ``--save-interval`` of a run of ``iters`` iterations, and the notes on it.

    ``asked`` (the user's ``--save-interval``) is kept, with a note where it times no save. The
    platform's interval is kept where it gives :data:`TIMED_SAVES` timed saves; otherwise the
    interval is ``iters // TIMED_SAVES``, said in a note.
    """
    if asked is not None:
        if timed_saves(iters, asked):
            return asked, []
        return asked, [f"--save-interval {asked} times no save in {iters} iterations: the only "
                       "save is the one after the last iteration, which Megatron does not time, so "
                       "the record's checkpoint stays empty; pass --save-interval "
                       f"{max(1, iters // TIMED_SAVES)} (or at most {iters}) to time saves"]
    if timed_saves(iters, platform_interval) >= TIMED_SAVES:
        return platform_interval, []
    interval = max(1, iters // TIMED_SAVES)
    was = f"the platform's {platform_interval}" if platform_interval else "none (one save, at the end)"
    return interval, [f"checkpoints every {interval} iterations, {timed_saves(iters, interval)} "
                      f"timed saves in {iters} iterations (save interval was {was}, which times "
                      "none); pass --save-interval to choose"]
