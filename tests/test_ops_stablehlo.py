"""The StableHLO ops LiteRT registers without subgraphs: elementwise, PAD and GATHER, against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import run_litert, run_ours

ELEMENTWISE = {"STABLEHLO_ADD": np.add, "STABLEHLO_MULTIPLY": np.multiply, "STABLEHLO_MAXIMUM": np.maximum,
               "STABLEHLO_MINIMUM": np.minimum}


def sample(shape, dtype, seed=0, low=-50, high=50) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, low), min(info.max, high) + 1, shape).astype(dtype)


def binary_model(op: str, shape, dtype, version=1) -> bytes:
    mb = ModelBuilder()
    a, b = mb.input("a", shape, dtype), mb.input("b", shape, dtype)
    y = mb.tensor("y", shape, dtype)
    mb.op(op, [a, b], [y], version=version)
    mb.output(y)
    return mb.build()


def same(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("op", list(ELEMENTWISE))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_])
def test_elementwise(op, dtype):
    shape = (2, 3, 5)
    content = binary_model(op, shape, dtype)
    inputs = [sample(shape, dtype, 1), sample(shape, dtype, 2)]
    same(run_ours(content, inputs)[0], run_litert(content, inputs)[0])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.bool_])
def test_and(dtype):
    content = binary_model("STABLEHLO_AND", (3, 7), dtype)
    inputs = [sample((3, 7), dtype, 1, -128, 127), sample((3, 7), dtype, 2, -128, 127)]
    same(run_ours(content, inputs)[0], run_litert(content, inputs)[0])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_shift_left(dtype):
    content = binary_model("STABLEHLO_SHIFT_LEFT", (4, 5), dtype)
    inputs = [sample((4, 5), dtype, 1), sample((4, 5), dtype, 2, 0, np.dtype(dtype).itemsize * 8 - 1)]
    same(run_ours(content, inputs)[0], run_litert(content, inputs)[0])


def test_elementwise_refuses_broadcasting():
    mb = ModelBuilder()
    a, b = mb.input("a", [2, 3]), mb.input("b", [1, 3])
    y = mb.tensor("y", [2, 3])
    mb.op("STABLEHLO_ADD", [a, b], [y])
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"STABLEHLO_ADD.*do not broadcast"):
        gd.Interpreter(model_content=mb.build()).allocate_tensors()


@pytest.mark.parametrize("low,high,interior", [([1, 0, 2], [0, 3, 1], [0, 1, 0]), ([-1, 2, 0], [1, -2, 0], [1, 0, 2]),
                                               ([0, 0, 0], [0, 0, 0], [0, 0, 0])])
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_pad(low, high, interior, dtype):
    shape = (3, 4, 5)
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype)
    v = mb.const("v", np.array(7, dtype))
    y = mb.tensor("y", [1, 1, 1], dtype)
    mb.op("STABLEHLO_PAD", [x, v], [y], edge_padding_low=low, edge_padding_high=high, interior_padding=interior)
    mb.output(y)
    content = mb.build()
    x = sample(shape, dtype)
    same(run_ours(content, [x])[0], run_litert(content, [x])[0])


GATHERS = [  # operand shape, indices, options, output shape
    ((5, 7), np.array([[4], [0], [2]]), (3, 7), dict(offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0],
                                             index_vector_dim=1, slice_sizes=[1, 7])),
    ((4, 6, 5), np.array([[[0, 1], [3, 5], [2, 2]], [[1, 0], [0, 4], [3, 1]]]), (2, 3, 2, 5),
     dict(offset_dims=[2, 3], collapsed_slice_dims=[0], start_index_map=[0, 1], index_vector_dim=2,
          slice_sizes=[1, 2, 5])),
    ((6, 3), np.array([[5], [1], [0]]), (3, 3), dict(offset_dims=[0], collapsed_slice_dims=[0], start_index_map=[0],
                                               index_vector_dim=1, slice_sizes=[1, 3])),
    ((3, 8, 2), np.array([[1, 4], [0, 0]]), (2, 2, 2), dict(offset_dims=[0, 2], collapsed_slice_dims=[1],
                                                            start_index_map=[1, 0], index_vector_dim=0,
                                                            slice_sizes=[2, 1, 2])),
]


@pytest.mark.parametrize("operand,indices,out_shape,options", GATHERS)
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_gather(operand, indices, out_shape, options, index_type):
    mb = ModelBuilder()
    x = mb.input("x", operand)
    i = mb.input("i", indices.shape, index_type)
    y = mb.tensor("y", out_shape)  # LiteRT reads the output's rank from the model
    mb.op("STABLEHLO_GATHER", [x, i], [y], **options)
    mb.output(y)
    content = mb.build()
    inputs = [sample(operand, np.float32), indices.astype(index_type)]
    same(run_ours(content, inputs)[0], run_litert(content, inputs)[0])


def test_stablehlo_rejects_newer_version():
    with pytest.raises(gd.ModelError, match=r"STABLEHLO_ADD.*version 2"):
        gd.Interpreter(model_content=binary_model("STABLEHLO_ADD", (2,), np.float32, version=2))


def test_gather_clamps_start_indices_as_stablehlo_says():
    # The spec clamps each slice into the operand. LiteRT does not (it reads out of bounds), and it also crashes
    # on an index_vector_dim equal to the indices' rank (an implicit trailing 1), used here.
    mb = ModelBuilder()
    x = mb.input("x", [6, 3])
    i = mb.input("i", [3], np.int32)
    y = mb.tensor("y", [3, 3])
    mb.op("STABLEHLO_GATHER", [x, i], [y], offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0],
          index_vector_dim=1, slice_sizes=[1, 3])
    mb.output(y)
    x = sample((6, 3), np.float32)
    out = run_ours(mb.build(), [x, np.array([9, 1, -2], np.int32)])[0]
    np.testing.assert_array_equal(out, x[[5, 1, 0]])
