"""Fixed-point arithmetic exactly as TFLite's reference kernels do it (int32 accumulators, requantization).

The scalar helpers are numba functions so integer kernels can inline them in their loops.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .jit import njit

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# a scalar of the numba helpers below: a Python int outside numba, an int64 inside (all of numba's integers)
Int64 = int | np.int64


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real ≈ multiplier * 2^(shift - 31), multiplier in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    frac, shift = math.frexp(real)
    q = int(math.copysign(math.floor(abs(frac) * (1 << 31) + 0.5), frac))  # halves away from zero, as TFLite
    if q == (1 << 31):
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        shift, q = 30, (1 << 31) - 1
    return q, shift


def quantize_multipliers(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(reals)]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


@njit(cache=True, inline="always")
def saturating_rounding_doubling_high_mul(a: Int64, b: Int64) -> Int64:
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    ab = np.int64(a) * np.int64(b)
    nudge = np.int64(1 << 30) if ab >= 0 else np.int64(1 - (1 << 30))
    num = ab + nudge
    q = abs(num) // np.int64(1 << 31)  # C division truncates toward zero
    return -q if num < 0 else q


@njit(cache=True, inline="always")
def rounding_divide_by_pot(x: Int64, exponent: Int64) -> Int64:
    mask = np.int64((1 << exponent) - 1)
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


@njit(cache=True, inline="always")
def multiply_by_quantized_multiplier(x: Int64, multiplier: Int64, shift: Int64) -> Int64:
    left = max(0, shift)
    right = 0 if shift > 0 else -shift
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x * (1 << left), multiplier), right)


@njit(cache=True)  # serial: see elementwise._rescale
def requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zero_point: int,
               qmin: int, qmax: int, out: np.ndarray) -> None:
    """out[..., c] = clamp(zp + MBQM(acc[..., c], multiplier[c], shift[c])); acc is (rows, channels) int64."""
    rows, channels = acc.shape
    per_channel = multiplier.size > 1
    for r in range(rows):
        for c in range(channels):
            k = c if per_channel else 0
            v = multiply_by_quantized_multiplier(acc[r, c], multiplier[k], shift[k]) + zero_point
            out[r, c] = min(max(v, qmin), qmax)


def dtype_range(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def activation_range(code: int, scale: float, zero_point: int, dtype: np.dtype) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: the clamp of a fused activation on the quantized grid."""
    qmin, qmax = dtype_range(dtype)

    def q(x: float) -> int:  # as TFLite: divided in float32, halves rounded away from zero
        v = float(np.float32(x) / np.float32(scale))
        return zero_point + int(math.floor(v + 0.5) if v >= 0 else math.ceil(v - 0.5))

    if code == 1:  # RELU
        return max(qmin, q(0.0)), qmax
    if code == 3:  # RELU6
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if code == 2:  # RELU_N1_TO_1
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    return qmin, qmax


def quantize(x: np.ndarray, scale: ArrayLike, zero_point: ArrayLike, dtype: np.dtype,
             axis: int | None = None) -> np.ndarray:
    """Float -> integer, rounding half away from zero as TFLite does, saturating."""
    qmin, qmax = dtype_range(dtype)
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point, np.int64)
    if scale.size == 1:  # one pass instead of numpy's ten (this runs at every int8 model's output)
        out = np.empty(np.shape(x), dtype)
        _quantize_flat(np.ascontiguousarray(x, np.float32).reshape(-1), np.float32(scale.reshape(-1)[0]),
                       int(zero_point.reshape(-1)[0]), qmin, qmax, out.reshape(-1))
        return out
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = scale.size
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    v = np.round(x.astype(np.float32) / scale)  # numpy rounds half to even: fix the ties below
    exact = x.astype(np.float32) / scale
    ties = np.abs(exact - np.trunc(exact)) == 0.5
    v = np.where(ties, np.trunc(exact) + np.sign(exact), v)
    return np.clip(v + zero_point, qmin, qmax).astype(dtype)


@njit(cache=True)
def _quantize_flat(x: np.ndarray, scale: np.float32, zero_point: int, qmin: int, qmax: int, out: np.ndarray) -> None:
    for i in range(x.size):
        e = x[i] / scale  # float32, as numpy's path above
        t = np.float32(np.trunc(e))
        v = t + np.float32(np.sign(e)) if abs(e - t) == np.float32(0.5) else np.float32(np.round(e))
        if v != v:  # NaN: TFLite's cast of round(NaN) to int32 gives INT32_MIN, which saturates to qmin
            out[i] = qmin
            continue
        out[i] = min(max(v + zero_point, qmin), qmax)


def dequantize(q: np.ndarray, scale: ArrayLike, zero_point: ArrayLike, axis: int | None = None) -> np.ndarray:
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point, np.int64)
    if scale.size == 1:  # one pass instead of numpy's four (this runs at every int8 model's input)
        out = np.empty(np.shape(q), np.float32)
        _dequantize_flat(np.ascontiguousarray(q).reshape(-1), np.float64(scale.reshape(-1)[0]),
                         int(zero_point.reshape(-1)[0]), out.reshape(-1))
        return out
    if axis is not None:
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    return ((q.astype(np.int64) - zero_point) * scale.astype(np.float64)).astype(np.float32)


@njit(cache=True)
def _dequantize_flat(q: np.ndarray, scale: np.float64, zero_point: int, out: np.ndarray) -> None:
    for i in range(q.size):
        out[i] = np.float32((np.int64(q[i]) - zero_point) * scale)  # int64, then float64, as numpy's path
