"""L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION over the last dimension, as TFLite computes them.

Float sums run in float32 in TFLite's order. Quantized L2 normalization follows TFLite's integer kernels: the
sum of squared differences from the zero point, its inverse square root as a fixed-point multiplier found by
Newton-Raphson in gemmlowp's Q3 format (GetInvSqrtQuantizedMultiplierExp), and a rescale to the fixed output
scale of 1/128.
"""

from __future__ import annotations

import numpy as np

from .jit import njit
from .quant import (
    INT32_MAX,
    INT32_MIN,
    multiply_by_quantized_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)


@njit(cache=True, inline="always")
def _saturating_shift_left(x: int, exponent: int) -> int:
    """gemmlowp's SaturatingRoundingMultiplyByPOT for a positive exponent on int32."""
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return INT32_MAX
    if x < -threshold:
        return INT32_MIN
    return x << exponent


@njit(cache=True, inline="always")
def _wrap32(x: int) -> int:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@njit(cache=True)
def inv_sqrt_multiplier(x: int) -> tuple[int, int]:
    """(multiplier, shift) with 1/sqrt(x) ~ multiplier * 2^(shift - 31), shift <= 0: TFLite's
    GetInvSqrtQuantizedMultiplierExp with reverse_shift -1."""
    if x <= 1:
        return INT32_MAX, 0
    shift = 11
    while x >= (1 << 29):
        x //= 4
        shift += 1
    leading_zeros = 0
    while (x << leading_zeros) < (1 << 31):
        leading_zeros += 1
    pairs = (leading_zeros - 1) // 2 - 1
    shift -= pairs
    x <<= 2 * pairs
    half_input = rounding_divide_by_pot(x >> 1, 1)  # x / 2 in Q3
    half_three = (1 << 28) + (1 << 27)  # 1.5 in Q3
    y = 1 << 28  # 1.0 in Q3: the starting guess
    for _ in range(5):
        cube = _saturating_shift_left(int(saturating_rounding_doubling_high_mul(
            int(saturating_rounding_doubling_high_mul(y, y)), y)), 6)
        y = _saturating_shift_left(_wrap32(int(saturating_rounding_doubling_high_mul(half_three, y))
                                           - int(saturating_rounding_doubling_high_mul(half_input, cube))), 3)
    y = int(saturating_rounding_doubling_high_mul(y, 1518500250))  # times sqrt(2) / 2 in Q0
    if shift < 0:
        y <<= -shift
        shift = 0
    return y, -shift


@njit(cache=True)
def l2_normalize_float(x: np.ndarray, epsilon: np.float32, out: np.ndarray) -> None:
    rows, depth = x.shape
    for r in range(rows):
        total = np.float32(0.0)
        for c in range(depth):
            total += x[r, c] * x[r, c]
        norm = max(np.float32(np.sqrt(total)), epsilon)
        for c in range(depth):
            out[r, c] = x[r, c] / norm


@njit(cache=True)
def l2_normalize_quantized(x: np.ndarray, zero_point: int, unsigned: bool, out: np.ndarray) -> None:
    """int8: out = MBQM(x - zp, inv_sqrt, shift + 7); uint8: out = 128 + MBQM(128 * (x - zp), inv_sqrt,
    shift). Both land on the output grid of scale 1/128 and are clamped to the type's range."""
    rows, depth = x.shape
    for r in range(rows):
        total = 0
        for c in range(depth):
            d = int(x[r, c]) - zero_point
            total += d * d
        multiplier, shift = inv_sqrt_multiplier(_wrap32(total))
        for c in range(depth):
            d = int(x[r, c]) - zero_point
            if unsigned:
                v = 128 + multiply_by_quantized_multiplier(128 * d, multiplier, shift)
                out[r, c] = min(max(v, 0), 255)
            else:
                v = multiply_by_quantized_multiplier(d, multiplier, shift + 7)
                out[r, c] = min(max(v, -128), 127)


@njit(cache=True)
def local_response_normalize(x: np.ndarray, radius: int, bias: np.float32, alpha: np.float32,
                             beta: np.float32, out: np.ndarray) -> None:
    """TFLite's optimized kernel (its default): the window [c - radius, c + radius], summed as a running
    float32 sum of alpha * x^2 that adds the element entering and drops the one leaving, then
    x * (bias + sum)^-beta (beta 1 and 0.5 as a division by the value or its square root)."""
    rows, depth = x.shape
    padded = np.zeros(depth + 2 * radius, np.float32)
    for r in range(rows):
        for c in range(depth):
            padded[radius + c] = x[r, c] * x[r, c] * alpha
        running = np.float32(0.0)
        for i in range(2 * radius):
            running += padded[i]
        for c in range(depth):
            running += padded[c + 2 * radius]
            scale = bias + running
            running -= padded[c]
            if beta == np.float32(1.0):
                out[r, c] = x[r, c] * (np.float32(1.0) / scale)
            elif beta == np.float32(0.5):
                out[r, c] = x[r, c] * (np.float32(1.0) / np.float32(np.sqrt(scale)))
            else:
                out[r, c] = x[r, c] * np.float32(scale ** -beta)
