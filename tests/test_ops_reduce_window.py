"""REDUCE_WINDOW against LiteRT, every reduction and type it takes."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import run_litert, run_ours

INIT = {"ADD": 0, "MUL": 1, "MINIMUM": 100, "MAXIMUM": -100, "ALL": 1, "ANY": 0}


def model(shape, dtype, function: str, window, strides, dilations, version=1) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype)
    init = mb.const("init", np.array(INIT[function]).astype(dtype))
    ins = [x, init] + [mb.const(n, np.array(v, np.int64)) for n, v in
                       (("window", window), ("strides", strides), ("dilations", dilations))]
    y = mb.tensor("y", [1] * len(shape), dtype)
    mb.op("REDUCE_WINDOW", ins, [y], version=version, reduce_function=function)
    mb.output(y)
    return mb.build()


def sample(shape, dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == np.bool_:
        return rng.random(shape) < 0.7
    if np.dtype(dtype).kind == "f":
        return rng.uniform(0.5, 1.5, shape).astype(dtype)
    return rng.integers(-3, 4, shape).astype(dtype)


CASES = [((2, 7, 5, 3), (1, 3, 2, 1), (1, 2, 1, 1), (1, 1, 2, 1)), ((9,), (4,), (3,), (1,)),
         ((3, 6, 5), (2, 2, 3), (1, 1, 1), (1, 2, 1))]


@pytest.mark.parametrize("function", ["ADD", "MUL", "MINIMUM", "MAXIMUM"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.int64, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_reduce_window(function, dtype, case):
    content = model(case[0], dtype, function, *case[1:])
    x = sample(case[0], dtype)
    ref, ours = run_litert(content, [x])[0], run_ours(content, [x])[0]
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-6)


@pytest.mark.parametrize("function", ["ALL", "ANY"])
def test_reduce_window_logical(function):
    case = CASES[0]
    content = model(case[0], np.bool_, function, *case[1:])
    x = sample(case[0], np.bool_)
    np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x])[0])


def test_reduce_window_rejects_newer_version():
    with pytest.raises(gd.ModelError, match=r"REDUCE_WINDOW.*version 2"):
        gd.Interpreter(model_content=model((4,), np.float32, "ADD", (2,), (1,), (1,), version=2))
