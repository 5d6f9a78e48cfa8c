"""MS-AMP's FP8 linear against a bf16 linear, forward + backward, on one GPU (the issue's 8192x4096x16384).

Prints one JSON line per variant: the median time of a step over ``ITERS`` steps and TFLOP/s counted
as 3 GEMMs of 2*M*K*N. Variants: torch's bf16 ``nn.Linear``; MS-AMP's FP8 linear for megatron-core
(patches/ms-amp 0006) with the weight cast once per optimizer step (every step here, and reused as
under gradient accumulation); MS-AMP's own ``FP8Linear`` (``LinearReplacer``, O1 weights); and
Transformer Engine's fp8 ``te.Linear`` where TE imports, for reference.
"""

import json
import sys

import torch

from bench.train.timing import median_seconds

M, K, N = (int(v) for v in (sys.argv[1:4] if len(sys.argv) > 3 else (8192, 4096, 16384)))
ITERS, WARMUP = 30, 10
FLOP = 3 * 2 * M * K * N


def report(name: str, step, out=None) -> float:
    median = median_seconds(step, WARMUP, ITERS)
    row = {"variant": name, "M": M, "K": K, "N": N, "step_s_median": median,
           "tflops": FLOP / median / 1e12, "gpu": torch.cuda.get_device_name()}
    if out is not None:
        row["rel_err_vs_bf16"] = out
    print(json.dumps(row), flush=True)
    return row["tflops"]


def main() -> None:
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    weight = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02

    linear = torch.nn.Linear(K, N, bias=False, device=dev, dtype=torch.bfloat16)
    linear.weight.data.copy_(weight)

    def bf16_step():
        x.grad = linear.weight.grad = None
        linear(x).backward(g)

    reference = linear(x).detach().float()
    bf16 = report("bf16 nn.Linear", bf16_step)

    from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas, weights_changed

    w = torch.nn.Parameter(weight.clone())
    metas = scaling_metas()

    def fp8(recast: bool):
        def step():
            x.grad = w.grad = None
            if recast:
                weights_changed()
            FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None).backward(g)
        return step

    out = FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None).detach().float()
    err = ((out - reference).norm() / reference.norm()).item()
    recast = report("msamp FP8LinearForMegatronCore, weight cast every step", fp8(True), err)
    cached = report("msamp FP8LinearForMegatronCore, weight cast reused (gradient accumulation)", fp8(False), err)

    from msamp.nn import LinearReplacer

    model = LinearReplacer.replace(torch.nn.Sequential(torch.nn.Linear(K, N, bias=False, device=dev)))

    def msamp_nn_step():
        x.grad = None
        for p in model.parameters():
            p.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        y.backward(g)

    try:
        report("msamp.nn FP8Linear (LinearReplacer)", msamp_nn_step)
    except Exception as error:  # the megatron-core path above is the one the engine uses
        print(json.dumps({"variant": "msamp.nn FP8Linear (LinearReplacer)", "failed": repr(error)[:400]}))
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Format
    except ImportError as error:
        print(json.dumps({"variant": "te.Linear fp8", "skipped": str(error)}))
    else:
        layer = te.Linear(K, N, bias=False, params_dtype=torch.bfloat16, device=dev)
        recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")

        def te_step():
            x.grad = None
            layer.weight.grad = None
            with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
                y = layer(x)
            y.backward(g)

        report("te.Linear fp8 (delayed scaling)", te_step)
    print(json.dumps({"speedup_vs_bf16": {"weight cast every step": recast / bf16,
                                          "weight cast reused": cached / bf16}}), flush=True)


if __name__ == "__main__":
    main()
