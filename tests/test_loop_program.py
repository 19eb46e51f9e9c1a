"""A WHILE of small tensors run as one program of the numba interpreter (loop_program.py, cpu/loop_vm.py): hand-built
loops whose bodies hold every translated op and a Keras-style list written at the counter, against LiteRT; what the
program assumes checked at run time (the loop then runs subgraph by subgraph, which reports what is wrong); a body
with an op that has no translation runs as before, the reason kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.cpu import loop_vm
from gpu_delegate.tflite import ModelBuilder
from gpu_delegate.tools import benchmark_input

from .reference import assert_float_close, run, run_litert

SMALL_PARTITIONS_ON_CPU = True  # real models: placement as users get it (tests/conftest.py)

I32, F32 = np.int32, np.float32
CONVERTER = Path(__file__).parent / "models" / "converter"
T, H = 6, 8  # sequence length, state width


def _vars(mb: ModelBuilder) -> list[int]:
    """The loop's variables, as inputs of the current subgraph: i, n, h, seq, out, acc, k."""
    return [mb.input("i", [], I32), mb.input("n", [], I32), mb.input("h", [1, H]), mb.input("seq", [T, 1, H]),
            mb.input("out", [T, 1, H]), mb.input("acc", [4, 1]), mb.input("k", [3], I32)]


def recurrent_model(extra: str = "") -> bytes:
    """A recurrent cell over ``seq`` that writes each step's state into ``out`` at the counter, as TensorFlow lowers a
    Keras layer's output list: GATHER, FULLY_CONNECTED, SPLIT, LOGISTIC, TANH, MUL, ADD (fused RELU_N1_TO_1), DIV,
    MAXIMUM, SUB, GREATER and SELECT_V2 (Keras' masking), CAST, REVERSE_V2, RESHAPE, two SLICEs and a CONCATENATION
    (the list write), STRIDED_SLICE, TRANSPOSE, int32 arithmetic; the condition LESS, GREATER_EQUAL, LOGICAL_AND.
    ``extra`` "softmax" adds a node without a translation (SOFTMAX)."""
    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    cond, body = mb.add_subgraph("cond"), mb.add_subgraph("body")
    n = mb.input("n", [], I32)
    seq = mb.input("seq", [T, 1, H])
    h0 = mb.input("h0", [1, H])
    start = [mb.const("i0", np.array(0, I32)), n, h0, seq, mb.const("out0", np.zeros((T, 1, H), F32)),
             mb.const("acc0", np.zeros((4, 1), F32)), mb.const("k0", np.array([3, -7, 11], I32))]
    names = ["i_f", "n_f", "h_f", "seq_f", "out_f", "acc_f", "k_f"]
    shapes = [([], I32), ([], I32), ([1, H], F32), ([T, 1, H], F32), ([T, 1, H], F32), ([4, 1], F32), ([3], I32)]
    finals = [mb.tensor(name, shape, dtype) for name, (shape, dtype) in zip(names, shapes)]
    mb.op("WHILE", start, finals, cond_subgraph_index=cond, body_subgraph_index=body)
    mb.output(finals[2], finals[4], finals[5], finals[6], finals[0])

    mb.select(cond)
    i, n_, *_ = _vars(mb)
    more, sane, go = mb.tensor("more", [], np.bool_), mb.tensor("sane", [], np.bool_), mb.tensor("go", [], np.bool_)
    mb.op("LESS", [i, n_], [more])
    mb.op("GREATER_EQUAL", [n_, mb.const("zero", np.array(0, I32))], [sane])
    mb.op("LOGICAL_AND", [more, sane], [go])
    mb.output(go)

    mb.select(body)
    i, n_, h, seq_, out, acc, k = _vars(mb)

    def t(name: str, shape: list[int], dtype: type = F32) -> int:
        return mb.tensor(name, shape, dtype)

    i1 = t("i1", [], I32)
    mb.op("ADD", [i, mb.const("one", np.array(1, I32))], [i1])
    xi = t("xi", [1, H])
    mb.op("GATHER", [seq_, i], [xi], axis=0)
    z = t("z", [1, 2 * H])
    mb.op("FULLY_CONNECTED", [xi, mb.const("w", (rng.standard_normal((2 * H, H)) / 3).astype(F32)),
                              mb.const("b", rng.standard_normal(2 * H).astype(F32) / 4)], [z])
    zr = t("zr", [1, 2 * H])
    mb.op("FULLY_CONNECTED", [h, mb.const("r", (rng.standard_normal((2 * H, H)) / 3).astype(F32)), -1], [zr])
    zz = t("zz", [1, 2 * H])
    mb.op("ADD", [z, zr], [zz])
    gate, cand = t("gate", [1, H]), t("cand", [1, H])
    mb.op("SPLIT", [mb.const("axis", np.array(1, I32)), zz], [gate, cand], num_splits=2)
    g, c = t("g", [1, H]), t("c", [1, H])
    mb.op("LOGISTIC", [gate], [g])
    mb.op("TANH", [cand], [c])
    gh, h1 = t("gh", [1, H]), t("h1", [1, H])
    mb.op("MUL", [g, h], [gh])
    mb.op("ADD", [gh, c], [h1], fused_activation_function="RELU_N1_TO_1")
    half, low, h2 = t("half", [1, H]), t("low", [1, H]), t("h2", [1, H])
    mb.op("DIV", [h1, mb.const("two", np.array([2.0], F32))], [half])
    mb.op("SUB", [h1, mb.const("shift", np.linspace(-0.5, 0.5, H).astype(F32))], [low])
    mb.op("MAXIMUM", [half, low], [h2])
    # Keras' masking: the state moves only where the step's input is positive; plus the counter as a float
    positive, kept = t("positive", [1, H], np.bool_), t("kept", [1, H])
    mb.op("GREATER", [xi, mb.const("zero_f", np.array(0.0, F32))], [positive])
    mb.op("SELECT_V2", [positive, h2, h], [kept])
    step, nudge, h3 = t("step", []), t("nudge", []), t("h3", [1, H])
    mb.op("CAST", [i], [step])
    mb.op("MUL", [step, mb.const("tenth", np.array(0.1, F32))], [nudge])
    mb.op("ADD", [kept, nudge], [h3])
    h2 = h3
    back, h4 = t("back", [1, H]), t("h4", [1, H])
    mb.op("REVERSE_V2", [h2, mb.const("rev_axis", np.array([1], I32))], [back])
    mb.op("MAXIMUM", [h2, back], [h4])
    h2 = h4
    if extra == "softmax":
        spread, h5 = t("spread", [1, H]), t("h5", [1, H])
        mb.op("SOFTMAX", [h2], [spread], beta=1.0)
        mb.op("ADD", [h2, spread], [h5])
        h2 = h5
    # the list write: out[:i] ++ [h2] ++ out[i + 1:]
    item = t("item", [1, 1, H])
    mb.op("RESHAPE", [h2, mb.const("item_shape", np.array([1, 1, H], I32))], [item])
    i_1, i1_1 = t("i_1", [1], I32), t("i1_1", [1], I32)
    mb.op("RESHAPE", [i, mb.const("one_shape", np.array([1], I32))], [i_1])
    mb.op("RESHAPE", [i1, mb.const("one_shape2", np.array([1], I32))], [i1_1])
    size, begin = t("size", [3], I32), t("begin", [3], I32)
    mb.op("CONCATENATION", [i_1, mb.const("rest_size", np.array([-1, -1], I32))], [size], axis=0)
    mb.op("CONCATENATION", [i1_1, mb.const("rest_begin", np.array([0, 0], I32))], [begin], axis=0)
    # the slices' sizes change every iteration: shape signatures with -1, as the converter writes them
    head = mb.tensor("head", [1, 1, 1], F32, shape_signature=[-1, -1, -1])
    tail = mb.tensor("tail", [1, 1, H], F32, shape_signature=[-1, 1, H])
    out1 = t("out1", [T, 1, H])
    mb.op("SLICE", [out, mb.const("zeros3", np.zeros(3, I32)), size], [head])
    mb.op("SLICE", [out, begin, mb.const("all3", np.full(3, -1, I32))], [tail])
    mb.op("CONCATENATION", [head, item, tail], [out1], axis=0)
    # acc += transpose(h2[:, ::2])
    odd, col, acc1 = t("odd", [1, 4]), t("col", [4, 1]), t("acc1", [4, 1])
    mb.op("STRIDED_SLICE", [h2, mb.const("ss_b", np.array([0, 0], I32)), mb.const("ss_e", np.array([1, H], I32)),
                            mb.const("ss_s", np.array([1, 2], I32))], [odd])
    mb.op("TRANSPOSE", [odd, mb.const("perm", np.array([1, 0], I32))], [col])
    mb.op("ADD", [acc, col], [acc1])
    # k = max(k * 2 - i, k - 5): int32 arithmetic, broadcast against the counter
    k2, k3, k4, k5 = t("k2", [3], I32), t("k3", [3], I32), t("k4", [3], I32), t("k5", [3], I32)
    mb.op("MUL", [k, mb.const("k_two", np.array(2, I32))], [k2])
    mb.op("SUB", [k2, i], [k3])
    mb.op("SUB", [k, mb.const("k_five", np.array([5], I32))], [k4])
    mb.op("MAXIMUM", [k3, k4], [k5])
    mb.output(i1, n_, h2, seq_, out1, acc1, k5)
    return mb.build()


def inputs(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [np.array(count, I32), rng.standard_normal((T, 1, H)).astype(F32), rng.standard_normal((1, H)).astype(F32)]


def programs(it: gd.Interpreter) -> list:
    return [p for p in it._run._loops.values() if p is not None]


@pytest.mark.parametrize("count", [0, 1, T])
def test_recurrent_loop_runs_as_one_program(count):
    """Every node of the condition and the body translated (the list write as one), LiteRT's values: the float
    state within float32 rounding (the program's exp and tanh are float64's rounded), the list, the int32
    arithmetic and the counter exactly where the arithmetic is exact."""
    content = recurrent_model()
    x = inputs(count)
    it = gd.Interpreter(model_content=content)
    ours, ref = run(it, x), run_litert(content, x)
    assert len(programs(it)) == 1 and not it._run.loop_reasons, it._run.loop_reasons
    for name, o, r in zip(("h", "out", "acc", "k", "i"), ours, ref, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype, (name, o.shape, r.shape, o.dtype, r.dtype)
        if o.dtype == F32:
            assert_float_close(o, r, rel=1e-5, what=name)
        else:
            np.testing.assert_array_equal(o, r, err_msg=name)
    assert int(ours[4]) == count
    # RESHAPE, SPLIT and TRANSPOSE make runs of their input's elements in order: they take that run's place, no copy
    # (REVERSE_V2 walks its input backwards)
    (program,) = programs(it)
    copies = {node.op for row, node in zip(program.body, program.body_nodes) if row[0] == loop_vm.COPY}
    assert copies == {"GATHER", "STRIDED_SLICE", "REVERSE_V2", "CONCATENATION"}, copies
    for again, first in zip(run(it, x), ours, strict=True):  # the program's workspace serves the next invoke
        np.testing.assert_array_equal(again, first)
    if count:  # the items past the counter stay zero; the last one written is the final state
        np.testing.assert_array_equal(ours[1][count:], 0)
        np.testing.assert_array_equal(ours[1][count - 1, 0], ours[0][0])


def test_an_index_outside_the_list_runs_subgraph_by_subgraph():
    """A counter past the sequence: the program's GATHER index check fails, nothing is kept of its run, and the loop
    runs subgraph by subgraph, whose GATHER reports the index (LiteRT refuses it too)."""
    content = recurrent_model()
    it = gd.Interpreter(model_content=content)
    with pytest.raises(gd.ModelError, match="gather index 6 out of bounds"):
        run(it, inputs(T + 1))
    (program,) = programs(it)
    assert program.failed is not None and program.failed.op == "GATHER", program.failed
    # the same interpreter, in range again: the program's values
    x = inputs(T)
    ours, ref = run(it, x), run_litert(content, x)
    assert_float_close(ours[0], ref[0], rel=1e-5)


def test_a_node_without_translation_leaves_the_loop_to_its_subgraphs():
    """SOFTMAX has no loop form: the loop runs subgraph by subgraph as before (LiteRT's values), the reason kept."""
    content = recurrent_model("softmax")
    x = inputs(T)
    it = gd.Interpreter(model_content=content)
    ours, ref = run(it, x), run_litert(content, x)
    assert not programs(it)
    (why,) = it._run.loop_reasons.values()
    assert "SOFTMAX" in why, why
    assert_float_close(ours[0], ref[0], rel=1e-5)
    np.testing.assert_array_equal(ours[3], ref[3])


def test_a_profiled_loop_reports_its_nodes():
    """With a profiler every node of every iteration is reported, so the loop runs subgraph by subgraph."""
    content = recurrent_model()
    it = gd.Interpreter(model_content=content)
    events = []
    it.set_profiler(events.append)
    run(it, inputs(2))
    assert not programs(it)
    assert sum(e.op == "FULLY_CONNECTED" for e in events) == 4, [e.op for e in events]


def layout_model() -> bytes:
    """A loop over a [2, 6] state of the other translations: FULLY_CONNECTED of two rows with a fused RELU, GATHER of a
    constant index vector along axis 1, SLICE at a constant begin, STRIDED_SLICE shrinking an axis, EXPAND_DIMS,
    SQUEEZE, a CONCATENATION of three parts along axis 1, EXP, NEG, MINIMUM, a float comparison and LOGICAL_NOT."""
    rng = np.random.default_rng(11)
    mb = ModelBuilder()
    cond, body = mb.add_subgraph("cond"), mb.add_subgraph("body")
    x = mb.input("x", [2, 6])
    finals = [mb.tensor("i_f", [], I32), mb.tensor("x_f", [2, 6]), mb.tensor("flag_f", [2, 6], np.bool_)]
    mb.op("WHILE", [mb.const("i0", np.array(0, I32)), x, mb.const("flag0", np.zeros((2, 6), np.bool_))], finals,
          cond_subgraph_index=cond, body_subgraph_index=body)
    mb.output(finals[1], finals[2])
    mb.select(cond)
    i, _, _ = mb.input("i", [], I32), mb.input("x", [2, 6]), mb.input("flag", [2, 6], np.bool_)
    go = mb.tensor("go", [], np.bool_)
    mb.op("LESS", [i, mb.const("n", np.array(4, I32))], [go])
    mb.output(go)
    mb.select(body)
    i, s, _ = mb.input("i", [], I32), mb.input("x", [2, 6]), mb.input("flag", [2, 6], np.bool_)

    def t(name: str, shape: list[int], dtype: type = F32) -> int:
        return mb.tensor(name, shape, dtype)

    i1, fc, picked, part, row = t("i1", [], I32), t("fc", [2, 6]), t("picked", [2, 2]), t("part", [2, 2]), t("row", [6])
    mb.op("ADD", [i, mb.const("one", np.array(1, I32))], [i1])
    mb.op("FULLY_CONNECTED", [s, mb.const("w", (rng.standard_normal((6, 6)) / 2).astype(F32)),
                              mb.const("b", rng.standard_normal(6).astype(F32) / 4)], [fc],
          fused_activation_function="RELU")
    mb.op("GATHER", [fc, mb.const("cols", np.array([5, 0], I32))], [picked], axis=1)
    mb.op("SLICE", [s, mb.const("sb", np.array([0, 2], I32)), mb.const("sz", np.array([2, 2], I32))], [part])
    mb.op("STRIDED_SLICE", [fc, mb.const("b1", np.array([1, 0], I32)), mb.const("e1", np.array([2, 6], I32)),
                            mb.const("s1", np.array([1, 1], I32))], [row], shrink_axis_mask=1)
    wide, back = t("wide", [1, 6]), t("back", [6])
    mb.op("EXPAND_DIMS", [row, mb.const("ax", np.array(0, I32))], [wide])
    mb.op("SQUEEZE", [wide], [back], squeeze_dims=[0])
    tiny, tail = t("tiny", [2, 2]), t("tail", [2, 2])
    mb.op("EXP", [part], [tiny])
    mb.op("NEG", [picked], [tail])
    joined, small, mixed = t("joined", [2, 6]), t("small", [2, 6]), t("mixed", [2, 6])
    mb.op("CONCATENATION", [tiny, tail, picked], [joined], axis=1)
    mb.op("MINIMUM", [joined, back], [small])
    mb.op("MUL", [small, mb.const("scale", np.array(0.5, F32))], [mixed])
    big, flag = t("big", [2, 6], np.bool_), t("flag1", [2, 6], np.bool_)
    mb.op("GREATER", [mixed, s], [big])
    mb.op("LOGICAL_NOT", [big], [flag])
    mb.output(i1, mixed, flag)
    return mb.build()


def test_layout_ops_in_a_loop_program():
    content = layout_model()
    x = [np.random.default_rng(3).standard_normal((2, 6)).astype(F32)]
    it = gd.Interpreter(model_content=content)
    ours, ref = run(it, x), run_litert(content, x)
    assert len(programs(it)) == 1 and not it._run.loop_reasons, it._run.loop_reasons
    assert_float_close(ours[0], ref[0], rel=1e-5)
    np.testing.assert_array_equal(ours[1], ref[1])


@pytest.mark.parametrize("name", ["bilstm_keras3_b1_fp32", "bilstm_tf_keras_b1_fp16", "bilstm_tf_keras_b1_dynrange"])
def test_converted_recurrent_layers_run_as_programs(name):
    """TensorFlow's converter's loops (Keras 3 LSTM and GRU; tf_keras GRU and SimpleRNN with float16 weights, whose
    DEQUANTIZEs fold into the program's constants, and with dynamic-range weights): every loop one program, LiteRT's
    values."""
    content = (CONVERTER / f"{name}.tflite").read_bytes()
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    rng = np.random.default_rng(2)
    x = [benchmark_input(d["shape"], d["dtype"], rng) for d in it.get_input_details()]  # token ids in range
    ours, ref = run(it, x), run_litert(content, x)
    assert it._run._loops and all(p is not None for p in it._run._loops.values()), it._run.loop_reasons
    for o, r in zip(ours, ref, strict=True):
        assert_float_close(o, r, rel=1e-4, what=name)


def test_dynamic_range_weights_in_a_loop_program():
    """A loop body's FULLY_CONNECTED of int8 weights (the converter's dynamic-range quantization) runs in the program
    on its weights dequantized once, as the CPU kernel does: the numpy formula on those weights, and LiteRT's values
    within its on-the-fly 8-bit quantization of the activations."""
    rng = np.random.default_rng(4)
    q = rng.integers(-127, 128, (H, H)).astype(np.int8)
    scale, bias = 0.004, rng.standard_normal(H).astype(F32) / 10
    mb = ModelBuilder()
    cond, body = mb.add_subgraph("cond"), mb.add_subgraph("body")
    h0 = mb.input("h0", [1, H])
    finals = [mb.tensor("i_f", [], I32), mb.tensor("h_f", [1, H])]
    mb.op("WHILE", [mb.const("i0", np.array(0, I32)), h0], finals, cond_subgraph_index=cond, body_subgraph_index=body)
    mb.output(finals[1])
    mb.select(cond)
    i, _ = mb.input("i", [], I32), mb.input("h", [1, H])
    go = mb.tensor("go", [], np.bool_)
    mb.op("LESS", [i, mb.const("n", np.array(5, I32))], [go])
    mb.output(go)
    mb.select(body)
    i, h = mb.input("i", [], I32), mb.input("h", [1, H])
    i1, z, h1 = mb.tensor("i1", [], I32), mb.tensor("z", [1, H]), mb.tensor("h1", [1, H])
    mb.op("ADD", [i, mb.const("one", np.array(1, I32))], [i1])
    mb.op("FULLY_CONNECTED", [h, mb.const("w", q, scale=scale, zero_point=0), mb.const("b", bias)], [z])
    mb.op("TANH", [z], [h1])
    mb.output(i1, h1)
    content = mb.build()
    x = [rng.standard_normal((1, H)).astype(F32)]
    it = gd.Interpreter(model_content=content)
    (ours,) = run(it, x)
    assert len(programs(it)) == 1 and not it._run.loop_reasons, it._run.loop_reasons
    want = x[0].astype(np.float64)
    for _ in range(5):
        want = np.tanh(want @ (q.astype(np.float64) * np.float32(scale)).T + bias)
    assert_float_close(ours, want.astype(F32), rel=1e-5)
    np.testing.assert_allclose(ours, run_litert(content, x)[0], atol=0.02)


def test_gate_rows_match_numpy():
    """A TANH row (through the vectorized exp) is numpy's float64 tanh rounded to float32, bit for bit, over six
    decades of magnitude, both signs, the series' bound and the special values; a LOGISTIC row is float32's formula
    (0 where float32's exp overflows) within 4 ulps of numpy's float32 (libm's expf against numpy's, results near
    float32's smallest normal among them); both also within a row's strides (every other value, written in
    place)."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(4000) * s for s in (1e-9, 1e-3, 0.06, 0.5, 3.0, 40.0)])
    x = np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan, loop_vm._TANH_SERIES, -loop_vm._TANH_SERIES]])
    x = x.astype(F32).astype(np.float64)
    n = x.size
    with np.errstate(over="ignore"):
        logistic = (1 / (1 + np.exp(-x.astype(F32)))).astype(F32)
    for fn, want, ulps in ((2, np.tanh(x).astype(F32), 0), (1, logistic, 4)):
        ws = np.concatenate([x, np.zeros(n)])
        loop_vm._gate(ws, fn, n, 1, 0, 1, n)
        strided = np.repeat(x, 2)  # every other value, the result in place of the first of each pair
        loop_vm._gate(strided, fn, 0, 2, 0, 2, n)
        for got in (ws[n:].astype(F32), strided[::2].astype(F32)):
            assert np.array_equal(np.isnan(got), np.isnan(want))
            ok = ~np.isnan(want)
            steps = np.abs(got[ok].view(np.int32).astype(np.int64) - want[ok].view(np.int32))
            assert steps.max() <= ulps, (fn, steps.max())
