"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR on the CPU path against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, run_litert, run_ours

# (input shape, output size): up- and downscaling, non-integer ratios, odd channel counts, batch > 1
CASES = [((2, 5, 7, 3), (11, 13)), ((1, 9, 8, 5), (4, 3)), ((2, 4, 4, 7), (8, 8)), ((1, 6, 1, 13), (3, 5)),
         ((1, 3, 3, 2), (1, 1))]
FLAGS = [(False, False), (True, False), (False, True)]
Q = {np.dtype(np.int8): (0.05, -3), np.dtype(np.uint8): (0.05, 128)}


def model(op: str, shape, size, dtype=np.float32, align_corners=False, half_pixel_centers=False,
          const_size=True) -> bytes:
    dtype = np.dtype(dtype)
    kw = {"scale": Q[dtype][0], "zero_point": Q[dtype][1]} if dtype in Q else {}
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype, **kw)
    s = mb.const("size", np.array(size, np.int32)) if const_size else mb.input("size", [2], np.int32)
    y = mb.tensor("y", [shape[0], *size, shape[3]], dtype, **kw)
    mb.op(op, [x, s], [y], align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    mb.output(y)
    return mb.build()


def sample(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("align_corners,half_pixel", FLAGS)
@pytest.mark.parametrize("shape,size", CASES)
def test_resize_float(op, align_corners, half_pixel, shape, size):
    content = model(op, shape, size, np.float32, align_corners, half_pixel)
    x = sample(shape, np.float32)
    ref, ours = run_litert(content, [x])[0], run_ours(content, [x])[0]
    if op == "RESIZE_NEAREST_NEIGHBOR":
        np.testing.assert_array_equal(ours, ref)
    else:
        assert_float_close(ours, ref, what=op)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("align_corners,half_pixel", FLAGS)
@pytest.mark.parametrize("shape,size", CASES[:4])
def test_resize_nearest_quantized_is_exact(dtype, align_corners, half_pixel, shape, size):
    content = model("RESIZE_NEAREST_NEIGHBOR", shape, size, dtype, align_corners, half_pixel)
    x = sample(shape, dtype)
    np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x])[0])


def test_resize_nearest_align_corners_with_half_pixel():
    # Unlike bilinear, TFLite's nearest-neighbour kernel takes both flags: round, then clamp at 0.
    content = model("RESIZE_NEAREST_NEIGHBOR", (1, 7, 5, 3), (3, 11), np.float32, True, True)
    x = sample((1, 7, 5, 3), np.float32)
    np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x])[0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("align_corners,half_pixel", FLAGS)
@pytest.mark.parametrize("shape,size", CASES[:4])
def test_resize_bilinear_quantized(dtype, align_corners, half_pixel, shape, size):
    content = model("RESIZE_BILINEAR", shape, size, dtype, align_corners, half_pixel)
    x = sample(shape, dtype, seed=1)
    ours = run_ours(content, [x])[0]
    # TFLite's own kernels (int8: 10-bit fixed point; uint8: float formula, rounded) are what we follow ...
    ref = run_litert(content, [x], reference_kernels=True)[0]
    assert_quant_close(ours, ref, min_equal=0.99, max_steps=1, what="vs TFLite reference kernel")
    # ... while LiteRT's default XNNPACK path weighs with 11-bit fractions: one step away at most.
    assert_quant_close(ours, run_litert(content, [x])[0], min_equal=0.5, max_steps=1, what="vs XNNPACK")


def test_resize_bilinear_int8_matches_reference_kernel_exactly():
    content = model("RESIZE_BILINEAR", (2, 7, 6, 5), (13, 17), np.int8, False, True)
    x = sample((2, 7, 6, 5), np.int8, seed=2)
    ref = run_litert(content, [x], reference_kernels=True)[0]
    np.testing.assert_array_equal(run_ours(content, [x])[0], ref)


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
def test_resize_size_from_a_tensor(op):
    content = model(op, (1, 4, 6, 3), (8, 12), const_size=False)
    x = sample((1, 4, 6, 3), np.float32)
    for size in ([8, 12], [3, 5]):
        inputs = [x, np.array(size, np.int32)]
        ref, ours = run_litert(content, inputs)[0], run_ours(content, inputs)[0]
        assert_float_close(ours, ref, what=str(size))


def test_resize_bilinear_rejects_align_corners_with_half_pixel():
    content = model("RESIZE_BILINEAR", (1, 4, 4, 1), (8, 8), np.float32, True, True)
    with pytest.raises(gd.ModelError, match=r"RESIZE_BILINEAR.*half_pixel_centers"):
        gd.Interpreter(model_content=content)
