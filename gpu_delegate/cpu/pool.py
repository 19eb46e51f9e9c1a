"""CPU kernels of AVERAGE_POOL_2D and MAX_POOL_2D over NHWC tensors.

One float32 kernel serves every type: integer inputs (int8/uint8) are exact in float32, and their window
sums too (at most 255 * window size), so the integer ops only add TFLite's rounding and clamping around it.
"""

from __future__ import annotations

import numpy as np

from .conv import Window, shifted_f32, split_rows
from .jit import njit

MAX, AVERAGE, SUM = 0, 1, 2


@njit(cache=True, nogil=True)
def _pool(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, pt: int, pl: int, mode: int, lo: np.float32,
          hi: np.float32, r0: int, r1: int, out: np.ndarray) -> None:
    """Max, average or sum over the window's pixels that lie inside the input (TFLite counts only those),
    then clamp to [lo, hi]; output rows r0..r1 (r = b * oh + oy)."""
    _, h, w, ch = x.shape
    oh, ow = out.shape[1], out.shape[2]
    for r in range(r0, r1):
        b = r // oh
        oy = r - b * oh
        y0 = oy * sh - pt
        ys, ye = max(y0, 0), min(y0 + kh, h)
        acc = np.empty(ch, np.float32)
        for ox in range(ow):
            x0 = ox * sw - pl
            xs, xe = max(x0, 0), min(x0 + kw, w)
            acc[:] = -np.inf if mode == MAX else 0.0
            for iy in range(ys, ye):
                for ix in range(xs, xe):
                    if mode == MAX:
                        for c in range(ch):
                            acc[c] = max(acc[c], x[b, iy, ix, c])
                    else:
                        for c in range(ch):
                            acc[c] += x[b, iy, ix, c]
            if mode == AVERAGE:
                count = np.float32(max((ye - ys) * (xe - xs), 1))
                for c in range(ch):
                    acc[c] = acc[c] / count
            for c in range(ch):
                out[b, oy, ox, c] = min(max(acc[c], lo), hi)


def pool_float(x: np.ndarray, win: Window, mode: int, lo: np.float32, hi: np.float32) -> np.ndarray:
    """x: C-contiguous float32 NHWC."""
    out = np.empty((x.shape[0], win.oh, win.ow, x.shape[3]), np.float32)
    def part(r0: int, r1: int) -> None:
        _pool(x, win.kh, win.kw, win.sh, win.sw, win.pt, win.pl, mode, lo, hi, r0, r1, out)

    split_rows(part, x.shape[0] * win.oh, out.size * win.kh * win.kw)
    return out


def window_counts(size: int, k: int, s: int, p: int, n_out: int) -> np.ndarray:
    """How many filter taps of each output position fall inside an input of length ``size``."""
    start = np.arange(n_out) * s - p
    return np.minimum(start + k, size) - np.maximum(start, 0)


def pool_int(x: np.ndarray, win: Window, is_max: bool, qmin: int, qmax: int) -> np.ndarray:
    """TFLite's integer pools: max of the raw values, or the window sum divided by the count of valid
    pixels rounding half away from zero; then clamp to [qmin, qmax]. Same dtype out as in."""
    xf = shifted_f32(x, 0)
    if is_max:
        out = pool_float(xf, win, MAX, np.float32(qmin), np.float32(qmax))
        return out.astype(x.dtype)
    total = pool_float(xf, win, SUM, np.float32(-np.inf), np.float32(np.inf)).astype(np.int64)
    count = (window_counts(x.shape[1], win.kh, win.sh, win.pt, win.oh)[:, None]
             * window_counts(x.shape[2], win.kw, win.sw, win.pl, win.ow)[None, :])
    count = np.maximum(count, 1)[None, :, :, None]
    half = count // 2
    # C's integer division truncates toward zero: (t + half) / c for t > 0, (t - half) / c otherwise.
    avg = np.where(total > 0, (total + half) // count, -((half - total) // count))
    return np.clip(avg, qmin, qmax).astype(x.dtype)
