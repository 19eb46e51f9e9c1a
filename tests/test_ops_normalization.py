"""L2_NORMALIZATION (float32, int8, uint8) and LOCAL_RESPONSE_NORMALIZATION against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .single_op import In, Out, expect_same, refused_version, sample, single_op

SHAPES = [(2, 5, 3, 7), (3, 1), (1, 9), (2, 3, 33), (4,)]


@pytest.mark.parametrize("shape", SHAPES)
def test_l2_normalization_float(shape):
    content = single_op("L2_NORMALIZATION", [In(shape)], [Out(shape)])
    x = sample(shape, np.float32)
    x[..., 0] = 0.0
    expect_same(content, [x], rel=1e-6)
    expect_same(content, [np.zeros(shape, np.float32)])  # the epsilon keeps zero vectors at zero


@pytest.mark.parametrize("dtype,q_in,q_out", [(np.int8, (0.07, -5), (1 / 128, 0)), (np.int8, (0.5, 0), (1 / 128, 0)),
                                              (np.uint8, (0.03, 140), (1 / 128, 128)),
                                              (np.uint8, (0.2, 0), (1 / 128, 128))])
@pytest.mark.parametrize("shape", SHAPES)
def test_l2_normalization_quantized_is_exact(shape, dtype, q_in, q_out):
    content = single_op("L2_NORMALIZATION", [In(shape, dtype, q_in)], [Out(shape, dtype, q_out)], version=2)
    x = sample(shape, dtype)
    x[..., 0] = q_in[1]  # a vector can be all zero points: TFLite treats its norm as 1
    expect_same(content, [x])
    expect_same(content, [x], reference_kernels=True)
    expect_same(content, [np.full(shape, q_in[1], dtype)])


def test_l2_normalization_refuses_another_output_scale():
    content = single_op("L2_NORMALIZATION", [In((2, 3), np.int8, (0.1, 0))], [Out((2, 3), np.int8, (0.1, 0))])
    with pytest.raises(gd.ModelError, match="L2_NORMALIZATION.*1/128"):
        gd.Interpreter(model_content=content)


@pytest.mark.parametrize("radius,bias,alpha,beta", [(2, 1.0, 0.1, 0.75), (1, 0.5, 1e-3, 0.5), (0, 2.0, 0.3, 1.0),
                                                    (5, 1.0, 0.05, 0.2), (3, 1.5, 2e-2, 1.7)])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 4, 3), (3, 1, 2, 16)])
def test_local_response_normalization(shape, radius, bias, alpha, beta):
    content = single_op("LOCAL_RESPONSE_NORMALIZATION", [In(shape)], [Out(shape)], radius=radius, bias=bias,
                        alpha=alpha, beta=beta)
    expect_same(content, [(sample(shape, np.float32) * 3).astype(np.float32)], rel=2e-6)


def test_local_response_normalization_follows_the_default_kernel_not_the_reference():
    # LiteRT's two kernels disagree: its reference kernel leaves channel c + radius out of the window
    shape = (1, 1, 1, 5)
    content = single_op("LOCAL_RESPONSE_NORMALIZATION", [In(shape)], [Out(shape)], radius=1, bias=1.0, alpha=1.0,
                        beta=1.0)
    x = np.array([1, 2, 3, 4, 5], np.float32).reshape(shape)
    ours = expect_same(content, [x], rel=1e-6)[0].reshape(-1)
    window = [1 + 1 + 4, 1 + 1 + 4 + 9, 1 + 4 + 9 + 16, 1 + 9 + 16 + 25, 1 + 16 + 25]
    np.testing.assert_allclose(ours, np.arange(1, 6) / np.array(window, np.float32), rtol=1e-6)


@pytest.mark.parametrize("op,version,inputs,outputs,options", [
    ("L2_NORMALIZATION", 3, [In((3,))], [Out((3,))], {}),
    ("LOCAL_RESPONSE_NORMALIZATION", 2, [In((1, 1, 1, 3))], [Out((1, 1, 1, 3))], {"radius": 1}),
])
def test_newer_versions_are_refused_by_name(op, version, inputs, outputs, options):
    assert f"({op}): op version {version} is not supported" in refused_version(op, inputs, outputs, version,
                                                                                **options)
