"""The LSTM family, float32: UNIDIRECTIONAL_SEQUENCE_LSTM (what the converter emits for a Keras LSTM layer),
BIDIRECTIONAL_SEQUENCE_LSTM (Keras Bidirectional(LSTM) when not split in two) and LSTM, the one-step cell
(full kernel; and the 5-input basic kernel).

A cell's inputs, as numbered in TFLite's lstm_shared.h for the unidirectional op:
  0 input [time, batch, n_input] (time_major) or [batch, time, n_input]
  1-4 input-to-{input, forget, cell, output} weights [n_cell, n_input]; 1 omitted under CIFG
  5-8 recurrent-to-{input, forget, cell, output} weights [n_cell, n_output]; 5 omitted under CIFG
  9-11 peephole cell-to-{input, forget, output} weights [n_cell], optional
  12-15 {input, forget, cell, output} gate biases [n_cell]; 12 omitted under CIFG
  16 projection weights [n_output, n_cell], 17 projection bias [n_output], optional
  18 output state [batch, n_output], 19 cell state [batch, n_cell]: variable tensors
  20-23 layer-norm coefficients for the {input, forget, cell, output} gates [n_cell], optional
The bidirectional op has 48 inputs: the forward cell's 1-17, the backward cell's at 18-34, the states at 35-38
(forward output, forward cell, backward output, backward cell), 39 an aux input and 40-43 / 44-47 the forward /
backward aux-input-to-gate weights. The state tensors are updated in place, so the state carries over to the
next invoke as in TFLite.

Hybrid (int8 weights) and integer LSTMs are refused: TFLite's lstm_eval hybrid and 8x8_16 paths are not
implemented here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..cpu.lstm import LstmWeights, PreparedLstm, basic_lstm_cell, lstm_sequence, prepare_lstm
from ..cpu.quant import dequantize
from ..errors import ModelError
from ..graph import ACT_SIGN_BIT, Graph, Node, Tensor
from ..lowering.context import LowerContext
from ..phwc4 import slices
from .base import CpuStep, Defines, Op, register
from .layout import _lower_concat


@dataclass(frozen=True)
class CellLayout:
    """Where one LSTM cell's tensors sit among a node's inputs."""

    input_w: int
    recurrent_w: int
    peephole: int
    bias: int
    projection_w: int
    output_state: int
    cell_state: int
    layer_norm: int | None = None
    aux_w: int | None = None

    @property
    def projection_b(self) -> int:
        return self.projection_w + 1

    def peephole_slot(self, gate: int) -> int | None:
        """Peephole inputs exist for the input, forget and output gates only."""
        return {0: self.peephole, 1: self.peephole + 1, 3: self.peephole + 2}.get(gate)


AUX_INPUT, FW_AUX_W, BW_AUX_W = 39, 40, 44
UNIDIRECTIONAL = CellLayout(1, 5, 9, 12, 16, 18, 19, layer_norm=20)
FORWARD = CellLayout(1, 5, 9, 12, 16, 35, 36, aux_w=FW_AUX_W)
BACKWARD = CellLayout(18, 22, 26, 29, 33, 37, 38, aux_w=BW_AUX_W)


def _present(node: Node, i: int | None) -> bool:
    return i is not None and i < len(node.inputs) and node.inputs[i] >= 0


def _hybrid_weight(tensor: Tensor) -> bool:
    """An int8 constant with a quantization: a weight of the dynamic-range converter's hybrid LSTM."""
    return tensor.data is not None and tensor.dtype == np.int8 and tensor.quant is not None


def _check_float(node: Node, graph: Graph) -> None:
    """Float32 inputs, but for hybrid int8 weights (run in float, dequantized once: ``_float_weights``)."""
    for i, t in enumerate(node.inputs):
        if t >= 0 and graph.tensors[t].dtype != np.float32 and not _hybrid_weight(graph.tensors[t]):
            tensor = graph.tensors[t]
            raise ModelError(f"{node}: input {i} ({tensor.name!r}) is {tensor.type_name or tensor.dtype}; only the "
                             "float32 LSTM (with float or hybrid int8 weights) is supported, no integer kernels")


def _float_weights(node: Node, graph: Graph, inputs: list) -> list:
    """``inputs`` with each hybrid int8 weight dequantized (once per graph). LiteRT's hybrid kernels quantize the
    activations on the fly for int8 dot products; like TFLite's GPU delegate, this keeps them in float, which is
    closer to the float model the weights were quantized from."""
    def dequantized(tensor: Tensor) -> np.ndarray:
        q = tensor.quant
        assert q is not None and tensor.data is not None
        return dequantize(tensor.data, q.scale, q.zero_point, q.axis if q.per_channel else None).astype(np.float32)

    out = list(inputs)
    for i, t in enumerate(node.inputs):
        tensor = graph.tensors[t] if t >= 0 else None
        if tensor is not None and _hybrid_weight(tensor):
            out[i] = graph.prepared(("lstm_weight", node.index, i), functools.partial(dequantized, tensor))
    return out


def _check_cell(node: Node, graph: Graph, cell: CellLayout) -> None:
    """Which of the cell's optional inputs may be omitted together, as TFLite's CheckInputTensorDimensions."""
    required = [cell.input_w + g for g in (1, 2, 3)] + [cell.recurrent_w + g for g in (1, 2, 3)] + \
        [cell.bias + g for g in (1, 2, 3)] + [cell.output_state, cell.cell_state]
    missing = [i for i in required if not _present(node, i)]
    if missing:
        raise ModelError(f"{node}: required inputs {missing} are omitted")
    for i in (cell.output_state, cell.cell_state):
        if graph.tensors[node.inputs[i]].data is not None:
            raise ModelError(f"{node}: state input {i} must be a variable tensor, not a constant")
    cifg = not _present(node, cell.input_w)
    if cifg != (not _present(node, cell.recurrent_w)) or (cifg and _present(node, cell.bias)):
        raise ModelError(f"{node}: input-gate weights (inputs {cell.input_w}, {cell.recurrent_w}, {cell.bias}) must "
                         "be all present or, for CIFG, all omitted")
    ci, cf, co = (_present(node, cell.peephole + g) for g in range(3))
    if not (((ci or cifg) and cf and co) or not (ci or cf or co)):
        raise ModelError(f"{node}: peephole weights (inputs {cell.peephole}-{cell.peephole + 2}) must be all present "
                         "or all absent (under CIFG the input gate's may be omitted)")
    if not cifg and not _present(node, cell.bias):
        raise ModelError(f"{node}: input gate bias (input {cell.bias}) is omitted")
    if _present(node, cell.projection_b) and not _present(node, cell.projection_w):
        raise ModelError(f"{node}: projection bias without projection weights")
    ln = cell.layer_norm
    if ln is not None and _present(node, ln + 1):
        need = [ln + g for g in (range(1, 4) if cifg else range(4))]
        if any(not _present(node, i) for i in need) or (cifg and _present(node, ln)):
            raise ModelError(f"{node}: layer-norm coefficients (inputs {ln}-{ln + 3}) must cover every gate in use")
    if cell.aux_w is not None:
        aux = [_present(node, cell.aux_w + g) for g in range(4)]
        if any(aux[1:]) and not (all(aux[1:]) and aux[0] == (not cifg)):
            raise ModelError(f"{node}: aux weights (inputs {cell.aux_w}-{cell.aux_w + 3}) must cover every gate in "
                             "use or be all omitted")


def _activation(node: Node) -> int:
    act = int(node.attrs.get("fused_activation_function", 0))
    if not 0 <= act < ACT_SIGN_BIT:
        raise ModelError(f"{node}: unsupported activation {act}")
    return act


def _cell_dims(node: Node, shapes, cell: CellLayout, batch: int, n_input: int,
               n_aux: int | None = None) -> tuple[int, int]:
    """(n_cell, n_output) of a cell, after checking every present tensor's shape."""
    n_cell = shapes[cell.input_w + 1][0]
    diagonal = bool(node.attrs.get("diagonal_recurrent_tensors", False))
    n_output = n_cell if diagonal else shapes[cell.recurrent_w + 1][1]
    for i, n in ((cell.output_state, n_output), (cell.cell_state, n_cell)):
        if shapes[i] is not None and int(np.prod(shapes[i])) != batch * n:  # TFLite accepts any layout
            raise ModelError(f"{node}: state input {i} has shape {list(shapes[i])}, expected "
                             f"{batch * n} elements ([{batch}, {n}]); batch size changes are not supported")
    want: dict[int, tuple[int, ...]] = {}
    for g in range(4):
        want[cell.input_w + g] = (n_cell, n_input)
        want[cell.recurrent_w + g] = (n_cell,) if diagonal else (n_cell, n_output)
        want[cell.bias + g] = (n_cell,)
        if cell.layer_norm is not None:
            want[cell.layer_norm + g] = (n_cell,)
        if cell.aux_w is not None and n_aux is not None:
            want[cell.aux_w + g] = (n_cell, n_aux)
    for i in range(cell.peephole, cell.peephole + 3):
        want[i] = (n_cell,)
    if shapes[cell.projection_w] is not None:
        want[cell.projection_w] = (n_output, n_cell)
        want[cell.projection_b] = (n_output,)
    elif n_output != n_cell:
        raise ModelError(f"{node}: without projection, n_output ({n_output}) must equal n_cell ({n_cell})")
    for i, shape in want.items():
        if i < len(shapes) and shapes[i] is not None and tuple(shapes[i]) != shape:
            raise ModelError(f"{node}: input {i} has shape {list(shapes[i])}, expected {list(shape)}")
    return n_cell, n_output


def _sequence_dims(node: Node, shapes, default_time_major: bool) -> tuple[int, int, int]:
    """(time, batch, n_input) of a 3-D sequence input."""
    x = shapes[0]
    if x is None or len(x) != 3:
        raise ModelError(f"{node}: input must be 3-D, got {None if x is None else list(x)}")
    time_major = bool(node.attrs.get("time_major", default_time_major))
    return (x[0], x[1], x[2]) if time_major else (x[1], x[0], x[2])


def _weights(node: Node, inputs: list, cell: CellLayout, use_aux: bool = False) -> LstmWeights:
    ln = cell.layer_norm
    use_ln = ln is not None and ln + 1 < len(inputs) and inputs[ln + 1] is not None
    aux = cell.aux_w
    return LstmWeights(
        input_w=[inputs[cell.input_w + g] for g in range(4)],
        recurrent_w=[inputs[cell.recurrent_w + g] for g in range(4)],
        peephole=[None if slot is None else inputs[slot] for slot in map(cell.peephole_slot, range(4))],
        bias=[inputs[cell.bias + g] for g in range(4)],
        layer_norm=[inputs[ln + g] if use_ln and ln is not None else None for g in range(4)],
        projection_w=inputs[cell.projection_w], projection_b=inputs[cell.projection_b],
        diagonal_recurrent=bool(node.attrs.get("diagonal_recurrent_tensors", False)),
        aux_input_w=[inputs[aux + g] for g in range(4)] if use_aux and aux is not None else None)


def _constant_weights(node: Node, graph: Graph, cell: CellLayout, use_aux: bool) -> bool:
    """Whether every weight of the cell is a constant (always, in converted models), decided once per graph."""
    def constant() -> bool:
        slots = [*range(cell.input_w, cell.input_w + 4), *range(cell.recurrent_w, cell.recurrent_w + 4),
                 *range(cell.peephole, cell.peephole + 3), *range(cell.bias, cell.bias + 4), cell.projection_w,
                 cell.projection_b]
        if cell.layer_norm is not None:
            slots += range(cell.layer_norm, cell.layer_norm + 4)
        if use_aux and cell.aux_w is not None:
            slots += range(cell.aux_w, cell.aux_w + 4)
        return all(not _present(node, i) or graph.tensors[node.inputs[i]].data is not None for i in slots)

    return graph.prepared(("lstm_constant", node.index, cell, use_aux), constant)


def _prepared(node: Node, graph: Graph, inputs: list, cell: CellLayout, use_aux: bool) -> PreparedLstm:
    """The cell's weights laid out for lstm_sequence: once per graph where they are constants, else at every run."""
    def make() -> PreparedLstm:
        return prepare_lstm(_weights(node, _float_weights(node, graph, inputs), cell, use_aux))

    if _constant_weights(node, graph, cell, use_aux):
        return graph.prepared(("lstm_cell", node.index, cell, use_aux), make)
    return make()


def _run_cell(node: Node, graph: Graph, inputs: list, cell: CellLayout, x: np.ndarray,
              aux: np.ndarray | None = None, reverse: bool = False, prepared: PreparedLstm | None = None) -> np.ndarray:
    """Run one cell over time-major x, update its states in place; the outputs [time, batch, n_output]."""
    a = node.attrs
    h_state, c_state = inputs[cell.output_state], inputs[cell.cell_state]
    batch = x.shape[1]
    step = slice(None, None, -1) if reverse else slice(None)
    if prepared is None:
        prepared = _prepared(node, graph, inputs, cell, aux is not None)
    out, h, c = lstm_sequence(x[step], prepared,
                              h_state.reshape(batch, -1), c_state.reshape(batch, -1), _activation(node),
                              float(a.get("cell_clip", 0.0)), float(a.get("proj_clip", 0.0)),
                              None if aux is None else aux[step])
    for state, value in ((h_state, h), (c_state, c)):
        if state.flags.writeable:
            state[...] = value.reshape(state.shape)
    return out[step]


def _checked(node: Node, graph: Graph, inputs: list, infer) -> None:
    """``infer`` (which checks every tensor's shape) on the inputs' shapes, once per graph and set of shapes."""
    shapes = tuple(None if v is None else v.shape for v in inputs)
    graph.prepared(("lstm_shapes", node.index, shapes), lambda: infer(node, graph, list(shapes)))


def _shapes(node: Node, graph: Graph) -> list:
    return [graph.tensors[t].shape if t >= 0 else None for t in node.inputs]


def _cell_macs(node: Node, graph: Graph, cell: CellLayout, steps: int, n_input: int) -> int:
    shapes = _shapes(node, graph)
    n_cell = shapes[cell.input_w + 1][0]
    n_output = shapes[cell.recurrent_w + 1][-1]
    proj = n_output * n_cell if _present(node, cell.projection_w) else 0
    return steps * (4 * n_cell * (n_input + n_output) + proj)


@register
class UnidirectionalSequenceLstm(Op):
    name = "UNIDIRECTIONAL_SEQUENCE_LSTM"
    types = "float32; hybrid int8 weights (run in float)"
    max_version = 3

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) not in (20, 24):
            raise ModelError(f"{node}: expects 20 or 24 inputs, has {len(node.inputs)}")
        if len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 1 output, has {len(node.outputs)}")
        if not _present(node, 0):
            raise ModelError(f"{node}: the input (input 0) is omitted")
        _check_float(node, graph)
        _check_cell(node, graph, UNIDIRECTIONAL)
        _activation(node)
        UnidirectionalSequenceLstm.infer(node, graph, _shapes(node, graph))

    @staticmethod
    def infer(node, graph, shapes):
        time, batch, n_input = _sequence_dims(node, shapes, True)
        _, n_output = _cell_dims(node, shapes, UNIDIRECTIONAL, batch, n_input)
        return [(shapes[0][0], shapes[0][1], n_output)]

    @staticmethod
    def macs(node, graph):
        time, batch, n_input = _sequence_dims(node, _shapes(node, graph), True)
        return _cell_macs(node, graph, UNIDIRECTIONAL, time * batch, n_input)

    @staticmethod
    def run_cpu(node, graph, inputs):
        _checked(node, graph, inputs, UnidirectionalSequenceLstm.infer)
        time_major = bool(node.attrs.get("time_major", True))
        x = inputs[0] if time_major else inputs[0].transpose(1, 0, 2)
        out = _run_cell(node, graph, inputs, UNIDIRECTIONAL, x)
        return [out if time_major else np.ascontiguousarray(out.transpose(1, 0, 2))]

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # static shapes and constant weights: the checks and the weights' layout once
        if any(graph.tensors[t].dynamic for t in node.inputs if t >= 0):
            return None
        if not _constant_weights(node, graph, UNIDIRECTIONAL, False):
            return None
        UnidirectionalSequenceLstm.infer(node, graph, _shapes(node, graph))
        prepared = _prepared(node, graph, [None if t < 0 else graph.tensors[t].data for t in node.inputs],
                             UNIDIRECTIONAL, False)
        time_major, y, slots = bool(node.attrs.get("time_major", True)), node.outputs[0], node.inputs

        def step(values: list[np.ndarray | None]) -> None:
            inputs = [None if t < 0 else values[t] for t in slots]
            x = inputs[0] if time_major else inputs[0].transpose(1, 0, 2)  # type: ignore[union-attr]
            out = _run_cell(node, graph, inputs, UNIDIRECTIONAL, x, prepared=prepared)  # type: ignore[arg-type]
            values[y] = out if time_major else np.ascontiguousarray(out.transpose(1, 0, 2))
        return step


@register
class BidirectionalSequenceLstm(Op):
    """With aux weights the aux input feeds both cells (cross links); without them an aux input is the
    backward cell's input. (LiteRT's batch-major kernel with merge_outputs strides the states by the merged
    width and so reads past them for batch > 1; this computes what the op means: both outputs side by side.)"""

    name = "BIDIRECTIONAL_SEQUENCE_LSTM"
    types = "float32; hybrid int8 weights (run in float)"
    max_version = 3

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 48:
            raise ModelError(f"{node}: expects 48 inputs, has {len(node.inputs)}")
        merge = bool(node.attrs.get("merge_outputs", False))
        if len(node.outputs) != (1 if merge else 2):
            raise ModelError(f"{node}: expects {1 if merge else 2} outputs (merge_outputs={merge}), "
                             f"has {len(node.outputs)}")
        if not _present(node, 0):
            raise ModelError(f"{node}: the input (input 0) is omitted")
        _check_float(node, graph)
        for cell in (FORWARD, BACKWARD):
            _check_cell(node, graph, cell)
        if _present(node, FW_AUX_W + 1) != _present(node, BW_AUX_W + 1):
            raise ModelError(f"{node}: aux weights must be given for both directions or neither")
        if _present(node, FW_AUX_W + 1) and not _present(node, AUX_INPUT):
            raise ModelError(f"{node}: aux weights without an aux input (input {AUX_INPUT})")
        _activation(node)
        BidirectionalSequenceLstm.infer(node, graph, _shapes(node, graph))

    @staticmethod
    def _dims(node: Node, shapes) -> tuple[int, int, int, int, int]:
        """(time, batch, n_input, fw n_output, bw n_output)."""
        time, batch, n_input = _sequence_dims(node, shapes, False)
        aux = shapes[AUX_INPUT]
        n_aux = None
        if aux is not None:
            if len(aux) != 3 or tuple(aux[:2]) != tuple(shapes[0][:2]):
                raise ModelError(f"{node}: aux input has shape {list(aux)}; it must be 3-D with the input's first "
                                 f"two dimensions {list(shapes[0][:2])}")
            n_aux = aux[2]
            if shapes[FW_AUX_W + 1] is None and n_aux != n_input:
                raise ModelError(f"{node}: the aux input feeds the backward cell, so it needs the input's "
                                 f"{n_input} features, not {n_aux}")
        fw = _cell_dims(node, shapes, FORWARD, batch, n_input, n_aux)
        bw = _cell_dims(node, shapes, BACKWARD, batch, n_input, n_aux)
        if fw != bw:  # TFLite checks each direction's tensors against both cells' sizes
            raise ModelError(f"{node}: the forward cell (n_cell, n_output) = {fw} and the backward cell's {bw} "
                             "must be equal")
        return time, batch, n_input, fw[1], bw[1]

    @staticmethod
    def infer(node, graph, shapes):
        time, batch, _, fw, bw = BidirectionalSequenceLstm._dims(node, shapes)
        lead = (time, batch) if node.attrs.get("time_major", False) else (batch, time)
        if node.attrs.get("merge_outputs", False):
            return [(*lead, fw + bw)]
        return [(*lead, fw), (*lead, bw)]

    @staticmethod
    def macs(node, graph):
        time, batch, n_input, _, _ = BidirectionalSequenceLstm._dims(node, _shapes(node, graph))
        return sum(_cell_macs(node, graph, cell, time * batch, n_input) for cell in (FORWARD, BACKWARD))

    @staticmethod
    def run_cpu(node, graph, inputs):
        _checked(node, graph, inputs, lambda n, g, shapes: BidirectionalSequenceLstm._dims(n, shapes))
        time_major = bool(node.attrs.get("time_major", False))

        def tm(v: np.ndarray) -> np.ndarray:
            return v if time_major else v.transpose(1, 0, 2)

        x = tm(inputs[0])
        cross_linked = inputs[FW_AUX_W + 1] is not None
        aux = tm(inputs[AUX_INPUT]) if cross_linked else None
        bw_x = tm(inputs[AUX_INPUT]) if inputs[AUX_INPUT] is not None and not cross_linked else x
        fw = _run_cell(node, graph, inputs, FORWARD, x, aux)
        bw = _run_cell(node, graph, inputs, BACKWARD, bw_x, aux, reverse=True)
        outs = [np.concatenate([fw, bw], axis=2)] if node.attrs.get("merge_outputs", False) else [fw, bw]
        return [o if time_major else np.ascontiguousarray(o.transpose(1, 0, 2)) for o in outs]


# -- LSTM: one step --------------------------------------------------------------------------------------------

FULL_KERNEL, BASIC_KERNEL = 0, 1


@register
class Lstm(Op):
    """kernel_type FULL: the unidirectional op's 20 or 24 inputs for a single step, input [batch, n_input].
    kernel_type BASIC: inputs (input, previous activation, weights [4 * depth, n_input + depth], bias,
    previous state), outputs (activation, state, concatenated input, gate pre-activations); the previous
    activation and state are overwritten with the new ones, as TFLite does."""

    name = "LSTM"
    types = "float32, full and basic kernels (hybrid, 8x8_16 integer and uint8 basic kernels refused)"
    max_version = 4

    @staticmethod
    def _kernel(node: Node) -> int:
        kind = int(node.attrs.get("kernel_type", FULL_KERNEL))
        if kind not in (FULL_KERNEL, BASIC_KERNEL):
            raise ModelError(f"{node}: unknown kernel_type {kind}")
        return kind

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        _check_float(node, graph)
        for t in node.outputs:
            if graph.tensors[t].dtype != np.float32:
                raise ModelError(f"{node}: output {graph.tensors[t].name!r} is {graph.tensors[t].dtype}; only the "
                                 "float32 LSTM is supported (the uint8 basic kernel is not)")
        if Lstm._kernel(node) == BASIC_KERNEL:
            if len(node.inputs) != 5 or len(node.outputs) != 4 or not all(_present(node, i) for i in range(5)):
                raise ModelError(f"{node}: the basic LSTM kernel takes 5 inputs and 4 outputs, has "
                                 f"{len(node.inputs)} and {len(node.outputs)}")
        else:
            if len(node.inputs) not in (20, 24) or len(node.outputs) != 1:
                raise ModelError(f"{node}: the full LSTM kernel takes 20 or 24 inputs and 1 output, has "
                                 f"{len(node.inputs)} and {len(node.outputs)}")
            if not _present(node, 0):
                raise ModelError(f"{node}: the input (input 0) is omitted")
            _check_cell(node, graph, UNIDIRECTIONAL)
            _activation(node)
        Lstm.infer(node, graph, _shapes(node, graph))

    @staticmethod
    def infer(node, graph, shapes):
        x = shapes[0]
        if x is None or len(x) != 2:
            raise ModelError(f"{node}: input must be 2-D [batch, n_input], got {x}")
        if Lstm._kernel(node) == FULL_KERNEL:
            _, n_output = _cell_dims(node, shapes, UNIDIRECTIONAL, x[0], x[1])
            return [(x[0], n_output)]
        batch, n_input = x
        prev_act, w, b, prev_state = shapes[1:5]
        depth = prev_act[1] if len(prev_act) == 2 else -1
        if (tuple(prev_act) != (batch, depth) or tuple(w) != (4 * depth, n_input + depth)
                or tuple(b) != (4 * depth,) or tuple(prev_state) != (batch, depth)):
            raise ModelError(f"{node}: basic LSTM shapes do not fit: input {list(x)}, previous activation "
                             f"{list(prev_act)}, weights {list(w)}, bias {list(b)}, previous state {list(prev_state)}")
        return [(batch, depth), (batch, depth), (batch, n_input + depth), (batch, 4 * depth)]

    @staticmethod
    def macs(node, graph):
        x = graph.tensors[node.inputs[0]].shape
        if Lstm._kernel(node) == BASIC_KERNEL:
            return x[0] * graph.tensors[node.inputs[2]].size
        return _cell_macs(node, graph, UNIDIRECTIONAL, x[0], x[1])

    @staticmethod
    def run_cpu(node, graph, inputs):
        _checked(node, graph, inputs, Lstm.infer)
        if Lstm._kernel(node) == FULL_KERNEL:
            return [_run_cell(node, graph, inputs, UNIDIRECTIONAL, inputs[0][None])[0]]
        inputs = _float_weights(node, graph, inputs)
        activation, state, concat, gates = basic_lstm_cell(*inputs)
        for prev, new in ((inputs[1], activation), (inputs[4], state)):
            if prev.flags.writeable:
                prev[...] = new
        return [activation, state, concat, gates]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if Lstm._kernel(node) == BASIC_KERNEL:
            weights = [2, 3]
        else:
            if node.attrs.get("diagonal_recurrent_tensors", False):
                return "diagonal recurrent weights run on the CPU"
            weights = [i for i in range(1, len(node.inputs)) if i not in (UNIDIRECTIONAL.output_state,
                                                                          UNIDIRECTIONAL.cell_state)]
        for i in weights:
            if _present(node, i) and not graph.constant_like(node.inputs[i]):
                return f"input {i} (weights) is computed at run time; the GPU lays constant weights out once"
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        if Lstm._kernel(node) == BASIC_KERNEL:
            _lower_basic(node, ctx)
        else:
            _lower_full(node, ctx)


# -- LSTM on the GPU: kernels/dialect/lstm_gates (the matrix products), lstm_cell (the new cell state) and
# lstm_output (the output gate times the activated cell state); a projection is lstm_gates again.

def _matrix_rows(w: np.ndarray, n_in: int) -> np.ndarray:
    """Weights [R, n_in] as lstm_gates.dialect reads them: vec4 (rs * S_in * 4 + i) = W[4 rs .. 4 rs + 3, i]."""
    rows, s_in = slices(w.shape[0]) * 4, slices(n_in)
    padded = np.zeros((rows, s_in * 4), np.float32)
    padded[:w.shape[0], :n_in] = w
    return np.ascontiguousarray(padded.reshape(rows // 4, 4, s_in * 4).transpose(0, 2, 1)).reshape(-1, 4)


def _per_cell_rows(vectors: list[np.ndarray | None], cells: int) -> np.ndarray:
    """Per-cell vectors (None: zeros), each as one row per slice of ``cells``, one block after the other."""
    s = slices(cells)
    out = np.zeros((len(vectors), s * 4), np.float32)
    for k, v in enumerate(vectors):
        if v is not None:
            out[k, :cells] = v
    return out.reshape(-1, 4)


def _gates(ctx: LowerContext, node: Node, x: int, h: int, dst: int, wx: np.ndarray, wh: np.ndarray | None,
           bias: np.ndarray | None, tag: str, clip: float = 0.0, raw: int = -1) -> None:
    n_x, rows = ctx.shape(x)[-1], wx.shape[0]
    inputs, consts = {"x": x}, {"wx": ctx.const(f"lstm_wx:{tag}:{node.index}", lambda: _matrix_rows(wx, n_x))}
    if h >= 0 and wh is not None:
        inputs["h"] = h
        consts["wh"] = ctx.const(f"lstm_wh:{tag}:{node.index}", lambda: _matrix_rows(wh, ctx.shape(h)[-1]))
    if bias is not None:
        consts["bias"] = ctx.const(f"lstm_b:{tag}:{node.index}", lambda: _per_cell_rows([bias], rows))
    outputs = {"dst": dst, **({"raw": raw} if raw >= 0 else {})}
    defines: Defines = {"HAS_H": "h" in inputs, "HAS_BIAS": bias is not None, "HAS_CLIP": clip > 0,
                        "CLIP": float(clip), "RAW_OUT": raw >= 0}
    ctx.kernel("lstm_gates", inputs, outputs, consts, defines, grid=(ctx.shape(x)[0], 1, slices(rows)))


def _raw_copy(ctx: LowerContext, node: Node, t: int) -> int:
    """Where the step's output goes unaltered for the state: itself, or a scratch tensor when post-ops are fused
    into it (they must not reach the state)."""
    return ctx.scratch(ctx.shape(t)) if ctx.view.postops.get(node.index) else -1


def _lower_full(node: Node, ctx: LowerContext) -> None:
    cell = UNIDIRECTIONAL
    x, y = ctx.input(node, 0), ctx.output(node)
    h_var, c_var = node.inputs[cell.output_state], node.inputs[cell.cell_state]
    batch, n_cell = ctx.shape(x)[0], ctx.shape(ctx.input(node, cell.input_w + 1))[0]
    cifg = not _present(node, cell.input_w)

    def const(i: int | None) -> np.ndarray | None:
        return ctx.const_value(node, ctx.input(node, i)) if i is not None and _present(node, i) else None

    def stacked(base: int, shape: tuple[int, ...]) -> np.ndarray:
        return np.concatenate([v if (v := const(base + g)) is not None else np.zeros(shape, np.float32)
                               for g in range(4)])

    n_input, n_output = ctx.shape(x)[-1], ctx.shape(h_var)[-1]
    layer_norm = cell.layer_norm is not None and _present(node, cell.layer_norm + 1)
    biases = [const(cell.bias + g) for g in range(4)]
    z = ctx.scratch((batch, 4 * n_cell))
    _gates(ctx, node, x, h_var, z, stacked(cell.input_w, (n_cell, n_input)),
           stacked(cell.recurrent_w, (n_cell, n_output)), None if layer_norm else
           np.concatenate([b if b is not None else np.zeros(n_cell, np.float32) for b in biases]), "gates")
    peephole = _present(node, cell.peephole + 1)
    consts: dict[str, str] = {}
    if peephole:
        consts["peep"] = ctx.const(f"lstm_peep:{node.index}", lambda: _per_cell_rows(
            [const(cell.peephole_slot(g)) for g in (0, 1, 3)], n_cell))
    if layer_norm:
        consts["ln"] = ctx.const(f"lstm_ln:{node.index}", lambda: _per_cell_rows(
            [const(None if cell.layer_norm is None else cell.layer_norm + g) for g in range(4)], n_cell))
        consts["lnb"] = ctx.const(f"lstm_lnb:{node.index}", lambda: _per_cell_rows(biases, n_cell))
    cell_clip = float(node.attrs.get("cell_clip", 0.0))
    defines: Defines = {"CELLS": n_cell, "CELLS_S": slices(n_cell), "BASIC": False, "CIFG": cifg,
                        "PEEPHOLE": peephole, "LAYER_NORM": layer_norm, "ACT": _activation(node),
                        "HAS_CELL_CLIP": cell_clip > 0, "CELL_CLIP": cell_clip}
    c_new = ctx.scratch((batch, n_cell))
    grid = (batch, 1, slices(n_cell))
    ctx.kernel("lstm_cell", {"z": z, "cprev": c_var}, {"dst": c_new}, consts, defines, grid=grid)
    ctx.update_state(c_var, c_new)
    projection = _present(node, cell.projection_w)
    out = ctx.scratch((batch, n_cell)) if projection else y
    raw = -1 if projection else _raw_copy(ctx, node, y)
    outputs = {"dst": out, **({"raw": raw} if raw >= 0 else {})}
    ctx.kernel("lstm_output", {"z": z, "cnew": c_new}, outputs, consts, {**defines, "RAW_OUT": raw >= 0},
               grid=grid)
    if projection:
        w_p = const(cell.projection_w)
        assert w_p is not None
        raw = _raw_copy(ctx, node, y)
        _gates(ctx, node, out, -1, y, w_p, None, const(cell.projection_b), "proj",
               float(node.attrs.get("proj_clip", 0.0)), raw)
    ctx.update_state(h_var, raw if raw >= 0 else y)


def _lower_basic(node: Node, ctx: LowerContext) -> None:
    """TFLite's basic LSTM cell: concat [x, previous activation], one product for the four gates (input, new
    input, forget, output), then the cell; outputs activation, state, the concatenation and the gates."""
    x, prev_a, prev_s = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 4)
    act, state, concat, gates = (ctx.output(node, k) for k in range(4))
    batch, n_input = ctx.shape(x)
    depth = ctx.shape(prev_a)[-1]
    # the node's fused activation is the cell's (tanh), not a step applied to the concatenation
    _lower_concat(ctx, node, [(x, ctx.bhwc(x)), (prev_a, ctx.bhwc(prev_a))], concat, 3, activation=False)
    w = ctx.const_value(node, ctx.input(node, 2))
    _gates(ctx, node, concat, -1, gates, w, None, ctx.const_value(node, ctx.input(node, 3)), "basic")
    defines: Defines = {"CELLS": depth, "CELLS_S": slices(depth), "BASIC": True, "CIFG": False, "PEEPHOLE": False,
                        "LAYER_NORM": False, "ACT": 4, "HAS_CELL_CLIP": False, "CELL_CLIP": 0.0}
    grid = (batch, 1, slices(depth))
    ctx.kernel("lstm_cell", {"z": gates, "cprev": prev_s}, {"dst": state}, {}, defines, grid=grid)
    raw = _raw_copy(ctx, node, act)
    outputs = {"dst": act, **({"raw": raw} if raw >= 0 else {})}
    ctx.kernel("lstm_output", {"z": gates, "cnew": state}, outputs, {}, {**defines, "RAW_OUT": raw >= 0},
               grid=grid)
    ctx.update_state(node.inputs[1], raw if raw >= 0 else act)
    ctx.update_state(node.inputs[4], state)
