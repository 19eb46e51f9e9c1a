"""Reductions on the CPU path against LiteRT: MEAN/SUM/REDUCE_* over constant axes (negative, repeated,
all of them, keep_dims or not), ARG_MAX/ARG_MIN, SOFTMAX, LOG_SOFTMAX, CUMSUM and TOPK_V2; float, int32,
int8 and uint8 (the quantized ones against LiteRT's reference kernels)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_matches, run_litert, run_ours


@dataclass
class T:
    shape: tuple
    dtype: type = np.float32
    q: tuple | None = None  # (scale, zero_point)
    data: np.ndarray | None = None  # a constant


def op_model(op: str, ins: list[T], outs: list[T], **attrs) -> bytes:
    mb = ModelBuilder()

    def quant(t: T) -> dict:
        return {} if t.q is None else {"scale": t.q[0], "zero_point": t.q[1]}
    ids = [mb.const(f"c{i}", t.data, t.dtype, **quant(t)) if t.data is not None
           else mb.input(f"x{i}", t.shape, t.dtype, **quant(t)) for i, t in enumerate(ins)]
    oids = [mb.tensor(f"y{i}", t.shape, t.dtype, **quant(t)) for i, t in enumerate(outs)]
    mb.op(op, ids, oids, **attrs)
    mb.output(*oids)
    return mb.build()


def check(content: bytes, inputs: list[np.ndarray], reference_kernels: bool = False, rel: float = 1e-4) -> None:
    assert_matches(run_ours(content, inputs), run_litert(content, inputs, reference_kernels), rel)


def rand_q(rng, shape, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def axis_const(axes) -> T:
    a = np.array(axes, np.int32)
    return T(a.shape, np.int32, data=a)


SHAPE = (2, 5, 7, 13)
AXES = [([1, 2], True), ([2, 1], False), ([-3, -2], True), ([-1], False), ([0, 3], True), ([3, -1], False),
        ([0, 1, 2, 3], False), ([2], True), (0, False)]


def reduced(shape, axes, keep) -> tuple:
    axes = {int(a) % len(shape) for a in np.atleast_1d(axes)}
    return np.sum(np.zeros(shape), axis=tuple(axes), keepdims=keep).shape


@pytest.mark.parametrize("op", ["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"])
def test_reduce_float(op):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    if op == "REDUCE_PROD":
        x = (1 + 0.05 * x).astype(np.float32)
    for axes, keep in AXES:
        content = op_model(op, [T(SHAPE), axis_const(axes)], [T(reduced(SHAPE, axes, keep))], keep_dims=keep)
        check(content, [x])


@pytest.mark.parametrize("op", ["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"])
def test_reduce_int32(op):
    rng = np.random.default_rng(2)
    shape = (3, 4, 5)
    x = rng.integers(-3 if op == "REDUCE_PROD" else -1000, 4 if op == "REDUCE_PROD" else 1000, shape)
    for axes, keep in [([1], False), ([-1, 0], True), ([0, 1, 2], False)]:
        content = op_model(op, [T(shape, np.int32), axis_const(axes)], [T(reduced(shape, axes, keep), np.int32)],
                           keep_dims=keep)
        check(content, [x.astype(np.int32)])


@pytest.mark.parametrize("op", ["REDUCE_ANY", "REDUCE_ALL"])
def test_reduce_bool(op):
    x = np.random.default_rng(3).random((3, 4, 5)) < 0.8
    for axes, keep in [([1], False), ([-1, 0], True)]:
        content = op_model(op, [T(x.shape, np.bool_), axis_const(axes)], [T(reduced(x.shape, axes, keep), np.bool_)],
                           keep_dims=keep)
        check(content, [x])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_mean_quantized(dtype):
    """TFLite's integer MEAN: the spatial mean of MobileNet heads and any other axes, with the output on the
    input's quantization or on another one."""
    rng = np.random.default_rng(4)
    lo = int(np.iinfo(dtype).min)
    qi = (0.05, lo + 100)
    x = rand_q(rng, SHAPE, dtype)
    for axes, keep in AXES:
        for qo in (qi, (0.07, lo + 90), (0.013, lo + 131)):
            content = op_model("MEAN", [T(SHAPE, dtype, qi), axis_const(axes)],
                               [T(reduced(SHAPE, axes, keep), dtype, qo)], keep_dims=keep)
            check(content, [x], reference_kernels=True)


def test_sum_uint8_and_int8():
    """uint8 SUM against the reference kernel; LiteRT's reference int8 SUM reads the codes as uint8 (a
    bug), so int8 goes against the formula: round(sum of dequantized values / output scale) + zero point."""
    rng = np.random.default_rng(5)
    shape = (2, 5, 3)
    for dtype in (np.uint8, np.int8):
        lo = int(np.iinfo(dtype).min)
        x = rand_q(rng, shape, dtype)
        qi, qo = (0.01, lo + 120), (0.3, lo + 100)
        for axes, keep in [([1], False), ([0, -1], True), ([0, 1, 2], False)]:
            content = op_model("SUM", [T(shape, dtype, qi), axis_const(axes)],
                               [T(reduced(shape, axes, keep), dtype, qo)], keep_dims=keep)
            if dtype == np.uint8:
                check(content, [x], reference_kernels=True)
            else:
                total = np.sum(qi[0] * (x.astype(np.float64) - qi[1]), axis=tuple(a % 3 for a in axes),
                               keepdims=keep)
                ref = np.clip(np.round(total / qo[0]) + qo[1], -128, 127).astype(np.int8)
                assert_matches(run_ours(content, [x]), [ref])


@pytest.mark.parametrize("op", ["REDUCE_MAX", "REDUCE_MIN"])
def test_reduce_extreme_int8(op):
    rng = np.random.default_rng(6)
    q = (0.05, -7)
    x = rand_q(rng, SHAPE, np.int8)
    for axes, keep in AXES[:4]:
        content = op_model(op, [T(SHAPE, np.int8, q), axis_const(axes)], [T(reduced(SHAPE, axes, keep), np.int8, q)],
                           keep_dims=keep)
        check(content, [x], reference_kernels=True)


def test_mean_dynamic_axis():
    """The axis as a graph input: the output shape is known only when the node runs."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    content = op_model("MEAN", [T(x.shape), T((1,), np.int32)], [T((2, 5))], keep_dims=False)
    check(content, [x, np.array([1], np.int32)])


@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint8])
def test_arg_extreme(op, dtype):
    rng = np.random.default_rng(8)
    x = rng.integers(-20, 20, SHAPE) if dtype != np.uint8 else rng.integers(0, 40, SHAPE)  # with ties
    x = x.astype(dtype)
    q = (0.1, 3) if dtype in (np.int8, np.uint8) else None
    for axis in (0, 2, -1, -3):
        for out in (np.int32, np.int64):
            shape = reduced(SHAPE, axis, False)
            content = op_model(op, [T(SHAPE, dtype, q), axis_const([axis])], [T(shape, out)],
                               output_type=2 if out == np.int32 else 4)
            check(content, [x])


@pytest.mark.parametrize("shape,beta", [((2, 13), 1.0), ((2, 5, 7, 3), 0.5), ((1, 1000), 1.7)])
def test_softmax_float(shape, beta):
    x = (np.random.default_rng(9).standard_normal(shape) * 4).astype(np.float32)
    check(op_model("SOFTMAX", [T(shape)], [T(shape)], beta=beta), [x])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("shape,beta,scale", [((2, 5, 7, 13), 1.0, 0.1), ((3, 1000), 0.5, 0.05), ((4, 7), 1.7, 0.3)])
def test_softmax_quantized(dtype, shape, beta, scale):
    lo = int(np.iinfo(dtype).min)
    x = rand_q(np.random.default_rng(10), shape, dtype)
    content = op_model("SOFTMAX", [T(shape, dtype, (scale, lo + 40))], [T(shape, dtype, (1 / 256, lo))], beta=beta)
    check(content, [x], reference_kernels=True)
    check(content, [x])  # LiteRT's optimized kernel computes the same table


def test_log_softmax():
    rng = np.random.default_rng(11)
    shape = (2, 5, 13)
    check(op_model("LOG_SOFTMAX", [T(shape)], [T(shape)]), [(rng.standard_normal(shape) * 3).astype(np.float32)])
    x = rand_q(rng, shape, np.int8)
    content = op_model("LOG_SOFTMAX", [T(shape, np.int8, (0.08, 5))], [T(shape, np.int8, (16 / 256, 127))])
    check(content, [x], reference_kernels=True)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumsum(dtype):
    rng = np.random.default_rng(12)
    shape = (2, 5, 7)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    for axis in (0, 1, -1):
        for exclusive in (False, True):
            for reverse in (False, True):
                a = np.array(axis, np.int32)
                content = op_model("CUMSUM", [T(shape, dtype), T((), np.int32, data=a)], [T(shape, dtype)],
                                   exclusive=exclusive, reverse=reverse)
                check(content, [x])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_topk(dtype):
    rng = np.random.default_rng(13)
    shape = (2, 3, 17)
    x = rng.integers(-9, 9, shape).astype(dtype)  # many ties: indices must come in LiteRT's order
    if dtype == np.float32:
        x = x + rng.standard_normal(shape).astype(np.float32) * (rng.random(shape) < 0.5)
    for k in (1, 5, 17):
        kc = np.array(k, np.int32)
        content = op_model("TOPK_V2", [T(shape, dtype), T((), np.int32, data=kc)],
                           [T(shape[:-1] + (k,), dtype), T(shape[:-1] + (k,), np.int32)])
        check(content, [x])


def test_bad_axis_names_the_node():
    content = op_model("MEAN", [T((2, 3)), axis_const([2])], [T((2,))])
    with pytest.raises(gd.ModelError, match=r"node 0 \(MEAN\).*axis 2 is out of range"):
        gd.Interpreter(model_content=content)


@pytest.mark.parametrize("op", ["MEAN", "SUM", "REDUCE_MAX"])
def test_quantized_input_unquantized_output_names_the_tensor(op):
    # the load check accepts an int8 output without quantization next to a quantized int8 input; running it
    # needs the output's scale, and the error names the tensor that lacks one
    content = op_model(op, [T((2, 3), np.int8, q=(0.5, 1)), axis_const([1])], [T((2,), np.int8)])
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.ones((2, 3), np.int8))
    with pytest.raises(gd.ModelError, match=rf"node 0 \({op}\): tensor \d+ \('y0'\) is int8 without quantization"):
        it.invoke()
