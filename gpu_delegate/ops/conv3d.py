"""CONV_3D and CONV_3D_TRANSPOSE over NDHWC tensors, float32 (the only type LiteRT's kernels take).

CONV_3D: input [N, D, H, W, Ci], filter [KD, KH, KW, Ci, Co], optional bias [Co].
CONV_3D_TRANSPOSE: output shape (int32 [5]), filter [KD, KH, KW, Co, Ci], input [N, D, H, W, Ci], optional bias.
Both take Conv3DOptions: SAME / VALID padding, strides, dilations and a fused clamp (TANH and SIGN_BIT are
ignored, as TFLite's float conv kernels ignore them).
"""

from __future__ import annotations

import math

import numpy as np

from ..cpu import conv3d as k
from ..cpu.conv import float_range, out_size, pad_before
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import data_dependent, output_of, tensor_of
from .window import activation, window_attrs

F32 = np.dtype(np.float32)


def _geometry(node: Node) -> tuple[int, tuple[int, int, int], tuple[int, int, int]]:
    """(padding, strides, dilations), each spatial tuple in D, H, W order."""
    padding, sh, sw, dh, dw = window_attrs(node)
    sd, dd = int(node.attrs.get("stride_d", 0)), int(node.attrs.get("dilation_d_factor", 1))
    if sd < 1 or dd < 1:
        raise ModelError(f"{node}: stride_d ({sd}) and dilation_d_factor ({dd}) must be >= 1")
    return padding, (sd, sh, sw), (dd, dh, dw)


def _check_types(node: Node, graph: Graph, indices: list[int]) -> None:
    for i in indices:
        t = tensor_of(node, graph, i)
        if t is not None and t.dtype != F32:
            raise ModelError(f"{node}: input {i} ({t.name!r}) is {t.type_name or t.dtype}; LiteRT's kernel and this "
                             "one take float32 only")
    y = output_of(node, graph)
    if y.dtype != F32:
        raise ModelError(f"{node}: output is {y.type_name or y.dtype}, not float32")
    activation(node)


def _bias(inputs: list, i: int) -> np.ndarray | None:
    return inputs[i] if i < len(inputs) else None


@register
class Conv3D(Op):
    name = "CONV_3D"
    types = "float32"
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) not in (2, 3) or min(node.inputs[:2]) < 0:
            raise ModelError(f"{node}: expects input, filter and an optional bias, has inputs {node.inputs}")
        _check_types(node, graph, [0, 1, 2])
        _geometry(node)

    @staticmethod
    def _out(node: Node, xs, ws) -> tuple[int, int, int]:
        if len(xs) != 5 or len(ws) != 5:
            raise ModelError(f"{node}: input and filter must be 5-D, have {list(xs)} and {list(ws)}")
        if xs[4] != ws[3]:
            raise ModelError(f"{node}: input has {xs[4]} channels, the filter expects {ws[3]}")
        padding, strides, dilations = _geometry(node)
        out = tuple(out_size(padding, n, kk, s, d) for n, kk, s, d in zip(xs[1:4], ws[:3], strides, dilations))
        if min(out) < 1:
            raise ModelError(f"{node}: the window leaves an empty output {list(out)}")
        return out[0], out[1], out[2]

    @staticmethod
    def infer(node, graph, shapes):
        if len(shapes) > 2 and shapes[2] is not None and tuple(shapes[2]) != (shapes[1][4],):
            raise ModelError(f"{node}: bias has shape {list(shapes[2])}, expected {[shapes[1][4]]}")
        return [(shapes[0][0], *Conv3D._out(node, shapes[0], shapes[1]), shapes[1][4])]

    @staticmethod
    def macs(node, graph):
        w = graph.tensors[node.inputs[1]]
        return output_of(node, graph).size * math.prod(w.shape[:4])

    @staticmethod
    def run_cpu(node, graph, inputs):
        x, w = inputs[0], inputs[1]
        Conv3D.infer(node, graph, [None if v is None else v.shape for v in inputs])
        out = Conv3D._out(node, x.shape, w.shape)
        padding, strides, dilations = _geometry(node)
        pads = tuple(pad_before(n, kk, s, d, o) for n, kk, s, d, o in zip(x.shape[1:4], w.shape[:3], strides,
                                                                          dilations, out))
        return [k.conv3d(x, w, _bias(inputs, 2), strides, dilations, pads, out, *float_range(activation(node)))]


@register
class Conv3DTranspose(Op):
    name = "CONV_3D_TRANSPOSE"
    types = "float32"
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) not in (3, 4) or min(node.inputs[:3]) < 0:
            raise ModelError(f"{node}: expects output shape, filter, input and an optional bias, has inputs "
                             f"{node.inputs}")
        shape = graph.tensors[node.inputs[0]]
        if shape.dtype != np.int32 or shape.shape != (5,):
            raise ModelError(f"{node}: the output shape must be an int32 tensor of 5 values, is {shape.dtype} "
                             f"{list(shape.shape)}")
        _check_types(node, graph, [1, 2, 3])
        _geometry(node)

    @staticmethod
    def _check_shapes(node: Node, xs, ws) -> None:
        if len(xs) != 5 or len(ws) != 5:
            raise ModelError(f"{node}: input and filter must be 5-D, have {list(xs)} and {list(ws)}")
        if xs[4] != ws[4]:
            raise ModelError(f"{node}: input has {xs[4]} channels, the filter expects {ws[4]}")

    @staticmethod
    def _shape(node: Node, value: np.ndarray, xs, ws) -> tuple[int, ...]:
        Conv3DTranspose._check_shapes(node, xs, ws)
        out = tuple(int(v) for v in value.reshape(-1))
        if len(out) != 5 or out[0] != xs[0] or out[4] != ws[3] or min(out) < 1:
            raise ModelError(f"{node}: output shape {list(out)} must be [batch {xs[0]}, D, H, W, {ws[3]} channels] "
                             "with positive sizes")
        padding, strides, dilations = _geometry(node)
        conv_out = tuple(out_size(padding, n, kk, s, d) for n, kk, s, d in zip(out[1:4], ws[:3], strides, dilations))
        if conv_out != tuple(xs[1:4]):
            raise ModelError(f"{node}: output shape {list(out)} does not lead back to the input's {list(xs[1:4])} "
                             f"under this padding and stride (a convolution of it gives {list(conv_out)})")
        return out

    @staticmethod
    def infer(node, graph, shapes):
        if len(shapes) > 3 and shapes[3] is not None and tuple(shapes[3]) != (shapes[1][3],):
            raise ModelError(f"{node}: bias has shape {list(shapes[3])}, expected {[shapes[1][3]]}")
        value = graph.tensors[node.inputs[0]].data
        if value is None:  # known at invoke only
            Conv3DTranspose._check_shapes(node, shapes[2], shapes[1])
            data_dependent(node)
        return [Conv3DTranspose._shape(node, value, shapes[2], shapes[1])]

    @staticmethod
    def macs(node, graph):
        return graph.tensors[node.inputs[2]].size * math.prod(graph.tensors[node.inputs[1]].shape[:4])

    @staticmethod
    def run_cpu(node, graph, inputs):
        shape, w, x = inputs[0], inputs[1], inputs[2]
        out = Conv3DTranspose._shape(node, shape, x.shape, w.shape)
        padding, strides, dilations = _geometry(node)
        conv_out = x.shape[1:4]
        pads = tuple(pad_before(n, kk, s, d, o) for n, kk, s, d, o in zip(out[1:4], w.shape[:3], strides, dilations,
                                                                          conv_out))
        return [k.conv3d_transpose(x, w, _bias(inputs, 3), strides, dilations, pads, (out[1], out[2], out[3]),
                                   *float_range(activation(node)))]
