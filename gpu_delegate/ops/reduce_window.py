"""REDUCE_WINDOW (TFLite's builtin form of stablehlo.reduce_window without padding or base dilation): input,
a scalar init value of its type, and constant int64 window shape, strides and dilations, one per dimension;
the reduce_function option picks ADD, MUL, MINIMUM, MAXIMUM, ALL or ANY. Types as LiteRT: bool, int8, int16,
int32, int64, uint8, float32, float64."""

from __future__ import annotations

import math

import numpy as np

from ..cpu import reduce_window as k
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import const_input, type_names

_TYPES = tuple(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float32,
                                     np.float64))


def _window(node: Node, graph: Graph, rank: int) -> tuple[list[int], list[int], list[int]]:
    parts = []
    for i, what in ((2, "window shape"), (3, "window strides"), (4, "window dilations")):
        v = const_input(node, graph, i, what)
        if v.dtype != np.int64 or v.shape != (rank,) or np.any(v < 1):
            raise ModelError(f"{node}: {what} must be {rank} positive int64 values (one per input dimension), got "
                             f"{v.dtype} {v.tolist()}")
        parts.append([int(d) for d in v])
    return parts[0], parts[1], parts[2]


@register
class ReduceWindow(Op):
    name = "REDUCE_WINDOW"
    types = type_names(_TYPES)
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 5 or min(node.inputs) < 0 or len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 5 inputs (input, init value, window shape, strides, dilations) "
                             "and 1 output")
        x, init = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
        y = graph.tensors[node.outputs[0]]
        if x.dtype not in _TYPES or init.dtype != x.dtype or y.dtype != x.dtype:
            raise ModelError(f"{node}: input {x.type_name or x.dtype}, init value {init.dtype} and output {y.dtype} "
                             "must share one of bool, int8, int16, int32, int64, uint8, float32, float64")
        if init.size != 1:
            raise ModelError(f"{node}: the init value must be a single value, has shape {list(init.shape)}")
        function = int(node.attrs.get("reduce_function", 0))
        if function not in (k.ADD, k.MUL, k.MINIMUM, k.MAXIMUM, k.ALL, k.ANY):
            raise ModelError(f"{node}: unsupported reduce_function {function}")
        if not 1 <= len(x.shape) <= 6:  # TFLite's kMaxReduceWindowRank
            raise ModelError(f"{node}: input rank {len(x.shape)} is outside 1 to 6")
        _window(node, graph, len(x.shape))

    @staticmethod
    def infer(node, graph, shapes):
        window, strides, dilations = _window(node, graph, len(shapes[0]))
        return [k.output_shape(tuple(shapes[0]), window, strides, dilations)]

    @staticmethod
    def macs(node, graph):
        window, _, _ = _window(node, graph, len(graph.tensors[node.inputs[0]].shape))
        return graph.tensors[node.outputs[0]].size * math.prod(window)

    @staticmethod
    def run_cpu(node, graph, inputs):
        x, init = inputs[0], inputs[1]
        window, strides, dilations = _window(node, graph, x.ndim)
        return [k.reduce_window(x, init.reshape(-1)[0], int(node.attrs.get("reduce_function", 0)), window, strides,
                                dilations)]
