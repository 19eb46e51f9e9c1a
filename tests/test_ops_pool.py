"""AVERAGE_POOL_2D and MAX_POOL_2D on the CPU path against LiteRT: float32, int8 and uint8, SAME/VALID,
strides, odd channel counts, batch 2, every fused activation.

Integer results must equal LiteRT's reference kernels exactly (TFLite rounds an integer average half away
from zero over the pixels inside the input) and be close to its default kernels."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, run_litert, run_ours


def pool_model(op: str, shape: tuple, k: tuple, stride: tuple, padding: str, act: str, dtype=np.float32,
               q: tuple = (0.05, 0)) -> bytes:
    n, h, w, c = shape
    out = [(h + stride[0] - 1) // stride[0], (w + stride[1] - 1) // stride[1]] if padding == "SAME" else \
        [(h - k[0]) // stride[0] + 1, (w - k[1]) // stride[1] + 1]
    quant = {} if dtype == np.float32 else {"scale": q[0], "zero_point": q[1]}
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype, **quant)
    y = mb.tensor("y", [n, *out, c], dtype, **quant)
    mb.op(op, [x], [y], padding=padding, stride_h=stride[0], stride_w=stride[1], filter_height=k[0],
          filter_width=k[1], fused_activation_function=act)
    mb.output(y)
    return mb.build()


CASES = [
    # shape, filter, stride, padding, activation
    ((1, 9, 11, 3), (2, 2), (2, 2), "SAME", "NONE"),
    ((2, 9, 11, 5), (3, 3), (2, 2), "SAME", "RELU"),
    ((1, 8, 7, 7), (3, 3), (1, 1), "SAME", "RELU6"),
    ((2, 9, 9, 13), (3, 2), (2, 1), "VALID", "RELU_N1_TO_1"),
    ((1, 7, 7, 5), (7, 7), (1, 1), "VALID", "NONE"),  # global pooling
    ((1, 6, 6, 3), (4, 4), (3, 3), "SAME", "TANH"),  # TFLite's pools ignore TANH and SIGN_BIT
    ((1, 5, 6, 7), (2, 3), (1, 2), "SAME", "SIGN_BIT"),
]


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("shape,k,stride,padding,act", CASES)
def test_pool_float(op, shape, k, stride, padding, act):
    content = pool_model(op, shape, k, stride, padding, act)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3
    assert_float_close(run_ours(content, [x])[0], run_litert(content, [x])[0])


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("dtype,zp", [(np.int8, -3), (np.uint8, 128)])
@pytest.mark.parametrize("shape,k,stride,padding,act", [c for c in CASES if c[4] not in ("TANH", "SIGN_BIT")])
def test_pool_quant(op, dtype, zp, shape, k, stride, padding, act):
    content = pool_model(op, shape, k, stride, padding, act, dtype, (0.02, zp))
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(info.min, info.max + 1, shape).astype(dtype)
    ours = run_ours(content, [x])[0]
    np.testing.assert_array_equal(ours, run_litert(content, [x], reference_kernels=True)[0])
    assert_quant_close(ours, run_litert(content, [x])[0])


def test_average_pool_int8_rounds_half_away_from_zero():
    """A 2x2 window over (-1, -1, 0, 0) averages to -0.5: TFLite gives -1, round-half-even would give 0."""
    content = pool_model("AVERAGE_POOL_2D", (1, 2, 2, 1), (2, 2), (2, 2), "VALID", "NONE", np.int8, (0.1, 0))
    x = np.array([-1, -1, 0, 0], np.int8).reshape(1, 2, 2, 1)
    ours = run_ours(content, [x])[0]
    assert ours.item() == -1
    np.testing.assert_array_equal(ours, run_litert(content, [x], reference_kernels=True)[0])


def test_pool_quantization_mismatch_is_refused():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 2], np.int8, scale=0.1, zero_point=0)
    y = mb.tensor("y", [1, 2, 2, 2], np.int8, scale=0.2, zero_point=0)
    mb.op("MAX_POOL_2D", [x], [y], padding="VALID", stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"node 0 \(MAX_POOL_2D\): input and output quantization"):
        gd.Interpreter(model_content=mb.build())


def test_pool_bad_filter_is_refused():
    content = pool_model("AVERAGE_POOL_2D", (1, 4, 4, 2), (0, 2), (1, 1), "SAME", "NONE")
    with pytest.raises(gd.ModelError, match=r"AVERAGE_POOL_2D.*filter size"):
        gd.Interpreter(model_content=content)


def test_pool_split_across_threads():
    """Big enough to be split into one block of output rows per thread, a block boundary mid-image."""
    for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        content = pool_model(op, (3, 24, 24, 32), (3, 3), (1, 1), "SAME", "RELU")
        x = np.random.default_rng(2).standard_normal((3, 24, 24, 32)).astype(np.float32)
        assert_float_close(run_ours(content, [x])[0], run_litert(content, [x])[0])
