"""FILL, ZEROS_LIKE, RANGE, RANK, BROADCAST_ARGS and BROADCAST_TO against LiteRT, with constant parameters
(shape known at load) and with parameters fed at run time (shape known when the node runs)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import run_ours
from .single_op import Const, In, Out, expect_same, refused_version, sample, single_op

ANY = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
       np.bool_, np.complex64]


@pytest.mark.parametrize("dtype", ANY)
@pytest.mark.parametrize("dims", [(2, 3, 5), (7,), (3, 0, 2)])
def test_fill(dims, dtype):
    content = single_op("FILL", [Const(np.array(dims, np.int32)), In((), dtype)], [Out(dims, dtype)])
    ours = expect_same(content, [sample((), dtype)])
    assert ours[0].shape == dims


@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_fill_dims_at_run_time(index_type):
    content = single_op("FILL", [In((3,), index_type), In(())], [Out((1, 1, 1))])
    for dims in ([2, 3, 5], [1, 7, 3]):
        ours = expect_same(content, [np.array(dims, index_type), np.array(2.5, np.float32)])
        assert ours[0].shape == tuple(dims)


def test_fill_makes_a_scalar_from_empty_dims():
    content = single_op("FILL", [In((0,), np.int32), In(())], [Out(())])
    assert expect_same(content, [np.zeros(0, np.int32), np.array(-1.5, np.float32)])[0].shape == ()


@pytest.mark.parametrize("dtype,q", [(np.int8, (0.1, -3)), (np.int16, (0.05, 0))])
def test_fill_quantized(dtype, q):
    content = single_op("FILL", [Const(np.array([3, 5], np.int32)), In((), dtype, q)], [Out((3, 5), dtype, q)],
                        version=3)
    expect_same(content, [np.array(-7, dtype)])


def test_fill_refuses_a_different_output_quantization():
    content = single_op("FILL", [Const(np.array([3], np.int32)), In((), np.int8, (0.1, 0))],
                        [Out((3,), np.int8, (0.2, 0))])
    with pytest.raises(gd.ModelError, match="FILL.*quantization"):
        gd.Interpreter(model_content=content)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("shape", [(2, 3, 5), (), (4, 1)])
def test_zeros_like(shape, dtype):
    content = single_op("ZEROS_LIKE", [In(shape, dtype)], [Out(shape, dtype)])
    expect_same(content, [sample(shape, dtype)])


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, np.int64])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (), (9,)])
def test_rank(shape, dtype):
    content = single_op("RANK", [In(shape, dtype)], [Out((), np.int32)])
    ours = expect_same(content, [sample(shape, dtype)])
    assert ours[0].shape == ()


RANGES = {np.dtype(np.int32): [(0, 10, 3), (7, -5, -2), (-4, 9, 1)],
          np.dtype(np.int64): [(0, 10**10, 3 * 10**9), (5, 1, -1)],
          np.dtype(np.float32): [(0.1, 2.9, 0.3), (5.0, -1.5, -0.7), (0.0, 1.0, 0.1), (-2.5, 2.5, 0.5)]}


@pytest.mark.parametrize("dtype", list(RANGES))
def test_range_constant(dtype):
    for start, limit, delta in RANGES[dtype]:
        n = len(np.arange(start, limit, delta))
        consts = [Const(np.array(v, dtype)) for v in (start, limit, delta)]
        content = single_op("RANGE", consts, [Out((n,), dtype)], version=2 if dtype == np.int64 else 1)
        ours = expect_same(content, [])
        assert ours[0].ndim == 1


@pytest.mark.parametrize("dtype", list(RANGES))
def test_range_at_run_time(dtype):
    content = single_op("RANGE", [In((), dtype)] * 3, [Out((1,), dtype)], version=2 if dtype == np.int64 else 1)
    for bounds in RANGES[dtype]:
        expect_same(content, [np.array(v, dtype) for v in bounds])


def test_range_can_be_empty():
    # LiteRT's get_tensor refuses an empty output ("Invalid tensor size"): checked on ours alone
    content = single_op("RANGE", [In((), np.int32)] * 3, [Out((1,), np.int32)])
    out = run_ours(content, [np.array(v, np.int32) for v in (3, 3, 1)])[0]
    assert out.shape == (0,) and out.dtype == np.int32


def test_range_refuses_a_delta_going_the_wrong_way():
    content = single_op("RANGE", [Const(np.array(v, np.int32)) for v in (0, 5, -1)], [Out((1,), np.int32)])
    with pytest.raises(gd.ModelError, match="RANGE.*delta -1"):
        gd.Interpreter(model_content=content).allocate_tensors()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("a,b", [([2, 1, 5], [3, 1]), ([1], [4, 3, 1, 7]), ([6, 1], [6, 1]), ([], [3, 2])])
def test_broadcast_args(a, b, dtype):
    out = (max(len(a), len(b)),)
    content = single_op("BROADCAST_ARGS", [In((len(a),), dtype), In((len(b),), dtype)], [Out(out, dtype)])
    expect_same(content, [np.array(a, dtype), np.array(b, dtype)])
    if not a:
        return  # the reader takes a constant with no elements (no buffer data) for a tensor nothing writes
    const = single_op("BROADCAST_ARGS", [Const(np.array(a, dtype)), Const(np.array(b, dtype))], [Out(out, dtype)])
    expect_same(const, [])


@pytest.mark.parametrize("dtype,q", [(np.float32, None), (np.int8, (0.1, 3)), (np.int16, (0.2, 0)),
                                     (np.uint8, None), (np.bool_, None), (np.int64, None), (np.float16, None)])
@pytest.mark.parametrize("shape,target", [((2, 1), (3, 2, 5)), ((1, 3, 1, 1), (2, 3, 7, 5)), ((), (4, 3)),
                                          ((3,), (3,)), ((1, 1, 1, 1, 1, 2), (2, 1, 3, 1, 2, 2))])
def test_broadcast_to(shape, target, dtype, q):
    version = 3 if dtype in (np.int8, np.int16) else 2
    content = single_op("BROADCAST_TO", [In(shape, dtype, q), Const(np.array(target, np.int32))],
                        [Out(target, dtype, q)], version=version)
    expect_same(content, [sample(shape, dtype)])


def test_broadcast_to_shape_at_run_time():
    content = single_op("BROADCAST_TO", [In((2, 1)), In((3,), np.int64)], [Out((1, 1, 1))], version=2)
    x = sample((2, 1), np.float32)
    for target in ([3, 2, 4], [1, 2, 7]):
        assert expect_same(content, [x, np.array(target, np.int64)])[0].shape == tuple(target)


def test_broadcast_to_version_1_is_refused():
    # version 1 of the op code was withdrawn; LiteRT registers versions 2 and up
    content = single_op("BROADCAST_TO", [In((3,)), Const(np.array([2, 3], np.int32))], [Out((2, 3))], version=1)
    with pytest.raises(gd.ModelError, match="BROADCAST_TO.*version 1"):
        gd.Interpreter(model_content=content)


def test_broadcast_to_refuses_an_impossible_shape():
    content = single_op("BROADCAST_TO", [In((2, 3)), Const(np.array([4, 3], np.int32))], [Out((4, 3))],
                        version=2)
    with pytest.raises(gd.ModelError, match="BROADCAST_TO.*do not broadcast"):
        run_ours(content, [sample((2, 3), np.float32)])


@pytest.mark.parametrize("op,version,inputs,outputs", [
    ("FILL", 6, [Const(np.array([3], np.int32)), In(())], [Out((3,))]),
    ("ZEROS_LIKE", 2, [In((3,))], [Out((3,))]),
    ("RANK", 2, [In((3,))], [Out((), np.int32)]),
    ("RANGE", 3, [In((), np.int32)] * 3, [Out((1,), np.int32)]),
    ("BROADCAST_ARGS", 2, [In((2,), np.int32)] * 2, [Out((2,), np.int32)]),
    ("BROADCAST_TO", 5, [In((3,)), Const(np.array([2, 3], np.int32))], [Out((2, 3))]),
])
def test_newer_versions_are_refused_by_name(op, version, inputs, outputs):
    assert f"({op}): op version {version} is not supported" in refused_version(op, inputs, outputs, version)


def test_outputs_sized_by_values_are_bounded():
    fill = single_op("FILL", [In((3,), np.int64), In(())], [Out((1, 1, 1))])
    with pytest.raises(gd.ModelError, match="FILL.*GiB"):
        run_ours(fill, [np.array([10**5, 10**5, 10**5], np.int64), np.array(1.0, np.float32)])
    ranged = single_op("RANGE", [In(())] * 3, [Out((1,))])
    with pytest.raises(gd.ModelError, match="RANGE.*GiB"):
        run_ours(ranged, [np.array(v, np.float32) for v in (0.0, 1e30, 1.0)])
