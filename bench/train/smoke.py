"""GPU node smoke test: ``python -m bench.train.smoke [--out smoke.json] [--checks nccl,gemm,train]``.

Run inside the training environment (torch + megatron-core) on the GPUs to be benchmarked. Checks,
in order, on every visible GPU:

1. ``nccl``: NCCL all-reduces of bf16 tensors of 64 MiB, 256 MiB and 1 GiB over all GPUs (torchrun,
   one process per GPU); every element must equal the sum of the ranks' contributions. Reports bus
   bandwidth (GB/s, nccl-tests' convention) per size; the headline is the largest size's.
2. ``gemm``: GEMM ceilings: 5 warm-up products, then the median of 30 products timed one by one with
   CUDA events, in TFLOP/s per GPU (2·m·n·k FLOPs a product): bf16 8192³ on every GPU (the
   headline), then on the first GPU the GPT-3 fc1 shapes of 2.7b and 6.7b at 8192 tokens, in bf16
   and, where the GPU has fp8 (compute capability 8.9 and up), in fp8 e4m3 through
   ``torch._scaled_mm`` with per-tensor scales.
3. ``train``: a 2-layer GPT trained 10 iterations through ``bench.train.pretrain_gpt`` on all GPUs
   (data parallel, mock data, bf16, distributed optimizer, overlapped grad reduce); the ``lm loss``
   of Megatron's log lines must be finite at every iteration and lower at the last than the first.

Prints a compact report and, with ``--out``, writes it as JSON (schema ``bench.smoke/1``). Exit status:
0 all checks passed, 1 a check failed, 3 no GPU or no torch here (nothing is measured or pretended).
Spawned processes get the local platform's environment (the ``[env]`` of ``local.toml``, a site's own
where its ``BENCH_PLATFORMS_DIR`` has one: the shared GPU hosts' sets ``NCCL_NVLS_ENABLE=0``);
other ``NCCL_*`` variables set by the caller pass through and the report names them
(``nccl_settings``), so ``NCCL_PROTO=Simple python -m bench.train.smoke --checks nccl`` is an A/B.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.config.environment import VERSION_STAMPS
from bench.config.paths import KIT_ROOT, platform_file
from bench.measure.logparse import Iteration, parse_log
from bench.train.timing import CudaClock, loop_seconds, median_seconds

SCHEMA = "bench.smoke/1"
CHECKS = ("nccl", "gemm", "train")
ALLREDUCE_SIZES = (64 * 2**20, 256 * 2**20, 2**30)  # bytes of bf16
ALLREDUCE_TIMED = 10
# (name, m, k, n): tokens x input features -> output features; the fc1 GEMMs of two GPT-3 presets.
GEMM_SHAPES = (("8192^3", 8192, 8192, 8192), ("2.7b fc1", 8192, 2560, 10240),
               ("6.7b fc1", 8192, 4096, 16384))
GEMM_SIZE = 8192
GEMM_WARMUP = 5
GEMM_TIMED = 30
TRAIN_ITERS = 10
NCCL_TIMEOUT_S = 120
TRAIN_TIMEOUT_S = 420  # both within 10 minutes on the GPU machine, with the GEMM check
EXIT_FAILED = 1
EXIT_NO_GPU = 3



class NoGPUError(RuntimeError):
    """Nothing to measure here: no torch, or no CUDA GPU visible."""


@dataclass
class CheckResult:
    """Outcome of one check; ``detail`` holds its measurements, ``error`` why it failed."""

    name: str
    ok: bool
    seconds: float
    detail: dict = field(default_factory=dict)
    error: str | None = None


def judge_training(lines: tuple[Iteration, ...], train_iters: int) -> str | None:
    """None when the log shows ``train_iters`` iterations of finite, falling lm loss; else why not."""
    seen = [line.index for line in lines]
    if seen != list(range(1, train_iters + 1)):
        return f"expected iterations 1..{train_iters} in the log, found {seen}"
    losses = [line.lm_loss for line in lines]
    if any(loss is None or not math.isfinite(loss) for loss in losses):
        return f"lm loss missing or not finite: {losses}"
    if any(line.nan_iterations for line in lines):
        return f"Megatron counted nan iterations: {[line.nan_iterations for line in lines]}"
    if not losses[-1] < losses[0]:
        return f"lm loss did not fall: first {losses[0]}, last {losses[-1]}"
    return None


def smoke_train_argv(gpus: int, environment_flags: list[str], train_iters: int = TRAIN_ITERS) -> list[str]:
    """Megatron flags of the smoke model: 2 layers × 512 hidden, sequence 512, data parallel on ``gpus``."""
    return [
        "--num-layers", "2", "--hidden-size", "512", "--num-attention-heads", "8",
        "--seq-length", "512", "--max-position-embeddings", "512",
        "--micro-batch-size", "2", "--global-batch-size", str(4 * gpus),
        "--train-iters", str(train_iters),
        "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2",
        "--weight-decay", "0.01", "--clip-grad", "1.0", "--seed", "1234",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
        "--bf16", "--use-distributed-optimizer", "--overlap-grad-reduce",
        "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "8192",
        "--eval-iters", "0", "--eval-interval", "1000",
        "--log-interval", "1", "--log-throughput",
        *environment_flags,
    ]


def platform_env() -> dict[str, str]:
    """The local platform's ``[env]`` table, read with the standard library (no kit schema here): a
    site's NCCL settings (NVLink multicast off on shared hosts) are that platform's data."""
    with platform_file("local").open("rb") as fh:
        return {key: str(value) for key, value in tomllib.load(fh).get("env", {}).items()}


def child_env() -> dict[str, str]:
    """Environment for spawned ranks: the local platform's, unbuffered output, the kit importable."""
    env = dict(os.environ, **platform_env(), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KIT_ROOT), env.get("PYTHONPATH")]))
    return env


def torchrun(gpus: int) -> list[str]:
    """``torchrun`` for this interpreter, one process per GPU, rendezvous on a free local port."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}"]


def run_logged(argv: list[str], log_path: Path, timeout_s: int) -> int:
    """Run ``argv`` with stdout+stderr to ``log_path``; on timeout end its process group. Returns rc."""
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=child_env(), cwd=KIT_ROOT,
            start_new_session=True,  # own process group: a timeout ends torchrun and its ranks
        )
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.write(f"\nbench.smoke: killed after {timeout_s} s\n")
            return 124


def tail(path: Path, lines: int = 20) -> list[str]:
    """Last ``lines`` lines of a log, for a failure's reason."""
    return path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []


def check_nccl(gpus: int, workdir: Path) -> CheckResult:
    """All-reduce across every GPU through NCCL; verifies the sum and measures bus bandwidth."""
    started = time.monotonic()
    result_path = workdir / "smoke_nccl.json"
    log_path = workdir / "smoke_nccl.log"
    result_path.unlink(missing_ok=True)
    argv = [*torchrun(gpus), "-m", "bench.train.smoke", "--worker", "allreduce", "--result", str(result_path)]
    rc = run_logged(argv, log_path, NCCL_TIMEOUT_S)
    seconds = time.monotonic() - started
    if rc != 0 or not result_path.exists():
        return CheckResult("nccl", False, seconds, {"log": str(log_path)},
                           f"torchrun exited {rc}: " + " / ".join(tail(log_path, 5)))
    detail = json.loads(result_path.read_text())
    detail["log"] = str(log_path)
    ok = detail["sum_correct"] and detail["world_size"] == gpus
    error = None if ok else f"all-reduce sum wrong or world size {detail['world_size']} != {gpus}"
    return CheckResult("nccl", ok, seconds, detail, error)


def allreduce_worker(result_path: Path) -> int:
    """One torchrun rank of the NCCL check: rank r contributes r+1 everywhere; rank 0 reports."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes, all_correct = [], True
    for size in ALLREDUCE_SIZES:
        values = torch.full((size // 2,), float(rank + 1), device="cuda", dtype=torch.bfloat16)
        dist.all_reduce(values)  # small integers: exact in bf16
        correct = torch.tensor([int(torch.all(values == world * (world + 1) / 2))], device="cuda")
        dist.all_reduce(correct, op=dist.ReduceOp.MIN)
        all_correct &= bool(correct.item())
        seconds = loop_seconds(functools.partial(dist.all_reduce, values), ALLREDUCE_TIMED, CudaClock(),
                               line_up=dist.barrier)
        algbw = size / seconds / 1e9
        sizes.append({"bytes": size, "time_ms": seconds * 1e3, "algbw_gbps": algbw,
                      "busbw_gbps": algbw * 2 * (world - 1) / world})  # nccl-tests' convention
        del values
    if rank == 0:
        report = {
            "world_size": world,
            "dtype": "bf16",
            "sum_correct": all_correct,
            "sizes": sizes,
            **{k: sizes[-1][k] for k in ("bytes", "time_ms", "algbw_gbps", "busbw_gbps")},
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
        }
        result_path.write_text(json.dumps(report, indent=2))
    dist.destroy_process_group()
    return 0


def gemm_tflops(m: int, k: int, n: int, dtype: str) -> float:
    """TFLOP/s of an (m x k) @ (k x n) product on the current GPU, bf16 or fp8 (e4m3, per-tensor
    scales, bf16 out: the fp8 GEMM of Transformer Engine's recipes)."""
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)  # (out, in): a linear's weight
    if dtype == "fp8":
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        seconds = median_seconds(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16, use_fast_accum=True),
                                 GEMM_WARMUP, GEMM_TIMED)
    else:
        bt = b.t()
        seconds = median_seconds(lambda: a @ bt, GEMM_WARMUP, GEMM_TIMED)
    return 2 * m * k * n / seconds / 1e12


def check_gemm(gpus: int) -> CheckResult:
    """GEMM ceilings, TFLOP/s: bf16 8192³ on each GPU, then the preset shapes on the first."""
    import torch

    started = time.monotonic()
    per_gpu = []
    for index in range(gpus):
        with torch.cuda.device(index):
            per_gpu.append(gemm_tflops(GEMM_SIZE, GEMM_SIZE, GEMM_SIZE, "bf16"))
            torch.cuda.empty_cache()  # the operands are gone: give their memory back
    dtypes = ("bf16", "fp8") if torch.cuda.get_device_capability(0) >= (8, 9) else ("bf16",)
    shapes = {f"{name} {dtype}": gemm_tflops(m, k, n, dtype)
              for name, m, k, n in GEMM_SHAPES for dtype in dtypes}
    detail = {
        "n": GEMM_SIZE, "dtype": "bf16", "warmup": GEMM_WARMUP, "timed": GEMM_TIMED,
        "tflops_per_gpu": per_gpu, "tflops_median": statistics.median(per_gpu), "shapes": shapes,
    }
    rates = [*per_gpu, *shapes.values()]
    ok = all(math.isfinite(value) and value > 0 for value in rates)
    return CheckResult("gemm", ok, time.monotonic() - started, detail,
                       None if ok else f"implausible GEMM rates {rates}")


def check_train(gpus: int, workdir: Path, environment_flags: list[str]) -> CheckResult:
    """A 2-layer GPT trained ``TRAIN_ITERS`` iterations through the kit's training entry."""
    started = time.monotonic()
    log_path = workdir / "smoke_train.log"
    megatron_argv = smoke_train_argv(gpus, environment_flags)
    argv = [*torchrun(gpus), "-m", "bench.train.pretrain_gpt", *megatron_argv]
    rc = run_logged(argv, log_path, TRAIN_TIMEOUT_S)
    lines = parse_log(log_path.read_text(errors="replace"), exit_code=rc).iterations
    detail = {
        "argv": ["python", "-m", "bench.train.pretrain_gpt", *megatron_argv],
        "log": str(log_path),
        "returncode": rc,
        "lm_loss": [line.lm_loss for line in lines],
        "elapsed_ms": [line.elapsed_ms for line in lines],
        "tflops_per_gpu": [line.tflops_per_gpu for line in lines],
    }
    error = f"training exited {rc}" if rc != 0 else judge_training(lines, TRAIN_ITERS)
    if error is not None:
        detail["log_tail"] = tail(log_path)
    return CheckResult("train", error is None, time.monotonic() - started, detail, error)


def visible_gpus() -> tuple[int, str]:
    """(GPU count, model name) as torch sees them; NoGPUError when there is nothing to measure."""
    try:
        import torch
    except ImportError as error:
        raise NoGPUError(
            f"torch is not importable by {sys.executable} ({error}); run the smoke inside the "
            "training image or environment."
        ) from None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise NoGPUError(
            f"no CUDA GPU is visible (torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); the smoke measures GPUs and "
            "has nothing to run here."
        )
    return count, torch.cuda.get_device_name(0)


def environment_summary() -> tuple[dict, list[str]]:
    """Software versions and the Megatron flags this environment needs (see bench.config.capabilities)."""
    import torch

    from bench.config.capabilities import detect, megatron_flags

    caps = detect()
    try:
        from megatron.core import __version__ as megatron_core
    except ImportError:
        megatron_core = None
    summary = {
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "megatron_core": megatron_core,
        "capabilities": asdict(caps),
    }
    return summary, megatron_flags(caps)


def format_report(report: dict) -> str:
    """The compact text report printed to stdout."""
    env = report["environment"]
    caps = env["capabilities"]
    lines = [
        (f"bench smoke: {report['gpus']} x {report['gpu_model']} | torch {env['torch']} | "
        f"megatron-core {env['megatron_core']} | TE {'yes' if caps['transformer_engine'] else 'no'} | "
        f"apex {'yes' if caps['apex_layer_norm'] else 'no'}")
    ]
    for name, check in report["checks"].items():
        status = "ok  " if check["ok"] else "FAIL"
        detail = check["detail"]
        if not check["ok"]:
            summary = check["error"]
        elif name == "nccl":
            summary = (f"{detail['world_size']} ranks, {detail['bytes'] // 2**20} MiB, "
                       f"bus bw {detail['busbw_gbps']:.1f} GB/s, NCCL {detail['nccl_version']}")
        elif name == "gemm":
            rates = detail["tflops_per_gpu"]
            summary = (f"{detail['tflops_median']:.1f} TFLOP/s median per GPU "
                       f"(min {min(rates):.1f}, max {max(rates):.1f})")
        else:
            losses, rates = detail["lm_loss"], detail["tflops_per_gpu"]
            summary = (f"{len(losses)} iterations, lm loss {losses[0]:.3f} -> {losses[-1]:.3f}"
                       + (f", {rates[-1]:.1f} TFLOP/s/GPU last" if rates[-1] is not None else ""))
        lines.append(f"  {name:<6} {status} {summary}  ({check['seconds']:.0f} s)")
    lines.append(f"result: {'ok' if report['ok'] else 'FAILED'}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.train.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the report as JSON here (default: print only)")
    parser.add_argument("--checks", default=",".join(CHECKS),
                        help=f"comma-separated subset of {','.join(CHECKS)} (default: all)")
    parser.add_argument("--workdir", type=Path,
                        help="folder for the checks' logs (default: --out's folder, else the current one)")
    parser.add_argument("--worker", choices=["allreduce"], help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.checks = [name.strip() for name in args.checks.split(",") if name.strip()]
    unknown = sorted(set(args.checks) - set(CHECKS))
    if unknown or not args.checks:
        parser.error(f"--checks: unknown {unknown}; choose from {', '.join(CHECKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "allreduce":
        return allreduce_worker(args.result)
    try:
        gpus, gpu_model = visible_gpus()
    except NoGPUError as error:
        print(f"bench.train.smoke: {error}", file=sys.stderr)
        return EXIT_NO_GPU
    # NCCL settings the caller chose (an A/B of NCCL's algorithms, say) are part of what was measured.
    nccl_settings = {key: value for key, value in sorted(os.environ.items())
                     if key.startswith("NCCL_") and key not in (*platform_env(), *VERSION_STAMPS)}
    os.environ.update(platform_env())
    workdir = args.workdir or (args.out.parent if args.out else Path.cwd())
    workdir.mkdir(parents=True, exist_ok=True)
    environment, flags = environment_summary()
    report = {
        "schema": SCHEMA,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpus": gpus,
        "gpu_model": gpu_model,
        "environment": environment,
        "env": platform_env(),
        "nccl_settings": nccl_settings,
        "complete": False,
        "ok": False,
        "checks": {},
    }
    runners = {
        "nccl": lambda: check_nccl(gpus, workdir),
        "gemm": lambda: check_gemm(gpus),
        "train": lambda: check_train(gpus, workdir, flags),
    }
    for name in (name for name in CHECKS if name in args.checks):
        started = time.monotonic()
        try:
            result = runners[name]()
        except Exception as error:  # noqa: BLE001 -- a broken check is a failed check, reported
            result = CheckResult(name, False, time.monotonic() - started, {}, f"{type(error).__name__}: {error}")
        report["checks"][name] = asdict(result)
        print(f"bench.train.smoke: {name} {'ok' if result.ok else 'FAILED'}", file=sys.stderr, flush=True)
        if args.out:  # after every check, so a run cut short still leaves what it measured
            write_json(args.out, report)
    report["complete"] = True
    report["ok"] = all(check["ok"] for check in report["checks"].values())
    print(format_report(report))
    if args.out:
        write_json(args.out, report)
        print(f"written to {args.out}")
    return 0 if report["ok"] else EXIT_FAILED


def write_json(path: Path, report: dict) -> None:
    """Replace ``path`` with the report (through a temporary file, so a reader never sees half)."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)


if __name__ == "__main__":
    sys.exit(main())
