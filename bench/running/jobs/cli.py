"""The job commands of ``python -m bench``: ``jobs``, ``collect``, ``check``; ``--wait`` for ``run``.

All of them work in the *root*: the directory holding ``runs/`` (default: the current directory,
where ``run`` writes its run directories) and ``results/records/``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench.config.platforms import job_option_default, load_platform
from bench.config.text import error_text
from bench.config.tomlfile import DataError
from bench.planning.checks import account_note
from bench.records.record import RecordError
from bench.records.store import add_records_option, load_record, record_path, records_dir
from bench.render.scripts import render_script
from bench.running.jobs.collect import collect, record_exists, record_of, why_unreadable
from bench.running.jobs.follow import POLL_S, check_poll, follow
from bench.running.jobs.outcome import Outcome, judge
from bench.running.jobs.scheduler import SchedulerError, scheduler_for
from bench.running.jobs.submit import submit_plan
from bench.running.jobs.system_check import check_output, check_plan, format_report
from bench.running.rundir import RunDir, list_runs

EXIT_FAILED = 1


def _root_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="directory holding runs/ and results/records/ (default: current)")


def _elapsed(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _result(run: RunDir, folder: Path) -> tuple[str, str, int | None]:
    """(state, result, elapsed seconds) of one run for the jobs table."""
    last = run.last_state()
    if record_exists(folder, run.run_id):
        path = record_path(folder, run.run_id)
        try:
            record = load_record(path)
        except (RecordError, OSError) as err:  # one bad file must not hide the other runs
            problems = err.problems if isinstance(err, RecordError) else [str(err)]
            result = f"record unreadable: {path}: {'; '.join(problems)}"
        else:
            result = f"recorded {record.status.value}" + (
                f": {record.reason}" if record.reason else "")
        return (last.state if last else "-"), result, last and last.elapsed_s
    try:
        outcome = judge(run, scheduler_for(run.submission["scheduler"]))
    except SchedulerError as err:  # e.g. not on the cluster's login node
        reason = str(err).splitlines()[-1]
        return (last.state if last else "?"), f"unknown ({reason})", last and last.elapsed_s
    state = outcome.state
    if not outcome.finished:
        shown = f"{state.state} ({state.reason})" if state and state.reason else state.state
        return shown, "-", state.elapsed_s
    if run.kind == "check":
        report = check_output(run.read_output() or "", run.plan.world_size, run.plan.env)
        result = f"check {outcome.status}, " + (
            f"all {len(report.ranks)} ranks agree" if report.ok else f"{len(report.flags)} flags")
        reason = outcome.reason
    else:
        status, reason = _bench_result(run, outcome)
        result = f"{status} (not collected)"
    if reason:
        result += f": {reason}"
    return (state.state if state else "ENDED"), result, state and state.elapsed_s


def _bench_result(run: RunDir, outcome: Outcome) -> tuple[str, str | None]:
    """(status, reason) that ``collect`` would record for a finished benchmark: metrics that fail
    the record's checks make an ok log a failed run."""
    try:
        record = record_of(run, outcome)
    except DataError:  # a plan.json this kit cannot read: collect says so; here, the log's verdict
        return outcome.status, outcome.reason
    return record.status.value, record.reason


def _rows(runs: list[RunDir], folder: Path) -> list[tuple[RunDir, str, str, str, int | None]]:
    """(run, job id, state, result, elapsed seconds) of every run the kit can read; a folder whose
    files are foreign data (a tampered submit.json) is skipped with a warning naming it."""
    rows = []
    for run in runs:
        try:
            job_id, kind = run.job_id, run.kind
            if not isinstance(job_id, str) or kind not in ("bench", "check"):
                raise ValueError(f"its submit.json names the job {str(job_id)[:80]!r} of kind "
                                 f"{str(kind)[:80]!r}, not a job id of kind bench or check")
            rows.append((run, job_id, *_result(run, folder)))
        except SchedulerError:  # the scheduler itself failed: _result says so in the row
            raise
        except Exception as error:  # the folder's files are foreign data: any fault is its own
            print(f"warning: {run.run_id}: {error_text(why_unreadable(error))}; skipped, the "
                  "other runs are listed", file=sys.stderr)
    return rows


def cmd_jobs(args: argparse.Namespace) -> int:
    runs = list_runs(args.root)
    found = _rows(runs, records_dir(args))
    if args.json:
        print(json.dumps([{"run_id": run.run_id, "job_id": job_id, "kind": run.kind,
                           "state": state, "elapsed_s": elapsed, "result": result}
                          for run, job_id, state, result, elapsed in found], indent=2))
        return 0
    if not runs:
        print(f"no submitted runs under {args.root / 'runs'}")
        return 0
    rows = [("run id", "job id", "state", "elapsed", "result")]
    for run, job_id, state, result, elapsed in found:
        rows.append((run.run_id, job_id, state, _elapsed(elapsed), result))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[4]]).rstrip())
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    folder = records_dir(args)
    try:
        done = collect(args.root, folder)
    except SchedulerError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps([{**asdict(item), "record": str(record_path(folder, item.run_id))
                           if item.action != "running" else None} for item in done], indent=2))
        return 0
    for item in done:
        if item.action == "recorded":
            print(f"{item.run_id}: recorded {item.status}"
                  + (f" ({item.reason})" if item.reason else ""))
        elif item.action == "running":
            print(f"{item.run_id}: not finished ({item.reason}), collect again later")
        elif item.action == "unreadable":
            print(f"warning: {item.run_id}: not recorded: {error_text(item.reason)}; skipped, "
                  "the other runs are collected", file=sys.stderr)
    recorded = sum(item.action == "recorded" for item in done)
    print(f"{recorded} new record(s) in {folder}; "
          f"{sum(item.action == 'exists' for item in done)} already recorded, "
          f"{sum(item.action == 'running' for item in done)} not finished")
    return EXIT_FAILED if any(item.action == "unreadable" for item in done) else 0


def cmd_check(args: argparse.Namespace) -> int:
    platform = load_platform(args.platform)
    check_poll(args.poll)
    launch = check_plan(platform, args.nodes, datetime.now(UTC), nonce=secrets.token_hex(3),
                        account=args.account, partition=args.partition, queue=args.queue)
    if args.dry_run:
        print(render_script(launch)[1], end="")
        for note in account_note(launch.platform):
            print(f"note: {note}", file=sys.stderr)
        return 0
    try:
        run = submit_plan(launch, args.root, kind="check")
    except SchedulerError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"submitted system check {run.run_id} as job {run.job_id} "
          f"({launch.nodes} node(s) x {launch.gpus_per_node} rank(s)); output in {run.path}")
    if args.no_wait:
        return 0
    outcome = follow(run, scheduler_for(platform.scheduler), poll_s=args.poll)
    report = check_output(run.read_output() or "", launch.world_size, dict(launch.env))
    print(format_report(report))
    return 0 if outcome.status == "ok" and report.ok else EXIT_FAILED


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``jobs``, ``collect`` and ``check`` on the kit's command line."""
    jobs = sub.add_parser("jobs", help="list the kit's submitted runs: job id, state, result")
    _root_option(jobs)
    add_records_option(jobs)
    jobs.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    jobs.set_defaults(func=cmd_jobs)

    coll = sub.add_parser("collect", help="write a record for every finished run (idempotent)")
    _root_option(coll)
    add_records_option(coll)
    coll.add_argument("--json", action="store_true",
                      help="print what was done per run as a JSON list")
    coll.set_defaults(func=cmd_collect)

    check = sub.add_parser("check", help="system check: every rank reports host, devices, "
                           "container, versions, NCCL/RCCL variables; disagreements are flagged")
    check.add_argument("--platform", required=True, help="platform file name in platforms/")
    check.add_argument("--nodes", type=int, default=1, help="nodes to check (default 1)")
    check.add_argument("--dry-run", action="store_true",
                       help="print the check's job script and exit; writes nothing")
    for key in ("account", "partition", "queue"):
        check.add_argument(f"--{key}", default=job_option_default(key),
                           help=f"scheduler {key} (default: $BENCH_{key.upper()}, else the "
                           "platform file)")
    check.add_argument("--no-wait", action="store_true",
                       help="submit and return; `python -m bench jobs` shows it later")
    check.add_argument("--poll", type=float, default=POLL_S,
                       help=f"seconds between scheduler queries (default {POLL_S})")
    _root_option(check)
    check.set_defaults(func=cmd_check)
