"""BIDIRECTIONAL_SEQUENCE_LSTM and LSTM (full and basic kernels), float32, against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, litert_interpreter, run_litert, run_ours


def cell_inputs(mb: ModelBuilder, rng, prefix: str, n_input: int, n_cell: int, n_output: int, cifg=False,
                peephole=False, projection=False, weight_dtype=np.float32) -> list[int]:
    """One cell's 17 inputs: input-to-gate, recurrent, peephole, biases, projection weights and bias."""
    def w(name, shape, dtype=np.float32):
        return mb.const(f"{prefix}_{name}", (rng.standard_normal(shape) * 0.5).astype(dtype))

    gates = "ifco"
    ins = [-1 if cifg and g == 0 else w(f"in_{gates[g]}", [n_cell, n_input], weight_dtype) for g in range(4)]
    ins += [-1 if cifg and g == 0 else w(f"rec_{gates[g]}", [n_cell, n_output]) for g in range(4)]
    ins += [w(f"peep_{g}", [n_cell]) if peephole and not (cifg and g == 0) else -1 for g in range(3)]
    ins += [-1 if cifg and g == 0 else w(f"bias_{gates[g]}", [n_cell]) for g in range(4)]
    ins += [w("proj_w", [n_output, n_cell]) if projection else -1, w("proj_b", [n_output]) if projection else -1]
    return ins


def bidi_model(time=4, batch=3, n_input=7, fw=(5, 5), bw=(5, 5), time_major=False, merge=False, aux=None,
               cifg=False, peephole=False, weight_dtype=np.float32, version=1, seed=0) -> bytes:
    """fw / bw: (n_cell, n_output); n_output != n_cell turns projection on. aux: None, "cross" or "bw_input"."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    lead = [time, batch] if time_major else [batch, time]
    x = mb.input("x", [*lead, n_input])
    ins = [x]
    for d, (n_cell, n_out) in (("fw", fw), ("bw", bw)):
        ins += cell_inputs(mb, rng, d, n_input, n_cell, n_out, cifg, peephole, n_out != n_cell, weight_dtype)
    for d, (n_cell, n_out) in (("fw", fw), ("bw", bw)):
        ins += [mb.tensor(f"{d}_h", [batch, n_out], is_variable=True),
                mb.tensor(f"{d}_c", [batch, n_cell], is_variable=True)]
    n_aux = 4
    if aux is None:
        ins += [-1] * 9
    else:
        ins.append(mb.input("aux", [*lead, n_aux if aux == "cross" else n_input]))
        if aux == "cross":
            for d, (n_cell, _) in (("fw", fw), ("bw", bw)):
                ins += [-1 if cifg and g == 0 else
                        mb.const(f"{d}_aux_{g}", (rng.standard_normal([n_cell, n_aux]) * 0.5).astype(np.float32))
                        for g in range(4)]
        else:
            ins += [-1] * 8
    if merge:
        outs = [mb.tensor("y", [*lead, fw[1] + bw[1]])]
    else:
        outs = [mb.tensor("y_fw", [*lead, fw[1]]), mb.tensor("y_bw", [*lead, bw[1]])]
    mb.op("BIDIRECTIONAL_SEQUENCE_LSTM", ins, outs, version=version, time_major=time_major, merge_outputs=merge,
          fused_activation_function="TANH", cell_clip=0.0, proj_clip=0.0)
    mb.output(*outs)
    return mb.build()


def lstm_full_model(batch=3, n_input=7, n_cell=6, n_output=6, cifg=False, peephole=False, layer_norm=False,
                    seed=0, version=1) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", [batch, n_input])
    ins = [x] + cell_inputs(mb, rng, "c", n_input, n_cell, n_output, cifg, peephole, n_output != n_cell)
    ins += [mb.tensor("h", [batch, n_output], is_variable=True), mb.tensor("c", [batch, n_cell], is_variable=True)]
    if layer_norm:
        ins += [-1 if cifg and g == 0 else mb.const(f"ln_{g}", (rng.standard_normal(n_cell) * 0.5 + 1)
                                                    .astype(np.float32)) for g in range(4)]
    y = mb.tensor("y", [batch, n_output])
    mb.op("LSTM", ins, [y], version=version, fused_activation_function="TANH", kernel_type="FULL")
    mb.output(y)
    return mb.build()


def lstm_basic_model(batch=2, n_input=5, depth=3, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", [batch, n_input])
    prev_a = mb.tensor("prev_a", [batch, depth], is_variable=True)
    w = mb.const("w", (rng.standard_normal([4 * depth, n_input + depth]) * 0.5).astype(np.float32))
    b = mb.const("b", (rng.standard_normal(4 * depth) * 0.5).astype(np.float32))
    prev_s = mb.tensor("prev_s", [batch, depth], is_variable=True)
    outs = [mb.tensor("a", [batch, depth]), mb.tensor("s", [batch, depth]),
            mb.tensor("concat", [batch, n_input + depth]), mb.tensor("gates", [batch, 4 * depth])]
    mb.op("LSTM", [x, prev_a, w, b, prev_s], outs, version=1, fused_activation_function="TANH", kernel_type="BASIC")
    mb.output(*outs)
    return mb.build()


def compare(content: bytes, invokes: int = 2) -> None:
    rng = np.random.default_rng(1)
    its = [litert_interpreter(content), gd.Interpreter(model_content=content)]
    xs = [rng.standard_normal(d["shape"]).astype(np.float32) for d in its[1].get_input_details()]
    for it in its:
        it.allocate_tensors()
    for k in range(invokes):
        outs = []
        for it in its:
            for d, x in zip(it.get_input_details(), xs):
                it.set_tensor(d["index"], x * (k + 1))
            it.invoke()
            outs.append([it.get_tensor(d["index"]) for d in it.get_output_details()])
        assert len(outs[0]) == len(outs[1])
        for j, (o, r) in enumerate(zip(outs[1], outs[0])):
            assert_float_close(o, r, what=f"invoke {k} output {j}")


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("aux", [None, "cross", "bw_input"])
def test_bidirectional_lstm(time_major, merge, aux):
    # LiteRT's batch-major merged kernel strides the state by the merged width: right for batch 1 only
    batch = 1 if merge and not time_major else 3
    compare(bidi_model(batch=batch, time_major=time_major, merge=merge, aux=aux))


@pytest.mark.parametrize("aux", [None, "cross"])
def test_bidirectional_lstm_merged_batch_major_is_the_two_outputs_side_by_side(aux):
    # where LiteRT reads past its state buffers (batch > 1), its unmerged outputs are the reference
    merged, split = (bidi_model(batch=3, merge=m, aux=aux) for m in (True, False))
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(d["shape"]).astype(np.float32)
          for d in gd.Interpreter(model_content=split).get_input_details()]
    ref = np.concatenate(run_litert(split, xs), axis=2)
    assert_float_close(run_ours(merged, xs)[0], ref)


@pytest.mark.parametrize("options", [{"cifg": True}, {"peephole": True}, {"fw": (5, 3), "bw": (5, 3)},
                                     {"cifg": True, "peephole": True, "aux": "cross", "fw": (3, 2), "bw": (3, 2),
                                      "time_major": True}])
def test_bidirectional_lstm_variants(options):
    compare(bidi_model(time=3, batch=2, n_input=9, **options))


@pytest.mark.parametrize("options", [{}, {"cifg": True, "peephole": True}, {"n_output": 4}, {"layer_norm": True},
                                     {"batch": 1, "n_input": 13, "n_cell": 5, "n_output": 5}])
def test_lstm_full_kernel(options):
    compare(lstm_full_model(**options), invokes=3)


def test_lstm_basic_kernel():
    compare(lstm_basic_model(), invokes=3)


def test_bidirectional_lstm_rejects_hybrid_weights():
    content = bidi_model(weight_dtype=np.int8, version=2)
    with pytest.raises(gd.ModelError, match=r"BIDIRECTIONAL_SEQUENCE_LSTM.*float32"):
        gd.Interpreter(model_content=content)


@pytest.mark.parametrize("op,version", [("LSTM", 5), ("BIDIRECTIONAL_SEQUENCE_LSTM", 4)])
def test_lstm_rejects_newer_versions(op, version):
    content = lstm_full_model(version=version) if op == "LSTM" else bidi_model(version=version)
    with pytest.raises(gd.ModelError, match=rf"{op}.*version {version}"):
        gd.Interpreter(model_content=content)


def test_bidirectional_lstm_rejects_unequal_cells():
    # LiteRT checks both directions against each cell's sizes, so it refuses this model too
    content = bidi_model(fw=(5, 5), bw=(3, 3))
    with pytest.raises(gd.ModelError, match=r"BIDIRECTIONAL_SEQUENCE_LSTM.*must be equal"):
        gd.Interpreter(model_content=content)
    with pytest.raises(RuntimeError, match="n_cell"):
        litert_interpreter(content).allocate_tensors()
