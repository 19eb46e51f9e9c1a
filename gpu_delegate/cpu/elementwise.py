"""Elementwise CPU kernels: float math on numpy ufuncs, 8-bit integer arithmetic as TFLite's integer
kernels do it (fixed-point multipliers, lookup tables built the way TFLite builds them).

Integer intermediates are int64 arrays, so each numba kernel here has a single type specialization.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from ..graph import ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1
from .jit import njit
from .normalization import inv_sqrt_multiplier
from .quant import INT32_MAX, INT32_MIN, dtype_range, multiply_by_quantized_multiplier, quantize_multiplier

# -- fixed point ----------------------------------------------------------------------------------------

# Serial on purpose, like requantize: ~1 ns an element, while a numba parallel region (OpenMP layer) was
# seen to cost 8 ms when other processes kept both cores busy (int8 MobileNetV2's ADDs: 190 ms an invoke).
@njit(cache=True)
def _rescale(x: np.ndarray, multiplier: int, shift: int, offset: int, lo: int, hi: int, out: np.ndarray) -> None:
    for i in range(x.size):
        v = multiply_by_quantized_multiplier(x[i], multiplier, shift) + offset
        out[i] = min(max(v, lo), hi)


def rescale(x: np.ndarray, multiplier: int, shift: int, offset: int = 0, lo: int = INT32_MIN,
            hi: int = INT32_MAX) -> np.ndarray:
    """clamp(offset + MultiplyByQuantizedMultiplier(x, multiplier, shift), lo, hi) elementwise, as int64."""
    flat = np.ascontiguousarray(x, np.int64).reshape(-1)
    out = np.empty_like(flat)
    _rescale(flat, int(multiplier), int(shift), int(offset), int(lo), int(hi), out)
    return out.reshape(np.shape(x))


def round_half_away(x: ArrayLike) -> np.ndarray:
    """C's round(): halves go away from zero (numpy's round goes to even). In float64, where x + 0.5 is
    exact for any float32 x."""
    x = np.asarray(x, np.float64)
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


def f32(x: float | np.floating) -> np.float32:
    """A float32 scalar: TFLite computes many multipliers in float, not double, and we must round alike."""
    return np.float32(x)


def add_sub_q8(a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
               qo: tuple[float, int], subtract: bool, lo: int, hi: int) -> np.ndarray:
    """8-bit ADD/SUB as TFLite's reference kernel: both inputs brought to a common scale with 20 bits of
    headroom, summed in int32, then scaled to the output. SUB negates the second input's multiplier."""
    left_shift = 20
    twice_max = float(2 * max(f32(qa[0]), f32(qb[0])))
    m1, s1 = quantize_multiplier(float(f32(qa[0])) / twice_max)
    m2, s2 = quantize_multiplier(float(f32(qb[0])) / twice_max)
    mo, so = quantize_multiplier(twice_max / float(f32((1 << left_shift) * f32(qo[0]))))
    if subtract:
        m2 = -m2
    sa = rescale((a.astype(np.int64) - qa[1]) << left_shift, m1, s1)
    sb = rescale((b.astype(np.int64) - qb[1]) << left_shift, m2, s2)
    return rescale(sa + sb, mo, so, qo[1], lo, hi)


def mul_q8(a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
           qo: tuple[float, int], lo: int, hi: int) -> np.ndarray:
    """8-bit MUL as TFLite: the product of zero-point-free inputs, scaled by s_a*s_b/s_o (in float)."""
    m, s = quantize_multiplier(float(f32(qa[0]) * f32(qb[0]) / f32(qo[0])))
    raw = (a.astype(np.int64) - qa[1]) * (b.astype(np.int64) - qb[1])
    return rescale(raw, m, s, qo[1], lo, hi)


def squared_difference_q8(a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
                          qo: tuple[float, int]) -> np.ndarray:
    """int8 SQUARED_DIFFERENCE as TFLite: like ADD with 7 bits of headroom, the difference squared in int32."""
    lo, hi = dtype_range(np.dtype(np.int8))
    left_shift = 7
    twice_max = float(2 * max(f32(qa[0]), f32(qb[0])))
    m1, s1 = quantize_multiplier(float(f32(qa[0])) / twice_max)
    m2, s2 = quantize_multiplier(float(f32(qb[0])) / twice_max)
    mo, so = quantize_multiplier(twice_max * twice_max / float(f32((1 << 2 * left_shift) * f32(qo[0]))))
    sa = rescale((a.astype(np.int64) - qa[1]) << left_shift, m1, s1)
    sb = rescale((b.astype(np.int64) - qb[1]) << left_shift, m2, s2)
    d = sa - sb
    return rescale(d * d, mo, so, qo[1], lo, hi)


def compare_scaled_q8(x: np.ndarray, q: tuple[float, int]) -> np.ndarray:
    """TFLite's comparison ops bring 8-bit inputs with different quantizations to a common fixed-point
    scale (8 bits of headroom, multiplied by the input's scale) before comparing them."""
    m, s = quantize_multiplier(float(f32(q[0])))
    return rescale((x.astype(np.int64) - q[1]) << 8, m, s)


# -- lookup tables for 8-bit unary ops ------------------------------------------------------------------

def codes(dtype: np.dtype) -> np.ndarray:
    """Every value of an 8-bit type, in order, as int64."""
    lo, hi = dtype_range(dtype)
    return np.arange(lo, hi + 1, dtype=np.int64)


def float_lut(fn: Callable[[np.ndarray], np.ndarray], qi: tuple[float, int], qo: tuple[float, int],
              dtype: np.dtype) -> np.ndarray:
    """TFLite's PopulateLookupTable: dequantize every code, apply ``fn`` in float32, requantize."""
    lo, hi = dtype_range(dtype)
    x = f32(qi[0]) * (codes(dtype) - qi[1]).astype(np.float32)
    with np.errstate(all="ignore"):
        y = np.asarray(fn(x), np.float32) * (f32(1) / f32(qo[0]))
        q = round_half_away(y).astype(np.float64) + qo[1]
    # NaN (log or sqrt of a negative) converts to INT32_MIN in C, so it saturates low
    return np.clip(np.nan_to_num(q, nan=lo), lo, hi).astype(np.int64)


def sqrt_lut(qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
    """TFLite's 8-bit SQRT: sqrt in float32, divided by the output scale and truncated (not rounded)."""
    lo, hi = dtype_range(dtype)
    x = f32(qi[0]) * (codes(dtype) - qi[1]).astype(np.float32)
    with np.errstate(invalid="ignore"):
        q = np.trunc(np.sqrt(x) / f32(qo[0])).astype(np.float64) + qo[1]
    return np.clip(np.nan_to_num(q, nan=lo), lo, hi).astype(np.int64)


def abs_lut(qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
    """TFLite's 8-bit ABS (AbsEvalQuantized): |code - zp_in| moved to the output zero point, rescaled in fixed
    point by s_in / s_out (their float32 quotient) when the scales differ."""
    lo, hi = dtype_range(dtype)
    value = np.abs(codes(dtype) - qi[1])
    if f32(qi[0]) == f32(qo[0]):
        return np.clip(value + qo[1], lo, hi)
    multiplier, shift = quantize_multiplier(float(f32(qi[0]) / f32(qo[0])))
    return rescale(value, multiplier, shift, qo[1], lo, hi)


def rsqrt_lut(qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
    """TFLite's int8 RSQRT in fixed point (RsqrtEvalQuantized): 1/sqrt(code - zp) as gemmlowp's Newton-Raphson
    multiplier, scaled up by 2^20, then rescaled by 1 / (sqrt(s_in) * s_out) (float32 product, as there); the
    zero point itself maps to the largest code. Codes below the zero point, which TFLite refuses at invoke, give
    the largest code too."""
    lo, hi = dtype_range(dtype)
    multiplier, shift = quantize_multiplier(1.0 / float(np.sqrt(f32(qi[0])) * f32(qo[0])))
    values = codes(dtype) - qi[1]
    scaled = np.zeros_like(values)  # 1/sqrt(value) * 2^20, for the positive values
    for k in np.flatnonzero(values > 0).tolist():
        inv_sqrt, inv_shift = inv_sqrt_multiplier(int(values[k]))
        scaled[k] = multiply_by_quantized_multiplier(1, inv_sqrt, inv_shift + 20)
    return np.where(values > 0, rescale(scaled, multiplier, shift - 20, qo[1], lo, hi), hi)


def _srdhm16(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16."""
    if a == b == -32768:
        return 32767
    ab = a * b
    num = ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14))
    return int(num / (1 << 15))  # C division truncates toward zero; |num| < 2^31, exact in a double


def _rounding_divide_by_pot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if (x & mask) > threshold else 0)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier then TFLite's DownScaleInt32ToInt16Multiplier."""
    m, shift = quantize_multiplier(real)
    return (32767 if m >= INT32_MAX - (1 << 15) else (m + (1 << 15)) >> 16), shift


def hard_swish_lut(qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
    """TFLite's reference 8-bit HARD_SWISH, a 16-bit fixed-point computation, for every input code."""
    lo, hi = dtype_range(dtype)
    hires_scale = f32(1.0 / 128.0) * f32(qi[0])
    out_m, out_exp = _int16_multiplier(float(hires_scale / f32(qo[0])))
    relu_m, relu_exp = _int16_multiplier(float(hires_scale / f32(3.0 / 32768.0)))
    table = []
    for code in codes(dtype).tolist():
        hires = (code - qi[1]) * 128
        preshift_out = _srdhm16(hires, out_m)
        reluish = hires
        if relu_exp > 0:
            reluish = max(-32768, min(32767, reluish * (1 << (relu_exp - 1))))
        reluish = _srdhm16(reluish, relu_m)
        if relu_exp > 0:
            reluish = max(-32768, min(32767, reluish * 2))
        elif relu_exp < 0:
            reluish = _rounding_divide_by_pot(reluish, -relu_exp)
        reluish = (reluish + (1 << 15)) >> 1
        # SaturatingDoublingHighMul: like _srdhm16 but truncating instead of rounding
        pre = 32767 if reluish == preshift_out == -32768 else int(reluish * preshift_out / (1 << 15))
        out = _rounding_divide_by_pot(pre, -out_exp) + qo[1]
        table.append(min(max(out, lo), hi))
    return np.array(table, np.int64)


def apply_lut(table: np.ndarray, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """table[x - min(dtype)], the result in ``dtype``."""
    lo, _ = dtype_range(x.dtype)
    return table.astype(dtype)[x.astype(np.int64) - lo]


# -- float math -------------------------------------------------------------------------------------------

def fused_clamp(x: np.ndarray, code: int) -> np.ndarray:
    """The fused activation of ADD/SUB/MUL/DIV as TFLite's kernels apply it: a clamp for RELU, RELU6 and
    RELU_N1_TO_1; any other code (TANH, SIGN_BIT) leaves the result alone, as CalculateActivationRange does."""
    if code == ACT_RELU:
        return np.maximum(x, 0)
    if code == ACT_RELU6:
        return np.clip(x, 0, 6)
    if code == ACT_RELU_N1_TO_1:
        return np.clip(x, -1, 1)
    return x


def logistic(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in x's precision (the LOGISTIC op runs it with floating-point errors ignored: exp overflows
    for x below about -88, to a result of 0)."""
    return 1 / (1 + np.exp(-x))


def elu(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, np.expm1(np.minimum(x, 0)), x).astype(x.dtype)


def hard_swish(x: np.ndarray) -> np.ndarray:
    return (x * np.clip(x + 3, 0, 6) / 6).astype(x.dtype)


@njit(cache=True)
def _gelu_exact(x: np.ndarray, out: np.ndarray) -> None:
    for i in range(x.size):
        v = np.float64(x[i])
        out[i] = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))


def gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    if approximate:
        k = np.float32(math.sqrt(2 / math.pi))
        return (0.5 * x * (1 + np.tanh(k * (x + np.float32(0.044715) * x * x * x)))).astype(x.dtype)
    flat = np.ascontiguousarray(x, np.float32).reshape(-1)
    out = np.empty_like(flat)
    _gelu_exact(flat, out)
    return out.reshape(x.shape).astype(x.dtype)


def truncate_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division (toward zero), as TFLite's integer DIV does it."""
    q = np.floor_divide(a, b)
    return np.where((q < 0) & (q * b != a), q + 1, q).astype(np.result_type(a, b))
