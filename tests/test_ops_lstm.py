"""UNIDIRECTIONAL_SEQUENCE_LSTM (float32) on the CPU path against LiteRT, on models built input by input."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, litert_interpreter, run_litert, run_ours


def lstm_model(time=5, batch=3, n_input=7, n_cell=6, n_output=4, time_major=True, cifg=False, peephole=False,
               projection=False, projection_bias=True, layer_norm=False, diagonal=False, cell_clip=0.0,
               proj_clip=0.0, activation="TANH", weight_dtype=np.float32, state_from_fp16=False, hybrid=False,
               seed=0) -> bytes:
    """The node's 24 inputs in TFLite's order (lstm_shared.h); -1 for each omitted optional one.
    ``state_from_fp16``: the output state is written by a DEQUANTIZE of an fp16 constant, as the converter makes
    fp16 models. ``hybrid``: the weights (not the biases) are int8 with a scale (the dynamic-range converter's
    hybrid LSTM)
    """
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    n_out = n_output if projection else n_cell
    x = mb.input("x", [time, batch, n_input] if time_major else [batch, time, n_input])

    def w(name, shape, dtype=np.float32):
        value = rng.standard_normal(shape) * 0.5
        if hybrid and name.startswith(("in_", "rec_", "peep_", "proj_w")):  # int8 codes, symmetric, one scale
            scale = float(np.abs(value).max()) / 127
            return mb.const(name, np.round(value / scale).astype(np.int8), scale=[scale], zero_point=[0])
        return mb.const(name, value.astype(dtype))

    gates = "ifco"
    skip_input_gate = [cifg, False, False, False]
    ins = [x]
    ins += [-1 if skip_input_gate[g] else w(f"in_{gates[g]}", [n_cell, n_input], weight_dtype)
            for g in range(4)]
    ins += [-1 if skip_input_gate[g] else w(f"rec_{gates[g]}", [n_cell] if diagonal else [n_cell, n_out])
            for g in range(4)]
    ins += [w(f"peep_{'ifo'[g]}", [n_cell]) if peephole and not (cifg and g == 0) else -1 for g in range(3)]
    ins += [-1 if skip_input_gate[g] else w(f"bias_{gates[g]}", [n_cell]) for g in range(4)]
    ins += [w("proj_w", [n_out, n_cell]) if projection else -1,
            w("proj_b", [n_out]) if projection and projection_bias else -1]
    h = mb.tensor("h", [batch, n_out], is_variable=True)
    if state_from_fp16:
        mb.op("DEQUANTIZE", [w("h0", [batch, n_out], np.float16)], [h])
    ins += [h, mb.tensor("c", [batch, n_cell], is_variable=True)]
    ins += [w(f"ln_{gates[g]}", [n_cell]) if layer_norm and not skip_input_gate[g] else -1 for g in range(4)]
    y = mb.tensor("y", [time, batch, n_out] if time_major else [batch, time, n_out])
    mb.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], fused_activation_function=activation, cell_clip=cell_clip,
          proj_clip=proj_clip, time_major=time_major, diagonal_recurrent_tensors=diagonal)
    mb.output(y)
    return mb.build()


def input_for(content: bytes, seed: int = 1) -> np.ndarray:
    shape = gd.Interpreter(model_content=content).get_input_details()[0]["shape"]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CONFIGS = {
    "plain": {},
    "batch_major": {"time_major": False},
    "cifg": {"cifg": True},
    "peephole": {"peephole": True},
    "projection": {"projection": True},
    "projection_no_bias": {"projection": True, "projection_bias": False, "time_major": False},
    "cifg_peephole_projection_batch_major": {"cifg": True, "peephole": True, "projection": True,
                                             "time_major": False},
    "layer_norm": {"layer_norm": True},
    "layer_norm_cifg_peephole": {"layer_norm": True, "cifg": True, "peephole": True, "time_major": False},
    "clipping": {"projection": True, "cell_clip": 0.4, "proj_clip": 0.3},
    # the cells that cpu/lstm._plain_steps runs (no peephole, layer norm or projection): clipped, other activations
    "clipping_plain": {"cell_clip": 0.4},
    "relu6": {"activation": "RELU6", "peephole": True},
    "relu6_plain": {"activation": "RELU6", "cifg": True},
    "relu_plain_batch_major": {"activation": "RELU", "time_major": False},
    "diagonal_recurrent": {"diagonal": True},
    "single_step_odd_sizes": {"time": 1, "batch": 1, "n_input": 13, "n_cell": 5},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_lstm_matches_litert(name):
    content = lstm_model(**CONFIGS[name])
    x = input_for(content)
    ref = run_litert(content, [x])[0]
    ours = run_ours(content, [x])[0]
    assert_float_close(ours, ref, what=name)
    if CONFIGS[name].get("proj_clip"):
        assert np.abs(ref).max() <= 0.3 + 1e-6  # the clip was active
    elif CONFIGS[name].get("cell_clip"):  # |h| <= tanh(|c|) <= tanh(0.4), and the clip changed the outputs
        unclipped = run_litert(lstm_model(**{**CONFIGS[name], "cell_clip": 0.0}), [x])[0]
        assert np.abs(ref).max() <= np.tanh(0.4) + 1e-6 and not np.allclose(ref, unclipped, atol=1e-3)


def test_lstm_state_carries_over_invokes_and_resets_on_reallocation():
    content = lstm_model(peephole=True, projection=True)
    x = input_for(content)
    longer = np.concatenate([x, x[:2]])
    results = []
    for it in (litert_interpreter(content), gd.Interpreter(model_content=content)):
        inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
        it.allocate_tensors()
        seq = []
        for _ in range(2):
            it.set_tensor(inp, x)
            it.invoke()
            seq.append(it.get_tensor(out))
        it.allocate_tensors()  # nothing changed: the state survives
        it.set_tensor(inp, x)
        it.invoke()
        seq.append(it.get_tensor(out))
        it.resize_tensor_input(inp, longer.shape)  # a real re-allocation: the state starts from zero again
        it.allocate_tensors()
        it.set_tensor(inp, longer)
        it.invoke()
        seq.append(it.get_tensor(out))
        results.append(seq)
    ref, ours = results
    assert np.abs(ref[1] - ref[0]).max() > 1e-3  # the second invoke started from the first one's state
    assert np.abs(ref[3][:len(x)] - ref[0]).max() < 1e-6
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert_float_close(o, r, what=f"invoke {k}")


def test_lstm_rejects_batch_resize():
    # LiteRT refuses too: the state tensors keep the batch size the model was built with.
    content = lstm_model(time_major=False, batch=2)
    it = gd.Interpreter(model_content=content)
    it.resize_tensor_input(it.get_input_details()[0]["index"], [4, 5, 7])
    with pytest.raises(gd.ModelError, match=r"UNIDIRECTIONAL_SEQUENCE_LSTM.*batch size"):
        it.allocate_tensors()


def test_lstm_rejects_int8_weights_without_a_scale():
    content = lstm_model(weight_dtype=np.int8)
    with pytest.raises(gd.ModelError, match=r"UNIDIRECTIONAL_SEQUENCE_LSTM.*is INT8; only the float32 LSTM"):
        gd.Interpreter(model_content=content)


@pytest.mark.parametrize("config", ["plain", "batch_major", "cifg_peephole_projection_batch_major"])
def test_lstm_with_hybrid_weights(config):
    """The dynamic-range converter's LSTM: int8 weights. LiteRT quantizes the activations to int8 on the fly; we
    run in float with the weights dequantized once. Measured: 1.8e-3 to 2.2e-3 of (1 + max|LiteRT|)."""
    content = lstm_model(hybrid=True, **CONFIGS[config])
    x = input_for(content)
    assert_float_close(run_ours(content, [x])[0], run_litert(content, [x])[0], 2e-2, what="against LiteRT's hybrid")


def test_state_written_by_a_dequantized_constant():
    """The converter's fp16 Bidirectional LSTMs: the state variable is the output of a DEQUANTIZE of an fp16
    constant. LiteRT dequantizes it once, at allocation, and the LSTM updates it in place, so the state carries
    over to the next invoke; reset_all_variables zeroes it."""
    content = lstm_model(state_from_fp16=True)
    x = input_for(content)
    ref = litert_interpreter(content)
    ours = gd.Interpreter(model_content=content)
    for it in (ref, ours):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)

    def outputs(it) -> list[np.ndarray]:
        it.invoke()
        return [it.get_tensor(d["index"]) for d in it.get_output_details()]

    for step in ("first invoke", "second invoke (the state carried over)"):
        for o, r in zip(outputs(ours), outputs(ref)):
            assert_float_close(o, r, 1e-5, what=step)
    ref.reset_all_variables()
    ours.reset_all_variables()
    for o, r in zip(outputs(ours), outputs(ref)):
        assert_float_close(o, r, 1e-5, what="after reset_all_variables")
