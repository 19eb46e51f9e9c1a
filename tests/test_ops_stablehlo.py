"""The StableHLO ops LiteRT registers, against LiteRT: elementwise, PAD and GATHER; COMPOSITE, REDUCE_WINDOW and
SCATTER, which name subgraphs (a decomposition, a reduction body, an update computation)."""

from __future__ import annotations

import numpy as np
import pytest
from flatbuffers import flexbuffers

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


# -- ops that name subgraphs: STABLEHLO_COMPOSITE, _REDUCE_WINDOW, _SCATTER ------------------------------------

def both_kernels(content: bytes, inputs: list[np.ndarray]) -> np.ndarray:
    """Ours, equal to LiteRT's default and reference kernels."""
    ours = run_ours(content, inputs)[0]
    same(ours, run_litert(content, inputs)[0])
    same(ours, run_litert(content, inputs, reference_kernels=True)[0])
    return ours


def body(mb: ModelBuilder, index: int, op: str | None, dtype) -> None:
    """Subgraph ``index``: (a, b) -> op(a, b) on scalars, or -> b with no op."""
    mb.select(index)
    a, b = mb.input("a", [], dtype), mb.input("b", [], dtype)
    if op is None:
        mb.output(b)
    else:
        c = mb.tensor("c", [], dtype)
        mb.op(op, [a, b], [c])
        mb.output(c)
    mb.select(0)


def composite_model(version: int = 1) -> bytes:
    """my.op(x, y) = (x + y, x * y), decomposed into ADD and MUL."""
    mb = ModelBuilder()
    decomposition = mb.add_subgraph("decomposition")
    x, y = mb.input("x", [2, 3]), mb.input("y", [2, 3])
    total, product = mb.tensor("total", [2, 3]), mb.tensor("product", [2, 3])
    mb.op("STABLEHLO_COMPOSITE", [x, y], [total, product], name="my.op", decomposition_subgraph_index=decomposition,
          composite_attributes=list(flexbuffers.Dumps({"k": 3})), version=version)
    mb.output(total, product)
    mb.select(decomposition)
    a, b = mb.input("a", [2, 3]), mb.input("b", [2, 3])
    s, p = mb.tensor("s", [2, 3]), mb.tensor("p", [2, 3])
    mb.op("ADD", [a, b], [s])
    mb.op("MUL", [a, b], [p])
    mb.output(s, p)
    return mb.build()


def test_composite_runs_its_decomposition():
    x, y = sample((2, 3), np.float32, 1), sample((2, 3), np.float32, 2)
    ours, ref = run_ours(composite_model(), [x, y]), run_litert(composite_model(), [x, y])
    for o, r, want in zip(ours, ref, (x + y, x * y)):
        same(o, r)
        same(o, want)


def reduce_window_model(op: str, dtype, shape, init, window, strides=None, base=None, dilations=None,
                        padding=None, version: int = 1) -> bytes:
    rank = len(shape)
    mb = ModelBuilder()
    reduction = mb.add_subgraph("body")
    x = mb.input("x", shape, dtype)
    y = mb.tensor("y", [1] * rank, dtype)  # LiteRT sizes the output itself
    mb.op("STABLEHLO_REDUCE_WINDOW", [x, mb.const("init", np.array(init, dtype))], [y],
          window_dimensions=list(window), window_strides=list(strides or [1] * rank),
          base_dilations=list(base or [1] * rank), window_dilations=list(dilations or [1] * rank),
          padding=list(padding or [0] * 2 * rank), body_subgraph_index=reduction, version=version)
    mb.output(y)
    body(mb, reduction, op, dtype)
    return mb.build()


WINDOWS = [  # window, strides, base dilations, window dilations, padding (low, high per dimension)
    ((1, 2, 3), (1, 2, 1), (1, 2, 1), (1, 1, 2), (0, 0, 1, -1, 2, 1)),
    ((2, 2, 2), (1, 1, 2), None, None, None),
    ((1, 3, 1), (1, 1, 1), (1, 1, 3), (1, 2, 1), (0, 1, -2, 3, 0, 0)),
]
REDUCTIONS = {"ADD": 0, "STABLEHLO_ADD": 0, "MUL": 1, "STABLEHLO_MULTIPLY": 1, "MAXIMUM": -100,
              "STABLEHLO_MAXIMUM": -100, "MINIMUM": 100, "STABLEHLO_MINIMUM": 100}


@pytest.mark.parametrize("op", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int32, np.int64, np.float64])
@pytest.mark.parametrize("window", range(len(WINDOWS)))
def test_reduce_window(op, dtype, window):
    shape = (2, 5, 6)
    content = reduce_window_model(op, dtype, shape, REDUCTIONS[op], *WINDOWS[window])
    low = -3 if op.endswith(("MUL", "MULTIPLY")) else -50
    both_kernels(content, [sample(shape, dtype, 3, low, -low)])


@pytest.mark.parametrize("op, init", [("LOGICAL_AND", True), ("STABLEHLO_AND", True), ("LOGICAL_OR", False)])
def test_reduce_window_logical(op, init):
    shape = (3, 7)
    content = reduce_window_model(op, np.bool_, shape, init, (2, 3), (1, 2), (2, 1), (1, 1), (1, 0, 0, 2))
    inputs = [sample(shape, np.bool_, 4)]
    same(run_ours(content, inputs)[0], run_litert(content, inputs)[0])  # no STABLEHLO_AND among the reference ops


def test_reduce_window_sum_by_hand():
    """A 2x2 window sliding by 2 over a 4x4 ramp, one row of zero padding below: window sums."""
    content = reduce_window_model("ADD", np.float32, (4, 4), 0, (2, 2), (2, 2), None, None, (0, 1, 0, 0))
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    out = run_ours(content, [x])[0]
    padded = np.vstack([x, np.zeros((1, 4), np.float32)])
    np.testing.assert_array_equal(out, padded[:4].reshape(2, 2, 2, 2).sum(axis=(1, 3)))


def test_reduce_window_body_of_two_ops_is_refused():
    mb = ModelBuilder()
    reduction = mb.add_subgraph("body")
    x, y = mb.input("x", [4]), mb.tensor("y", [3])
    mb.op("STABLEHLO_REDUCE_WINDOW", [x, mb.const("init", np.array(0, np.float32))], [y], window_dimensions=[2],
          window_strides=[1], base_dilations=[1], window_dilations=[1], padding=[0, 0], body_subgraph_index=reduction)
    mb.output(y)
    mb.select(reduction)
    a, b, c, d = mb.input("a", []), mb.input("b", []), mb.tensor("c", []), mb.tensor("d", [])
    mb.op("ADD", [a, b], [c])
    mb.op("MUL", [c, b], [d])
    mb.output(d)
    with pytest.raises(gd.ModelError, match=r"body subgraph holds \['ADD', 'MUL'\]"):
        run_ours(mb.build(), [np.ones(4, np.float32)])


def scatter_model(op: str | None, dtype, operand, indices: np.ndarray, updates, update_window_dims,
                  inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim, version: int = 1) -> bytes:
    mb = ModelBuilder()
    computation = mb.add_subgraph("update")
    x = mb.input("x", operand, dtype)
    u = mb.input("u", updates, dtype)
    y = mb.tensor("y", operand, dtype)
    mb.op("STABLEHLO_SCATTER", [x, mb.const("indices", indices), u], [y],
          update_window_dims=list(update_window_dims), inserted_window_dims=list(inserted_window_dims),
          scatter_dims_to_operand_dims=list(scatter_dims_to_operand_dims), index_vector_dim=index_vector_dim,
          update_computation_subgraph_index=computation, version=version)
    mb.output(y)
    body(mb, computation, op, dtype)
    return mb.build()


SCATTERS = {  # operand, indices, updates, update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
    # index_vector_dim. Repeated targets (combined in order) and out-of-bounds ones (skipped) in each.
    "rows": ((5, 4), [[0], [3], [0], [7]], (4, 4), (1,), (0,), (0,), 1),
    "points": ((3, 4), [[0, 1], [2, 0], [0, 1], [5, 0], [1, 3]], (5,), (), (0, 1), (0, 1), 1),
    "windows": ((4, 6), [[1, 0], [2, 4], [1, 0]], (3, 2, 3), (1, 2), (), (0, 1), 1),
    "vector-first": ((2, 3, 4), [[0, 1, 1], [2, 0, 2]], (3, 4), (1,), (0, 1), (1, 0), 0),
}


@pytest.mark.parametrize("op", [None, "STABLEHLO_ADD", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM",
                                "STABLEHLO_MINIMUM"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint16, np.int64, np.float64])
@pytest.mark.parametrize("case", list(SCATTERS))
def test_scatter(op, dtype, case):
    operand, indices, updates, *dims = SCATTERS[case]
    index_type = np.int64 if case == "windows" else np.int32
    content = scatter_model(op, dtype, operand, np.array(indices, index_type), updates, *dims)
    low = -3 if op == "STABLEHLO_MULTIPLY" else -100
    both_kernels(content, [sample(operand, dtype, 5, low, -low), sample(updates, dtype, 6, low, -low)])


def test_scatter_add_by_hand():
    """Rows 0 and 3 of a zero operand, row 0 twice: its updates add up; row 7 is outside and dropped."""
    operand, indices, updates, *dims = SCATTERS["rows"]
    content = scatter_model("STABLEHLO_ADD", np.float32, operand, np.array(indices, np.int32), updates, *dims)
    u = sample(updates, np.float32, 7)
    out = run_ours(content, [np.zeros(operand, np.float32), u])[0]
    want = np.zeros(operand, np.float32)
    want[0], want[3] = u[0] + u[2], u[1]
    np.testing.assert_array_equal(out, want)


def test_scatter_with_a_tflite_add_body_is_refused_as_in_litert():
    operand, indices, updates, *dims = SCATTERS["rows"]
    content = scatter_model("ADD", np.float32, operand, np.array(indices, np.int32), updates, *dims)
    inputs = [sample(operand, np.float32), sample(updates, np.float32)]
    with pytest.raises(RuntimeError, match="Only update, Add"):
        run_litert(content, inputs)
    with pytest.raises(gd.ModelError, match=r"update computation subgraph holds \['ADD'\]"):
        run_ours(content, inputs)


@pytest.mark.parametrize("make", [
    composite_model,
    lambda version: reduce_window_model("ADD", np.float32, (4,), 0, (2,), version=version),
    lambda version: scatter_model(None, np.float32, (2,), np.array([[1]], np.int32), (1,), (), (0,), (0,), 1,
                                  version=version),
], ids=["COMPOSITE", "REDUCE_WINDOW", "SCATTER"])
def test_subgraph_ops_refuse_newer_versions(make):
    with pytest.raises(gd.ModelError, match=r"STABLEHLO_\w+\): op version 2 is not supported"):
        gd.Interpreter(model_content=make(version=2))
