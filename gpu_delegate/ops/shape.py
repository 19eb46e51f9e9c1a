"""Tensors made from shapes and scalars: FILL, ZEROS_LIKE, RANGE, RANK, BROADCAST_ARGS and BROADCAST_TO.

FILL, RANGE, BROADCAST_ARGS and BROADCAST_TO have output shapes that depend on the values of an input (the
dims, the bounds, the shapes). When those inputs are constants `infer` computes the shape from them; otherwise
it reports the shape the model declares and `run_cpu` returns an array of the real one. Quantized values go
through as their codes: FILL and BROADCAST_TO require the output to carry the input's quantization, as
TFLite's kernels do.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import STRING
from ..errors import ModelError
from ..graph import Graph, Node
from ..lowering.context import LowerContext
from .base import Op, register
from .checks import arity, data_dependent
from .layout import _remap as remap
from .operands import (
    Inputs,
    Shape,
    arrays,
    bounded,
    known,
    operand,
    require_type,
    same_quantization,
    same_type,
    scalar_of,
    shape_vector,
    tensor_in,
    tensor_out,
)

_SHAPE_TYPES = (np.int32, np.int64)
# Every type with a fixed element size numpy holds: ops that only copy elements take them all.
_ANY = (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
        np.uint64, np.bool_, np.complex64, np.complex128)


def _check_scalar_shape(node: Node, shape: Shape | None, what: str) -> None:
    if shape is not None and shape != ():
        raise ModelError(f"{node}: {what} must be a scalar (0-d) tensor, has shape {list(shape)}")


@register
class Fill(Op):
    """A tensor of shape ``dims`` (input 0, int32/int64) holding the scalar ``value`` (input 1) everywhere."""

    name, max_version = "FILL", 5
    strings = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        require_type(node, tensor_in(node, graph, 0), _SHAPE_TYPES, "dims")
        value, out = tensor_in(node, graph, 1), tensor_out(node, graph)
        if value.dtype != STRING:
            require_type(node, value, tuple(t for t in _ANY if np.dtype(t).itemsize <= 8), "the value")
        same_type(node, value, out)
        same_quantization(node, value, out)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        _check_scalar_shape(node, shapes[1], "the value")
        dims = operand(node, graph, None, 0)
        return [shape_vector(node, dims, "dims")] if dims is not None else data_dependent(node)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        dims, value = arrays(node, inputs)
        _check_scalar_shape(node, value.shape, "the value")
        return [np.full(bounded(node, shape_vector(node, dims, "dims"), value.dtype), value, value.dtype)]


@register
class ZerosLike(Op):
    name, max_version = "ZEROS_LIKE", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x = tensor_in(node, graph, 0)
        require_type(node, x, (np.float32, np.int32, np.int64), "the input")
        same_type(node, x, tensor_out(node, graph))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        return known(node, shapes)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        return [np.zeros(x.shape, x.dtype)]


@register
class Rank(Op):
    """The number of dimensions, as a 0-d int32 tensor."""

    name, max_version = "RANK", 1
    strings = True
    reads_shapes_only = True  # the input's rank, not its values

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        require_type(node, tensor_out(node, graph), (np.int32,), "the output")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        return [()]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        return [np.array(arrays(node, inputs)[0].ndim, np.int32)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return 0


def _range_size(node: Node, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    """TFLite's GetSize: integers by ceiling division, floats by ceil(|(limit - start) / delta|) in the
    tensors' own precision."""
    if delta == 0:
        raise ModelError(f"{node}: delta must not be 0")
    if not ((start >= limit and delta < 0) or (start <= limit and delta > 0)):
        raise ModelError(f"{node}: delta {delta} does not lead from start {start} to limit {limit}")
    if start.dtype.kind in "iu":
        span, step = abs(int(limit) - int(start)), abs(int(delta))
        return (span + step - 1) // step
    return int(np.ceil(np.abs((limit - start) / delta)))


@register
class Range(Op):
    """start, start + delta, ... up to (not including) limit: three 0-d tensors of one type. Floats are
    accumulated one step at a time, as TFLite does, not computed as start + i * delta."""

    name, max_version = "RANGE", 2

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        start = tensor_in(node, graph, 0)
        require_type(node, start, (np.float32, np.int32, np.int64), "start")
        for t in (tensor_in(node, graph, 1), tensor_in(node, graph, 2), tensor_out(node, graph)):
            same_type(node, start, t)

    @staticmethod
    def _bounds(node: Node, values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        start, limit, delta = (scalar_of(node, v, what) for v, what in zip(values, ("start", "limit", "delta")))
        return start, limit, delta

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        for shape, what in zip(known(node, shapes), ("start", "limit", "delta")):
            _check_scalar_shape(node, shape, what)
        values = [operand(node, graph, None, i) for i in range(3)]
        constants = [v for v in values if v is not None]
        if len(constants) < 3:
            data_dependent(node)
        return [(_range_size(node, *Range._bounds(node, constants)),)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        values = arrays(node, inputs)
        for v, what in zip(values, ("start", "limit", "delta")):
            _check_scalar_shape(node, v.shape, what)
        start, limit, delta = Range._bounds(node, values)
        n = bounded(node, (_range_size(node, start, limit, delta),), start.dtype)[0]
        if start.dtype.kind in "iu":
            return [(int(start) + np.arange(n, dtype=np.int64) * int(delta)).astype(start.dtype)]
        steps = np.full(n, delta, start.dtype)
        if n:
            steps[0] = start
        return [np.add.accumulate(steps, dtype=start.dtype)]


def _broadcast(node: Node, a: Shape, b: Shape) -> Shape:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        raise ModelError(f"{node}: shapes {list(a)} and {list(b)} do not broadcast") from None


@register
class BroadcastArgs(Op):
    """The broadcast of two shapes (1-D int32/int64 tensors), as a shape tensor of the same type."""

    name, max_version = "BROADCAST_ARGS", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        s0 = tensor_in(node, graph, 0)
        require_type(node, s0, _SHAPE_TYPES, "shape 0")
        same_type(node, s0, tensor_in(node, graph, 1))
        same_type(node, s0, tensor_out(node, graph))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        a, b = known(node, shapes)
        if len(a) != 1 or len(b) != 1:
            raise ModelError(f"{node}: the shapes must be 1-D tensors, are of shapes {list(a)} and {list(b)}")
        return [(max(a[0], b[0]),)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        a, b = arrays(node, inputs)
        result = _broadcast(node, shape_vector(node, a, "shape 0"), shape_vector(node, b, "shape 1"))
        return [np.array(result, a.dtype).reshape(-1)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return 0


_MAX_BROADCAST_RANK = 8  # TFLite's BroadcastTo kernel handles up to 8 dimensions


@register
class BroadcastTo(Op):
    """The input repeated along its size-1 (and missing leading) dimensions to ``shape`` (input 1). Version
    1 of this op code was withdrawn: TFLite registers versions 2 and up."""

    name, max_version = "BROADCAST_TO", 4

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        if node.version < 2:
            raise ModelError(f"{node}: op version 1 of BROADCAST_TO was withdrawn (TFLite runs versions 2 to 4)")
        x, out = tensor_in(node, graph, 0), tensor_out(node, graph)
        require_type(node, x, _ANY, "the input")
        require_type(node, tensor_in(node, graph, 1), _SHAPE_TYPES, "the shape")
        same_type(node, x, out)
        same_quantization(node, x, out)

    @staticmethod
    def _target(node: Node, x_shape: Shape, shape: np.ndarray) -> Shape:
        target = shape_vector(node, shape, "the shape")
        if len(target) > _MAX_BROADCAST_RANK:
            raise ModelError(f"{node}: the shape {list(target)} has more than {_MAX_BROADCAST_RANK} dimensions")
        if len(x_shape) > len(target) or _broadcast(node, x_shape, target) != target:
            raise ModelError(f"{node}: an input of shape {list(x_shape)} does not broadcast to {list(target)}")
        return target

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape = operand(node, graph, None, 1)
        if shape is None:
            data_dependent(node)
        return [BroadcastTo._target(node, known(node, shapes)[0], shape)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, shape = arrays(node, inputs)
        return [np.broadcast_to(x, bounded(node, BroadcastTo._target(node, x.shape, shape), x.dtype)).copy()]

    gpu_ints = gpu_rank5 = True

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if graph.tensors[node.inputs[1]].data is None:
            return "the shape is computed at run time"
        if graph.constant_like(node.inputs[0]):
            return "the input is a constant (the GPU path moves run-time data only)"
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        """kernels/dialect/remap.dialect: each dimension of the input read at the output's coordinate modulo its
        size (0 along a broadcast one), the input's dimensions aligned with the output's last ones."""
        src, dst = ctx.input(node, 0), ctx.output(node)
        rs, rd = len(ctx.shape(src)), len(ctx.shape(dst))
        remap(ctx, src, dst, [0] * rs, [1] * rs, [i + rd - rs for i in range(rs)], tile=True)

