"""Command line: ``python -m bench <command>``; the nox sessions call this, so it also works on a
cluster login node where only Python exists. Each command lives with the package that owns it:
``run`` (``bench.running.command``), ``jobs``/``collect``/``check`` (``bench.running.jobs``),
``results`` and ``compare`` (``bench.results``), ``presets``/``platforms`` (``bench.config``),
``data`` (``bench.dataset``), ``images`` (``bench.images``), ``evidence``
(``bench.records.manifest``) and ``verify`` (``bench.records.verify``); ``predict`` checks and
refits the step-time model (``bench.planning.predict``) on the records, so it is assembled here.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.config import cli as config_cli
from bench.config.environment import environment_problem
from bench.config.presets import load_presets
from bench.config.text import error_text, visible
from bench.dataset import cli as dataset_cli
from bench.images import cli as images_cli
from bench.planning.predict import facts, fit, validate
from bench.planning.predict.published import published_cases, row_platforms
from bench.records import manifest, verify
from bench.records.as_planned import as_planned, describe
from bench.records.identity import config_key
from bench.records.store import add_records_option, load_records, records_dir
from bench.results import cli as results_cli
from bench.results.data import load_published
from bench.results.generate import PUBLISHED_FILE
from bench.running import command
from bench.running.arguments import RunCommand, misplaced_flags, split_megatron_args
from bench.running.jobs import cli as jobs_cli
from bench.running.provenance import kit_commit

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C

DESCRIPTION = ("Plan GPT-3-style Megatron throughput benchmarks and run them here (torchrun) or "
               "submit them as Slurm/PBS jobs; follow and collect the jobs into run records; build, "
               "push and pull the images; regenerate the results page. The nox sessions call this, "
               "so it also works on a login node where only Python exists. Each command has --help.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    command.register(sub)
    results_cli.register(sub)
    dataset_cli.register(sub)
    images_cli.register(sub)
    config_cli.register(sub)
    jobs_cli.register(sub)
    manifest.register(sub)
    verify.register(sub)
    predict = sub.add_parser("predict", help="check the step-time model on the records, or refit it",
                             description="--validate: fit on the ok megatron records without a whole "
                             "configuration (or model size), predict it, for each; fit on 1-2 GPUs, "
                             "predict 4; rank layouts; predict the published rows, never fitted on. "
                             "--refit: fit on every ok record and write the fit (atomically) to --fit.")
    mode = predict.add_mutually_exclusive_group(required=True)
    mode.add_argument("--validate", action="store_true", help="print the errors; the last two lines "
                      "are 'group-held-out: median X %% p90 Y %%' and 'published: median X %% p90 Y %% "
                      "(N rows)'")
    mode.add_argument("--refit", action="store_true", help="refit the model's factors and store them")
    predict.add_argument("--fit", type=Path, default=fit.FIT_FILE,
                         help="the fit --refit writes, in a folder that exists (default: the kit's, "
                         "%(default)s)")
    add_records_option(predict)
    predict.set_defaults(func=run_predict)
    return parser


def _validation(runs: list[validate.Observed], as_core: list[validate.Observed]
                ) -> tuple[list[str], dict[str, float]]:
    """The validation's lines and figures: the records, those priced as megatron-core's, and the
    published rows."""
    rows = load_published(PUBLISHED_FILE).rows
    published = published_cases(rows, load_presets(), facts.load_all(), row_platforms(rows))
    return validate.report(runs, published, as_core=as_core)


def run_predict(args: argparse.Namespace) -> int:
    """``python -m bench predict --validate | --refit [--fit PATH]``."""
    records, _ = load_records(records_dir(args))
    runs = validate.observed(records, facts.load_all(), key_of=lambda record: config_key(record).digest)
    if len(runs) < 2:
        raise ValueError(f"{len(runs)} ok {' '.join(validate.MODELLED)} records in {records_dir(args)}; the model "
                         "needs at least 2 to check or fit (give the records folder with --records)")
    as_core = validate.priced_as_core(records, facts.load_all())
    if args.validate:
        lines = _validation(runs, as_core)[0]
        lines[-2:-2] = describe(as_planned(records))  # the summary's two lines stay last
        print("\n".join(lines))
        return 0
    if not args.fit.parent.is_dir():  # before minutes of fitting
        raise ValueError(f"{args.fit.parent}: no such folder for the fit; give --fit a file in a "
                         "folder that exists")
    factors = fit.fit_factors([r.sample for r in runs])
    figures = _validation(runs, as_core)[1]
    checked = figures | {"gpus": max(r.gpus for r in runs)}
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fit.write_fit(args.fit, fit.fit_document(factors, [r.sample.run_id for r in runs], when,
                                             kit_commit(), checked))
    print(f"wrote {args.fit}: {len(runs)} records")
    return 0


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command that ``args`` ran, e.g. ``run``'s or ``images build``'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse the kit's own arguments. An unknown option is reported by the command it was given
    to, with that command's usage and the nearest option it has (argparse alone answers with the
    top-level usage, which names no option of ``run``)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = _command_parser(parser, args)
        known = [flag for action in command._actions for flag in action.option_strings]
        close = [match for word in unknown if word.startswith("-")
                 for match in difflib.get_close_matches(word.split("=")[0], known, n=1)]
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def control_character_argument(argv: list[str]) -> str | None:
    """The error for a command-line word holding a control character (an escape sequence, a line
    break): it would reach the terminal, a job script's lines or a record raw; None when none does."""
    for word in argv:
        shown = visible(word)
        if shown != word:
            return (f"the argument '{error_text(shown)[:200]}' holds a control character (shown "
                    "escaped); type it without one")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    refusal = control_character_argument(argv) or environment_problem()
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return EXIT_USAGE
    own, extra = split_megatron_args(argv)
    args = parse(own)
    takes_megatron_args = getattr(args, "takes_megatron_args", False)
    if extra and not takes_megatron_args:
        print("error: Megatron flags after '--' are for 'run' only", file=sys.stderr)
        return EXIT_USAGE
    error = misplaced_flags(extra)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # A command that takes Megatron flags gets them and the words typed beside argparse's reading.
        return args.func(RunCommand(args, tuple(own), extra) if takes_megatron_args else args)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {error_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a read-only or full disk, a folder that went away: no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {error_text(where + (exc.strerror or str(exc)))}; nothing more was "
              "written (free space, or give a folder you can write to)", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: a run in progress has written its record already
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
