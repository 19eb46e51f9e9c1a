"""SEGMENT_SUM, UNSORTED_SEGMENT_{SUM, PROD, MAX, MIN} and UNIQUE against LiteRT (and numpy formulas)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import run_litert, run_ours

UNSORTED = ["UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN"]


def sample(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-9, 10, shape).astype(dtype)


def segment_model(op: str, data_shape, ids: np.ndarray, num_segments: int | None, dtype, const_ids=True,
                  version=1) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", data_shape, dtype)
    i = mb.const("ids", ids) if const_ids else mb.input("ids", ids.shape, np.int32)
    ins = [x, i]
    if num_segments is not None:
        ins.append(mb.const("n", np.array(num_segments, np.int32)) if const_ids else mb.input("n", [], np.int32))
    rows = num_segments if num_segments is not None else int(ids.max()) + 1
    y = mb.tensor("y", [rows, *data_shape[ids.ndim:]], dtype)
    mb.op(op, ins, [y], version=version)
    mb.output(y)
    return mb.build()


def check(content: bytes, inputs: list[np.ndarray]) -> np.ndarray:
    ref, ours = run_litert(content, inputs)[0], run_ours(content, inputs)[0]
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    if ref.dtype.kind == "f":
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(ours, ref)
    return ours


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("ids", [[0, 0, 1, 2, 2, 2, 3], [0, 0, 0, 0, 0, 1, 1], [0, 1, 2, 3, 4, 5, 6]])
def test_segment_sum(dtype, ids):
    ids = np.array(ids, np.int32)
    content = segment_model("SEGMENT_SUM", (7, 3, 5), ids, None, dtype)
    x = sample((7, 3, 5), dtype)
    out = check(content, [x])
    want = np.zeros_like(out)
    for k, s in enumerate(ids):
        want[s] += x[k]
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_segment_sum_ids_from_a_tensor():
    content = segment_model("SEGMENT_SUM", (5, 3), np.array([0, 0, 1, 1, 2], np.int32), None, np.float32,
                            const_ids=False)
    for ids in ([0, 0, 1, 1, 2], [0, 1, 2, 3, 3], [0, 0, 0, 0, 0]):
        check(content, [sample((5, 3), np.float32), np.array(ids, np.int32)])


@pytest.mark.parametrize("ids", [[0, 0, 2, 2], [1, 1, 2, 2]])
def test_segment_sum_rejects_what_litert_rejects(ids):
    content = segment_model("SEGMENT_SUM", (4, 3), np.array(ids, np.int32), None, np.float32)
    with pytest.raises(gd.ModelError, match=r"SEGMENT_SUM.*start at 0 and rise by 0 or 1"):
        run_ours(content, [sample((4, 3), np.float32)])
    with pytest.raises(RuntimeError, match="segment_sum"):
        run_litert(content, [sample((4, 3), np.float32)])


@pytest.mark.parametrize("op", UNSORTED)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_unsorted_segment(op, dtype):
    ids = np.array([[3, 0, 3], [1, 3, 0]], np.int32)  # segment 2 is empty, and ids are 2-D
    content = segment_model(op, (2, 3, 5), ids, 5, dtype)
    check(content, [sample((2, 3, 5), dtype)])


@pytest.mark.parametrize("op", UNSORTED)
def test_unsorted_segment_from_tensors(op):
    content = segment_model(op, (6, 3), np.zeros(6, np.int32), 3, np.float32, const_ids=False)
    for ids, n in (([2, 0, 2, 1, 0, 0], 3), ([0, 0, 4, 1, 3, 3], 7)):
        check(content, [sample((6, 3), np.float32), np.array(ids, np.int32), np.array(n, np.int32)])


def test_unsorted_segment_rejects_newer_version():
    content = segment_model("UNSORTED_SEGMENT_SUM", (4, 3), np.array([0, 1, 0, 1], np.int32), 2, np.float32,
                            version=2)
    with pytest.raises(gd.ModelError, match=r"UNSORTED_SEGMENT_SUM.*version 2"):
        gd.Interpreter(model_content=content)


def unique_model(n: int, dtype, idx_type=np.int32, const=None) -> bytes:
    mb = ModelBuilder()
    x = mb.const("x", const) if const is not None else mb.input("x", [n], dtype)
    y = mb.tensor("y", [n], dtype)
    i = mb.tensor("i", [n], idx_type)
    mb.op("UNIQUE", [x], [y, i], idx_out_type="INT64" if idx_type == np.int64 else "INT32")
    mb.output(y, i)
    return mb.build()


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("idx_type", [np.int32, np.int64])
def test_unique(dtype, idx_type):
    x = np.array([5, 3, 5, 7, 3, 3, 1, 9, 7, 5, 2], dtype)
    content = unique_model(x.size, dtype, idx_type)
    ref, ours = run_litert(content, [x]), run_ours(content, [x])
    for o, r in zip(ours, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_array_equal(o, r)
    np.testing.assert_array_equal(ours[0], [5, 3, 7, 1, 9, 2])
    np.testing.assert_array_equal(ours[0][ours[1]], x)


def test_unique_of_a_constant_has_its_shape_at_allocation():
    content = unique_model(5, np.float32, const=np.array([2, 2, 1, 2, 1], np.float32))
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    assert list(it.get_output_details()[0]["shape"]) == [2]
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[1]["index"]), [0, 0, 1, 0, 1])
