"""Shapes computed at allocation, dynamic tensors, control flow (WHILE, IF, CALL_ONCE), resource variables and
signatures of several subgraphs: ours against LiteRT on the same hand-built models."""

from __future__ import annotations

import re

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, litert_interpreter, run, run_litert, run_ours, shared_delegate

I32, F32 = np.int32, np.float32


def while_model(shape: tuple[int, ...] = (2, 3)) -> bytes:
    """i, acc = 0, x; while i < n: i, acc = i + 1, acc * 0.5 + 1 (a loop whose count is an input); x of ``shape``."""
    mb = ModelBuilder()
    cond, body = mb.add_subgraph("cond"), mb.add_subgraph("body")
    x = mb.input("x", list(shape))
    n = mb.input("n", [], I32)
    i0 = mb.const("i0", np.array(0, I32))
    i_out, acc_out, n_out = mb.tensor("i_out", [], I32), mb.tensor("acc_out", list(shape)), mb.tensor("n_out", [], I32)
    mb.op("WHILE", [i0, x, n], [i_out, acc_out, n_out], cond_subgraph_index=cond, body_subgraph_index=body)
    mb.output(acc_out, i_out)
    mb.select(cond)
    i, acc, limit = mb.input("i", [], I32), mb.input("acc", list(shape)), mb.input("n", [], I32)
    go = mb.tensor("go", [], np.bool_)
    mb.op("LESS", [i, limit], [go])
    mb.output(go)
    mb.select(body)
    i, acc, limit = mb.input("i", [], I32), mb.input("acc", list(shape)), mb.input("n", [], I32)
    i1, half, acc1 = mb.tensor("i1", [], I32), mb.tensor("half", list(shape)), mb.tensor("acc1", list(shape))
    mb.op("ADD", [i, mb.const("one", np.array(1, I32))], [i1])
    mb.op("MUL", [acc, mb.const("h", np.array(0.5, F32))], [half])
    mb.op("ADD", [half, mb.const("c", np.array(1.0, F32))], [acc1])
    mb.output(i1, acc1, limit)
    return mb.build()


@pytest.mark.parametrize("count", [0, 1, 7])
def test_while_loop_matches_litert(count):
    content = while_model()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(F32)
    inputs = [x, np.array(count, I32)]
    ours, ref = run_ours(content, inputs), run_litert(content, inputs)
    assert_float_close(ours[0], ref[0])
    np.testing.assert_array_equal(ours[1], ref[1])
    expected = x.copy()
    for _ in range(count):  # the formula, independently
        expected = expected * 0.5 + 1
    assert_float_close(ours[0], expected)
    assert ours[1].shape == () and int(ours[1]) == count


def test_while_body_runs_on_the_gpu():
    """The body of a loop over large tensors is partitioned and delegated like the main subgraph; the condition, a
    comparison of two scalars, stays on the CPU (GpuDelegate.partition_declined: a round trip to the device every
    iteration for nothing; partition.select_partitions, the policy LiteRT's interpreter follows too)."""
    delegate = shared_delegate("cl")
    x = np.random.default_rng(1).standard_normal((64, 300)).astype(F32)  # past executor.LOOP_ON_CPU_VALUES
    it = gd.Interpreter(model_content=while_model((64, 300)), experimental_delegates=[delegate])
    out = run(it, [x, np.array(3, I32)])
    assert_float_close(out[0], ((x * 0.5 + 1) * 0.5 + 1) * 0.5 + 1)
    assert it.num_subgraphs() == 3
    cond, body = it._run.subgraphs[1], it._run.subgraphs[2]
    assert {body.backend_of.get(n.index) for n in body.graph.nodes if n.op == "MUL"} == {"cl"}
    (less,) = cond.graph.nodes
    assert cond.backend_of.get(less.index, "cpu") == "cpu" and "scalars only" in cond.why_cpu[less.index], \
        (cond.backend_of, cond.why_cpu)


def test_loop_of_small_tensors_runs_on_the_cpu():
    """A loop whose tensors are small runs its condition and body on the CPU whatever the delegates (each iteration
    on the device would be a round trip), each node through its op's prepared step (Op.cpu_step): LiteRT's
    values, the nodes reported on the CPU with the reason."""
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(F32)
    content = while_model()
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate("cl")])
    out = run(it, [x, np.array(5, I32)])
    ref = run_litert(content, [x, np.array(5, I32)])
    assert_float_close(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])
    body = it._run.subgraphs[2]
    assert all(body.backend_of.get(n.index, "cpu") == "cpu" and "a loop's condition or body" in body.why_cpu[n.index]
               for n in body.graph.nodes), (body.backend_of, body.why_cpu)
    assert sorted(body.resolved.nodes[n].op for n in body.prepared) == ["ADD", "ADD", "MUL"], body.prepared
    # the loop ran as one program (loop_program.py)
    assert [key[:2] for key, program in it._run._loops.items() if program is not None] == [(1, 2)], it._run._loops
    # called on its own, the body runs its prepared steps in one loop (SubgraphRun.only_prepared), and a kernel's
    # fault there still names its node
    assert body.only_prepared is not None and [n for n, _ in body.only_prepared] == body.steps, body.steps
    np.testing.assert_array_equal(it._run.call(2, [np.array(0, I32), x, np.array(5, I32)])[1], x * F32(0.5) + 1)
    at, _ = body.only_prepared[1]

    def broken(values: list) -> None:
        raise ValueError("a broken kernel")

    body.only_prepared[1] = (at, broken)
    fault = f"{body.resolved.nodes[at]} cannot run: ValueError: a broken kernel"
    with pytest.raises(gd.ModelError, match=re.escape(fault)):
        it._run.call(2, [np.array(0, I32), x, np.array(5, I32)])


def if_model() -> bytes:
    mb = ModelBuilder()
    then, other = mb.add_subgraph("then"), mb.add_subgraph("else")
    c = mb.input("c", [], np.bool_)
    x = mb.input("x", [3])
    y = mb.tensor("y", [3])
    mb.op("IF", [c, x], [y], then_subgraph_index=then, else_subgraph_index=other)
    mb.output(y)
    for index, op, k in ((then, "ADD", 1.0), (other, "MUL", 2.0)):
        mb.select(index)
        xi, yi = mb.input("x", [3]), mb.tensor("y", [3])
        mb.op(op, [xi, mb.const("k", np.array([k], F32))], [yi])
        mb.output(yi)
    return mb.build()


@pytest.mark.parametrize("cond", [True, False])
def test_if_matches_litert(cond):
    x = np.array([1.5, -2.0, 4.0], F32)
    inputs = [np.array(cond), x]
    ours, ref = run_ours(if_model(), inputs)[0], run_litert(if_model(), inputs)[0]
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(ours, x + 1 if cond else x * 2)


def variables_model() -> bytes:
    """CALL_ONCE(init: v = [1, 2]); y = v + x; v = y: a running sum kept across invokes."""
    mb = ModelBuilder()
    init = mb.add_subgraph("init")
    x = mb.input("x", [2])
    mb.op("CALL_ONCE", [], [], init_subgraph_index=init)
    h = mb.tensor("h", [], I32, type_name="RESOURCE")
    mb.op("VAR_HANDLE", [], [h], container="", shared_name="total")
    v, y = mb.tensor("v", [2]), mb.tensor("y", [2])
    mb.op("READ_VARIABLE", [h], [v])
    mb.op("ADD", [v, x], [y])
    mb.op("ASSIGN_VARIABLE", [h, y], [])
    mb.output(y)
    mb.select(init)
    hi = mb.tensor("h", [], I32, type_name="RESOURCE")
    mb.op("VAR_HANDLE", [], [hi], container="", shared_name="total")
    mb.op("ASSIGN_VARIABLE", [hi, mb.const("start", np.array([1, 2], F32))], [])
    return mb.build()


def test_resource_variables_persist_across_invokes_like_litert():
    content = variables_model()
    ours, ref = gd.Interpreter(model_content=content), litert_interpreter(content)
    for it in (ours, ref):
        it.allocate_tensors()
    for k in range(3):
        x = np.array([k, -k], F32)
        got = [it_run(it, x) for it in (ours, ref)]
        np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[0], np.array([1, 2], F32) + np.array([0 + 1 + 2, 0 - 1 - 2], F32))
    # READ_VARIABLE's output is dynamic: its shape is known once it has run
    assert [d["backend"] for d in ours.get_ops_details()] == ["cpu"] * 5


def it_run(it, x: np.ndarray) -> np.ndarray:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def open_batch_model() -> tuple[bytes, bytes]:
    """Flatten as the converter writes it for an open batch (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE) and the
    batch-1 twin with a constant shape, each followed by a dense layer."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((7, 48)).astype(F32)
    models = []
    for open_batch in (True, False):
        mb = ModelBuilder()
        x = mb.input("x", [1, 4, 4, 3], shape_signature=[-1, 4, 4, 3])
        r = mb.tensor("r", [1, 4, 4, 3])
        mb.op("RELU", [x], [r])
        flat = mb.tensor("flat", [1, 48], shape_signature=[-1, 48])
        if open_batch:
            shape, batch, packed = mb.tensor("shape", [4], I32), mb.tensor("batch", [], I32), mb.tensor("p", [2], I32)
            mb.op("SHAPE", [r], [shape], out_type=2)
            mb.op("STRIDED_SLICE", [shape, mb.const("b", np.array([0], I32)), mb.const("e", np.array([1], I32)),
                                    mb.const("s", np.array([1], I32))], [batch], shrink_axis_mask=1)
            mb.op("PACK", [batch, mb.const("c", np.array(48, I32))], [packed], values_count=2, axis=0)
            mb.op("RESHAPE", [r, packed], [flat])
        else:
            mb.op("RESHAPE", [r, mb.const("shape", np.array([-1, 48], I32))], [flat])
        y = mb.tensor("y", [1, 7], shape_signature=[-1, 7])
        mb.op("FULLY_CONNECTED", [flat, mb.const("w", w), -1], [y])
        mb.output(y)
        models.append(mb.build())
    return models[0], models[1]


@pytest.mark.parametrize("batch", [1, 3])
def test_shape_arithmetic_folds_and_delegates_like_the_batch_1_twin(batch, backend):
    open_model, fixed_model = open_batch_model()
    x = np.random.default_rng(batch).standard_normal((batch, 4, 4, 3)).astype(F32)
    shares = []
    for content in (open_model, fixed_model):
        it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
        out = run(it, [x])[0]
        assert_float_close(out, run_litert(content, [x])[0])
        ran = [d["backend"] for d in it.get_ops_details() if d["backend"] != "folded"]
        shares.append(ran)
    assert shares[0] == shares[1] == [backend] * 3  # RELU, RESHAPE, FULLY_CONNECTED: one partition each way
    folded = [d["op_name"] for d in gd.Interpreter(model_content=open_model).get_ops_details()
              if d["backend"] == "folded"]
    assert folded == ["SHAPE", "STRIDED_SLICE", "PACK"]


def test_scalars_stay_0_d():
    """STRIDED_SLICE with shrink_axis_mask gives a 0-d tensor, which PACK then stacks with a 0-d constant."""
    mb = ModelBuilder()
    v = mb.input("v", [5], I32)
    s, p = mb.tensor("s", [], I32), mb.tensor("p", [2], I32)
    mb.op("STRIDED_SLICE", [v, mb.const("b", np.array([2], I32)), mb.const("e", np.array([3], I32)),
                            mb.const("st", np.array([1], I32))], [s], shrink_axis_mask=1)
    mb.op("PACK", [s, mb.const("c", np.array(9, I32))], [p], values_count=2, axis=0)
    mb.output(s, p)
    content = mb.build()
    v_in = np.array([4, 5, 6, 7, 8], I32)
    ours, ref = run_ours(content, [v_in]), run_litert(content, [v_in])
    for o, r in zip(ours, ref):
        assert o.shape == r.shape
        np.testing.assert_array_equal(o, r)
    assert ours[0].shape == ()


def test_reshape_to_a_shape_computed_from_data_is_dynamic():
    """The new shape comes from an input's values: the output's shape is known after invoke, in the details too."""
    mb = ModelBuilder()
    x = mb.input("x", [2, 6])
    shape = mb.input("shape", [2], I32)
    y = mb.tensor("y", [1, 1])
    mb.op("RESHAPE", [x, shape], [y])
    mb.output(y)
    content = mb.build()
    x_in = np.arange(12, dtype=F32).reshape(2, 6)
    for target in ([3, 4], [12, 1]):
        inputs = [x_in, np.array(target, I32)]
        ours, ref = gd.Interpreter(model_content=content), litert_interpreter(content)
        got, want = run(ours, inputs)[0], run(ref, inputs)[0]
        np.testing.assert_array_equal(got, want)
        assert list(ours.get_output_details()[0]["shape"]) == target == list(ref.get_output_details()[0]["shape"])


def test_signatures_of_two_subgraphs():
    """Each signature runs its own subgraph, as LiteRT's SignatureRunner does."""
    mb = ModelBuilder()
    x = mb.input("x", [2])
    y = mb.tensor("y", [2])
    mb.op("ADD", [x, mb.const("one", np.array([1, 1], F32))], [y])
    mb.output(y)
    mb.add_signature("add_one", {"x": x}, {"y": y})
    sub = mb.add_subgraph("double")
    mb.select(sub)
    a = mb.input("a", [2])
    b = mb.tensor("b", [2])
    mb.op("MUL", [a, mb.const("two", np.array([2, 2], F32))], [b])
    mb.output(b)
    mb.add_signature("double", {"a": a}, {"b": b}, subgraph=sub)
    content = mb.build()
    ours, ref = gd.Interpreter(model_content=content), litert_interpreter(content)
    assert ours.get_signature_list() == ref.get_signature_list()
    v = np.array([3.0, -1.5], F32)
    for key, name, out in (("add_one", "x", "y"), ("double", "a", "b")):
        got = ours.get_signature_runner(key)(**{name: v})[out]
        want = ref.get_signature_runner(key)(**{name: v})[out]
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ours.get_tensor(b, subgraph_index=sub), v * 2)
    assert ours.num_subgraphs() == ref.num_subgraphs() == 2


def test_subgraphs_calling_each_other_forever_fail_cleanly():
    """A WHILE whose body runs the WHILE's own subgraph: a ModelError, not a stack overflow or a hang."""
    mb = ModelBuilder()
    cond = mb.add_subgraph("cond")
    x = mb.input("x", [1])
    y = mb.tensor("y", [1])
    mb.op("WHILE", [x], [y], cond_subgraph_index=cond, body_subgraph_index=0)
    mb.output(y)
    mb.select(cond)
    xi, go = mb.input("x", [1]), mb.tensor("go", [1], np.bool_)
    mb.op("LESS", [xi, mb.const("k", np.array([10], F32))], [go])
    mb.output(go)
    with pytest.raises(gd.ModelError, match="deep"):
        it = gd.Interpreter(model_content=mb.build())
        run(it, [np.zeros(1, F32)])
