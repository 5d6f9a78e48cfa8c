"""Command line: ``python -m bench <command>``; the nox sessions call this, so it also works on a
cluster login node where only Python exists.

Commands: ``run`` (plan, print or submit/run a benchmark), ``compare`` (two configurations against
their noise), ``data`` (text -> Megatron .bin/.idx), ``results``, ``presets``, ``platforms``, the
image commands, and the job commands ``jobs``, ``collect``, ``check`` (``bench.jobs.cli``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from bench import compare, dockerrun
from bench.campaign import load_campaign
from bench.capabilities import Capabilities
from bench.dataset import cli as dataset_cli
from bench.engines.deepspeed import OFFLOADS, ZeroSettings
from bench.flops import RECOMPUTE
from bench.hardware import detect_gpus
from bench.images import cli as images_cli
from bench.jobs.cli import EXIT_FAILED, add_wait_options
from bench.jobs.cli import add_commands as add_job_commands
from bench.jobs.follow import follow
from bench.jobs.scheduler import SchedulerError, scheduler_for
from bench.jobs.submit import check_submittable, submit_plan
from bench.plan import LaunchPlan, Options, plan, run_id
from bench.platforms import (
    ENGINES,
    PRECISION_SHORTHANDS,
    PRECISIONS,
    REPO_PLATFORMS_DIR,
    Platform,
    accelerator_files,
    job_option_default,
    load_accelerator,
    load_platform,
    match_accelerator,
    origin,
    platform_files,
    platforms_dirs,
)
from bench.presets import get_preset, load_presets
from bench.record import record_path
from bench.render import pbs, slurm, torchrun
from bench.results import cli as results_cli
from bench.run_record import plan_preview
from bench.runner import run_local, summary
from bench.sweep import SWEEP_ITERS, sweep_plans
from bench.trainenv import Facts, describe, facts, problems
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
    parser.add_argument("preset", nargs="?",
                        help="model preset, e.g. 1.3b or 13b (see: python -m bench presets)")
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
                        "(per-tensor) scaling (fp8 = fp8-delayed); msamp = msamp-o2 (MS-AMP's FP8 "
                        "linears in megatron-core's layers and its LBAdamW: fp8/fp16 Adam states; "
                        "msamp-o1 keeps fp32 states); fp4 = msamp-o2 with MS-AMP's FP4 simulation of weights and "
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
    tuning.add_argument("--no-fused-attention", action="store_true",
                        help="Megatron-DeepSpeed's unfused core attention (it stores the s x s "
                        "scores) instead of flash-attn or torch's SDPA")


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
                      fused_loss=not args.no_fused_loss,
                      fused_attention=not args.no_fused_attention, extra_args=args.megatron_args))


def render_script(launch: LaunchPlan, workdir: Path | None = None) -> tuple[str, str]:
    """(file name, text) of the job script or command for the plan's scheduler; a run here
    starts in ``workdir`` (default: the current folder)."""
    scheduler = launch.platform.scheduler
    if scheduler == "slurm":
        return "job.sbatch", slurm.render(launch)
    if scheduler == "pbs":
        return "job.pbs", pbs.render(launch)
    return "command.sh", torchrun.render(launch, str(workdir or Path.cwd()))


def training_facts(args: argparse.Namespace, platform: Platform) -> Facts | None:
    """What the Python that will train has, asked once per command: it gives the plan its
    capabilities and is the preflight of a run (:func:`environment_ready`). With ``--image`` on a
    docker platform that Python is the image's, asked in a container; a machine where docker
    cannot start the image is refused here, before anything is written (a dry run says so in a
    note and plans without the image's capabilities)."""
    if not (args.image and platform.container_runtime == "docker"):
        return facts(megatron_deepspeed_dir=platform.megatron_deepspeed_dir)
    try:
        dockerrun.check_engine(args.image)
        return dockerrun.probe(args.image, str(Path.cwd()), platform.binds,
                               platform.megatron_deepspeed_dir)
    except ValueError as exc:
        if not args.dry_run:
            raise
        print(f"note: the image's Python was not probed: {exc}", file=sys.stderr)
        return None


def local_options(args: argparse.Namespace, platform: Platform) -> Options:
    """Options with what this machine has: its GPUs, and (where the platform says "auto") the
    capabilities of the Python that will train. Its facts are kept in ``args.training_facts``
    for the preflight, so that Python is asked once."""
    gpus = detect_gpus()
    found = args.training_facts = training_facts(args, platform)
    caps = found.capabilities if found is not None and platform.capabilities is None else None
    return options_from(args, gpus.count, gpus.name, caps)


def launches_for(args: argparse.Namespace, labels: tuple[tuple[str, str], ...] = (),
                 tag: str | None = None) -> list[LaunchPlan]:
    """Every plan one ``run`` command makes: a layout or a sweep, each ``--repeat`` times.

    All are planned (and so checked) before anything is written or launched.
    """
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    repeats: list[int | None] = [None] if args.repeat == 1 else list(range(1, args.repeat + 1))
    preset = get_preset(args.preset)
    platform = load_platform(args.platform)
    check_run_options(args, platform)
    if platform.scheduler == "none":
        options = local_options(args, platform)
    else:
        options = options_from(args, 0, "")
    options = replace(options, labels=labels, tag=tag)
    if not args.sweep:
        if not args.layout:
            raise ValueError("give a layout, e.g. tp1pp1 or tp2pp8 (python -m bench run 13b "
                             "tp2pp8), or --sweep")
        return [plan(preset, args.layout, platform, replace(options, repeat=i)) for i in repeats]
    if args.layout:
        raise ValueError(f"give a layout ({args.layout}) or --sweep, not both")
    if platform.accelerator != "auto":
        accelerator = load_accelerator(platform.accelerator)
    else:
        accelerator = match_accelerator(options.gpu_name) if options.gpu_name else None
    # An unknown GPU has no memory size in the data: keep every layout rather than guess.
    device_gb = accelerator.memory_gb if accelerator else float("inf")
    sweep_id = run_id(preset.name, "sweep", platform.name, options.now)
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
    return launches


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


def dry_run_text(launch: LaunchPlan, workdir: Path | None = None) -> str:
    """What ``--dry-run`` prints: the script or command, then the DeepSpeed config if any."""
    name, text = render_script(launch, workdir)
    out = f"# {name} for run {launch.run_id}\n{text}"
    if launch.ds_config is not None:
        out += f"# ds_config.json\n{launch.ds_config}"
    return out


def print_plan(launch: LaunchPlan, to_json: bool = False) -> None:
    if not to_json:
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


def plan_json(launch: LaunchPlan) -> dict[str, object]:
    """A plan for ``--json``: the plan as plan.json holds it, and its script."""
    name, text = render_script(launch)
    return {"plan": plan_preview(launch), "script": {"name": name, "text": text},
            "ds_config": launch.ds_config, "notes": list(launch.notes)}


NO_GPU = ("error: no NVIDIA GPU on this machine, so nothing was run and no record was written. "
          "Above is the exact command the kit would run; use --platform NAME --dry-run for a "
          "cluster's job script.")


def environment_ready(launch: LaunchPlan, found: Facts) -> bool:
    """Preflight of the Python that will train, from its facts (:func:`training_facts`); False
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
            results: list[dict[str, object]]) -> int:
    """Print, submit or run ``launches``; appends one JSON entry per launch to ``results``."""
    say = partial(print, file=sys.stderr) if args.json else print
    entries = [plan_json(launch) for launch in launches]
    results += entries
    if args.dry_run:
        for launch in launches:
            print_plan(launch, args.json)
        return 0
    if launches[0].platform.scheduler != "none":
        for launch in launches:
            print_notes(launch)
        return submit_all(args, launches, entries, say)
    if not detect_gpus().count:
        for launch in launches:
            print_plan(launch, args.json)
        print(NO_GPU, file=sys.stderr)
        return 1
    # One preflight per distinct training environment the launches need.
    needs = {(launch.engine, launch.gpus_per_node, launch.platform.megatron_deepspeed_dir): launch
             for launch in launches}
    if not all(environment_ready(launch, args.training_facts) for launch in needs.values()):
        return 1
    records_dir, timeout_s, hang_s = local_limits(args)
    records = []
    for launch, entry in zip(launches, entries, strict=True):
        print_notes(launch)
        record = run_local(launch, Path.cwd(), records_dir, timeout_s, hang_s,
                           verbose=args.verbose)
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


def submit_all(args: argparse.Namespace, launches: list[LaunchPlan],
               entries: list[dict[str, object]], say: Callable[..., None]) -> int:
    """Submit every launch (one job each); with ``--wait`` follow them in turn."""
    for launch in launches:  # checked for all before the first is written
        check_submittable(launch)
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


def cmd_run(args: argparse.Namespace) -> int:
    results: list[dict[str, object]] = []
    if args.campaign:
        code = run_campaign(args, results)
    else:
        if not args.preset:
            raise ValueError("give a model preset and a layout (python -m bench run 13b tp2pp8), "
                             "or --campaign FILE")
        code = execute(args, launches_for(args), results)
    if args.json:
        print(json.dumps({"runs": results}, indent=2))
    return code


def run_campaign(args: argparse.Namespace, results: list[dict[str, object]]) -> int:
    """Plan every selected run of the campaign file, then execute them in file order."""
    if args.preset or args.layout or args.sweep or args.megatron_args:
        raise ValueError("--campaign takes the configurations from its file: give no model, "
                         "layout, --sweep or Megatron flags beside it")
    campaign = load_campaign(args.campaign)
    common = campaign_common_argv(args.argv)
    planned = []
    for entry in campaign.selected(args.only):
        entry_args = parse_run_argv([*entry.argv[: _cut(entry.argv)], *common,
                                     *entry.argv[_cut(entry.argv):]])
        launches = launches_for(entry_args, labels=(("campaign", campaign.name),),
                                tag=f"c{entry.number}")
        planned.append((entry, entry_args, launches))
    code = 0
    for entry, entry_args, launches in planned:
        print(f"campaign {campaign.name}: {entry.name} ({len(launches)} run(s))", file=sys.stderr)
        code = max(code, execute(entry_args, launches, results))
    return code


def _cut(argv: tuple[str, ...]) -> int:
    """Where the Megatron flags ('--' and after) start in a campaign run's argv."""
    return argv.index("--") if "--" in argv else len(argv)


def campaign_common_argv(argv: list[str]) -> list[str]:
    """The command line's own ``run`` options, without ``run``, ``--campaign`` and ``--only``."""
    common, skip = [], 0
    for word in argv[1:]:
        if skip:
            skip -= 1
        elif word in ("--campaign", "--only"):
            skip = 1
        elif not word.startswith(("--campaign=", "--only=")):
            common.append(word)
    return common


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
        print(f"{p.name:<12} {origin(path):<5} {p.scheduler:<6} {p.launcher:<9} "
              f"{p.container_runtime:<12} {p.description}")
    accelerators = ", ".join(f"{path.stem} ({origin(path)})" for path in accelerator_files())
    print(f"accelerators: {accelerators}")
    print(f"kit: {REPO_PLATFORMS_DIR}" + "".join(
        f"; user: {folder} (BENCH_PLATFORMS_DIR, wins over the kit)" for folder in platforms_dirs()[1:]))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    comparison = compare.compare_in(Path(args.records), args.a, args.b)
    if args.json:
        print(json.dumps(compare.to_json(comparison), indent=2))
    else:
        print(compare.format_text(comparison))
    return 0


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compare", help="B against A: TFLOP/s/GPU and peak memory differences with their noise",
        description=compare.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="run id(s), comma-separated, or a selector such as "
                        "'model=2.7b layout=dp4 gbs=128'")
    parser.add_argument("b", help="the same for B")
    parser.add_argument("--records", default="results/records",
                        help="run records folder (default results/records)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.set_defaults(func=cmd_compare)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    add_plan_options(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the job script or command and exit; writes nothing")
    parser.add_argument("--sweep", action="store_true",
                        help="every valid layout that fits the GPUs (local: those present, report "
                        "the best; a cluster: --gpus or --nodes, one job per layout)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="measure each configuration N times (run ids end -r1..-rN; the "
                        "records share notes.repeat_group, for python -m bench compare)")
    parser.add_argument("--campaign", help="a campaign TOML file listing configurations "
                        "(results/campaigns/*.toml); options given here apply to every run")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="with --campaign: only the runs of this name or group (repeatable)")
    parser.add_argument("--json", action="store_true",
                        help="print the plans (and records or job ids) as JSON on stdout; "
                        "progress and messages go to stderr")
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
    add_compare_parser(sub)
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


def misplaced_flags(extra: tuple[str, ...]) -> str | None:
    """The error for kit options written after '--', or None."""
    misplaced = sorted(flag_names(extra) & kit_run_flags())
    if not misplaced:
        return None
    return (f"{', '.join(misplaced)} after '--' would go to Megatron, but it is an option of "
            "'python -m bench run': put it before '--'")


def parse_run_argv(argv: list[str]) -> argparse.Namespace:
    """A campaign run's ``run`` arguments, checked like a command line; ValueError if bad."""
    own, extra = split_megatron_args(argv)
    try:
        args = build_parser().parse_args(["run", *own])
    except SystemExit:  # argparse has printed what is wrong
        raise ValueError(f"campaign run '{' '.join(argv)}' is not valid (see above)") from None
    error = misplaced_flags(extra)
    if error:
        raise ValueError(error)
    args.megatron_args, args.argv = extra, ["run", *own]
    return args


def main(argv: list[str] | None = None) -> int:
    own, extra = split_megatron_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    if extra and args.func is not cmd_run:
        print("error: Megatron flags after '--' are for 'run' only", file=sys.stderr)
        return EXIT_USAGE
    error = misplaced_flags(extra)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    args.megatron_args, args.argv = extra, own
    try:
        return args.func(args)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
