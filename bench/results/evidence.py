"""Which runs' numbers can be checked against what they were computed from.

A run has *evidence* when its record carries the per-iteration ``series`` or names its kept
``log``, or when its train log is kept beside the records as ``<records>/logs/<run_id>.log.gz``
(records written before those fields are matched with their log by run id alone,
:func:`bench.records.evidence.log_path`). A run without any is labelled so on the page, never
hidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bench.records.evidence import log_path
from bench.records.record import Record


def evidenced(records_dir: Path | str, runs: Iterable[Record]) -> frozenset[str]:
    """The run ids among ``runs`` with a series, a named log or a kept log file."""
    return frozenset(run.run_id for run in runs
                     if run.series or run.log is not None or log_path(records_dir, run.run_id).is_file())
