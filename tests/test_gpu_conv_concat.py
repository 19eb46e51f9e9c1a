"""Issue 16: CONV_2D with filters (and biases) computed at run time, grouped CONV_2D of more than 8 groups, and
CONCATENATION of more than 8 inputs, on cl and gl in fp32 and fp16 storage, against LiteRT: odd channel counts,
batch 2, strides, dilation, padding and fused activations. Issue 21: concatenations of parts read a vec4 at a time
(on a CPU's OpenCL, 4 pixels of a row per work item: rows of a width off a multiple of 4)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.tflite.writer import ModelBuilder

from .parity_models import run_gpu
from .reference import assert_float_close, run_litert

rng = np.random.default_rng(21)


def expect(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool) -> None:
    if fp16:
        inputs = [x.astype(np.float16).astype(np.float32) for x in inputs]
    ref = run_litert(content, inputs)
    ours = run_gpu(content, inputs, backend, fp16)
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert_float_close(o, r, 2e-2 if fp16 else 2e-5, what=f"output {k}")


def conv_model(x_shape, w_shape, out_shape, runtime_w: bool, bias: str, **attrs):
    """bias: "none", "const" or "runtime"."""
    mb = ModelBuilder()
    x = mb.input("x", x_shape)
    inputs = [rng.standard_normal(x_shape).astype(np.float32)]
    if runtime_w:
        w = mb.input("w", w_shape)
        inputs.append(rng.standard_normal(w_shape).astype(np.float32))
    else:
        w = mb.const("w", rng.standard_normal(w_shape).astype(np.float32))
    b = -1
    if bias == "const":
        b = mb.const("b", rng.standard_normal(w_shape[0]).astype(np.float32))
    elif bias == "runtime":
        b = mb.input("b", (w_shape[0],))
        inputs.append(rng.standard_normal(w_shape[0]).astype(np.float32))
    y = mb.tensor("y", out_shape)
    mb.op("CONV_2D", [x, w, b], [y], **attrs)
    mb.output(y)
    return mb.build(), inputs


SAME1 = {"padding": "SAME", "stride_w": 1, "stride_h": 1}


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("case", ["run-time 3x3", "run-time 1x1 relu6 bias", "run-time grouped stride 2",
                                  "12 groups cg 2", "16 groups cg 4 dilated", "9 groups cg 3 valid bias"])
def test_conv(backend, fp16, case):
    spec = {
        "run-time 3x3": ((2, 7, 6, 6), (5, 3, 3, 6), (2, 7, 6, 5), True, "const", SAME1),
        "run-time 1x1 relu6 bias": ((2, 5, 4, 7), (9, 1, 1, 7), (2, 5, 4, 9), True, "runtime",
                                    {**SAME1, "fused_activation_function": "RELU6"}),
        "run-time grouped stride 2": ((1, 9, 8, 6), (4, 3, 3, 3), (1, 5, 4, 4), True, "const",
                                      {"padding": "SAME", "stride_w": 2, "stride_h": 2}),
        "12 groups cg 2": ((1, 8, 8, 24), (36, 3, 3, 2), (1, 8, 8, 36), False, "const", SAME1),
        "16 groups cg 4 dilated": ((2, 9, 9, 64), (16, 3, 3, 4), (2, 9, 9, 16), False, "const",
                                   {**SAME1, "dilation_w_factor": 2, "dilation_h_factor": 2,
                                    "fused_activation_function": "RELU"}),
        "9 groups cg 3 valid bias": ((1, 7, 6, 27), (18, 2, 3, 3), (1, 6, 4, 18), False, "const",
                                     {"padding": "VALID", "stride_w": 1, "stride_h": 1}),
    }[case]
    content, inputs = conv_model(*spec[:5], **spec[5])
    expect(content, inputs, backend, fp16)


def expect_concatenation(base: list[int], axis: int, sizes: list[int], const_part: int, backend: str,
                         fp16: bool) -> None:
    """CONCATENATION along ``axis`` of parts of shape ``base`` but for their ``sizes`` along it, part ``const_part``
    a constant, then a RELU (a post-op of the last pass: every element goes through it once)."""
    mb = ModelBuilder()
    shapes = [tuple(size if d == axis else n for d, n in enumerate(base)) for size in sizes]
    ids = [mb.input(f"x{k}", s) if k != const_part else mb.const("c", rng.standard_normal(s).astype(np.float32))
           for k, s in enumerate(shapes)]
    out = list(base)
    out[axis] = sum(sizes)
    joined = mb.tensor("joined", out)
    mb.op("CONCATENATION", ids, [joined], axis=axis)
    y = mb.tensor("y", out)
    mb.op("RELU", [joined], [y])
    mb.output(y)
    inputs = [rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes) if k != const_part]
    expect(mb.build(), inputs, backend, fp16)


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("count,axis", [(10, 3), (17, 3), (12, 1), (9, 0)])
def test_concatenation_of_many_inputs(backend, fp16, count, axis):
    expect_concatenation([2, 3, 4, 5], axis, [1 + k % 3 for k in range(count)], 4, backend, fp16)


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("count, axis, width", [(10, 3, 5), (3, 3, 7), (9, 1, 6), (3, 0, 3)])
def test_concatenation_of_whole_slices(backend, fp16, count, axis, width):
    """Parts of whole slices (channels in multiples of 4) or joined along the batch or the height, rows of 3 to 7
    pixels, more parts than a pass takes (10, 9), a constant part."""
    sizes = [(4 if axis == 3 else 1) * (1 + k % 3) for k in range(count)]
    expect_concatenation([2, 3, width, 8], axis, sizes, 1, backend, fp16)
