"""MS-AMP's FP8 linear, in-time against delayed scaling, beside bf16 and te.Linear fp8, on one GPU.

Forward + backward at the issue's 8192x4096x16384 (or ``M K N`` as arguments). Prints one JSON line per
variant: the median time of a step over ``ITERS`` steps and TFLOP/s counted as 3 GEMMs of 2*M*K*N.
Variants: torch's bf16 ``nn.Linear``; MS-AMP's ``FP8LinearForMegatronCore`` (patches/ms-amp 0006,
0008) with in-time scaling (``MSAMP_FP8_SCALING=in-time``, as measured on 2026-11-25), with delayed
scaling and the compiled torch cast (``MSAMP_FP8_TE_CAST=0``), and with delayed scaling and Transformer
Engine's quantize kernel (where TE imports), each with the weight cast reused (as under gradient
accumulation) and cast every step; and Transformer Engine's ``te.Linear`` fp8 with delayed scaling.
A last line gives each MS-AMP variant's ratio to te.Linear (the issue's target: >= 0.95) and to bf16.
MS-AMP reads its switches at import, so each MS-AMP variant runs in a child process of this script.
"""

import argparse
import json
import os
import subprocess
import sys

import torch

from bench.train.timing import median_seconds

ITERS, WARMUP = 30, 10
# MS-AMP variant -> its switches.
MSAMP_VARIANTS = {
    "in-time": {"MSAMP_FP8_SCALING": "in-time"},
    "delayed, torch cast": {"MSAMP_FP8_SCALING": "delayed", "MSAMP_FP8_TE_CAST": "0"},
    "delayed, TE cast": {"MSAMP_FP8_SCALING": "delayed", "MSAMP_FP8_TE_CAST": "1"},
}
WEIGHT_CASTS = {True: "weight cast every step", False: "weight cast reused (gradient accumulation)"}


def report(name: str, shape: tuple[int, int, int], step, **extra) -> float:
    m, k, n = shape
    median = median_seconds(step, WARMUP, ITERS)
    row = {"variant": name, "M": m, "K": k, "N": n, "step_s_median": median,
           "tflops": 3 * 2 * m * k * n / median / 1e12, "gpu": torch.cuda.get_device_name(), **extra}
    print(json.dumps(row), flush=True)
    return row["tflops"]


def problem(shape: tuple[int, int, int]):
    """The same input, output gradient and weight in every process (one seed, one order)."""
    m, k, n = shape
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    return x, g, weight


def bf16_linear(shape: tuple[int, int, int]) -> float:
    x, g, weight = problem(shape)
    linear = torch.nn.Linear(shape[1], shape[2], bias=False, device="cuda", dtype=torch.bfloat16)
    linear.weight.data.copy_(weight)

    def step():
        x.grad = linear.weight.grad = None
        linear(x).backward(g)

    return report("bf16 nn.Linear", shape, step)


def msamp_child(variant: str, shape: tuple[int, int, int]) -> None:
    """One MS-AMP variant, its switches already in the environment: two rows (weight recast, reused)."""
    from msamp.common.utils import te_fp8
    from msamp.megatron import layers
    from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas, weights_changed

    switches = MSAMP_VARIANTS[variant]
    taken = (getattr(layers, "MSAMP_FP8_SCALING", None), getattr(layers, "MSAMP_FP8_TE_CAST", None))
    if taken != (switches["MSAMP_FP8_SCALING"], switches.get("MSAMP_FP8_TE_CAST", "1") == "1"):
        raise SystemExit(f"{variant}: MS-AMP took (MSAMP_FP8_SCALING, MSAMP_FP8_TE_CAST) = {taken}: is patch "
                         "0008 applied?")
    x, g, weight = problem(shape)
    if variant == "delayed, TE cast" and not te_fp8.usable(x):
        print(json.dumps({"variant": f"msamp {variant}", "skipped": "Transformer Engine does not import"}))
        return
    reference = torch.nn.functional.linear(x, weight).float()
    w = torch.nn.Parameter(weight.clone())
    metas = scaling_metas()
    out = FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None).float()
    err = ((out - reference).norm() / reference.norm()).item()

    def fp8(recast: bool):
        def step():
            x.grad = w.grad = None
            if recast:
                weights_changed()
            FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None).backward(g)
        return step

    for recast, what in WEIGHT_CASTS.items():
        report(f"msamp FP8LinearForMegatronCore {variant}, {what}", shape, fp8(recast), rel_err_vs_bf16=err,
               msamp_variant=variant, weight_recast=recast)


def run_msamp(variant: str, shape: tuple[int, int, int]) -> dict[str, float]:
    """``variant`` in a child process; its rows are printed here. Returns {row name: TFLOP/s}."""
    env = {**os.environ, **MSAMP_VARIANTS[variant]}
    done = subprocess.run([sys.executable, __file__, *map(str, shape), "--msamp", variant], env=env,
                          stdout=subprocess.PIPE, text=True, check=False)
    found = {}
    for line in done.stdout.splitlines():
        print(line, flush=True)
        if line.startswith("{") and "tflops" in (row := json.loads(line)):
            found[row["variant"]] = row["tflops"]
    if done.returncode:
        print(json.dumps({"variant": f"msamp {variant}", "failed": f"exit status {done.returncode}"}), flush=True)
    return found


def te_linear(shape: tuple[int, int, int]) -> float | None:
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Format
    except ImportError as error:
        print(json.dumps({"variant": "te.Linear fp8", "skipped": str(error)}), flush=True)
        return None
    _, k, n = shape
    x, g, weight = problem(shape)
    layer = te.Linear(k, n, bias=False, params_dtype=torch.bfloat16, device="cuda")
    layer.weight.data.copy_(weight)
    recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")

    def step():
        x.grad = layer.weight.grad = None
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = layer(x)
        y.backward(g)

    return report("te.Linear fp8 (delayed scaling)", shape, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("shape", nargs="*", type=int, default=[8192, 4096, 16384], metavar="M K N")
    parser.add_argument("--msamp", choices=list(MSAMP_VARIANTS), help="run one MS-AMP variant (the child)")
    args = parser.parse_args()
    if len(args.shape) != 3:
        parser.error("give M K N, or nothing for 8192 4096 16384")
    shape = tuple(args.shape)
    if args.msamp:
        msamp_child(args.msamp, shape)
        return

    bf16 = bf16_linear(shape)
    torch.cuda.empty_cache()  # the children's memory
    msamp = {}
    for variant in MSAMP_VARIANTS:
        msamp.update(run_msamp(variant, shape))
    te = te_linear(shape)
    print(json.dumps({"ratio_to_te_linear": {k: v / te for k, v in msamp.items()} if te else None,
                      "ratio_to_bf16": {k: v / bf16 for k, v in msamp.items()}}), flush=True)


if __name__ == "__main__":
    main()
