"""LayerNormalization as the TFLite converter writes it (MEAN, SQUARED_DIFFERENCE, MEAN, ADD epsilon, RSQRT, MUL
gamma, then NEG/MUL/MUL/ADD or MUL/SUB beta/MUL/ADD), lowered to one kernel by lowering/fuse_layer_norm.py, on
both GPU backends against LiteRT: odd channel counts, batch > 1, ranks 3 and 4, fp16 storage; the converter's int8
form (its NEG as DEQUANTIZE, NEG, QUANTIZE; or SUB beta) against LiteRT's int8 kernels; a chain whose mean is read
elsewhere stays as separate kernels. Every test asserts that the nodes ran on the backend."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, int8_grid, run_litert, run_wholly_on_gpu, to_int8


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


def int8_layer_norm_model(shape: tuple[int, ...], with_beta: bool, with_gamma: bool,
                          samples: list[np.ndarray]) -> tuple[bytes, dict[str, object]]:
    """The converter's int8 LayerNormalization over the last axis, each tensor's grid calibrated on the float chain
    over ``samples`` (float inputs): the mean negated by DEQUANTIZE, NEG, QUANTIZE, or with a constant beta as
    SUB(beta, m * inv). Returns the model and x's grid."""
    c = shape[-1]
    kept = (*shape[:-1], 1)
    rng = np.random.default_rng(c + 1)
    eps = 1e-3
    gamma = rng.uniform(0.5, 2.0, c) if with_gamma else np.ones(c)
    beta = rng.standard_normal(c) * 0.5
    x = np.stack(samples).astype(np.float64)
    m = x.mean(-1, keepdims=True)
    d = (x - m) ** 2
    v = d.mean(-1, keepdims=True)
    r = 1 / np.sqrt(v + eps)
    inv = r * gamma
    shift = -m * inv if not with_beta else beta - m * inv
    ranges = {"x": [x], "m": [m], "neg": [-m], "d": [d], "v": [v, v + eps], "r": [r], "inv": [inv],
              "ms": [m * inv, -m * inv], "shift": [shift], "xs": [x * inv], "y": [x * inv + shift]}
    q = {name: int8_grid(vs) for name, vs in ranges.items()}
    mb = ModelBuilder()
    tx = mb.input("x", shape, **q["x"])
    axis = mb.const("axis", np.array([-1], np.int32))
    tm, td, tv = mb.tensor("m", kept, **q["m"]), mb.tensor("d", shape, **q["d"]), mb.tensor("v", kept, **q["v"])
    tve, tr = mb.tensor("ve", kept, **q["v"]), mb.tensor("r", kept, **q["r"])
    mb.op("MEAN", [tx, axis], [tm], keep_dims=True)
    mb.op("SQUARED_DIFFERENCE", [tx, tm], [td])
    mb.op("MEAN", [td, axis], [tv], keep_dims=True)
    eps_scale = eps / 100
    mb.op("ADD", [tv, mb.const("eps", np.int8(100), scale=eps_scale, zero_point=0)], [tve])
    mb.op("RSQRT", [tve], [tr])
    tinv = tr
    if with_gamma:
        g_scale = float(gamma.max()) / 127
        codes = np.round(gamma / g_scale).astype(np.int8).reshape((1,) * (len(shape) - 1) + (c,))
        tinv = mb.tensor("inv", shape, **q["inv"])
        mb.op("MUL", [tr, mb.const("gamma", codes, scale=g_scale, zero_point=0)], [tinv])
    txs, tshift, ty = mb.tensor("xs", shape, **q["xs"]), mb.tensor("shift", shape, **q["shift"]), \
        mb.tensor("y", shape, **q["y"])
    if with_beta:
        tms = mb.tensor("ms", shape, **q["ms"])
        mb.op("MUL", [tm, tinv], [tms])
        b_scale = float(np.abs(beta).max()) / 127
        mb.op("SUB", [mb.const("beta", np.round(beta / b_scale).astype(np.int8), scale=b_scale, zero_point=0), tms],
              [tshift])
    else:
        m_float, neg_float = mb.tensor("m_float", kept), mb.tensor("neg_float", kept)
        tneg = mb.tensor("neg", kept, **q["neg"])
        mb.op("DEQUANTIZE", [tm], [m_float])
        mb.op("NEG", [m_float], [neg_float])
        mb.op("QUANTIZE", [neg_float], [tneg])
        mb.op("MUL", [tneg, tinv], [tshift])
    mb.op("MUL", [tx, tinv], [txs])
    mb.op("ADD", [txs, tshift], [ty])
    mb.output(ty)
    return mb.build(), q["x"]


@pytest.mark.parametrize("shape, with_beta, with_gamma", [((1, 16, 32), False, True), ((3, 9, 13), True, True),
                                                          ((2, 4, 6), False, False)])
def test_int8_layer_norm_is_one_kernel_as_close_to_litert_as_the_chain(backend, shape, with_beta, with_gamma):
    samples = [inputs_for(shape, seed)[0] for seed in range(3)]
    content, qx = int8_layer_norm_model(shape, with_beta, with_gamma, samples)
    for k, sample in enumerate(samples):
        xs = [to_int8(sample, qx)]
        ref = run_litert(content, xs)
        kernels, outs = run_wholly_on_gpu(content, xs, backend)
        assert kernels.count("layer_norm") == 1 and kernels.count("reduce") == 0, kernels
        assert_quant_close(outs[0], ref[0], what=f"int8 layer norm {shape} sample {k} on {backend}")
