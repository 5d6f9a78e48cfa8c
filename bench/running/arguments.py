"""The ``run`` command's options: the plan's options on the command line (and in a campaign's
runs), and the Megatron flags after ``--``."""

from __future__ import annotations

import argparse
import math
import os
import secrets
from datetime import UTC, datetime

from bench.config.capabilities import Capabilities
from bench.config.platforms import ENGINES, job_option_default
from bench.config.precisions import PRECISION_SHORTHANDS, PRECISIONS
from bench.measure.flops import RECOMPUTE
from bench.planning.engines.deepspeed import OFFLOADS, ZeroSettings
from bench.planning.options import Options
from bench.planning.sweep import SWEEP_ITERS
from bench.planning.tuning import Tuning, flag_names
from bench.records.store import add_records_option
from bench.running.jobs.cli import add_wait_options

TIMEOUT_S = 3600.0  # wall-clock limit of a run here, seconds
HANG_TIMEOUT_S = 600.0  # a run here that prints nothing this long is stopped, seconds


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
    # inf (1e400) and nan have no int(): refused here, not by a traceback
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"'{text}' must be a whole number of elements, at least 1")
    return int(value)

def options_from(args: argparse.Namespace, gpus_present: int, gpu_name: str,
                 capabilities: Capabilities | None = None) -> Options:
    return Options(
        now=datetime.now(UTC), gpus=args.gpus, nodes=args.nodes, mbs=args.mbs,
        nonce=secrets.token_hex(3),  # run ids of two checkouts in one second stay apart
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
    add_records_option(local)
    local.add_argument("--timeout", type=float,
                       help=f"wall-clock limit per run, seconds (default {TIMEOUT_S:.0f})")
    local.add_argument("--hang-timeout", type=float, help="stop a run that prints nothing for "
                       f"this long, seconds (default {HANG_TIMEOUT_S:.0f})")
    local.add_argument("--verbose", action="store_true", help="stream the training log")
    add_wait_options(parser)


def run_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m bench run`` alone (a campaign's runs are checked with it)."""
    parser = argparse.ArgumentParser(prog="python -m bench run")
    add_run_options(parser)
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
        args = run_parser().parse_args(own)
    except SystemExit:  # argparse has printed what is wrong
        raise ValueError(f"campaign run '{' '.join(argv)}' is not valid (see above)") from None
    error = misplaced_flags(extra)
    if error:
        raise ValueError(error)
    args.megatron_args, args.argv = extra, ["run", *own]
    return args
