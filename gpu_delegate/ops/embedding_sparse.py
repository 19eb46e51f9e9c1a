"""EMBEDDING_LOOKUP_SPARSE (float32): a SparseTensor of ids — ids [N] int32, indices [N, rank] int32,
dense_shape [rank] int32 — with weights [N] float32 looks up rows of params [vocab, ...] and combines the
rows of each entry of dense_shape[:-1] by SUM, MEAN or SQRTN (the combiner option). Output:
dense_shape[:-1] + params.shape[1:]; its shape comes from dense_shape's values."""

from __future__ import annotations

import numpy as np

from ..cpu.embedding_sparse import lookup_sparse
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import check_run_shapes, data_dependent


def _out_shape(node: Node, dense_shape: np.ndarray, params_shape) -> tuple[int, ...]:
    dims = tuple(int(d) for d in dense_shape.reshape(-1))
    if len(dims) < 1 or any(d < 0 for d in dims):
        raise ModelError(f"{node}: dense_shape {list(dims)} must have rank >= 1 and no negative size")
    return (*dims[:-1], *params_shape[1:])


@register
class EmbeddingLookupSparse(Op):
    name = "EMBEDDING_LOOKUP_SPARSE"
    types = "float32"
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 5 or min(node.inputs) < 0 or len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 5 inputs (ids, indices, dense_shape, weights, params) and 1 output")
        types = [graph.tensors[t].dtype for t in node.inputs]
        want = [np.int32, np.int32, np.int32, np.float32, np.float32]
        if types != [np.dtype(t) for t in want]:
            raise ModelError(f"{node}: input types {[str(t) for t in types]}; expected int32 ids, indices and "
                             "dense_shape, float32 weights and params")
        combiner = int(node.attrs.get("combiner", 0))
        if combiner not in (0, 1, 2):
            raise ModelError(f"{node}: unknown combiner {combiner}")

    @staticmethod
    def infer(node, graph, shapes):
        ids, indices, dense, weights, params = shapes
        if (len(ids) != 1 or len(indices) != 2 or indices[0] != ids[0] or tuple(weights) != tuple(ids)
                or len(dense) != 1 or indices[1] != dense[0] or len(params) < 2):
            raise ModelError(f"{node}: shapes do not fit: ids {list(ids)}, indices {list(indices)}, dense_shape "
                             f"{list(dense)}, weights {list(weights)}, params {list(params)}")
        value = graph.tensors[node.inputs[2]].data
        if value is None:
            data_dependent(node)
        return [_out_shape(node, value, params)]

    @staticmethod
    def run_cpu(node, graph, inputs):
        ids, indices, dense, weights, params = inputs
        check_run_shapes(EmbeddingLookupSparse.infer, node, graph, [v.shape for v in inputs])
        shape = _out_shape(node, dense, params.shape)
        vocab = params.shape[0]
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise ModelError(f"{node}: ids must lie in [0, {vocab}), got {int(ids.min())} to {int(ids.max())}")
        dims = dense.reshape(-1).astype(np.int64)[:-1]
        coords = indices[:, :-1].astype(np.int64)
        if coords.size and (coords.min() < 0 or np.any(coords >= dims)):
            raise ModelError(f"{node}: sparse indices fall outside dense_shape {dense.tolist()}")
        buckets = np.ravel_multi_index(coords.T, dims) if dims.size else np.zeros(ids.size, np.int64)
        table = np.ascontiguousarray(params, np.float32).reshape(vocab, -1)
        out = np.zeros((int(np.prod(dims)), table.shape[1]), np.float32)
        if ids.size:
            lookup_sparse(ids.astype(np.int64), np.asarray(buckets, np.int64), np.asarray(weights, np.float32),
                          table, int(node.attrs.get("combiner", 0)), out)
        return [out.reshape(shape)]
