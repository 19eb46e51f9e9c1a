"""The basic RNN family: RNN (one step), UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN
(what the converter emits for Keras SimpleRNN and Bidirectional(SimpleRNN)).

Float32 activations; the weights are float32 (version 1) or int8 with a per-tensor scale (hybrid: version 2,
and 3 with ``asymmetric_quantize_inputs``). The hidden state inputs are variable tensors updated in place,
so the state carries over to the next invoke as in TFLite.

BIDIRECTIONAL_SEQUENCE_RNN inputs: 0 input, 1-4 forward weights / recurrent weights / bias / hidden state,
5-8 the same backward, 9 aux input, 10-11 forward / backward aux weights (all three optional). With aux
weights the aux input feeds both directions (cross links); without them an aux input is the backward
direction's input (LiteRT honours that only for time-major inputs). One more of LiteRT's quirks is kept on
purpose, since models run against it: a hybrid time-major node runs its whole sequence once per time step,
the state carrying over, and outputs the last pass.
"""

from __future__ import annotations

import numpy as np

from ..cpu.rnn import RnnWeights, rnn_sequence
from ..errors import ModelError
from ..graph import ACT_SIGN_BIT, Graph, Node, Tensor
from .base import Op, register

F32, I8 = np.dtype(np.float32), np.dtype(np.int8)


def _tensor(node: Node, graph: Graph, i: int) -> Tensor | None:
    t = node.inputs[i] if i < len(node.inputs) else -1
    return graph.tensors[t] if t >= 0 else None


def _activation(node: Node) -> int:
    code = int(node.attrs.get("fused_activation_function", 0))
    if not 0 <= code <= ACT_SIGN_BIT:
        raise ModelError(f"{node}: unknown fused_activation_function {code}")
    return code


def check_weights(node: Node, graph: Graph, indices: list[int], what: str) -> bool:
    """The weights at ``indices`` (None-able) share one type: float32, or int8 with a per-tensor scale.
    Returns whether they are hybrid."""
    present = [(i, graph.tensors[node.inputs[i]]) for i in indices if _tensor(node, graph, i) is not None]
    types = {t.dtype for _, t in present}
    if len(types) > 1 or not types <= {F32, I8}:
        names = ", ".join(f"{i}: {t.type_name or t.dtype}" for i, t in present)
        raise ModelError(f"{node}: {what} weights must all be float32 or all int8 (hybrid), got {names}")
    hybrid = types == {I8}
    for i, t in present:
        if hybrid and (t.quant is None or t.quant.per_channel):
            raise ModelError(f"{node}: int8 weights {i} ({t.name!r}) need one per-tensor scale")
    return hybrid


def check_float(node: Node, graph: Graph, indices: list[int]) -> None:
    for i in indices:
        t = _tensor(node, graph, i)
        if t is not None and t.dtype != F32:
            raise ModelError(f"{node}: input {i} ({t.name!r}) is {t.type_name or t.dtype}; it must be float32")


def check_state(node: Node, graph: Graph, i: int) -> None:
    t = _tensor(node, graph, i)
    if t is None:
        raise ModelError(f"{node}: the state input {i} is omitted")
    if t.data is not None:
        raise ModelError(f"{node}: state input {i} must be a variable tensor, not a constant")


def _need(node: Node, shape, want: tuple[int, ...], what: str) -> None:
    if shape is not None and tuple(shape) != want:
        raise ModelError(f"{node}: {what} has shape {list(shape)}, expected {list(want)}")


def _cell_dims(node: Node, shapes, n_input: int, batch: int, wi: int, ri: int, bi: int, hi: int) -> int:
    """Units of one direction's cell after checking its weights, bias and state against each other."""
    ws = shapes[wi]
    if ws is None or len(ws) != 2:
        raise ModelError(f"{node}: input weights {wi} must be 2-D, got {ws}")
    units = ws[0]
    _need(node, ws, (units, n_input), f"input weights {wi}")
    _need(node, shapes[ri], (units, units), f"recurrent weights {ri}")
    _need(node, shapes[bi], (units,), f"bias {bi}")
    if shapes[hi] is not None and tuple(shapes[hi]) != (batch, units):
        raise ModelError(f"{node}: hidden state {hi} has shape {list(shapes[hi])}, expected {[batch, units]}; "
                         "batch size changes are not supported")
    return units


def _cell(graph: Graph, node: Node, inputs: list, wi: int, ri: int, bi: int,
          aux_i: int | None = None) -> RnnWeights:
    aux_w = inputs[aux_i] if aux_i is not None else None
    w = RnnWeights(inputs[wi], inputs[ri], inputs[bi], aux_w)
    if w.is_hybrid:
        w.input_scale, w.recurrent_scale = weight_scale(node, graph, wi), weight_scale(node, graph, ri)
        if aux_w is not None and aux_i is not None:
            w.aux_scale = weight_scale(node, graph, aux_i)
    return w


def weight_scale(node: Node, graph: Graph, i: int) -> float:
    q = graph.tensors[node.inputs[i]].quant
    if q is None:
        raise ModelError(f"{node}: int8 weights {i} have no quantization scale")
    return q.scalar()[0]


def _update(state: np.ndarray, value: np.ndarray) -> None:
    if state.flags.writeable:
        state[...] = value.reshape(state.shape)


def _sequence_layout(node: Node, shape) -> tuple[int, int, int]:
    """(time, batch, n_input) of a 3-D sequence input."""
    if shape is None or len(shape) != 3:
        raise ModelError(f"{node}: input must be 3-D, got {None if shape is None else list(shape)}")
    time_major = bool(node.attrs.get("time_major", False))
    return (shape[0], shape[1], shape[2]) if time_major else (shape[1], shape[0], shape[2])


def _check_single(node: Node, graph: Graph, n_outputs: int = 1) -> None:
    if len(node.inputs) != 5:
        raise ModelError(f"{node}: expects 5 inputs, has {len(node.inputs)}")
    if len(node.outputs) != n_outputs:
        raise ModelError(f"{node}: expects {n_outputs} output, has {len(node.outputs)}")
    if any(_tensor(node, graph, i) is None for i in range(4)):
        raise ModelError(f"{node}: inputs 0-3 (input, weights, recurrent weights, bias) are required")
    check_float(node, graph, [0, 3, 4])
    check_weights(node, graph, [1, 2], "input and recurrent")
    check_state(node, graph, 4)
    _activation(node)


@register
class Rnn(Op):
    name = "RNN"
    types = "float32; hybrid int8 weights (symmetric or asymmetric inputs)"
    max_version = 3

    @staticmethod
    def check(node, graph):
        _check_single(node, graph)
        Rnn.infer(node, graph, [graph.tensors[t].shape for t in node.inputs])

    @staticmethod
    def infer(node, graph, shapes):
        x = shapes[0]
        if len(x) != 2:
            raise ModelError(f"{node}: input must be 2-D [batch, n_input], got {list(x)}")
        units = _cell_dims(node, shapes, x[1], x[0], 1, 2, 3, 4)
        return [(x[0], units)]

    @staticmethod
    def macs(node, graph):
        w = graph.tensors[node.inputs[1]].shape
        batch = graph.tensors[node.inputs[0]].shape[0]
        return batch * w[0] * (w[0] + w[1])

    @staticmethod
    def run_cpu(node, graph, inputs):
        Rnn.infer(node, graph, [None if v is None else v.shape for v in inputs])
        out, h = rnn_sequence(inputs[0][None], _cell(graph, node, inputs, 1, 2, 3), inputs[4],
                              _activation(node), asymmetric=bool(node.attrs.get("asymmetric_quantize_inputs")))
        _update(inputs[4], h)
        return [out[0]]


@register
class UnidirectionalSequenceRnn(Op):
    name = "UNIDIRECTIONAL_SEQUENCE_RNN"
    types = "float32; hybrid int8 weights (symmetric or asymmetric inputs)"
    max_version = 3

    @staticmethod
    def check(node, graph):
        _check_single(node, graph)
        UnidirectionalSequenceRnn.infer(node, graph, [graph.tensors[t].shape for t in node.inputs])

    @staticmethod
    def infer(node, graph, shapes):
        time, batch, n_input = _sequence_layout(node, shapes[0])
        units = _cell_dims(node, shapes, n_input, batch, 1, 2, 3, 4)
        return [(shapes[0][0], shapes[0][1], units)]

    @staticmethod
    def macs(node, graph):
        w = graph.tensors[node.inputs[1]].shape
        return graph.tensors[node.outputs[0]].size * (w[0] + w[1])

    @staticmethod
    def run_cpu(node, graph, inputs):
        UnidirectionalSequenceRnn.infer(node, graph, [None if v is None else v.shape for v in inputs])
        time_major = bool(node.attrs.get("time_major", False))
        x = inputs[0] if time_major else inputs[0].transpose(1, 0, 2)
        out, h = rnn_sequence(x, _cell(graph, node, inputs, 1, 2, 3), inputs[4], _activation(node),
                              asymmetric=bool(node.attrs.get("asymmetric_quantize_inputs")))
        _update(inputs[4], h)
        return [out if time_major else np.ascontiguousarray(out.transpose(1, 0, 2))]


# -- BIDIRECTIONAL_SEQUENCE_RNN ------------------------------------------------------------------------------

FW, BW, AUX, FW_AUX_W, BW_AUX_W = 1, 5, 9, 10, 11


def _bidi_dims(node: Node, shapes) -> tuple[int, int, int, int, int]:
    """(time, batch, n_input, fw_units, bw_units), every shape checked."""
    time, batch, n_input = _sequence_layout(node, shapes[0])
    fw = _cell_dims(node, shapes, n_input, batch, FW, FW + 1, FW + 2, FW + 3)
    bw = _cell_dims(node, shapes, n_input, batch, BW, BW + 1, BW + 2, BW + 3)
    aux = shapes[AUX]
    if aux is not None:
        if len(aux) != 3 or tuple(aux[:2]) != tuple(shapes[0][:2]):
            raise ModelError(f"{node}: aux input has shape {list(aux)}; it must be 3-D with the input's first "
                             f"two dimensions {list(shapes[0][:2])}")
        if shapes[FW_AUX_W] is not None:
            for i, units in ((FW_AUX_W, fw), (BW_AUX_W, bw)):
                _need(node, shapes[i], (units, aux[2]), f"aux weights {i}")
            if aux[2] != n_input:
                raise ModelError(f"{node}: aux input has {aux[2]} features, the input {n_input}; LiteRT's kernel "
                                 "strides the aux input by the input's size, so they must match")
        elif aux[2] != n_input:
            raise ModelError(f"{node}: the aux input feeds the backward cell, so it needs the input's "
                             f"{n_input} features, not {aux[2]}")
    return time, batch, n_input, fw, bw


@register
class BidirectionalSequenceRnn(Op):
    name = "BIDIRECTIONAL_SEQUENCE_RNN"
    types = "float32; hybrid int8 weights (symmetric or asymmetric inputs)"
    max_version = 3

    @staticmethod
    def check(node, graph):
        if len(node.inputs) != 12:
            raise ModelError(f"{node}: expects 12 inputs, has {len(node.inputs)}")
        merge = bool(node.attrs.get("merge_outputs", False))
        if len(node.outputs) != (1 if merge else 2):
            raise ModelError(f"{node}: expects {1 if merge else 2} outputs (merge_outputs={merge}), "
                             f"has {len(node.outputs)}")
        required = [0, FW, FW + 1, FW + 2, BW, BW + 1, BW + 2]
        if any(_tensor(node, graph, i) is None for i in required):
            raise ModelError(f"{node}: inputs {required} (input, weights, recurrent weights, biases) are required")
        if (_tensor(node, graph, FW_AUX_W) is None) != (_tensor(node, graph, BW_AUX_W) is None):
            raise ModelError(f"{node}: aux weights (inputs 10, 11) must be both present or both omitted")
        if _tensor(node, graph, FW_AUX_W) is not None and _tensor(node, graph, AUX) is None:
            raise ModelError(f"{node}: aux weights without an aux input (input 9)")
        check_float(node, graph, [0, FW + 2, FW + 3, BW + 2, BW + 3, AUX])
        check_weights(node, graph, [FW, FW + 1, BW, BW + 1, FW_AUX_W, BW_AUX_W], "forward, backward and aux")
        check_state(node, graph, FW + 3)
        check_state(node, graph, BW + 3)
        _activation(node)
        BidirectionalSequenceRnn.infer(node, graph, [graph.tensors[t].shape if t >= 0 else None
                                                     for t in node.inputs])

    @staticmethod
    def infer(node, graph, shapes):
        time, batch, _, fw, bw = _bidi_dims(node, shapes)
        time_major = bool(node.attrs.get("time_major", False))
        lead = (time, batch) if time_major else (batch, time)
        if node.attrs.get("merge_outputs", False):
            return [(*lead, fw + bw)]
        return [(*lead, fw), (*lead, bw)]

    @staticmethod
    def macs(node, graph):
        _, _, n_input, fw, bw = _bidi_dims(node, [graph.tensors[t].shape if t >= 0 else None
                                                  for t in node.inputs])
        x = graph.tensors[node.inputs[0]].shape
        return x[0] * x[1] * (fw * (n_input + fw) + bw * (n_input + bw))

    @staticmethod
    def run_cpu(node, graph, inputs):
        time, batch, _, fw_units, bw_units = _bidi_dims(node, [None if v is None else v.shape for v in inputs])
        a = node.attrs
        time_major = bool(a.get("time_major", False))
        asymmetric = bool(a.get("asymmetric_quantize_inputs", False))
        act = _activation(node)

        def tm(v: np.ndarray) -> np.ndarray:
            return v if time_major else v.transpose(1, 0, 2)

        x = tm(inputs[0])
        cross_linked = inputs[FW_AUX_W] is not None
        aux = tm(inputs[AUX]) if cross_linked else None
        # Without aux weights an aux input replaces the backward input; LiteRT's batch-major loop ignores it.
        bw_x = tm(inputs[AUX]) if inputs[AUX] is not None and not cross_linked and time_major else x
        fw_w = _cell(graph, node, inputs, FW, FW + 1, FW + 2, FW_AUX_W)
        bw_w = _cell(graph, node, inputs, BW, BW + 1, BW + 2, BW_AUX_W)
        fw_h, bw_h = inputs[FW + 3], inputs[BW + 3]
        fw_state, bw_state = fw_h, bw_h
        repeats = max(time, 1) if fw_w.is_hybrid and time_major else 1
        for _ in range(repeats):
            fw_out, fw_state = rnn_sequence(x, fw_w, fw_state, act, aux, asymmetric)
            bw_rev, bw_state = rnn_sequence(bw_x[::-1], bw_w, bw_state, act,
                                            None if aux is None else aux[::-1], asymmetric)
        _update(fw_h, fw_state)
        _update(bw_h, bw_state)
        bw_out = bw_rev[::-1]
        if a.get("merge_outputs", False):
            merged = np.concatenate([fw_out, bw_out], axis=2)
            return [merged if time_major else np.ascontiguousarray(merged.transpose(1, 0, 2))]
        if time_major:
            return [fw_out, np.ascontiguousarray(bw_out)]
        return [np.ascontiguousarray(fw_out.transpose(1, 0, 2)), np.ascontiguousarray(bw_out.transpose(1, 0, 2))]
