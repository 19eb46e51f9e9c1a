"""Issue 21: float 1x1 CONV_2Ds and FULLY_CONNECTEDs that read one input run as one kernel, each output a run of slices
of the joined result (lowering/fuse_siblings.py), on cl and gl, fp32 and fp16 storage, batch 1 and 2, against LiteRT:
a group with a bias and without, a partial last slice, readers of every kind (a convolution, an elementwise op of two
joined outputs, attention's products); and the layers the pass leaves alone, with the reason."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, plan_of, run, run_litert, shared_delegate

SAME1 = {"padding": "SAME", "stride_w": 1, "stride_h": 1}


def siblings(batch: int, seed: int = 0) -> tuple[bytes, list[np.ndarray]]:
    """x [batch, 5, 6, 12] -> 1x1 convs RELU to 8, 12 and 6 channels (joined; the 6 last), another
    to 8 without the activation (not joined: another activation), and a 3x3 one (not 1x1); readers: a 3x3 conv, a
    1x1 conv, an average pool. z [batch, 7, 16] -> 3 FULLY_CONNECTEDs 16 -> 16 (joined; one without a
    bias) and one followed
    by a TANH fused into it (not joined); readers: attention's products, (q k^T) v."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    h, w = 5, 6
    x = mb.input("x", (batch, h, w, 12))
    z = mb.input("z", (batch, 7, 16))

    def conv(src: int, cin: int, cout: int, k: int, name: str, act: str = "NONE", bias: bool = True) -> int:
        wt = mb.const(f"{name}_w", (rng.standard_normal((cout, k, k, cin)) / np.sqrt(k * k * cin)).astype(np.float32))
        b = mb.const(f"{name}_b", rng.standard_normal(cout).astype(np.float32) * 0.1 * bias)
        y = mb.tensor(name, (batch, h, w, cout))
        mb.op("CONV_2D", [src, wt, b], [y], fused_activation_function=act, **SAME1)
        return y

    a = conv(x, 12, 8, 1, "a_8", "RELU")
    b = conv(x, 12, 12, 1, "b_12_zero_bias", "RELU", bias=False)
    c = conv(x, 12, 6, 1, "c_6", "RELU")
    d = conv(x, 12, 8, 1, "d_8_no_act")
    e = conv(x, 12, 4, 3, "e_3x3")
    outs = [conv(a, 8, 5, 3, "read_a_3x3"), conv(b, 12, 5, 1, "read_b_1x1"), d, e]
    pooled = mb.tensor("read_c_pool", (batch, 2, 3, 6))
    mb.op("AVERAGE_POOL_2D", [c], [pooled], padding="VALID", stride_h=2, stride_w=2, filter_height=2,
          filter_width=2)
    outs.append(pooled)

    def fc(name: str, bias: bool = True) -> int:
        wt = mb.const(f"{name}_w", (rng.standard_normal((16, 16)) / 4).astype(np.float32))
        b = mb.const(f"{name}_b", rng.standard_normal(16).astype(np.float32)) if bias else -1
        y = mb.tensor(name, (batch, 7, 16))
        mb.op("FULLY_CONNECTED", [z, wt, b], [y], keep_num_dims=True)
        return y

    q, k, v, t = fc("q"), fc("k"), fc("v", bias=False), fc("t_tanh")
    scores = mb.tensor("scores", (batch, 7, 7))
    mb.op("BATCH_MATMUL", [q, k], [scores], adj_y=True)
    qkv = mb.tensor("qkv", (batch, 7, 16))
    mb.op("BATCH_MATMUL", [scores, v], [qkv])
    tanh = mb.tensor("tanh", (batch, 7, 16))
    mb.op("TANH", [t], [tanh])
    mb.output(*outs, qkv, tanh)
    return mb.build(), [rng.standard_normal((batch, h, w, 12)).astype(np.float32),
                        rng.standard_normal((batch, 7, 16)).astype(np.float32)]


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
def test_siblings_joined(backend, fp16, batch):
    content, inputs = siblings(batch)
    if fp16:
        inputs = [x.astype(np.float16).astype(np.float32) for x in inputs]
    refs = run_litert(content, inputs)
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend, fp16)])
    outs = run(it, inputs)
    assert {d["backend"] for d in it.get_ops_details()} == {backend}, it.cpu_reasons()
    for k, (o, r) in enumerate(zip(outs, refs, strict=True)):
        assert_float_close(o, r, 2e-2 if fp16 else 2e-5, what=f"{backend} output {k}")
    plan = plan_of(it)
    joined = [n for n in plan.notes if "in one kernel" in n and "reading tensor" in n]
    assert len(joined) == 2, plan.notes
    names = {t.index: t.name for t in it.graph.tensors}
    firsts = {names[t]: first for t, (_, first) in plan.placed.items()}
    # a's 2 slices, b's 3, then c: the one of partial slices goes last
    assert firsts == {"a_8": 0, "b_12_zero_bias": 2, "c_6": 5, "q": 0, "k": 4, "v": 8}, firsts
    # 2 joined kernels write the 6 layers; d, e, t and the readers of a and b stay kernels of their own
    assert sum(k.kernel in ("conv2d_1x1", "conv2d") for k in plan.kernels) == 2 + 5, \
        [k.kernel for k in plan.kernels]


def test_declined_reasons(backend):
    content, _ = siblings(1)
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    it.allocate_tensors()
    graph = it.graph
    writer = {graph.tensors[n.outputs[0]].name: n for n in graph.nodes}
    declined = runner_declined(it)
    for name, reason in [("e_3x3", "not a 1x1 convolution at stride 1"),
                         ("read_a_3x3", "not a 1x1 convolution at stride 1"),
                         ("t_tanh", "an elementwise step is fused into it"),
                         ("d_8_no_act", "its output crosses the partition's boundary")]:
        assert f"{writer[name]}: {reason}" in declined, (name, declined)
    assert len(declined) == 5, declined  # and read_b_1x1, an output too


def runner_declined(it: gd.Interpreter) -> list[str]:
    from gpu_delegate.lowering import fuse_elementwise, fuse_siblings
    from gpu_delegate.lowering.view import PartitionView
    from gpu_delegate.ops import get_op

    graph = it.graph
    ops = {n.index: get_op(n.op) for n in graph.nodes}
    view = PartitionView(graph, [n.index for n in graph.nodes], {t.index: t.shape for t in graph.tensors},
                         list(graph.inputs), list(graph.outputs), ops=ops)  # type: ignore[arg-type]
    fuse_elementwise.run(view, False, lambda t, mode: f"c{t}", lambda n, rows: f"lut{n}")
    return fuse_siblings.run(view).declined
