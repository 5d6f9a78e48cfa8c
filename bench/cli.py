"""Command line: ``python -m bench <command>``; the nox sessions call this, so it also works on a
cluster login node where only Python exists.

Commands: ``run`` (plan, print or submit/run a benchmark), ``data`` (text -> Megatron .bin/.idx),
``presets``, ``platforms``, and the job commands ``jobs``, ``collect``, ``check`` (``bench.jobs.cli``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.dataset import cli as dataset_cli
from bench.flops import RECOMPUTE
from bench.hardware import detect_gpus
from bench.images import cli as images_cli
from bench.jobs.cli import add_commands as add_job_commands
from bench.jobs.cli import add_wait_options, submit_and_maybe_follow
from bench.plan import LaunchPlan, Options, plan
from bench.platforms import (
    ENGINES,
    PRECISIONS,
    Platform,
    load_platform,
    match_accelerator,
    platform_files,
)
from bench.presets import get_preset, load_presets
from bench.render import pbs, slurm, torchrun
from bench.results import cli as results_cli
from bench.runner import run_local, summary
from bench.sweep import SWEEP_ITERS, sweep_plans
from bench.tuning import Tuning, flag_names

EXIT_USAGE = 2


def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that plans a run."""
    parser.add_argument("preset", help="model preset, e.g. 1.3b or 13b (see: python -m bench presets)")
    parser.add_argument("layout", nargs="?", help="parallel layout, e.g. tp1pp1, tp2pp8, tp4pp2dp2")
    parser.add_argument("--platform", default=os.environ.get("BENCH_PLATFORM", "local"),
                        help="platform file name in platforms/ (default: local, or $BENCH_PLATFORM)")
    parser.add_argument("--gpus", type=int, help="total GPUs (default: GPUs present locally, or "
                        "the fewest whole nodes holding tp x pp x cp on a cluster)")
    parser.add_argument("--nodes", type=int, help="nodes (cluster platforms)")
    parser.add_argument("--mbs", type=int, help="micro batch, sequences (default: the preset's)")
    parser.add_argument("--gbs", type=int, help="global batch, sequences (default: the preset's)")
    parser.add_argument("--iters", type=int, help="training iterations (default 30; a sweep: "
                        f"{SWEEP_ITERS} per layout)")
    parser.add_argument("--engine", choices=ENGINES, help="default: the platform's")
    parser.add_argument("--precision", choices=PRECISIONS, help="default: the platform's")
    parser.add_argument("--image", help="container image or venv (default: the platform's)")
    parser.add_argument("--data-path", help="Megatron data prefix (.bin/.idx); default mock data")
    parser.add_argument("--vocab-file", help="GPT-2 vocab.json (Megatron-DeepSpeed)")
    parser.add_argument("--merge-file", help="GPT-2 merges.txt (Megatron-DeepSpeed)")
    parser.add_argument("--recompute", choices=RECOMPUTE, help="activation recompute: full "
                        "(every layer) or selective (core attention); TFLOP/s stay model FLOPs, "
                        "the record adds the hardware FLOPs figure")
    for key in ("account", "partition", "queue", "walltime"):
        parser.add_argument(f"--{key}", help=f"scheduler {key} (default: platform file, or "
                            f"$BENCH_{key.upper()})")
    tuning = parser.add_argument_group(
        "A/B settings", "change a kit default; the run is recorded as a variant of its "
        "configuration. More Megatron flags go after '--' (e.g. -- --manual-gc)")
    tuning.add_argument("--no-overlap", action="store_true",
                        help="do not overlap the data-parallel gradient reduce and parameter "
                        "gather with compute")
    tuning.add_argument("--grad-reduce", choices=("bf16", "fp32"), default="bf16",
                        help="gradient accumulation and reduction type under bf16 (default bf16)")
    tuning.add_argument("--no-fused-loss", action="store_true",
                        help="Megatron's unfused cross-entropy loss instead of its fused one")


def transformer_engine_here() -> bool:
    """Whether this Python can import Transformer Engine (the local platform runs here)."""
    return importlib.util.find_spec("transformer_engine") is not None


def options_from(args: argparse.Namespace, gpus_present: int, gpu_name: str,
                 transformer_engine: bool | None = None) -> Options:
    return Options(
        now=datetime.now(UTC), gpus=args.gpus, nodes=args.nodes, mbs=args.mbs,
        gbs=args.gbs, iters=args.iters or (SWEEP_ITERS if getattr(args, "sweep", False) else 30),
        engine=args.engine, precision=args.precision,
        image=args.image, data_path=args.data_path, vocab_file=args.vocab_file,
        merge_file=args.merge_file, account=args.account, partition=args.partition,
        queue=args.queue, walltime=args.walltime, gpus_present=gpus_present, gpu_name=gpu_name,
        transformer_engine=transformer_engine, recompute=args.recompute,
        tuning=Tuning(overlap=not args.no_overlap, grad_reduce_bf16=args.grad_reduce == "bf16",
                      fused_loss=not args.no_fused_loss, extra_args=args.megatron_args))


def render_script(launch: LaunchPlan) -> tuple[str, str]:
    """(file name, text) of the job script or command for the plan's scheduler."""
    scheduler = launch.platform.scheduler
    if scheduler == "slurm":
        return "job.sbatch", slurm.render(launch)
    if scheduler == "pbs":
        return "job.pbs", pbs.render(launch)
    return "command.sh", torchrun.render(launch)


def make_plan(args: argparse.Namespace, layout: str) -> tuple[LaunchPlan, Platform]:
    preset = get_preset(args.preset)
    platform = load_platform(args.platform)
    if platform.scheduler == "none":
        gpus = detect_gpus()
        options = options_from(args, gpus.count, gpus.name, transformer_engine_here())
    else:
        options = options_from(args, 0, "")
    return plan(preset, layout, platform, options), platform


def dry_run_text(launch: LaunchPlan) -> str:
    """What ``--dry-run`` prints: the script or command, then the DeepSpeed config if any."""
    name, text = render_script(launch)
    out = f"# {name} for run {launch.run_id}\n{text}"
    if launch.ds_config is not None:
        out += f"# ds_config.json\n{launch.ds_config}"
    return out


def print_plan(launch: LaunchPlan) -> None:
    print(dry_run_text(launch), end="")
    for note in launch.notes:
        print(f"note: {note}", file=sys.stderr)


NO_GPU = ("error: no NVIDIA GPU on this machine, so nothing was run and no record was written. "
          "Above is the exact command the kit would run; use --platform NAME --dry-run for a "
          "cluster's job script.")


def cmd_run(args: argparse.Namespace) -> int:
    if args.sweep:
        return cmd_sweep(args)
    if not args.layout:
        raise ValueError("give a layout, e.g. tp1pp1 or tp2pp8 (python -m bench run 13b tp2pp8),"
                         " or --sweep")
    launch, platform = make_plan(args, args.layout)
    if args.dry_run:
        print_plan(launch)
        return 0
    if platform.scheduler != "none":
        return submit_and_maybe_follow(launch, args.wait, args.poll)
    if not detect_gpus().count:
        print_plan(launch)
        print(NO_GPU, file=sys.stderr)
        return 1
    record = run_local(launch, Path.cwd(), Path(args.records_dir), args.timeout, args.hang_timeout,
                       verbose=args.verbose)
    print(summary([record]))
    print(f"record: {Path(args.records_dir) / (record.run_id + '.json')}")
    return 0 if record.ok else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run every layout that fits, briefly; report the best."""
    preset = get_preset(args.preset)
    platform = load_platform(args.platform)
    if platform.scheduler != "none":
        raise ValueError("--sweep runs on the GPUs of this machine (--platform local); on a "
                         "cluster, submit one run per layout")
    gpus = detect_gpus()
    options = options_from(args, gpus.count, gpus.name, transformer_engine_here())
    accelerator = match_accelerator(gpus.name) if gpus.name else None
    # An unknown GPU has no memory size in the data: keep every layout rather than guess.
    device_gb = accelerator.memory_gb if accelerator else float("inf")
    plans, skipped = sweep_plans(preset, platform, options, device_gb)
    for lay, gb in skipped:
        print(f"skip {lay.name}: estimated {gb:.0f} GB per GPU does not fit {device_gb:.0f} GB",
              file=sys.stderr)
    print(f"sweep of {preset.name}: {', '.join(p.layout.name for p in plans)}", file=sys.stderr)
    if args.dry_run or not gpus.count:
        for launch in plans:
            print_plan(launch)
        if not gpus.count:
            print(NO_GPU, file=sys.stderr)
            return 1
        return 0
    sweep_id = plans[0].run_id.replace(plans[0].layout.name, "sweep")
    records = [run_local(launch, Path.cwd(), Path(args.records_dir), args.timeout,
                         args.hang_timeout, notes={"sweep": sweep_id}, verbose=args.verbose)
               for launch in plans]
    print(summary(records))
    ok = [r for r in records if r.metrics is not None]
    if not ok:
        print("no layout finished; see the failed records above", file=sys.stderr)
        return 1
    best = max(ok, key=lambda r: r.metrics.tflops_per_gpu)
    print(f"best: {best.layout.name} at {best.metrics.tflops_per_gpu:.1f} TFLOP/s/GPU "
          f"({100 * best.metrics.mfu:.1f}% MFU, causal) — record {best.run_id}.json")
    return 0


def cmd_presets(_: argparse.Namespace) -> int:
    print(f"{'preset':>7} {'layers':>6} {'hidden':>6} {'heads':>5} {'seq':>5} {'vocab':>6} "
          f"{'mbs':>4} {'gbs':>5}")
    for p in load_presets().values():
        print(f"{p.name:>7} {p.layers:>6} {p.hidden:>6} {p.heads:>5} {p.seq_length:>5} "
              f"{p.vocab_size:>6} {p.micro_batch:>4} {p.global_batch:>5}")
    return 0


def cmd_platforms(_: argparse.Namespace) -> int:
    for path in platform_files():
        p = load_platform(path.stem)
        print(f"{p.name:<12} {p.scheduler:<6} {p.launcher:<9} {p.container_runtime:<12} "
              f"{p.description}")
    return 0


def add_run_options(parser: argparse.ArgumentParser) -> None:
    add_plan_options(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the job script or command and exit; writes nothing")
    parser.add_argument("--sweep", action="store_true",
                        help="run every valid layout that fits the GPUs present; report the best")
    parser.add_argument("--records-dir", default="results/records",
                        help="where run records go (default results/records)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="wall-clock limit per run, seconds (default 3600)")
    parser.add_argument("--hang-timeout", type=float, default=600.0,
                        help="stop a run that prints nothing for this long, seconds (default 600)")
    parser.add_argument("--verbose", action="store_true", help="stream the training log")
    add_wait_options(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="plan a benchmark and print, submit or run it")
    add_run_options(run)
    run.set_defaults(func=cmd_run)
    results_cli.add_parser(sub)
    dataset_cli.add_parser(sub)
    images_cli.register(sub)
    sub.add_parser("presets", help="list model presets").set_defaults(func=cmd_presets)
    sub.add_parser("platforms", help="list platforms").set_defaults(func=cmd_platforms)
    add_job_commands(sub)
    return parser


def kit_run_flags() -> set[str]:
    """Every option string of ``python -m bench run``."""
    parser = argparse.ArgumentParser(add_help=False)
    add_run_options(parser)
    return {flag for action in parser._actions for flag in action.option_strings}


def split_megatron_args(argv: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """(the kit's arguments, the Megatron flags after the first '--')."""
    if "--" not in argv:
        return argv, ()
    cut = argv.index("--")
    return argv[:cut], tuple(argv[cut + 1:])


def main(argv: list[str] | None = None) -> int:
    own, extra = split_megatron_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    if extra and args.func is not cmd_run:
        print("error: Megatron flags after '--' are for 'run' only", file=sys.stderr)
        return EXIT_USAGE
    misplaced = sorted(flag_names(extra) & kit_run_flags())
    if misplaced:
        print(f"error: {', '.join(misplaced)} after '--' would go to Megatron, but it is an option "
              "of 'python -m bench run': put it before '--'", file=sys.stderr)
        return EXIT_USAGE
    args.megatron_args = extra
    try:
        return args.func(args)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
