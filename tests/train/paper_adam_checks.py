"""Checks of bench.train.paper_adam, run by tests/train in BENCH_MEGATRON_PYTHON.

``python tests/train/paper_adam_checks.py <check>`` runs one check in a fresh process, on CPU with
the Triton kernel under Triton's interpreter; ``PAPER_ADAM_CHECK_DEVICE=cuda`` runs the same check
on a GPU (the GPU machine's set-up runs ``against_fp32_adamw`` and ``kernel_matches_torch`` so).
"""

from __future__ import annotations

import math
import os
import sys

DEVICE = os.environ.get("PAPER_ADAM_CHECK_DEVICE", "cpu")
# Read when the kernel module is imported. compiles_for_hopper needs Triton's compiler instead.
if DEVICE == "cpu" and sys.argv[1:2] != ["compiles_for_hopper"]:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench.measure.logparse import MemoryParts  # noqa: E402
from bench.train.fp8_allreduce import power_of_two_scale_below  # noqa: E402
from bench.train.memory_parts import measure  # noqa: E402
from bench.train.paper_adam import STATE_NAMES, PaperAdamW  # noqa: E402
from bench.train.paper_adam_kernel import BLOCK, round_bf16, round_e4m3  # noqa: E402

U8 = 2.0**-4  # E4M3's unit roundoff: 3 mantissa bits, half an ulp relative
U16 = 2.0**-11  # fp16's: 10 mantissa bits
# Half the smallest subnormal of each format, the largest rounding error of a value near zero.
TINY8, TINY16 = 2.0**-10, 2.0**-25
LR, BETAS, EPS = 1e-2, (0.9, 0.999), 1e-8
# A tensor of one element, one of zeros, small ones, and one of several kernel blocks whose last is
# partly masked.
SHAPES = ((1,), (5, 7), (100,), (30,), (3, 11), (2 * BLOCK + 77,), (2,))


def _params(shapes=SHAPES, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    params = [torch.randn(shape, generator=generator).bfloat16().to(DEVICE) for shape in shapes]
    params[1].zero_()
    return params


def _grads(params: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """bf16 gradients over three decades of magnitude (the zero parameter gets zero gradients):
    no moment leaves its format's normal range at these scales."""
    grads = []
    for p in params:
        magnitude = torch.exp(torch.rand(p.shape, generator=generator) * -math.log(1e3))
        sign = torch.randint(0, 2, p.shape, generator=generator) * 2 - 1
        grads.append((sign * magnitude).bfloat16().to(DEVICE))
    grads[1].zero_()
    return grads


def _unscaled(opt: PaperAdamW, p: torch.Tensor, name: str) -> torch.Tensor:
    return opt.get_unscaled_state(p, name)


def check_against_fp32_adamw() -> None:
    """Five steps against torch's fp32 AdamW on the same bf16 parameters and gradients, weight
    decay 0 and 0.1, within the error the formats allow, bound element by element:

    - first moment: stored m̃_t = Q8(β1·m̃_{t-1} + (1-β1)·g_t), so its error e_t = m̃_t − m_t obeys
      |e_t| <= β1|e_{t-1}| + u8·|m̃_t| + tiny8_t, with |m̃_t| <= |m_t| + |e_t|: E_t = (β1·E_{t-1}
      + u8·|m_t| + tiny8_t) / (1 − u8), u8 = 2^-4 (E4M3), tiny8_t = 2^-10 / s, s >= 224/amax(m_t)
      the power-of-two scale (the rounding error of a value among the subnormals);
    - second moment likewise with β2, u16 = 2^-11 and tiny16 = 2^-25 · amax(v_t) / 32752: F_t;
    - the update r = m̂ / (sqrt(v̂) + eps), m̂ = m/(1−β1^t), v̂ = v/(1−β2^t): |r̃ − r| <= E_t/bc1/D̃ +
      |m̂|·ΔD/(D·D̃), D̃ the least denominator v − F allows and ΔD its largest move either way;
    - master: M̃_t = Q16((1 − lr·wd)·M̃_{t-1} − lr·r̃_t), so P_t = ((1 − lr·wd)·P_{t-1} + lr·R_t +
      u16·|M_t| + tiny16_t) / (1 − u16); the initial master (bf16 in fp16, scaled) is exact.

    fp32 arithmetic adds a relative 1e-5 of slack. Also: the first step moves each parameter by
    lr·sign(g) (Adam's bias-corrected first step), the bf16 weights are the master rounded, and
    the zero tensor with zero gradients stays zero, with finite scales."""
    for wd in (0.0, 0.1):
        params = _params()
        reference = [p.float().clone() for p in params]
        opt = PaperAdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=wd)
        ref_opt = torch.optim.AdamW(reference, lr=LR, betas=BETAS, eps=EPS, weight_decay=wd)
        generator = torch.Generator().manual_seed(1)
        zeros = [torch.zeros(p.shape, device=DEVICE) for p in params]
        e_bound, f_bound, p_bound = list(zeros), list(zeros), list(zeros)
        for t in range(1, 6):
            before = [r.clone() for r in reference]
            grads = _grads(params, generator)
            for p, r, g in zip(params, reference, grads, strict=True):
                p.decoupled_grad = g
                r.grad = g.float()
            opt.step()
            ref_opt.step()
            bc1, bc2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t
            for i, r in enumerate(reference):
                m, v = ref_opt.state[r]["exp_avg"], ref_opt.state[r]["exp_avg_sq"]
                tiny8 = TINY8 * m.abs().max() / 224
                tiny16 = TINY16 * v.abs().max() / 32752
                e_bound[i] = (BETAS[0] * e_bound[i] + U8 * m.abs() + tiny8) / (1 - U8)
                f_bound[i] = (BETAS[1] * f_bound[i] + U16 * v.abs() + tiny16) / (1 - U16)
                d = (v / bc2).sqrt() + EPS
                d_low = ((v - f_bound[i]).clamp_min(0) / bc2).sqrt() + EPS
                d_move = torch.maximum(((v + f_bound[i]) / bc2).sqrt() + EPS - d, d - d_low)
                r_bound = e_bound[i] / bc1 / d_low + (m / bc1).abs() * d_move / (d * d_low)
                tiny_master = TINY16 * r.abs().max() / 32752
                p_bound[i] = ((1 - LR * wd) * p_bound[i] + LR * r_bound + U16 * r.abs()
                              + tiny_master) / (1 - U16)
            if t == 1 and wd == 0.0:
                # Bias-corrected: the first step is lr·m̂/sqrt(v̂) = lr·sign(g), up to the E4M3
                # first moment (u8 relative) and the fp16 master's rounding (u16 of the weight).
                for p, b in zip(params[2:], before[2:], strict=True):
                    step = _unscaled(opt, p, "master_param") - b
                    slack = U8 * LR + U16 * (b.abs() + LR) + 1e-6
                    assert ((step.abs() - LR).abs() <= slack).all(), step
        for i, (p, r) in enumerate(zip(params, reference, strict=True)):
            master = _unscaled(opt, p, "master_param")
            error = (master - r).abs()
            allowed = p_bound[i] * (1 + 1e-5) + 1e-5 * r.abs()
            assert (error <= allowed).all(), (wd, i, (error - allowed).max())
            # The weights are the fp32 master in bf16 (half an ulp: 2^-8), the state it in fp16.
            rounded = (p.float() - master).abs()
            assert (rounded <= (2.0**-8 + U16) * master.abs() + 1e-30).all(), (i, rounded.max())
        assert not params[1].any() and all(
            not opt.state[params[1]][name].float().any() for name in STATE_NAMES[1:])
        assert all(math.isfinite(s.item()) for p in params for s in opt._scales[p].values())
        ratios = [((_unscaled(opt, p, "master_param") - r).abs() / (b + 1e-30)).max().item()
                  for p, r, b in zip(params, reference, p_bound, strict=True)]
        print(f"wd {wd}: largest error / bound {max(ratios):.3f}")


def _reference_step(opt: PaperAdamW, p: torch.Tensor, group: dict) -> dict[str, torch.Tensor]:
    """The step of one tensor in torch, in the kernel's order of fp32 operations and with its
    fp32 constants; the stored values (weight, then the three states) it should write."""
    beta1, beta2 = group["betas"]
    t = group["step"] + 1

    def f32(x: float) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.float32, device=p.device)

    g = p.decoupled_grad.float()
    w, m, v = (opt.state[p][name].float() * opt._scales[p][name] for name in STATE_NAMES)
    m = f32(beta1) * m + f32(1.0 - beta1) * g
    v = f32(beta2) * v + f32(1.0 - beta2) * (g * g)
    step_size, bc2_sqrt = f32(group["lr"] / (1.0 - beta1**t)), f32(math.sqrt(1.0 - beta2**t))
    w = f32(1.0 - group["lr"] * group["weight_decay"]) * w - step_size * (
        m / (v.sqrt() / bc2_sqrt + f32(group["eps"])))
    stored = {"weight": w.to(p.dtype)}
    for name, value in zip(STATE_NAMES, (w, m, v), strict=True):
        limit = torch.finfo(opt.state[p][name].dtype).max
        into = power_of_two_scale_below(value.abs().amax(), limit)
        stored[name] = (value * into).to(opt.state[p][name].dtype)
    return stored


def _codes(x: torch.Tensor) -> torch.Tensor:
    """A stored tensor's bit patterns as integers (adjacent values of one sign differ by one)."""
    width = {1: torch.uint8, 2: torch.int16}[x.element_size()]
    return x.view(width).int()


def check_kernel_matches_torch() -> None:
    """Three steps of the kernel against :func:`_reference_step` on every tensor: on CPU (Triton's
    interpreter, fp32 as numpy computes it) the same bytes; on a GPU, where Triton may fuse a
    multiply and an add and divides and takes square roots to within an ulp, at most the adjacent
    value of the stored format, in at most 1 % of the elements."""
    params = _params()
    opt = PaperAdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=0.1)
    generator = torch.Generator().manual_seed(5)
    group = opt.param_groups[0]
    for p in params:
        opt.initialize_state(p)
    for _ in range(3):
        for p, g in zip(params, _grads(params, generator), strict=True):
            p.decoupled_grad = g
        expected = {id(p): _reference_step(opt, p, {**group, "step": group.get("step", 0)})
                    for p in params}
        opt.step()
        off, total = 0, 0
        for p in params:
            got = {"weight": p, **{name: opt.state[p][name] for name in STATE_NAMES}}
            for name, value in expected[id(p)].items():
                diff = (_codes(got[name]) - _codes(value)).abs()
                total += diff.numel()
                if DEVICE == "cpu":
                    assert not diff.any(), (name, tuple(p.shape), int(diff.count_nonzero()))
                else:
                    assert diff.max() <= 1, (name, tuple(p.shape), int(diff.max()))
                    off += int(diff.count_nonzero())
        assert off <= total / 100, (off, total)
    print(f"{DEVICE}: 3 steps, {off} of {total} stored values one code apart in the last")


@triton.jit
def _rounded(x, bf16, e4m3, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    value = tl.load(x + idx, mask=mask)
    tl.store(bf16 + idx, round_bf16(value), mask=mask)
    tl.store(e4m3 + idx, round_e4m3(value), mask=mask)


def check_roundings() -> None:
    """The kernel's own rounding to bf16 and to E4M3 (saturating at 448), which make its final
    casts exact, against torch's round-to-nearest-even casts: every tie between two E4M3 values
    and between two bf16 values, the subnormals, values beyond 448, zeros of both signs, inf."""
    grid8 = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0..448
    grid16 = torch.randint(0, 0x7F7F, (4096,), dtype=torch.int16).view(torch.bfloat16).float()
    ties8 = (grid8[1:] + grid8[:-1]) / 2
    ties16 = grid16 + torch.ldexp(torch.ones_like(grid16),
                                  torch.frexp(grid16)[1] - 9)  # half a bf16 ulp above
    values = torch.cat([grid8, ties8, ties8 * 1.0001, ties8 * 0.9999, grid16, ties16,
                        torch.tensor([0.0, -0.0, 448.0, 449.0, 464.0, 1e6, float("inf"),
                                      2.0**-10, 2.0**-9 * 1.5, 2.0**-12])])
    values = torch.cat([values, -values]).to(DEVICE)
    bf16, e4m3 = torch.empty_like(values), torch.empty_like(values)
    _rounded[(triton.cdiv(values.numel(), 1024),)](values, bf16, e4m3, values.numel(), BLOCK=1024)
    want16 = values.to(torch.bfloat16).float()
    want8 = values.clamp(-448, 448).to(torch.float8_e4m3fn).float()
    assert torch.equal(bf16, want16), values[bf16 != want16][:8]
    assert torch.equal(e4m3, want8), (values[e4m3 != want8][:8], e4m3[e4m3 != want8][:8])
    assert torch.equal(torch.signbit(e4m3), torch.signbit(want8))
    print(f"{values.numel()} values rounded as torch casts them")


def check_compiles_for_hopper() -> None:
    """Both passes of the kernel, for bf16 and fp16 weights, compile to an sm_90 cubin with the
    ptxas Triton ships: what Triton's interpreter lets by, its GPU compiler refuses (a module
    global that is not a ``tl.constexpr`` stopped the first GPU run, 2026-11-26)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from bench.train.paper_adam_kernel import paper_adamw_pass

    pointers = {"grad": "*bf16", "master": "*fp16", "exp_avg": "*fp8e4nv", "exp_avg_sq": "*fp16",
                "offsets": "*i64", "numels": "*i64", "block_tensor": "*i32",
                "block_start": "*i64", "master_scale": "*fp32", "exp_avg_scale": "*fp32",
                "exp_avg_sq_scale": "*fp32", "into": "*fp32", "amax_bits": "*i32"}
    scalars = {"n_tensors": "i32", **dict.fromkeys(("beta1", "one_minus_beta1", "beta2",
                                                    "one_minus_beta2", "eps", "decay",
                                                    "step_size", "bc2_sqrt"), "fp32")}
    constexprs = dict.fromkeys(("STORE", "PARAM_BF16", "BLOCK"), "constexpr")
    for bf16 in (True, False):
        signature = {"param": "*bf16" if bf16 else "*fp16", **pointers, **scalars, **constexprs}
        for store in (False, True):
            source = ASTSource(paper_adamw_pass, signature,
                               constexprs={"STORE": store, "PARAM_BF16": bf16, "BLOCK": BLOCK})
            kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
            assert kernel.asm["cubin"], (bf16, store)
    print("4 variants compiled for sm_90")


def check_state_layout() -> None:
    """5 bytes a parameter in state (fp16 master, E4M3 first moment in one byte with no transposed
    copy, fp16 second moment), one fp32 scale per state and tensor, powers of two; and
    bench.train.memory_parts counts them as master (2 + scale) and moments (3 + two scales)."""
    params = _params()
    opt = PaperAdamW(params, lr=LR)
    generator = torch.Generator().manual_seed(3)
    for _ in range(2):
        for p, g in zip(params, _grads(params, generator), strict=True):
            p.decoupled_grad = g
        opt.step()
    n, tensors = sum(p.numel() for p in params), len(params)
    for p in params:
        state = opt.state[p]
        assert set(state) == set(STATE_NAMES), state.keys()
        assert [state[name].dtype for name in STATE_NAMES] == [
            torch.float16, torch.float8_e4m3fn, torch.float16]
        assert sum(state[name].untyped_storage().nbytes() for name in STATE_NAMES) == 5 * p.numel()
        assert not any(hasattr(state[name], "_transpose") for name in STATE_NAMES)
        for name in STATE_NAMES:
            scale = opt._scales[p][name]
            assert scale.dtype == torch.float32 and scale.shape == (1,)
            mantissa, _ = torch.frexp(scale)
            assert mantissa.item() == 0.5, (name, scale)  # a power of two
    got = measure(params, [opt])
    grads = sum(p.decoupled_grad.untyped_storage().nbytes() for p in params)
    assert got == MemoryParts(parameters=n, weights=2 * n, gradients=grads,
                              master=2 * n + 4 * tensors, moments=3 * n + 8 * tensors), got


def check_refusals() -> None:
    """What PaperAdamW does not do is refused by name, with the fix."""
    p = [torch.zeros(4, dtype=torch.bfloat16)]
    cases = (({"capturable": True}, "--optimizer-cuda-graph"), ({"amsgrad": True}, "AMSGrad"),
             ({"adam_w_mode": False}, "--no-decoupled-weight-decay"),
             ({"bias_correction": False}, "bias correction"),
             ({"master_weight_dtype": torch.float32}, "--main-params-dtype fp16"),
             ({"master_weights": False}, "--main-params-dtype fp16"),
             ({"exp_avg_dtype": torch.float16}, "--exp-avg-dtype fp8"),
             ({"exp_avg_sq_dtype": torch.bfloat16}, "--exp-avg-sq-dtype fp16"),
             ({"block": 1000}, "a power of two"))
    for kwargs, phrase in cases:
        try:
            PaperAdamW(p, **kwargs)
        except ValueError as error:
            assert phrase in str(error), (kwargs, error)
        else:
            raise AssertionError(f"{kwargs} accepted")
    fp32 = torch.zeros(3)
    fp32.decoupled_grad = torch.ones(3)
    strided = torch.zeros(4, 3, dtype=torch.bfloat16).t()
    strided.decoupled_grad = torch.ones(3, 4, dtype=torch.bfloat16)
    mixed = [torch.zeros(3, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.float16)]
    for m in mixed:
        m.decoupled_grad = torch.ones(3, dtype=torch.bfloat16)
    for call, phrase in ((lambda: PaperAdamW([fp32]).step(), "bf16 or fp16 parameters"),
                         (lambda: PaperAdamW([strided]).step(), "contiguous"),
                         (lambda: PaperAdamW(mixed).step(), "a group of their own"),
                         (lambda: PaperAdamW(p).get_unscaled_state(p[0], "exp_avg", True),
                          "skip_unscale"),
                         (lambda: PaperAdamW(p).get_unscaled_state(p[0], "momentum"),
                          "no state 'momentum'")):
        try:
            call()
        except (ValueError, KeyError) as error:
            assert phrase in str(error), error
        else:
            raise AssertionError(f"{phrase}: accepted")


def check_state_dict_roundtrip() -> None:
    """state_dict gives fp32 states (as FusedAdam's); load_state_dict puts them back scaled, and
    the two optimizers then step alike, bit for bit."""
    params = _params()
    opt = PaperAdamW(params, lr=LR, weight_decay=0.1)
    generator = torch.Generator().manual_seed(4)
    for p, g in zip(params, _grads(params, generator), strict=True):
        p.decoupled_grad = g
    opt.step()
    saved = opt.state_dict()
    assert all(v.dtype == torch.float32 for s in saved["state"].values() for v in s.values())
    copies = [p.clone() for p in params]
    other = PaperAdamW(copies, lr=LR, weight_decay=0.1)
    other.load_state_dict(saved)
    grads = _grads(params, generator)
    for a, b, g in zip(params, copies, grads, strict=True):
        a.decoupled_grad, b.decoupled_grad = g, g.clone()
    opt.step()
    other.step()
    for a, b in zip(params, copies, strict=True):
        assert torch.equal(a, b)
        for name in STATE_NAMES:
            assert torch.equal(opt.state[a][name].float(), other.state[b][name].float()), name
            assert torch.equal(opt._scales[a][name], other._scales[b][name]), name


def check_megatron_builds_it() -> None:
    """megatron-core 0.19.2 builds PaperAdamW with the keyword arguments it gives FusedAdam under
    its precision-aware optimizer (``_get_megatron_optimizer_based_on_param_groups``), sets its
    state through its own ``init_state_fn`` (``initialize_state``), and two steps of a tiny GPT's
    bf16 parameters from ``decoupled_grad`` lower the loss. Substitutes, the harness's and not
    the code's, each where megatron-core insists on what this machine lacks: the config is made
    precision-aware after its construction (OptimizerConfig's __post_init__ asks for Transformer
    Engine's FusedAdam, megatron/core/optimizer/optimizer_config.py:450); it is built without the
    distributed optimizer, which takes only CUDA tensors (distrib_optimizer.py:401 and 758 compare
    ``param.type()`` with ``torch.cuda.BFloat16Tensor``), and the FP32Optimizer megatron-core then
    wraps it in, which allocates on CUDA (optimizer.py:1249), is a stand-in that keeps what it is
    given."""
    import megatron.core.optimizer as megatron_optimizer
    from megatron.core.optimizer import OptimizerConfig, _get_megatron_optimizer_based_on_param_groups

    class Wrapper:  # megatron-core's FP32Optimizer(optimizer, config, init_state_fn), kept
        def __init__(self, optimizer, config, init_state_fn) -> None:
            self.optimizer, self.config, self.init_state_fn = optimizer, config, init_state_fn

    megatron_optimizer.FP32Optimizer = Wrapper

    from bench.train.paper_adam import use_paper_adam
    from tests.train.megatron_checks import _build_model

    assert use_paper_adam() == "kit-paper-adamw"
    _, model = _build_model("sdpa", bf16=True)
    model.bfloat16()
    params = [p for p in model.parameters() if p.requires_grad]
    config = OptimizerConfig(optimizer="adam", lr=1e-3, weight_decay=0.01,
                             use_distributed_optimizer=False)
    config.use_precision_aware_optimizer = True
    config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 = True
    config.main_grads_dtype, config.main_params_dtype = torch.bfloat16, torch.float16
    config.exp_avg_dtype, config.exp_avg_sq_dtype = torch.uint8, torch.float16
    wrapped = _get_megatron_optimizer_based_on_param_groups(
        config, [model], [{"params": params, "wd_mult": 1.0, "lr_mult": 1.0}])
    opt = wrapped.optimizer
    assert isinstance(opt, PaperAdamW) and opt.use_decoupled_grad
    opt.block = 2**16  # fewer programs for Triton's interpreter, which runs them one by one
    wrapped.init_state_fn(opt, config)
    assert all(set(opt.state[p]) == set(STATE_NAMES) for p in params)
    losses = []
    for _ in range(3):
        model.zero_grad()
        seq = model.max_sequence_length
        tokens = torch.arange(2 * seq).remainder(16).view(2, seq)
        loss = model(tokens, torch.arange(seq).expand(2, seq), None, labels=tokens).float().mean()
        loss.backward()
        losses.append(loss.item())
        for p in params:
            p.decoupled_grad, p.grad = p.grad, None
        opt.step()
    assert losses[2] < losses[0], losses
    print(f"losses {losses}")


CHECKS = {"against_fp32_adamw": check_against_fp32_adamw, "state_layout": check_state_layout,
          "kernel_matches_torch": check_kernel_matches_torch, "roundings": check_roundings,
          "compiles_for_hopper": check_compiles_for_hopper,
          "refusals": check_refusals, "state_dict_roundtrip": check_state_dict_roundtrip,
          "megatron_builds_it": check_megatron_builds_it}

if __name__ == "__main__":
    name = sys.argv[1]  # the megatron check parses its own argv into sys.argv
    CHECKS[name]()
    print(f"ok {name}")
