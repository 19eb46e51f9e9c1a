"""RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL and MULTINOMIAL: LiteRT's own numbers for a given seed."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import litert_interpreter, run_litert, run_ours


def random_model(op: str, shape, seed: int, seed2: int, const_shape=True, version=1) -> bytes:
    mb = ModelBuilder()
    s = mb.const("shape", np.array(shape, np.int32)) if const_shape else mb.input("shape", [len(shape)], np.int32)
    y = mb.tensor("y", shape)
    mb.op(op, [s], [y], version=version, seed=seed, seed2=seed2)
    mb.output(y)
    return mb.build()


def multinomial_model(batch: int, classes: int, samples: int, seed: int, seed2: int, out_type=np.int64) -> bytes:
    mb = ModelBuilder()
    logits = mb.input("logits", [batch, classes])
    n = mb.const("n", np.array(samples, np.int32))
    y = mb.tensor("y", [batch, samples], out_type)
    mb.op("MULTINOMIAL", [logits, n], [y], seed=seed, seed2=seed2)
    mb.output(y)
    return mb.build()


def invokes(content: bytes, inputs: list[np.ndarray], count: int) -> list[list[np.ndarray]]:
    """Outputs of `count` invokes in a row, from LiteRT and from ours."""
    results = []
    for it in (litert_interpreter(content), gd.Interpreter(model_content=content)):
        for d, x in zip(it.get_input_details(), inputs):
            it.resize_tensor_input(d["index"], x.shape)
        it.allocate_tensors()
        seq = []
        for _ in range(count):
            for d, x in zip(it.get_input_details(), inputs):
                it.set_tensor(d["index"], x)
            it.invoke()
            seq.append(it.get_tensor(it.get_output_details()[0]["index"]))
        results.append(seq)
    return results


@pytest.mark.parametrize("shape", [(3, 5), (7,), (2, 3, 3)])
@pytest.mark.parametrize("seed,seed2", [(7, 11), (0, 5), (-3, 0), (123456789012, 987654321098)])
def test_random_uniform_is_litert_bit_for_bit(shape, seed, seed2):
    ref, ours = invokes(random_model("RANDOM_UNIFORM", shape, seed, seed2), [], 3)
    for r, o in zip(ref, ours):
        np.testing.assert_array_equal(o, r)
    assert not np.array_equal(ref[0], ref[1])  # the stream goes on from invoke to invoke


@pytest.mark.parametrize("shape", [(3, 5), (7,), (2, 3, 3)])
@pytest.mark.parametrize("seed,seed2", [(7, 11), (0, 5), (42, 0)])
def test_random_standard_normal(shape, seed, seed2):
    ref, ours = invokes(random_model("RANDOM_STANDARD_NORMAL", shape, seed, seed2), [], 3)
    for r, o in zip(ref, ours):  # sin, cos and log in float32 may differ in the last bit
        np.testing.assert_allclose(o, r, rtol=1e-6, atol=1e-6)


def test_random_shape_from_a_tensor():
    content = random_model("RANDOM_UNIFORM", (4, 2), 5, 6, const_shape=False)
    ref, ours = invokes(content, [np.array([3, 4], np.int32)], 2)
    for r, o in zip(ref, ours):
        np.testing.assert_array_equal(o, r)


@pytest.mark.parametrize("batch,classes,samples", [(2, 5, 7), (3, 1, 4), (1, 11, 33)])
@pytest.mark.parametrize("out_type", [np.int64, np.int32])
def test_multinomial(batch, classes, samples, out_type):
    logits = np.random.default_rng(0).standard_normal((batch, classes)).astype(np.float32) * 2
    logits[0, 0] = -np.inf  # an impossible class
    content = multinomial_model(batch, classes, samples, 3, 4, out_type)
    ref, ours = invokes(content, [logits], 3)
    for r, o in zip(ref, ours):
        assert o.dtype == r.dtype
        np.testing.assert_array_equal(o, r)


def test_unseeded_random_differs_between_interpreters():
    content = random_model("RANDOM_UNIFORM", (16,), 0, 0)
    a, b = (gd.Interpreter(model_content=content) for _ in range(2))
    outs = []
    for it in (a, b):
        it.allocate_tensors()
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert not np.array_equal(*outs) and all(((o >= 0) & (o < 1)).all() for o in outs)


def test_random_rejects_newer_version():
    with pytest.raises(gd.ModelError, match=r"RANDOM_UNIFORM.*version 2"):
        gd.Interpreter(model_content=random_model("RANDOM_UNIFORM", (3,), 1, 2, version=2))


@pytest.mark.parametrize("algorithm,state", [("PHILOX", [12345, 678]), ("DEFAULT", [1, 2, 3]),
                                             ("THREEFRY", [0xFFFFFFFFFFFF, 0xFFFFFFFF])])
@pytest.mark.parametrize("dtype,shape", [(np.uint32, (3, 5)), (np.int64, (7,)), (np.int32, (2, 3, 3)),
                                         (np.uint64, (5,))])
def test_stablehlo_rng_bit_generator(algorithm, state, dtype, shape):
    mb = ModelBuilder()
    s = mb.input("state", [len(state)], np.uint64)
    new_state = mb.tensor("new_state", [len(state)], np.uint64)
    bits = mb.tensor("bits", shape, dtype)
    mb.op("STABLEHLO_RNG_BIT_GENERATOR", [s], [new_state, bits], algorithm=algorithm)
    mb.output(new_state, bits)
    content = mb.build()
    x = np.array(state, np.uint64)
    ref, ours = run_litert(content, [x]), run_ours(content, [x])
    for o, r in zip(ours, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_array_equal(o, r)
