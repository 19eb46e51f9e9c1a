"""GATHER_ND, SCATTER_ND, WHERE, SPARSE_TO_DENSE, DYNAMIC_UPDATE_SLICE, EMBEDDING_LOOKUP and HASHTABLE_LOOKUP
against LiteRT (and its reference kernels for the integer paths)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import run_ours
from .single_op import Const, In, Out, expect_same, refused_version, sample, single_op

GATHER_TYPES = [np.float32, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_]


def _random_indices(shape: tuple[int, ...], nd: int, count: tuple[int, ...], dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, shape[d], count) for d in range(nd)]
    return np.stack(cols, -1).astype(dtype)


@pytest.mark.parametrize("dtype", GATHER_TYPES)
@pytest.mark.parametrize("params,nd,count", [((5, 3, 7), 1, (4,)), ((5, 3, 7), 2, (2, 3)), ((5, 3, 7), 3, (6,)),
                                             ((4, 9), 2, (3, 1, 2))])
def test_gather_nd(params, nd, count, dtype):
    indices = _random_indices(params, nd, count, np.int32)
    out = indices.shape[:-1] + params[nd:]
    content = single_op("GATHER_ND", [In(params, dtype), Const(indices)], [Out(out, dtype)])
    expect_same(content, [sample(params, dtype)])


@pytest.mark.parametrize("index_type", [np.int16, np.int32, np.int64])
def test_gather_nd_indices_at_run_time(index_type):
    params = (6, 5, 3)
    content = single_op("GATHER_ND", [In(params, np.int8, (0.5, 3)), In((4, 2), index_type)],
                        [Out((4, 3), np.int8, (0.5, 3))])
    x = sample(params, np.int8)
    indices = _random_indices(params, 2, (4,), index_type, seed=3)
    expect_same(content, [x, indices])
    expect_same(content, [x, indices], reference_kernels=True)


def test_gather_nd_refuses_an_index_outside_the_tensor():
    content = single_op("GATHER_ND", [In((3, 4)), In((1, 2), np.int32)], [Out((1,))])
    with pytest.raises(gd.ModelError, match="GATHER_ND.*outside"):
        run_ours(content, [sample((3, 4), np.float32), np.array([[1, 4]], np.int32)])
    with pytest.raises(gd.ModelError, match="GATHER_ND.*outside"):
        run_ours(content, [sample((3, 4), np.float32), np.array([[-1, 2]], np.int32)])


SCATTER_TYPES = [np.float32, np.int8, np.uint8, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", SCATTER_TYPES)
@pytest.mark.parametrize("shape,nd,count", [((7, 3), 1, (5,)), ((4, 5, 3), 2, (2, 3)), ((9,), 1, (11,)),
                                            ((3, 5, 2), 3, (4,))])
def test_scatter_nd(shape, nd, count, dtype):
    indices = _random_indices(shape, nd, count, np.int32, seed=1)  # with repeats: they add up
    updates_shape = indices.shape[:-1] + shape[nd:]
    content = single_op("SCATTER_ND", [Const(indices), In(updates_shape, dtype), Const(np.array(shape, np.int32))],
                        [Out(shape, dtype)])
    updates = sample(updates_shape, dtype, 2, low=-20 if dtype == np.int8 else None,
                     high=20 if dtype == np.int8 else None)
    expect_same(content, [updates], rel=1e-6)
    if dtype != np.float32:
        expect_same(content, [updates], reference_kernels=True)


def test_scatter_nd_refuses_an_index_outside_the_tensor():
    content = single_op("SCATTER_ND", [In((1, 2), np.int32), In((1,)), Const(np.array([3, 4], np.int32))],
                        [Out((3, 4))])
    for index in ([0, 5], [1, -1], [3, 0]):
        with pytest.raises(gd.ModelError, match="SCATTER_ND.*outside"):
            run_ours(content, [np.array([index], np.int32), np.ones(1, np.float32)])


def test_scatter_nd_shape_at_run_time():
    content = single_op("SCATTER_ND", [In((3, 1), np.int32), In((3, 4)), In((2,), np.int32)], [Out((1, 1))])
    updates = sample((3, 4), np.float32)
    for rows in (5, 8):
        indices = np.array([[0], [rows - 1], [2]], np.int32)
        out = expect_same(content, [indices, updates, np.array([rows, 4], np.int32)])[0]
        assert out.shape == (rows, 4)


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int8, np.uint8, np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("shape", [(3, 5, 7), (11,), (2, 1, 3, 4)])
def test_where(shape, dtype):
    content = single_op("WHERE", [In(shape, dtype)], [Out((1, len(shape)), np.int64)],
                        version=1 if dtype == np.bool_ else 2)
    x = sample(shape, dtype)
    x = (x * (sample(shape, np.bool_, 5))).astype(dtype)  # about half zeros
    expect_same(content, [x])


def test_where_of_a_constant_has_a_static_shape():
    cond = sample((4, 6), np.bool_, 2)
    content = single_op("WHERE", [Const(cond)], [Out((1, 2), np.int64)])
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    assert tuple(it.get_output_details()[0]["shape"]) == (int(cond.sum()), 2)
    expect_same(content, [])


S2D_TYPES = [np.float32, np.int32, np.int64, np.int8, np.uint8]


@pytest.mark.parametrize("dtype", S2D_TYPES)
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(9,), (4, 5), (3, 4, 5), (2, 3, 3, 5)])
def test_sparse_to_dense(shape, index_type, dtype):
    rng = np.random.default_rng(4)
    flat = rng.choice(int(np.prod(shape)), 6, replace=False)
    coords = np.stack(np.unravel_index(flat, shape), -1).astype(index_type)
    indices = coords.reshape(-1) if len(shape) == 1 else coords
    version = 3 if dtype in (np.int8, np.uint8) else 2 if dtype == np.int64 else 1
    content = single_op("SPARSE_TO_DENSE", [Const(indices), Const(np.array(shape, index_type)), In((6,), dtype),
                                            In((), dtype)], [Out(shape, dtype)], version=version)
    values, default = sample((6,), dtype, 1), sample((), dtype, 2)
    expect_same(content, [values, default])
    scalar = single_op("SPARSE_TO_DENSE", [Const(indices), Const(np.array(shape, index_type)), In((), dtype),
                                           In((), dtype)], [Out(shape, dtype)], version=version)
    expect_same(scalar, [sample((), dtype, 3), default])


def test_sparse_to_dense_shape_at_run_time():
    content = single_op("SPARSE_TO_DENSE", [In((3, 2), np.int32), In((2,), np.int32), In((3,)), In(())],
                        [Out((1, 1))])
    indices = np.array([[0, 1], [2, 0], [1, 3]], np.int32)
    for shape in ([3, 4], [5, 7]):
        out = expect_same(content, [indices, np.array(shape, np.int32), sample((3,), np.float32),
                                    np.array(-1, np.float32)])[0]
        assert out.shape == tuple(shape)


def test_sparse_to_dense_refuses_an_index_outside():
    content = single_op("SPARSE_TO_DENSE", [In((1, 2), np.int32), Const(np.array([3, 4], np.int32)), In((1,)),
                                            In(())], [Out((3, 4))])
    with pytest.raises(gd.ModelError, match="SPARSE_TO_DENSE.*outside"):
        run_ours(content, [np.array([[3, 0]], np.int32), np.ones(1, np.float32), np.zeros((), np.float32)])


DUS_TYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
             np.bool_, np.complex64]


@pytest.mark.parametrize("dtype", DUS_TYPES)
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_dynamic_update_slice(dtype, index_type):
    shape, update = (3, 5, 7), (2, 3, 4)
    content = single_op("DYNAMIC_UPDATE_SLICE", [In(shape, dtype), In(update, dtype), In((3,), index_type)],
                        [Out(shape, dtype)], version=2 if index_type == np.int64 else 1)
    x, u = sample(shape, dtype, 1), sample(update, dtype, 2)
    for starts in ([0, 1, 2], [1, 2, 3], [-4, 9, 1], [5, -1, 100]):  # out-of-range starts are clamped
        expect_same(content, [x, u, np.array(starts, index_type)])


def test_dynamic_update_slice_refuses_an_update_too_large():
    content = single_op("DYNAMIC_UPDATE_SLICE", [In((3, 4)), In((4, 1)), In((2,), np.int32)], [Out((3, 4))])
    with pytest.raises(gd.ModelError, match="DYNAMIC_UPDATE_SLICE.*does not fit"):
        gd.Interpreter(model_content=content).allocate_tensors()


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                   np.bool_, np.float16, np.float64, np.complex64])
@pytest.mark.parametrize("table", [(7, 3), (5, 2, 3), (9, 1)])
def test_embedding_lookup(table, dtype):
    ids = np.array([3, 0, 4, 4, 1], np.int32)
    content = single_op("EMBEDDING_LOOKUP", [In((5,), np.int32), In(table, dtype)], [Out((5, *table[1:]), dtype)])
    expect_same(content, [ids, sample(table, dtype)])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_row", [False, True])
def test_embedding_lookup_hybrid(dtype, per_row):
    table = sample((6, 5), dtype, 3)
    scale = np.linspace(0.01, 0.2, 6).astype(np.float32) if per_row else 0.05
    mb_content = _hybrid_model(table, scale)
    ids = np.array([5, 0, 2, 2], np.int32)
    expect_same(mb_content, [ids], rel=1e-6)


def _hybrid_model(table: np.ndarray, scale) -> bytes:
    from gpu_delegate.tflite.writer import ModelBuilder

    mb = ModelBuilder()
    ids = mb.input("ids", [4], np.int32)
    t = mb.const("table", table, scale=scale, zero_point=0, axis=0)
    y = mb.tensor("y", [4, table.shape[1]], np.float32)
    mb.op("EMBEDDING_LOOKUP", [ids, t], [y], version=4 if np.ndim(scale) else 1)
    mb.output(y)
    return mb.build()


def test_embedding_lookup_refuses_an_id_outside_the_table():
    content = single_op("EMBEDDING_LOOKUP", [In((2,), np.int32), In((3, 2))], [Out((2, 2))])
    with pytest.raises(gd.ModelError, match="EMBEDDING_LOOKUP.*rows"):
        run_ours(content, [np.array([0, 3], np.int32), sample((3, 2), np.float32)])


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                   np.bool_, np.float16, np.float64, np.complex64])
@pytest.mark.parametrize("values", [(5,), (5, 3), (5, 2, 3)])
def test_hashtable_lookup(values, dtype):
    keys = np.array([-7, 0, 3, 11, 40], np.int32)
    content = single_op("HASHTABLE_LOOKUP", [In((6,), np.int32), Const(keys), In(values, dtype)],
                        [Out((6, *values[1:]), dtype), Out((6,), np.uint8)])
    lookups = np.array([3, 4, -7, 40, 41, 0], np.int32)
    expect_same(content, [lookups, sample(values, dtype)])


@pytest.mark.parametrize("op,version,inputs,outputs", [
    ("GATHER_ND", 7, [In((3, 2)), Const(np.array([[1]], np.int32))], [Out((1, 2))]),
    ("SCATTER_ND", 2, [Const(np.array([[1]], np.int32)), In((1, 2)), Const(np.array([3, 2], np.int32))],
     [Out((3, 2))]),
    ("WHERE", 3, [In((3,), np.bool_)], [Out((1, 1), np.int64)]),
    ("SPARSE_TO_DENSE", 4, [Const(np.array([1], np.int32)), Const(np.array([3], np.int32)), In((1,)), In(())],
     [Out((3,))]),
    ("DYNAMIC_UPDATE_SLICE", 7, [In((3,)), In((1,)), Const(np.array([1], np.int32))], [Out((3,))]),
    ("EMBEDDING_LOOKUP", 6, [In((1,), np.int32), In((3, 2))], [Out((1, 2))]),
    ("HASHTABLE_LOOKUP", 2, [In((1,), np.int32), Const(np.array([1], np.int32)), In((1,))],
     [Out((1,)), Out((1,), np.uint8)]),
])
def test_newer_versions_are_refused_by_name(op, version, inputs, outputs):
    assert f"({op}): op version {version} is not supported" in refused_version(op, inputs, outputs, version)
