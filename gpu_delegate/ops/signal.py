"""Complex-valued ops: RFFT2D, and COMPLEX_ABS, REAL and IMAG that take complex tensors apart.

RFFT2D transforms the innermost two dimensions of a float32 tensor, cropped or zero-padded to fft_length
(powers of two, as TFLite's fft2d library needs), in float64 like TFLite, and returns complex64 of shape
[..., fft_length[0], fft_length[1] / 2 + 1]. A non-constant fft_length makes the output shape known only when
the node runs.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import arity, data_dependent
from .operands import (
    Inputs,
    Shape,
    arrays,
    bounded,
    int_list,
    known,
    operand,
    require_type,
    tensor_in,
    tensor_out,
)

_PARTS: dict[np.dtype, type] = {np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}


class _ComplexPart(Op):
    """complex64 -> float32, complex128 -> float64, elementwise."""

    max_version = 1

    @staticmethod
    def part(z: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        z, y = tensor_in(node, graph, 0), tensor_out(node, graph)
        require_type(node, z, (np.complex64, np.complex128), "the input")
        require_type(node, y, (_PARTS[z.dtype],), "the output")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        return known(node, shapes)

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        z, = arrays(node, inputs)
        return [np.array(cls.part(z), _PARTS[z.dtype], copy=True)]


@register
class ComplexAbs(_ComplexPart):
    name = "COMPLEX_ABS"

    @staticmethod
    def part(z: np.ndarray) -> np.ndarray:
        return np.abs(z)


@register
class Real(_ComplexPart):
    name = "REAL"

    @staticmethod
    def part(z: np.ndarray) -> np.ndarray:
        return z.real


@register
class Imag(_ComplexPart):
    name = "IMAG"

    @staticmethod
    def part(z: np.ndarray) -> np.ndarray:
        return z.imag


def _fft_length(node: Node, value: np.ndarray) -> tuple[int, int]:
    if value.shape != (2,):
        raise ModelError(f"{node}: fft_length must hold 2 values, has shape {list(value.shape)}")
    height, width = int_list(node, value, "fft_length")
    for n in (height, width):
        if n < 1 or n & (n - 1):
            raise ModelError(f"{node}: fft_length {[height, width]} must be powers of two")
    return height, width


@register
class Rfft2d(Op):
    name, max_version = "RFFT2D", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        require_type(node, tensor_in(node, graph, 0), (np.float32,), "the input")
        require_type(node, tensor_in(node, graph, 1), (np.int32,), "fft_length")
        require_type(node, tensor_out(node, graph), (np.complex64,), "the output")

    @staticmethod
    def _shape(node: Node, shape: Shape, lengths: tuple[int, int]) -> Shape:
        if len(shape) < 2:
            raise ModelError(f"{node}: the input must have rank >= 2, has shape {list(shape)}")
        return (*shape[:-2], lengths[0], lengths[1] // 2 + 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape = known(node, shapes)[0]
        value = operand(node, graph, None, 1)
        if value is None:
            data_dependent(node)
        return [Rfft2d._shape(node, shape, _fft_length(node, value))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, value = arrays(node, inputs)
        lengths = _fft_length(node, value)
        bounded(node, Rfft2d._shape(node, x.shape, lengths), np.dtype(np.complex64))
        return [np.fft.rfft2(x.astype(np.float64), s=lengths, axes=(-2, -1)).astype(np.complex64)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        out = graph.tensors[node.outputs[0]]
        return 5 * out.size * max(1, int(np.log2(max(out.size, 1))))
