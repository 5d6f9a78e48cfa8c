"""One optimizer step over a GPT-3 1.3b's parameters on one GPU: MS-AMP's LBAdamW against fused Adams.

The parameters are the 1.3b preset's shapes (24 layers, hidden 2048, FFN 8192, 50304-token vocabulary,
sequence 2048), fp32 with fp32 gradients, as megatron-core hands them to its optimizer (fp32 master
weights). Prints one JSON line per optimizer named on the command line: the median time of a step
over ``ITERS`` steps, and for LBAdamW the relative difference of its parameter update after
``PARITY_STEPS`` steps from torch's AdamW in fp32 on the same gradients.

Optimizers: ``lbadamw`` (MS-AMP's, fp8 first and fp16 second moment: whichever MS-AMP is on the path,
so run it once per build to compare two patch series), ``torch-adamw`` (``fused=True``) and
``te-fusedadam`` (Transformer Engine's, what megatron-core uses for O1 where TE imports).
"""

import json
import sys

import torch

from bench.train.timing import median_seconds

LAYERS, HIDDEN, FFN, VOCAB, SEQ = 24, 2048, 8192, 50304, 2048
LR, BETAS, EPS, DECAY = 2e-4, (0.9, 0.95), 1e-8, 0.1
ITERS, WARMUP, PARITY_STEPS = 20, 5, 10


def shapes() -> list[tuple[int, ...]]:
    layer = [(3 * HIDDEN, HIDDEN), (3 * HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (FFN, HIDDEN), (FFN,),
             (HIDDEN, FFN), (HIDDEN,), (HIDDEN,), (HIDDEN,), (HIDDEN,), (HIDDEN,)]
    return [(VOCAB, HIDDEN), (SEQ, HIDDEN)] + layer * LAYERS + [(HIDDEN,), (HIDDEN,)]


def parameters(seed: int) -> list[torch.nn.Parameter]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, device="cuda", generator=generator) * 0.02) for s in shapes()]


def set_gradients(params, step: int) -> None:
    generator = torch.Generator(device="cuda").manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, device="cuda", generator=generator) * 1e-3


def optimizer(name: str, params):
    if name == "lbadamw":
        from msamp.optim import LBAdamW
        return LBAdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY,
                       exp_avg_dtype=torch.uint8, exp_avg_sq_dtype=torch.float16)
    if name == "torch-adamw":
        return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY, fused=True)
    if name == "te-fusedadam":
        from transformer_engine.pytorch.optimizers import FusedAdam
        return FusedAdam(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY, adam_w_mode=True)
    raise SystemExit(f"unknown optimizer {name!r}: lbadamw, torch-adamw or te-fusedadam")


def step_time(name: str) -> float:
    params = parameters(0)
    opt = optimizer(name, params)
    set_gradients(params, 0)
    return median_seconds(opt.step, WARMUP, ITERS)


def update_difference(name: str) -> float:
    """|Δp - Δp_ref| / |Δp_ref| over all parameters after PARITY_STEPS steps, against torch's AdamW."""
    runs = []
    for which in (name, "torch-adamw"):
        params = parameters(0)
        start = [p.detach().clone() for p in params]
        opt = optimizer(which, params)
        for step in range(PARITY_STEPS):
            set_gradients(params, step)
            opt.step()
        runs.append([p.detach() - s for p, s in zip(params, start, strict=True)])
    diff = sum((a - b).float().norm() ** 2 for a, b in zip(*runs, strict=True))
    ref = sum(b.float().norm() ** 2 for b in runs[1])
    return (diff / ref).sqrt().item()


def main() -> None:
    count = sum(torch.Size(s).numel() for s in shapes())
    for name in sys.argv[1:] or ["lbadamw", "torch-adamw", "te-fusedadam"]:
        try:
            row = {"optimizer": name, "parameters": count, "tensors": len(shapes()),
                   "step_s_median": step_time(name), "gpu": torch.cuda.get_device_name()}
            if name == "lbadamw":
                import msamp
                row["msamp"] = msamp.__file__
                row["update_rel_diff_vs_torch_adamw"] = update_difference(name)
        except ImportError as error:
            row = {"optimizer": name, "skipped": str(error)}
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
