"""Segment reductions: SEGMENT_SUM and UNSORTED_SEGMENT_{SUM, PROD, MAX, MIN}, float32 and int32 (what
LiteRT's kernels take).

SEGMENT_SUM: data [N, ...], segment ids [N] int32 that start at 0 and step by 0 or 1 (LiteRT refuses others);
the output has last id + 1 rows. UNSORTED_SEGMENT_*: segment ids whose shape is a prefix of the
data's, num_segments (one int32) rows out; a row no id names holds the reduction's identity (0, 1, the
type's lowest or highest value), and ids outside [0, num_segments) are skipped. The output's row count
depends on values: infer reads it from constants when it can, run_cpu always from the arrays.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import check_run_shapes, data_dependent, input_count, type_names

_TYPES = (np.dtype(np.float32), np.dtype(np.int32))


def _check_types(node: Node, graph: Graph) -> None:
    data = graph.tensors[node.inputs[0]]
    if data.dtype not in _TYPES:
        raise ModelError(f"{node}: data is {data.type_name or data.dtype}; LiteRT's kernel takes float32 or int32")
    for i in range(1, len(node.inputs)):
        t = graph.tensors[node.inputs[i]]
        if t.dtype != np.int32:
            raise ModelError(f"{node}: input {i} ({t.name!r}) must be int32, is {t.type_name or t.dtype}")
    if graph.tensors[node.outputs[0]].dtype != data.dtype:
        raise ModelError(f"{node}: output type must match the data's {data.dtype}")


def _segment_rows(node: Node, ids: np.ndarray) -> int:
    ids = ids.reshape(-1)
    if ids.size == 0:
        return 0
    steps = np.diff(ids.astype(np.int64))
    if ids[0] != 0 or np.any((steps != 0) & (steps != 1)):
        raise ModelError(f"{node}: segment ids must start at 0 and rise by 0 or 1 from one to the next, got "
                         f"{ids[:16].tolist()}{' ...' if ids.size > 16 else ''}")
    return int(ids[-1]) + 1


@register
class SegmentSum(Op):
    name = "SEGMENT_SUM"
    types = type_names(_TYPES)
    max_version = 1

    @staticmethod
    def check(node, graph):
        input_count(node, 2)
        if len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 1 output, has {len(node.outputs)}")
        _check_types(node, graph)

    @staticmethod
    def infer(node, graph, shapes):
        data, ids = shapes
        if len(data) < 1 or tuple(ids) != (data[0],):
            raise ModelError(f"{node}: segment ids of shape {list(ids)} must be 1-D with the data's {data[:1]} rows")
        values = graph.tensors[node.inputs[1]].data
        if values is None:
            data_dependent(node)
        rows = _segment_rows(node, values)
        return [(rows, *data[1:])]

    @staticmethod
    def run_cpu(node, graph, inputs):
        data, ids = inputs
        check_run_shapes(SegmentSum.infer, node, graph, [data.shape, ids.shape])
        out = np.zeros((_segment_rows(node, ids), *data.shape[1:]), data.dtype)
        np.add.at(out, ids.astype(np.int64), data)
        return [out]


class _UnsortedSegment(Op):
    types = type_names(_TYPES)
    reduce: np.ufunc = np.add
    max_version = 1

    @classmethod
    def identity(cls, dtype: np.dtype):
        if cls.reduce is np.add:
            return 0
        if cls.reduce is np.multiply:
            return 1
        info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
        return info.min if cls.reduce is np.maximum else info.max

    @staticmethod
    def check(node, graph):
        input_count(node, 3)
        if len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 1 output, has {len(node.outputs)}")
        _check_types(node, graph)

    @staticmethod
    def _rows(node: Node, value: np.ndarray) -> int:
        if value.size != 1:
            raise ModelError(f"{node}: num_segments must hold one value, has shape {list(value.shape)}")
        rows = int(value.reshape(-1)[0])
        if rows < 0:
            raise ModelError(f"{node}: num_segments is {rows}")
        return rows

    @staticmethod
    def infer(node, graph, shapes):
        data, ids = shapes[0], shapes[1]
        if len(ids) > len(data) or tuple(data[:len(ids)]) != tuple(ids):
            raise ModelError(f"{node}: segment ids of shape {list(ids)} must be a prefix of the data's {list(data)}")
        value = graph.tensors[node.inputs[2]].data
        if value is None:
            data_dependent(node)
        rows = _UnsortedSegment._rows(node, value)
        return [(rows, *data[len(ids):])]

    @classmethod
    def run_cpu(cls, node, graph, inputs):
        data, ids, count = inputs
        check_run_shapes(cls.infer, node, graph, [data.shape, ids.shape, count.shape])
        rows = cls._rows(node, count)
        tail = data.shape[ids.ndim:]
        out = np.full((rows, *tail), cls.identity(data.dtype), data.dtype)
        flat_ids = ids.reshape(-1).astype(np.int64)
        keep = (flat_ids >= 0) & (flat_ids < rows)
        cls.reduce.at(out, flat_ids[keep], data.reshape(-1, *tail)[keep])
        return [out]


@register
class UnsortedSegmentSum(_UnsortedSegment):
    name = "UNSORTED_SEGMENT_SUM"
    reduce = np.add


@register
class UnsortedSegmentProd(_UnsortedSegment):
    name = "UNSORTED_SEGMENT_PROD"
    reduce = np.multiply


@register
class UnsortedSegmentMax(_UnsortedSegment):
    name = "UNSORTED_SEGMENT_MAX"
    reduce = np.maximum


@register
class UnsortedSegmentMin(_UnsortedSegment):
    name = "UNSORTED_SEGMENT_MIN"
    reduce = np.minimum
