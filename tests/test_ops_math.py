"""ATAN2, CEIL, ROUND, RELU_0_TO_1, RIGHT_SHIFT, BITWISE_XOR, BITCAST, BUCKETIZE and FAKE_QUANT against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import run_ours, shared_delegate
from .single_op import In, Out, expect_same, refused_version, sample, single_op

SHAPES = [(2, 3, 5), (1, 7), (3, 1, 1, 9), ()]
INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", SHAPES)
def test_atan2(shape, dtype):
    content = single_op("ATAN2", [In(shape, dtype), In(shape, dtype)], [Out(shape, dtype)])
    y, x = sample(shape, dtype, 1), sample(shape, dtype, 2)
    if x.size:
        x.reshape(-1)[0], y.reshape(-1)[0] = 0.0, 0.0  # atan2(0, 0)
    expect_same(content, [y, x], rel=1e-3 if dtype == np.float16 else 1e-6)


def test_atan2_refuses_different_shapes():
    content = single_op("ATAN2", [In((2, 3)), In((2, 1))], [Out((2, 3))])
    with pytest.raises(gd.ModelError, match="ATAN2.*same shape"):
        run_ours(content, [sample((2, 3), np.float32), sample((2, 1), np.float32)])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["CEIL", "ROUND"])
@pytest.mark.parametrize("shape", SHAPES)
def test_ceil_round(op, shape, dtype):
    content = single_op(op, [In(shape, dtype)], [Out(shape, dtype)])
    x = (sample(shape, np.float32) * 4).astype(dtype)
    if x.size >= 6:  # halves: ROUND goes to even
        x.reshape(-1)[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    expect_same(content, [x])


@pytest.mark.parametrize("op", ["CEIL", "ROUND", "RELU_0_TO_1"])
def test_unary_ops_on_gpu(op, backend):
    shape = (2, 5, 3, 7)
    content = single_op(op, [In(shape)], [Out(shape)])
    x = (sample(shape, np.float32) * 2).astype(np.float32)
    x.reshape(-1)[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    assert {d["backend"] for d in it.get_ops_details()} == {backend}
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), run_ours(content, [x])[0])


@pytest.mark.parametrize("dtype,q", [(np.float32, None), (np.int8, (1 / 100, -20)), (np.uint8, (1 / 120, 30))])
def test_relu_0_to_1(dtype, q):
    shape = (2, 4, 3, 5)
    qo = None if q is None else (1 / 250, -128 if dtype == np.int8 else 0)
    content = single_op("RELU_0_TO_1", [In(shape, dtype, q)], [Out(shape, dtype, qo)])
    x = sample(shape, dtype) if q else (sample(shape, dtype) * 2).astype(dtype)
    expect_same(content, [x])
    if q:
        expect_same(content, [x], reference_kernels=True)


@pytest.mark.parametrize("op", ["RIGHT_SHIFT", "BITWISE_XOR"])
@pytest.mark.parametrize("dtype", INTS)
def test_bitwise(op, dtype):
    a_shape, b_shape, out = (2, 3, 5), (3, 1), (2, 3, 5)
    content = single_op(op, [In(a_shape, dtype), In(b_shape, dtype)], [Out(out, dtype)])
    a = sample(a_shape, dtype)
    bits = np.dtype(dtype).itemsize * 8
    b = sample(b_shape, dtype, 1, low=0 if op == "BITWISE_XOR" else max(np.iinfo(dtype).min, -3),
               high=None if op == "BITWISE_XOR" else bits + 3)
    expect_same(content, [a, b])
    expect_same(content, [a, b], reference_kernels=True)


@pytest.mark.parametrize("src,dst,shape", [(np.float32, np.int32, (2, 3)), (np.int32, np.uint8, (3, 5)),
                                           (np.int8, np.int16, (3, 2)), (np.uint8, np.float32, (5, 4)),
                                           (np.int64, np.float64, ()), (np.int16, np.uint16, (7,))])
def test_bitcast(src, dst, shape):
    size_in, size_out = np.dtype(src).itemsize, np.dtype(dst).itemsize
    out = (*shape, size_in // size_out) if size_in > size_out else shape[:-1] if size_in < size_out else shape
    content = single_op("BITCAST", [In(shape, src)], [Out(out, dst)])
    x = sample(shape, src)
    ours = expect_same(content, [x])
    assert ours[0].shape == out


def test_bitcast_refuses_a_wrong_last_dimension():
    content = single_op("BITCAST", [In((3, 3), np.int8)], [Out((3,), np.int16)])
    with pytest.raises(gd.ModelError, match="BITCAST.*last dimension of 2"):
        gd.Interpreter(model_content=content).allocate_tensors()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_bucketize(dtype):
    shape = (2, 3, 7)
    bounds = [-2.0, -0.5, 0.0, 0.25, 1.0, 3.0, 10.0]
    content = single_op("BUCKETIZE", [In(shape, dtype)], [Out(shape, np.int32)], boundaries=bounds)
    x = sample(shape, dtype) * (3 if np.dtype(dtype).kind == "f" else 1)
    if np.dtype(dtype).kind in "iu":
        x = sample(shape, dtype, low=-12, high=12)
    x = x.astype(dtype)
    x.reshape(-1)[:3] = [0, 1, 3]  # on a boundary: the bucket above
    expect_same(content, [x])


@pytest.mark.parametrize("lo,hi,bits", [(-1.0, 1.0, 8), (-3.1, 7.7, 8), (-0.4, 0.9, 4), (0.0, 6.0, 8),
                                        (-2.5, 0.0, 16), (0.3, 2.0, 8)])
def test_fake_quant(lo, hi, bits):
    shape = (2, 3, 5, 7)
    content = single_op("FAKE_QUANT", [In(shape)], [Out(shape)], min=lo, max=hi, num_bits=bits)
    x = (sample(shape, np.float32) * max(abs(lo), hi)).astype(np.float32)
    expect_same(content, [x])


def test_fake_quant_refuses_narrow_range():
    content = single_op("FAKE_QUANT", [In((3,))], [Out((3,))], version=2, min=-1.0, max=1.0, num_bits=8,
                        narrow_range=True)
    with pytest.raises(gd.ModelError, match="FAKE_QUANT.*narrow_range"):
        gd.Interpreter(model_content=content)


@pytest.mark.parametrize("op,version,inputs,outputs", [
    ("ATAN2", 2, [In((3,)), In((3,))], [Out((3,))]),
    ("CEIL", 2, [In((3,))], [Out((3,))]),
    ("ROUND", 2, [In((3,))], [Out((3,))]),
    ("RELU_0_TO_1", 2, [In((3,))], [Out((3,))]),
    ("RIGHT_SHIFT", 2, [In((3,), np.int32), In((3,), np.int32)], [Out((3,), np.int32)]),
    ("BITWISE_XOR", 2, [In((3,), np.int32), In((3,), np.int32)], [Out((3,), np.int32)]),
    ("BITCAST", 2, [In((3,), np.int32)], [Out((3,), np.float32)]),
    ("BUCKETIZE", 2, [In((3,))], [Out((3,), np.int32)]),
    ("FAKE_QUANT", 3, [In((3,))], [Out((3,))]),
])
def test_newer_versions_are_refused_by_name(op, version, inputs, outputs):
    assert f"({op}): op version {version} is not supported" in refused_version(op, inputs, outputs, version)
