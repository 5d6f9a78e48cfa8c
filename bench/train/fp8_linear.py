"""MS-AMP's FP8 linear against Transformer Engine's ``te.Linear`` fp8, forward + backward on one GPU.

The measure of the kit's first FP8-LM target (MS-AMP's linear at >= 0.95x TE's): the median step
over ``ITERS`` steps at M x K x N = 8192 x 4096 x 16384 (or ``M K N`` as arguments), counted as the 3
GEMMs of 2·M·K·N each. Rows:

- torch's bf16 ``nn.Linear``;
- ``te.Linear`` fp8 with each of TE's per-tensor recipes: delayed scaling (E4M3 forward, E5M2
  backward, amax history 1024) and current scaling;
- MS-AMP's ``FP8LinearForMegatronCore`` (patches/ms-amp 0006-0009) for each setting of its switches
  (:data:`MSAMP_VARIANTS`), once with the weight cast reused (as under gradient accumulation) and once
  cast every step.

Each MS-AMP row is set against the ``te.Linear`` row with the same kind of scaling (in time against
current scaling, delayed against delayed) and against bf16. MS-AMP reads its switches at import, so
each MS-AMP variant runs in a child process of this module. ``--out`` writes the rows and ratios as
JSON (schema ``bench.fp8_linear/1``).

    python -m bench.train.fp8_linear [M K N] [--out fp8_linear.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from bench.train.timing import median_seconds

ITERS, WARMUP = 30, 10
DEFAULT_SHAPE = (8192, 4096, 16384)
# MS-AMP variant -> (its switches, the te.Linear recipe with the same kind of scaling).
MSAMP_VARIANTS: dict[str, tuple[dict[str, str], str]] = {
    "in time, TE cast": ({"MSAMP_FP8_SCALING": "in-time", "MSAMP_FP8_TE_CAST": "1"}, "current"),
    "in time, torch cast": ({"MSAMP_FP8_SCALING": "in-time", "MSAMP_FP8_TE_CAST": "0"}, "current"),
    "delayed, TE cast": ({"MSAMP_FP8_SCALING": "delayed", "MSAMP_FP8_TE_CAST": "1"}, "delayed"),
}
TE_RECIPES = ("delayed", "current")
WEIGHT_CASTS = {False: "weight cast reused", True: "weight cast every step"}

Shape = tuple[int, int, int]


def row(name: str, shape: Shape, step: Callable[[], None], **extra: object) -> dict:
    """Time ``step`` and print its row (one JSON line)."""
    m, k, n = shape
    median = median_seconds(step, WARMUP, ITERS)
    found = {"variant": name, "M": m, "K": k, "N": n, "step_s_median": median,
             "tflops": 3 * 2 * m * k * n / median / 1e12, "gpu": torch.cuda.get_device_name(), **extra}
    print(json.dumps(found), flush=True)
    return found


def problem(shape: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same input, output gradient and weight in every process (one seed, one order)."""
    m, k, n = shape
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    return x, g, weight


def bf16_linear(shape: Shape) -> dict:
    x, g, weight = problem(shape)
    linear = torch.nn.Linear(shape[1], shape[2], bias=False, device="cuda", dtype=torch.bfloat16)
    linear.weight.data.copy_(weight)

    def step() -> None:
        x.grad = linear.weight.grad = None
        linear(x).backward(g)

    return row("bf16 nn.Linear", shape, step)


def te_linear(shape: Shape, recipe_name: str) -> dict:
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Float8CurrentScaling, Format
    except ImportError as error:
        skipped = {"variant": f"te.Linear fp8 {recipe_name}", "skipped": f"Transformer Engine: {error}"}
        print(json.dumps(skipped), flush=True)
        return skipped
    recipe = (DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")
              if recipe_name == "delayed" else Float8CurrentScaling(fp8_format=Format.HYBRID))
    x, g, weight = problem(shape)
    layer = te.Linear(shape[1], shape[2], bias=False, params_dtype=torch.bfloat16, device="cuda")
    layer.weight.data.copy_(weight)

    def step() -> None:
        x.grad = layer.weight.grad = None
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = layer(x)
        y.backward(g)

    return row(f"te.Linear fp8 {recipe_name}", shape, step, te_recipe=recipe_name)


def msamp_child(variant: str, shape: Shape) -> None:
    """One MS-AMP variant, its switches already in the environment: a row per weight-cast mode."""
    from msamp.common.utils import te_fp8
    from msamp.megatron import layers
    from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas, weights_changed

    switches, counterpart = MSAMP_VARIANTS[variant]
    taken = (getattr(layers, "MSAMP_FP8_SCALING", None), getattr(layers, "MSAMP_FP8_TE_CAST", None))
    if taken != (switches["MSAMP_FP8_SCALING"], switches["MSAMP_FP8_TE_CAST"] == "1"):
        raise SystemExit(f"msamp {variant}: MS-AMP took (MSAMP_FP8_SCALING, MSAMP_FP8_TE_CAST) = {taken}; "
                         "build MS-AMP with patches/ms-amp/series (0008 adds these switches)")
    x, g, weight = problem(shape)
    if switches["MSAMP_FP8_TE_CAST"] == "1" and not te_fp8.usable(x):
        print(json.dumps({"variant": f"msamp {variant}", "skipped": "Transformer Engine does not import"}))
        return
    reference = torch.nn.functional.linear(x, weight).float()
    w = torch.nn.Parameter(weight.clone())
    metas = scaling_metas(scaling=switches["MSAMP_FP8_SCALING"])
    out = FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None).float()
    err = ((out - reference).norm() / reference.norm()).item()

    def fp8(recast: bool) -> Callable[[], None]:
        def step() -> None:
            x.grad = w.grad = None
            if recast:
                weights_changed()
            FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None).backward(g)
        return step

    for recast, what in WEIGHT_CASTS.items():
        row(f"msamp {variant}, {what}", shape, fp8(recast), rel_err_vs_bf16=err, msamp_variant=variant,
            weight_recast=recast, te_counterpart=counterpart)


def run_msamp(variant: str, shape: Shape) -> list[dict]:
    """``variant`` in a child process; its rows are printed here and returned."""
    env = {**os.environ, **MSAMP_VARIANTS[variant][0]}
    done = subprocess.run([sys.executable, "-m", "bench.train.fp8_linear", *map(str, shape), "--msamp", variant],
                          env=env, stdout=subprocess.PIPE, text=True, check=False)
    rows = []
    for line in done.stdout.splitlines():
        print(line, flush=True)
        if line.startswith("{"):
            rows.append(json.loads(line))
    if done.returncode:
        failed = {"variant": f"msamp {variant}", "failed": f"exit status {done.returncode}"}
        print(json.dumps(failed), flush=True)
        rows.append(failed)
    return rows


def ratios(rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Each timed MS-AMP row against its te.Linear counterpart and against bf16."""
    te = {r["te_recipe"]: r["tflops"] for r in rows if "te_recipe" in r and "tflops" in r}
    bf16 = next(r["tflops"] for r in rows if r["variant"] == "bf16 nn.Linear")
    found: dict[str, dict[str, float]] = {}
    for r in rows:
        if "msamp_variant" in r and "tflops" in r:
            against = {"bf16": r["tflops"] / bf16}
            if r["te_counterpart"] in te:
                against[f"te.Linear fp8 {r['te_counterpart']}"] = r["tflops"] / te[r["te_counterpart"]]
            found[r["variant"]] = against
    return found


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.train.fp8_linear", description=__doc__.split("\n", 1)[0])
    parser.add_argument("shape", nargs="*", type=int, default=list(DEFAULT_SHAPE), metavar="M K N")
    parser.add_argument("--msamp", choices=list(MSAMP_VARIANTS), help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--out", type=Path, help="write the rows and ratios as JSON (schema bench.fp8_linear/1)")
    args = parser.parse_args(argv)
    if len(args.shape) != 3 or min(args.shape) <= 0:
        parser.error(f"the shape is M K N, three positive integers (got {args.shape}); or give none for "
                     f"{' '.join(map(str, DEFAULT_SHAPE))}")
    if args.out is not None and args.out.exists():
        parser.error(f"{args.out} exists: name a new file, so an earlier measurement is kept")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    shape: Shape = tuple(args.shape)
    if not torch.cuda.is_available():
        print("python -m bench.train.fp8_linear: no CUDA device; this benchmark times GPU kernels", file=sys.stderr)
        return 2
    if args.msamp:
        msamp_child(args.msamp, shape)
        return 0
    rows = [bf16_linear(shape)]
    rows += [te_linear(shape, recipe) for recipe in TE_RECIPES]
    torch.cuda.empty_cache()  # room for the children
    for variant in MSAMP_VARIANTS:
        rows += run_msamp(variant, shape)
    found = ratios(rows)
    print(json.dumps({"ratios": found}), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"schema": "bench.fp8_linear/1", "shape": shape, "rows": rows,
                                        "ratios": found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
