"""Small GPT (pre-LN, GeLU MLP) on byte-level Python stdlib sources, with its four linears per layer
either plain fp32 (mode ref) or MS-AMP's FP8LinearForMegatronCore (patch 0008) as bench/train/msamp.py
calls it, each linear with its own scaling_metas(...).

Modes (--mode):
  ref            plain linears (fp32)
  in-time        scaling_metas(scaling='in-time')
  delayed        scaling_metas(scaling='delayed')            (window 16, as patched)
  delayed-m1     delayed, margin 1 on the delayed scale     (mitigation a)
  delayed-w1     delayed path with an amax history of 1     (mitigation b)
  delayed-in     delayed input, in-time output gradient     (mitigation c)
  delayed-og     in-time input, delayed output gradient     (which cast hurts)
  delayed-m1og   ... etc, see META_MODES below

Per-cast stats (input and output-gradient casts; weight casts are always in time) are gathered by
wrapping msamp.megatron.layers._cast: the scale used is 1/scale_inv of the cast that ran.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--mode", default="ref")
p.add_argument("--steps", type=int, default=400)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--micro", type=int, default=8)
p.add_argument("--accum", type=int, default=2)
p.add_argument("--lr", type=float, default=6e-4)
p.add_argument("--min-lr", type=float, default=6e-5)
p.add_argument("--warmup", type=int, default=20)
p.add_argument("--init-std", type=float, default=0.02)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--stats-every", type=int, default=1)
p.add_argument("--out", default="results")
p.add_argument("--tag", default="")
p.add_argument("--probe-every", type=int, default=0,
               help="every N steps: gradients of micro-batch 0 with fp32, fresh in-time metas and a copy of "
                    "this run's metas, compared (cosine, relative error) before the real step")
args = p.parse_args()
torch.set_num_threads(args.threads)

HERE = Path(__file__).resolve().parent
FP8 = args.mode != "ref"

# ---------------------------------------------------------------- data: bytes of stdlib sources
DATA = HERE / "data.bin"
if not DATA.exists():
    import sysconfig
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in root.rglob("*.py")
                   if "site-packages" not in f.parts and "test" not in f.parts and "tests" not in f.parts
                   and "idlelib" not in f.parts)
    buf = bytearray()
    for f in files:
        buf += f.read_bytes()
        if len(buf) > 12_000_000:
            break
    DATA.write_bytes(bytes(buf))
data = torch.frombuffer(bytearray(DATA.read_bytes()), dtype=torch.uint8).long()
n_val = len(data) // 20
train_data, val_data = data[:-n_val], data[-n_val:]

g_data = torch.Generator().manual_seed(args.seed)
# The same sequence order in every mode: all offsets drawn up front.
offsets = torch.randint(0, len(train_data) - args.seq - 1, (args.steps, args.accum, args.micro), generator=g_data)
val_offsets = torch.randint(0, len(val_data) - args.seq - 1, (32,), generator=torch.Generator().manual_seed(7))


def batch(src, offs):
    idx = offs.view(-1, 1) + torch.arange(args.seq + 1)
    seqs = src[idx]
    return seqs[:, :-1], seqs[:, 1:]


# ---------------------------------------------------------------- MS-AMP wiring
STATS = []   # per cast: (linear name, kind, sat frac, underflow frac, flush frac, rel err)
if FP8:
    from msamp.common.dtype import Dtypes, Floating
    from msamp.common.utils import torch_fp8
    from msamp.megatron import layers
    from msamp.megatron.layers import FP8LinearForMegatronCore, scaling_metas

    MIN_NORMAL = {Dtypes.kfloat8_e4m3: 2.0 ** -6, Dtypes.kfloat8_e5m2: 2.0 ** -14}
    META_NAMES = {}
    stats_on = [True]
    _orig_cast = layers._cast

    def _cast_with_stats(x, meta, transpose):
        out = _orig_cast(x, meta, transpose)
        if stats_on[0]:
            name = META_NAMES.get(id(meta))
            if name is not None:
                with torch.no_grad():
                    q, _, scale_inv = out
                    xs = x.float() / scale_inv.float()
                    a = xs.abs()
                    fp_max = Floating.qfp_max[meta.qtype]
                    nz = x != 0
                    deq = torch_fp8.dequantize(q, scale_inv, meta.qtype, torch.float32)
                    sat = (a > fp_max).float().mean().item()
                    under = ((a < MIN_NORMAL[meta.qtype]) & nz).float().mean().item()
                    flush = ((deq == 0) & nz).float().mean().item()
                    err = ((deq - x.float()).norm() / x.float().norm().clamp_min(1e-30)).item()
                    # headroom: log2(fp_max / (amax * scale)); < 0 means saturation
                    head = math.log2(fp_max / max(a.max().item(), 1e-30))
                    STATS.append((name[0], name[1], sat, under, flush, err, head))
        return out

    layers._cast = _cast_with_stats

    # ---- mitigations, local to this study
    MARGIN = [0]
    if args.mode in ("delayed-m1", "delayed-m1og"):
        MARGIN[0] = 1
        _orig_sf = torch_fp8.scaling_factor

        def _record_amax_margin(amax, history, scale, fp_max):
            amax = torch.where(torch.isfinite(amax), amax, torch.zeros_like(amax))
            history.copy_(torch.cat((amax.view(1), history[:-1])))
            # margin m: one more power of two of headroom (MS-AMP's compute_scaling_factor margin)
            sf = _orig_sf(history.amax() * 2.0 ** MARGIN[0], scale, fp_max)
            scale.copy_(sf)
        torch_fp8._record_amax = _record_amax_margin

    def make_metas():
        m = args.mode
        if m == "in-time":
            return scaling_metas("cpu", scaling="in-time")
        metas = scaling_metas("cpu", scaling="delayed")
        it = scaling_metas("cpu", scaling="in-time")
        if m in ("delayed", "delayed-m1"):
            return metas
        if m == "delayed-w1":
            # the delayed path (scale from the previous cast's amax) with a history of one
            for k in ("input", "ograd"):
                metas[k].amax = torch.zeros(1)
                metas[k].window_size = 2   # anything but 1: _cast takes the delayed path
            return metas
        if m == "delayed-in":      # delayed input, in-time output gradient
            metas["ograd"] = it["ograd"]
            return metas
        if m in ("delayed-og", "delayed-m1og"):      # in-time input, delayed output gradient
            metas["input"] = it["input"]
            return metas
        raise SystemExit(f"unknown mode {m}")


PROBE = [None]


class Linear(nn.Module):
    def __init__(self, fin, fout, name, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fout, fin) * std)
        self.bias = nn.Parameter(torch.zeros(fout))
        self.name = name
        if FP8:
            self.metas = make_metas()
            for k in ("input", "ograd"):
                META_NAMES[id(self.metas[k])] = (name, k)

    def forward(self, x):
        if PROBE[0] == "fp32":
            return F.linear(x, self.weight, self.bias)
        if PROBE[0] == "in-time":
            return FP8LinearForMegatronCore.apply(x, self.weight, self.bias, self.probe_it, False, False, None)
        if PROBE[0] == "copy":
            return FP8LinearForMegatronCore.apply(x, self.weight, self.bias, self.probe_copy, False, False, None)
        if FP8:
            return FP8LinearForMegatronCore.apply(x, self.weight, self.bias, self.metas, False, False, None)
        return F.linear(x, self.weight, self.bias)


class Block(nn.Module):
    def __init__(self, i):
        super().__init__()
        h, std = args.hidden, args.init_std
        out_std = std / math.sqrt(2 * args.layers)   # megatron's scaled init for output layers
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv = Linear(h, 3 * h, f"l{i}.qkv", std)
        self.proj = Linear(h, h, f"l{i}.proj", out_std)
        self.fc1 = Linear(h, 4 * h, f"l{i}.fc1", std)
        self.fc2 = Linear(4 * h, h, f"l{i}.fc2", out_std)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, args.heads, h // args.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Parameter(torch.randn(256, args.hidden) * args.init_std)
        self.pos = nn.Parameter(torch.randn(args.seq, args.hidden) * args.init_std)
        self.blocks = nn.ModuleList(Block(i) for i in range(args.layers))
        self.lnf = nn.LayerNorm(args.hidden)

    def forward(self, idx, tgt):
        x = self.emb[idx] + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.emb.t()   # tied output layer, plain (bf16 in the GPU run)
        return F.cross_entropy(logits.view(-1, 256), tgt.reshape(-1))


torch.manual_seed(args.seed)
model = GPT()
decay = [p_ for n, p_ in model.named_parameters() if p_.dim() >= 2]
no_decay = [p_ for n, p_ in model.named_parameters() if p_.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * t))


def val_loss():
    if FP8:
        stats_on[0] = False
    with torch.no_grad():
        losses = [model(*batch(val_data, val_offsets[i:i + 8])).item() for i in range(0, 32, 8)]
    if FP8:
        stats_on[0] = True
    return sum(losses) / len(losses)


out_dir = HERE / args.out
out_dir.mkdir(exist_ok=True)
tag = args.tag or args.mode
log_path = out_dir / f"{tag}.jsonl"
log = open(log_path, "w")
import copy  # noqa: E402


def probe(step):
    x, y = batch(train_data, offsets[step, 0])
    grads = {}
    stats_on[0] = False
    lins = [m for m in model.modules() if isinstance(m, Linear)]
    for kind in ("fp32", "in-time", "copy"):
        for m in lins:
            m.probe_it = scaling_metas("cpu", scaling="in-time")
            m.probe_copy = copy.deepcopy(m.metas)
        PROBE[0] = kind
        model.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        grads[kind] = [p_.grad.detach().clone() for p_ in model.parameters()]
    PROBE[0] = None
    model.zero_grad(set_to_none=True)
    stats_on[0] = True
    out = {}
    ref = torch.cat([g.flatten() for g in grads["fp32"]]).double()
    for kind in ("in-time", "copy"):
        v = torch.cat([g.flatten() for g in grads[kind]]).double()
        out[kind] = {"cos": F.cosine_similarity(v, ref, dim=0).item(), "relerr": ((v - ref).norm() / ref.norm()).item()}
    return out
log.write(json.dumps({"args": vars(args), "params": sum(p_.numel() for p_ in model.parameters())}) + "\n")
t0 = time.time()
for step in range(args.steps):
    for gp in opt.param_groups:
        gp["lr"] = lr_at(step)
    probe_rec = probe(step) if FP8 and args.probe_every and step % args.probe_every == 0 else None
    STATS.clear()
    if FP8:
        stats_on[0] = step % args.stats_every == 0
    tot = 0.0
    for micro in range(args.accum):
        loss = model(*batch(train_data, offsets[step, micro])) / args.accum
        loss.backward()
        tot += loss.item()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
    opt.step()
    opt.zero_grad(set_to_none=True)
    rec = {"step": step, "loss": tot, "gnorm": gnorm, "lr": lr_at(step), "t": round(time.time() - t0, 1)}
    if probe_rec:
        rec["probe"] = probe_rec
    if STATS:
        agg = {}
        for _name, kind, sat, under, flush, err, head in STATS:
            for key, val in (("sat", sat), ("under", under), ("flush", flush), ("err", err)):
                agg.setdefault(f"{kind}.{key}", []).append(val)
            agg.setdefault(f"{kind}.minhead", []).append(head)
        rec["cast"] = {k: (min(v) if k.endswith("minhead") else sum(v) / len(v)) for k, v in agg.items()}
        rec["cast"].update({f"{k}.max": max(v) for k, v in agg.items() if k.endswith(".sat")})
        # per-linear saturation (only where any)
        per = {}
        for name, kind, sat, _under, _flush, _err, _head in STATS:
            if sat > 0:
                per[f"{name}.{kind}"] = per.get(f"{name}.{kind}", 0.0) + sat / args.accum
        if per:
            rec["sat_by_linear"] = per
    if step % 50 == 49 or step == args.steps - 1:
        rec["val"] = val_loss()
    log.write(json.dumps(rec) + "\n")
    log.flush()
    if step % 25 == 0:
        print(step, f"{tot:.4f}", f"{rec['t']}s", flush=True)
print("done", time.time() - t0)
