"""SVDF, one step (TFLite's reference svdf.h): the state [batch, filters, memory] shifts left by one, its
last column takes the feature projection of the input, the time weights reduce each filter's memory, and
groups of ``rank`` filters add up to one unit, before bias and activation."""

from __future__ import annotations

import numpy as np

from . import hybrid
from .activation import apply_activation


def svdf_step(x: np.ndarray, feature_w: np.ndarray, time_w: np.ndarray, bias: np.ndarray | None,
              state: np.ndarray, rank: int, activation: int, feature_scale: float | None = None,
              asymmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """x [batch, n_input], feature_w [filters, n_input] (float32, or int8 with feature_scale: hybrid),
    time_w [filters, memory] float32, state [batch, filters * memory]. Returns (output, new state)."""
    f32 = np.float32
    filters, memory = time_w.shape
    batch = x.shape[0]
    new_state = np.empty(batch * filters * memory, f32)
    old = np.asarray(state, f32).reshape(-1)
    new_state[:-1] = old[1:]
    new_state = new_state.reshape(batch, filters, memory)
    if feature_scale is None:
        latest = np.asarray(x, f32) @ np.asarray(feature_w, f32).T
    else:
        latest = np.zeros((batch, filters), f32)
        hybrid.accumulate(latest, x, feature_w, feature_scale, asymmetric)
    new_state[:, :, -1] = latest
    per_filter = np.einsum("bfm,fm->bf", new_state, np.asarray(time_w, f32), dtype=f32)
    out = per_filter.reshape(batch, filters // rank, rank).sum(axis=2, dtype=f32)
    if bias is not None:
        out += np.asarray(bias, f32)
    return apply_activation(out, activation), new_state.reshape(batch, filters * memory)
