"""What one amax spike does to the casts that follow it, through patch 0008's own delayed cast.

A meta sees 4 casts of a tensor of normal size, then one cast R times larger (a loss / gradient
spike), then normal tensors again. For each later cast: the relative error of the cast, the fraction
of nonzero elements flushed to zero and the fraction below the smallest normal. Window 16 (as
patched), window 1, and in time. E4M3 (input) and E5M2 (output gradient); Gaussian and heavy-tailed
(Student-t, 3 dof) tensors of 256x1024.
"""
import torch
from msamp.common.dtype import Dtypes
from msamp.common.utils import torch_fp8

torch.manual_seed(0)
MIN_NORMAL = {Dtypes.kfloat8_e4m3: 2.0 ** -6, Dtypes.kfloat8_e5m2: 2.0 ** -14}


def tensor(kind):
    if kind == "gauss":
        return torch.randn(256, 1024)
    return torch.distributions.StudentT(3.0).sample((256, 1024))


def run(qtype, kind, R, window):
    """Returns per-cast (rel err, flush frac, subnormal frac) of the 20 casts after the spike."""
    scale, hist = torch.ones(()), torch.zeros(max(window, 1))
    rows = []
    for i in range(25):
        x = tensor(kind) * (R if i == 4 else 1.0)
        if window == 0:    # in time
            q, _, inv = torch_fp8.quantize(x, qtype, scale, torch.zeros(()), in_time=True)
        else:
            q, _, inv = torch_fp8.quantize_delayed(x, qtype, scale, hist, in_time=i == 0)
        if i > 4:
            deq = torch_fp8.dequantize(q, inv, qtype, torch.float32)
            a = (x / inv).abs()
            rows.append((((deq - x).norm() / x.norm()).item(), ((deq == 0) & (x != 0)).float().mean().item(),
                         (a < MIN_NORMAL[qtype]).float().mean().item()))
    return rows


print(f"{'fmt':<5}{'dist':<7}{'R':>6}  {'mode':<10}{'err cast+1':>11}{'err +8':>9}{'err +15':>9}{'err +16':>9}"
      f"{'flush+1':>10}{'subn+1':>9}")
for qtype, name in ((Dtypes.kfloat8_e4m3, "e4m3"), (Dtypes.kfloat8_e5m2, "e5m2")):
    for kind in ("gauss", "t3"):
        for R in (2 ** 4, 2 ** 8, 2 ** 12):
            for mode, w in (("window16", 16), ("window1", 1), ("in-time", 0)):
                r = run(qtype, kind, R, w)
                print(f"{name:<5}{kind:<7}{R:>6}  {mode:<10}{r[0][0]:>11.4f}{r[7][0]:>9.4f}{r[14][0]:>9.4f}"
                      f"{r[15][0]:>9.4f}{r[0][1]:>10.4f}{r[0][2]:>9.4f}")
