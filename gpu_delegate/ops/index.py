"""Indexed reads and writes: GATHER_ND, SCATTER_ND, WHERE, SPARSE_TO_DENSE, DYNAMIC_UPDATE_SLICE,
EMBEDDING_LOOKUP and HASHTABLE_LOOKUP.

Elements are copied as they are (quantized tensors as their codes), except EMBEDDING_LOOKUP's hybrid form,
which dequantizes an 8-bit (or 4-bit) table into a float output. An index outside its dimension is a
ModelError naming the node, where TFLite's kernels fail the invoke.

WHERE's output shape depends on the values of its input, and SCATTER_ND's and SPARSE_TO_DENSE's on their
shape input: from constants `infer` computes it, otherwise the model's declared shape stands until the node
runs. The arithmetic is numpy indexing throughout: one gather or scatter call per node.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import STRING, zeros
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import arity, data_dependent, input_count, type_names
from .operands import (
    Inputs,
    Shape,
    arrays,
    bounded,
    int_list,
    known,
    operand,
    outputs,
    require_type,
    same_type,
    shape_vector,
    tensor_in,
    tensor_out,
)

_ANY = (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
        np.uint64, np.bool_, np.complex64, np.complex128)
_INDEX = (np.int32, np.int64)


def _strides(shape: Shape) -> np.ndarray:
    """Elements between neighbours along each dimension of a C-ordered tensor."""
    return np.array([int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))], np.int64)


def _flat_offsets(node: Node, indices: np.ndarray, shape: Shape, what: str) -> tuple[np.ndarray, int]:
    """Flat element offsets of the slices that the last axis of ``indices`` addresses in a tensor of
    ``shape``, and the slice size; a ModelError for a coordinate outside its dimension."""
    nd = indices.shape[-1]
    slice_size = int(np.prod(shape[nd:], dtype=np.int64))
    rows = indices.reshape(-1, nd).astype(np.int64)
    bad = ((rows < 0) | (rows >= np.array(shape[:nd], np.int64))).any(axis=1)
    if bad.any():
        raise ModelError(f"{node}: {what} index {rows[int(np.argmax(bad))].tolist()} is outside a tensor of shape "
                         f"{list(shape)}")
    return rows @ _strides(shape)[:nd], slice_size


def _slices(offsets: np.ndarray, slice_size: int) -> np.ndarray:
    """Flat positions of every element of every slice: (number of slices, slice size)."""
    return offsets[:, None] + np.arange(slice_size, dtype=np.int64)[None, :]


@register
class GatherNd(Op):
    """Slices of params addressed by the last axis of indices: out = params[indices[..., :]]."""

    name, max_version = "GATHER_ND", 6
    strings = True
    _PARAMS = (np.float16, np.float32, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_)
    types = type_names(_PARAMS)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        params = tensor_in(node, graph, 0)
        if params.dtype != STRING:
            require_type(node, params, GatherNd._PARAMS, "params")
        require_type(node, tensor_in(node, graph, 1), (np.int16, np.int32, np.int64), "indices")
        same_type(node, params, tensor_out(node, graph))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        params, indices = known(node, shapes)
        if not params or not indices:
            raise ModelError(f"{node}: params {list(params)} and indices {list(indices)} must both have rank >= 1")
        nd = indices[-1]
        if nd > len(params):
            raise ModelError(f"{node}: indices address {nd} dimensions, params has {len(params)}")
        return [indices[:-1] + params[nd:]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        params, indices = arrays(node, inputs)
        out_shape = GatherNd.infer(node, graph, [params.shape, indices.shape])[0]
        if params.size == 0 and indices.size:
            raise ModelError(f"{node}: gathering from params with no elements (shape {list(params.shape)})")
        offsets, slice_size = _flat_offsets(node, indices, params.shape, "gather")
        return [params.reshape(-1)[_slices(offsets, slice_size)].reshape(out_shape)]


@register
class ScatterNd(Op):
    """A zero tensor of ``shape`` with ``updates`` added at the slices ``indices`` address (duplicates add
    up; bool ones combine with OR), as TFLite's ScatterNd does."""

    name, max_version = "SCATTER_ND", 1
    _UPDATES = (np.float32, np.int8, np.uint8, np.int32, np.int64, np.bool_)
    types = type_names(_UPDATES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        require_type(node, tensor_in(node, graph, 0), (np.int32,), "indices")
        require_type(node, tensor_in(node, graph, 2), (np.int32,), "the shape")
        updates = tensor_in(node, graph, 1)
        require_type(node, updates, ScatterNd._UPDATES, "updates")
        same_type(node, updates, tensor_out(node, graph))

    @staticmethod
    def _check_shapes(node: Node, indices: Shape, updates: Shape, shape: Shape) -> None:
        if not indices or not updates:
            raise ModelError(f"{node}: indices {list(indices)} and updates {list(updates)} need rank >= 1")
        outer = len(indices) - 1
        nd = indices[-1]
        if (indices[:outer] != updates[:outer] or len(updates) - outer != len(shape) - nd
                or updates[outer:] != shape[nd:]):
            raise ModelError(f"{node}: indices of shape {list(indices)} and updates of shape {list(updates)} do "
                             f"not scatter into a tensor of shape {list(shape)}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        indices, updates, shape_shape = known(node, shapes)
        value = operand(node, graph, None, 2)
        if value is None:
            data_dependent(node)
        shape = shape_vector(node, value, "the shape")
        ScatterNd._check_shapes(node, indices, updates, shape)
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        indices, updates, shape_value = arrays(node, inputs)
        shape = shape_vector(node, shape_value, "the shape")
        ScatterNd._check_shapes(node, indices.shape, updates.shape, shape)
        out = np.zeros(bounded(node, shape, updates.dtype), updates.dtype)
        offsets, slice_size = _flat_offsets(node, indices, shape, "scatter")
        positions = _slices(offsets, slice_size).reshape(-1)
        values = updates.reshape(-1)
        if out.dtype == np.bool_:
            np.logical_or.at(out.reshape(-1), positions, values)
        else:
            np.add.at(out.reshape(-1), positions, values)
        return [out]


@register
class Where(Op):
    """The coordinates of the non-zero (true) elements, one row each in C order, as int64."""

    name, max_version = "WHERE", 2
    _TYPES = (np.bool_, np.float32, np.int8, np.uint8, np.int32, np.uint32, np.int64)
    types = type_names(_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        require_type(node, tensor_in(node, graph, 0), Where._TYPES, "the condition")
        require_type(node, tensor_out(node, graph), (np.int64,), "the output")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        cond = operand(node, graph, None, 0)
        if cond is None:
            data_dependent(node)
        return [(int(np.count_nonzero(cond)), cond.ndim)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        cond, = arrays(node, inputs)
        return [np.argwhere(cond).astype(np.int64).reshape(-1, cond.ndim)]


_SPARSE_MAX_RANK = 4  # TFLite's SparseToDense addresses up to four dimensions


@register
class SparseToDense(Op):
    """A tensor of ``output_shape`` holding ``default_value`` except at ``indices``, which get ``values``
    (one value for all, or one each; of repeated indices the last wins)."""

    name, max_version = "SPARSE_TO_DENSE", 3
    _VALUES = (np.float32, np.int32, np.int64, np.int8, np.uint8)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 4, 1)
        require_type(node, tensor_in(node, graph, 0), _INDEX, "indices")
        require_type(node, tensor_in(node, graph, 1), _INDEX, "the output shape")
        values = tensor_in(node, graph, 2)
        require_type(node, values, SparseToDense._VALUES, "values")
        same_type(node, values, tensor_in(node, graph, 3))
        same_type(node, values, tensor_out(node, graph))

    @staticmethod
    def _check_shapes(node: Node, indices: Shape, out_rank: int, values: Shape, default: Shape) -> None:
        if len(indices) > 2 or len(values) > 1:
            raise ModelError(f"{node}: indices {list(indices)} must have rank <= 2 and values {list(values)} "
                             "rank <= 1")
        if int(np.prod(default, dtype=np.int64)) != 1:
            raise ModelError(f"{node}: the default value must hold one element, has shape {list(default)}")
        dims = indices[1] if len(indices) == 2 else 1
        count = indices[0] if indices else 1
        if dims != out_rank or out_rank > _SPARSE_MAX_RANK:
            raise ModelError(f"{node}: indices of shape {list(indices)} do not address an output of rank "
                             f"{out_rank} (at most {_SPARSE_MAX_RANK})")
        if values and values[0] != count:
            raise ModelError(f"{node}: {values[0]} values for {count} indices")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        indices, out_shape_shape, values, default = known(node, shapes)
        if len(out_shape_shape) != 1:
            raise ModelError(f"{node}: the output shape must be a 1-D tensor, has shape {list(out_shape_shape)}")
        SparseToDense._check_shapes(node, indices, out_shape_shape[0], values, default)
        value = operand(node, graph, None, 1)
        return [shape_vector(node, value, "the output shape")] if value is not None else data_dependent(node)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        indices, shape_value, values, default = arrays(node, inputs)
        shape = shape_vector(node, shape_value, "the output shape")
        SparseToDense._check_shapes(node, indices.shape, len(shape), values.shape, default.shape)
        out = np.full(bounded(node, shape, values.dtype), default.reshape(-1)[0], values.dtype)
        coords = indices.reshape(-1, len(shape)).astype(np.int64)
        outside = (coords < 0) | (coords >= np.array(shape, np.int64))
        if outside.any():
            raise ModelError(f"{node}: index {coords[int(np.argmax(outside.any(axis=1)))].tolist()} is outside "
                             f"the output shape {list(shape)}")
        out[tuple(coords.T)] = values  # numpy assigns in order: of repeated indices the last one wins
        return [out]


@register
class DynamicUpdateSlice(Op):
    """The operand with ``update`` written over it at ``start_indices``, each start clamped so that the
    update fits (XLA's DynamicUpdateSlice)."""

    name, max_version = "DYNAMIC_UPDATE_SLICE", 6

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        operand_t = tensor_in(node, graph, 0)
        require_type(node, operand_t, _ANY, "the operand")
        same_type(node, operand_t, tensor_in(node, graph, 1))
        same_type(node, operand_t, tensor_out(node, graph))
        require_type(node, tensor_in(node, graph, 2), _INDEX, "the start indices")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        operand_s, update, starts = known(node, shapes)
        if starts != (len(operand_s),) or len(update) != len(operand_s) or \
                any(u > o for u, o in zip(update, operand_s)):
            raise ModelError(f"{node}: an update of shape {list(update)} with start indices of shape "
                             f"{list(starts)} does not fit an operand of shape {list(operand_s)}")
        return [operand_s]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, update, starts = arrays(node, inputs)
        DynamicUpdateSlice.infer(node, graph, [x.shape, update.shape, starts.shape])
        out = np.array(x, copy=True)
        begin = [min(max(0, s), dim - u) for s, dim, u in zip(int_list(node, starts, "the start indices"),
                                                                x.shape, update.shape)]
        out[tuple(slice(b, b + u) for b, u in zip(begin, update.shape))] = update
        return [out]


@register
class EmbeddingLookup(Op):
    """Rows of a table (input 1, rank >= 2) picked by int32 ids (input 0). A quantized 8-bit (or 4-bit)
    table with a float output is dequantized on the way: row * scale, the scale per row when quantized per
    channel (zero points must be 0, as TFLite requires)."""

    name, max_version = "EMBEDDING_LOOKUP", 5

    @staticmethod
    def _hybrid(node: Node, graph: Graph) -> bool:
        table, out = tensor_in(node, graph, 1), tensor_out(node, graph)
        return table.dtype != out.dtype and out.dtype in (np.float32, np.float16)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        require_type(node, tensor_in(node, graph, 0), (np.int32,), "the ids")
        table, out = tensor_in(node, graph, 1), tensor_out(node, graph)
        require_type(node, table, _ANY, "the table")
        if not EmbeddingLookup._hybrid(node, graph):
            same_type(node, table, out)
            return
        require_type(node, table, (np.int8, np.uint8), "the quantized table")
        q = table.quant
        if q is None:
            raise ModelError(f"{node}: a {table.type_name} table read into a float output needs a scale")
        if q.zero_point[0] != 0:  # the one TFLite checks; the kernel ignores zero points
            raise ModelError(f"{node}: a quantized table must be symmetric (zero point 0), has "
                             f"{int(q.zero_point[0])}")
        if q.per_channel and (q.axis != 0 or q.scale.size != table.shape[0]):
            raise ModelError(f"{node}: per-channel scales must run along the rows (axis 0)")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        ids, table = known(node, shapes)
        if len(ids) != 1 or len(table) < 2:
            raise ModelError(f"{node}: ids must be 1-D and the table at least 2-D, have shapes {list(ids)} and "
                             f"{list(table)}")
        return [(ids[0], *table[1:])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        ids, table = arrays(node, inputs)
        EmbeddingLookup.infer(node, graph, [ids.shape, table.shape])
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            raise ModelError(f"{node}: ids span [{ids.min()}, {ids.max()}], the table has {table.shape[0]} rows")
        rows = table[ids.astype(np.intp)]
        if not EmbeddingLookup._hybrid(node, graph):
            return [rows]
        q = tensor_in(node, graph, 1).quant
        assert q is not None
        scale = q.scale[ids] if q.per_channel else q.scale[:1]
        scale = scale.astype(np.float32).reshape((-1,) + (1,) * (rows.ndim - 1))
        # TFLite reads the codes as int8 whatever the table's type
        values = rows.view(np.int8).astype(np.float32) * scale
        return [values.astype(tensor_out(node, graph).dtype)]


@register
class HashtableLookup(Op):
    """For each int32 key looked up (input 0), the row of ``values`` (input 2) whose key (input 1, sorted)
    matches, or a row of zeros (empty strings); output 1 says which were found (uint8 1 / 0)."""

    name, max_version = "HASHTABLE_LOOKUP", 1
    strings = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 3)
        outputs(node, 2)
        if -1 in node.inputs:
            raise ModelError(f"{node}: every input is required")
        require_type(node, tensor_in(node, graph, 0), (np.int32,), "the lookups")
        require_type(node, tensor_in(node, graph, 1), (np.int32,), "the keys")
        values = tensor_in(node, graph, 2)
        if values.dtype != STRING:
            require_type(node, values, _ANY, "the values")
        same_type(node, values, tensor_out(node, graph, 0))
        require_type(node, tensor_out(node, graph, 1), (np.uint8,), "the hits")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        lookups, keys, values = known(node, shapes)
        if len(lookups) != 1 or len(keys) != 1 or not values or values[0] != keys[0]:
            raise ModelError(f"{node}: lookups {list(lookups)} and keys {list(keys)} must be 1-D, and the values "
                             f"{list(values)} hold one row per key")
        return [(lookups[0], *values[1:]), (lookups[0],)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        lookups, keys, values = arrays(node, inputs)
        HashtableLookup.infer(node, graph, [lookups.shape, keys.shape, values.shape])
        if keys.size == 0:
            raise ModelError(f"{node}: the table has no keys")
        if np.any(keys[1:] < keys[:-1]):
            raise ModelError(f"{node}: the keys must be sorted ascending")
        at = np.minimum(np.searchsorted(keys, lookups), keys.size - 1)
        hit = keys[at] == lookups
        out = np.where(hit.reshape((-1,) + (1,) * (values.ndim - 1)), values[at], zeros((), values.dtype))
        return [out.astype(values.dtype, copy=False), hit.astype(np.uint8)]
