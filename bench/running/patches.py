"""Which of the kit's patch series the tree a run trained with has: a record's ``patches``.

Another series is other code (patches 11 and 12 of Megatron-DeepSpeed moved 1.3b from 260 to 420
TFLOP/s), so the results page does not pool runs of different series.
"""

from __future__ import annotations

from pathlib import Path

from bench.images.context import tree_hash
from bench.images.pins import REPO_ROOT
from bench.images.series import SeriesError, run_series
from bench.records.record import PatchSeries

PATCHES_DIR = REPO_ROOT / "patches"


def series_state(upstream: str, tree: Path) -> PatchSeries:
    """The series ``patches/<upstream>/series`` as found in ``tree``: its digest, and whether
    every patch of it is applied there (if not, why)."""
    series = PATCHES_DIR / upstream / "series"
    digest = tree_hash(series.parent)[:16]
    try:
        run_series(series, tree, "verify-applied")
    except SeriesError as error:
        return PatchSeries(upstream=upstream, sha256=digest, applied=False,
                           why=f"NOT applied in {tree}: {str(error).splitlines()[0]}")
    return PatchSeries(upstream=upstream, sha256=digest, applied=True)


def applied_series(patched_trees: tuple[tuple[str, str], ...]) -> tuple[PatchSeries, ...]:
    """The state of each (upstream, tree) a plan names (``LaunchPlan.patched_trees``)."""
    return tuple(series_state(upstream, Path(tree)) for upstream, tree in patched_trees)
