"""Hybrid (dynamic-range) arithmetic: float activations times int8 weights, as TFLite's tensor_utils does it.

Each row of activations (one batch entry) is quantized on the fly to int8 — symmetric (scale = max|x| / 127,
values in [-127, 127]) or, with ``asymmetric_quantize_inputs``, asymmetric over [-128, 127] with a zero
point — the product with the int8 weights is accumulated in int32, and the float result gains
``float(acc - zero_point * row_sum(weights)) * (row_scale * weight_scale)``, all in float32 like TFLite.
"""

from __future__ import annotations

import numpy as np

from .jit import njit


@njit(cache=True)
def _round_half_away(v):
    return np.floor(v + 0.5) if v >= 0 else -np.floor(-v + 0.5)


@njit(cache=True)
def _quantize_rows_symmetric(x, q, scales):
    for b in range(x.shape[0]):
        lo, hi = np.float32(0.0), np.float32(0.0)
        if x.shape[1]:
            lo, hi = x[b].min(), x[b].max()
        value_range = max(abs(lo), abs(hi))
        if value_range == 0:
            q[b, :] = 0
            scales[b] = np.float32(1.0)
            continue
        scales[b] = value_range / np.float32(127.0)
        inv = np.float32(127.0) / value_range
        for i in range(x.shape[1]):
            v = np.int64(_round_half_away(np.float32(x[b, i] * inv)))
            q[b, i] = min(127, max(-127, v))


@njit(cache=True)
def _quantize_rows_asymmetric(x, q, scales, zero_points):
    for b in range(x.shape[0]):
        rmin = min(0.0, np.float64(x[b].min())) if x.shape[1] else 0.0
        rmax = max(0.0, np.float64(x[b].max())) if x.shape[1] else 0.0
        if rmin == rmax:
            q[b, :] = 0
            scales[b] = np.float32(1.0)
            zero_points[b] = 0
            continue
        scale = (rmax - rmin) / 255.0
        from_min, from_max = -128.0 - rmin / scale, 127.0 - rmax / scale
        zp_double = from_min if 128.0 + abs(rmin / scale) < 127.0 + abs(rmax / scale) else from_max
        zp = int(_round_half_away(min(max(zp_double, -128.0), 127.0)))
        scales[b] = np.float32(scale)
        zero_points[b] = zp
        inv = np.float32(1.0) / np.float32(scale)
        for i in range(x.shape[1]):
            v = np.int64(_round_half_away(np.float32(np.float32(zp) + np.float32(x[b, i] * inv))))
            q[b, i] = min(127, max(-128, v))


def quantize_rows(x: np.ndarray, asymmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: [rows, n] float32 -> (int32 values, float32 scale per row, int32 zero point per row)."""
    x = np.ascontiguousarray(x, np.float32)
    q = np.empty(x.shape, np.int32)
    scales = np.empty(x.shape[0], np.float32)
    zero_points = np.zeros(x.shape[0], np.int32)
    if asymmetric:
        _quantize_rows_asymmetric(x, q, scales, zero_points)
    else:
        _quantize_rows_symmetric(x, q, scales)
    return q, scales, zero_points


def accumulate(out: np.ndarray, x: np.ndarray, weights: np.ndarray, weight_scale: float | np.ndarray,
               asymmetric: bool) -> None:
    """out[b, r] += sum_i x[b, i] * w[r, i] the hybrid way; out: [rows, units] float32, weights [units, n]
    int8 (symmetric), weight_scale per tensor or per output row. A zero activation tensor adds nothing,
    as TFLite skips it."""
    if not np.any(x):
        return
    q, scales, zero_points = quantize_rows(x, asymmetric)
    w = weights.astype(np.int32)
    acc = q @ w.T
    if asymmetric:
        acc -= zero_points[:, None] * w.sum(axis=1)[None, :]
    # TFLite: scaling_factor[b] *= weight_scale (float32), then result += float(acc) * scale (per channel: the
    # row's scale times the channel's).
    ws = np.asarray(weight_scale, np.float32)
    scale = (scales * ws)[:, None] if ws.size == 1 else scales[:, None] * ws[None, :]
    out += acc.astype(np.float32) * scale.astype(np.float32)
