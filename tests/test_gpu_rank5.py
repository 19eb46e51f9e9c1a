"""Rank-5 tensors that are rank 4 in disguise (issue 16): Keras 3's nearest UpSampling2D repeats rows and
columns through EXPAND_DIMS to rank 5, TILE or BROADCAST_TO, and RESHAPE back. Tensors of batch 1 are stored as
their rank-4 selves, so the whole chain runs on the GPU (cl, gl; fp32, fp16) and matches LiteRT; a rank-5
tensor whose first dimension is not 1 still stays on the CPU, saying why."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .parity_models import run_gpu
from .reference import assert_float_close, run_litert, shared_delegate

I32 = np.int32


def upsampling(mb: ModelBuilder, x: int, shape: tuple[int, int, int, int], repeat: str) -> tuple[int, tuple]:
    """Nearest 2x upsampling along H then W, the way tf.repeat lowers: expand, repeat, reshape."""
    b, h, w, c = shape
    for axis in (1, 2):
        cur = (b, h, w, c)
        e_shape = cur[:axis + 1] + (1,) + cur[axis + 1:]
        e = mb.tensor(f"e{axis}", e_shape)
        mb.op("EXPAND_DIMS", [x, mb.const(f"axis{axis}", np.array(axis + 1, I32))], [e])
        r_shape = e_shape[:axis + 1] + (2,) + e_shape[axis + 2:]
        r = mb.tensor(f"r{axis}", r_shape)
        if repeat == "TILE":
            multiples = [1] * 5
            multiples[axis + 1] = 2
            mb.op("TILE", [e, mb.const(f"m{axis}", np.array(multiples, I32))], [r])
        else:
            mb.op("BROADCAST_TO", [e, mb.const(f"s{axis}", np.array(r_shape, I32))], [r], version=2)
        h, w = (h * 2, w) if axis == 1 else (h, w * 2)
        y = mb.tensor(f"y{axis}", (b, h, w, c))
        mb.op("RESHAPE", [r, mb.const(f"shape{axis}", np.array([b, h, w, c], I32))], [y])
        x = y
    return x, (b, h, w, c)


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("repeat", ["TILE", "BROADCAST_TO"])
def test_keras_nearest_upsampling_runs_on_the_gpu(backend, fp16, repeat):
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 5, 7))
    y, shape = upsampling(mb, x, (1, 3, 5, 7), repeat)
    z = mb.tensor("z", shape)
    mb.op("MUL", [y, mb.const("k", np.float32(0.5))], [z])
    mb.output(z)
    content = mb.build()
    x_value = np.random.default_rng(0).standard_normal((1, 3, 5, 7)).astype(np.float32)
    if fp16:
        x_value = x_value.astype(np.float16).astype(np.float32)
    ours = run_gpu(content, [x_value], backend, fp16)
    assert_float_close(ours[0], run_litert(content, [x_value])[0], 1e-6)


def test_rank5_elementwise_and_concatenation(backend):
    mb = ModelBuilder()
    a = mb.input("a", (1, 2, 3, 4, 5))
    b = mb.input("b", (1, 2, 3, 4, 5))
    s = mb.tensor("s", (1, 2, 3, 4, 5))
    mb.op("ADD", [a, b], [s])
    j = mb.tensor("j", (1, 2, 6, 4, 5))
    mb.op("CONCATENATION", [s, a], [j], axis=2)
    mb.output(j)
    content = mb.build()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32) for _ in range(2)]
    assert_float_close(run_gpu(content, inputs, backend)[0], run_litert(content, inputs)[0], 1e-6)


def test_rank5_of_batch_two_stays_on_the_cpu(backend):
    mb = ModelBuilder()
    x = mb.input("x", (2, 2, 3, 4, 5))
    y = mb.tensor("y", (2, 2, 3, 4, 5))
    mb.op("RELU", [x], [y])
    mb.output(y)
    it = gd.Interpreter(model_content=mb.build(), experimental_delegates=[shared_delegate(backend)])
    assert it.get_ops_details()[0]["backend"] == "cpu"
    assert "rank 5" in it.cpu_reasons()[0]
