"""CONV_3D and CONV_3D_TRANSPOSE on NDHWC float32 tensors.

Both walk the filter's taps: each tap is one matrix product of a strided view of the input with that tap's
[in, out] weights (BLAS), summed into the output. Few taps (27 for 3x3x3) and large products keep that fast.
"""

from __future__ import annotations

import numpy as np


def _window_slices(starts: tuple[int, ...], counts: tuple[int, ...], strides: tuple[int, ...]) -> tuple:
    return (slice(None), *(slice(s, s + (n - 1) * st + 1, st) for s, n, st in zip(starts, counts, strides)))


def conv3d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, strides: tuple[int, int, int],
           dilations: tuple[int, int, int], pads: tuple[int, ...], out_dhw: tuple[int, int, int],
           lo: np.float32, hi: np.float32) -> np.ndarray:
    """x [N, D, H, W, Ci], w [KD, KH, KW, Ci, Co]; pads: the padding before each spatial axis."""
    f32 = np.float32
    k = w.shape[:3]
    extent = [(o - 1) * s + (kk - 1) * d + 1 for o, s, kk, d in zip(out_dhw, strides, k, dilations)]
    after = [max(0, e - p - n) for e, p, n in zip(extent, pads, x.shape[1:4])]
    xp = np.pad(np.asarray(x, f32), [(0, 0), *zip(pads, after), (0, 0)])
    out = np.zeros((x.shape[0], *out_dhw, w.shape[4]), f32)
    for a in range(k[0]):
        for b in range(k[1]):
            for c in range(k[2]):
                starts = (a * dilations[0], b * dilations[1], c * dilations[2])
                out += xp[_window_slices(starts, out_dhw, strides)] @ np.asarray(w[a, b, c], f32)
    if bias is not None:
        out += np.asarray(bias, f32)
    return np.clip(out, lo, hi, out=out)


def conv3d_transpose(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, strides: tuple[int, int, int],
                     dilations: tuple[int, int, int], pads: tuple[int, ...], out_dhw: tuple[int, int, int],
                     lo: np.float32, hi: np.float32) -> np.ndarray:
    """x [N, D, H, W, Ci], w [KD, KH, KW, Co, Ci]: input voxel i adds x[i] * w[k] at i * stride + k * dilation
    - pad; what falls outside the output is dropped."""
    f32 = np.float32
    k = w.shape[:3]
    in_dhw = x.shape[1:4]
    full = [max((n - 1) * s + (kk - 1) * d + 1, p + o) for n, s, kk, d, p, o
            in zip(in_dhw, strides, k, dilations, pads, out_dhw)]
    acc = np.zeros((x.shape[0], *full, w.shape[3]), f32)
    xf = np.asarray(x, f32)
    for a in range(k[0]):
        for b in range(k[1]):
            for c in range(k[2]):
                starts = (a * dilations[0], b * dilations[1], c * dilations[2])
                acc[_window_slices(starts, in_dhw, strides)] += xf @ np.asarray(w[a, b, c], f32).T
    out = np.ascontiguousarray(acc[(slice(None), *(slice(p, p + o) for p, o in zip(pads, out_dhw)))])
    if bias is not None:
        out += np.asarray(bias, f32)
    return np.clip(out, lo, hi, out=out)
