"""The StableHLO ops LiteRT's builtin resolver registers whose meaning needs no subgraph:
STABLEHLO_ADD, _MULTIPLY, _MAXIMUM, _MINIMUM, _AND, _SHIFT_LEFT (same-shape elementwise, no broadcasting),
STABLEHLO_PAD (edge and interior padding; negative edges crop) and STABLEHLO_GATHER (the general gather).
Their options come from the operator's builtin_options_2 table.

STABLEHLO_REDUCE_WINDOW, _SCATTER and _COMPOSITE name subgraphs (a reduction body, an update computation, a
decomposition) and are left to multi-subgraph execution.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register

_NUMERIC = tuple(np.dtype(t) for t in (np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
                                       np.uint8, np.uint16, np.uint32, np.bool_))
_INTEGER = tuple(t for t in _NUMERIC if t.kind in "iub")


def _io(node: Node, graph: Graph, n_inputs: int) -> None:
    if len(node.inputs) != n_inputs or min(node.inputs) < 0 or len(node.outputs) != 1:
        raise ModelError(f"{node}: expects {n_inputs} inputs and 1 output, has {len(node.inputs)} and "
                         f"{len(node.outputs)}")


class _Elementwise(Op):
    types: tuple[np.dtype, ...] = _NUMERIC
    ufunc: ClassVar[np.ufunc] = np.add
    max_version = 1

    @classmethod
    def compute(cls, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cls.ufunc(a, b)

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        _io(node, graph, 2)
        a, b, y = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
        if a.dtype not in cls.types or b.dtype != a.dtype or y.dtype != a.dtype:
            raise ModelError(f"{node}: inputs {a.type_name or a.dtype} and {b.type_name or b.dtype}, output "
                             f"{y.type_name or y.dtype}: they must share one of {[str(t) for t in cls.types]}")

    @staticmethod
    def infer(node, graph, shapes):
        if tuple(shapes[0]) != tuple(shapes[1]):
            raise ModelError(f"{node}: shapes {list(shapes[0])} and {list(shapes[1])} differ (StableHLO ops do not "
                             "broadcast)")
        return [tuple(shapes[0])]

    @classmethod
    def run_cpu(cls, node, graph, inputs):
        cls.infer(node, graph, [v.shape for v in inputs])
        with np.errstate(over="ignore", invalid="ignore"):  # integers wrap, as in C++
            return [np.asarray(cls.compute(inputs[0], inputs[1])).astype(inputs[0].dtype, copy=False)]


@register
class StablehloAdd(_Elementwise):
    name = "STABLEHLO_ADD"
    ufunc = np.add


@register
class StablehloMultiply(_Elementwise):
    name = "STABLEHLO_MULTIPLY"
    ufunc = np.multiply


@register
class StablehloMaximum(_Elementwise):
    name = "STABLEHLO_MAXIMUM"
    ufunc = np.maximum


@register
class StablehloMinimum(_Elementwise):
    name = "STABLEHLO_MINIMUM"
    ufunc = np.minimum


@register
class StablehloAnd(_Elementwise):
    name = "STABLEHLO_AND"
    types = _INTEGER
    ufunc = np.bitwise_and


@register
class StablehloShiftLeft(_Elementwise):
    name = "STABLEHLO_SHIFT_LEFT"
    types = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32))

    @classmethod
    def compute(cls, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # C++ promotes to int, shifts and truncates: shifts of the type's width or more leave 0
        return np.left_shift(a.astype(np.int64), np.clip(b, 0, 63).astype(np.int64)).astype(a.dtype)


# -- STABLEHLO_PAD -------------------------------------------------------------------------------------------

def _pad_attrs(node: Node, rank: int) -> tuple[list[int], list[int], list[int]]:
    parts = []
    for key in ("edge_padding_low", "edge_padding_high", "interior_padding"):
        v = [int(d) for d in node.attrs.get(key, [])]
        if len(v) != rank:
            raise ModelError(f"{node}: {key} has {len(v)} values, the operand rank is {rank}")
        parts.append(v)
    if any(d < 0 for d in parts[2]):
        raise ModelError(f"{node}: interior_padding {parts[2]} must not be negative")
    return parts[0], parts[1], parts[2]


@register
class StablehloPad(Op):
    name = "STABLEHLO_PAD"
    max_version = 1

    @staticmethod
    def check(node, graph):
        _io(node, graph, 2)
        x, value, y = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
        if value.dtype != x.dtype or y.dtype != x.dtype or x.dtype not in _NUMERIC:
            raise ModelError(f"{node}: operand {x.dtype}, padding value {value.dtype} and output {y.dtype} must "
                             "share one type")
        _pad_attrs(node, len(x.shape))

    @staticmethod
    def infer(node, graph, shapes):
        low, high, interior = _pad_attrs(node, len(shapes[0]))
        if int(np.prod(shapes[1])) != 1:
            raise ModelError(f"{node}: the padding value must be a single value, has shape {list(shapes[1])}")
        out = tuple(lo + hi + n + max(n - 1, 0) * i for n, lo, hi, i in zip(shapes[0], low, high, interior))
        if min(out, default=0) < 0:
            raise ModelError(f"{node}: padding leaves a negative size {list(out)}")
        return [out]

    @staticmethod
    def run_cpu(node, graph, inputs):
        x, value = inputs
        out_shape = StablehloPad.infer(node, graph, [x.shape, value.shape])[0]
        low, high, interior = _pad_attrs(node, x.ndim)
        # interior padding and the positive edges first, then crop the negative edges
        grown = [lo_pos + hi_pos + n + max(n - 1, 0) * i for n, lo_pos, hi_pos, i in
                 zip(x.shape, (max(v, 0) for v in low), (max(v, 0) for v in high), interior)]
        full = np.full(grown, value.reshape(-1)[0], x.dtype)
        full[tuple(slice(max(lo, 0), max(lo, 0) + (n - 1) * (i + 1) + 1 if n else max(lo, 0), i + 1)
                   for n, lo, i in zip(x.shape, low, interior))] = x
        crop = tuple(slice(max(-lo, 0), max(-lo, 0) + o) for lo, o in zip(low, out_shape))
        return [np.ascontiguousarray(full[crop])]


# -- STABLEHLO_GATHER ----------------------------------------------------------------------------------------

def _gather_attrs(node: Node, operand_rank: int, indices_rank: int) -> dict[str, list[int]]:
    """The dimension lists of the options, checked; index_vector_dim as a one-element list."""
    a = {k: [int(v) for v in node.attrs.get(k, [])] for k in
         ("offset_dims", "collapsed_slice_dims", "start_index_map", "slice_sizes")}
    a["index_vector_dim"] = [int(node.attrs.get("index_vector_dim", 0))]
    if len(a["slice_sizes"]) != operand_rank:
        raise ModelError(f"{node}: slice_sizes has {len(a['slice_sizes'])} values, the operand rank is "
                         f"{operand_rank}")
    if not 0 <= a["index_vector_dim"][0] <= indices_rank:
        raise ModelError(f"{node}: index_vector_dim {a['index_vector_dim'][0]} is outside 0 to {indices_rank}")
    if any(not 0 <= d < operand_rank for d in a["collapsed_slice_dims"] + a["start_index_map"]):
        raise ModelError(f"{node}: collapsed_slice_dims / start_index_map name dimensions outside the operand")
    if any(a["slice_sizes"][d] > 1 for d in a["collapsed_slice_dims"]):
        raise ModelError(f"{node}: collapsed dimensions must have slice size 1 or less")
    return a


def _gather_layout(node: Node, operand, indices,
                   a: dict[str, list[int]]) -> tuple[tuple[int, ...], tuple[int, ...], list[int]]:
    """(batch shape, output shape, operand dimensions the offset dims walk)."""
    ivd = a["index_vector_dim"][0]
    batch_shape = tuple(d for k, d in enumerate(indices) if k != ivd)
    index_len = indices[ivd] if ivd < len(indices) else 1
    if index_len != len(a["start_index_map"]):
        raise ModelError(f"{node}: start indices hold {index_len} values each, start_index_map names "
                         f"{len(a['start_index_map'])} dimensions")
    window_dims = [d for d in range(len(operand)) if d not in a["collapsed_slice_dims"]]
    if len(a["offset_dims"]) != len(window_dims):
        raise ModelError(f"{node}: offset_dims {a['offset_dims']} must name one output dimension per uncollapsed "
                         f"operand dimension ({len(window_dims)})")
    rank = len(batch_shape) + len(window_dims)
    out, batch_iter, offset_iter = [], iter(batch_shape), iter(window_dims)
    for k in range(rank):
        out.append(a["slice_sizes"][next(offset_iter)] if k in a["offset_dims"] else next(batch_iter))
    if any(s > n for s, n in zip(a["slice_sizes"], operand)):
        raise ModelError(f"{node}: slice_sizes {a['slice_sizes']} exceed the operand's {list(operand)}")
    return batch_shape, tuple(out), window_dims


@register
class StablehloGather(Op):
    name = "STABLEHLO_GATHER"
    max_version = 1

    @staticmethod
    def check(node, graph):
        _io(node, graph, 2)
        x, idx, y = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
        if idx.dtype not in (np.int32, np.int64) or y.dtype != x.dtype:
            raise ModelError(f"{node}: start indices must be int32 or int64 and the output of the operand's type; "
                             f"got {idx.dtype} and {y.dtype}")
        _gather_attrs(node, len(x.shape), len(idx.shape))

    @staticmethod
    def infer(node, graph, shapes):
        a = _gather_attrs(node, len(shapes[0]), len(shapes[1]))
        return [_gather_layout(node, shapes[0], shapes[1], a)[1]]

    @staticmethod
    def run_cpu(node, graph, inputs):
        x, idx = inputs
        a = _gather_attrs(node, x.ndim, idx.ndim)
        batch_shape, out_shape, window_dims = _gather_layout(node, x.shape, idx.shape, a)
        ivd = a["index_vector_dim"][0]
        starts = np.moveaxis(idx if ivd < idx.ndim else idx[..., None], ivd, -1).reshape(-1, len(a["start_index_map"]))
        sizes = np.array(a["slice_sizes"], np.int64)
        full = np.zeros((starts.shape[0], x.ndim), np.int64)
        full[:, a["start_index_map"]] = starts
        full = np.clip(full, 0, np.array(x.shape, np.int64) - sizes)  # StableHLO clamps slices into the operand
        grid = np.stack(np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij"), axis=-1).reshape(-1, x.ndim)
        picked = x[tuple((full[:, None, :] + grid[None, :, :]).transpose(2, 0, 1))]
        window_shape = [int(sizes[d]) for d in window_dims]
        picked = picked.reshape(*batch_shape, *window_shape)
        # batch dims come first in `picked`; move each offset dim to its place in the output
        order = [d for d in range(len(out_shape)) if d not in a["offset_dims"]] + a["offset_dims"]
        return [np.ascontiguousarray(np.moveaxis(picked, range(len(order)), order)).reshape(out_shape)]
