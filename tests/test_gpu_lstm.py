"""LSTM on the GPU (issue 16): the full kernel (CIFG, peephole, projection, layer norm, clips) and the basic one,
on cl and gl in fp32 and fp16 storage, against LiteRT over several invokes, so the state the step writes back
into its variable tensors carries over as in TFLite."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, litert_interpreter, shared_delegate
from .test_ops_lstm_cells import cell_inputs, lstm_basic_model, lstm_full_model


def compare(content: bytes, backend: str, fp16: bool, invokes: int = 3) -> None:
    rng = np.random.default_rng(1)
    ours = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend, fp16)])
    its = [litert_interpreter(content), ours]
    xs = [rng.standard_normal(d["shape"]).astype(np.float32) for d in ours.get_input_details()]
    if fp16:
        xs = [x.astype(np.float16).astype(np.float32) for x in xs]
    for it in its:
        it.allocate_tensors()
    for k in range(invokes):
        outs = []
        for it in its:
            for d, x in zip(it.get_input_details(), xs):
                it.set_tensor(d["index"], x * (k + 1))
            it.invoke()
            outs.append([it.get_tensor(d["index"]) for d in it.get_output_details()])
        for j, (o, r) in enumerate(zip(outs[1], outs[0])):
            assert_float_close(o, r, 1e-2 if fp16 else 1e-5, what=f"invoke {k} output {j}")
    assert {d["backend"] for d in ours.get_ops_details()} == {backend}, ours.cpu_reasons()


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("options", [{}, {"cifg": True, "peephole": True}, {"n_output": 4},
                                     {"layer_norm": True, "peephole": True},
                                     {"batch": 1, "n_input": 13, "n_cell": 5, "n_output": 5}])
def test_full_kernel(backend, fp16, options):
    compare(lstm_full_model(**options), backend, fp16)


@pytest.mark.parametrize("fp16", [False, True])
def test_basic_kernel(backend, fp16):
    compare(lstm_basic_model(), backend, fp16)


def test_clips_and_a_fused_consumer_leave_the_state_raw(backend):
    """cell_clip and proj_clip clamp; a RELU fused into the step's output must not reach the state it hands on."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    batch, n_input, n_cell, n_output = 2, 6, 7, 3
    x = mb.input("x", [batch, n_input])
    ins = [x] + cell_inputs(mb, rng, "c", n_input, n_cell, n_output, projection=True)
    ins += [mb.tensor("h", [batch, n_output], is_variable=True), mb.tensor("c", [batch, n_cell], is_variable=True)]
    y = mb.tensor("y", [batch, n_output])
    mb.op("LSTM", ins, [y], fused_activation_function="TANH", kernel_type="FULL", cell_clip=0.4, proj_clip=0.3)
    r = mb.tensor("r", [batch, n_output])
    mb.op("RELU", [y], [r])
    mb.output(r)
    compare(mb.build(), backend, False, invokes=4)
