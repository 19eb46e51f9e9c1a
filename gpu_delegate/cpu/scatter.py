"""stablehlo.scatter as LiteRT runs it: every element of ``updates``, in row-major order, combined into the
operand element its index addresses; updates whose index falls outside the operand are skipped.

`targets` lays out the addressing (numpy); `apply` combines one update after another, so that repeated targets
see the earlier updates, as in LiteRT's loop.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

UPDATE, ADD, MULTIPLY, MAXIMUM, MINIMUM = 0, 1, 2, 3, 4


def targets(operand_shape: tuple[int, ...], indices: np.ndarray, updates_shape: tuple[int, ...],
            update_window_dims: list[int], inserted_window_dims: list[int],
            scatter_dims_to_operand_dims: list[int], index_vector_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(flat operand position, flat update position) of every update that lands inside the operand, in order.
    The dimension lists are those the op has checked against the shapes."""
    rank = len(operand_shape)
    update_index = np.indices(updates_shape).reshape(len(updates_shape), -1).T.astype(np.int64)
    scatter_dims = [d for d in range(len(updates_shape)) if d not in update_window_dims]
    index_vectors = np.moveaxis(indices, index_vector_dim, -1).astype(np.int64)
    start = index_vectors[tuple(update_index[:, scatter_dims].T)]
    full = np.zeros((update_index.shape[0], rank), np.int64)
    full[:, scatter_dims_to_operand_dims] = start
    window_dims = [d for d in range(rank) if d not in inserted_window_dims]
    full[:, window_dims] += update_index[:, update_window_dims]
    inside = np.all((full >= 0) & (full < np.array(operand_shape, np.int64)), axis=1)
    where = np.ravel_multi_index(tuple(full[inside].T), operand_shape) if rank else np.zeros(int(inside.sum()),
                                                                                             np.int64)
    return np.asarray(where, np.int64), np.flatnonzero(inside)


@njit(cache=True)
def _combine(out: np.ndarray, where: np.ndarray, values: np.ndarray, computation: int) -> None:
    for k in range(where.size):
        t = where[k]
        a, v = out[t], values[k]
        if computation == UPDATE:
            out[t] = v
        elif computation == ADD:
            out[t] = a + v
        elif computation == MULTIPLY:
            out[t] = a * v
        elif computation == MAXIMUM:
            out[t] = v if a < v else a  # std::max(a, v)
        else:
            out[t] = v if v < a else a  # std::min(a, v)


def apply(operand: np.ndarray, where: np.ndarray, values: np.ndarray, computation: int) -> np.ndarray:
    """A copy of ``operand`` with ``values`` combined in at flat positions ``where``, one after another."""
    out = np.array(operand, copy=True).reshape(-1)
    if out.dtype == np.float16:  # numba has no float16: half arithmetic as numpy (and Eigen::half) round it
        if computation in (ADD, MULTIPLY):
            (np.add if computation == ADD else np.multiply).at(out, where, values)
            return out.reshape(operand.shape)
        wide = out.astype(np.float32)  # a choice between two halves is exact in float32
        _combine(wide, where, values.astype(np.float32), computation)
        return wide.astype(np.float16).reshape(operand.shape)
    with np.errstate(over="ignore"):
        _combine(out, where, np.ascontiguousarray(values, out.dtype), computation)
    return out.reshape(operand.shape)
