"""Issue 16's ops on the GPU against LiteRT, on cl and gl in fp32 and fp16 storage: GATHER with run-time indices,
ONE_HOT, CUMSUM (float and int32, every axis, exclusive and reverse) and RELU_0_TO_1, odd channel counts and
batch > 1."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.tflite.writer import ModelBuilder

from .parity_models import run_gpu
from .reference import assert_float_close, run_litert

rng = np.random.default_rng(11)


def expect(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool, rel: float | None = None) -> None:
    if fp16:  # inputs fp16 holds exactly, so only the computation rounds
        inputs = [x.astype(np.float16).astype(np.float32) if x.dtype == np.float32 else x for x in inputs]
    ref = run_litert(content, inputs)
    ours = run_gpu(content, inputs, backend, fp16)
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == r.dtype and o.shape == r.shape, f"output {k}: {o.dtype}{o.shape} vs {r.dtype}{r.shape}"
        if r.dtype.kind == "f":
            assert_float_close(o, r, rel or (3e-3 if fp16 else 1e-6), what=f"output {k}")
        else:
            np.testing.assert_array_equal(o, r, err_msg=f"output {k}")


def one(op: str, ins: list, out_shape: tuple[int, ...], out_dtype=np.float32, **attrs) -> bytes:
    mb = ModelBuilder()
    ids = [mb.const(f"c{k}", v) if isinstance(v, np.ndarray) else mb.input(f"x{k}", v[0], v[1])
           for k, v in enumerate(ins)]
    y = mb.tensor("y", out_shape, out_dtype)
    mb.op(op, ids, [y], **attrs)
    mb.output(y)
    return mb.build()


FP = [False, True]


@pytest.mark.parametrize("fp16", FP)
@pytest.mark.parametrize("params,indices,axis", [((2, 6, 5, 7), (3,), 1), ((6, 5, 7), (2, 3), 2),
                                                 ((9, 5), (4, 3), 0), ((3, 4, 2050), (2,), 2)])
def test_gather_run_time_indices(backend, fp16, params, indices, axis):
    out = params[:axis] + indices + params[axis + 1:]
    content = one("GATHER", [(params, np.float32), (indices, np.int32)], out, axis=axis)
    idx = rng.integers(0, params[axis], indices).astype(np.int32)
    idx.flat[0] = params[axis] - 1  # beyond 2048 in the last case: exact in fp32 storage only
    expect(content, [rng.standard_normal(params).astype(np.float32), idx], backend, fp16)


@pytest.mark.parametrize("fp16", FP)
@pytest.mark.parametrize("table,indices,axis,dtype", [((50, 13), (2, 7), 0, np.float32),
                                                      ((6, 5, 7), (3,), 2, np.float32),
                                                      ((2, 9, 6), (4,), 1, np.float32),
                                                      ((9, 5), (4, 3), 0, np.int32)])
def test_gather_from_a_constant_table(backend, fp16, table, indices, axis, dtype):
    """An embedding lookup: constant params (Keras' Embedding), run-time indices."""
    out = table[:axis] + indices + table[axis + 1:]
    values = rng.standard_normal(table).astype(np.float32) if dtype == np.float32 else \
        rng.integers(-70000, 70000, table).astype(np.int32)
    if fp16 and dtype == np.float32:  # exact in fp16 storage (int32 tensors are held in float32)
        values = values.astype(np.float16).astype(np.float32)
    content = one("GATHER", [values, (indices, np.int32)], out, dtype, axis=axis)
    idx = rng.integers(0, table[axis], indices).astype(np.int32)
    idx.flat[0] = table[axis] - 1
    expect(content, [idx], backend, fp16)


@pytest.mark.parametrize("fp16", FP)
@pytest.mark.parametrize("shape,axis,dtype", [((2, 5), -1, np.float32), ((3, 2, 3), 1, np.float32),
                                              ((4,), 0, np.int32), ((2, 3), 0, np.bool_)])
def test_one_hot(backend, fp16, shape, axis, dtype):
    depth = 7
    rank = len(shape)
    a = rank if axis == -1 else axis
    out = shape[:a] + (depth,) + shape[a:]
    on, off = {np.float32: (2.5, -1.0), np.int32: (70000, -3), np.bool_: (True, False)}[dtype]
    content = one("ONE_HOT", [(shape, np.int32), np.array(depth, np.int32), np.array(on, dtype),
                              np.array(off, dtype)], out, dtype, axis=axis)
    expect(content, [rng.integers(-1, depth + 1, shape).astype(np.int32)], backend, fp16)


@pytest.mark.parametrize("fp16", FP)
@pytest.mark.parametrize("shape,axis", [((2, 3, 5, 7), 3), ((2, 3, 5, 7), 2), ((2, 3, 5, 7), 0), ((4, 9), -1),
                                        ((3, 5, 6), 1)])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum(backend, fp16, shape, axis, exclusive, reverse):
    for dtype in (np.float32, np.int32):
        content = one("CUMSUM", [(shape, dtype), np.array(axis, np.int32)], shape, dtype, exclusive=exclusive,
                      reverse=reverse)
        x = rng.standard_normal(shape).astype(np.float32) if dtype == np.float32 else \
            rng.integers(-30000, 30000, shape).astype(np.int32)
        expect(content, [x], backend, fp16, rel=1e-2 if fp16 else 1e-5)


@pytest.mark.parametrize("fp16", FP)
def test_relu_0_to_1(backend, fp16):
    shape = (2, 3, 5, 7)
    content = one("RELU_0_TO_1", [(shape, np.float32)], shape)
    expect(content, [(rng.standard_normal(shape) * 2).astype(np.float32)], backend, fp16)
