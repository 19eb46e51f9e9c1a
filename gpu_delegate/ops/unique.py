"""UNIQUE: the distinct values of a 1-D tensor in order of first appearance, and for every element the index
of its value among them (int32 or int64, the idx_out_type option). The output length depends on the values:
infer reads it from a constant input when it can, run_cpu always from the array."""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import check_run_shapes, data_dependent, input_count, type_names

_TYPES = tuple(np.dtype(t) for t in (np.float32, np.int8, np.uint8, np.int16, np.int32, np.int64))


def unique_in_order(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values in order of first appearance, index of each element's value)."""
    values, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return values[order], rank[inverse.reshape(-1)]


@register
class Unique(Op):
    name = "UNIQUE"
    types = type_names(_TYPES)
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        if len(node.outputs) != 2:
            raise ModelError(f"{node}: expects 2 outputs (values, indices), has {len(node.outputs)}")
        x, y, idx = graph.tensors[node.inputs[0]], *(graph.tensors[t] for t in node.outputs)
        if x.dtype not in _TYPES or y.dtype != x.dtype:
            raise ModelError(f"{node}: input {x.type_name or x.dtype} / output {y.type_name or y.dtype} is not "
                             "supported (float32, int8, uint8, int16, int32 or int64, the same for both)")
        if idx.dtype not in (np.int32, np.int64):
            raise ModelError(f"{node}: the index output must be int32 or int64, is {idx.type_name or idx.dtype}")

    @staticmethod
    def infer(node, graph, shapes):
        if len(shapes[0]) != 1:
            raise ModelError(f"{node}: input must be 1-D, has shape {list(shapes[0])}")
        data = graph.tensors[node.inputs[0]].data
        if data is None:
            data_dependent(node)
        count = len(unique_in_order(data)[0])
        return [(count,), tuple(shapes[0])]

    @staticmethod
    def run_cpu(node, graph, inputs):
        check_run_shapes(Unique.infer, node, graph, [inputs[0].shape])
        values, index = unique_in_order(inputs[0])
        return [values, index.astype(graph.tensors[node.outputs[1]].dtype)]
