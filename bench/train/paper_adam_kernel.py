"""PaperAdamW's step as one Triton kernel, launched twice over every tensor of a parameter group.

A state's new scale is a power of two from its amax *after* the update, so a one-pass kernel would
have to keep the updated fp32 values until every block is done (16 bytes an element). Instead:

- pass 1 (``STORE=False``) reads each element's gradient and states, computes the AdamW update in
  fp32 registers and only folds the updated master and moments into per-tensor amaxes (atomic max
  on the fp32 bits as int32: order-preserving for non-negative floats, and a NaN, whose bits are
  above inf's, wins);
- the host-side torch code turns the amaxes into the new scales on the device (no host sync);
- pass 2 (``STORE=True``) reads the same inputs, recomputes the same values and writes the model's
  weight, the fp16 master and the fp8/fp16 moments with the new scales.

21 bytes of memory traffic an element (7 read twice, 7 written), no temporaries, two launches a
group whatever its tensor count. Tensors are addressed as element offsets from the first tensor of
each list (one table, built once per layout), so one launch covers tensors of separate allocations.

The kernel rounds to the stored format itself (round to nearest even at bf16's and E4M3's precision,
saturating at E4M3's 448) so that the final cast is exact: the stored bytes are the same on the GPU
and under Triton's CPU interpreter (``TRITON_INTERPRET=1``), where the tests run it and whose own
fp32 -> bf16/fp8 casts truncate. fp16's cast is exact round-to-nearest in both.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024
FP16_MAX = tl.constexpr(65504.0)
E4M3_MAX = tl.constexpr(448.0)
RINT_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2^23: x + it - it rounds |x| < 2^22 to an integer, ties to even


@triton.jit
def _keep_nan(x, rounded):
    return tl.where(x != x, x, rounded)


@triton.jit
def round_bf16(x):
    """x rounded to nearest even at bf16's 8 significant bits, still fp32 (inf stays inf)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return _keep_nan(x, bits.to(tl.float32, bitcast=True))


@triton.jit
def round_e4m3(x):
    """x saturated to +-448 and rounded to nearest even on E4M3's grid (3 mantissa bits, subnormals
    below 2^-6), still fp32."""
    y = tl.minimum(tl.maximum(x, -E4M3_MAX), E4M3_MAX)
    bits = y.to(tl.int32, bitcast=True)
    exponent = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)
    up = ((130 - exponent) << 23).to(tl.float32, bitcast=True)  # 2^(3 - e): |y| * up < 16
    down = ((124 + exponent) << 23).to(tl.float32, bitcast=True)  # 2^(e - 3)
    magnitude = ((y * up + RINT_MAGIC) - RINT_MAGIC) * down
    # The sign bit put back: a negative value that rounds to zero is -0, as torch's cast gives it.
    signed = magnitude.to(tl.int32, bitcast=True) | (bits & -2147483648)
    return _keep_nan(x, signed.to(tl.float32, bitcast=True))


@triton.jit
def _saturate(x, limit):
    return _keep_nan(x, tl.minimum(tl.maximum(x, -limit), limit))


@triton.jit
def _abs_bits_max(x, mask):
    return tl.max(tl.where(mask, x.to(tl.int32, bitcast=True) & 0x7FFFFFFF, 0), 0)


@triton.jit
def paper_adamw_pass(param, grad, master, exp_avg, exp_avg_sq,
                     offsets, numels, block_tensor, block_start,
                     master_scale, exp_avg_scale, exp_avg_sq_scale, into, amax_bits,
                     n_tensors, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay,
                     step_size, bc2_sqrt,
                     STORE: tl.constexpr, PARAM_BF16: tl.constexpr, BLOCK: tl.constexpr):
    """One block of one tensor. ``offsets`` [5, T]: element offsets of tensor t from ``param``,
    ``grad``, ``master``, ``exp_avg`` and ``exp_avg_sq``; the three ``*_scale`` [T]: the stored
    states' factors (true = stored * scale); ``into`` [3, T]: pass 2's new factors (stored = true *
    into); ``amax_bits`` [3, T]: pass 1's amaxes."""
    b = tl.program_id(0)
    t = tl.load(block_tensor + b)
    idx = tl.load(block_start + b) + tl.arange(0, BLOCK)
    mask = idx < tl.load(numels + t)
    g = tl.load(grad + tl.load(offsets + n_tensors + t) + idx, mask=mask, other=0.0).to(tl.float32)
    w_ptr = master + tl.load(offsets + 2 * n_tensors + t) + idx
    m_ptr = exp_avg + tl.load(offsets + 3 * n_tensors + t) + idx
    v_ptr = exp_avg_sq + tl.load(offsets + 4 * n_tensors + t) + idx
    w = tl.load(w_ptr, mask=mask, other=0.0).to(tl.float32) * tl.load(master_scale + t)
    m = tl.load(m_ptr, mask=mask, other=0.0).to(tl.float32) * tl.load(exp_avg_scale + t)
    v = tl.load(v_ptr, mask=mask, other=0.0).to(tl.float32) * tl.load(exp_avg_sq_scale + t)
    m = beta1 * m + one_minus_beta1 * g
    v = beta2 * v + one_minus_beta2 * (g * g)
    w = decay * w - step_size * (m / (tl.sqrt(v) / bc2_sqrt + eps))
    if STORE:
        p_ptr = param + tl.load(offsets + t) + idx
        if PARAM_BF16:
            tl.store(p_ptr, round_bf16(w).to(tl.bfloat16), mask=mask)
        else:
            tl.store(p_ptr, w.to(tl.float16), mask=mask)
        into_w = tl.load(into + t)
        into_m = tl.load(into + n_tensors + t)
        into_v = tl.load(into + 2 * n_tensors + t)
        tl.store(w_ptr, _saturate(w * into_w, FP16_MAX).to(tl.float16), mask=mask)
        tl.store(m_ptr, round_e4m3(m * into_m).to(tl.float8e4nv), mask=mask)
        tl.store(v_ptr, _saturate(v * into_v, FP16_MAX).to(tl.float16), mask=mask)
    else:
        tl.atomic_max(amax_bits + t, _abs_bits_max(w, mask))
        tl.atomic_max(amax_bits + n_tensors + t, _abs_bits_max(m, mask))
        tl.atomic_max(amax_bits + 2 * n_tensors + t, _abs_bits_max(v, mask))
