"""Reductions and softmax on the GPU (OpenCL and OpenGL ES) against LiteRT: MEAN, SUM, REDUCE_MAX/MIN/PROD
over any set of constant axes of rank 2 to 4 tensors, keep_dims both ways; SOFTMAX (beta) and LOG_SOFTMAX
over the channels; int8 models against LiteRT's reference kernels; fp16 storage; what stays on the CPU.
Every test asserts that the nodes ran on the GPU backend under test."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, need_models, on_cpu_opencl, plan_of, run, run_litert
from .reference import shared_delegate as delegate


def run_gpu(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False):
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, fp16)])
    outs = run(it, inputs)
    for d in it.get_ops_details():
        assert d["backend"] == backend, f"node {d['index']} ({d['op_name']}) ran on {d['backend']}"
    return it, outs


def reduced(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool) -> tuple[int, ...]:
    axes = {a % len(shape) for a in axes}
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)


def reduce_model(cases: list[tuple[str, int, tuple[int, ...], bool]], inputs: dict[str, tuple[int, ...]],
                 dtype=np.float32, q_in: dict | None = None, q_out: dict | None = None) -> bytes:
    """One output per case (op, input number, axes, keep_dims)."""
    mb = ModelBuilder()
    ids = [mb.input(name, shape, dtype, **(q_in or {})) for name, shape in inputs.items()]
    shapes = list(inputs.values())
    outs = []
    for k, (op, i, axes, keep) in enumerate(cases):
        a = mb.const(f"axes{k}", np.array(axes, np.int32))
        y = mb.tensor(f"{op.lower()}{k}", reduced(shapes[i], axes, keep), dtype, **(q_out or {}))
        mb.op(op, [ids[i], a], [y], keep_dims=keep)
        outs.append(y)
    mb.output(*outs)
    return mb.build()


# (op, input, axes, keep_dims): channels kept (one vec4 per work item) or reduced (lane by lane), batch
# reduced or not, ranks 2 to 4
FLOAT_CASES = [("MEAN", 0, (1, 2), False), ("SUM", 0, (3,), True), ("REDUCE_MAX", 0, (0, -1), False),
               ("REDUCE_MIN", 0, (1,), True), ("REDUCE_PROD", 0, (2, 3), False), ("MEAN", 0, (0, 1, 2, 3), True),
               ("MEAN", 1, (1, 2), False), ("REDUCE_MIN", 2, (1,), True), ("SUM", 3, (0, 2), False)]


def test_reductions(backend):
    inputs = {"x": (2, 3, 5, 7), "mobilenet_head": (1, 7, 7, 13), "r2": (6, 13), "r3": (3, 5, 13)}
    content = reduce_model(FLOAT_CASES, inputs)
    rng = np.random.default_rng(0)
    # positive and near 1 for the products, both signs elsewhere
    xs = [rng.uniform(0.6, 1.5, s).astype(np.float32) * rng.choice([-1, 1], s).astype(np.float32)
          for s in inputs.values()]
    ref = run_litert(content, xs)
    _, outs = run_gpu(content, xs, backend)
    for case, o, r in zip(FLOAT_CASES, outs, ref):
        assert_float_close(o, r, what=f"{case} on {backend}")


def softmax_model() -> tuple[bytes, list[tuple[int, ...]]]:
    """SOFTMAX with beta over 7 channels, batch 2, with a MUL fused into its writes; SOFTMAX over 1000
    channels (the MobileNet head); LOG_SOFTMAX over 13; SOFTMAX over 3 channels of a rank-3 tensor; a
    MEAN with an ADD fused into it."""
    shapes = [(2, 3, 5, 7), (1, 1000), (2, 13), (1, 4, 3)]
    mb = ModelBuilder()
    ids = [mb.input(f"x{k}", s) for k, s in enumerate(shapes)]
    s0 = mb.tensor("s0", shapes[0])
    mb.op("SOFTMAX", [ids[0]], [s0], beta=0.7)
    scaled = mb.tensor("scaled", shapes[0])
    mb.op("MUL", [s0, mb.const("ten", np.float32(10))], [scaled])
    s1, s2, s3 = (mb.tensor(f"s{k}", shapes[k]) for k in (1, 2, 3))
    mb.op("SOFTMAX", [ids[1]], [s1], beta=1.0)
    mb.op("LOG_SOFTMAX", [ids[2]], [s2])
    mb.op("SOFTMAX", [ids[3]], [s3], beta=2.0)
    mean = mb.tensor("mean", (2, 7))
    mb.op("MEAN", [ids[0], mb.const("hw", np.array([1, 2], np.int32))], [mean], keep_dims=False)
    shifted = mb.tensor("shifted", (2, 7))
    mb.op("ADD", [mean, mb.const("bias", np.arange(7, dtype=np.float32))], [shifted])
    mb.output(scaled, s1, s2, s3, shifted)
    return mb.build(), shapes


def test_softmax_and_fused_writes(backend):
    content, shapes = softmax_model()
    rng = np.random.default_rng(1)
    xs = [(rng.standard_normal(s) * 4).astype(np.float32) for s in shapes]
    ref = run_litert(content, xs)
    it, outs = run_gpu(content, xs, backend)
    for name, o, r in zip(["SOFTMAX*10", "SOFTMAX 1000", "LOG_SOFTMAX", "SOFTMAX beta 2", "MEAN+bias"], outs, ref):
        assert_float_close(o, r, what=f"{name} on {backend}")
    plan = plan_of(it)
    assert sorted(k.kernel for k in plan.kernels) == ["reduce", "softmax", "softmax", "softmax", "softmax"]
    assert len([n for n in plan.notes if n.startswith("fused ")]) == 2, plan.notes


def test_softmax_is_accurate_per_value_over_a_wide_range(backend):
    """Each probability to a few float32 ulps of the float64 formula, down to the smallest ones: scores spread over
    100 (exps of -100 .. 0), beta 1 and 0.5, 4 rows of 64 and 4 rows of 7. A CPU's OpenCL takes its exps by an
    inline polynomial (opencl/exp16.inc.cl), not the library's exp; a probability below float32's normal range
    may be any value below 1e-37."""
    shapes = [(4, 64), (4, 7)]
    mb = ModelBuilder()
    ids = [mb.input(f"x{k}", s) for k, s in enumerate(shapes)]
    outs = []
    for k, beta in ((0, 1.0), (1, 0.5)):
        y = mb.tensor(f"y{k}", shapes[k])
        mb.op("SOFTMAX", [ids[k]], [y], beta=beta)
        outs.append(y)
    mb.output(*outs)
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-100.0, 0.0, s).astype(np.float32) for s in shapes]
    _, got = run_gpu(mb.build(), xs, backend)
    # the polynomial's own bound; a GPU's exp (llvmpipe's too) is exp2 of z * log2(e), off by that product's rounding
    bound = 5e-7 if on_cpu_opencl(backend) else 2e-5
    for x, beta, o in zip(xs, (1.0, 0.5), got):
        z = ((x - x.max(axis=-1, keepdims=True)) * np.float32(beta)).astype(np.float64)  # as float32 rounds it
        ref = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
        normal = ref > 1.2e-38
        rel = np.abs(o.astype(np.float64) - ref)[normal] / ref[normal]
        assert rel.max() <= bound, f"softmax beta {beta} on {backend}: worst relative error {rel.max():.3g}"
        assert np.all(np.abs(o[~normal]) <= 1e-37), f"softmax beta {beta} on {backend}: a tiny probability"


def test_fp16(backend):
    shape = (2, 3, 5, 7)
    content = reduce_model([("MEAN", 0, (1, 2), False), ("REDUCE_MAX", 0, (3,), True)], {"x": shape})
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.tensor("y", shape)
    mb.op("SOFTMAX", [x], [y], beta=0.5)
    mb.output(y)
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal(shape) * 4).astype(np.float32)]
    for model in (content, mb.build()):
        ref = run_litert(model, xs)
        _, outs = run_gpu(model, xs, backend, fp16=True)
        for o, r in zip(outs, ref):
            assert_float_close(o, r, 2e-2, what=f"fp16 on {backend}")


def test_int8(backend):
    """int8 MEAN over H, W (MobileNet's head) and over channels, SUM, and SOFTMAX onto TFLite's fixed
    output grid (scale 1/256, zero point -128), against LiteRT. The reductions against its default kernels:
    its reference MEAN rounds twice (the rescale, then the division by the count) and differs from them in
    a few percent of the values; the GPU path, like the optimized kernels apps run, rounds once."""
    rng = np.random.default_rng(2)
    shape = (2, 7, 7, 61)
    # scales with no simple ratio: exact ties, rounded differently by every kernel, stay rare
    q_in, q_out = {"scale": 0.0473, "zero_point": 3}, {"scale": 0.0731, "zero_point": -1}
    cases = [("MEAN", 0, (1, 2), False), ("MEAN", 0, (3,), True), ("SUM", 0, (1,), False)]
    content = reduce_model(cases, {"x": shape}, np.int8, q_in, q_out)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    ref = run_litert(content, [x])
    _, outs = run_gpu(content, [x], backend)
    for case, o, r in zip(cases, outs, ref):
        assert_quant_close(o, r, what=f"int8 {case} on {backend}")

    mb = ModelBuilder()
    s = mb.input("logits", (2, 1000), np.int8, scale=0.1, zero_point=-20)
    y = mb.tensor("probs", (2, 1000), np.int8, scale=1 / 256, zero_point=-128)
    mb.op("SOFTMAX", [s], [y], beta=1.0)
    mb.output(y)
    content = mb.build()
    x = rng.integers(-128, 128, (2, 1000)).astype(np.int8)
    x[0, :5] = 127  # a few clear winners: probabilities far from 0
    ref = run_litert(content, [x], reference_kernels=True)
    _, outs = run_gpu(content, [x], backend)
    assert_quant_close(outs[0], ref[0], what=f"int8 SOFTMAX on {backend}")


def test_what_stays_on_the_cpu(backend):
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 5))
    axis = mb.input("axis", (1,), np.int32)
    am = mb.tensor("argmax", (1, 4, 4), np.int32)
    mb.op("ARG_MAX", [x, mb.const("c", np.array([3], np.int32))], [am])
    mean = mb.tensor("mean", (1, 4, 4, 5))
    mb.op("MEAN", [x, axis], [mean], keep_dims=True)
    mb.output(am, mean)
    it = gd.Interpreter(model_content=mb.build())
    graph = it.graph
    d = delegate(backend)
    assert "no GPU kernel" in d.is_node_supported(graph.nodes[0], graph)
    assert "int32" in d.is_node_supported(graph.nodes[1], graph)  # a computed axis: not constant


@pytest.mark.parametrize("name", ["mobilenet_v1_224_fp32", "mobilenet_v2_224_int8"])
def test_mobilenet_heads_are_supported(backend, name):
    """The MEAN over H, W and the SOFTMAX over 1000 classes of the real MobileNets go to the GPU."""
    path = need_models() / "mobilenet" / f"{name}.tflite"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    graph = gd.Interpreter(model_path=path).graph
    d = delegate(backend)
    heads = [n for n in graph.nodes if n.op in ("MEAN", "SOFTMAX")]
    assert len(heads) == 2
    for node in heads:
        assert d.is_node_supported(node, graph) is True, f"{node}: {d.is_node_supported(node, graph)}"
