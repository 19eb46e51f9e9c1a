"""CONV_3D, CONV_3D_TRANSPOSE and L2_POOL_2D (float32, the only type LiteRT takes) against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, run_litert, run_ours

# (input NDHWC, filter DHW, out channels, strides DHW, dilations DHW, padding, bias, activation)
CONV_CASES = [
    ((2, 5, 6, 7, 3), (3, 3, 3), 5, (1, 1, 1), (1, 1, 1), "SAME", True, "NONE"),
    ((1, 7, 5, 6, 5), (2, 3, 1), 3, (2, 1, 2), (1, 1, 1), "VALID", False, "RELU"),
    ((1, 6, 7, 5, 1), (3, 2, 3), 7, (2, 2, 1), (1, 2, 1), "SAME", True, "RELU6"),
    ((3, 4, 4, 4, 2), (2, 2, 2), 1, (1, 1, 1), (2, 1, 1), "VALID", True, "RELU_N1_TO_1"),
]


def conv3d_model(xs, k, co, strides, dilations, padding, bias, act, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", xs)
    w = mb.const("w", rng.standard_normal((*k, xs[4], co)).astype(np.float32))
    ins = [x, w] + ([mb.const("b", rng.standard_normal(co).astype(np.float32))] if bias else [])
    it_shape = [xs[0], 1, 1, 1, co]  # LiteRT resizes the output itself
    y = mb.tensor("y", it_shape)
    mb.op("CONV_3D", ins, [y], padding=padding, stride_d=strides[0], stride_h=strides[1], stride_w=strides[2],
          dilation_d_factor=dilations[0], dilation_h_factor=dilations[1], dilation_w_factor=dilations[2],
          fused_activation_function=act)
    mb.output(y)
    return mb.build()


def sample(shape, seed=1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv3d(case):
    content = conv3d_model(*case)
    x = sample(case[0])
    assert_float_close(run_ours(content, [x])[0], run_litert(content, [x])[0], what="CONV_3D")


# (input NDHWC, filter DHW, out channels, strides, dilations, padding, output DHW, bias, activation)
TRANSPOSE_CASES = [
    ((2, 3, 4, 5, 3), (3, 3, 3), 5, (2, 2, 2), (1, 1, 1), "SAME", (6, 8, 9), True, "NONE"),
    ((1, 4, 3, 3, 2), (2, 3, 2), 3, (1, 2, 3), (1, 1, 1), "VALID", (5, 7, 10), False, "RELU"),
    ((1, 3, 3, 3, 5), (3, 2, 3), 1, (2, 1, 1), (1, 2, 1), "VALID", (7, 5, 5), True, "RELU6"),
    ((2, 2, 3, 2, 1), (1, 1, 1), 7, (1, 1, 1), (1, 1, 1), "SAME", (2, 3, 2), True, "NONE"),
]


def conv3d_transpose_model(xs, k, co, strides, dilations, padding, out, bias, act, const_shape=True,
                           seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    out_shape = [xs[0], *out, co]
    s = mb.const("shape", np.array(out_shape, np.int32)) if const_shape else mb.input("shape", [5], np.int32)
    w = mb.const("w", rng.standard_normal((*k, co, xs[4])).astype(np.float32))
    x = mb.input("x", xs)
    ins = [s, w, x] + ([mb.const("b", rng.standard_normal(co).astype(np.float32))] if bias else [])
    y = mb.tensor("y", out_shape)
    mb.op("CONV_3D_TRANSPOSE", ins, [y], padding=padding, stride_d=strides[0], stride_h=strides[1],
          stride_w=strides[2], dilation_d_factor=dilations[0], dilation_h_factor=dilations[1],
          dilation_w_factor=dilations[2], fused_activation_function=act)
    mb.output(y)
    return mb.build()


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv3d_transpose(case):
    content = conv3d_transpose_model(*case)
    x = sample(case[0])
    assert_float_close(run_ours(content, [x])[0], run_litert(content, [x])[0], what="CONV_3D_TRANSPOSE")


def test_conv3d_transpose_shape_from_a_tensor():
    case = TRANSPOSE_CASES[0]
    content = conv3d_transpose_model(*case, const_shape=False)
    inputs = [np.array([2, 6, 8, 9, 5], np.int32), sample(case[0])]
    assert_float_close(run_ours(content, inputs)[0], run_litert(content, inputs)[0])


def test_conv3d_rejects_int8():
    mb = ModelBuilder()
    x = mb.input("x", [1, 3, 3, 3, 2], np.int8, scale=0.1, zero_point=0)
    w = mb.const("w", np.ones([1, 1, 1, 2, 3], np.int8), scale=0.1, zero_point=0)
    y = mb.tensor("y", [1, 3, 3, 3, 3], np.int8, scale=0.1, zero_point=0)
    mb.op("CONV_3D", [x, w], [y], padding="SAME", stride_d=1, stride_h=1, stride_w=1)
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"CONV_3D.*float32"):
        gd.Interpreter(model_content=mb.build())


@pytest.mark.parametrize("op", ["CONV_3D", "CONV_3D_TRANSPOSE", "L2_POOL_2D"])
def test_rejects_newer_version(op):
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 4, 2] if op != "L2_POOL_2D" else [1, 4, 4, 2])
    if op == "CONV_3D":
        ins, opts = [x, mb.const("w", np.ones([1, 1, 1, 2, 3], np.float32))], {"stride_d": 1}
    elif op == "CONV_3D_TRANSPOSE":
        ins = [mb.const("s", np.array([1, 4, 4, 4, 3], np.int32)), mb.const("w", np.ones([1, 1, 1, 3, 2], np.float32)),
               x]
        opts = {"stride_d": 1}
    else:
        ins, opts = [x], {"filter_height": 2, "filter_width": 2}
    y = mb.tensor("y", [1, 4, 4, 3])
    mb.op(op, ins, [y], version=2, padding="SAME", stride_h=1, stride_w=1, **opts)
    mb.output(y)
    with pytest.raises(gd.ModelError, match=rf"{op}.*version 2"):
        gd.Interpreter(model_content=mb.build())


# (input NHWC, filter HW, strides HW, padding, activation)
L2_CASES = [((2, 7, 9, 3), (2, 3), (2, 2), "SAME", "NONE"), ((1, 8, 5, 5), (3, 3), (1, 2), "VALID", "RELU6"),
            ((3, 5, 5, 1), (5, 5), (1, 1), "SAME", "RELU_N1_TO_1")]


@pytest.mark.parametrize("xs,k,s,padding,act", L2_CASES)
def test_l2_pool(xs, k, s, padding, act):
    mb = ModelBuilder()
    x = mb.input("x", xs)
    y = mb.tensor("y", [xs[0], 1, 1, xs[3]])
    mb.op("L2_POOL_2D", [x], [y], padding=padding, filter_height=k[0], filter_width=k[1], stride_h=s[0],
          stride_w=s[1], fused_activation_function=act)
    mb.output(y)
    content = mb.build()
    x = sample(xs) * 3
    assert_float_close(run_ours(content, [x])[0], run_litert(content, [x])[0], what="L2_POOL_2D")
