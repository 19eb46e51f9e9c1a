"""Quantize / dequantize / requantize kernels and TFLite's sparse-to-dense format converter.

``dequantized(graph, t)`` and ``densified(graph, t)`` convert a constant once and memoize the read-only
result on the graph, so every user of that constant (CPU kernels, GPU lowering) shares one array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Tensor
from .elementwise import rescale
from .quant import dequantize, dtype_range, quantize_multiplier

_MAX_ELEMENTS = 2**31 - 1  # TFLite's own limit: tensor sizes are int


def requantize_q(x: np.ndarray, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
    """TFLite's Requantize: clamp(zp_o + MultiplyByQuantizedMultiplier(q - zp_i, s_i / s_o))."""
    m, s = quantize_multiplier(float(np.float64(np.float32(qi[0])) / np.float64(np.float32(qo[0]))))
    lo, hi = dtype_range(dtype)
    return rescale(x.astype(np.int64) - qi[1], m, s, qo[1], lo, hi).astype(dtype)


def dequantize_tensor(x: np.ndarray, t: Tensor) -> np.ndarray:
    """float32 values of ``x``, which has ``t``'s type and quantization (float16 needs none)."""
    if x.dtype == np.float16:
        return x.astype(np.float32)
    q = t.quant
    if q is None:  # the op's check() requires quantization parameters of a non-float16 input
        raise ModelError(f"tensor {t.index} ({t.name!r}) is {t.dtype} without quantization parameters")
    return dequantize(x, q.scale, q.zero_point, q.axis if q.per_channel else None)


def dequantized(graph: Graph, t: int) -> np.ndarray:
    """The float32 contents of constant tensor ``t`` (quantized or float16), computed once per graph."""
    def make() -> np.ndarray:
        tensor = graph.tensors[t]
        if tensor.data is None:  # callers ask for constants only
            raise ModelError(f"tensor {t} ({tensor.name!r}) is not a constant")
        out = dequantize_tensor(tensor.data, tensor)
        out.flags.writeable = False
        return out
    return graph.prepared(("dequantized", t), make)


def densified(graph: Graph, t: int, where: str) -> np.ndarray:
    """The dense contents of sparse constant tensor ``t``, computed once per graph; ``where`` names the
    node for error messages."""
    def make() -> np.ndarray:
        tensor = graph.tensors[t]
        what = f"{where}: tensor {t} ({tensor.name!r})"
        if tensor.sparsity is None:  # DENSIFY's check() requires a sparse constant
            raise ModelError(f"{what} has no sparsity parameters")
        out = densify(np.asarray(tensor.data).reshape(-1).view(tensor.dtype), tensor.shape, tensor.sparsity, what)
        out.flags.writeable = False
        return out
    return graph.prepared(("densified", t), make)


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: dict[str, Any], what: str) -> np.ndarray:
    """TFLite's FormatConverter::SparseToDense.

    The sparse tensor is a tree walked in ``traversal_order``: the first ``len(shape)`` levels are a
    permutation of the dense dimensions (blocked ones divided by their block size), the rest are the
    block dimensions named by ``block_map``. A DENSE level has ``dense_size`` children per node; a
    SPARSE_CSR level lists node p's children as ``indices[segments[p]:segments[p+1]]``. The leaves, in
    depth-first order, are ``values``. We expand the tree one level at a time, which keeps that order.
    """
    order = [int(v) for v in sparsity.get("traversal_order", [])]
    block_map = [int(v) for v in sparsity.get("block_map", [])]
    dims = sparsity.get("dim_metadata", [])
    rank = len(shape)
    levels = rank + len(block_map)
    if len(order) != levels or sorted(order) != list(range(levels)) or len(dims) != levels:
        raise ModelError(f"{what}: sparsity has traversal order {order}, {len(dims)} dimension entries and "
                         f"block map {block_map}; a rank-{rank} tensor with {len(block_map)} block "
                         f"dimensions needs a permutation of 0..{levels - 1} and {levels} entries")
    if sorted(order[:rank]) != list(range(rank)) or any(not 0 <= d < rank for d in block_map) \
            or any(a >= b for a, b in zip(block_map, block_map[1:])):
        raise ModelError(f"{what}: sparsity traversal order {order} / block map {block_map} do not map "
                         "onto the tensor's dimensions")
    if int(np.prod(shape, dtype=np.float64)) > _MAX_ELEMENTS:
        raise ModelError(f"{what}: dense shape {list(shape)} is too large to densify")
    block_size = [int(dims[order[rank + b]].get("dense_size", 0)) for b in range(len(block_map))]
    if any(b <= 0 or shape[d] % b for b, d in zip(block_size, block_map)):
        raise ModelError(f"{what}: block sizes {block_size} do not divide dimensions "
                         f"{[shape[d] for d in block_map]}")
    # extent of each level's index, to reject indices that would land outside the dense tensor
    extent = []
    for lvl in range(levels):
        d = order[lvl]
        if d < rank:
            extent.append(shape[d] // block_size[block_map.index(d)] if d in block_map else shape[d])
        else:
            extent.append(block_size[d - rank])

    parent = np.zeros(1, np.int64)  # position of each partial path within its level (TFLite's prev_idx)
    index_cols: list[np.ndarray] = []
    for lvl, dm in enumerate(dims):
        if dm.get("format", 0) == 0:  # DENSE
            n = int(dm.get("dense_size", 0))
            if n != extent[lvl]:
                raise ModelError(f"{what}: dense level {lvl} has size {n}, the shape needs {extent[lvl]}")
            child = np.tile(np.arange(n, dtype=np.int64), parent.size)
            index_cols = [np.repeat(c, n) for c in index_cols]
            parent = np.repeat(parent, n) * n + child
            index_cols.append(child)
        else:  # SPARSE_CSR
            seg = np.asarray(dm.get("segments", []), np.int64)
            ind = np.asarray(dm.get("indices", []), np.int64)
            if seg.size < parent.max(initial=0) + 2 or np.any(np.diff(seg) < 0) or seg[0] < 0 \
                    or seg[-1] > ind.size:
                raise ModelError(f"{what}: sparse level {lvl} has a malformed segments array")
            if np.any((ind < 0) | (ind >= extent[lvl])):
                raise ModelError(f"{what}: sparse level {lvl} has indices outside 0..{extent[lvl] - 1}")
            start, count = seg[parent], seg[parent + 1] - seg[parent]
            total = int(count.sum())
            # position k of the output runs over start[p] .. start[p] + count[p] - 1 for each parent p
            offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
            child = np.repeat(start, count) + offsets
            index_cols = [np.repeat(c, count) for c in index_cols]
            parent = child
            index_cols.append(ind[child])
    n_leaves = parent.size
    if n_leaves > values.size:
        raise ModelError(f"{what}: sparsity describes {n_leaves} values, the buffer holds {values.size}")

    orig = [np.zeros(n_leaves, np.int64) for _ in range(rank)]
    for lvl in range(rank):
        orig[order[lvl]] = index_cols[lvl]
    for lvl in range(rank, levels):
        b = order[lvl] - rank
        orig[block_map[b]] = orig[block_map[b]] * block_size[b] + index_cols[lvl]
    dense = np.zeros(int(np.prod(shape, dtype=np.int64)), values.dtype)
    if rank:
        dense[np.ravel_multi_index(orig, shape)] = values[:n_leaves]
    elif n_leaves:
        dense[0] = values[0]
    return dense.reshape(shape)
