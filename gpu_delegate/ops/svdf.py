"""SVDF (singular value decomposition filter; speech models), float32 (version 1) and hybrid: int8 feature and
time weights with float activations (version 2; version 4 with asymmetric_quantize_inputs).

Inputs: 0 input [batch, n_input], 1 feature weights [filters, n_input], 2 time weights [filters, memory],
3 bias [filters / rank] (optional), 4 state [batch, filters * memory] (a variable tensor, updated in place).
The fully integer SVDF (version 3: int8 input, int16 state) is not implemented and is refused by type.
"""

from __future__ import annotations

import numpy as np

from ..cpu.svdf import svdf_step
from ..errors import ModelError
from ..graph import ACT_SIGN_BIT, Graph, Node
from .base import Op, register
from .rnn import check_state, weight_scale

F32, I8 = np.dtype(np.float32), np.dtype(np.int8)


def _rank(node: Node) -> int:
    rank = int(node.attrs.get("rank", 0))
    if rank < 1:
        raise ModelError(f"{node}: rank must be >= 1, is {rank}")
    return rank


@register
class Svdf(Op):
    name = "SVDF"
    types = "float32; hybrid int8 weights (integer int8/int16 SVDF refused)"
    max_version = 4

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 5 or len(node.outputs) != 1 or min(node.inputs[:3]) < 0:
            raise ModelError(f"{node}: expects 5 inputs (input, feature weights, time weights, bias, state) and "
                             "1 output")
        x, wf, wt = (graph.tensors[t] for t in node.inputs[:3])
        if x.dtype != F32:
            raise ModelError(f"{node}: input is {x.type_name or x.dtype}; only the float32 and hybrid SVDF are "
                             "supported (not the int8 / int16 one)")
        if wf.dtype not in (F32, I8) or wt.dtype != wf.dtype:
            raise ModelError(f"{node}: feature and time weights must both be float32 or both int8, are "
                             f"{wf.dtype} and {wt.dtype}")
        if wf.dtype == I8:
            weight_scale(node, graph, 1)
            weight_scale(node, graph, 2)
        for i in (3, 4):
            t = graph.tensors[node.inputs[i]] if node.inputs[i] >= 0 else None
            if t is not None and t.dtype != F32:
                raise ModelError(f"{node}: input {i} ({t.name!r}) must be float32, is {t.type_name or t.dtype}")
        check_state(node, graph, 4)
        act = int(node.attrs.get("fused_activation_function", 0))
        if not 0 <= act <= ACT_SIGN_BIT:
            raise ModelError(f"{node}: unknown fused_activation_function {act}")
        Svdf.infer(node, graph, [graph.tensors[t].shape if t >= 0 else None for t in node.inputs])

    @staticmethod
    def infer(node, graph, shapes):
        x, wf, wt, b, state = shapes
        rank = _rank(node)
        if len(x) != 2 or len(wf) != 2 or len(wt) != 2 or wf[1] != x[1] or wt[0] != wf[0] or wf[0] % rank:
            raise ModelError(f"{node}: shapes do not fit: input {list(x)}, feature weights {list(wf)}, time weights "
                             f"{list(wt)}, rank {rank}")
        units = wf[0] // rank
        if b is not None and tuple(b) != (units,):
            raise ModelError(f"{node}: bias has shape {list(b)}, expected {[units]}")
        if state is not None and tuple(state) != (x[0], wf[0] * wt[1]):
            raise ModelError(f"{node}: state has shape {list(state)}, expected {[x[0], wf[0] * wt[1]]}; batch size "
                             "changes are not supported")
        return [(x[0], units)]

    @staticmethod
    def macs(node, graph):
        x, wf, wt = (graph.tensors[t].shape for t in node.inputs[:3])
        return x[0] * wf[0] * (wf[1] + wt[1])

    @staticmethod
    def run_cpu(node, graph, inputs):
        x, wf, wt, bias, state = inputs
        Svdf.infer(node, graph, [None if v is None else v.shape for v in inputs])
        scale = None
        if wf.dtype == I8:
            scale = weight_scale(node, graph, 1)
            time_scale = np.float32(weight_scale(node, graph, 2))
            wt = graph.prepared(("svdf_time", node.index), lambda: wt.astype(np.float32) * time_scale)
        out, new_state = svdf_step(x, wf, wt, bias, state, _rank(node),
                                   int(node.attrs.get("fused_activation_function", 0)), scale,
                                   bool(node.attrs.get("asymmetric_quantize_inputs", False)))
        if state.flags.writeable:
            state[...] = new_state
        return [out]
