"""Reductions: MEAN, SUM, REDUCE_MAX/MIN/PROD/ANY/ALL, ARG_MAX/ARG_MIN, SOFTMAX, LOG_SOFTMAX, CUMSUM, TOPK_V2.

The axis (or k) input is usually a constant; when it is not, output shapes are known only once the node
has run, so ``infer`` says it cannot tell (NotImplementedError) and the interpreter keeps the file's shape.

On the GPU: MEAN, SUM, REDUCE_MAX/MIN/PROD over constant axes (kernels/dialect/reduce.dialect) and SOFTMAX, LOG_SOFTMAX
(kernels/dialect/softmax.dialect), in float; quantized outputs get the framework's rounding to their grid afterwards.
ARG_MAX/ARG_MIN and TOPK_V2 give integer outputs, REDUCE_ANY/ALL bools: they stay on the CPU.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..cpu.quant import dequantize, quantize
from ..cpu.quantize import requantize_q
from ..cpu.reduce import cumsum, log_softmax, mean_q, softmax, softmax_q8, sum_q, top_k, trunc_divide
from ..errors import ModelError
from ..graph import Graph, Node
from ..lowering.context import LowerContext
from ..phwc4 import slices
from .base import Defines, Op, register
from .checks import arity, check_type, is_quantized, moves_grid_values, quant_of, required

Shapes = list[tuple[int, ...] | None]


def _axis_data(node: Node, graph: Graph, inputs: list[np.ndarray | None] | None = None) -> np.ndarray:
    """Input 1's values: from the running graph when given, else the constant (NotImplementedError if
    it is not one: the shape is dynamic)."""
    if inputs is not None:
        return np.asarray(inputs[1])
    data = graph.tensors[node.inputs[1]].data
    if data is None:
        raise NotImplementedError
    return data


def _check_index_input(node: Node, graph: Graph, what: str) -> None:
    t = graph.tensors[node.inputs[1]]
    if t.dtype not in (np.int32, np.int64):
        raise ModelError(f"{node}: {what} (input 1) must be int32 or int64, is {t.type_name or t.dtype}")


def resolve_axes(node: Node, raw: np.ndarray, rank: int) -> tuple[int, ...]:
    """Axes in [0, rank), negatives wrapped, duplicates dropped (first occurrence wins), as TFLite."""
    out: list[int] = []
    for a in np.asarray(raw).reshape(-1).tolist():
        c = a + rank if a < 0 else a
        if not 0 <= c < rank:
            raise ModelError(f"{node}: axis {a} is out of range for a rank-{rank} input")
        if c not in out:
            out.append(c)
    return tuple(out)


def _single_axis(node: Node, raw: np.ndarray, rank: int) -> int:
    if np.asarray(raw).size != 1:
        raise ModelError(f"{node}: axis must be one value, got {np.asarray(raw).reshape(-1).tolist()}")
    return resolve_axes(node, raw, rank)[0]


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool) -> tuple[int, ...]:
    if keep:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class _Reduce(Op):
    bools: ClassVar[bool] = False
    numeric: ClassVar[bool] = True
    # the GPU form (kernels/dialect/reduce.dialect): combine two values (floats or FLT4s), its identity, the last step
    gpu_op: ClassVar[str] = "((x) + (y))"
    gpu_init: ClassVar[float] = 0.0
    gpu_finish: ClassVar[str] = "(v)"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if not graph.tensors[node.inputs[1]].is_const:
            return "the axis input is not a constant"
        return True

    @classmethod
    def lower(cls, node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node)
        rank = len(ctx.shape(src))
        reduced = {a + 4 - rank for a in resolve_axes(node, ctx.const_ints(ctx.input(node, 1)), rank)}
        shape = ctx.bhwc(src)
        keep = [1 if a in reduced else d for a, d in enumerate(shape)]
        count = int(np.prod([shape[a] for a in reduced]))
        b, h, w, c = ctx.bhwc(dst)
        defines: Defines = {f"RED_{d}": int(a in reduced) for a, d in enumerate("BHWC")}
        defines.update(KEEP_H=keep[1], KEEP_W=keep[2], INIT=cls.gpu_init, COUNT=float(count))
        helpers = f"#define REDUCE_OP(x, y) {cls.gpu_op}\n#define FINISH(v) {cls.gpu_finish}\n"
        ctx.kernel("reduce", {"src": src}, {"dst": dst}, defines=defines, grid=(w, h, b * slices(c)),
                   helpers=helpers)

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _check_index_input(node, graph, "axis")
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        kinds = {"bools": cls.bools, "ints": cls.numeric, "floats": cls.numeric, "quantized": cls.numeric}
        check_type(node, x, **kinds)
        check_type(node, y, **kinds)
        if x.dtype != y.dtype:
            raise ModelError(f"{node}: input is {x.dtype}, output is {y.dtype}; they must match")
        axis = graph.tensors[node.inputs[1]].data
        if axis is not None:
            resolve_axes(node, axis, len(x.shape))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        xs = required(node, shapes, 0)
        axes = resolve_axes(node, _axis_data(node, graph), len(xs))
        return [_reduced_shape(xs, axes, bool(node.attrs.get("keep_dims", False)))]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return graph.tensors[node.inputs[0]].size

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        axes = resolve_axes(node, _axis_data(node, graph, inputs), x.ndim)
        keep = bool(node.attrs.get("keep_dims", False))
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if is_quantized(tx):
            qi, qo = quant_of(node, tx).scalar(), quant_of(node, ty).scalar()
            return [cls.reduce_quantized(x, axes, keep, qi, qo)]
        with np.errstate(all="ignore"):
            return [np.asarray(cls.reduce(x, axes, keep), x.dtype)]

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def reduce_quantized(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
                         qo: tuple[float, int]) -> np.ndarray:
        """Default: dequantize, reduce in float, requantize."""
        with np.errstate(all="ignore"):
            y = cls.reduce(dequantize(x, *qi), axes, keep)
        return quantize(np.asarray(y), *qo, x.dtype)


@register
class Mean(_Reduce):
    name = "MEAN"
    gpu_finish = "((v) / SPLAT(COUNT))"

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        if x.dtype.kind in "iu":  # integer mean: an int64 sum divided as C divides
            n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
            return trunc_divide(x.sum(axis=axes, keepdims=keep, dtype=np.int64), max(n, 1))
        return np.mean(x, axis=axes, keepdims=keep, dtype=x.dtype)

    @classmethod
    def reduce_quantized(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
                         qo: tuple[float, int]) -> np.ndarray:
        return mean_q(x, axes, keep, qi, qo)


@register
class Sum(_Reduce):
    name = "SUM"

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)

    @classmethod
    def reduce_quantized(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
                         qo: tuple[float, int]) -> np.ndarray:
        return sum_q(x, axes, keep, qi, qo)


@register
class ReduceProd(_Reduce):
    name = "REDUCE_PROD"
    gpu_op, gpu_init = "((x) * (y))", 1.0

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)


class _Extreme(_Reduce):
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @classmethod
    def reduce_quantized(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool, qi: tuple[float, int],
                         qo: tuple[float, int]) -> np.ndarray:
        # dequantization is increasing, so the extreme code is the code of the extreme value
        y = cls.reduce(x, axes, keep)
        return y if qi == qo else requantize_q(y, qi, qo, x.dtype)


@register
class ReduceMax(_Extreme):
    name = "REDUCE_MAX"
    gpu_op, gpu_init = "max((x), (y))", -np.inf

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return np.max(x, axis=axes, keepdims=keep) if x.size else np.full(
            _reduced_shape(x.shape, axes, keep), _lowest(x.dtype), x.dtype)


@register
class ReduceMin(_Extreme):
    name = "REDUCE_MIN"
    gpu_op, gpu_init = "min((x), (y))", np.inf

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return np.min(x, axis=axes, keepdims=keep) if x.size else np.full(
            _reduced_shape(x.shape, axes, keep), _highest(x.dtype), x.dtype)


def _lowest(dtype: np.dtype) -> float:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> float:
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


@register
class ReduceAny(_Reduce):
    name, bools, numeric = "REDUCE_ANY", True, False
    lower = Op.lower  # bool tensors: no GPU form

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return np.any(x, axis=axes, keepdims=keep)


@register
class ReduceAll(_Reduce):
    name, bools, numeric = "REDUCE_ALL", True, False
    lower = Op.lower  # bool tensors: no GPU form

    @classmethod
    def reduce(cls, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        return np.all(x, axis=axes, keepdims=keep)


class _Arg(Op):
    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _check_index_input(node, graph, "axis")
        check_type(node, graph.tensors[node.inputs[0]], ints=True, bools=True)
        y = graph.tensors[node.outputs[0]]
        if y.dtype not in (np.int32, np.int64, np.int16):
            raise ModelError(f"{node}: output must be int32 or int64, is {y.type_name or y.dtype}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        xs = required(node, shapes, 0)
        axis = _single_axis(node, _axis_data(node, graph), len(xs))
        return [_reduced_shape(xs, (axis,), False)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return graph.tensors[node.inputs[0]].size

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        axis = _single_axis(node, _axis_data(node, graph, inputs), x.ndim)
        if x.shape[axis] == 0:
            raise ModelError(f"{node}: cannot pick from an empty axis {axis} of shape {list(x.shape)}")
        return [cls.pick(x, axis).astype(graph.tensors[node.outputs[0]].dtype)]

    @staticmethod
    def pick(x: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError


@register
class ArgMax(_Arg):
    name = "ARG_MAX"

    @staticmethod
    def pick(x: np.ndarray, axis: int) -> np.ndarray:
        return np.argmax(x, axis=axis)


@register
class ArgMin(_Arg):
    name = "ARG_MIN"

    @staticmethod
    def pick(x: np.ndarray, axis: int) -> np.ndarray:
        return np.argmin(x, axis=axis)


class _LastAxis(Op):
    """SOFTMAX and LOG_SOFTMAX: over the last axis, same shape out."""

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        check_type(node, x)
        check_type(node, y)
        if len(x.shape) < 1:
            raise ModelError(f"{node}: input must have at least one dimension")
        if is_quantized(x) != is_quantized(y) or (x.dtype.kind == "f") != (y.dtype.kind == "f"):
            raise ModelError(f"{node}: input {x.dtype} and output {y.dtype} must both be float or both quantized")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node)
        defines: Defines = {"BETA": float(node.attrs.get("beta", 1.0)), "LOG_SOFTMAX": int(node.op == "LOG_SOFTMAX")}
        grid, variants = ctx.pixels_layout(src, "softmax")
        ctx.kernel("softmax", {"src": src}, {"dst": dst}, defines=defines, grid=grid, variants=variants)


@register
class Softmax(_LastAxis):
    name = "SOFTMAX"

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        beta = float(node.attrs.get("beta", 1.0))
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if not is_quantized(tx):
            return [softmax(x, beta)]
        qi, qo = quant_of(node, tx).scalar(), quant_of(node, ty).scalar()
        if x.dtype.itemsize == 1:
            return [softmax_q8(x, qi[0], beta, qo, ty.dtype)]
        return [quantize(softmax(dequantize(x, *qi), beta), *qo, ty.dtype)]


@register
class LogSoftmax(_LastAxis):
    name = "LOG_SOFTMAX"

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        with np.errstate(divide="ignore"):
            if not is_quantized(tx):
                return [log_softmax(x)]
            return [quantize(log_softmax(dequantize(x, *quant_of(node, tx).scalar())), *quant_of(node, ty).scalar(),
                             ty.dtype)]


@register
class Cumsum(Op):
    name = "CUMSUM"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _check_index_input(node, graph, "axis")
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        check_type(node, x, ints=True, quantized=False)
        if x.dtype != y.dtype:
            raise ModelError(f"{node}: input is {x.dtype}, output is {y.dtype}; they must match")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return graph.tensors[node.inputs[0]].size

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        axis = _single_axis(node, _axis_data(node, graph, inputs), x.ndim)
        return [cumsum(x, axis, bool(node.attrs.get("exclusive", False)), bool(node.attrs.get("reverse", False)))]

    gpu_ints = True  # int32 sums are exact in float32 up to 2**24

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if graph.tensors[node.inputs[1]].data is None:
            return "the axis is computed at run time"
        if graph.tensors[node.inputs[0]].dtype not in (np.float32, np.float16, np.int32):
            return f"CUMSUM of {graph.tensors[node.inputs[0]].dtype} runs on the CPU"
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node)
        shape = ctx.shape(src)
        axis = _single_axis(node, _axis_data(node, graph), len(shape))
        defines: Defines = {"AXIS": axis + 4 - len(shape), "LENGTH": shape[axis],
                            "EXCLUSIVE": int(bool(node.attrs.get("exclusive", False))),
                            "REVERSE": int(bool(node.attrs.get("reverse", False)))}
        ctx.kernel("cumsum", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


@register
class TopKV2(Op):
    name = "TOPK_V2"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 2)
        _check_index_input(node, graph, "k")
        x, values, indices = graph.tensors[node.inputs[0]], *(graph.tensors[t] for t in node.outputs)
        check_type(node, x, ints=True)
        if values.dtype != x.dtype:
            raise ModelError(f"{node}: values output is {values.dtype}, the input {x.dtype}; they must match")
        if indices.dtype not in (np.int16, np.int32, np.int64):
            raise ModelError(f"{node}: indices output must be an integer type, is {indices.dtype}")
        if len(x.shape) < 1:
            raise ModelError(f"{node}: input must have at least one dimension")

    @staticmethod
    def _k(node: Node, k: np.ndarray, n: int) -> int:
        if k.size != 1 or not 0 <= int(k.reshape(-1)[0]) <= n:
            raise ModelError(f"{node}: k must be one value in 0..{n}, got {k.reshape(-1).tolist()}")
        return int(k.reshape(-1)[0])

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        xs = required(node, shapes, 0)
        k = TopKV2._k(node, _axis_data(node, graph), xs[-1])
        return [xs[:-1] + (k,)] * 2

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return graph.tensors[node.inputs[0]].size

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        values, indices = top_k(x, TopKV2._k(node, _axis_data(node, graph, inputs), x.shape[-1]))
        return [values, indices.astype(graph.tensors[node.outputs[1]].dtype)]
