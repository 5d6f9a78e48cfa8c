"""Plan and execute the runs of one ``python -m bench run`` command: a layout or a sweep, each
``--repeat`` times, on a cluster (one job each) or here (one record each).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from bench.config.environment import env_value
from bench.config.platforms import Platform, load_platform
from bench.config.presets import Preset, get_preset, load_presets
from bench.config.run_options import HANG_TIMEOUT_S, TIMEOUT_S
from bench.planning.checks import JOB_OPTIONS, check_options
from bench.planning.layout import parse_layout_name
from bench.planning.options import Options
from bench.planning.plan import LaunchPlan, plan, run_id
from bench.planning.sweep import ranking, sweep_plans
from bench.records.build import plan_summary
from bench.records.store import record_path, records_dir
from bench.running.arguments import RunCommand, options_from
from bench.running.datafiles import check_data_files
from bench.running.gpulock import gpu_keys, gpus_locked
from bench.running.jobs.cli import EXIT_FAILED
from bench.running.jobs.follow import check_poll, follow
from bench.running.jobs.scheduler import SchedulerError, scheduler_for
from bench.running.jobs.submit import check_submittable, submit_plan
from bench.running.local import run_local, summary
from bench.running.machine import Machine
from bench.running.output import NO_GPU, plan_json, print_notes, print_plan
from bench.running.recordable import check_recordable
from bench.running.trainenv import Facts, describe, problems
from bench.running.wall_time import timeout_problem

MAX_REPEAT = 100
"""The most measurements of one configuration (``--repeat``, a campaign's ``repeat``): every one is
planned before the first runs, so a typo of 10**9 must not fill the memory."""


def _preset(name: str, layout: str | None) -> Preset:
    """The preset ``name``, or a ValueError; where the two words came swapped (``run tp2pp8 13b``),
    it says so instead of listing the presets."""
    if layout and name.lower() not in load_presets() and layout.lower() in load_presets():
        try:
            parse_layout_name(name)
        except ValueError:
            pass  # not a layout either: get_preset lists the presets
        else:
            raise ValueError(f"'{name}' is a layout and '{layout}' a preset: the preset comes first "
                             f"(python -m bench run {layout} {name})")
    return get_preset(name)


def launches_for(command: RunCommand, labels: tuple[tuple[str, str], ...] = (),
                 tag: str | None = None, machine: Machine | None = None) -> list[LaunchPlan]:
    """Every plan one ``run`` command makes: a layout or a sweep, each ``--repeat`` times.

    All are planned (and so checked) before anything is written or launched. ``machine``: the
    command's answers of this machine (a campaign asks it once for all its runs).
    """
    args = command.args
    if not 1 <= args.repeat <= MAX_REPEAT:
        raise ValueError(f"--repeat must be at least 1 and at most {MAX_REPEAT}, got "
                         f"{args.repeat}")
    repeats: list[int | None] = [None] if args.repeat == 1 else list(range(1, args.repeat + 1))
    preset = _preset(args.preset, args.layout)
    platform = load_platform(args.platform)
    check_run_options(args, platform)
    options = without_cluster_defaults(options_from(command, 0, ""), command.argv, platform)
    # Refused before the machine is asked: its probe imports torch and megatron-core (seconds).
    check_options(options, platform, options.engine or platform.default_engine)
    if platform.scheduler == "none":
        options = local_options(options, args, platform, machine or Machine())
    options = replace(options, labels=labels, tag=tag)
    if not args.sweep:
        if not args.layout:
            raise ValueError("give a layout, e.g. tp1pp1 or tp2pp8 (python -m bench run 13b "
                             "tp2pp8), or --sweep")
        return [plan(preset, args.layout, platform, replace(options, repeat=i)) for i in repeats]
    if args.layout:
        raise ValueError(f"give a layout ({args.layout}) or --sweep, not both")
    accelerator = platform.accelerator_for(options.gpu_name, options.gpu_memory_gb)
    # An unknown GPU has no memory size in the data: keep every layout rather than guess.
    device_gb = accelerator.memory_gb if accelerator else float("inf")
    sweep_id = run_id(preset.name, "sweep", platform.name, options.now, options.nonce)
    options = replace(options, labels=(*labels, ("sweep", sweep_id)))
    launches: list[LaunchPlan] = []
    for repeat in repeats:  # repeats interleaved: each layout once, then again
        found, skipped = sweep_plans(preset, platform, replace(options, repeat=repeat), device_gb)
        launches += found
    for lay, gb in skipped:
        print(f"skip {lay.name}: estimated {gb:.0f} GB per GPU does not fit {device_gb:.0f} GB",
              file=sys.stderr)
    print(f"sweep of {preset.name}: {', '.join(p.layout.name for p in found)}"
          + (f", {args.repeat} times" if args.repeat > 1 else ""), file=sys.stderr)
    if ranking(found):
        print(ranking(found), file=sys.stderr)
    return launches


def local_options(options: Options, args: argparse.Namespace, platform: Platform,
                  machine: Machine) -> Options:
    """``options`` with what this machine has: its GPUs, and (where the platform says "auto") the
    capabilities of the Python that will train. The machine keeps that Python's facts for the
    preflight (:func:`environment_ready`)."""
    gpus = machine.gpus()
    found = machine.training_facts(args.image, platform, args.dry_run)
    caps = found.capabilities if found is not None and platform.capabilities is None else None
    return replace(options, gpus_present=gpus.count, gpu_name=gpus.name, capabilities=caps,
                   gpu_memory_gb=gpus.memory_gb, cpus_present=cpus_for_threads())


def cpus_for_threads() -> int:
    """The cores this process may run on, which a ZeRO-Offload run's CPU Adam threads share;
    0 where the shell sets ``OMP_NUM_THREADS`` itself (torchrun keeps a value that is set)."""
    return 0 if "OMP_NUM_THREADS" in os.environ else len(os.sched_getaffinity(0))


def without_cluster_defaults(options: Options, argv: Sequence[str], platform: Platform) -> Options:
    """``options`` without the job options that only ``$BENCH_ACCOUNT``, ``$BENCH_PARTITION``,
    ``$BENCH_QUEUE`` or ``$BENCH_WALLTIME`` gave, where the platform's scheduler takes no such
    option (every run here; a queue on Slurm): a shell set up for a cluster still runs here. Typed
    on the command line (``argv``), the same value is refused as ever."""
    dropped = {}
    for key in ("account", "partition", "queue", "walltime"):
        flag = f"--{key}"
        typed = any(word == flag or word.startswith(f"{flag}=") for word in argv)
        from_env = getattr(options, key) == env_value(f"BENCH_{key.upper()}")
        if key not in JOB_OPTIONS[platform.scheduler] and from_env and not typed:
            dropped[key] = None
    return replace(options, **dropped)


def check_run_options(args: argparse.Namespace, platform: Platform) -> None:
    """Refuse the options of the other kind of run: they would be silently ignored."""
    if platform.scheduler == "none":
        if args.wait:
            raise ValueError(f"--wait applies to a job on a cluster; platform {platform.name} "
                             "runs here, and a run here is always followed to its end")
    else:
        given = [flag for key, flag in (("records", "--records"), ("timeout", "--timeout"),
                                        ("hang_timeout", "--hang-timeout"))
                 if getattr(args, key) is not None] + (["--verbose"] if args.verbose else [])
        if given:
            raise ValueError(f"{', '.join(given)} apply to runs on this machine; platform "
                             f"{platform.name} submits a job, limited by --walltime, whose record "
                             "'python -m bench collect' makes (--records DIR there)")
    for key, flag in (("timeout", "--timeout"), ("hang_timeout", "--hang-timeout")):
        value = getattr(args, key)
        if value is not None and not value > 0:
            raise ValueError(f"{flag} must be more than 0 seconds, got {value}")
    check_poll(args.poll)


def timeout_problems(args: argparse.Namespace, launches: list[LaunchPlan]) -> list[tuple[str, str]]:
    """("error" or "warning", words) for each run of ``launches`` whose ``--timeout`` the expected
    step says it cannot finish in, or only at the band's fast end (bench.running.wall_time)."""
    if not launches or launches[0].platform.scheduler != "none":
        return []  # a job is limited by --walltime, refused beside --timeout (check_run_options)
    timeout_s = args.timeout or TIMEOUT_S
    return [problem for launch in launches if (problem := timeout_problem(launch, timeout_s))]


def check_timeouts(args: argparse.Namespace, launches: list[LaunchPlan]) -> None:
    """Refuse a limit no run can meet before anything is launched; warn of one that is tight."""
    found = timeout_problems(args, launches)
    errors = [words for level, words in found if level == "error"]
    if errors:
        raise ValueError("; ".join(errors))
    for _, words in found:
        print(f"warning: {words}", file=sys.stderr)


def local_limits(args: argparse.Namespace) -> tuple[Path, float, float]:
    """(records directory, wall-clock limit, hang limit) of a run here, defaults filled in."""
    return (records_dir(args), args.timeout or TIMEOUT_S,
            args.hang_timeout or HANG_TIMEOUT_S)


def environment_ready(launch: LaunchPlan, found: Facts) -> bool:
    """Preflight of the Python that will train, from its facts (:meth:`Machine.training_facts`); False
    (after one error line per missing piece) when a run could only die on an import: then nothing
    is launched and no record written."""
    trouble = problems(found, launch.engine, launch.gpus_per_node,
                       launch.platform.megatron_deepspeed_dir)
    for line in trouble:
        print(f"error: {line}", file=sys.stderr)
    if trouble:
        print("error: the training environment is incomplete, so nothing was run and no record "
              "was written", file=sys.stderr)
        return False
    print(f"environment: {describe(found)}", file=sys.stderr)
    return True


def execute(args: argparse.Namespace, launches: list[LaunchPlan],
            results: list[dict[str, object]], machine: Machine) -> int:
    """Print, submit or run ``launches``; appends one JSON entry per launch to ``results``."""
    say = partial(print, file=sys.stderr) if args.json else print
    check_recordable(launches)
    check_timeouts(args, launches)
    # One plan summary per run, for its JSON entry, its plan.json and its record.
    summaries = [plan_summary(launch) if launch.accelerator is not None else None
                 for launch in launches]
    entries = [plan_json(launch, made) for launch, made in zip(launches, summaries, strict=True)]
    results += entries
    if args.dry_run:
        for launch in launches:
            print_plan(launch, args.json)
        return 0
    if launches[0].platform.scheduler != "none":
        for launch in launches:  # every job refused (no account, no sbatch) before any is written
            check_submittable(launch)
        data_checked(launches)
        for launch in launches:
            print_notes(launch)
        return submit_all(args, launches, entries, say)
    if not machine.gpus().count:
        for launch in launches:
            print_plan(launch, args.json)
        print(NO_GPU, file=sys.stderr)
        return 1
    data_checked(launches)
    # One preflight per distinct training environment the launches need.
    needs = {(launch.engine, launch.gpus_per_node, launch.platform.megatron_deepspeed_dir): launch
             for launch in launches}
    found = machine.training_facts(args.image, launches[0].platform, args.dry_run)  # asked when planned
    if not all(environment_ready(launch, found) for launch in needs.values()):
        return 1
    records_dir, timeout_s, hang_s = local_limits(args)
    records = []
    with gpus_locked(run_gpus(launches, machine), holder_name(launches)):
        for launch, entry, made in zip(launches, entries, summaries, strict=True):
            print_notes(launch)
            record = run_local(launch, Path.cwd(), records_dir, timeout_s, hang_s,
                               verbose=args.verbose, summary=made)
            entry["record"] = record.to_dict()
            entry["record_path"] = str(record_path(records_dir, record.run_id))
            records.append(record)
    say(summary(records))
    ok = [r for r in records if r.metrics is not None]
    if args.sweep:
        if not ok:
            print("no layout finished; see the failed records above", file=sys.stderr)
            return 1
        best = max(ok, key=lambda r: r.metrics.tflops_per_gpu)
        say(f"best: {best.layout.name} at {best.metrics.tflops_per_gpu:.1f} TFLOP/s/GPU "
            f"({100 * best.metrics.mfu:.1f}% MFU, causal) — record {best.run_id}.json")
        return 0
    for record in records:
        say(f"record: {record_path(records_dir, record.run_id)}")
    return 0 if len(ok) == len(records) else 1


def data_checked(launches: list[LaunchPlan]) -> None:
    """Every launch's data files checked (:mod:`bench.running.datafiles`) before any is written."""
    notes = [check_data_files(launch, Path.cwd()) for launch in launches]
    for note in dict.fromkeys(filter(None, notes)):
        print(f"note: {note}", file=sys.stderr)


def run_gpus(launches: list[LaunchPlan], machine: Machine) -> list[str]:
    """The GPUs the runs here take (the most any of them uses), as :mod:`gpulock` names them."""
    used = max(launch.gpus_per_node for launch in launches)
    return gpu_keys(machine.gpus(), used, env_value("CUDA_VISIBLE_DEVICES"))


def holder_name(launches: list[LaunchPlan]) -> str:
    """How another run's error names these runs: the first run id, and how many more."""
    more = f" and {len(launches) - 1} more" if len(launches) > 1 else ""
    return f"run {launches[0].run_id}{more}"


def submit_all(args: argparse.Namespace, launches: list[LaunchPlan],
               entries: list[dict[str, object]], say: Callable[..., None]) -> int:
    """Submit every launch (one job each, each checked by :func:`check_submittable` already);
    with ``--wait`` follow them in turn."""
    submitted = []
    for launch, entry in zip(launches, entries, strict=True):
        try:
            run = submit_plan(launch, Path.cwd())
        except SchedulerError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_FAILED
        entry["job"] = {"run_id": run.run_id, "job_id": run.job_id, "run_dir": str(run.path)}
        say(f"submitted {run.run_id} as job {run.job_id}; script, plan and output in {run.path}")
        submitted.append(run)
    if not args.wait:
        return 0
    failed = 0
    for run, entry in zip(submitted, entries, strict=True):
        outcome = follow(run, scheduler_for(run.submission["scheduler"]), poll_s=args.poll,
                         echo=say)
        entry["job"]["status"] = outcome.status  # type: ignore[index]
        failed += outcome.status != "ok"
    return EXIT_FAILED if failed else 0
