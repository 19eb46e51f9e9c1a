"""RNN, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN (float and hybrid) against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, litert_interpreter


def _weights(mb: ModelBuilder, rng, name: str, shape, hybrid: bool) -> int:
    w = (rng.standard_normal(shape) * 0.4).astype(np.float32)
    if not hybrid:
        return mb.const(name, w)
    scale = float(np.abs(w).max() / 127)
    return mb.const(name, np.clip(np.round(w / scale), -127, 127).astype(np.int8), scale=scale, zero_point=0)


def rnn_model(op: str, time=4, batch=3, n_input=7, units=5, time_major=False, hybrid=False, asymmetric=False,
              activation="TANH", version=1, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    if op == "RNN":
        x = mb.input("x", [batch, n_input])
        y = mb.tensor("y", [batch, units])
        opts = {}
    else:
        x = mb.input("x", [time, batch, n_input] if time_major else [batch, time, n_input])
        y = mb.tensor("y", [time, batch, units] if time_major else [batch, time, units])
        opts = {"time_major": time_major}
    w = _weights(mb, rng, "w", [units, n_input], hybrid)
    r = _weights(mb, rng, "r", [units, units], hybrid)
    b = mb.const("b", (rng.standard_normal(units) * 0.3).astype(np.float32))
    h = mb.tensor("h", [batch, units], is_variable=True)
    mb.op(op, [x, w, r, b, h], [y], version=version, fused_activation_function=activation,
          asymmetric_quantize_inputs=asymmetric, **opts)
    mb.output(y)
    return mb.build()


def bidi_model(time=4, batch=3, n_input=7, fw_units=5, bw_units=3, time_major=False, merge=False, hybrid=False,
               aux: str | None = None, activation="TANH", seed=0) -> bytes:
    """aux: None, "cross" (aux input and aux weights) or "bw_input" (aux input feeds the backward cell)."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    lead = [time, batch] if time_major else [batch, time]
    x = mb.input("x", [*lead, n_input])
    ins = [x]
    for d, units in (("fw", fw_units), ("bw", bw_units)):
        ins += [_weights(mb, rng, f"{d}_w", [units, n_input], hybrid),
                _weights(mb, rng, f"{d}_r", [units, units], hybrid),
                mb.const(f"{d}_b", (rng.standard_normal(units) * 0.3).astype(np.float32)),
                mb.tensor(f"{d}_h", [batch, units], is_variable=True)]
    if aux is None:
        ins += [-1, -1, -1]
    else:
        ins.append(mb.input("aux", [*lead, n_input]))
        if aux == "cross":
            ins += [_weights(mb, rng, "fw_aux_w", [fw_units, n_input], hybrid),
                    _weights(mb, rng, "bw_aux_w", [bw_units, n_input], hybrid)]
        else:
            ins += [-1, -1]
    if merge:
        outs = [mb.tensor("y", [*lead, fw_units + bw_units])]
    else:
        outs = [mb.tensor("y_fw", [*lead, fw_units]), mb.tensor("y_bw", [*lead, bw_units])]
    mb.op("BIDIRECTIONAL_SEQUENCE_RNN", ins, outs, version=2 if hybrid else 1, time_major=time_major,
          merge_outputs=merge, fused_activation_function=activation)
    mb.output(*outs)
    return mb.build()


def inputs_for(content: bytes, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(d["shape"]).astype(np.float32)
            for d in gd.Interpreter(model_content=content).get_input_details()]


def compare(content: bytes, rel: float = 1e-4, invokes: int = 2) -> None:
    """Several invokes in a row on both interpreters: the state carries over."""
    xs = inputs_for(content)
    its = [litert_interpreter(content), gd.Interpreter(model_content=content)]
    for it in its:
        for d, x in zip(it.get_input_details(), xs):
            it.resize_tensor_input(d["index"], x.shape)
        it.allocate_tensors()
    for k in range(invokes):
        outs = []
        for it in its:
            for d, x in zip(it.get_input_details(), xs):
                it.set_tensor(d["index"], x * (k + 1))
            it.invoke()
            outs.append([it.get_tensor(d["index"]) for d in it.get_output_details()])
        for j, (o, r) in enumerate(zip(outs[1], outs[0])):
            assert_float_close(o, r, rel, what=f"invoke {k} output {j}")


@pytest.mark.parametrize("activation", ["TANH", "RELU", "NONE"])
def test_rnn_float(activation):
    compare(rnn_model("RNN", activation=activation), invokes=3)


@pytest.mark.parametrize("asymmetric", [False, True])
def test_rnn_hybrid(asymmetric):
    compare(rnn_model("RNN", hybrid=True, asymmetric=asymmetric, version=3 if asymmetric else 2), invokes=3)


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("hybrid,asymmetric", [(False, False), (True, False), (True, True)])
def test_unidirectional_sequence_rnn(time_major, hybrid, asymmetric):
    content = rnn_model("UNIDIRECTIONAL_SEQUENCE_RNN", time=5, batch=2, n_input=9, units=7, time_major=time_major,
                        hybrid=hybrid, asymmetric=asymmetric, version=3 if asymmetric else (2 if hybrid else 1))
    compare(content)


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("aux", [None, "cross", "bw_input"])
def test_bidirectional_sequence_rnn_float(time_major, merge, aux):
    compare(bidi_model(time_major=time_major, merge=merge, aux=aux))


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("aux", [None, "cross"])
def test_bidirectional_sequence_rnn_hybrid(time_major, aux):
    compare(bidi_model(time=3, time_major=time_major, hybrid=True, aux=aux, activation="RELU"))


def test_rnn_rejects_newer_version():
    content = rnn_model("RNN", version=4)
    with pytest.raises(gd.ModelError, match=r"RNN.*version 4"):
        gd.Interpreter(model_content=content)


def test_rnn_rejects_batch_resize():
    content = rnn_model("UNIDIRECTIONAL_SEQUENCE_RNN", batch=2)
    it = gd.Interpreter(model_content=content)
    it.resize_tensor_input(it.get_input_details()[0]["index"], [4, 4, 7])
    with pytest.raises(gd.ModelError, match=r"UNIDIRECTIONAL_SEQUENCE_RNN.*batch size"):
        it.allocate_tensors()

