"""Does Transformer Engine's cast in MS-AMP's delayed scaling (patch 0008) give the bytes MS-AMP's torch cast gives?

The 345m loss run with delayed scaling, whose casts TE's kernel made, ended 0.105 above bf16; a small
model on CPU, whose casts only the torch path can make, showed no such gap. This runs both paths on
one GPU on the same bf16 tensors and scales: for E4M3 and E5M2, GEMM operand shapes of the 345m and
1.3b models, each scale at the tensor's own power-of-two factor, 4x above it (the largest values
saturate) and 4x below it. It compares the cast, its transpose, scale_inv and amax byte for byte, prints one JSON
line per case, then ``exact`` or ``DIFFERENT``. In-time casts too (patch 0009): TE's current scaling
with power-of-two scales against MS-AMP's torch in-time cast, on the same tensors and on tensors of
other magnitudes (cast, transpose and scale_inv). Run with MS-AMP (patches/ms-amp/series) and TE on
the path: ``h100x2.sh te-cast-check``.
"""

from __future__ import annotations

import json
import math

import torch
from msamp.common.dtype import Dtypes, Floating
from msamp.common.utils import te_fp8, torch_fp8

SHAPES = ((8192, 1024), (8192, 4096), (16384, 2048), (16384, 8192))  # tokens x features


def case(shape: tuple[int, int], qtype, factor: float) -> dict:
    torch.manual_seed(0)
    x = (torch.randn(shape, device="cuda") * 3).bfloat16()
    x[7, 11] = 40.0  # an outlier, as activations have
    own = 2.0 ** math.floor(math.log2(Floating.qfp_max[qtype] / x.abs().max().item()))
    scale = torch.full((), own * factor, device="cuda")
    te_q, te_qt, te_inv, te_amax = te_fp8.quantize(x, qtype, scale.clone(), transpose=True)
    history = torch.zeros(16, device="cuda")
    q, qt, inv = torch_fp8.quantize_delayed(x, qtype, scale.clone(), history, in_time=False, transpose=True)
    return {
        "shape": shape, "qtype": qtype.name, "scale_factor": factor,
        "data_equal": torch.equal(te_q, q), "transpose_equal": torch.equal(te_qt, qt),
        "differing_bytes": int((te_q != q).sum()), "scale_inv": [te_inv.item(), inv.item()],
        "amax": [te_amax.item(), history[0].item()],
    }


def in_time_case(shape: tuple[int, int], qtype, magnitude: float) -> dict:
    torch.manual_seed(0)
    x = (torch.randn(shape, device="cuda") * magnitude).bfloat16()
    x[7, 11] = 13 * magnitude  # an outlier, as activations have
    te_q, te_qt, te_inv = te_fp8.quantize_in_time(x, qtype, transpose=True)
    scale, amax = torch.ones((), device="cuda"), torch.zeros((), device="cuda")
    q, qt, inv = torch_fp8.quantize(x, qtype, scale, amax, in_time=True, transpose=True)
    return {
        "in_time": True, "shape": shape, "qtype": qtype.name, "magnitude": magnitude,
        "data_equal": torch.equal(te_q, q), "transpose_equal": torch.equal(te_qt, qt),
        "differing_bytes": int((te_q != q).sum()), "scale_inv": [te_inv.item(), inv.item()],
    }


def main() -> None:
    assert te_fp8.usable(torch.ones(1, device="cuda")), "Transformer Engine does not import"
    exact = True
    for shape in SHAPES:
        for qtype in (Dtypes.kfloat8_e4m3, Dtypes.kfloat8_e5m2):
            for factor in (1.0, 4.0, 0.25):
                row = case(shape, qtype, factor)
                same = (row["data_equal"] and row["transpose_equal"] and row["scale_inv"][0] == row["scale_inv"][1]
                        and row["amax"][0] == row["amax"][1])
                exact &= same
                print(json.dumps(row), flush=True)
            for magnitude in (1e-3, 3.0, 700.0):
                row = in_time_case(shape, qtype, magnitude)
                exact &= row["data_equal"] and row["transpose_equal"] and row["scale_inv"][0] == row["scale_inv"][1]
                print(json.dumps(row), flush=True)
    print("exact" if exact else "DIFFERENT")


if __name__ == "__main__":
    main()
