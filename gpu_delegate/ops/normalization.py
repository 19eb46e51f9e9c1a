"""L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION: each vector along the last dimension rescaled by its
own norm.

L2_NORMALIZATION takes float32 and 8-bit quantized tensors; a quantized output has TFLite's fixed scale 1/128
(zero point 0 for int8, 128 for uint8), and the integer kernel (cpu/normalization.py) reproduces TFLite's
fixed-point arithmetic bit for bit. LOCAL_RESPONSE_NORMALIZATION is float32 only and follows TFLite's default
(optimized) kernel, whose window [c - radius, c + radius] is TensorFlow's; LiteRT's reference kernel
(BUILTIN_REF) stops one channel short of it.
"""

from __future__ import annotations

import numpy as np

from ..cpu import normalization as k
from ..errors import ModelError
from ..graph import ACT_NONE, Graph, Node
from .base import Op, register
from .checks import arity, per_tensor
from .operands import Inputs, Shape, arrays, known, require_type, same_type, tensor_in, tensor_out

_L2_EPSILON = np.float32(1e-6)  # TFLite's, for float inputs; the quantized kernel needs none
_L2_OUTPUT = {np.dtype(np.int8): 0, np.dtype(np.uint8): 128}  # zero points of the fixed output scale 1/128


def _rows(x: np.ndarray) -> np.ndarray:
    """The tensor as (vectors, last dimension), C-contiguous."""
    return np.array(x, copy=True, order="C").reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


@register
class L2Normalization(Op):
    name, max_version = "L2_NORMALIZATION", 2

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x, y = tensor_in(node, graph, 0), tensor_out(node, graph)
        require_type(node, x, (np.float32, np.int8, np.uint8), "the input")
        same_type(node, x, y)
        if node.attrs.get("fused_activation_function", ACT_NONE) != ACT_NONE:
            raise ModelError(f"{node}: a fused activation is not supported (TFLite's kernels refuse it too)")
        if x.dtype != np.float32:
            per_tensor(node, x)
            scale, zero_point = per_tensor(node, y)
            if np.float32(scale) != np.float32(1 / 128) or zero_point != _L2_OUTPUT[y.dtype]:
                raise ModelError(f"{node}: a {y.type_name or y.dtype} output must have scale 1/128 and zero point "
                                 f"{_L2_OUTPUT[y.dtype]}, has {scale} and {zero_point}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape, = known(node, shapes)
        if not shape:
            raise ModelError(f"{node}: the input must have rank >= 1")
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        L2Normalization.infer(node, graph, [x.shape])
        rows = _rows(x)
        out = np.empty_like(rows)
        if x.dtype == np.float32:
            k.l2_normalize_float(rows, _L2_EPSILON, out)
        else:
            zero_point = per_tensor(node, tensor_in(node, graph, 0))[1]
            k.l2_normalize_quantized(rows, zero_point, x.dtype == np.uint8, out)
        return [out.reshape(x.shape)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return 2 * graph.tensors[node.inputs[0]].size


@register
class LocalResponseNormalization(Op):
    """x / (bias + alpha * sum of x^2 over the channels within ``radius``)^beta."""

    name, max_version = "LOCAL_RESPONSE_NORMALIZATION", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x = tensor_in(node, graph, 0)
        require_type(node, x, (np.float32,), "the input")
        same_type(node, x, tensor_out(node, graph))
        if node.attrs.get("radius", 0) < 0:
            raise ModelError(f"{node}: radius {node.attrs.get('radius')} must not be negative")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape, = known(node, shapes)
        if len(shape) != 4:
            raise ModelError(f"{node}: the input must be 4-D, has shape {list(shape)}")
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        LocalResponseNormalization.infer(node, graph, [x.shape])
        rows = _rows(x)
        out = np.empty_like(rows)
        a = node.attrs
        k.local_response_normalize(rows, int(a.get("radius", 0)), np.float32(a.get("bias", 0.0)),
                                   np.float32(a.get("alpha", 0.0)), np.float32(a.get("beta", 0.0)), out)
        return [out.reshape(x.shape)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return (2 * node.attrs.get("radius", 0) + 3) * graph.tensors[node.inputs[0]].size
