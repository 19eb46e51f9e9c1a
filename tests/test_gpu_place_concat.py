"""Issue 21: channel concatenations whose parts their producers write in place (lowering/place_concat.py), on cl and
gl, fp32 and fp16 storage, batch 1 and 2, against LiteRT: DenseNet-like blocks (each layer's output joined onto the
growing map, concatenations nested), odd channel counts, 8-bit parts on the output's grid (placed) and on another
grid (declined: a rescaling uint8 concat). Also which concatenations the pass declines, and why."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.lowering import fuse_elementwise, place_concat
from gpu_delegate.lowering.view import PartitionView
from gpu_delegate.ops import get_op
from gpu_delegate.tflite.reader import read_model
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, plan_of, run, run_litert, shared_delegate

SAME1 = {"padding": "SAME", "stride_w": 1, "stride_h": 1}


def gpu_run(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False
            ) -> tuple[list[np.ndarray], gd.Interpreter]:
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend, fp16)])
    outs = run(it, inputs)
    assert {d["backend"] for d in it.get_ops_details()} == {backend}, it.cpu_reasons()
    return outs, it



def placed_notes(it: gd.Interpreter) -> list[str]:
    return [n for n in plan_of(it).notes if "written in place" in n]


def dense_block(batch: int, c0: int, growth: int, layers: int, seed: int = 0, part_out: bool = False
                ) -> tuple[bytes, list[np.ndarray]]:
    """x -> 1x1 conv (c0 channels) -> ``layers`` dense layers (per-channel MUL, ADD, RELU -> 1x1 conv RELU -> 3x3
    conv to ``growth`` channels, joined onto the map) -> 1x1 conv. ``part_out``: the first layer's output is an
    output of the model too."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    h, w = 7, 6
    x = mb.input("x", (batch, h, w, 5))

    def conv(src: int, cin: int, cout: int, k: int, name: str, act: str = "NONE") -> int:
        wt = mb.const(f"{name}_w", (rng.standard_normal((cout, k, k, cin)) / np.sqrt(k * k * cin)).astype(np.float32))
        b = mb.const(f"{name}_b", rng.standard_normal(cout).astype(np.float32) * 0.1)
        y = mb.tensor(name, (batch, h, w, cout))
        mb.op("CONV_2D", [src, wt, b], [y], fused_activation_function=act, **SAME1)
        return y

    cur, c = conv(x, 5, c0, 1, "stem"), c0
    first_part = -1
    for k in range(layers):
        scale = mb.const(f"bn{k}_scale", rng.uniform(0.5, 1.5, c).astype(np.float32))
        shift = mb.const(f"bn{k}_shift", rng.standard_normal(c).astype(np.float32) * 0.2)
        mul = mb.tensor(f"bn{k}_mul", (batch, h, w, c))
        mb.op("MUL", [cur, scale], [mul])
        add = mb.tensor(f"bn{k}_add", (batch, h, w, c))
        mb.op("ADD", [mul, shift], [add], fused_activation_function="RELU")
        bottleneck = conv(add, c, 8, 1, f"l{k}_1x1", act="RELU")
        part = conv(bottleneck, 8, growth, 3, f"l{k}_3x3")
        first_part = part if k == 0 else first_part
        joined = mb.tensor(f"concat{k}", (batch, h, w, c + growth))
        mb.op("CONCATENATION", [cur, part], [joined], axis=3)
        cur, c = joined, c + growth
    mb.output(conv(cur, c, 6, 1, "head"), *([first_part] if part_out else []))
    return mb.build(), [rng.standard_normal((batch, h, w, 5)).astype(np.float32)]


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("batch, c0, growth, layers, placed", [
    (1, 8, 4, 3, 3),  # every concatenation of the block in one buffer
    (2, 12, 8, 3, 3),  # batch 2: each batch's parts lie in its own run of slices
    (2, 8, 5, 2, 1),  # 13 channels: the second layer's concatenation would start mid-slice, declined
    (1, 6, 3, 1, 0),  # 6 channels first: declined
])
def test_dense_block(backend, fp16, batch, c0, growth, layers, placed):
    content, inputs = dense_block(batch, c0, growth, layers)
    if fp16:
        inputs = [x.astype(np.float16).astype(np.float32) for x in inputs]
    ref = run_litert(content, inputs)
    outs, it = gpu_run(content, inputs, backend, fp16)
    assert_float_close(outs[0], ref[0], 2e-2 if fp16 else 2e-5, what=f"{backend} output")
    assert len(placed_notes(it)) == placed, plan_of(it).notes
    concat_kernels = sum(k.kernel == "concat" for k in plan_of(it).kernels)
    assert concat_kernels == layers - placed


def test_part_leaving_the_partition(backend):
    """A part that is also an output of the model is downloaded as a tensor of its own: declined."""
    content, inputs = dense_block(1, 8, 4, 2, part_out=True)
    ref = run_litert(content, inputs)
    outs, it = gpu_run(content, inputs, backend)
    for o, r in zip(outs, ref, strict=True):
        assert_float_close(o, r, 2e-5)
    assert len(placed_notes(it)) == 1, plan_of(it).notes  # the second concatenation's parts are both inside


def quantized_block(dtype: type, batch: int, part_scale: float, seed: int = 3) -> tuple[bytes, list[np.ndarray]]:
    """8-bit: x -> 1x1 conv (8 channels, grid S) -> 3x3 conv (5 channels, grid ``part_scale``) -> CONCATENATION of
    the two on grid S -> 1x1 conv. TFLite's uint8 concatenation rescales a part on another grid (its int8 one
    requires one grid)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    mid = 0 if dtype == np.int8 else 128
    mb = ModelBuilder()
    h, w = 6, 5
    s, zp = 0.04, mid - 3
    x = mb.input("x", (batch, h, w, 6), dtype, scale=0.05, zero_point=mid + 2)

    def conv(src: int, in_scale: float, cin: int, cout: int, k: int, name: str, scale: float, zero: int) -> int:
        w_scale = 1.0 / (60 * np.sqrt(k * k * cin))
        codes = rng.integers(max(info.min, -127), info.max + 1, (cout, k, k, cin)).astype(dtype)
        wt = mb.const(f"{name}_w", codes, scale=w_scale, zero_point=mid)
        b = mb.const(f"{name}_b", rng.integers(-300, 300, cout).astype(np.int32), scale=in_scale * w_scale,
                     zero_point=0)
        y = mb.tensor(name, (batch, h, w, cout), dtype, scale=scale, zero_point=zero)
        mb.op("CONV_2D", [src, wt, b], [y], version=3 if dtype == np.int8 else 1, **SAME1)
        return y

    stem = conv(x, 0.05, 6, 8, 1, "stem", s, zp)
    part = conv(stem, s, 8, 5, 3, "part", part_scale, zp if part_scale == s else mid + 4)
    joined = mb.tensor("concat", (batch, h, w, 13), dtype, scale=s, zero_point=zp)
    mb.op("CONCATENATION", [stem, part], [joined], axis=3)
    mb.output(conv(joined, s, 13, 7, 1, "head", 0.03, mid + 1))
    return mb.build(), [rng.integers(info.min, info.max + 1, (batch, h, w, 6)).astype(dtype)]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("dtype, part_scale, placed", [(np.int8, 0.04, 1), (np.uint8, 0.04, 1),
                                                       (np.uint8, 0.07, 0)])
def test_quantized_parts(backend, batch, dtype, part_scale, placed):
    """Parts on the output's grid are placed; a part on another grid is declined (the concatenation rescales it)."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    content, inputs = quantized_block(dtype, batch, part_scale)
    # LiteRT's kernels round some requantizations differently from one another (test_gpu_quantized.py): a value
    # is right when it matches one of them. XNNPACK refuses a rescaling concatenation.
    refs = [run(litert.Interpreter(model_content=content, num_threads=1, experimental_op_resolver_type=litert.
                                   OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES), inputs)[0],
            run_litert(content, inputs, reference_kernels=True)[0]]
    if part_scale == 0.04:
        refs.append(run_litert(content, inputs)[0])
    assert refs[0].std() > 2, "the reference is degenerate"
    (out,), it = gpu_run(content, inputs, backend)
    diff = np.min([np.abs(out.astype(np.int64) - r.astype(np.int64)) for r in refs], axis=0)
    # within one step; the rescaled part (declined: the concat kernel, unchanged) rounds once more than TFLite's
    assert diff.max() <= 1 and np.mean(diff == 0) >= (0.99 if placed else 0.95), \
        f"{backend}: {diff.max()} steps, {np.mean(diff == 0):.2%} equal"
    assert len(placed_notes(it)) == placed, plan_of(it).notes


def declined(content: bytes) -> list[str]:
    """What place_concat declines on the whole graph as one partition, after fuse_elementwise (as the pipeline)."""
    graph = read_model(content).main
    ops = {n.index: get_op(n.op) for n in graph.nodes}
    view = PartitionView(graph, [n.index for n in graph.nodes], {t.index: t.shape for t in graph.tensors},
                         list(graph.inputs), list(graph.outputs), ops=ops)  # type: ignore[arg-type]
    fuse_elementwise.run(view, True, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}")
    return place_concat.run(view).declined


def two_convs_joined(axis: int = 3, act: str = "NONE", twice: bool = False, const_part: bool = False,
                     relu_after: bool = False, part_read_elsewhere: bool = False, add_after: bool = False) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    parts = []
    for k in range(2):
        y = mb.tensor(f"y{k}", (1, 4, 4, 4))
        mb.op("CONV_2D", [x, mb.const(f"w{k}", np.ones((4, 1, 1, 3), np.float32)), -1], [y], **SAME1)
        parts.append(y)
    if twice:
        parts[1] = parts[0]
    if const_part:
        parts[1] = mb.const("c", np.ones((1, 4, 4, 4), np.float32))
    shape = [1, 4, 4, 4]
    shape[axis] *= 2
    joined = mb.tensor("joined", shape)
    mb.op("CONCATENATION", parts, [joined], axis=axis, fused_activation_function=act)
    out = joined
    if relu_after:
        out = mb.tensor("relu", shape)
        mb.op("RELU", [joined], [out])
    if add_after:
        out = mb.tensor("add", shape)
        mb.op("ADD", [joined, mb.const("shift", np.ones(shape[-1], np.float32))], [out])
    if part_read_elsewhere:
        extra = mb.tensor("extra", (1, 4, 4, 4))
        mb.op("RELU", [parts[0]], [extra])
        mb.output(extra)
    mb.output(out)
    return mb.build()


@pytest.mark.parametrize("case, reason", [
    ({"axis": 2}, "an axis other than the channels"),
    ({"act": "RELU"}, "a fused activation"),
    ({"twice": True}, "joined more than once"),
    ({"const_part": True}, "is a constant"),
    ({"relu_after": True, "part_read_elsewhere": True}, "read elsewhere too"),
    ({"add_after": True}, "an elementwise step with an operand"),
])
def test_declines(case, reason):
    (why,) = declined(two_convs_joined(**case))
    assert reason in why, why


@pytest.mark.parametrize("case", [{}, {"relu_after": True}])
def test_fires_on_two_convs(case):
    assert declined(two_convs_joined(**case)) == []


def joined_then_relu(batch: int, channels: tuple[int, int], seed: int = 4) -> tuple[bytes, list[np.ndarray]]:
    """x -> two 3x3 convs (read by the concatenation alone) -> CONCATENATION -> RELU6 -> 1x1 conv: the RELU6,
    fused after the concatenation, goes into each part's producer."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    h, w = 5, 7
    x = mb.input("x", (batch, h, w, 3))
    parts = []
    for k, c in enumerate(channels):
        y = mb.tensor(f"y{k}", (batch, h, w, c))
        mb.op("CONV_2D", [x, mb.const(f"w{k}", rng.standard_normal((c, 3, 3, 3)).astype(np.float32)),
                          mb.const(f"b{k}", rng.standard_normal(c).astype(np.float32))], [y], **SAME1)
        parts.append(y)
    total = sum(channels)
    joined = mb.tensor("joined", (batch, h, w, total))
    mb.op("CONCATENATION", parts, [joined], axis=3)
    relu = mb.tensor("relu6", (batch, h, w, total))
    mb.op("RELU6", [joined], [relu])
    out = mb.tensor("out", (batch, h, w, 4))
    mb.op("CONV_2D", [relu, mb.const("wo", rng.standard_normal((4, 1, 1, total)).astype(np.float32)),
                      mb.const("bo", np.zeros(4, np.float32))], [out], **SAME1)
    mb.output(out)
    return mb.build(), [rng.standard_normal((batch, h, w, 3)).astype(np.float32)]


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("batch, channels", [(1, (8, 4)), (2, (4, 7))])
def test_activation_after_the_join(backend, fp16, batch, channels):
    content, inputs = joined_then_relu(batch, channels)
    if fp16:
        inputs = [x.astype(np.float16).astype(np.float32) for x in inputs]
    (ref,) = run_litert(content, inputs)
    (out,), it = gpu_run(content, inputs, backend, fp16)
    assert_float_close(out, ref, 2e-2 if fp16 else 2e-5, what=f"{backend} output")
    notes = placed_notes(it)
    assert len(notes) == 1 and "each applying the" in notes[0], plan_of(it).notes
    assert {k.kernel for k in plan_of(it).kernels} == {"conv2d", "conv2d_1x1"}


@pytest.mark.parametrize("batch", [1, 2])
def test_part_read_by_a_depthwise_convolution(backend, batch):
    """A part written in place is also read by a 3x3 depthwise convolution with padding: on a CPU's OpenCL, its
    edge work items load across a row's ends and zero the columns outside (opencl/depthwise_conv2d.cl), through
    the placed tensor's buffer index, never across a batch (batch 2: each batch's slices lie apart)."""
    rng = np.random.default_rng(8)
    mb = ModelBuilder()
    h, w = 6, 9
    x = mb.input("x", (batch, h, w, 8))
    parts = []
    for name, cout in (("a", 8), ("b", 4)):
        y = mb.tensor(name, (batch, h, w, cout))
        mb.op("CONV_2D", [x, mb.const(f"{name}_w", rng.standard_normal((cout, 1, 1, 8)).astype(np.float32)),
                          mb.const(f"{name}_b", rng.standard_normal(cout).astype(np.float32))], [y], **SAME1)
        parts.append(y)
    joined = mb.tensor("joined", (batch, h, w, 12))
    mb.op("CONCATENATION", parts, [joined], axis=3)
    head = mb.tensor("head", (batch, h, w, 3))
    mb.op("CONV_2D", [joined, mb.const("h_w", rng.standard_normal((3, 1, 1, 12)).astype(np.float32)),
                      mb.const("h_b", np.zeros(3, np.float32))], [head], **SAME1)
    dw = mb.tensor("dw", (batch, h, w, 8))
    mb.op("DEPTHWISE_CONV_2D", [parts[0], mb.const("d_w", rng.standard_normal((1, 3, 3, 8)).astype(np.float32)),
                                mb.const("d_b", np.zeros(8, np.float32))], [dw], depth_multiplier=1, **SAME1)
    mb.output(head, dw)
    content = mb.build()
    inputs = [rng.standard_normal((batch, h, w, 8)).astype(np.float32)]
    ref = run_litert(content, inputs)
    outs, it = gpu_run(content, inputs, backend)
    for o, r in zip(outs, ref, strict=True):
        assert_float_close(o, r, 2e-5, what=f"{backend} batch {batch}")
    assert len(placed_notes(it)) == 1, plan_of(it).notes
