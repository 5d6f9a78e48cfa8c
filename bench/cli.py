"""Command line: ``python -m bench <command>``; the nox sessions call this, so it also works on a
cluster login node where only Python exists.

Commands: ``run`` (plan, print or submit/run a benchmark), ``data`` (text -> Megatron .bin/.idx),
``presets``, ``platforms``, and the job commands ``jobs``, ``collect``, ``check`` (``bench.jobs.cli``).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.capabilities import Capabilities, probe
from bench.dataset import cli as dataset_cli
from bench.engines.deepspeed import OFFLOADS, ZeroSettings
from bench.flops import RECOMPUTE
from bench.hardware import detect_gpus
from bench.images import cli as images_cli
from bench.jobs.cli import add_commands as add_job_commands
from bench.jobs.cli import add_wait_options, submit_and_maybe_follow
from bench.plan import LaunchPlan, Options, plan
from bench.platforms import (
    ENGINES,
    PRECISION_SHORTHANDS,
    PRECISIONS,
    REPO_PLATFORMS_DIR,
    Platform,
    accelerator_files,
    job_option_default,
    load_platform,
    match_accelerator,
    origin,
    platform_files,
    platforms_dirs,
)
from bench.presets import get_preset, load_presets
from bench.render import pbs, slurm, torchrun
from bench.results import cli as results_cli
from bench.runner import run_local, summary
from bench.sweep import SWEEP_ITERS, sweep_plans
from bench.trainenv import describe, facts, problems
from bench.tuning import Tuning, flag_names

EXIT_USAGE = 2
RECORDS_DIR = "results/records"
TIMEOUT_S = 3600.0
HANG_TIMEOUT_S = 600.0
DESCRIPTION = ("Plan GPT-3-style Megatron throughput benchmarks and run them here (torchrun) or "
               "submit them as Slurm/PBS jobs; follow and collect the jobs into run records; build, "
               "push and pull the images; regenerate the results page. The nox sessions call this, "
               "so it also works on a login node where only Python exists. Each command has --help.")


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
    parser.add_argument("--precision", choices=(*PRECISIONS, *PRECISION_SHORTHANDS),
                        help="default: the platform's. The MS-AMP seed's modes: bf16; te = "
                        "fp8-delayed / fp8-current: Transformer Engine fp8 with delayed or current "
                        "(per-tensor) scaling (fp8 = fp8-delayed); msamp = msamp-o2 (MS-AMP O2 on "
                        "TE fp8: fp8 weight gradients, fp8/fp16 Adam states; msamp-o1 keeps fp32 "
                        "states); fp4 = msamp-o2 with MS-AMP's FP4 simulation of weights and "
                        "activations. msamp-*/fp4 need an fp8 GPU and MS-AMP (images built with "
                        "--option msamp=1; declare such an --image with --image-option msamp=1)")
    parser.add_argument("--image", help="container image or venv (default: the platform's)")
    parser.add_argument("--image-option", choices=("msamp=1",),
                        help="the --image was built with this option (`images build cuda --option "
                        "msamp=1`): it has MS-AMP, which the platform's image lacks")
    parser.add_argument("--data-path", help="Megatron data prefix (.bin/.idx); default mock data")
    parser.add_argument("--vocab-file", help="GPT-2 vocab.json (Megatron-DeepSpeed)")
    parser.add_argument("--merge-file", help="GPT-2 merges.txt (Megatron-DeepSpeed)")
    parser.add_argument("--recompute", choices=RECOMPUTE, help="activation recompute: full "
                        "(every layer) or selective (core attention); TFLOP/s stay model FLOPs, "
                        "the record adds the hardware FLOPs figure")
    parser.add_argument("--force", action="store_true", help="plan it even when the memory "
                        "estimate says it does not fit the GPU")
    parser.add_argument("--seq-length", type=int, help="sequence length (default: the preset's)")
    parser.add_argument("--save", nargs="?", const="", metavar="DIR",
                        help="save checkpoints to DIR (alone: the platform's storage stage "
                        "checkpoints/<run id>); default: no checkpoints")
    parser.add_argument("--save-interval", type=int, help="iterations between checkpoints "
                        "(default: the platform's, else once at the end)")
    for key in ("account", "partition", "queue", "walltime"):
        parser.add_argument(f"--{key}", default=job_option_default(key),
                            help=f"scheduler {key} (default: $BENCH_{key.upper()}, else the "
                            "platform file)")
    deepspeed = parser.add_argument_group(
        "DeepSpeed ZeRO settings", "Megatron-DeepSpeed engine; the stage is part of the layout "
        "(e.g. tp4pp1zero3)")
    deepspeed.add_argument("--zero-offload", choices=OFFLOADS, default="none",
                           help="where the optimizer state and step live (cpu: ZeRO-Offload)")
    deepspeed.add_argument("--overlap-comm", action="store_true",
                           help="overlap gradient reduction with the backward pass")
    deepspeed.add_argument("--contiguous-gradients", action="store_true",
                           help="copy gradients into one contiguous buffer as they are produced")
    deepspeed.add_argument("--reduce-bucket", type=_elements, metavar="N",
                           help="reduce bucket size in elements, e.g. 2e8")
    deepspeed.add_argument("--allgather-bucket", type=_elements, metavar="N",
                           help="allgather bucket size in elements, e.g. 2e8")
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


def _elements(text: str) -> int:
    """A count of elements written as 200000000 or 2e8."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of elements (e.g. 2e8)") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"'{text}' must be a whole number of elements, at least 1")
    return int(value)


def options_from(args: argparse.Namespace, gpus_present: int, gpu_name: str,
                 capabilities: Capabilities | None = None) -> Options:
    return Options(
        now=datetime.now(UTC), gpus=args.gpus, nodes=args.nodes, mbs=args.mbs,
        gbs=args.gbs, iters=args.iters if args.iters is not None else (
            SWEEP_ITERS if getattr(args, "sweep", False) else 30),
        engine=args.engine, precision=args.precision,
        image=args.image, data_path=args.data_path, vocab_file=args.vocab_file,
        merge_file=args.merge_file, account=args.account, partition=args.partition,
        queue=args.queue, walltime=args.walltime, gpus_present=gpus_present, gpu_name=gpu_name,
        capabilities=capabilities, image_msamp=args.image_option == "msamp=1", force=args.force,
        seq_length=args.seq_length, save=args.save,
        save_interval=args.save_interval,
        zero=ZeroSettings(offload=args.zero_offload, overlap_comm=args.overlap_comm,
                          contiguous_gradients=args.contiguous_gradients,
                          reduce_bucket_size=args.reduce_bucket,
                          allgather_bucket_size=args.allgather_bucket),
        recompute=args.recompute,
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


def local_options(args: argparse.Namespace, platform: Platform) -> Options:
    """Options with what this machine has: its GPUs, and (where the platform says "auto") the
    capabilities of this Python, which is the one torchrun starts."""
    gpus = detect_gpus()
    caps = probe() if platform.capabilities is None else None
    return options_from(args, gpus.count, gpus.name, caps)


def make_plan(args: argparse.Namespace, layout: str) -> tuple[LaunchPlan, Platform]:
    preset = get_preset(args.preset)
    platform = load_platform(args.platform)
    if platform.scheduler == "none":
        options = local_options(args, platform)
    else:
        options = options_from(args, 0, "")
    return plan(preset, layout, platform, options), platform


def check_run_options(args: argparse.Namespace, platform: Platform) -> None:
    """Refuse the options of the other kind of run: they would be silently ignored."""
    if platform.scheduler == "none":
        if args.wait:
            raise ValueError(f"--wait applies to a job on a cluster; platform {platform.name} "
                             "runs here, and a run here is always followed to its end")
    else:
        given = [flag for key, flag in (("records_dir", "--records-dir"), ("timeout", "--timeout"),
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


def local_limits(args: argparse.Namespace) -> tuple[Path, float, float]:
    """(records directory, wall-clock limit, hang limit) of a run here, defaults filled in."""
    return (Path(args.records_dir or RECORDS_DIR), args.timeout or TIMEOUT_S,
            args.hang_timeout or HANG_TIMEOUT_S)


def dry_run_text(launch: LaunchPlan) -> str:
    """What ``--dry-run`` prints: the script or command, then the DeepSpeed config if any."""
    name, text = render_script(launch)
    out = f"# {name} for run {launch.run_id}\n{text}"
    if launch.ds_config is not None:
        out += f"# ds_config.json\n{launch.ds_config}"
    return out


def print_plan(launch: LaunchPlan) -> None:
    print(dry_run_text(launch), end="")
    print_notes(launch)


def print_notes(launch: LaunchPlan) -> None:
    """What the plan assumed of the environment, and what the user should know (stderr)."""
    if launch.engine == "megatron":
        source = ("detected in this Python" if launch.platform.capabilities is None
                  else f"from {launch.platform.name}'s platform file")
        print(f"assumed ({source}): {launch.capabilities.describe()}", file=sys.stderr)
    for note in launch.notes:
        print(f"note: {note}", file=sys.stderr)


NO_GPU = ("error: no NVIDIA GPU on this machine, so nothing was run and no record was written. "
          "Above is the exact command the kit would run; use --platform NAME --dry-run for a "
          "cluster's job script.")


def environment_ready(launch: LaunchPlan) -> bool:
    """Preflight of the Python that will train; False (after one error line per missing piece)
    when a run could only die on an import: then nothing is launched and no record written."""
    found = facts()
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


def cmd_run(args: argparse.Namespace) -> int:
    if args.sweep:
        return cmd_sweep(args)
    if not args.layout:
        raise ValueError("give a layout, e.g. tp1pp1 or tp2pp8 (python -m bench run 13b tp2pp8),"
                         " or --sweep")
    launch, platform = make_plan(args, args.layout)
    check_run_options(args, platform)
    if args.dry_run:
        print_plan(launch)
        return 0
    if platform.scheduler != "none":
        print_notes(launch)
        return submit_and_maybe_follow(launch, args.wait, args.poll)
    if not detect_gpus().count:
        print_plan(launch)
        print(NO_GPU, file=sys.stderr)
        return 1
    if not environment_ready(launch):
        return 1
    records_dir, timeout_s, hang_s = local_limits(args)
    print_notes(launch)
    record = run_local(launch, Path.cwd(), records_dir, timeout_s, hang_s, verbose=args.verbose)
    print(summary([record]))
    print(f"record: {records_dir / (record.run_id + '.json')}")
    return 0 if record.ok else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run every layout that fits, briefly; report the best."""
    preset = get_preset(args.preset)
    platform = load_platform(args.platform)
    if platform.scheduler != "none":
        raise ValueError("--sweep runs on the GPUs of this machine (--platform local); on a "
                         "cluster, submit one run per layout")
    check_run_options(args, platform)
    options = local_options(args, platform)
    gpus = detect_gpus()
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
    if not environment_ready(plans[0]):
        return 1
    sweep_id = plans[0].run_id.replace(plans[0].layout.name, "sweep")
    records_dir, timeout_s, hang_s = local_limits(args)
    records = [run_local(launch, Path.cwd(), records_dir, timeout_s, hang_s,
                         notes={"sweep": sweep_id}, verbose=args.verbose)
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
    """Each platform and accelerator with where its file came from (the kit's, or the user's)."""
    print(f"{'platform':<12} {'from':<5} {'sched':<6} {'launcher':<9} {'runtime':<12} description")
    for path in platform_files():
        p = load_platform(path.stem)
        print(f"{p.name:<12} {_origin(path):<5} {p.scheduler:<6} {p.launcher:<9} "
              f"{p.container_runtime:<12} {p.description}")
    accelerators = ", ".join(f"{path.stem} ({_origin(path)})" for path in accelerator_files())
    print(f"accelerators: {accelerators}")
    print(f"kit: {REPO_PLATFORMS_DIR}" + "".join(
        f"; user: {folder} (BENCH_PLATFORMS_DIR, wins over the kit)" for folder in platforms_dirs()[1:]))
    return 0


def _origin(path: Path) -> str:
    return "kit" if origin(path) == "kit" else "user"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    add_plan_options(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the job script or command and exit; writes nothing")
    parser.add_argument("--sweep", action="store_true",
                        help="run every valid layout that fits the GPUs present; report the best")
    local = parser.add_argument_group("runs on this machine (--platform local)")
    local.add_argument("--records-dir", help=f"where run records go (default {RECORDS_DIR})")
    local.add_argument("--timeout", type=float,
                       help=f"wall-clock limit per run, seconds (default {TIMEOUT_S:.0f})")
    local.add_argument("--hang-timeout", type=float, help="stop a run that prints nothing for "
                       f"this long, seconds (default {HANG_TIMEOUT_S:.0f})")
    local.add_argument("--verbose", action="store_true", help="stream the training log")
    add_wait_options(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
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
