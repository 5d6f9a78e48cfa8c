"""Invariant check of patch 0008's delayed scaling inside a real training loop (CPU, eager).

For every input / output-gradient cast of a small 2-layer GPT-like stack over a few steps with
2 micro-batches each, checks against an independent re-implementation:
  1. the scale the cast used (1/scale_inv) == MS-AMP's power-of-two factor of the max of the amax
     history *before* the cast (or of the tensor's own amax for the meta's first cast);
  2. the cast data == saturate(x * that scale) in the fp8 format;
  3. after the cast, history == [amax(x)] + old_history[:-1], and meta.scale == factor(max(history));
  4. the scale_inv saved for backward is not aliased to meta.scale (it does not move on later).
Prints 'ok' and counts; raises on the first mismatch.
"""
import math

import torch
import torch.nn.functional as F
from msamp.common.dtype import Floating
from msamp.common.utils import torch_fp8
from msamp.megatron import layers
from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

torch.manual_seed(0)


def sf(amax, fp_max):
    return 2.0 ** math.floor(math.log2(fp_max / amax))


checked = {"first": 0, "delayed": 0}
saved_inv = []
_orig = layers._cast


def _cast_checked(x, meta, transpose):
    fp_max = Floating.qfp_max[meta.qtype]
    first = int(meta.amax_counter) == 0
    hist0 = meta.amax.clone()
    x_amax = x.abs().amax().float().item()
    expect_scale = sf(x_amax, fp_max) if first else sf(hist0.max().item(), fp_max)
    q, qt, inv = _orig(x, meta, transpose)
    used = 1.0 / inv.item()
    assert used == expect_scale, (first, used, expect_scale)
    ref = (x.float() * expect_scale).clamp(-fp_max, fp_max).to(torch_fp8.fp8_dtype(meta.qtype)).view(torch.uint8)
    assert torch.equal(q, ref)
    if qt is not None:
        assert torch.equal(qt, ref.t().contiguous())
    want_hist = torch.cat((torch.tensor([x_amax]), hist0[:-1]))
    assert torch.equal(meta.amax, want_hist), (meta.amax, want_hist)
    assert meta.scale.item() == sf(want_hist.max().item(), fp_max)
    assert inv.data_ptr() != meta.scale.data_ptr()
    saved_inv.append((inv, inv.item()))
    checked["first" if first else "delayed"] += 1
    return q, qt, inv


layers._cast = _cast_checked

h = 64
ws = [torch.nn.Parameter(torch.randn(n, k) * 0.05) for n, k in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h))]
metas = [scaling_metas("cpu", scaling="delayed") for _ in ws]
assert all(m["input"].window_size == 16 and m["ograd"].window_size == 16 for m in metas)
opt = torch.optim.Adam(ws, lr=3e-3)
for step in range(30):
    for micro in range(2):
        # magnitudes that move between micro-batches, so scales differ from in-time ones
        x = torch.randn(128, h) * (1 + 4 * (step % 7 == 3) + 0.1 * micro)
        a = FP8LinearForMegatronCore.apply(x, ws[0], None, metas[0], False, False, None)
        a = FP8LinearForMegatronCore.apply(a[:, :h], ws[1], None, metas[1], False, False, None)
        b = FP8LinearForMegatronCore.apply(F.layer_norm(a + x, (h,)), ws[2], None, metas[2], False, False, None)
        out = FP8LinearForMegatronCore.apply(F.gelu(b), ws[3], None, metas[3], False, False, None)
        (out.float().pow(2).mean() * (1 + 10 * (step % 5 == 2))).backward()
    opt.step()
    opt.zero_grad()
# the saved scale_inv values never moved after their casts
assert all(t.item() == v for t, v in saved_inv)
print("ok", checked)
