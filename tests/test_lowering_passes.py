"""Each lowering pass on its own, on graphs of two or three nodes: what it applies, what it declines and why.

The expected rewrites are written out by hand from the pass's definition (the reference); the numerics of the
rewritten plans are covered against LiteRT by the test_gpu_* files.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.graph import Graph
from gpu_delegate.lowering import (
    drop_reshape,
    emit,
    fold_constants,
    fuse_elementwise,
    fuse_layer_norm,
    memory,
    merge_pad,
    pad_channels,
)
from gpu_delegate.lowering.context import LowerContext
from gpu_delegate.lowering.plan import KernelCall, Plan
from gpu_delegate.lowering.view import PartitionView
from gpu_delegate.ops import get_op
from gpu_delegate.tflite.reader import read_model
from gpu_delegate.tflite.writer import ModelBuilder


def graph_of(mb: ModelBuilder) -> Graph:
    return read_model(mb.build()).main


def ops_of(graph: Graph) -> dict:
    ops = {}
    for n in graph.nodes:
        op = get_op(n.op)
        assert op is not None
        ops[n.index] = op
    return ops


def table_key(n: int, rows: np.ndarray) -> str:
    return f"lut{n}"


def view_of(graph: Graph) -> PartitionView:
    return PartitionView(graph, [n.index for n in graph.nodes], {t.index: t.shape for t in graph.tensors},
                         list(graph.inputs), list(graph.outputs), ops=ops_of(graph))


def conv(mb: ModelBuilder, x: int, shape: tuple[int, ...], out: int, padding: str = "VALID", w: int | None = None,
         act: str = "NONE") -> None:
    if w is None:
        w = mb.const("w", np.ones((shape[-1], 1, 1, mb.tensors[x]["shape"][-1]), np.float32))
    mb.op("CONV_2D", [x, w, -1], [out], padding=padding, stride_w=1, stride_h=1, fused_activation_function=act)


# -- fold_constants ---------------------------------------------------------------------------------------------

def test_fold_constants_computes_a_dequantize_of_a_constant_once():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3])
    w16 = mb.const("w16", (np.arange(6 * 3, dtype=np.float32).reshape(6, 1, 1, 3) / 7).astype(np.float16))
    w = mb.tensor("w", [6, 1, 1, 3])
    y = mb.tensor("y", [1, 4, 4, 6])
    mb.op("DEQUANTIZE", [w16], [w])
    conv(mb, x, (1, 4, 4, 6), y, w=w)
    mb.output(y)
    view = view_of(graph_of(mb))
    result = fold_constants.run(view)
    assert result.applied == ["folded node 0 (DEQUANTIZE)"] and not result.declined
    assert view.nodes == [1]
    expected = (np.arange(6 * 3, dtype=np.float32).reshape(6, 1, 1, 3) / 7).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(view.folded[w], expected)
    assert view.is_const(w)


def test_fold_constants_declines_a_dequantize_of_a_run_time_tensor():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3], np.int8, scale=0.5, zero_point=1)
    y = mb.tensor("y", [1, 4, 4, 3])
    mb.op("DEQUANTIZE", [x], [y])
    mb.output(y)
    view = view_of(graph_of(mb))
    result = fold_constants.run(view)
    assert not result.changed and result.declined == ["node 0 (DEQUANTIZE): its input is computed at run time"]
    assert view.nodes == [0]


# -- drop_reshape -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("new_shape,dropped", [([1, 16, 8], True), ([16, 8], True), ([1, 4, 32], False)])
def test_drop_reshape_only_where_phwc4_moves_nothing(new_shape, dropped):
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 8])
    y = mb.tensor("y", [1, 4, 4, 8])
    z = mb.tensor("z", new_shape)
    mb.op("RELU", [x], [y])
    mb.op("RESHAPE", [y, mb.const("s", np.array(new_shape, np.int32))], [z])
    mb.output(z)
    view = view_of(graph_of(mb))
    result = drop_reshape.run(view)
    if dropped:  # B, C and H * W agree: the same vec4 at the same index
        assert result.applied == ["dropped node 1 (RESHAPE): no-op in PHWC4"]
        assert view.aliases == {z: y} and view.nodes == [0]
    else:  # C goes from 8 to 32: the slices change
        assert result.declined == [f"node 1 (RESHAPE): [1, 4, 4, 8] -> {new_shape} moves data in PHWC4"]
        assert view.aliases == {} and view.nodes == [0, 1]


# -- merge_pad ------------------------------------------------------------------------------------------------------

def pad_then_conv(pads: list[list[int]], padding: str = "VALID") -> tuple[ModelBuilder, int, int]:
    mb = ModelBuilder()
    x = mb.input("x", [1, 5, 5, 3])
    padded_shape = [d + a + b for d, (a, b) in zip([1, 5, 5, 3], pads)]
    p = mb.tensor("p", padded_shape)
    mb.op("PAD", [x, mb.const("pads", np.array(pads, np.int32))], [p])
    out_hw = padded_shape[1:3] if padding == "SAME" else padded_shape[1:3]
    y = mb.tensor("y", [1, *out_hw, 4])
    w = mb.const("w", np.ones((4, 1, 1, padded_shape[3]), np.float32))
    mb.op("CONV_2D", [p, w, -1], [y], padding=padding, stride_w=1, stride_h=1)
    mb.output(y)
    return mb, x, p


def test_merge_pad_into_a_valid_conv():
    mb, x, _ = pad_then_conv([[0, 0], [1, 2], [3, 0], [0, 0]])
    view = view_of(graph_of(mb))
    result = merge_pad.run(view)
    assert result.applied == ["merged node 0 (PAD) into node 1 (CONV_2D)"]
    assert view.nodes == [1]
    assert view.read_as == {(1, 0): x}  # the conv reads the unpadded input
    assert view.extra_padding == {1: (1, 2, 3, 0)}  # top, bottom, left, right


@pytest.mark.parametrize("pads,padding,why", [
    ([[0, 0], [1, 1], [1, 1], [0, 1]], "VALID", "it pads the batch or channels, or crops"),
    ([[0, 0], [1, 1], [1, 1], [0, 0]], "SAME", "its reader node 1 (CONV_2D) is not a VALID convolution"),
])
def test_merge_pad_declines(pads, padding, why):
    mb, _, _ = pad_then_conv(pads, padding)
    view = view_of(graph_of(mb))
    result = merge_pad.run(view)
    assert not result.changed and len(result.declined) == 1 and why in result.declined[0]
    assert view.nodes == [0, 1] and not view.extra_padding


# -- pad_channels ---------------------------------------------------------------------------------------------------

def pad_then_add(pads: list[list[int]], value: float | None = None, pad_also_out: bool = False,
                 conv_also_out: bool = False) -> tuple[ModelBuilder, int]:
    """x [1, 4, 4, 5] -> PAD (PADV2 with ``value``) -> p; ADD(p, CONV(x)) of p's shape."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 5])
    padded = [d + a + b for d, (a, b) in zip([1, 4, 4, 5], pads)]
    c, p, y = mb.tensor("c", padded), mb.tensor("p", padded), mb.tensor("y", padded)
    conv(mb, x, tuple(padded), c, padding="SAME")
    ins = [x, mb.const("pads", np.array(pads, np.int32))]
    if value is None:
        mb.op("PAD", ins, [p])
    else:
        mb.op("PADV2", ins + [mb.const("value", np.array([value], np.float32))], [p])
    mb.op("ADD", [p, c], [y])
    mb.output(y, *([p] if pad_also_out else []), *([c] if conv_also_out else []))
    return mb, x


def test_pad_channels_lets_the_add_read_the_unpadded_tensor():
    mb, x = pad_then_add([[0, 0], [0, 0], [0, 0], [0, 6]])  # 5 -> 11 channels: not at a slice boundary
    view = view_of(graph_of(mb))
    result = pad_channels.run(view)
    assert result.applied == ["node 2 (ADD) reads the input of node 1 (PAD), its channels beyond read as 0"]
    assert view.nodes == [0, 2] and view.read_as == {(2, 0): x}
    fuse_elementwise.run(view, True, lambda t, mode: "", table_key)
    pad_channels.restore(view, result)
    assert view.nodes == [0] and result.changed
    (add,) = view.postops[0]  # the ADD in the conv's kernel, its operand the unpadded x, read first
    assert (add.expr, add.operand, add.source, add.operand_first) == ("a + b", "zero_extended", x, True)


@pytest.mark.parametrize("pads,value,pad_also_out,why", [
    ([[0, 0], [1, 0], [0, 0], [0, 3]], None, False, "it pads more than the end of the channels"),
    ([[0, 0], [0, 0], [0, 0], [3, 0]], None, False, "it pads more than the end of the channels"),
    ([[0, 0], [0, 0], [0, 0], [0, 3]], 1.0, False, "it pads with a value other than 0"),
    ([[0, 0], [0, 0], [0, 0], [0, 3]], None, True, "its output is read by 1 nodes, under another name, or leaves"),
])
def test_pad_channels_declines(pads, value, pad_also_out, why):
    mb, _ = pad_then_add(pads, value, pad_also_out)
    view = view_of(graph_of(mb))
    result = pad_channels.run(view)
    assert not result.changed and len(result.declined) == 1 and why in result.declined[0], result.declined
    assert view.nodes == [0, 1, 2] and not view.read_as


def test_pad_channels_declines_a_quantized_pad():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 5], np.int8, scale=0.5, zero_point=3)
    p, y = mb.tensor("p", [1, 4, 4, 8], np.int8, scale=0.5, zero_point=3), mb.tensor("y", [1, 4, 4, 8])
    mb.op("PAD", [x, mb.const("pads", np.array([[0, 0], [0, 0], [0, 0], [0, 3]], np.int32))], [p])
    mb.op("ADD", [p, p], [y])
    mb.output(y)
    result = pad_channels.run(view_of(graph_of(mb)))
    assert not result.changed and "its input is not a float tensor" in result.declined[0]


def test_pad_channels_restores_the_pad_when_the_add_is_not_fused():
    mb, x = pad_then_add([[0, 0], [0, 0], [0, 0], [0, 3]], conv_also_out=True)  # the conv's output leaves: no fusion
    view = view_of(graph_of(mb))
    result = pad_channels.run(view)
    fuse_elementwise.run(view, True, lambda t, mode: "", table_key)
    pad_channels.restore(view, result)
    assert view.nodes == [0, 1, 2] and not view.read_as and not view.zero_extended and not result.changed
    assert result.declined == ["node 1 (PAD): its reader node 2 (ADD) was not fused as a post-op"]


# -- fuse_elementwise -------------------------------------------------------------------------------------------

def test_fuse_activation_and_constant_add_into_the_conv():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3])
    c, r, y = mb.tensor("c", [1, 4, 4, 5]), mb.tensor("r", [1, 4, 4, 5]), mb.tensor("y", [1, 4, 4, 5])
    conv(mb, x, (1, 4, 4, 5), c)
    mb.op("RELU", [c], [r])
    bias = mb.const("bias", np.arange(5, dtype=np.float32))
    mb.op("ADD", [bias, r], [y])  # the constant first: the post-op must keep the operand order
    mb.output(y)
    graph = graph_of(mb)
    view = view_of(graph)
    keys: list[tuple[int, str]] = []
    result = fuse_elementwise.run(view, True, lambda t, mode: keys.append((t, mode)) or f"k{t}", table_key)
    assert result.applied == ["fused node 1 (RELU) into node 0 (CONV_2D)", "fused node 2 (ADD) into node 0 (CONV_2D)"]
    assert view.nodes == [0]
    relu, add = view.postops[0]
    assert (relu.kind, relu.expr, relu.operand) == ("expr", "max(a, 0.0f)", None)
    assert (add.kind, add.expr, add.operand, add.source, add.operand_first) == ("expr", "a + b", "channel", f"k{bias}",
                                                                               True)
    assert keys == [(bias, "channel")]
    assert view.final(c) == y  # the conv writes the ADD's output directly


def test_fuse_declines_a_tensor_read_twice():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3])
    c, r, s = mb.tensor("c", [1, 4, 4, 5]), mb.tensor("r", [1, 4, 4, 5]), mb.tensor("s", [1, 4, 4, 5])
    conv(mb, x, (1, 4, 4, 5), c)
    mb.op("RELU", [c], [r])
    mb.op("LOGISTIC", [c], [s])
    mb.output(r, s)
    view = view_of(graph_of(mb))
    result = fuse_elementwise.run(view, True, lambda t, mode: "", table_key)
    assert not result.changed
    assert result.declined == ["node 1 (RELU) into node 0 (CONV_2D): tensor 1 is read elsewhere too",
                               "node 2 (LOGISTIC) into node 0 (CONV_2D): tensor 1 is read elsewhere too"]
    assert view.nodes == [0, 1, 2] and not view.postops


def test_fuse_declines_a_tensor_also_read_through_a_dropped_reshape():
    """NASNet's reduction cells: a pooled tensor feeds an ADD and, reshaped, another ADD. The reshape is dropped
    (it shares the buffer); fusing the first ADD into the pool would leave the reshape's reader a sum."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 1, 1, 8])
    c, a, flat, b = (mb.tensor("c", [1, 1, 1, 8]), mb.tensor("a", [1, 1, 1, 8]), mb.tensor("flat", [8]),
                     mb.tensor("b", [1, 1, 1, 8]))
    conv(mb, x, (1, 1, 1, 8), c)
    mb.op("ADD", [c, mb.const("k", np.ones(8, np.float32))], [a])
    mb.op("RESHAPE", [c, mb.const("shape", np.array([8], np.int32))], [flat])
    mb.op("ADD", [x, flat], [b])
    mb.output(a, b)
    view = view_of(graph_of(mb))
    assert drop_reshape.run(view).applied == ["dropped node 2 (RESHAPE): no-op in PHWC4"]
    result = fuse_elementwise.run(view, False, lambda t, mode: f"k{t}", table_key)
    assert result.declined[0] == "node 1 (ADD) into node 0 (CONV_2D): tensor 1 is read elsewhere too"
    assert 1 in view.nodes and 0 not in view.postops


def test_fuse_declines_an_operand_that_a_later_kernel_writes_under_a_reshaped_name():
    """An ADD of a conv's output and a reshape of a tensor computed after the conv cannot run inside the conv."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 1, 1, 8])
    c, p, flat, y = mb.tensor("c", [1, 1, 1, 8]), mb.tensor("p", [1, 1, 1, 8]), mb.tensor("flat", [8]), \
        mb.tensor("y", [1, 1, 1, 8])
    conv(mb, x, (1, 1, 1, 8), c)
    conv(mb, x, (1, 1, 1, 8), p)
    mb.op("RESHAPE", [p, mb.const("shape", np.array([8], np.int32))], [flat])
    mb.op("ADD", [c, flat], [y])
    mb.output(y)
    view = view_of(graph_of(mb))
    drop_reshape.run(view)
    result = fuse_elementwise.run(view, False, lambda t, mode: f"k{t}", table_key)
    assert result.declined == ["node 3 (ADD) into node 0 (CONV_2D): the other operand is not ready when the "
                               "producer runs"]
    assert view.nodes == [0, 1, 3]


def test_merge_pad_declines_a_pad_also_read_through_a_dropped_reshape():
    mb, _, p = pad_then_conv([[0, 0], [1, 1], [1, 1], [0, 0]])
    flat = mb.tensor("flat", [7, 7, 3])
    mb.op("RESHAPE", [p, mb.const("shape", np.array([7, 7, 3], np.int32))], [flat])
    mb.output(flat)
    view = view_of(graph_of(mb))
    assert drop_reshape.run(view).applied == ["dropped node 2 (RESHAPE): no-op in PHWC4"]
    result = merge_pad.run(view)
    assert not result.applied and "leaves the partition" in result.declined[0]


def test_fake_quant_step_after_a_quantized_output():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 8], np.int8, scale=0.25, zero_point=-3)
    y = mb.tensor("y", [1, 4, 4, 8], np.int8, scale=0.5, zero_point=10)
    mb.op("ADD", [x, x], [y])
    mb.output(y)
    view = view_of(graph_of(mb))
    result = fuse_elementwise.run(view, True, lambda t, mode: "", table_key)
    assert result.applied == ["fake-quant step after node 0 (ADD)"]
    (step,) = view.postops[0]
    # int8 on (scale 0.5, zero point 10): codes -128..127 are -138..117 steps from the zero point
    assert (step.kind, step.scale, step.qmin, step.qmax) == ("fake_quant", 0.5, -138.0, 117.0)
    assert step.exact  # a requantization: the division, whose correctly rounded quotient keeps exact halves
    assert fuse_elementwise.run(view_of(graph_of(mb)), False, lambda t, mode: "", table_key).applied == []


def conv_then(second: str) -> Graph:
    """An int8 1x1 CONV_2D, then ``second`` ("ADD" of its output to itself, or a unary op) on another grid."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 8], np.int8, scale=0.25, zero_point=-3)
    w = mb.const("w", np.ones((8, 1, 1, 8), np.int8), scale=0.1, zero_point=0)
    c = mb.tensor("c", [1, 4, 4, 8], np.int8, scale=0.5, zero_point=10)
    y = mb.tensor("y", [1, 4, 4, 8], np.int8, scale=0.3, zero_point=0)
    mb.op("CONV_2D", [x, w, -1], [c], padding="VALID", stride_w=1, stride_h=1, fused_activation_function="NONE")
    mb.op(second, [c, c] if second == "ADD" else [c], [y])
    mb.output(y)
    return graph_of(mb)


def test_fake_quant_step_of_a_sum_of_products_multiplies_by_the_reciprocal():
    """An int8 convolution's step rounds a sum of products (exact False: a multiply by 1 / scale), the ADD after it
    requantizes (exact True), and a lookup that replaces a convolution's step rounds as that step did."""
    view = view_of(conv_then("ADD"))
    fuse_elementwise.run(view, True, lambda t, mode: "", table_key)
    assert [(p.kind, p.node, p.exact) for p in view.postops[0]] == [("fake_quant", 0, False)]
    assert [(p.kind, p.node, p.exact) for p in view.postops[1]] == [("fake_quant", 1, True)]
    view = view_of(conv_then("HARD_SWISH"))
    fuse_elementwise.run(view, True, lambda t, mode: "", table_key)
    assert [(p.kind, p.exact) for p in view.postops[0]] == [("lut", False)]


# -- emit and memory ------------------------------------------------------------------------------------------------

def test_emit_hands_the_fused_post_ops_to_the_kernel_that_writes_the_output():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3])
    c, y = mb.tensor("c", [1, 4, 4, 5]), mb.tensor("y", [1, 4, 4, 5])
    conv(mb, x, (1, 4, 4, 5), c)
    mb.op("TANH", [c], [y])
    mb.output(y)
    view = view_of(graph_of(mb))
    ctx = LowerContext(view)
    fuse_elementwise.run(view, True, ctx.operand_const, ctx.table_const)
    result = emit.run(view, ctx)
    assert result.applied == ["node 0 (CONV_2D): conv2d_1x1"]
    (call,) = ctx.kernels
    assert call.inputs == {"src": x} and call.outputs == {"dst": y}
    assert [p.expr for p in call.postops] == ["tanh(a)"]
    assert call.variants == {"opencl": "conv2d_1x1"}


def test_memory_shares_buffers_between_tensors_whose_lifetimes_do_not_overlap():
    # a chain 0 -> 1 -> 2 -> 3 -> 4 of four kernels: a tensor lives from the kernel that writes it to the last one
    # that reads it, so neighbours overlap and every other tensor can share: two buffers, alternating
    shape = (1, 8, 8, 4)
    kernels = [KernelCall("copy", k, {"src": k}, {"dst": k + 1}, {}, {}, (8, 8, 1)) for k in range(4)]
    plan = Plan({t: shape for t in range(5)}, {}, kernels, inputs=[0], outputs=[4])
    result = memory.run(plan)
    assert plan.buffer_sizes == [64, 64]  # 8 * 8 pixels of one slice
    assert plan.buffer_of == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0}
    assert result.applied == ["5 tensors in 2 buffers (60% less memory)"]


def test_a_quantized_unary_op_is_a_lookup_with_no_fake_quant_step():
    """An int8 HARD_SWISH after an int8 ADD: fused into the ADD as a lookup of the output code of each input code on
    the ADD's output grid, which stands in for the ADD's own fake-quant step (it rounds onto the same grid); its
    output needs no rounding of its own."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 8], np.int8, scale=0.25, zero_point=-3)
    a = mb.tensor("a", [1, 4, 4, 8], np.int8, scale=0.5, zero_point=10)
    y = mb.tensor("y", [1, 4, 4, 8], np.int8, scale=0.125, zero_point=-20)
    mb.op("ADD", [x, x], [a])
    mb.op("HARD_SWISH", [a], [y])
    mb.output(y)
    view = view_of(graph_of(mb))
    tables: list[tuple[int, np.ndarray]] = []
    result = fuse_elementwise.run(view, True, lambda t, mode: "", lambda n, rows: tables.append((n, rows)) or "t")
    assert result.applied == ["fake-quant step after node 0 (ADD)", "fused node 1 (HARD_SWISH) into node 0 (ADD)"]
    (lut,) = view.postops[0]
    assert (lut.kind, lut.operand, lut.source) == ("lut", "table", "t")
    # the steps from the zero point of the ADD's grid (value / 0.5, in -138..117), plus 138, index the table
    assert (lut.scale, lut.qmin, lut.qmax, lut.offset) == (0.5, -138.0, 117.0, 138)
    ((node, rows),) = tables
    assert node == 1 and rows.shape == (64, 4)
    values = rows.reshape(-1)
    assert np.all(np.abs(values / np.float32(0.125) - np.round(values / np.float32(0.125))) == 0)  # on y's grid
    assert values[138] == 0.0  # hard_swish(0) = 0: the zero point of a's grid gives y's zero point


# -- fuse_layer_norm --------------------------------------------------------------------------------------------

def layer_norm_chain(quantized: bool = False, int8_neg: bool = False) -> tuple[ModelBuilder, int, int]:
    """The converter's LayerNormalization over the channels of x [2, 3, 5]: without beta, y = x * inv + -m * inv.
    ``quantized``: every tensor int8 (scale 0.05), NEG an int8 NEG, or with ``int8_neg`` as the converter writes it,
    DEQUANTIZE, float NEG, QUANTIZE (nodes 1, 10, 11)."""
    q = {"dtype": np.int8, "scale": 0.05, "zero_point": 0} if quantized else {}
    mb = ModelBuilder()
    x = mb.input("x", [2, 3, 5], **q)
    axis = mb.const("axis", np.array([-1], np.int32))
    m, neg, d, v = mb.tensor("m", [2, 3, 1], **q), mb.tensor("neg", [2, 3, 1], **q), mb.tensor("d", [2, 3, 5], **q), \
        mb.tensor("v", [2, 3, 1], **q)
    neg_in = neg_out = neg
    if int8_neg:
        neg_in, neg_out = mb.tensor("m_float", [2, 3, 1]), mb.tensor("neg_float", [2, 3, 1])
    ve, r = mb.tensor("ve", [2, 3, 1], **q), mb.tensor("r", [2, 3, 1], **q)
    inv, ms, xs, y = (mb.tensor(name, [2, 3, 5], **q) for name in ("inv", "ms", "xs", "y"))
    eps = mb.const("eps", np.float32(1e-3)) if not quantized else mb.const("eps", np.int8(1), scale=0.001, zero_point=0)
    gamma = mb.const("gamma", np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)) if not quantized else \
        mb.const("gamma", np.arange(1, 6, dtype=np.int8).reshape(1, 1, 5), scale=0.1, zero_point=0)
    mb.op("MEAN", [x, axis], [m], keep_dims=True)  # node 0
    mb.op("DEQUANTIZE", [m], [neg_in]) if int8_neg else mb.op("NEG", [m], [neg])
    mb.op("SQUARED_DIFFERENCE", [x, m], [d])
    mb.op("MEAN", [d, axis], [v], keep_dims=True)
    mb.op("ADD", [v, eps], [ve])
    mb.op("RSQRT", [ve], [r])  # node 5
    mb.op("MUL", [r, gamma], [inv])
    mb.op("MUL", [neg, inv], [ms])
    mb.op("MUL", [x, inv], [xs])
    mb.op("ADD", [xs, ms], [y])  # node 9
    if int8_neg:
        mb.op("NEG", [neg_in], [neg_out])
        mb.op("QUANTIZE", [neg_out], [neg])
    return mb, x, y


def test_fuse_layer_norm_lowers_the_chain_to_one_kernel():
    mb, x, y = layer_norm_chain()
    mb.output(y)
    view = view_of(graph_of(mb))
    result = fuse_layer_norm.run(view)
    assert result.applied == [f"layer norm of tensor {x}: nodes 0, 2, 3, 4, 5, 6, 1, 7, 8, 9 in one kernel"]
    assert view.nodes == [9]
    assert view.node_inputs(9) == [x, x]  # the other passes see the ADD read x, which must stay written
    ctx = LowerContext(view)
    emit.run(view, ctx)
    (call,) = ctx.kernels
    # rank 3 [2, 3, 5] is stored as B, H, W = 1, 2, 3: one work item per (b, y, x)
    assert (call.kernel, call.inputs, call.outputs, call.grid) == ("layer_norm", {"src": x}, {"dst": y}, (3, 2, 1))
    assert call.defines == {"EPS": np.float32(1e-3).item(), "QUANT": 0}
    gamma, beta = (ctx.consts[call.consts[k]] for k in ("gamma", "beta"))
    np.testing.assert_array_equal(gamma.reshape(-1), [1, 2, 3, 4, 5, 0, 0, 0])  # zero past the channels
    np.testing.assert_array_equal(beta.reshape(-1), np.zeros(8))


def test_fuse_layer_norm_takes_the_converters_int8_chain_with_its_roundings():
    mb, x, y = layer_norm_chain(quantized=True, int8_neg=True)
    mb.output(y)
    view = view_of(graph_of(mb))
    result = fuse_layer_norm.run(view)
    assert result.applied == [f"layer norm of tensor {x}: nodes 0, 2, 3, 4, 5, 6, 1, 10, 11, 7, 8, 9 in one kernel"]
    assert view.nodes == [9]
    ctx = LowerContext(view)
    emit.run(view, ctx)
    (call,) = ctx.kernels
    grid = {"S": np.float32(0.05).item(), "LO": -128.0, "HI": 127.0}  # every tensor's: scale 0.05, zero point 0
    steps = ("MEAN", "SQ", "VAR", "RIN", "INV", "NEG", "SP", "SCALED")
    assert call.defines == {"EPS": np.float32(0.001).item(), "QUANT": 1, "NEG_FORM": 1, "HAS_INV": 1,
                            "RSQRT_OFFSET": 128, **{f"Q_{k}_{p}": v for k in steps for p, v in grid.items()}}
    np.testing.assert_allclose(ctx.consts[call.consts["gamma"]].reshape(-1), [0.1, 0.2, 0.3, 0.4, 0.5, 0, 0, 0],
                               rtol=1e-6)  # dequantized
    table = ctx.consts[call.consts["rsqrt"]].reshape(-1)  # RSQRT's outputs, code -128 first, on r's grid
    assert table.size == 256 and np.all(np.abs(table / np.float32(0.05) - np.round(table / np.float32(0.05))) < 1e-4)


def test_fuse_layer_norm_leaves_an_int8_chain_where_results_are_not_rounded():
    mb, _, y = layer_norm_chain(quantized=True, int8_neg=True)
    mb.output(y)
    view = view_of(graph_of(mb))
    result = fuse_layer_norm.run(view, quantized=False)
    assert not result.applied and "does not round 8-bit results onto their grids" in result.declined[0]


@pytest.mark.parametrize("quantized, also_out, why", [
    (True, None, "the 8-bit mean is negated other than by DEQUANTIZE, NEG, QUANTIZE"),
    (False, "m", "the mean (tensor {t}) is not read by exactly two nodes"),
    (False, "inv", "the scale (tensor {t}) is not read by exactly two MULs")])
def test_fuse_layer_norm_declines(quantized, also_out, why):
    mb, x, y = layer_norm_chain(quantized)
    extra = [t for t, e in enumerate(mb.tensors) if e["name"] == also_out]
    mb.output(y, *extra)
    view = view_of(graph_of(mb))
    result = fuse_layer_norm.run(view)
    assert not result.applied
    assert result.declined[0] == f"node 0 (MEAN): {why.format(t=extra[0] if extra else -1)}"
    assert len(view.nodes) == 10
