"""SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, REVERSE_V2, REVERSE_SEQUENCE, MATRIX_DIAG, MATRIX_SET_DIAG and DILATE
against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import run_ours
from .single_op import Const, In, Out, expect_same, refused_version, sample, single_op

# (type, quantization): quantized 8/16-bit tensors keep their codes, padding uses the zero point
TYPES = [(np.float32, None), (np.int8, (0.1, 5)), (np.uint8, (0.05, 131)), (np.int16, (0.02, 0)),
         (np.int32, None), (np.int64, None), (np.float16, None), (np.bool_, None)]

# (input shape, block shape, paddings): 4-D NHWC and 3-D NHC, batch > 1, odd channels
S2B_CASES = [((2, 5, 7, 3), [2, 3], [[1, 0], [0, 2]]), ((1, 4, 6, 5), [2, 2], [[0, 0], [0, 0]]),
             ((3, 7, 1, 7), [3, 1], [[1, 1], [0, 0]]), ((2, 5, 3), [3], [[0, 1]]), ((1, 9, 9, 1), [3, 3], [[0, 0]] * 2)]


def _s2b_shape(shape, block, pads):
    spatial = [(shape[1 + d] + sum(pads[d])) // b for d, b in enumerate(block)]
    return (shape[0] * int(np.prod(block)), *spatial, shape[-1])


def _version(dtype) -> int:
    return 4 if dtype == np.int16 else 2 if dtype == np.int8 else 1


@pytest.mark.parametrize("dtype,q", TYPES)
@pytest.mark.parametrize("shape,block,pads", S2B_CASES)
def test_space_to_batch_nd(shape, block, pads, dtype, q):
    out = _s2b_shape(shape, block, pads)
    content = single_op("SPACE_TO_BATCH_ND", [In(shape, dtype, q), Const(np.array(block, np.int32)),
                                              Const(np.array(pads, np.int32))], [Out(out, dtype, q)],
                        version=_version(dtype))
    x = sample(shape, dtype)
    expect_same(content, [x])
    if q is not None:
        expect_same(content, [x], reference_kernels=True)


@pytest.mark.parametrize("dtype,q", TYPES)
@pytest.mark.parametrize("shape,block,crops", S2B_CASES)
def test_batch_to_space_nd(shape, block, crops, dtype, q):
    # the input of B2S is the output of S2B with the same parameters: crops undo the paddings
    in_shape = _s2b_shape(shape, block, crops)
    content = single_op("BATCH_TO_SPACE_ND", [In(in_shape, dtype, q), Const(np.array(block, np.int32)),
                                              Const(np.array(crops, np.int32))], [Out(shape, dtype, q)],
                        version=_version(dtype))
    x = sample(in_shape, dtype)
    expect_same(content, [x])
    if q is not None:
        expect_same(content, [x], reference_kernels=True)


def test_space_to_batch_nd_parameters_at_run_time():
    shape = (2, 5, 7, 3)
    content = single_op("SPACE_TO_BATCH_ND", [In(shape), In((2,), np.int32), In((2, 2), np.int32)],
                        [Out((1, 1, 1, 1))])
    x = sample(shape, np.float32)
    for block, pads in (([2, 3], [[1, 0], [0, 2]]), ([1, 2], [[0, 0], [1, 0]])):
        expect_same(content, [x, np.array(block, np.int32), np.array(pads, np.int32)])


def test_space_to_batch_nd_refuses_a_size_not_divisible():
    content = single_op("SPACE_TO_BATCH_ND", [In((1, 5, 4, 1)), Const(np.array([2, 2], np.int32)),
                                              Const(np.zeros((2, 2), np.int32))], [Out((4, 2, 2, 1))])
    with pytest.raises(gd.ModelError, match="SPACE_TO_BATCH_ND.*not a multiple"):
        gd.Interpreter(model_content=content).allocate_tensors()


REVERSE_TYPES = [np.float32, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", REVERSE_TYPES)
@pytest.mark.parametrize("shape,axes", [((2, 3, 5), [1]), ((2, 3, 5), [0, 1]), ((4, 3, 5, 7), [-1]),
                                        ((9,), [0]), ((2, 3, 5, 3), [1, 2, 3])])
def test_reverse_v2(shape, axes, dtype):
    version = 3 if dtype == np.int8 else 2 if dtype == np.bool_ else 1
    content = single_op("REVERSE_V2", [In(shape, dtype), Const(np.array(axes, np.int32))], [Out(shape, dtype)],
                        version=version)
    expect_same(content, [sample(shape, dtype)])


def test_reverse_v2_refuses_axes_apart():
    content = single_op("REVERSE_V2", [In((2, 3, 4)), Const(np.array([0, 2], np.int32))], [Out((2, 3, 4))])
    with pytest.raises(gd.ModelError, match="REVERSE_V2.*not contiguous"):
        gd.Interpreter(model_content=content).allocate_tensors()


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("length_type", [np.int32, np.int64])
@pytest.mark.parametrize("shape,seq_dim,batch_dim", [((3, 7, 2), 1, 0), ((5, 4, 3), 0, 1), ((2, 3, 6, 5), 2, 0),
                                                     ((3, 5), 1, 0)])
def test_reverse_sequence(shape, seq_dim, batch_dim, length_type, dtype):
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, shape[seq_dim], shape[batch_dim], endpoint=True).astype(length_type)
    content = single_op("REVERSE_SEQUENCE", [In(shape, dtype), In(lengths.shape, length_type)], [Out(shape, dtype)],
                        seq_dim=seq_dim, batch_dim=batch_dim)
    expect_same(content, [sample(shape, dtype), lengths])


DIAG_TYPES = [t for t in TYPES if t[0] not in (np.float16, np.bool_)]


@pytest.mark.parametrize("dtype,q", DIAG_TYPES)
@pytest.mark.parametrize("shape", [(5,), (2, 3), (3, 2, 7)])
def test_matrix_diag(shape, dtype, q):
    content = single_op("MATRIX_DIAG", [In(shape, dtype, q)], [Out((*shape, shape[-1]), dtype, q)])
    expect_same(content, [sample(shape, dtype)])


@pytest.mark.parametrize("dtype,q", DIAG_TYPES)
@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 4), (3, 2, 3, 7)])
def test_matrix_set_diag(shape, dtype, q):
    diag = (*shape[:-2], min(shape[-2:]))
    content = single_op("MATRIX_SET_DIAG", [In(shape, dtype, q), In(diag, dtype, q)], [Out(shape, dtype, q)])
    expect_same(content, [sample(shape, dtype, 1), sample(diag, dtype, 2)])


@pytest.mark.parametrize("dtype,q", TYPES + [(np.float64, None), (np.uint32, None), (np.complex64, None)])
@pytest.mark.parametrize("shape,dilations", [((3, 4), [2, 1]), ((2, 3, 5), [1, 3, 2]), ((4, 1, 3, 2), [2, 5, 1, 3]),
                                             ((7,), [4]), ((2, 3), [1, 1])])
def test_dilate(shape, dilations, dtype, q):
    out = tuple((s - 1) * d + 1 for s, d in zip(shape, dilations))
    content = single_op("DILATE", [In(shape, dtype, q), Const(np.array(dilations, np.int32)), In((), dtype, q)],
                        [Out(out, dtype, q)])
    expect_same(content, [sample(shape, dtype, 1), sample((), dtype, 2)])


def test_matrix_diag_refuses_float16():
    content = single_op("MATRIX_DIAG", [In((3,), np.float16)], [Out((3, 3), np.float16)])
    with pytest.raises(gd.ModelError, match="MATRIX_DIAG.*FLOAT16"):
        gd.Interpreter(model_content=content)


def test_dilate_dilations_at_run_time():
    content = single_op("DILATE", [In((3, 4)), In((2,), np.int32), In(())], [Out((1, 1))])
    x = sample((3, 4), np.float32)
    for dilations in ([2, 3], [1, 4]):
        expect_same(content, [x, np.array(dilations, np.int32), np.array(-9.0, np.float32)])


def test_dilate_refuses_a_zero_factor():
    content = single_op("DILATE", [In((3, 4)), In((2,), np.int32), In(())], [Out((3, 4))])
    with pytest.raises(gd.ModelError, match="DILATE.*>= 1"):
        run_ours(content, [sample((3, 4), np.float32), np.array([0, 1], np.int32), np.zeros((), np.float32)])


@pytest.mark.parametrize("op,version,inputs,outputs", [
    ("SPACE_TO_BATCH_ND", 5, [In((1, 2, 2, 1)), Const(np.array([1, 1], np.int32)), Const(np.zeros((2, 2), np.int32))],
     [Out((1, 2, 2, 1))]),
    ("BATCH_TO_SPACE_ND", 5, [In((1, 2, 2, 1)), Const(np.array([1, 1], np.int32)), Const(np.zeros((2, 2), np.int32))],
     [Out((1, 2, 2, 1))]),
    ("REVERSE_V2", 5, [In((3,)), Const(np.array([0], np.int32))], [Out((3,))]),
    ("REVERSE_SEQUENCE", 2, [In((2, 3)), Const(np.array([1, 2], np.int32))], [Out((2, 3))]),
    ("MATRIX_DIAG", 2, [In((3,))], [Out((3, 3))]),
    ("MATRIX_SET_DIAG", 2, [In((3, 3)), In((3,))], [Out((3, 3))]),
    ("DILATE", 2, [In((3,)), Const(np.array([2], np.int32)), In(())], [Out((5,))]),
])
def test_newer_versions_are_refused_by_name(op, version, inputs, outputs):
    assert f"({op}): op version {version} is not supported" in refused_version(op, inputs, outputs, version)
