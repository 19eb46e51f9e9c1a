"""CPU kernels for the data-movement ops whose numpy form is more than one call.

Everything here is gathers and copies, so numpy's strided indexing is as fast as a numba loop would be;
the only arithmetic is CONCATENATION's requantization of inputs whose scale differs from the output's.
"""

from __future__ import annotations

import math

import numpy as np

from .quant import dtype_range


def round_half_away(v: np.ndarray) -> np.ndarray:
    """std::round of float32 values; in float64 so that adding 0.5 cannot itself round."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def requantize_copy(x: np.ndarray, in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """TFLite's ConcatenationWithScaling for one input: float32 scale and bias, round, saturate."""
    scale = np.float32(in_scale) * (np.float32(1.0) / np.float32(out_scale))
    bias = np.float32(-in_zp) * scale
    v = round_half_away(x.astype(np.float32) * scale + bias) + out_zp
    lo, hi = dtype_range(x.dtype)
    return np.clip(v, lo, hi).astype(x.dtype)


def gather(params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    """TFLite GATHER: out[b.., o.., i.., n..] = params[b.., o.., indices[b.., i..], n..]."""
    batch_shape = params.shape[:batch_dims]
    batch = math.prod(batch_shape)
    outer = math.prod(params.shape[batch_dims:axis])
    inner_shape = params.shape[axis + 1:]
    p = params.reshape(batch, outer, params.shape[axis], -1)
    idx = indices.reshape(batch, -1).astype(np.intp)
    g = p[np.arange(batch)[:, None, None], np.arange(outer)[None, :, None], idx[:, None, :]]
    return g.reshape(batch_shape + params.shape[batch_dims:axis] + indices.shape[batch_dims:] + inner_shape)


def one_hot(indices: np.ndarray, depth: int, on: np.generic, off: np.generic, axis: int,
            dtype: np.dtype) -> np.ndarray:
    hot = indices[..., None].astype(np.int64) == np.arange(depth, dtype=np.int64)
    out = np.where(hot, np.asarray(on, dtype), np.asarray(off, dtype)).astype(dtype)
    return np.moveaxis(out, -1, axis)


def mirror_pad_indices(size: int, before: int, after: int, offset: int) -> np.ndarray:
    """Source index for each output position along one axis, as TFLite's GetInputDimension computes it
    (offset 1 = REFLECT, 0 = SYMMETRIC)."""
    p = np.arange(size + before + after, dtype=np.int64)
    left = before + offset - 1
    lo = left - np.minimum(p, left - offset)
    q = p - before - size
    right = size - (1 + offset)
    hi = right - np.minimum(q, right)
    return np.where(p < before, lo, np.where(q >= 0, hi, p - before))


def mirror_pad(x: np.ndarray, pads: np.ndarray, offset: int) -> np.ndarray:
    for axis, (before, after) in enumerate(pads):
        if before or after:
            x = np.take(x, mirror_pad_indices(x.shape[axis], int(before), int(after), offset), axis=axis)
    return np.ascontiguousarray(x)


def depth_to_space(x: np.ndarray, bs: int) -> np.ndarray:
    b, h, w, c = x.shape
    y = x.reshape(b, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5)
    return y.reshape(b, h * bs, w * bs, c // (bs * bs))


def space_to_depth(x: np.ndarray, bs: int) -> np.ndarray:
    b, h, w, c = x.shape
    y = x.reshape(b, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
    return y.reshape(b, h // bs, w // bs, bs * bs * c)
