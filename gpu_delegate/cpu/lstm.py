"""Float LSTM over a sequence, step by step as TFLite's lstm_eval.cc does it (LstmStepFloat), and the basic
LSTM cell (TFLite's LstmCell, the LSTM op's 5-input kernel).

Gate order everywhere is input, forget, cell, output. The input contributions of all time steps are one
matrix product up front; only the recurrent part, one matmul for all gates side by side, has to wait for
the previous step. Work is in float32 (BLAS matmuls), which is what TFLite accumulates in too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH
from .activation import apply_activation
from .jit import njit

# the cell activations _plain_steps computes (TFLite's fused activation codes)
_PLAIN_ACTIVATIONS = (ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH)
_HALF, _ONE, _ZERO, _SIX = np.float32(0.5), np.float32(1.0), np.float32(0.0), np.float32(6.0)
# Eigen's float tanh (generic_fast_tanh_float), which LiteRT's LSTM kernels apply: an odd rational function of
# degrees 13 and 6 on [-7.9, 7.9], where the float32 result is +-1; x itself below 4e-4. Arithmetic only, so
# numba vectorizes a loop of it (libm's tanhf, called per value, was most of a 64-unit cell's step).
_TANH_CLAMP, _TANH_TINY = np.float32(7.90531110763549805), np.float32(0.0004)
_TANH_P = tuple(np.float32(a) for a in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                         5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                         4.89352455891786e-03))
_TANH_Q = tuple(np.float32(b) for b in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                                         4.89352518554385e-03))


@dataclass
class LstmWeights:
    input_w: list[np.ndarray | None]  # per gate [n_cell, n_input]; the input gate's is None under CIFG
    recurrent_w: list[np.ndarray | None]  # per gate [n_cell, n_output], or [n_cell] when diagonal
    peephole: list[np.ndarray | None]  # per gate [n_cell] (the cell gate has none)
    bias: list[np.ndarray | None]
    layer_norm: list[np.ndarray | None]
    projection_w: np.ndarray | None  # [n_output, n_cell]
    projection_b: np.ndarray | None
    diagonal_recurrent: bool = False
    aux_input_w: list[np.ndarray | None] | None = None  # per gate [n_cell, n_aux]: an aux input's weights


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # tanh form: no overflow warnings for large |x|
    return np.float32(0.5) * np.tanh(np.float32(0.5) * x) + np.float32(0.5)


def _normalize(x: np.ndarray) -> np.ndarray:
    """TFLite's MeanStddevNormalization over the cell dimension."""
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = np.square(x - mean).mean(axis=-1, keepdims=True, dtype=np.float32)
    return (x - mean) / np.sqrt(var + np.float32(1e-8))


def _given(weight: np.ndarray | None, what: str, gate: int) -> np.ndarray:
    """A weight of a gate in use, which the op's check() requires."""
    if weight is None:
        raise ValueError(f"the {what} of gate {gate} are omitted")
    return weight


def _gate(pre: dict[int, np.ndarray], g: int, cell: np.ndarray, peephole: dict[int, np.ndarray],
          norm: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Gate g's pre-activation: matmul part, plus peephole, then layer norm and bias if the model has them."""
    v = pre[g]
    if g in peephole:
        v = v + peephole[g] * cell
    if g in norm:
        v = _normalize(v) * norm[g][0] + norm[g][1]
    return v


@dataclass(frozen=True)
class PreparedLstm:
    """A cell's weights laid out for lstm_sequence, the gates side by side (so each step is one recurrent matmul):
    derived from constants, so an op prepares them once per graph (ops/lstm.py)."""

    gates: tuple[int, ...]  # input, forget, cell, output = 0..3; no input gate under CIFG
    input_w: np.ndarray  # [n_input, gates * n_cell]
    aux_w: np.ndarray | None  # [n_aux, gates * n_cell]
    bias: np.ndarray | None  # [gates * n_cell], added to the input part unless layer norm adds it after normalizing
    rec: np.ndarray  # [n_output, gates * n_cell], or [gates * n_cell] when diagonal
    peephole: dict[int, np.ndarray]
    norm: dict[int, tuple[np.ndarray, np.ndarray]]  # gate -> (layer-norm coefficients, bias)
    proj_w: np.ndarray | None  # [n_cell, n_output]
    proj_b: np.ndarray | None
    diagonal: bool

    @property
    def cifg(self) -> bool:
        return 0 not in self.gates

    @property
    def plain(self) -> bool:
        """Whether _plain_steps computes the cell: no peepholes, layer norm, diagonal weights or projection."""
        return not (self.peephole or self.norm or self.diagonal or self.proj_w is not None)


def prepare_lstm(w: LstmWeights) -> PreparedLstm:
    f32 = np.float32
    gates = (1, 2, 3) if w.input_w[0] is None else (0, 1, 2, 3)
    layer_norm = w.layer_norm[1] is not None

    def side_by_side(ws: list[np.ndarray | None]) -> np.ndarray:
        return np.concatenate([ws[g] for g in gates]).astype(f32)

    rec = side_by_side(w.recurrent_w)
    return PreparedLstm(
        gates=gates,
        input_w=np.ascontiguousarray(side_by_side(w.input_w).T),
        aux_w=None if w.aux_input_w is None else np.ascontiguousarray(side_by_side(w.aux_input_w).T),
        bias=None if layer_norm else side_by_side(w.bias),
        rec=rec if w.diagonal_recurrent else np.ascontiguousarray(rec.T),
        peephole={g: np.asarray(p, f32) for g in gates if (p := w.peephole[g]) is not None},
        norm={g: (np.asarray(_given(w.layer_norm[g], "layer-norm coefficients", g), f32),
                  np.asarray(_given(w.bias[g], "bias", g), f32)) for g in gates} if layer_norm else {},
        proj_w=None if w.projection_w is None else np.ascontiguousarray(w.projection_w.astype(f32).T),
        proj_b=None if w.projection_b is None else w.projection_b.astype(f32),
        diagonal=w.diagonal_recurrent)


def lstm_sequence(x: np.ndarray, p: PreparedLstm, h: np.ndarray, c: np.ndarray, activation: int,
                  cell_clip: float, proj_clip: float,
                  aux: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: [time, batch, n_input]; h: [batch, n_output]; c: [batch, n_cell]; aux: [time, batch, n_aux] with
    p.aux_w, or None. Returns (outputs [time, batch, n_output], final h, final c)."""
    f32 = np.float32
    x = np.asarray(x, f32)
    h = np.array(h, f32)
    c = np.array(c, f32)
    cifg, gates, peephole, norm, proj_w, proj_b = p.cifg, p.gates, p.peephole, p.norm, p.proj_w, p.proj_b
    outputs = np.empty((x.shape[0], x.shape[1], h.shape[1]), f32)
    if p.plain and p.bias is not None and activation in _PLAIN_ACTIVATIONS and aux is None:
        # the LSTM Keras and tf_keras convert to: the steps in one compiled loop, not ~10 numpy calls a step (its
        # bias is there: only layer norm, which no plain cell has, adds it after normalizing)
        _plain_steps(np.ascontiguousarray(x), p.input_w, p.bias, p.rec, h, c, cifg, activation, f32(cell_clip),
                     outputs)
        return outputs, h, c
    xw = x @ p.input_w  # [time, batch, gates * n_cell]: the input part of every step, up front
    if aux is not None and p.aux_w is not None:
        xw += np.asarray(aux, f32) @ p.aux_w
    if p.bias is not None:
        xw += p.bias
    rec = p.rec
    for t in range(x.shape[0]):
        z = xw[t] + (np.tile(h, len(gates)) * rec if p.diagonal else h @ rec)
        pre = dict(zip(gates, np.split(z, len(gates), axis=1)))
        forget = _sigmoid(_gate(pre, 1, c, peephole, norm))
        inp = f32(1) - forget if cifg else _sigmoid(_gate(pre, 0, c, peephole, norm))
        cell_in = apply_activation(_gate(pre, 2, c, peephole, norm).copy(), activation)
        c = forget * c + inp * cell_in
        if cell_clip > 0:
            c = np.clip(c, -cell_clip, cell_clip)
        out_gate = _sigmoid(_gate(pre, 3, c, peephole, norm))  # its peephole sees the new cell state
        m = out_gate * apply_activation(c.copy(), activation)
        if proj_w is not None:
            m = m @ proj_w
            if proj_b is not None:
                m += proj_b
            if proj_clip > 0:
                m = np.clip(m, -proj_clip, proj_clip)
        h = m.astype(f32, copy=False)
        outputs[t] = h
    return outputs, h, c


def basic_lstm_cell(x: np.ndarray, prev_activation: np.ndarray, weights: np.ndarray, bias: np.ndarray,
                    prev_state: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """TFLite's float LstmCell: one fully connected layer over [x, prev_activation] gives the input gate, the
    new input, the forget gate and the output gate, in that order. Returns (activation, state, the
    concatenated input, the pre-activations)."""
    f32 = np.float32
    concat = np.concatenate([np.asarray(x, f32), np.asarray(prev_activation, f32)], axis=1)
    pre = concat @ np.asarray(weights, f32).T + np.asarray(bias, f32)
    input_gate, new_input, forget_gate, output_gate = np.split(pre, 4, axis=1)
    state = _sigmoid(input_gate) * np.tanh(new_input) + _sigmoid(forget_gate) * np.asarray(prev_state, f32)
    activation = _sigmoid(output_gate) * np.tanh(state)
    return activation, state, concat, pre


@njit(cache=True, nogil=True)
def _tanh1(v: np.float32) -> np.float32:
    x = min(max(v, -_TANH_CLAMP), _TANH_CLAMP)
    x2 = x * x
    p = _TANH_P[0]
    for a in _TANH_P[1:]:
        p = p * x2 + a
    q = _TANH_Q[0]
    for b in _TANH_Q[1:]:
        q = q * x2 + b
    return v if abs(v) < _TANH_TINY else x * p / q


@njit(cache=True, nogil=True)
def _activate(v: np.float32, code: int) -> np.float32:
    if code == ACT_RELU:
        return max(v, _ZERO)
    if code == ACT_RELU6:
        return min(max(v, _ZERO), _SIX)
    if code == ACT_RELU_N1_TO_1:
        return min(max(v, -_ONE), _ONE)
    if code == ACT_TANH:
        return _tanh1(v)
    return v


@njit(cache=True, nogil=True)
def _sigmoid1(v: np.float32) -> np.float32:
    return _HALF * _tanh1(_HALF * v) + _HALF


@njit(cache=True, nogil=True)
def _plain_steps(x: np.ndarray, input_w: np.ndarray, bias: np.ndarray, rec: np.ndarray, h: np.ndarray,
                 c: np.ndarray, cifg: bool, activation: int, cell_clip: np.float32, outputs: np.ndarray) -> None:
    """lstm_sequence's loop for a cell without peepholes, layer norm, projection or aux input, h and c updated in
    place: x [time, batch, n_input], input_w [n_input, gates * n_cell], bias [gates * n_cell], rec [n_output,
    gates * n_cell], the gates side by side (input, forget, cell, output; no input gate under CIFG). Each gate's
    sum is bias, then the input's products, then the recurrent ones, in LiteRT's order (lstm_eval.cc)."""
    steps, batch, n_input = x.shape
    width = bias.shape[0]
    n = c.shape[1]
    first = 0 if cifg else n  # the forget gate's first column
    z = np.empty(width, np.float32)
    for t in range(steps):
        for b in range(batch):
            for j in range(width):
                z[j] = bias[j]
            for k in range(n_input):  # a row of the weights at a time: the inner loop vectorizes
                xk = x[t, b, k]
                for j in range(width):
                    z[j] += xk * input_w[k, j]
            for k in range(h.shape[1]):
                hk = h[b, k]
                for j in range(width):
                    z[j] += hk * rec[k, j]
            for u in range(n):
                forget = _sigmoid1(z[first + u])
                inp = _ONE - forget if cifg else _sigmoid1(z[u])
                cell = forget * c[b, u] + inp * _activate(z[first + n + u], activation)
                if cell_clip > 0:
                    cell = min(max(cell, -cell_clip), cell_clip)
                c[b, u] = cell
                h[b, u] = _sigmoid1(z[first + 2 * n + u]) * _activate(cell, activation)
                outputs[t, b, u] = h[b, u]
