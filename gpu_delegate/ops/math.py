"""Elementwise math beyond ops/elementwise.py: ATAN2, CEIL, ROUND, RELU_0_TO_1, the integer RIGHT_SHIFT and
BITWISE_XOR, BITCAST, BUCKETIZE and FAKE_QUANT.

All of it is exact in numpy: the float ops call the same libm functions TFLite's kernels call, in the
tensor's own precision, and the integer ops are single ufuncs. CEIL, ROUND and RELU_0_TO_1 are unary ops of
the elementwise family (ROUND rounds halves to even, as TFLite's RoundToNearest does) and so also run on the
GPU, fused into the kernel producing their input; RELU_0_TO_1 takes 8-bit quantized tensors like the other
RELUs, through their fixed-point table.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..cpu.elementwise import round_half_away
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, broadcast_shape, register
from .checks import arity
from .elementwise import _ReluX, _Unary
from .operands import Inputs, Shape, arrays, known, require_type, same_type, tensor_in, tensor_out

_FLOATS = (np.float32, np.float64, np.float16)
_SHIFTABLE = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32)


class _FloatUnary(_Unary):
    """A unary op TFLite computes on float32 and float16 tensors (not quantized ones); the GPU takes float32."""

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        require_type(node, tensor_in(node, graph, 0), (np.float32, np.float16), "the input")
        same_type(node, tensor_in(node, graph, 0), tensor_out(node, graph))

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if tensor_in(node, graph, 0).dtype != np.float32:
            return "float16 tensors run on the CPU"
        return True


@register
class Ceil(_FloatUnary):
    name, max_version = "CEIL", 1
    expr = "ceil(a)"
    compute = staticmethod(lambda x, attrs: np.ceil(x))


@register
class Round(_FloatUnary):
    name, max_version = "ROUND", 1
    expr = "RINT(a)"
    compute = staticmethod(lambda x, attrs: np.rint(x))


@register
class Relu0To1(_ReluX):
    name, max_version, low, high = "RELU_0_TO_1", 1, 0.0, 1.0


@register
class Atan2(Op):
    """atan2(y, x) of two tensors of one shape (TFLite does not broadcast)."""

    name, max_version = "ATAN2", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        y = tensor_in(node, graph, 0)
        require_type(node, y, _FLOATS, "y")
        same_type(node, y, tensor_in(node, graph, 1))
        same_type(node, y, tensor_out(node, graph))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        y, x = known(node, shapes)
        if y != x:
            raise ModelError(f"{node}: y of shape {list(y)} and x of shape {list(x)} must have the same shape")
        return [y]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        y, x = arrays(node, inputs)
        Atan2.infer(node, graph, [y.shape, x.shape])
        return [np.arctan2(y, x).astype(y.dtype, copy=False)]


class _Bitwise(Op):
    """A broadcasting binary op on 8/16/32-bit integers, signed or not."""

    max_version: ClassVar[int | None] = 1

    @staticmethod
    def compute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        a = tensor_in(node, graph, 0)
        require_type(node, a, _SHIFTABLE, "input 0")
        same_type(node, a, tensor_in(node, graph, 1))
        same_type(node, a, tensor_out(node, graph))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        a, b = known(node, shapes)
        return [broadcast_shape(a, b, node)]

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        a, b = arrays(node, inputs)
        broadcast_shape(a.shape, b.shape, node)
        return [cls.compute(a, b).astype(a.dtype, copy=False)]


@register
class RightShift(_Bitwise):
    """x >> y with y clamped to [0, bits - 1], as TFLite does to stay clear of undefined shifts; arithmetic
    for signed types."""

    name = "RIGHT_SHIFT"

    @staticmethod
    def compute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = a.dtype.itemsize * 8
        return np.right_shift(a, np.clip(b.astype(np.int64), 0, bits - 1).astype(a.dtype))


@register
class BitwiseXor(_Bitwise):
    name = "BITWISE_XOR"

    @staticmethod
    def compute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.bitwise_xor(a, b)


def _element_size(node: Node, graph: Graph, t: int, what: str) -> int:
    tensor = graph.tensors[t]
    if tensor.type_name in ("STRING", "RESOURCE", "VARIANT", "INT4") or tensor.dtype.kind == "O":
        raise ModelError(f"{node}: {what} is {tensor.type_name}, which has no fixed element size to reinterpret")
    return tensor.dtype.itemsize


@register
class Bitcast(Op):
    """The input's bytes reinterpreted as the output's type. A wider output type consumes the last dimension
    (which must hold the size ratio), a narrower one appends a dimension of that ratio."""

    name, max_version = "BITCAST", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        _element_size(node, graph, node.inputs[0], "the input")
        _element_size(node, graph, node.outputs[0], "the output")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape, = known(node, shapes)
        size_in = _element_size(node, graph, node.inputs[0], "the input")
        size_out = _element_size(node, graph, node.outputs[0], "the output")
        if size_in > size_out:
            return [(*shape, size_in // size_out)]
        if size_in < size_out:
            if not shape or shape[-1] != size_out // size_in:
                raise ModelError(f"{node}: casting {size_in}-byte to {size_out}-byte elements needs a last "
                                 f"dimension of {size_out // size_in}, the input has shape {list(shape)}")
            return [shape[:-1]]
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        shape = Bitcast.infer(node, graph, [x.shape])[0]
        flat = np.array(x, copy=True, order="C").reshape(-1)
        return [flat.view(tensor_out(node, graph).dtype).reshape(shape)]


@register
class Bucketize(Op):
    """The index of the first boundary above each value (boundaries sorted ascending, compared in the
    boundary's float32 for integer inputs and in float64 for float64 inputs, as C++'s conversions do)."""

    name, max_version = "BUCKETIZE", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        require_type(node, tensor_in(node, graph, 0), (np.float32, np.float64, np.int32, np.int64), "the input")
        require_type(node, tensor_out(node, graph), (np.int32,), "the output")
        bounds = np.asarray(node.attrs.get("boundaries", []), np.float32)
        if np.any(bounds[1:] < bounds[:-1]):
            raise ModelError(f"{node}: boundaries {bounds.tolist()} are not sorted ascending")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        return known(node, shapes)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        bounds = np.asarray(node.attrs.get("boundaries", []), np.float32)
        if x.dtype == np.float64:
            return [np.searchsorted(bounds.astype(np.float64), x, side="right").astype(np.int32)]
        return [np.searchsorted(bounds, x.astype(np.float32), side="right").astype(np.int32)]


def fake_quant_grid(lo: float, hi: float, num_bits: int) -> tuple[np.float32, np.float32, np.float32]:
    """TFLite's NudgeQuantizationRange, in float32: (nudged min, nudged max, scale) of the grid 0..2^bits-1
    shifted so that zero falls on it."""
    q_hi = np.float32((1 << num_bits) - 1)
    scale = (np.float32(hi) - np.float32(lo)) / q_hi
    zero_from_min = np.float32(0.0) - np.float32(lo) / scale
    zero = np.float32(min(max(float(np.floor(np.float64(zero_from_min) + 0.5)), 0.0), float(q_hi)))
    return (np.float32(0.0) - zero) * scale, (q_hi - zero) * scale, scale


@register
class FakeQuant(Op):
    """Float values snapped to the grid of a num_bits quantization of [min, max], as TFLite's FakeQuant does
    (float32 throughout, halves rounded away from zero). Version 2 adds narrow_range, which LiteRT registers
    but refuses to run; so do we."""

    name, max_version = "FAKE_QUANT", 2

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        require_type(node, tensor_in(node, graph, 0), (np.float32,), "the input")
        same_type(node, tensor_in(node, graph, 0), tensor_out(node, graph))
        lo, hi, bits = node.attrs.get("min", 0.0), node.attrs.get("max", 0.0), node.attrs.get("num_bits", 0)
        if node.attrs.get("narrow_range", False):
            raise ModelError(f"{node}: narrow_range is not supported at run time (TFLite applies it to weights "
                             "only, and its kernel refuses it too)")
        if not 2 <= bits <= 16:
            raise ModelError(f"{node}: num_bits {bits} is outside 2..16")
        if not np.float32(lo) < np.float32(hi):
            raise ModelError(f"{node}: the range [{lo}, {hi}] is empty")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        return known(node, shapes)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        lo, hi, scale = fake_quant_grid(node.attrs.get("min", 0.0), node.attrs.get("max", 0.0),
                                        node.attrs.get("num_bits", 8))
        clamped = np.fmin(hi, np.fmax(lo, x))  # std::min/max order: a NaN input lands on the nudged min
        steps = ((clamped - lo) * (np.float32(1.0) / scale)).astype(np.float32)
        return [(round_half_away(steps).astype(np.float32) * scale + lo).astype(np.float32)]
