"""Reduction CPU kernels: quantized MEAN/SUM as TFLite's reference kernels compute them, 8-bit SOFTMAX
with TFLite's float lookup table, and the float softmax / cumsum / top-k formulas."""

from __future__ import annotations

import numpy as np

from .elementwise import f32, rescale
from .jit import njit
from .quant import dtype_range, quantize_multiplier


def trunc_divide(a: np.ndarray, n: int) -> np.ndarray:
    """C integer division by a positive n (rounds toward zero)."""
    return np.where(a >= 0, a // n, -((-a) // n))


def _sum_rescale(x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
                 qo: tuple[float, int], mean: bool) -> np.ndarray:
    """TFLite's integer QuantizedMeanOrSum: the zero-point-free int32 sum of the codes, rescaled by
    s_in/s_out in fixed point; for a mean the multiplier also absorbs 1/n (with as many extra bits of
    precision as n has, at most 32)."""
    lo, hi = dtype_range(x.dtype)
    (si, zi), (so, zo) = qi, qo
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = x.sum(axis=axes, keepdims=keep, dtype=np.int64)
    if n == 0:
        return np.zeros(total.shape, x.dtype)
    m, s = quantize_multiplier(float(np.float64(f32(si)) / np.float64(f32(so))))
    if mean:
        extra = min(n.bit_length() - 1, 32, 31 + s)
        m, s = (m << extra) // n, s - extra
    shifted = (total - zi * n).astype(np.int32).astype(np.int64)  # TFLite keeps the sum in int32
    return rescale(shifted, m, s, zo, lo, hi).astype(x.dtype)


def mean_q(x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
           qo: tuple[float, int]) -> np.ndarray:
    """Quantized MEAN as TFLite's reference kernel."""
    return _sum_rescale(x, axes, keep, qi, qo, mean=True)


def sum_q(x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
          qo: tuple[float, int]) -> np.ndarray:
    """Quantized SUM as TFLite's reference kernel, saturated to the output type."""
    return _sum_rescale(x, axes, keep, qi, qo, mean=False)


@njit(cache=True)
def _softmax_lut(x: np.ndarray, table: np.ndarray, out_scale: np.float32, zero_point: int, lo: int, hi: int,
                 half_up: bool, out: np.ndarray) -> None:
    rows, n = x.shape
    for r in range(rows):
        mx = x[r, 0]
        for j in range(1, n):
            mx = max(mx, x[r, j])
        total = np.float32(0.0)
        for j in range(n):
            total += table[255 - mx + x[r, j]]
        inv = np.float32(1.0) / (total * out_scale)
        for j in range(n):
            p = table[255 - mx + x[r, j]] * inv
            if half_up:
                q = np.int64(p + np.float32(0.5))
            else:
                q = np.int64(np.floor(p + 0.5)) if p >= 0 else np.int64(np.ceil(p - 0.5))
            out[r, j] = min(max(q + zero_point, lo), hi)


def softmax_q8(x: np.ndarray, in_scale: float, beta: float, qo: tuple[float, int],
               out_dtype: np.dtype) -> np.ndarray:
    """8-bit SOFTMAX over the last axis as TFLite's optimized kernel: exp(-s*beta*d) of every code
    distance d from the row's maximum comes from a float32 table, the sum is float32."""
    if x.size == 0:
        return np.zeros(x.shape, out_dtype)
    table = np.exp(-f32(in_scale) * f32(beta) * np.arange(255, -1, -1, dtype=np.float32)).astype(np.float32)
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    out = np.empty_like(rows)
    lo, hi = dtype_range(out_dtype)
    # x86 TFLite rounds uint8 probabilities as int(p + 0.5f), the others with round()
    _softmax_lut(rows, table, f32(qo[0]), int(qo[1]), lo, hi, out_dtype == np.uint8, out)
    return out.reshape(x.shape).astype(out_dtype)


def softmax(x: np.ndarray, beta: float) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    e = np.exp((x - x.max(axis=-1, keepdims=True)) * np.asarray(beta, x.dtype))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    d = x - x.max(axis=-1, keepdims=True)
    return d - np.log(np.exp(d).sum(axis=-1, keepdims=True))


def cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """Running sums along ``axis`` in x's dtype, in order (as TFLite accumulates)."""
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        out = np.moveaxis(out, axis, 0)
        out = np.concatenate([np.zeros_like(out[:1]), out[:-1]])
        out = np.moveaxis(out, 0, axis)
    return np.flip(out, axis) if reverse else out


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest entries along the last axis, largest first, ties in index order, and their indices."""
    n = x.shape[-1]
    # a stable ascending sort of the reversed row, read backwards, is a descending sort with ties by index
    order = n - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
    return np.take_along_axis(x, order, axis=-1), order
