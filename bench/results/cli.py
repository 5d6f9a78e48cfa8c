"""``python -m bench results [--check] [--records DIR] [--out DIR]``.

Without ``--check``: regenerate ``<out>/README.md`` and ``<out>/plots/`` (exit 0).
With ``--check``: write nothing; exit 1 when a measured row is outside its reference range.
Skipped record files are listed on stderr in both modes; a broken TOML data file exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.extras import require
from bench.results import generate as gen


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``results`` subcommand."""
    parser = subparsers.add_parser(
        "results",
        help="regenerate results/README.md and plots from run records, or check reference ranges",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a measured row is outside its range")
    parser.add_argument("--records", type=Path, default=gen.RECORDS_DIR,
                        help="run records directory (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=gen.RESULTS_DIR,
                        help="where README.md and plots/ go (default: %(default)s)")
    parser.add_argument("--published", type=Path, default=gen.PUBLISHED_FILE,
                        help="published figures (default: %(default)s)")
    parser.add_argument("--ranges", type=Path, default=gen.RANGES_FILE,
                        help="reference ranges (default: %(default)s)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Regenerate or check; returns the exit status."""
    try:
        if not args.check:
            require("matplotlib", "results", "drawing the results plots")
        generated = gen.generate(args.records, args.out, args.published, args.ranges,
                                 draw_plots=not args.check)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report = generated.report
    for problem in report.problems:
        print(f"skipped {problem}", file=sys.stderr)
    if args.check:
        return _check(report)
    changed = gen.write_outputs(args.out, generated.files)
    print(f"{args.out / gen.PAGE}: {report.ok_runs} ok and {len(report.failed)} failed runs, "
          f"{len(report.measured_rows)} measured rows, {len(generated.files) - 1} plots; "
          f"{len(changed)} file(s) changed, {len(report.problems)} record file(s) skipped")
    return 0


def _check(report: gen.Report) -> int:
    rows = report.measured_rows
    for row in report.flagged_rows:
        ref = row.reference
        assert ref is not None  # only rows with a range can be flagged
        print(f"OUT OF RANGE {row.model} {row.layout} on {row.platform} ({row.label}): "
              f"{row.tflops_per_gpu:.1f} TFLOP/s/GPU is {row.verdict} "
              f"{ref.low:.1f}-{ref.high:.1f} ({ref.tflops_per_gpu:.0f} ± "
              f"{ref.tolerance * 100:.0f} %, {ref.source})")
    without = sum(1 for row in rows if row.reference is None)
    flagged = len(report.flagged_rows)
    print(f"{len(rows)} measured rows: {len(rows) - without - flagged} in range, {flagged} out of "
          f"range, {without} without a reference range")
    return 1 if flagged else 0
