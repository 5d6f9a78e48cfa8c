"""``python -m bench results [--check | --csv] [--by-commit] [--records DIR] [--out DIR]`` and
``python -m bench compare A B``.

Without ``--check``: regenerate ``<out>/README.md`` and ``<out>/plots/`` (exit 0).
With ``--check``: write nothing; exit 1 when a measured row is outside its reference range.
With ``--csv``: write nothing; print every table row (measured and published) as CSV.
By default the runs of one configuration key (``bench/records/identity.py``) share a row whatever
kit commit ran them; with ``--by-commit`` each kit commit's runs are a row, a table or a pair of
their own.
Skipped record files are listed on stderr in both modes; a broken TOML data file exits 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import fields
from pathlib import Path

from bench.config.extras import require
from bench.records.store import add_records_option, records_dir
from bench.results import compare, schemas
from bench.results import generate as gen
from bench.results.aggregate import Row


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compare``, ``results`` and ``schemas`` on the kit's command line."""
    _add_compare(subparsers)
    schemas.register(subparsers)
    parser = subparsers.add_parser(
        "results",
        help="regenerate results/README.md and plots from run records, or check reference ranges",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if a measured row is outside its range")
    mode.add_argument("--csv", action="store_true",
                      help="write nothing; print the table rows as CSV on stdout")
    parser.add_argument("--by-commit", action="store_true",
                        help="split each configuration's runs by kit commit (default: runs of one "
                        "configuration key share a row whatever commit ran them)")
    add_records_option(parser)
    parser.add_argument("--out", type=Path, default=gen.RESULTS_DIR,
                        help="where README.md and plots/ go (default: %(default)s)")
    parser.add_argument("--published", type=Path, default=gen.PUBLISHED_FILE,
                        help="published figures (default: %(default)s)")
    parser.add_argument("--ranges", type=Path, default=gen.RANGES_FILE,
                        help="reference ranges (default: %(default)s)")
    parser.add_argument("--targets", type=Path, default=None,
                        help=f"the throughput targets the page checks (default: {gen.TARGETS_FILE} "
                        "where it exists, else none)")
    parser.add_argument("--smoke", type=Path, default=gen.SMOKE_DIR,
                        help="folder of smoke reports (*smoke*.json, subfolders too) whose GEMM ceilings the "
                        "plots draw (default: %(default)s)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Regenerate or check; returns the exit status."""
    writes = not (args.check or args.csv)
    try:
        if writes:  # --check and --csv draw nothing; a folder that takes no files is said at once
            require("matplotlib", "results", "drawing the results plots")
            gen.check_out_dir(args.out)
        generated = gen.generate(records_dir(args), args.out, args.published, args.ranges,
                                 draw_plots=writes, smoke_dir=args.smoke,
                                 by_commit=args.by_commit, targets_file=args.targets or (
                                     gen.TARGETS_FILE if gen.TARGETS_FILE.is_file() else None))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report = generated.report
    for problem in report.problems:
        print(f"skipped {problem}", file=sys.stderr)
    if args.check:
        return _check(report)
    if args.csv:
        _csv(report)
        return 0
    try:
        changed = gen.write_outputs(args.out, generated.files)
    except OSError as error:  # e.g. the disk filled while writing
        print(f"error: the results could not be written to {args.out} "
              f"({error.strerror or error}: {error.filename})", file=sys.stderr)
        return 2
    print(f"{args.out / gen.PAGE}: {report.ok_runs} ok and {len(report.failed)} failed runs, "
          f"{len(report.measured_rows)} measured rows, {len(generated.files) - 1} plots; "
          f"{len(changed)} file(s) changed, {len(report.problems)} record file(s) skipped")
    return 0


CSV_SKIP = ("reference", "verdict", "figure", "best_figure")
# A text cell a spreadsheet would read as a formula (=, +, -, @; tab and carriage return start
# one too): record text such as a variant or a label could run one on the reader's machine.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    """A CSV cell: text that starts like a formula gets a leading ``'``; numbers stay numbers."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def _csv(report: gen.Report) -> None:
    """Every row of every model table, in page order; empty cells for absent values."""
    names = [f.name for f in fields(Row) if f.name not in CSV_SKIP]
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([*names, "tflops_per_gpu_min", "tflops_per_gpu_max", "reference_tflops_per_gpu",
                     "reference_tolerance", "check"])
    for table in report.tables:
        for row in table.rows:
            ref, figure = row.reference, row.figure
            writer.writerow([*(_cell(getattr(row, n)) for n in names),
                             "" if figure is None else figure.low, "" if figure is None else figure.high,
                             "" if ref is None else ref.tflops_per_gpu,
                             "" if ref is None else ref.tolerance, _cell(row.verdict.value)])


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


def cmd_compare(args: argparse.Namespace) -> int:
    comparison = compare.compare_in(records_dir(args), args.a, args.b)
    if args.json:
        print(json.dumps(compare.to_json(comparison), indent=2))
    else:
        print(compare.format_text(comparison))
    return 0


def _add_compare(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compare", help="B against A: TFLOP/s/GPU and peak memory differences with their noise",
        description=compare.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="run id(s), comma-separated, or a selector such as "
                        "'model=2.7b layout=dp4 gbs=128'")
    parser.add_argument("b", help="the same for B")
    add_records_option(parser)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.set_defaults(func=cmd_compare)
