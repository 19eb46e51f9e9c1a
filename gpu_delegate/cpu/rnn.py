"""The basic RNN cell over a sequence, as TFLite's kernel_utils::RnnBatchStep computes it:
h = activation(bias + W x (+ W_aux x_aux) + R h_prev), each step's output being its new state.

Float weights run as float32 matmuls; int8 weights (hybrid) quantize each activation row on the fly
(cpu/hybrid.py), in TFLite's order: bias, then the input, aux input and recurrent contributions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import hybrid
from .activation import apply_activation


@dataclass
class RnnWeights:
    input_w: np.ndarray  # [units, n_input]
    recurrent_w: np.ndarray  # [units, units]
    bias: np.ndarray  # [units]
    aux_w: np.ndarray | None = None  # [units, n_aux]
    # int8 weights (hybrid): their per-tensor scales
    input_scale: float = 0.0
    recurrent_scale: float = 0.0
    aux_scale: float = 0.0

    @property
    def is_hybrid(self) -> bool:
        return self.input_w.dtype == np.int8


def rnn_sequence(x: np.ndarray, w: RnnWeights, h: np.ndarray, activation: int, aux: np.ndarray | None = None,
                 asymmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """x: [time, batch, n_input] (aux likewise); h: [batch, units]. Returns (outputs [time, batch, units],
    final state)."""
    f32 = np.float32
    x = np.asarray(x, f32)
    h = np.array(h, f32)
    bias = np.asarray(w.bias, f32)
    outputs = np.empty((x.shape[0], x.shape[1], bias.size), f32)
    if not w.is_hybrid:
        xw = x @ np.asarray(w.input_w, f32).T + bias
        if aux is not None and w.aux_w is not None:
            xw += np.asarray(aux, f32) @ np.asarray(w.aux_w, f32).T
        rec = np.ascontiguousarray(np.asarray(w.recurrent_w, f32).T)
        for t in range(x.shape[0]):
            h = apply_activation(xw[t] + h @ rec, activation)
            outputs[t] = h
        return outputs, h
    for t in range(x.shape[0]):
        out = np.repeat(bias[None, :], x.shape[1], axis=0)
        hybrid.accumulate(out, x[t], w.input_w, w.input_scale, asymmetric)
        if aux is not None and w.aux_w is not None:
            hybrid.accumulate(out, aux[t], w.aux_w, w.aux_scale, asymmetric)
        hybrid.accumulate(out, h, w.recurrent_w, w.recurrent_scale, asymmetric)
        h = apply_activation(out, activation)
        outputs[t] = h
    return outputs, h
