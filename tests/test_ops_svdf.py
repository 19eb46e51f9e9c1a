"""SVDF (float and hybrid) against LiteRT, over several invokes (the state carries over)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, litert_interpreter


def svdf_model(batch=2, n_input=7, units=5, rank=2, memory=4, bias=True, hybrid=False, asymmetric=False,
               activation="RELU", version=1, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    filters = units * rank
    x = mb.input("x", [batch, n_input])

    def w(name, shape):
        v = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if not hybrid:
            return mb.const(name, v)
        scale = float(np.abs(v).max() / 127)
        return mb.const(name, np.round(v / scale).astype(np.int8), scale=scale, zero_point=0)

    ins = [x, w("feature", [filters, n_input]), w("time", [filters, memory]),
           mb.const("b", rng.standard_normal(units).astype(np.float32)) if bias else -1,
           mb.tensor("state", [batch, filters * memory], is_variable=True)]
    y = mb.tensor("y", [batch, units])
    mb.op("SVDF", ins, [y], version=version, rank=rank, fused_activation_function=activation,
          asymmetric_quantize_inputs=asymmetric)
    mb.output(y)
    return mb.build()


def compare(content: bytes, invokes: int = 5) -> None:
    its = [litert_interpreter(content), gd.Interpreter(model_content=content)]
    shape = its[1].get_input_details()[0]["shape"]
    rng = np.random.default_rng(1)
    for it in its:
        it.allocate_tensors()
    for k in range(invokes):
        x = rng.standard_normal(shape).astype(np.float32)
        outs = []
        for it in its:
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        assert_float_close(outs[1], outs[0], what=f"invoke {k}")


@pytest.mark.parametrize("options", [{}, {"rank": 1, "bias": False, "activation": "NONE"},
                                     {"batch": 3, "n_input": 9, "units": 3, "rank": 3, "memory": 7},
                                     {"batch": 1, "memory": 1, "activation": "TANH"}])
def test_svdf_float(options):
    compare(svdf_model(**options))


@pytest.mark.parametrize("asymmetric", [False, True])
def test_svdf_hybrid(asymmetric):
    compare(svdf_model(hybrid=True, asymmetric=asymmetric, version=4 if asymmetric else 2))


def test_svdf_rejects_newer_version():
    with pytest.raises(gd.ModelError, match=r"SVDF.*version 5"):
        gd.Interpreter(model_content=svdf_model(version=5))
