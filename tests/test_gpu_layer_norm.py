"""LayerNormalization as the TFLite converter writes it (MEAN, SQUARED_DIFFERENCE, MEAN, ADD epsilon, RSQRT, MUL
gamma, then NEG/MUL/MUL/ADD or MUL/SUB beta/MUL/ADD), lowered to one kernel by lowering/fuse_layer_norm.py, on
both GPU backends against LiteRT: odd channel counts, batch > 1, ranks 3 and 4, fp16 storage; the int8 form and a
chain whose mean is read elsewhere stay as separate kernels. Every test asserts that the nodes ran on the backend."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, run_litert, run_wholly_on_gpu


def layer_norm_model(shape: tuple[int, ...], with_beta: bool, also_mean: bool = False, eps: float = 1e-3) -> bytes:
    """The converter's chain over the last axis of an input of ``shape``: with a constant beta as SUB(beta, m * inv),
    without as NEG(m) * inv. ``also_mean``: the mean is an output of the model as well."""
    c = shape[-1]
    kept = (*shape[:-1], 1)
    rng = np.random.default_rng(c)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    axis = mb.const("axis", np.array([-1], np.int32))
    m, d, v = mb.tensor("m", kept), mb.tensor("d", shape), mb.tensor("v", kept)
    ve, r, inv = mb.tensor("ve", kept), mb.tensor("r", kept), mb.tensor("inv", shape)
    mb.op("MEAN", [x, axis], [m], keep_dims=True)
    mb.op("SQUARED_DIFFERENCE", [x, m], [d])
    mb.op("MEAN", [d, axis], [v], keep_dims=True)
    mb.op("ADD", [v, mb.const("eps", np.float32(eps))], [ve])
    mb.op("RSQRT", [ve], [r])
    gamma = mb.const("gamma", rng.uniform(0.5, 2.0, (1,) * (len(shape) - 1) + (c,)).astype(np.float32))
    mb.op("MUL", [r, gamma], [inv])
    xs, shift, y = mb.tensor("xs", shape), mb.tensor("shift", shape), mb.tensor("y", shape)
    if with_beta:
        ms = mb.tensor("ms", shape)
        mb.op("MUL", [m, inv], [ms])
        beta = mb.const("beta", rng.standard_normal(c).astype(np.float32))
        mb.op("SUB", [beta, ms], [shift])
    else:
        neg = mb.tensor("neg", kept)
        mb.op("NEG", [m], [neg])
        mb.op("MUL", [neg, inv], [shift])
    mb.op("MUL", [x, inv], [xs])
    mb.op("ADD", [xs, shift], [y])
    mb.output(y, m) if also_mean else mb.output(y)
    return mb.build()


def inputs_for(shape: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # an offset per row, so that the mean matters, and spread that varies from row to row
    x = rng.standard_normal(shape) * rng.uniform(0.1, 5.0, (*shape[:-1], 1)) + rng.uniform(-3, 3, (*shape[:-1], 1))
    return [x.astype(np.float32)]


@pytest.mark.parametrize("shape, with_beta", [((1, 16, 32), False), ((3, 9, 13), True), ((2, 3, 5, 7), False),
                                              ((2, 4, 6), True), ((1, 5, 1), False)])
def test_layer_norm_is_one_kernel_as_close_to_litert_as_the_chain(backend, shape, with_beta):
    content = layer_norm_model(shape, with_beta)
    xs = inputs_for(shape)
    ref = run_litert(content, xs)
    kernels, outs = run_wholly_on_gpu(content, xs, backend)
    assert kernels.count("layer_norm") == 1 and kernels.count("reduce") == 0, kernels
    assert_float_close(outs[0], ref[0], 1e-5, what=f"layer norm {shape} on {backend}")


def test_layer_norm_fp16_storage(backend):
    shape = (2, 6, 11)
    content = layer_norm_model(shape, True)
    xs = inputs_for(shape, seed=1)
    ref = run_litert(content, xs)
    kernels, outs = run_wholly_on_gpu(content, xs, backend, fp16=True)
    assert "layer_norm" in kernels, kernels
    assert_float_close(outs[0], ref[0], 2e-2, what=f"fp16 layer norm on {backend}")


def test_layer_norm_whose_mean_is_read_elsewhere_stays_a_chain(backend):
    shape = (2, 4, 9)
    content = layer_norm_model(shape, False, also_mean=True)
    xs = inputs_for(shape, seed=2)
    ref = run_litert(content, xs)
    kernels, outs = run_wholly_on_gpu(content, xs, backend)
    assert "layer_norm" not in kernels and "reduce" in kernels, kernels
    for o, r in zip(outs, ref):
        assert_float_close(o, r, 1e-5, what=f"unfused chain on {backend}")
