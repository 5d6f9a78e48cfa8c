"""MS-AMP's torch-native fp8 backend (patches/ms-amp 0004-0006) on CPU, against torch's float8 reference.

Runs in the Python 3.12 with torch (BENCH_MEGATRON_PYTHON) with the patched MS-AMP snapshot on its path:
the casts saturate, record amax and a power-of-two scale whose inverse dequantizes; e4m3/e5m2 round
trips equal torch's own; the compiled cast takes MS-AMP's in-time flag when it is a tensor; the TN
GEMM equals the dequantized matmul; the FP8 linear for megatron-core computes y = x·Wᵀ and both
gradients within fp8 error, and casts its weight once per optimizer step.
The GPU behaviour (torch.compile'd casts, torch._scaled_mm) is what the H200 records show.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bench.images.pins import REPO_ROOT
from bench.images.series import run_series
from tests.conftest import megatron_python
from tests.snapshots import snapshot_tree

CHECK = r'''
import torch
from msamp.common.dtype import Dtypes
from msamp.common.utils import torch_fp8
from msamp.common.utils.transformer_engine_wrapper import TransformerEngineWrapper as tew
from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

torch.manual_seed(0)
for qtype, dtype in ((Dtypes.kfloat8_e4m3, torch.float8_e4m3fn), (Dtypes.kfloat8_e5m2, torch.float8_e5m2)):
    fmax = torch.finfo(dtype).max
    x = torch.randn(64, 48) * 3
    x[0, 0] = 1e6  # far past the format's range at scale 1: must saturate, not become inf/nan
    scale, amax = torch.ones(()), torch.zeros(())
    q, qt, scale_inv = torch_fp8.quantize(x, qtype, scale, amax, in_time=False, transpose=True)
    assert q.dtype == torch.uint8 and torch.equal(qt, q.t().contiguous())
    assert amax.item() == x.abs().max().item() and scale_inv.item() == 1.0
    assert q.view(dtype).float()[0, 0].item() == fmax
    ref = x.clamp(-fmax, fmax).to(dtype)
    assert torch.equal(q.view(dtype), ref)  # the cast is torch's own round-to-nearest
    # In-time scaling: MS-AMP's power-of-two factor from this tensor's amax, then a round trip.
    y = torch.randn(32, 16)
    q, _, scale_inv = torch_fp8.quantize(y, qtype, scale, amax, in_time=True)
    s = scale.item()
    assert s == 2.0 ** int(torch.floor(torch.log2(fmax / y.abs().max())).item())
    assert scale_inv.item() == 1 / s and amax.item() == y.abs().max().item()
    back = torch_fp8.dequantize(q, scale_inv, qtype, torch.float32)
    assert torch.equal(back, (y * s).to(dtype).float() / s)
# An amax window > 1 makes ScalingMeta.is_in_time_scaling() a tensor; the compiled cast (Dynamo
# tracing, whole graph) must take it without a data-dependent branch.
from msamp.common.tensor import ScalingMeta
meta = ScalingMeta(Dtypes.kfloat8_e4m3, scale=torch.ones(()), scale_inv=torch.ones(()), amax=torch.zeros(16),
                   window_size=16)
assert isinstance(meta.is_in_time_scaling(), torch.Tensor)
torch_fp8._compiled_fn = lambda fn, device: torch.compile(fn, backend="eager", fullgraph=True, dynamic=True)
q, _, _ = torch_fp8.quantize(y, Dtypes.kfloat8_e4m3, meta.scale, meta.amax[:1], meta.is_in_time_scaling())
assert meta.scale.item() == 2.0 ** int(torch.floor(torch.log2(448 / y.abs().max())).item())
# The TN GEMM: D(N, M) = B(N, K) . A(M, K)^T on fp8 operands.
a, b = torch.randn(32, 64), torch.randn(48, 64)
sa, sb = torch.ones(()), torch.ones(())
qa, _, ia = torch_fp8.quantize(a, Dtypes.kfloat8_e4m3, sa, torch.zeros(()), in_time=True)
qb, _, ib = torch_fp8.quantize(b, Dtypes.kfloat8_e4m3, sb, torch.zeros(()), in_time=True)
d = torch.empty(48, 32)
tew.te_gemm(qa, ia, Dtypes.kfloat8_e4m3, True, qb, ib, Dtypes.kfloat8_e4m3, False, d, None, None, None,
            torch.Tensor(), None, None, False, None, 0, False, True, 0)
ref = torch_fp8.dequantize(qb, ib, Dtypes.kfloat8_e4m3, torch.float32) @ torch_fp8.dequantize(
    qa, ia, Dtypes.kfloat8_e4m3, torch.float32).t()
assert torch.allclose(d, ref, rtol=1e-5, atol=1e-5)
# The FP8 linear for megatron-core.
x = torch.randn(64, 32, requires_grad=True)
w = torch.nn.Parameter(torch.randn(48, 32) * 0.1)
metas = scaling_metas("cpu")
out = FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None)
g = torch.randn(64, 48)
out.backward(g)
xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
(xr @ wr.t()).backward(g)
rel = lambda p, r: ((p - r).norm() / r.norm()).item()
assert rel(out, xr @ wr.t()) < 0.08 and rel(x.grad, xr.grad) < 0.15 and rel(w.grad, wr.grad) < 0.15
key = w._msamp_fp8_cache[0]
FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None)
assert w._msamp_fp8_cache[0] == key  # unchanged weight: no re-cast
torch.optim.SGD([w], lr=0.1).step()
FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None)
assert w._msamp_fp8_cache[0] != key  # after an optimizer step: cast again
print("ok")
'''


@pytest.mark.needs_megatron
def test_fp8_backend_matches_torch_float8_on_cpu(tmp_path) -> None:
    tree = tmp_path / "ms-amp"
    shutil.copytree(snapshot_tree("ms-amp"), tree)
    run_series(REPO_ROOT / "patches/ms-amp/series", tree, "apply")
    env = {**os.environ, "PYTHONPATH": str(tree), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([megatron_python(), "-W", "ignore", "-c", CHECK], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
