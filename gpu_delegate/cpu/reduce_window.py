"""An n-d windowed reduction without padding: out[i] = init (op) x[i * stride + k * dilation] over every
window offset k, offsets taken in row-major order as TFLite's reduce_window kernel walks them."""

from __future__ import annotations

import itertools

import numpy as np

ADD, MUL, MINIMUM, MAXIMUM, ALL, ANY = 1, 2, 3, 4, 5, 6


def _combine(function: int, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    if function == ADD:
        return acc + x
    if function == MUL:
        return acc * x
    if function == MINIMUM:
        return np.where(acc <= x, acc, x)
    if function == MAXIMUM:
        return np.where(acc >= x, acc, x)
    if function == ALL:
        return np.logical_and(acc, x).astype(acc.dtype)
    return np.logical_or(acc, x).astype(acc.dtype)


def output_shape(shape: tuple[int, ...], window: list[int], strides: list[int],
                 dilations: list[int]) -> tuple[int, ...]:
    return tuple(max((n - (w - 1) * d - 1) // s + 1, 0) for n, w, s, d in zip(shape, window, strides, dilations))


def reduce_window(x: np.ndarray, init, function: int, window: list[int], strides: list[int],
                  dilations: list[int]) -> np.ndarray:
    out_shape = output_shape(x.shape, window, strides, dilations)
    acc = np.full(out_shape, init, x.dtype)
    if acc.size == 0:
        return acc
    for offset in itertools.product(*(range(w) for w in window)):
        view = x[tuple(slice(k * d, k * d + (o - 1) * s + 1, s)
                       for k, d, o, s in zip(offset, dilations, out_shape, strides))]
        acc = _combine(function, acc, view)
    return acc.astype(x.dtype, copy=False)
