"""Issue 21: a per-channel elementwise chain (a pre-activation batch norm: MUL, ADD, RELU) applied by the 1x1
convolution that reads its result, as it reads it (lowering/fuse_input_chain.py), on cl and gl, fp32 and fp16
storage, batch 1 and 2, odd channel counts, int8 with its fake-quant steps, against LiteRT; and the chains it
declines, with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.lowering import fuse_elementwise, fuse_input_chain
from gpu_delegate.lowering.view import PartitionView
from gpu_delegate.ops import get_op
from gpu_delegate.tflite.reader import read_model
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, run, run_litert
from .test_gpu_place_concat import gpu_run, plan_of

SAME1 = {"padding": "SAME", "stride_w": 1, "stride_h": 1}


def fused_notes(it) -> list[str]:
    return [n for n in plan_of(it).notes if "into the input read of" in n]


def bn_conv(batch: int, c: int, cout: int, k: int = 1, stride: int = 1, also_out: bool = False, relu6: bool = False,
            seed: int = 0) -> tuple[bytes, list[np.ndarray]]:
    """x -> 3x3 conv (c channels) -> MUL by per-channel scale -> ADD per-channel shift (RELU or RELU6) -> k x k
    conv at ``stride`` to ``cout`` channels. ``also_out``: the chain's result is an output of the model too."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    h, w = 6, 7
    x = mb.input("x", (batch, h, w, 3))
    y = mb.tensor("y", (batch, h, w, c))
    mb.op("CONV_2D", [x, mb.const("w0", rng.standard_normal((c, 3, 3, 3)).astype(np.float32) / 5),
                      mb.const("b0", np.zeros(c, np.float32))], [y], **SAME1)
    mul = mb.tensor("mul", (batch, h, w, c))
    mb.op("MUL", [y, mb.const("scale", rng.uniform(0.5, 1.5, c).astype(np.float32))], [mul])
    add = mb.tensor("add", (batch, h, w, c))
    mb.op("ADD", [mul, mb.const("shift", rng.standard_normal(c).astype(np.float32) * 0.3)], [add],
          fused_activation_function="RELU6" if relu6 else "RELU")
    oh, ow = -(-h // stride), -(-w // stride)
    out = mb.tensor("out", (batch, oh, ow, cout))
    wt = mb.const("w1", (rng.standard_normal((cout, k, k, c)) / np.sqrt(k * k * c)).astype(np.float32))
    mb.op("CONV_2D", [add, wt, mb.const("b1", rng.standard_normal(cout).astype(np.float32))], [out],
          padding="SAME", stride_w=stride, stride_h=stride)
    # y an output too: read elsewhere, as DenseNet's concatenated map is, the chain is not fused into y's producer
    mb.output(out, y, *([add] if also_out else []))
    return mb.build(), [rng.standard_normal((batch, h, w, 3)).astype(np.float32)]


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("batch, c, cout, relu6", [(1, 8, 16, False), (2, 7, 5, True), (2, 13, 9, False)])
def test_fused_chain(backend, fp16, batch, c, cout, relu6):
    content, inputs = bn_conv(batch, c, cout, relu6=relu6)
    if fp16:
        inputs = [x.astype(np.float16).astype(np.float32) for x in inputs]
    ref = run_litert(content, inputs)
    outs, it = gpu_run(content, inputs, backend, fp16)
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        assert_float_close(o, r, 2e-2 if fp16 else 2e-5, what=f"{backend} output {k}")
    assert len(fused_notes(it)) == 1, plan_of(it).notes
    assert not any(k.kernel == "copy" for k in plan_of(it).kernels)


@pytest.mark.parametrize("case", ["3x3 window", "stride 2", "result is an output"])
def test_declined_still_right(backend, case):
    """A chain the pass leaves alone keeps its own kernel, and the model its answer."""
    kw = {"3x3 window": {"k": 3}, "stride 2": {"stride": 2}, "result is an output": {"also_out": True}}[case]
    content, inputs = bn_conv(2, 7, 5, **kw)
    ref = run_litert(content, inputs)
    outs, it = gpu_run(content, inputs, backend)
    for o, r in zip(outs, ref, strict=True):
        assert_float_close(o, r, 2e-5)
    assert fused_notes(it) == [], plan_of(it).notes


def int8_bn_conv(batch: int, c: int, seed: int = 5) -> tuple[bytes, list[np.ndarray]]:
    """int8: x -> MUL by per-channel int8 constants -> ADD of per-channel int8 constants (RELU) -> 1x1 conv; each
    op on its own grid (so every step rounds)."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    h, w = 5, 6
    shape = (batch, h, w, c)
    x = mb.input("x", shape, np.int8, scale=0.05, zero_point=3)
    scale = mb.const("scale", rng.integers(30, 127, (1, 1, 1, c)).astype(np.int8), scale=0.012, zero_point=0)
    mul = mb.tensor("mul", shape, np.int8, scale=0.045, zero_point=-5)
    mb.op("MUL", [x, scale], [mul])  # reads the partition's input: a kernel of its own
    shift = mb.const("shift", rng.integers(-100, 100, (1, 1, 1, c)).astype(np.int8), scale=0.01, zero_point=0)
    add = mb.tensor("add", shape, np.int8, scale=0.03, zero_point=-128)
    mb.op("ADD", [mul, shift], [add], fused_activation_function="RELU")
    w_scale = 1.0 / (60 * np.sqrt(c))
    wt = mb.const("w", rng.integers(-127, 128, (6, 1, 1, c)).astype(np.int8), scale=w_scale, zero_point=0)
    b = mb.const("b", rng.integers(-300, 300, 6).astype(np.int32), scale=0.03 * w_scale, zero_point=0)
    out = mb.tensor("out", (batch, h, w, 6), np.int8, scale=0.02, zero_point=2)
    mb.op("CONV_2D", [add, wt, b], [out], version=3, **SAME1)
    mb.output(out)
    return mb.build(), [rng.integers(-128, 128, shape).astype(np.int8)]


@pytest.mark.parametrize("batch, c", [(1, 8), (2, 11)])
def test_int8_chain(backend, batch, c):
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    content, inputs = int8_bn_conv(batch, c)
    # LiteRT's kernels round some requantizations differently from one another: a value is right when it
    # matches one of them (as test_gpu_quantized.py)
    refs = [run_litert(content, inputs)[0], run_litert(content, inputs, reference_kernels=True)[0],
            run(litert.Interpreter(model_content=content, num_threads=1, experimental_op_resolver_type=litert.
                                   OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES), inputs)[0]]
    assert refs[0].std() > 2, "the reference is degenerate"
    (out,), it = gpu_run(content, inputs, backend)
    diff = np.min([np.abs(out.astype(np.int64) - r.astype(np.int64)) for r in refs], axis=0)
    # 4 of the 360 values of (2, 11) are a step off every reference, fused or not (the int8 MUL's rounding: the
    # fork point's package gives the same 4)
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.98, f"{backend}: {diff.max()} steps, {np.mean(diff == 0):.2%}"
    assert len(fused_notes(it)) == 1, plan_of(it).notes


def declined(content: bytes) -> list[str]:
    """What fuse_input_chain declines on the whole graph as one partition, after fuse_elementwise."""
    graph = read_model(content).main
    ops = {n.index: get_op(n.op) for n in graph.nodes}
    view = PartitionView(graph, [n.index for n in graph.nodes], {t.index: t.shape for t in graph.tensors},
                         list(graph.inputs), list(graph.outputs), ops=ops)  # type: ignore[arg-type]
    fuse_elementwise.run(view, True, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}")
    return fuse_input_chain.run(view, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}").declined


@pytest.mark.parametrize("kw, reason", [
    ({"k": 3}, "window is not 1x1 at stride 1"),
    ({"stride": 2}, "window is not 1x1 at stride 1"),
    ({"also_out": True}, "needed outside the partition"),
])
def test_declines(kw, reason):
    content, _ = bn_conv(1, 8, 4, **kw)
    (why,) = declined(content)
    assert reason in why, why


def test_declines_a_tensor_operand():
    """ADD of two computed tensors: its operand is no per-slice constant."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 8))
    z = mb.input("z", (1, 4, 4, 8))
    s = mb.tensor("sum", (1, 4, 4, 8))
    mb.op("ADD", [x, z], [s])
    out = mb.tensor("out", (1, 4, 4, 4))
    mb.op("CONV_2D", [s, mb.const("w", np.ones((4, 1, 1, 8), np.float32)), -1], [out], **SAME1)
    mb.output(out)
    (why,) = declined(mb.build())
    assert "reads more than one computed tensor" in why, why


def test_declines_past_the_buffer_limit():
    """A device binding at most 5 buffers: the convolution (src, dst, filter, bias) and the chain's two constants
    would need 6."""
    content, _ = bn_conv(1, 8, 4)
    graph = read_model(content).main
    ops = {n.index: get_op(n.op) for n in graph.nodes}
    view = PartitionView(graph, [n.index for n in graph.nodes], {t.index: t.shape for t in graph.tensors},
                         list(graph.inputs), list(graph.outputs), ops=ops)  # type: ignore[arg-type]
    fuse_elementwise.run(view, True, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}")
    result = fuse_input_chain.run(view, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}", max_buffers=5)
    (why,) = result.declined
    assert "more than the device's 5 buffers" in why, why
    assert fuse_input_chain.run(view, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}", max_buffers=6).applied
