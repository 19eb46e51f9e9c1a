"""The StableHLO ops LiteRT's builtin resolver registers. Without subgraphs: STABLEHLO_ADD, _MULTIPLY, _MAXIMUM,
_MINIMUM, _AND, _SHIFT_LEFT (same-shape elementwise, no broadcasting), STABLEHLO_PAD (edge and interior padding;
negative edges crop) and STABLEHLO_GATHER (the general gather). Naming a subgraph: STABLEHLO_COMPOSITE (runs its
decomposition), STABLEHLO_REDUCE_WINDOW (a windowed reduction whose body subgraph holds the one op it reduces
with) and STABLEHLO_SCATTER (whose update computation subgraph holds no op, or the one op it combines with).
Their options come from the operator's builtin_options_2 table.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..cpu import reduce_window as rw
from ..cpu import scatter as sc
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, Runtime, Shape, register
from .checks import all_required, data_dependent, type_names
from .control_flow import known_shapes, no_omitted, present_inputs, subgraph_attr

_NUMERIC = tuple(np.dtype(t) for t in (np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
                                       np.uint8, np.uint16, np.uint32, np.bool_))
_INTEGER = tuple(t for t in _NUMERIC if t.kind in "iub")


def _io(node: Node, graph: Graph, n_inputs: int) -> None:
    if len(node.inputs) != n_inputs or min(node.inputs) < 0 or len(node.outputs) != 1:
        raise ModelError(f"{node}: expects {n_inputs} inputs and 1 output, has {len(node.inputs)} and "
                         f"{len(node.outputs)}")


class _Elementwise(Op):
    dtypes: ClassVar[tuple[np.dtype, ...]] = _NUMERIC
    ufunc: ClassVar[np.ufunc] = np.add
    max_version = 1

    @classmethod
    def type_summary(cls) -> str:
        return type_names(cls.dtypes)

    @classmethod
    def compute(cls, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cls.ufunc(a, b)

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        _io(node, graph, 2)
        a, b, y = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
        if a.dtype not in cls.dtypes or b.dtype != a.dtype or y.dtype != a.dtype:
            raise ModelError(f"{node}: inputs {a.type_name or a.dtype} and {b.type_name or b.dtype}, output "
                             f"{y.type_name or y.dtype}: they must share one of {[str(t) for t in cls.dtypes]}")

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
    dtypes = _INTEGER
    ufunc = np.bitwise_and


@register
class StablehloShiftLeft(_Elementwise):
    name = "STABLEHLO_SHIFT_LEFT"
    dtypes = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32))

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
    types = type_names(_NUMERIC)
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
    types = "any; int32/int64 start indices"
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


# -- STABLEHLO_COMPOSITE -------------------------------------------------------------------------------------

@register
class StablehloComposite(Op):
    """A named composite op: its decomposition subgraph runs on the inputs and gives the outputs."""

    name = "STABLEHLO_COMPOSITE"
    max_version = 1
    needs_runtime = True
    strings = True
    types = "any (the decomposition's)"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        subgraph_attr(node, "decomposition_subgraph_index")
        if not node.inputs:
            raise ModelError(f"{node}: a composite takes at least one input")
        no_omitted(node)

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        outs = runtime.output_shapes(subgraph_attr(node, "decomposition_subgraph_index"), known_shapes(shapes, node))
        if len(outs) != len(node.outputs):
            raise ModelError(f"{node}: the decomposition gives {len(outs)} outputs, the node has {len(node.outputs)}")
        if any(s is None for s in outs):
            data_dependent(node)
        return [s for s in outs if s is not None]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        return runtime.call(subgraph_attr(node, "decomposition_subgraph_index"), present_inputs(inputs, node))


def _body_op(node: Node, runtime: Runtime, attr: str, ops: dict[str, int], empty: int | None) -> int:
    """The computation a body subgraph stands for, read off the one op it holds (``empty``: what a body with no op
    means, None if it must have one), as LiteRT's kernels read it."""
    body = runtime.graph(subgraph_attr(node, attr))
    if not body.nodes and empty is not None:
        return empty
    if len(body.nodes) != 1 or body.nodes[0].op not in ops:
        found = [n.op for n in body.nodes]
        raise ModelError(f"{node}: the {attr.removesuffix('_subgraph_index').replace('_', ' ')} subgraph holds "
                         f"{found}; LiteRT's kernel takes {'no op or ' if empty is not None else ''}one of "
                         f"{sorted(ops)}")
    return ops[body.nodes[0].op]


# -- STABLEHLO_REDUCE_WINDOW ---------------------------------------------------------------------------------

_WINDOW_TYPES = tuple(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float32,
                                             np.float64))
_REDUCTIONS = {"ADD": rw.ADD, "STABLEHLO_ADD": rw.ADD, "MUL": rw.MUL, "STABLEHLO_MULTIPLY": rw.MUL,
               "MAXIMUM": rw.MAXIMUM, "STABLEHLO_MAXIMUM": rw.MAXIMUM, "MINIMUM": rw.MINIMUM,
               "STABLEHLO_MINIMUM": rw.MINIMUM, "LOGICAL_AND": rw.ALL, "STABLEHLO_AND": rw.ALL,
               "LOGICAL_OR": rw.ANY, "STABLEHLO_OR": rw.ANY}


def _window_attrs(node: Node, rank: int) -> dict[str, list[int]]:
    a = {}
    for key, size, low in (("window_dimensions", rank, 1), ("window_strides", rank, 1), ("base_dilations", rank, 1),
                           ("window_dilations", rank, 1), ("padding", 2 * rank, None)):
        v = [int(d) for d in node.attrs.get(key, [])]
        if len(v) != size or (low is not None and min(v, default=low) < low):
            raise ModelError(f"{node}: {key} {v} must hold {size} values" + (f" >= {low}" if low else ""))
        a[key] = v
    return a


def _padded_shape(node: Node, shape: Shape, a: dict[str, list[int]]) -> Shape:
    """The input's shape once dilated by base_dilations and padded (negative padding crops)."""
    out = tuple((n - 1) * b + 1 + a["padding"][2 * k] + a["padding"][2 * k + 1] if n else 0
                for k, (n, b) in enumerate(zip(shape, a["base_dilations"])))
    if any(d <= 0 for d in out):
        raise ModelError(f"{node}: dilating and padding input {list(shape)} leaves {list(out)}, an empty tensor")
    return out


@register
class StablehloReduceWindow(Op):
    """Windowed reduction after base dilation and padding (both filled with the init value); the body subgraph's
    one op (ADD, MUL, MAXIMUM, MINIMUM, AND, OR, TFLite's or StableHLO's) names the reduction."""

    name = "STABLEHLO_REDUCE_WINDOW"
    max_version = 1
    needs_runtime = True
    types = type_names(_WINDOW_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        _io(node, graph, 2)
        x, init, y = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
        if x.dtype not in _WINDOW_TYPES or init.dtype != x.dtype or y.dtype != x.dtype:
            raise ModelError(f"{node}: input {x.type_name or x.dtype}, init value {init.dtype} and output {y.dtype} "
                             f"must share one of {[str(t) for t in _WINDOW_TYPES]}")
        if not 1 <= len(x.shape) <= 6:  # TFLite's kMaxReduceWindowRank
            raise ModelError(f"{node}: input rank {len(x.shape)} is outside 1 to 6")
        if init.size != 1:
            raise ModelError(f"{node}: the init value must be a single value, has shape {list(init.shape)}")
        _window_attrs(node, len(x.shape))
        subgraph_attr(node, "body_subgraph_index")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        _body_op(node, runtime, "body_subgraph_index", _REDUCTIONS, None)
        x = all_required(node, shapes)[0]
        a = _window_attrs(node, len(x))
        return [rw.output_shape(_padded_shape(node, x, a), a["window_dimensions"], a["window_strides"],
                                a["window_dilations"])]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        function = _body_op(node, runtime, "body_subgraph_index", _REDUCTIONS, None)
        x, init = all_required(node, inputs)
        a = _window_attrs(node, x.ndim)
        fill = init.reshape(-1)[0]
        padded = np.full(_padded_shape(node, x.shape, a), fill, x.dtype)
        low = a["padding"][0::2]
        dilated_shape = tuple((n - 1) * b + 1 for n, b in zip(x.shape, a["base_dilations"]))
        # the dilated input's slice that survives cropping, and where it lands in the padded tensor
        src = tuple(slice(max(-lo, 0), min(d, p - lo)) for d, lo, p in zip(dilated_shape, low, padded.shape))
        dst = tuple(slice(max(lo, 0), max(lo, 0) + (s.stop - s.start)) for s, lo in zip(src, low))
        dilated = np.full(dilated_shape, fill, x.dtype)
        dilated[tuple(slice(None, None, b) for b in a["base_dilations"])] = x
        if all(s.stop > s.start for s in src):
            padded[dst] = dilated[src]
        return [rw.reduce_window(padded, fill, function, a["window_dimensions"], a["window_strides"],
                                 a["window_dilations"])]


# -- STABLEHLO_SCATTER ---------------------------------------------------------------------------------------

_SCATTER_TYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                              np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
_COMBINE = {"STABLEHLO_ADD": sc.ADD, "STABLEHLO_MULTIPLY": sc.MULTIPLY, "STABLEHLO_MAXIMUM": sc.MAXIMUM,
            "STABLEHLO_MINIMUM": sc.MINIMUM}


def _scatter_dims(node: Node, operand: Shape, indices: Shape, updates: Shape) -> dict[str, list[int]]:
    """The dimension options, checked against the shapes as the StableHLO spec states them (LiteRT's kernel
    assumes them)."""
    a = {k: [int(v) for v in node.attrs.get(k, [])] for k in
         ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims")}
    ivd = int(node.attrs.get("index_vector_dim", 0))

    def fail(what: str) -> ModelError:
        return ModelError(f"{node}: {what} (operand {list(operand)}, indices {list(indices)}, updates "
                          f"{list(updates)}, options {a}, index_vector_dim {ivd})")

    if not 0 <= ivd < len(indices):
        raise fail("index_vector_dim must name a dimension of the indices")
    for key, bound in (("update_window_dims", len(updates)), ("inserted_window_dims", len(operand)),
                       ("scatter_dims_to_operand_dims", len(operand))):
        if len(set(a[key])) != len(a[key]) or any(not 0 <= d < bound for d in a[key]):
            raise fail(f"{key} must name distinct dimensions below {bound}")
    if len(a["update_window_dims"]) + len(a["inserted_window_dims"]) != len(operand):
        raise fail("update_window_dims and inserted_window_dims must together count the operand's dimensions")
    if indices[ivd] != len(a["scatter_dims_to_operand_dims"]):
        raise fail("each index vector must hold one value per scatter_dims_to_operand_dims entry")
    batch = [n for d, n in enumerate(indices) if d != ivd]
    if [n for d, n in enumerate(updates) if d not in a["update_window_dims"]] != batch:
        raise fail("the updates' scatter dimensions must match the indices' batch dimensions")
    a["index_vector_dim"] = [ivd]
    return a


@register
class StablehloScatter(Op):
    """The operand with each update combined into the element its index addresses (out-of-bounds updates are
    skipped); the update computation subgraph holds no op (replace) or one STABLEHLO_ADD, _MULTIPLY, _MAXIMUM or
    _MINIMUM."""

    name = "STABLEHLO_SCATTER"
    max_version = 1
    needs_runtime = True
    types = type_names(_SCATTER_TYPES) + "; int32/int64 indices"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        _io(node, graph, 3)
        x, idx, upd = (graph.tensors[t] for t in node.inputs)
        y = graph.tensors[node.outputs[0]]
        if x.dtype not in _SCATTER_TYPES or upd.dtype != x.dtype or y.dtype != x.dtype:
            raise ModelError(f"{node}: operand {x.type_name or x.dtype}, updates {upd.dtype} and output {y.dtype} "
                             f"must share one of {[str(t) for t in _SCATTER_TYPES]}")
        if idx.dtype not in (np.int32, np.int64):
            raise ModelError(f"{node}: the scatter indices must be int32 or int64, are {idx.type_name or idx.dtype}")
        subgraph_attr(node, "update_computation_subgraph_index")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        _body_op(node, runtime, "update_computation_subgraph_index", _COMBINE, sc.UPDATE)
        operand, indices, updates = all_required(node, shapes)
        _scatter_dims(node, operand, indices, updates)
        return [operand]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        computation = _body_op(node, runtime, "update_computation_subgraph_index", _COMBINE, sc.UPDATE)
        operand, indices, updates = all_required(node, inputs)
        a = _scatter_dims(node, operand.shape, indices.shape, updates.shape)
        where, picked = sc.targets(operand.shape, indices, updates.shape, a["update_window_dims"],
                                   a["inserted_window_dims"], a["scatter_dims_to_operand_dims"],
                                   a["index_vector_dim"][0])
        return [sc.apply(operand, where, updates.reshape(-1)[picked], computation)]
