"""bool and int32 tensors on the GPU (issue 16): comparisons, LOGICAL_AND/OR/NOT, SELECT, SELECT_V2 and CAST on
cl and gl, fp32 and fp16 storage, against LiteRT. bool lives on the device as a float lane of 1.0 / 0.0 and int32
as a float32 lane (stored in float32 even under fp16 storage); the user gets bool and int32 arrays back, equal to
LiteRT's."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .parity_models import MODELS, run_gpu
from .reference import assert_float_close, on_cpu_opencl, plan_of, run, run_litert, run_wholly_on_gpu, shared_delegate

COMPARES = ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")


def expect(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool) -> None:
    ref = run_litert(content, inputs)
    ours = run_gpu(content, inputs, backend, fp16)
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == r.dtype and o.shape == r.shape, f"output {k}: {o.dtype}{o.shape} vs {r.dtype}{r.shape}"
        if r.dtype.kind == "f":
            assert_float_close(o, r, 1e-3 if fp16 else 1e-6, what=f"output {k}")
        else:
            np.testing.assert_array_equal(o, r, err_msg=f"output {k}")


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("name", [n for n in MODELS if n.split()[0] in (*COMPARES, "LOGICAL_AND", "LOGICAL_OR",
                                                                       "LOGICAL_NOT", "SELECT", "SELECT_V2", "CAST")])
def test_single_op_models(backend, name, fp16):
    content, inputs = MODELS[name]()
    if fp16 and inputs[0].dtype == np.float32:  # values fp16 holds exactly: the comparison sees what LiteRT sees
        inputs = [x.astype(np.float16).astype(np.float32) if x.dtype == np.float32 else x for x in inputs]
    expect(content, inputs, backend, fp16)


def chain_model() -> tuple[bytes, list[np.ndarray]]:
    """A graph where bool and int32 flow between GPU ops: int32 compare, float compare against a constant, logic,
    CAST back to float and to int32, SELECT_V2 of int32 values with a broadcast constant, and odd channels."""
    mb = ModelBuilder()
    shape = (3, 2, 4, 5)
    x = mb.input("x", shape)
    k = mb.input("k", (1, 1, 4, 1), np.int32)
    n = mb.input("n", shape, np.int32)
    ge = mb.tensor("ge", shape, np.bool_)
    mb.op("GREATER_EQUAL", [n, k], [ge])
    lt = mb.tensor("lt", shape, np.bool_)
    mb.op("LESS", [x, mb.const("half", np.float32(0.5))], [lt])
    both = mb.tensor("both", shape, np.bool_)
    mb.op("LOGICAL_AND", [ge, lt], [both])
    either = mb.tensor("either", shape, np.bool_)
    mb.op("LOGICAL_OR", [both, mb.const("row", np.array([True, False, False, True, False]))], [either])
    f = mb.tensor("f", shape)
    mb.op("CAST", [either], [f])
    scaled = mb.tensor("scaled", shape)
    mb.op("MUL", [f, x], [scaled])
    big = mb.tensor("big", shape, np.int32)
    mb.op("SELECT_V2", [either, n, mb.const("million", np.array([1_000_003, -70_001, 5, 4099, 2049], np.int32))],
          [big])
    trunc = mb.tensor("trunc", shape, np.int32)
    mb.op("CAST", [scaled], [trunc])
    mb.output(either, scaled, big, trunc)
    rng = np.random.default_rng(3)
    inputs = [(rng.standard_normal(shape) * 3).astype(np.float32), rng.integers(-3, 4, (1, 1, 4, 1)).astype(np.int32),
              rng.integers(-100_000, 100_000, shape).astype(np.int32)]
    return mb.build(), inputs


@pytest.mark.parametrize("fp16", [False, True])
def test_bool_and_int_chain(backend, fp16):
    content, inputs = chain_model()
    if fp16:
        inputs[0] = inputs[0].astype(np.float16).astype(np.float32)
    expect(content, inputs, backend, fp16)


def test_int32_inputs_beyond_float_exactness_run_on_the_cpu(backend):
    content, _ = MODELS["SELECT_V2 int32"]()
    rng = np.random.default_rng(5)
    shape = (2, 3, 5, 7)
    inputs = [rng.integers(0, 2, shape).astype(bool), np.full(shape, (1 << 24) + 1, np.int32),
              rng.integers(-9, 9, shape).astype(np.int32)]
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    np.testing.assert_array_equal(run(it, inputs)[0], run_litert(content, inputs)[0])


def embedding_model(vocab: int = 37, dim: int = 6, length: int = 9, ids_out: bool = True) -> bytes:
    """Keras 3's Embedding as the converter writes it: negative token ids wrap (LESS, ADD of the vocabulary,
    SELECT), then GATHER from the constant table; with ``ids_out`` the wrapped ids are an output too."""
    mb = ModelBuilder()
    ids = mb.input("ids", [1, length], np.int32)
    negative, wrapped, index = (mb.tensor(n, [1, length], t) for n, t in (("negative", np.bool_),
                                                                            ("wrapped", np.int32),
                                                                            ("index", np.int32)))
    mb.op("LESS", [ids, mb.const("zero", np.array(0, np.int32))], [negative])
    mb.op("ADD", [ids, mb.const("vocab", np.array(vocab, np.int32))], [wrapped])
    mb.op("SELECT_V2", [negative, wrapped, ids], [index])
    table = mb.const("table", np.random.default_rng(8).standard_normal((vocab, dim)).astype(np.float32))
    vectors = mb.tensor("vectors", [1, length, dim])
    mb.op("GATHER", [table, index], [vectors], axis=0)
    if ids_out:
        mb.output(vectors, index)
    else:
        mb.output(vectors)
    return mb.build()


@pytest.mark.parametrize("fp16", [False, True])
def test_an_embedding_runs_wholly_on_the_gpu(backend, fp16):
    """The int32 ADD of a graph input and a small constant runs on the GPU (float lanes are exact while the
    input stays within 2^24 - 2^16, which the invoke checks), and so the whole lookup does."""
    ids = np.array([[0, 5, -1, 36, -37, 12, -20, 7, 1]], np.int32)
    expect(embedding_model(), [ids], backend, fp16)


@pytest.mark.parametrize("fp16", [False, True])
def test_an_embeddings_index_wrap_is_the_gathers_own(backend, fp16):
    """Where only the GATHER reads the wrapped ids, the LESS, ADD and SELECT fold into its index reads
    (lowering/fuse_index_wrap.py): one kernel, the same vectors as LiteRT for ids in [-vocab, vocab)."""
    content = embedding_model(ids_out=False)
    ids = np.array([[0, 5, -1, 36, -37, 12, -20, 7, 1]], np.int32)
    kernels, ours = run_wholly_on_gpu(content, [ids], backend, fp16)
    assert kernels == ["gather"]
    assert_float_close(ours[0], run_litert(content, [ids])[0], 1e-3 if fp16 else 0.0, what="vectors")


def test_a_cpus_opencl_copies_a_looked_up_row_per_work_item(backend):
    """On a CPU's OpenCL the lookup takes gather.dialect's ROWS form (a work item per id, every slice of its row),
    elsewhere a work item per vec4; LiteRT's vectors either way, 70 channels (a partial last slice)."""
    content = embedding_model(vocab=40, dim=70, length=11, ids_out=False)
    ids = np.array([[0, 5, -1, 36, -37, 12, -20, 7, 1, 39, -40]], np.int32)
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    ours = run(it, [ids])
    assert_float_close(ours[0], run_litert(content, [ids])[0], 0.0, what="vectors")
    (call,) = plan_of(it).kernels
    cpu = on_cpu_opencl(backend)
    assert bool(call.defines["ROWS"]) == cpu and call.grid == ((11, 1, 1) if cpu else (11, 1, 18)), call


def test_int32_added_to_beyond_its_bound_runs_on_the_cpu(backend, caplog):
    """An id past 2^24 - 2^16 (where the ADD's sum could leave float's exact range) sends the invoke to the CPU,
    with a warning naming the bound: 2^24 + 1, which float lanes would round to 2^24, comes back exact."""
    content = embedding_model(vocab=1 << 24)  # too large a constant: the ADD stays on the CPU
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    assert {d["backend"] for d in it.get_ops_details() if d["op_name"] == "ADD"} == {"cpu"}
    mb = ModelBuilder()
    ids = mb.input("ids", [1, 4], np.int32)
    y = mb.tensor("y", [1, 4], np.int32)
    mb.op("ADD", [ids, mb.const("c", np.array([3, -5, 65536, -65536], np.int32))], [y])
    mb.output(y)
    content = mb.build()
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    assert [d["backend"] for d in it.get_ops_details()] == [backend]
    big = np.array([[5, 0, (1 << 24) - (1 << 16) + 1, -3]], np.int32)
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        np.testing.assert_array_equal(run(it, [big])[0], [[8, -5, (1 << 24) + 1, -65539]])
    assert any(str((1 << 24) - (1 << 16)) in r.getMessage() for r in caplog.records), caplog.records
    small = np.array([[(1 << 24) - (1 << 16), -7, 9, 100]], np.int32)
    np.testing.assert_array_equal(run(it, [small])[0], run_litert(content, [small])[0])
    # one value (a loop's counter, checked by its item), broadcast against the constant
    mb = ModelBuilder()
    i = mb.input("i", [1], np.int32)
    y = mb.tensor("y", [4], np.int32)
    mb.op("ADD", [i, mb.const("c", np.array([3, -5, 65536, -65536], np.int32))], [y])
    mb.output(y)
    content = mb.build()
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    assert [d["backend"] for d in it.get_ops_details()] == [backend]
    caplog.clear()
    for value, warned in ((-(1 << 24) + (1 << 16) - 1, True), ((1 << 24) - (1 << 16), False), (-77, False)):
        with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
            got = run(it, [np.array([value], np.int32)])[0]
        np.testing.assert_array_equal(got, value + np.array([3, -5, 65536, -65536], np.int64))
        assert any("beyond" in r.getMessage() for r in caplog.records) == warned, (value, caplog.records)
        caplog.clear()


def test_shape_arithmetic_stays_on_the_cpu(backend):
    """int32 computed from SHAPE (slices, joins of it) is the interpreter's shape work: it is folded at allocation
    rather than moved into a GPU partition, and the data ops after it, the RESHAPE included, run on the GPU."""
    mb = ModelBuilder()
    x = mb.input("x", (2, 3, 4, 5))
    s = mb.tensor("s", (4,), np.int32)
    mb.op("SHAPE", [x], [s], out_type=2)  # INT32
    head = mb.tensor("head", (2,), np.int32)
    mb.op("STRIDED_SLICE", [s, *(mb.const(n, np.array([v], np.int32)) for n, v in (("b", 0), ("e", 2), ("st", 1)))],
          [head])
    new_shape = mb.tensor("new_shape", (3,), np.int32)
    mb.op("CONCATENATION", [head, mb.const("rest", np.array([-1], np.int32))], [new_shape], axis=0)
    y = mb.tensor("y", (2, 3, 20))
    mb.op("RESHAPE", [x, new_shape], [y])
    big = mb.tensor("big", (2, 3, 20), np.bool_)
    mb.op("GREATER", [y, mb.const("zero", np.float32(0))], [big])
    mb.output(big)
    content = mb.build()
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    where = {d["op_name"]: d["backend"] for d in it.get_ops_details()}
    assert where == {"SHAPE": "folded", "STRIDED_SLICE": "folded", "CONCATENATION": "folded", "RESHAPE": backend,
                     "GREATER": backend}
    x_value = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(it, [x_value])[0], run_litert(content, [x_value])[0])
