"""The dialect's own kernels, which a GPU's OpenCL runs, on this machine's OpenCL device told that it is a GPU.

A CPU's OpenCL runs kernels/opencl/ versions of several kernels instead (LowerContext.cpu_opencl: the layer norm,
the softmaxes, the batch products, the embedding lookup's ROWS form), so the dialect's OpenCL C for them is
otherwise compiled and run only by a machine with a GPU. Here a private delegate's backend reports device type
"gpu" (and no integer dot products), every plan stays on it, and the models whose kernels have such a pair run
against LiteRT with the bounds their own tests use: float and int8 attention (scores and softmax in one kernel,
then the product by v), the int8 layer norm, a wide softmax, an embedding lookup, and the small ViT block as the
converter makes it in int8.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import assert_float_close, assert_quant_close, plan_of, run, run_litert, to_int8
from .test_gpu_batch_matmul import attention_model, int8_scores_model, values
from .test_gpu_bool_int import embedding_model
from .test_gpu_conv import Builder, squeeze_excite
from .test_gpu_layer_norm import inputs_for, int8_layer_norm_model

pytestmark = pytest.mark.usefixtures("one_device")

CONVERTER = Path(__file__).parent / "models" / "converter"


@pytest.fixture(scope="module")
def gpu_told() -> gd.GpuDelegate:
    """A cl delegate whose backend says it is a GPU: its plans take the dialect's kernels."""
    delegate = gd.GpuDelegate(backend="cl")
    assert delegate.backend is not None
    delegate.backend._info.update(device_type="gpu", int8_dot=False)  # type: ignore[attr-defined]
    return delegate


def run_told(delegate: gd.GpuDelegate, content: bytes, inputs: list[np.ndarray]) -> tuple[list[str], list]:
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate])
    outs = run(it, inputs)
    assert {d["backend"] for d in it.get_ops_details()} == {"cl"}
    return [k.kernel for k in plan_of(it).kernels], outs


def test_float_attention(gpu_told):
    content = attention_model(2, 9, 3, 13, (0, 2, 3, 1), scale=0.3)
    shape = (2, 9, 3, 13)
    inputs = [values(shape, 21), values(shape, 22) * 3, values(shape, 23)]
    kernels, outs = run_told(gpu_told, content, inputs)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what="dialect attention")


def test_int8_attention(gpu_told):
    shape = (1, 3, 9, 13)
    q, k, v = values(shape, 31), values(shape, 32) * 2, values(shape, 33)
    content, grids = int8_scores_model(3, 9, 13, 0.3, q, k, v)
    xs = [to_int8(x, g) for x, g in zip((q, k, v), grids)]
    kernels, outs = run_told(gpu_told, content, xs)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_quant_close(outs[0], run_litert(content, xs)[0], min_equal=0.95, max_steps=3, what="dialect int8 attention")


@pytest.mark.parametrize("with_beta", [False, True])
def test_int8_layer_norm(gpu_told, with_beta):
    shape = (3, 9, 13)
    samples = [inputs_for(shape, seed)[0] for seed in range(2)]
    content, qx = int8_layer_norm_model(shape, with_beta, True, samples)
    xs = [to_int8(samples[0], qx)]
    kernels, outs = run_told(gpu_told, content, xs)
    assert kernels == ["layer_norm"], kernels
    assert_quant_close(outs[0], run_litert(content, xs)[0], what="dialect int8 layer norm")


def test_wide_softmax_and_embedding_lookup(gpu_told):
    from gpu_delegate.tflite.writer import ModelBuilder

    mb = ModelBuilder()
    x = mb.input("x", (4, 64))
    y = mb.tensor("y", (4, 64))
    mb.op("SOFTMAX", [x], [y], beta=1.0)
    mb.output(y)
    content = mb.build()
    xs = [np.random.default_rng(5).uniform(-100.0, 0.0, (4, 64)).astype(np.float32)]
    _, outs = run_told(gpu_told, content, xs)
    assert_float_close(outs[0], run_litert(content, xs)[0], 1e-6, what="dialect softmax")
    content = embedding_model(vocab=40, dim=70, length=11, ids_out=False)
    ids = np.array([[0, 5, -1, 36, -37, 12, -20, 7, 1, 39, -40]], np.int32)
    it = gd.Interpreter(model_content=content, experimental_delegates=[gpu_told])
    outs = run(it, [ids])
    (call,) = plan_of(it).kernels
    assert not call.defines["ROWS"] and call.grid == (11, 1, 18), call  # a work item a vec4, as on a GPU
    assert_float_close(outs[0], run_litert(content, [ids])[0], 0.0, what="dialect embedding lookup")


def test_squeeze_excite_gate(gpu_told):
    """The gate's kernel in the dialect's form (a work item an output slice, weights [input slice][c][output slice])
    with the pixels of a slice summed in parts (16 channels over 40x40) and with more slices than work items (576
    -> 144), swish in the hidden layer."""
    b = Builder()
    for tag, hw, c, mid, hidden in (("plane", (40, 40), 16, 4, "RELU"), ("wide", (3, 3), 576, 144, "SWISH")):
        b.input(tag, [1, *hw, c])
        squeeze_excite(b, tag, tag, hw, c, mid=mid, hidden=hidden, gate="HARD")
    it = gd.Interpreter(model_content=b.build(), experimental_delegates=[gpu_told])
    outs = run(it, b.feeds)
    gates = [c for c in plan_of(it).kernels if c.kernel == "squeeze_excite"]
    assert len(gates) == 2 and not any(c.variants for c in gates), gates
    for o, r in zip(outs, run_litert(b.build(reference=True), b.feeds), strict=True):
        assert_float_close(o, r, 1e-4, what="dialect squeeze-and-excite")


def test_the_converters_int8_vit_block(gpu_told):
    path = CONVERTER / "vit_block_b1_int8io.tflite"
    content = path.read_bytes()
    it = gd.Interpreter(model_content=content, experimental_delegates=[gpu_told])
    it.allocate_tensors()
    (d,) = it.get_input_details()
    xs = [np.random.default_rng(0).integers(-128, 128, d["shape"]).astype(np.int8)]
    outs = run(it, xs)
    kernels = [k.kernel for k in plan_of(it).kernels]
    assert kernels.count("layer_norm") == 4 and kernels.count("batch_matmul_softmax") == 2, kernels
    # a whole int8 block of float-emulated steps: its 10 probabilities within converter_check's 3 steps of LiteRT,
    # as the CPU's own kernels are (2 steps apart on some inputs)
    assert_quant_close(outs[0], run_litert(content, xs)[0], min_equal=0.5, max_steps=3, what="dialect int8 ViT block")
