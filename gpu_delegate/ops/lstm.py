"""UNIDIRECTIONAL_SEQUENCE_LSTM, float32 (what the converter emits for a Keras LSTM layer).

Inputs, as numbered in TFLite's lstm_shared.h:
  0 input [time, batch, n_input] (time_major) or [batch, time, n_input]
  1-4 input-to-{input, forget, cell, output} weights [n_cell, n_input]; 1 omitted under CIFG
  5-8 recurrent-to-{input, forget, cell, output} weights [n_cell, n_output]; 5 omitted under CIFG
  9-11 peephole cell-to-{input, forget, output} weights [n_cell], optional
  12-15 {input, forget, cell, output} gate biases [n_cell]; 12 omitted under CIFG
  16 projection weights [n_output, n_cell], 17 projection bias [n_output], optional
  18 output state [batch, n_output], 19 cell state [batch, n_cell]: variable tensors
  20-23 layer-norm coefficients for the {input, forget, cell, output} gates [n_cell], optional
The state tensors are updated in place, so the state carries over to the next invoke as in TFLite.
"""

from __future__ import annotations

import numpy as np

from ..cpu.lstm import LstmWeights, lstm_sequence
from ..errors import ModelError
from ..graph import ACT_SIGN_BIT, Graph, Node
from .base import Op, register
from .checks import required

INPUT_W, RECURRENT_W, PEEPHOLE, BIAS, LAYER_NORM = 1, 5, 9, 12, 20
PROJECTION_W, PROJECTION_B, OUTPUT_STATE, CELL_STATE = 16, 17, 18, 19


def _present(node: Node, i: int) -> bool:
    return i < len(node.inputs) and node.inputs[i] >= 0


def _peephole_slot(gate: int) -> int | None:
    """Peephole inputs exist for the input, forget and output gates only."""
    return {0: PEEPHOLE, 1: PEEPHOLE + 1, 3: PEEPHOLE + 2}.get(gate)


def _dims(node: Node, shapes: list[tuple[int, ...] | None]) -> tuple[int, int, int, int, int]:
    """(time, batch, n_input, n_cell, n_output), after checking every present tensor's shape."""
    x = shapes[0]
    if x is None or len(x) != 3:
        raise ModelError(f"{node}: input must be 3-D, got {None if x is None else list(x)}")
    time_major = bool(node.attrs.get("time_major", True))
    time, batch = (x[0], x[1]) if time_major else (x[1], x[0])
    n_input = x[2]
    n_cell = required(node, shapes, INPUT_W + 1)[0]
    diagonal = bool(node.attrs.get("diagonal_recurrent_tensors", False))
    n_output = n_cell if diagonal else required(node, shapes, RECURRENT_W + 1)[1]
    proj = shapes[PROJECTION_W]
    for i, n in ((OUTPUT_STATE, n_output), (CELL_STATE, n_cell)):
        state = shapes[i]
        if state is not None and int(np.prod(state)) != batch * n:  # TFLite accepts any layout
            raise ModelError(f"{node}: state input {i} has shape {list(state)}, expected "
                             f"{batch * n} elements ([{batch}, {n}]); batch size changes are not supported")
    want: dict[int, tuple[int, ...]] = {}
    for g in range(4):
        want[INPUT_W + g] = (n_cell, n_input)
        want[RECURRENT_W + g] = (n_cell,) if diagonal else (n_cell, n_output)
        want[BIAS + g] = (n_cell,)
        want[LAYER_NORM + g] = (n_cell,)
    for i in (PEEPHOLE, PEEPHOLE + 1, PEEPHOLE + 2):
        want[i] = (n_cell,)
    if proj is not None:
        want[PROJECTION_W] = (n_output, n_cell)
        want[PROJECTION_B] = (n_output,)
    elif n_output != n_cell:
        raise ModelError(f"{node}: without projection, n_output ({n_output}) must equal n_cell ({n_cell})")
    for i, shape in want.items():
        given = shapes[i] if i < len(shapes) else None
        if given is not None and tuple(given) != shape:
            raise ModelError(f"{node}: input {i} has shape {list(given)}, expected {list(shape)}")
    return time, batch, n_input, n_cell, n_output


@register
class UnidirectionalSequenceLstm(Op):
    name = "UNIDIRECTIONAL_SEQUENCE_LSTM"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) not in (20, 24):
            raise ModelError(f"{node}: expects 20 or 24 inputs, has {len(node.inputs)}")
        if len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 1 output, has {len(node.outputs)}")
        required = [0, 2, 3, 4, 6, 7, 8, 13, 14, 15, OUTPUT_STATE, CELL_STATE]
        missing = [i for i in required if not _present(node, i)]
        if missing:
            raise ModelError(f"{node}: required inputs {missing} are omitted")
        for i, t in enumerate(node.inputs):
            if t >= 0 and graph.tensors[t].dtype != np.float32:
                tensor = graph.tensors[t]
                raise ModelError(f"{node}: input {i} ({tensor.name!r}) is "
                                 f"{tensor.type_name or tensor.dtype}; only the float32 LSTM is supported "
                                 "(no hybrid or integer kernels)")
        for i in (OUTPUT_STATE, CELL_STATE):
            if graph.tensors[node.inputs[i]].data is not None:
                raise ModelError(f"{node}: state input {i} must be a variable tensor, not a constant")
        cifg = not _present(node, INPUT_W)
        if cifg != (not _present(node, RECURRENT_W)) or (cifg and _present(node, BIAS)):
            raise ModelError(f"{node}: input-gate weights (inputs 1, 5, 12) must be all present or, "
                             "for CIFG, all omitted")
        ci, cf, co = (_present(node, PEEPHOLE + g) for g in range(3))
        if not (((ci or cifg) and cf and co) or not (ci or cf or co)):
            raise ModelError(f"{node}: peephole weights (inputs 9-11) must be all present or all absent "
                             "(under CIFG the input gate's may be omitted)")
        if not cifg and not _present(node, BIAS):
            raise ModelError(f"{node}: input gate bias (input 12) is omitted")
        if _present(node, PROJECTION_B) and not _present(node, PROJECTION_W):
            raise ModelError(f"{node}: projection bias without projection weights")
        if len(node.inputs) == 24 and _present(node, LAYER_NORM + 1):
            need = [LAYER_NORM + g for g in (range(1, 4) if cifg else range(4))]
            if any(not _present(node, i) for i in need) or (cifg and _present(node, LAYER_NORM)):
                raise ModelError(f"{node}: layer-norm coefficients (inputs 20-23) must cover every "
                                 "gate in use")
        act = int(node.attrs.get("fused_activation_function", 0))
        if not 0 <= act < ACT_SIGN_BIT:
            raise ModelError(f"{node}: unsupported activation {act}")
        _dims(node, [graph.tensors[t].shape if t >= 0 else None for t in node.inputs])

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        time, batch, _, _, n_output = _dims(node, shapes)
        time_major = bool(node.attrs.get("time_major", True))
        return [(time, batch, n_output) if time_major else (batch, time, n_output)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        time, batch, n_input, n_cell, n_output = _dims(
            node, [graph.tensors[t].shape if t >= 0 else None for t in node.inputs])
        proj = n_output * n_cell if _present(node, PROJECTION_W) else 0
        return time * batch * (4 * n_cell * (n_input + n_output) + proj)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        _dims(node, [None if v is None else v.shape for v in inputs])
        a = node.attrs
        time_major = bool(a.get("time_major", True))
        use_ln = len(inputs) == 24 and inputs[LAYER_NORM + 1] is not None
        weights = LstmWeights(
            input_w=[inputs[INPUT_W + g] for g in range(4)],
            recurrent_w=[inputs[RECURRENT_W + g] for g in range(4)],
            peephole=[None if (slot := _peephole_slot(g)) is None else inputs[slot] for g in range(4)],
            bias=[inputs[BIAS + g] for g in range(4)],
            layer_norm=[inputs[LAYER_NORM + g] if use_ln else None for g in range(4)],
            projection_w=inputs[PROJECTION_W], projection_b=inputs[PROJECTION_B],
            diagonal_recurrent=bool(a.get("diagonal_recurrent_tensors", False)))
        x = required(node, inputs, 0)
        if not time_major:
            x = x.transpose(1, 0, 2)
        h_state, c_state = required(node, inputs, OUTPUT_STATE), required(node, inputs, CELL_STATE)
        batch = x.shape[1]
        out, h, c = lstm_sequence(x, weights, h_state.reshape(batch, -1), c_state.reshape(batch, -1),
                                  int(a.get("fused_activation_function", 0)), float(a.get("cell_clip", 0.0)),
                                  float(a.get("proj_clip", 0.0)))
        for state, value in ((h_state, h), (c_state, c)):
            if state.flags.writeable:
                state[...] = value.reshape(state.shape)
        return [out if time_major else np.ascontiguousarray(out.transpose(1, 0, 2))]
