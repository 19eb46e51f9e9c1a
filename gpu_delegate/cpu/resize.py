"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR on NHWC tensors, with TFLite's index arithmetic.

The source coordinates of every output row and column are computed once per call in numpy; the numba loops
only blend the four neighbours. Quantized bilinear follows TFLite's builtin kernels, which differ by type:
int8 and int16 interpolate in fixed point with 10 fractional bits (ResizeBilinearInteger), uint8 goes through
the float formula and rounds. (LiteRT's default XNNPACK delegate uses 11-bit weights instead, so against it
a few percent of values land one step away.) Integer tensors are widened to int32 first so one kernel
serves int8 and int16.
"""

from __future__ import annotations

import numpy as np

from .jit import njit, prange


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def bilinear_coords(in_size: int, out_size: int, align_corners: bool,
                    half_pixel: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, weight of the upper one) per output position, in float32 like TFLite's
    ComputeInterpolationValues. The weight may fall outside [0, 1] at a clamped border; lower == upper there,
    so the two weights still add up to one."""
    scale = _scale(in_size, out_size, align_corners)
    v = np.arange(out_size, dtype=np.float32)
    pos = (v + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else v * scale
    lo = np.maximum(np.floor(pos).astype(np.int64), 0)
    hi = np.minimum(np.ceil(pos).astype(np.int64), in_size - 1)
    return lo, hi, (pos - lo.astype(np.float32)).astype(np.float32)


def _c_div(a: np.ndarray, b: int) -> np.ndarray:
    """C integer division: truncates toward zero."""
    return np.sign(a) * (np.abs(a) // b)


def bilinear_coords_fixed(in_size: int, out_size: int, align_corners: bool,
                          half_pixel: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TFLite's ComputeInterpolationValuesInteger: positions with 10 fractional bits."""
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * in_size + out_size // 2) // out_size
    v = np.arange(out_size, dtype=np.int64)
    pos = v * scale + scale // 2 - (1 << 9) if half_pixel else v * scale
    lo = np.maximum(_c_div(pos, 1 << 10), 0)
    hi = np.minimum(_c_div(pos + (1 << 10) - 1, 1 << 10), in_size - 1)
    return lo, hi, pos - (lo << 10)


@njit(cache=True, parallel=True)
def _bilinear_float(x: np.ndarray, y0: np.ndarray, y1: np.ndarray, wy: np.ndarray, x0: np.ndarray, x1: np.ndarray,
                    wx: np.ndarray, out: np.ndarray) -> None:
    batches, _, _, channels = x.shape
    out_h, out_w = y0.size, x0.size
    one = np.float32(1.0)
    for r in prange(batches * out_h):
        b, oy = r // out_h, r % out_h
        ya, yb, dy = y0[oy], y1[oy], wy[oy]
        for ox in range(out_w):
            xa, xb, dx = x0[ox], x1[ox], wx[ox]
            w00 = (one - dy) * (one - dx)
            w10 = dy * (one - dx)
            w01 = (one - dy) * dx
            w11 = dy * dx
            for c in range(channels):
                out[b, oy, ox, c] = (x[b, ya, xa, c] * w00 + x[b, yb, xa, c] * w10
                                     + x[b, ya, xb, c] * w01 + x[b, yb, xb, c] * w11)


@njit(cache=True, parallel=True)
def _bilinear_fixed(x: np.ndarray, y0: np.ndarray, y1: np.ndarray, wy: np.ndarray, x0: np.ndarray, x1: np.ndarray,
                    wx: np.ndarray, out: np.ndarray) -> None:
    batches, _, _, channels = x.shape
    out_h, out_w = y0.size, x0.size
    one = np.int64(1 << 10)
    half = np.int64(1 << 19)
    for r in prange(batches * out_h):
        b, oy = r // out_h, r % out_h
        ya, yb, dy = y0[oy], y1[oy], wy[oy]
        for ox in range(out_w):
            xa, xb, dx = x0[ox], x1[ox], wx[ox]
            for c in range(channels):
                acc = (np.int64(x[b, ya, xa, c]) * (one - dy) * (one - dx)
                       + np.int64(x[b, yb, xa, c]) * dy * (one - dx)
                       + np.int64(x[b, ya, xb, c]) * (one - dy) * dx
                       + np.int64(x[b, yb, xb, c]) * dy * dx)
                acc += half if acc > 0 else -half
                # C division truncates toward zero
                out[b, oy, ox, c] = acc // (one * one) if acc >= 0 else -((-acc) // (one * one))


def resize_bilinear(x: np.ndarray, out_h: int, out_w: int, align_corners: bool,
                    half_pixel: bool) -> np.ndarray:
    _, h, w, _ = x.shape
    if x.dtype.kind == "f" or x.dtype == np.uint8:
        ys = bilinear_coords(h, out_h, align_corners, half_pixel)
        xs = bilinear_coords(w, out_w, align_corners, half_pixel)
        src = np.ascontiguousarray(x, np.float32)
        out = np.empty((x.shape[0], out_h, out_w, x.shape[3]), np.float32)
        _bilinear_float(src, *ys, *xs, out)
        if x.dtype == np.uint8:  # values are >= 0: floor(v + 0.5) rounds half away from zero
            return np.floor(out.astype(np.float64) + 0.5).astype(np.uint8)
        return out.astype(x.dtype, copy=False)
    ys = bilinear_coords_fixed(h, out_h, align_corners, half_pixel)
    xs = bilinear_coords_fixed(w, out_w, align_corners, half_pixel)
    out = np.empty((x.shape[0], out_h, out_w, x.shape[3]), np.int32)
    _bilinear_fixed(np.ascontiguousarray(x, np.int32), *ys, *xs, out)
    return out.astype(x.dtype)


def nearest_coords(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """TFLite's GetNearestNeighbor, in float32: round (half away from zero) with align_corners, else floor."""
    scale = _scale(in_size, out_size, align_corners)
    offset = np.float32(0.5) if half_pixel else np.float32(0.0)
    pos = ((np.arange(out_size, dtype=np.float32) + offset) * scale).astype(np.float64)
    idx = np.floor(pos + 0.5) if align_corners else np.floor(pos)  # pos >= 0, so floor(+0.5) rounds away
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half_pixel else idx


def resize_nearest(x: np.ndarray, out_h: int, out_w: int, align_corners: bool,
                   half_pixel: bool) -> np.ndarray:
    _, h, w, _ = x.shape
    y = np.take(x, nearest_coords(h, out_h, align_corners, half_pixel), axis=1)
    return np.take(y, nearest_coords(w, out_w, align_corners, half_pixel), axis=2)
