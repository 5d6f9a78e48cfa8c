"""Delayed scaling in MS-AMP's FP8 linear for megatron-core (patches/ms-amp 0008) on CPU.

Runs in the Python 3.12 with torch (BENCH_MEGATRON_PYTHON) with the patched MS-AMP snapshot on its path:
the scale of a delayed cast comes from the max of the amax window of earlier casts, with MS-AMP's
power-of-two factor; the first cast of a meta is in time; a value past the window's max saturates;
the window rolls and a non-finite amax enters it as 0; the compiled functions trace whole under
Dynamo; Transformer Engine's quantize kernel is wired as TE 2's Float8Quantizer takes it (against a
stand-in: TE's kernel needs a GPU) and is not used without TE or off CUDA; MSAMP_FP8_SCALING=in-time
brings back in-time scaling; and over several steps the delayed linear's output and gradients match
the in-time one's within fp8 error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.images.pins import REPO_ROOT
from bench.images.series import run_series
from tests.conftest import megatron_python
from tests.snapshots import snapshot_tree

TE_STAND_IN = r"""
import sys
import types

import torch


# TE 2's quantizers as its sources describe them. Float8Quantizer: the kernel takes the max into
# `amax`, writes _data, _transpose (columnwise) and _scale_inv = 1 / scale, uint8 storage.
# Float8CurrentScalingQuantizer: no state; the scale is fp_max / amax (1 for an amax of 0), with
# force_pow_2_scales its mantissa bits cleared (rounded down to a power of two).
def fp8_cast(x, scale, fp8_dtype, columnwise):
    torch_dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fp8_dtype]
    fmax = torch.finfo(torch_dtype).max
    data = (x.float() * scale).clamp(-fmax, fmax).to(torch_dtype).view(torch.uint8)
    return types.SimpleNamespace(_data=data, _transpose=data.t().contiguous() if columnwise else None,
                                 _scale_inv=(1 / scale).reshape(1))


class Float8Quantizer:
    def __init__(self, scale, amax, fp8_dtype, *, rowwise=True, columnwise=True):
        assert scale.shape == (1,) and amax.shape == (1,) and rowwise
        self.scale, self.amax, self.dtype, self.columnwise, self.internal = scale, amax, fp8_dtype, columnwise, False
        made.append(self)

    def __call__(self, x):
        assert self.internal
        self.amax.copy_(torch.maximum(self.amax, x.abs().amax().float()))
        return fp8_cast(x, self.scale, self.dtype, self.columnwise)


class Float8CurrentScalingQuantizer:
    def __init__(self, fp8_dtype, device, *, rowwise=True, columnwise=True, force_pow_2_scales=False,
                 amax_epsilon=0.0):
        assert rowwise and amax_epsilon == 0.0
        self.dtype, self.columnwise, self.pow_2, self.internal = fp8_dtype, columnwise, force_pow_2_scales, False
        made.append(self)

    def __call__(self, x):
        assert self.internal
        fmax = {"e4m3": 448.0, "e5m2": 57344.0}[self.dtype]
        amax = x.abs().amax().float()
        scale = torch.where(amax > 0, fmax / amax, torch.ones(()))
        if self.pow_2:
            scale = (scale.view(torch.int32) & -(1 << 23)).view(torch.float32)
        return fp8_cast(x, scale, self.dtype, self.columnwise)


made = []
tex = types.SimpleNamespace(DType=types.SimpleNamespace(kFloat8E4M3="e4m3", kFloat8E5M2="e5m2"))
sys.modules["transformer_engine_torch"] = tex
for name in ("transformer_engine", "transformer_engine.pytorch", "transformer_engine.pytorch.tensor"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["transformer_engine.pytorch.tensor.float8_tensor"] = types.SimpleNamespace(
    Float8Quantizer=Float8Quantizer, Float8CurrentScalingQuantizer=Float8CurrentScalingQuantizer)
"""

CHECK = r'''
import math
import sys
import types

import torch
from msamp.common.dtype import Dtypes
from msamp.common.utils import te_fp8, torch_fp8
from msamp.megatron import layers
from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

E4M3, FMAX = Dtypes.kfloat8_e4m3, 448.0


def sf(amax):  # MS-AMP's power-of-two scaling factor, margin 0
    return 2.0 ** math.floor(math.log2(FMAX / amax))


def tensor(amax, seed):  # (32, 16), |x| <= amax, with amax reached
    x = (torch.rand(32, 16, generator=torch.Generator().manual_seed(seed)) * 2 - 1) * amax
    x[3, 5] = -amax
    return x


def delayed_casts():
    """Casts through one meta of window 4; returns every output and the meta after each."""
    scale, history, seen = torch.ones(()), torch.zeros(4), []
    for i, a in enumerate([3.0, 0.5, 100.0, 1.0, 1.0, 1.0, 1.0, math.inf]):
        x = tensor(1.0 if math.isinf(a) else a, i)
        x[0, 0] = a if math.isinf(a) else x[0, 0]
        q, qt, inv = torch_fp8.quantize_delayed(x, E4M3, scale, history, in_time=i == 0, transpose=True)
        seen.append((x, q, qt, inv.clone(), scale.clone(), history.clone()))
    return seen


seen = delayed_casts()
x, q, qt, inv, scale, history = seen[0]
# The first cast: in time, from its own amax; its amax opens the window and sets the next scale.
assert inv.item() == 1 / sf(3.0) and scale.item() == sf(3.0)
assert history.tolist() == [3.0, 0.0, 0.0, 0.0]
assert torch.equal(q.view(torch.float8_e4m3fn), (x * sf(3.0)).clamp(-FMAX, FMAX).to(torch.float8_e4m3fn))
assert torch.equal(qt, q.t().contiguous())
# Then delayed: the scale of the window's max (3.0), not of the tensor's own amax (0.5).
x, q, qt, inv, scale, history = seen[1]
assert inv.item() == 1 / sf(3.0) and history.tolist() == [0.5, 3.0, 0.0, 0.0] and scale.item() == sf(3.0)
assert torch.equal(q.view(torch.float8_e4m3fn), (x * sf(3.0)).to(torch.float8_e4m3fn))
# A value past the window's max saturates at the format's max; its amax enters the window.
x, q, qt, inv, scale, history = seen[2]
assert inv.item() == 1 / sf(3.0) and history.tolist() == [100.0, 0.5, 3.0, 0.0]
values = q.view(torch.float8_e4m3fn).float()
assert values[3, 5].item() == -FMAX and values.abs().max().item() == FMAX and torch.isfinite(values).all()
assert scale.item() == sf(100.0)
# The window rolls: 100 steers the scale for four casts, then drops out.
for i in (3, 4, 5, 6):
    assert seen[i][3].item() == 1 / sf(100.0) and (100.0 in seen[i][5].tolist()) == (i < 6)
x, q, qt, inv, scale, history = seen[6]
assert history.tolist() == [1.0, 1.0, 1.0, 1.0] and scale.item() == sf(1.0)
# A non-finite amax enters the window as 0 (MS-AMP's rule), and the inf saturates.
x, q, qt, inv, scale, history = seen[7]
assert history.tolist() == [0.0, 1.0, 1.0, 1.0] and scale.item() == sf(1.0)
assert q.view(torch.float8_e4m3fn).float()[0, 0].item() == FMAX
# The history update alone (after TE's kernel): the given amax enters, the scale follows.
scale, history = torch.ones(()), torch.tensor([1.0, 0.0])
torch_fp8.record_amax(torch.tensor([8.0]), E4M3, scale, history)
assert history.tolist() == [8.0, 1.0] and scale.item() == sf(8.0)

# The compiled functions trace whole (Dynamo, as on CUDA) and compute the same.
torch_fp8._compiled_fn = lambda fn, device: torch.compile(fn, backend="eager", fullgraph=True, dynamic=True)
for eager, traced in zip(seen, delayed_casts(), strict=True):
    assert all(torch.equal(a, b) for a, b in zip(eager, traced, strict=True))
torch_fp8.record_amax(torch.tensor([8.0]), E4M3, scale, history)
assert history.tolist() == [8.0, 8.0] and scale.item() == sf(8.0)

# Without Transformer Engine (this Python has none) its kernel is not used.
assert te_fp8._load() is None and not te_fp8.usable(torch.ones(1))


''' + TE_STAND_IN + r'''
te_fp8._te.clear()
assert te_fp8._load() is not None and not te_fp8.usable(torch.ones(1))  # TE there, but a CPU tensor
for qtype in (Dtypes.kfloat8_e4m3, Dtypes.kfloat8_e5m2):
    x, scale = tensor(5.0, 1), torch.full((), 32.0)
    q, qt, inv, amax = te_fp8.quantize(x, qtype, scale, transpose=True)
    ref_q, ref_qt, ref_inv = torch_fp8.quantize_delayed(x, qtype, scale.clone(), torch.ones(2), False, True)
    assert made[-1].dtype == qtype.name[-4:].lower() and made[-1].columnwise
    assert torch.equal(q, ref_q) and torch.equal(qt, ref_qt) and inv.item() == ref_inv.item()
    assert amax.item() == 5.0 and scale.item() == 32.0  # the scale is the caller's to move on
    assert te_fp8.quantize(x, qtype, scale, transpose=False)[1] is None and not made[-1].columnwise

# The switch: input and output gradient delayed over MS-AMP's window of 16, the weight in time.
metas = scaling_metas("cpu")
assert layers.MSAMP_FP8_SCALING == "delayed" and layers.MSAMP_FP8_TE_CAST
assert [metas[k].window_size for k in ("input", "weight", "ograd")] == [16, 1, 16]
assert [m.window_size for m in scaling_metas("cpu", scaling="in-time").values()] == [1, 1, 1]
try:
    scaling_metas("cpu", scaling="late")
except ValueError as error:
    assert "delayed, in-time" in str(error)
else:
    raise AssertionError("scaling='late' was taken")


# The delayed linear against the in-time one over several steps with an SGD step between them; the
# magnitudes move so that the window's scale is not always the tensor's own.
def train(scaling):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(48, 32) * 0.1)
    metas, opt, rows = scaling_metas("cpu", scaling=scaling), torch.optim.SGD([w], lr=0.01), []
    for x_size, g_size in ((1.0, 1.0), (0.5, 0.3), (0.25, 1.1), (1.2, 0.5), (0.6, 0.2)):
        x = (torch.randn(64, 32) * x_size).requires_grad_()
        g = torch.randn(64, 48) * g_size
        out = FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None)
        out.backward(g)
        xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        ref = xr @ wr.t()
        ref.backward(g)
        rows.append((out.detach(), x.grad, w.grad.clone(), ref.detach(), xr.grad, wr.grad,
                     metas["input"].scale.item(), metas["ograd"].scale.item()))
        opt.step()
        opt.zero_grad()
    return rows, metas


rel = lambda p, r: ((p - r).norm() / r.norm()).item()
delayed, metas = train("delayed")
in_time, _ = train("in-time")
assert int(metas["input"].amax_counter) == 5 and int(metas["ograd"].amax_counter) == 5
assert (metas["input"].amax[:5] > 0).all() and (metas["input"].amax[5:] == 0).all()
for d, t in zip(delayed, in_time, strict=True):
    out, dx, dw, ref, rdx, rdw = d[:6]
    assert rel(out, ref) < 0.08 and rel(dx, rdx) < 0.15 and rel(dw, rdw) < 0.15
    assert rel(out, t[0]) < 0.08 and rel(dx, t[1]) < 0.15 and rel(dw, t[2]) < 0.15
# The scales differ (a power of two apart: below the window's max the cast loses nothing but the
# bottom of the subnormal range, so the results stay within fp8 error of the in-time ones).
assert [d[6:] for d in delayed] != [t[6:] for t in in_time]
print("ok")
'''

IN_TIME = r'''
import torch
from msamp.megatron import layers
from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

assert layers.MSAMP_FP8_SCALING == "in-time"
metas = scaling_metas("cpu")
assert [m.window_size for m in metas.values()] == [1, 1, 1]
# In time, each input is cast with its own amax: a 100x larger input after a small one does not
# saturate (with delayed scaling it would, on the small one's scale).
torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(48, 32) * 0.1)
for magnitude in (0.01, 1.0):
    x = torch.randn(64, 32) * magnitude
    out = FP8LinearForMegatronCore.apply(x, w, None, metas, False, False, None)
    ref = x @ w.detach().t()
    assert ((out - ref).norm() / ref.norm()).item() < 0.08
    assert metas["input"].amax[0].item() == x.abs().max().item()
print("ok")
'''

# In time through TE's current scaling (patch 0009), against the stand-ins: TE's power-of-two scale
# is MS-AMP's in-time factor, so the bytes are the torch cast's; the layer casts its weight, input and
# output gradient through it where TE is usable, and gives what the torch cast gives.
IN_TIME_TE = r"""
import torch
from msamp.common.dtype import Dtypes
from msamp.common.utils import te_fp8, torch_fp8
from msamp.megatron import layers
from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas
""" + TE_STAND_IN + r"""
E4M3, E5M2 = Dtypes.kfloat8_e4m3, Dtypes.kfloat8_e5m2
torch.manual_seed(0)
for qtype in (E4M3, E5M2):
    for magnitude in (3e-3, 1.0, 5.0, 300.0, 7e4):
        x = (torch.randn(32, 16) * magnitude).bfloat16()
        q, qt, inv = te_fp8.quantize_in_time(x, qtype, transpose=True)
        ref = torch_fp8.quantize(x, qtype, torch.ones(()), torch.zeros(()), in_time=True, transpose=True)
        assert torch.equal(q, ref[0]) and torch.equal(qt, ref[1]) and inv.item() == ref[2].item(), magnitude
    assert te_fp8.quantize_in_time(x, qtype, transpose=False)[1] is None
# One stateless quantizer per format and layout, asked for power-of-two scales.
assert len(made) == 4 and all(m.pow_2 for m in made)
assert sorted((m.dtype, m.columnwise) for m in made) == [
    ("e4m3", False), ("e4m3", True), ("e5m2", False), ("e5m2", True)]

casts = []
quantize_in_time = te_fp8.quantize_in_time
te_fp8.quantize_in_time = lambda x, qtype, transpose: casts.append(qtype.name) or quantize_in_time(x, qtype, transpose)


def step(te_cast):
    layers.MSAMP_FP8_TE_CAST = te_cast
    te_fp8.usable = lambda x: True
    torch.manual_seed(1)
    w = torch.nn.Parameter(torch.randn(48, 32) * 0.1)
    x = (torch.randn(64, 32) * 2).requires_grad_()
    out = FP8LinearForMegatronCore.apply(x, w, None, scaling_metas("cpu"), False, False, None)
    out.backward(torch.randn(64, 48) * 1e-3)
    return out.detach(), x.grad, w.grad


assert layers.MSAMP_FP8_SCALING == "in-time"
te, torch_path = step(True), step(False)
assert casts == ["kFloat8E4M3", "kFloat8E4M3", "kFloat8E5M2"], casts  # input, weight, output gradient
assert all(torch.equal(a, b) for a, b in zip(te, torch_path, strict=True))
print("ok")
"""

INDUCTOR = r'''
import torch
from msamp.common.dtype import Dtypes
from msamp.common.utils import torch_fp8


def casts():
    torch.manual_seed(0)
    scale, history, seen = torch.ones(()), torch.zeros(16), []
    for i, qtype in enumerate((Dtypes.kfloat8_e4m3, Dtypes.kfloat8_e5m2) * 2):
        x = torch.randn(64, 48).bfloat16() * (1 + i)
        seen += torch_fp8.quantize_delayed(x, qtype, scale, history, in_time=i == 0, transpose=True)
        seen += [scale.clone(), history.clone()]
    torch_fp8.record_amax(torch.tensor([3.0]), Dtypes.kfloat8_e5m2, scale, history)
    return seen + [scale, history]


eager = casts()
compiled = {}
torch_fp8._compiled_fn = lambda fn, device: compiled.setdefault(fn, torch.compile(fn, fullgraph=True, dynamic=True))
assert all(torch.equal(a, b) for a, b in zip(eager, casts(), strict=True)) and len(compiled) == 3
print("ok")
'''

# A training step's casts, compiled as on a GPU (Dynamo; its eager backend, so no C++ is built):
# forward casts of inputs that require grad, backward casts of output gradients, first casts in time
# then delayed, over micro-batches and steps. Dynamo raises (fullgraph) once one function has 8
# variants; a 345m run hit that on the GPU machine when the variants multiplied.
RECOMPILES = r"""
import torch
from torch._dynamo.utils import counters
from msamp.common.utils import torch_fp8
from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

compiled = {}
torch_fp8._compiled_fn = lambda fn, device: compiled.setdefault(
    fn, torch.compile(fn, fullgraph=True, dynamic=True, backend="eager"))
torch.manual_seed(0)
h, f, t = 32, 128, 64
ws = [torch.nn.Parameter((torch.randn(n, k) * 0.05).bfloat16()) for n, k in ((3 * h, h), (h, h), (f, h), (h, f))]
metas = [scaling_metas("cpu") for _ in ws]
emb = torch.nn.Parameter(torch.randn(t, h).bfloat16())
for step in range(3):
    for micro in range(3):
        x = emb * 1.0
        a = FP8LinearForMegatronCore.apply(x, ws[0], None, metas[0], False, False, None)
        a = FP8LinearForMegatronCore.apply(a[:, :h], ws[1], None, metas[1], False, False, None)
        b = FP8LinearForMegatronCore.apply(a + x, ws[2], None, metas[2], False, False, None)
        FP8LinearForMegatronCore.apply(torch.nn.functional.gelu(b), ws[3], None, metas[3], False, False,
                                       None).float().sum().backward()
    for w in ws:
        w.grad = None
# One graph per fp8 format for each cast (in time, delayed), one for the window update.
assert counters["stats"]["unique_graphs"] <= 5, dict(counters["stats"])
print("ok")
"""


@pytest.fixture(scope="module")
def msamp_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("msamp") / "ms-amp"
    shutil.copytree(snapshot_tree("ms-amp"), tree)
    run_series(REPO_ROOT / "patches/ms-amp/series", tree, "apply")
    return tree


def run_check(tree: Path, script: str, **switches: str) -> subprocess.CompletedProcess:
    """``script`` in the Megatron Python with the patched tree, MS-AMP's switches only as given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSAMP_")}
    env.update(PYTHONPATH=str(tree), CUDA_VISIBLE_DEVICES="", **switches)
    return subprocess.run([megatron_python(), "-W", "ignore", "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.needs_megatron
def test_delayed_scaling_casts_and_linear_on_cpu(msamp_tree: Path) -> None:
    done = run_check(msamp_tree, CHECK)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.needs_megatron
def test_the_switch_brings_back_in_time_scaling(msamp_tree: Path) -> None:
    done = run_check(msamp_tree, IN_TIME, MSAMP_FP8_SCALING="in-time")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    refused = run_check(msamp_tree, "import msamp.megatron.layers", MSAMP_FP8_SCALING="late")
    assert refused.returncode != 0 and "MSAMP_FP8_SCALING='late': expected one of delayed, in-time" in refused.stderr



@pytest.mark.needs_megatron
def test_in_time_casts_go_through_te_current_scaling_with_the_torch_casts_bytes(msamp_tree: Path) -> None:
    done = run_check(msamp_tree, IN_TIME_TE, MSAMP_FP8_SCALING="in-time")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]

@pytest.mark.needs_megatron
def test_a_training_step_compiles_each_cast_once_per_fp8_format(msamp_tree: Path) -> None:
    done = run_check(msamp_tree, RECOMPILES)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.needs_megatron
def test_inductor_compiles_the_delayed_cast_as_eager_computes_it(msamp_tree: Path, tmp_path: Path) -> None:
    """Inductor's CPU backend (Triton's on a GPU) lowers the graphs whole: seconds of C++ compiling."""
    done = run_check(msamp_tree, INDUCTOR, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
