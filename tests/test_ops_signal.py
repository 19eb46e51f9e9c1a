"""RFFT2D, COMPLEX_ABS, REAL and IMAG against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import run_ours
from .single_op import Const, In, Out, expect_same, refused_version, sample, single_op

PARTS = {np.complex64: np.float32, np.complex128: np.float64}


@pytest.mark.parametrize("op", ["COMPLEX_ABS", "REAL", "IMAG"])
@pytest.mark.parametrize("dtype", list(PARTS))
@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), ()])
def test_complex_parts(op, dtype, shape):
    content = single_op(op, [In(shape, dtype)], [Out(shape, PARTS[dtype])])
    expect_same(content, [sample(shape, dtype)], rel=1e-6)


# (input shape, fft_length): cropped, zero-padded, batch > 1, odd sizes
RFFT_CASES = [((2, 8, 8), (8, 8)), ((3, 5, 7), (8, 8)), ((1, 16, 4), (4, 8)), ((2, 3, 4, 6), (4, 2)), ((4, 4), (4, 4)),
              ((2, 9, 17), (16, 32))]


@pytest.mark.parametrize("shape,lengths", RFFT_CASES)
def test_rfft2d(shape, lengths):
    out = (*shape[:-2], lengths[0], lengths[1] // 2 + 1)
    content = single_op("RFFT2D", [In(shape), Const(np.array(lengths, np.int32))], [Out(out, np.complex64)])
    expect_same(content, [sample(shape, np.float32)], rel=1e-5)


def test_rfft2d_fft_length_at_run_time():
    content = single_op("RFFT2D", [In((2, 6, 5)), In((2,), np.int32)], [Out((1, 1, 1), np.complex64)])
    x = sample((2, 6, 5), np.float32)
    for lengths in ([8, 4], [2, 16]):
        assert expect_same(content, [x, np.array(lengths, np.int32)], rel=1e-5)[0].shape == \
            (2, lengths[0], lengths[1] // 2 + 1)


def test_rfft2d_refuses_a_length_not_a_power_of_two():
    content = single_op("RFFT2D", [In((4, 6)), In((2,), np.int32)], [Out((4, 4), np.complex64)])
    with pytest.raises(gd.ModelError, match="RFFT2D.*powers of two"):
        run_ours(content, [sample((4, 6), np.float32), np.array([4, 6], np.int32)])


@pytest.mark.parametrize("op,version,inputs,outputs", [
    ("COMPLEX_ABS", 2, [In((3,), np.complex64)], [Out((3,))]),
    ("REAL", 2, [In((3,), np.complex64)], [Out((3,))]),
    ("IMAG", 2, [In((3,), np.complex64)], [Out((3,))]),
    ("RFFT2D", 2, [In((4, 4)), Const(np.array([4, 4], np.int32))], [Out((4, 3), np.complex64)]),
])
def test_newer_versions_are_refused_by_name(op, version, inputs, outputs):
    assert f"({op}): op version {version} is not supported" in refused_version(op, inputs, outputs, version)
