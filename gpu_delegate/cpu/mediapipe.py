"""CPU kernels of MediaPipe's custom ops, float32, written from their definitions in MediaPipe's
mediapipe/util/tflite/operations: max pooling that also gives each maximum's place in its window, the
unpooling that puts values back there, and the face landmark model's crop transform (the matrix from
landmarks, landmarks through a matrix, a bilinear resampling through a matrix).

Matrices are 4x4, row-major, applied to column vectors (x, y, 0, 1); only their first two rows matter.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

f32 = np.float32


@njit(cache=True)
def max_pool_argmax(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, pt: int, pl: int, oh: int, ow: int,
                    lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(max over the window's pixels inside x, clamped to [lo, hi]; the maximum's place in its window as
    ky * kw + kx + 0.1, the first maximum in row-major order). x: float32 NHWC."""
    b_n, h, w, c_n = x.shape
    out = np.empty((b_n, oh, ow, c_n), np.float32)
    idx = np.empty((b_n, oh, ow, c_n), np.float32)
    for b in range(b_n):
        for oy in range(oh):
            y0 = oy * sh - pt
            for ox in range(ow):
                x0 = ox * sw - pl
                for c in range(c_n):
                    best = np.float32(-3.4028234663852886e38)
                    by = 0
                    bx = 0
                    for ky in range(max(0, -y0), min(kh, h - y0)):
                        for kx in range(max(0, -x0), min(kw, w - x0)):
                            v = x[b, y0 + ky, x0 + kx, c]
                            if v > best:
                                best = v
                                by = ky
                                bx = kx
                    out[b, oy, ox, c] = min(max(best, np.float32(lo)), np.float32(hi))
                    idx[b, oy, ox, c] = np.float32(by * kw + bx) + np.float32(0.1)
    return out, idx


@njit(cache=True)
def max_unpool(x: np.ndarray, indices: np.ndarray, kh: int, kw: int, sh: int, sw: int, pt: int, pl: int,
               oh: int, ow: int) -> np.ndarray:
    """Each input value written at its window place (indices truncated to int, ky * kw + kx), zero elsewhere;
    a later input wins where windows overlap; places outside the output are dropped."""
    b_n, h, w, c_n = x.shape
    out = np.zeros((b_n, oh, ow, c_n), np.float32)
    for b in range(b_n):
        for iy in range(h):
            for ix in range(w):
                for c in range(c_n):
                    k = int(indices[b, iy, ix, c])
                    # C's truncating division and remainder, for negative indices too
                    ky = abs(k) // kw * (1 if k >= 0 else -1)
                    kx = k - ky * kw
                    oy = iy * sh - pt + ky
                    ox = ix * sw - pl + kx
                    if 0 <= oy < oh and 0 <= ox < ow:
                        out[b, oy, ox, c] = x[b, iy, ix, c]
    return out


def _mat3(*rows: tuple[float | np.floating, float | np.floating, float | np.floating]) -> np.ndarray:
    return np.array(rows, f32)


def landmarks_to_matrix_v2(points: np.ndarray, subset: list[int], left: int, right: int, target: float,
                           out_hw: tuple[int, int], scale_xy: tuple[float, float]) -> np.ndarray:
    """Version 2: the crop that holds the ``subset`` landmarks (x, y of [N, 3] ``points``), rotated so the line
    from landmark ``left`` to ``right`` lies at ``target`` radians, as the matrix taking output pixels of an
    ``out_hw`` crop to input coordinates, scaled by ``scale_xy``. float32 as MediaPipe computes it."""
    p = np.asarray(points, f32).reshape(-1, 3)
    rotation = f32(target) - f32(np.arctan2(p[right, 1] - p[left, 1], p[right, 0] - p[left, 0]))
    cos_r, sin_r = f32(np.cos(rotation)), f32(np.sin(rotation))
    pts = p[subset, :2]
    rx = cos_r * pts[:, 0] - sin_r * pts[:, 1]
    ry = sin_r * pts[:, 0] + cos_r * pts[:, 1]
    width, height = rx.max() - rx.min(), ry.max() - ry.min()
    mx, my = (rx.min() + rx.max()) / f32(2), (ry.min() + ry.max()) / f32(2)
    cos_n, sin_n = f32(np.cos(-rotation)), f32(np.sin(-rotation))
    cx, cy = cos_n * mx - sin_n * my, sin_n * mx + cos_n * my
    sx = f32(scale_xy[0]) * width / f32(out_hw[1])
    sy = f32(scale_xy[1]) * height / f32(out_hw[0])
    m = np.eye(4, dtype=f32)
    m[0, :2], m[1, :2] = (cos_n * sx, -sin_n * sy), (sin_n * sx, cos_n * sy)
    shift_x, shift_y = f32(-out_hw[1] / 2.0), f32(-out_hw[0] / 2.0)
    m[0, 3] = m[0, 0] * shift_x + m[0, 1] * shift_y + cx
    m[1, 3] = m[1, 0] * shift_x + m[1, 1] * shift_y + cy
    return m.reshape(1, 4, 4)


def landmarks_to_matrix_v1(points: np.ndarray, subset: list[int], left: int, right: int, multiplier: float,
                           landmarks_range: int, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Version 1: the rotated bounding box of the ``subset`` landmarks (in [0, landmarks_range]), grown by
    ``multiplier``, as the matrix taking pixels of an ``out_hw`` output to pixels of an ``in_hw`` input."""
    p = np.asarray(points, f32).reshape(-1, 3)
    alpha = -f32(np.arctan((p[right, 1] - p[left, 1]) / (p[right, 0] - p[left, 0])))
    cos_a, sin_a = f32(np.cos(alpha)), f32(np.sin(alpha))
    pts = p[subset, :2]
    rx = pts[:, 0] * cos_a - pts[:, 1] * sin_a
    ry = pts[:, 0] * sin_a + pts[:, 1] * cos_a
    rng = f32(landmarks_range)
    # MediaPipe starts its box at +-100000, not at the first point
    hi_x, hi_y = max(rx.max(), f32(-100000)), max(ry.max(), f32(-100000))
    lo_x, lo_y = min(rx.min(), f32(100000)), min(ry.min(), f32(100000))
    bw, bh = (hi_x - lo_x) * f32(multiplier), (hi_y - lo_y) * f32(multiplier)
    mx, my = (hi_x + lo_x) / f32(2), (hi_y + lo_y) / f32(2)
    cos_n, sin_n = f32(np.cos(-alpha)), f32(np.sin(-alpha))
    rot_x, rot_y = mx * cos_n - my * sin_n, mx * sin_n + my * cos_n
    scale = _mat3((bw / rng, 0, 0), (0, bh / rng, 0), (0, 0, 1))
    rotation = _mat3((cos_n, -sin_n, rot_x / rng * 2 - 1), (sin_n, cos_n, rot_y / rng * 2 - 1), (0, 0, 1))
    to_relative = _mat3((2 / (out_hw[1] - 1), 0, -1), (0, 2 / (out_hw[0] - 1), -1), (0, 0, 1))
    to_absolute = _mat3(((in_hw[1] - 1) / 2, 0, (in_hw[1] - 1) / 2), (0, (in_hw[0] - 1) / 2, (in_hw[0] - 1) / 2),
                        (0, 0, 1))
    itm = to_absolute @ rotation @ scale @ to_relative
    m = np.zeros((4, 4), f32)
    m[0, :2], m[0, 3] = itm[0, :2], itm[0, 2]
    m[1, :2], m[1, 3] = itm[1, :2], itm[1, 2]
    m[2, :3] = itm[2]
    m[3, 3] = 1
    return m.reshape(1, 4, 4)


def transform_landmarks(points: np.ndarray, matrix: np.ndarray, dims: int, scale: float = 1.0) -> np.ndarray:
    """Landmarks of ``dims`` coordinates along the last axis: x, y through the matrix's first two rows (its
    translation times ``scale``), z unchanged."""
    m = np.asarray(matrix, f32).reshape(4, 4)
    p = np.asarray(points, f32).reshape(-1, dims)
    out = p.copy()
    x, y = p[:, 0], p[:, 1]
    out[:, 0] = x * m[0, 0] + y * m[0, 1] + f32(0) * m[0, 2] + m[0, 3] * f32(scale)
    out[:, 1] = x * m[1, 0] + y * m[1, 1] + f32(0) * m[1, 2] + m[1, 3] * f32(scale)
    return out.reshape(points.shape)


def transform_tensor_bilinear(x: np.ndarray, matrix: np.ndarray, out_hw: tuple[int, int],
                              align_corners: bool) -> np.ndarray:
    """Output pixel (ox, oy) samples x [1, H, W, C] bilinearly at the matrix's image of (ox, oy): zero where that
    lies outside [0, W - 1] x [0, H - 1], and zero for the corners outside x. ``align_corners`` (version 2)
    maps pixel centers: the matrix is applied to (ox + 0.5, oy + 0.5) and 0.5 taken off the result."""
    m = np.asarray(matrix, f32).reshape(4, 4)
    rx, ry = m[0].copy(), m[1].copy()
    if align_corners:
        rx[3] = f32(np.float64(rx[3]) + np.float64(rx[0]) * 0.5 + np.float64(rx[1]) * 0.5 - 0.5)
        ry[3] = f32(np.float64(ry[3]) + np.float64(ry[0]) * 0.5 + np.float64(ry[1]) * 0.5 - 0.5)
    _, h, w, c = x.shape
    oy, ox = np.meshgrid(np.arange(out_hw[0], dtype=f32), np.arange(out_hw[1], dtype=f32), indexing="ij")
    tx = ox * rx[0] + oy * rx[1] + f32(0) * rx[2] + rx[3]
    ty = ox * ry[0] + oy * ry[1] + f32(0) * ry[2] + ry[3]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    fx, fy = np.floor(tx), np.floor(ty)
    padded = np.zeros((h + 2, w + 2, c), f32)
    padded[1:-1, 1:-1] = x[0]

    def read(yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
        yi = np.clip(yy, -1, h).astype(np.int64) + 1
        xi = np.clip(xx, -1, w).astype(np.int64) + 1
        return padded[yi, xi]

    q11, q21, q12, q22 = read(fy, fx), read(fy, fx + 1), read(fy + 1, fx), read(fy + 1, fx + 1)
    right = (tx - fx)[..., None]
    lower = (ty - fy)[..., None]
    upper_v = (f32(1) - right) * q11 + right * q21
    lower_v = (f32(1) - right) * q12 + right * q22
    out = lower * lower_v + (f32(1) - lower) * upper_v
    return np.where(inside[..., None], out, f32(0)).astype(f32)[None]
