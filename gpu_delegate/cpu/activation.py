"""Fused activations on float tensors (the ``fused_activation_function`` of conv, add, pool, ...)."""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_SIGN_BIT, ACT_TANH


def apply_activation(x: np.ndarray, code: int) -> np.ndarray:
    """Apply in place where possible and return the result."""
    if code == ACT_NONE:
        return x
    if code == ACT_RELU:
        return np.maximum(x, 0, out=x)
    if code == ACT_RELU6:
        return np.clip(x, 0, 6, out=x)
    if code == ACT_RELU_N1_TO_1:
        return np.clip(x, -1, 1, out=x)
    if code == ACT_TANH:
        return np.tanh(x, out=x)
    if code == ACT_SIGN_BIT:
        return np.signbit(x).astype(x.dtype)
    raise ValueError(f"unknown fused activation {code}")
