"""EMBEDDING_LOOKUP_SPARSE against LiteRT and a numpy formula."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, run_litert, run_ours


def model(indices: np.ndarray, dense_shape, vocab: int, emb_shape, combiner: str, version=1) -> bytes:
    n = indices.shape[0]
    mb = ModelBuilder()
    ids = mb.input("ids", [n], np.int32)
    idx = mb.const("indices", indices.astype(np.int32))
    dense = mb.const("dense", np.array(dense_shape, np.int32))
    w = mb.input("w", [n])
    params = mb.const("params", np.random.default_rng(0).standard_normal((vocab, *emb_shape)).astype(np.float32))
    y = mb.tensor("y", [*dense_shape[:-1], *emb_shape])
    mb.op("EMBEDDING_LOOKUP_SPARSE", [ids, idx, dense, w, params], [y], version=version, combiner=combiner)
    mb.output(y)
    return mb.build()


def sparse_indices(dense_shape, n, seed) -> np.ndarray:
    """n sorted coordinates in dense_shape (buckets repeat, last coordinate varies)."""
    rng = np.random.default_rng(seed)
    flat = np.sort(rng.integers(0, int(np.prod(dense_shape[:-1])), n))
    coords = np.stack(np.unravel_index(flat, dense_shape[:-1]), axis=1)
    return np.concatenate([coords, rng.integers(0, dense_shape[-1], (n, 1))], axis=1)


@pytest.mark.parametrize("combiner", ["SUM", "MEAN", "SQRTN"])
@pytest.mark.parametrize("dense_shape,emb_shape", [((4, 6), (5,)), ((3, 2, 5), (3, 2)), ((7, 3), (1,))])
def test_embedding_lookup_sparse(combiner, dense_shape, emb_shape):
    n, vocab = 11, 9
    indices = sparse_indices(dense_shape, n, 1)
    content = model(indices, dense_shape, vocab, emb_shape, combiner)
    rng = np.random.default_rng(2)
    inputs = [rng.integers(0, vocab, n).astype(np.int32), rng.uniform(0.5, 2, n).astype(np.float32)]
    ref, ours = run_litert(content, inputs)[0], run_ours(content, inputs)[0]
    assert_float_close(ours, ref, rel=1e-6)
    # the formula, bucket by bucket
    params = np.random.default_rng(0).standard_normal((vocab, *emb_shape)).astype(np.float64)
    want = np.zeros((int(np.prod(dense_shape[:-1])), *emb_shape))
    total, squares = np.zeros(len(want)), np.zeros(len(want))
    for k in range(n):
        b = np.ravel_multi_index(tuple(indices[k, :-1]), dense_shape[:-1])
        want[b] += inputs[1][k] * params[inputs[0][k]]
        total[b] += inputs[1][k]
        squares[b] += inputs[1][k] ** 2
    div = {"SUM": np.ones_like(total), "MEAN": total, "SQRTN": np.sqrt(squares)}[combiner]
    div = np.where(total > 0, div, 1).reshape(-1, *[1] * len(emb_shape))
    np.testing.assert_allclose(ours.reshape(want.shape), want / div, rtol=1e-5, atol=1e-5)


def test_embedding_lookup_sparse_rejects_out_of_range_ids():
    content = model(sparse_indices((3, 4), 4, 0), (3, 4), 5, (2,), "SUM")
    with pytest.raises(gd.ModelError, match=r"EMBEDDING_LOOKUP_SPARSE.*ids must lie"):
        run_ours(content, [np.array([0, 1, 5, 2], np.int32), np.ones(4, np.float32)])


def test_embedding_lookup_sparse_rejects_newer_version():
    with pytest.raises(gd.ModelError, match=r"EMBEDDING_LOOKUP_SPARSE.*version 2"):
        gd.Interpreter(model_content=model(sparse_indices((3, 4), 4, 0), (3, 4), 5, (2,), "SUM", version=2))
