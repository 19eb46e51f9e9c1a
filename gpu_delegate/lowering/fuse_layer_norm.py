"""Lower the chain the TFLite converter writes for a LayerNormalization over the channels to one kernel
(kernels/dialect/layer_norm.dialect) instead of seven to eleven:

    m = MEAN(x, -1, keep_dims)          d = SQUARED_DIFFERENCE(x, m)     v = MEAN(d, -1, keep_dims)
    r = RSQRT(ADD(v, eps))              inv = MUL(r, gamma)  (without gamma: inv = r)
    y = ADD(MUL(x, inv), t)   where t = MUL(NEG(m), inv)  or  t = SUB(beta, MUL(m, inv))

The kernel computes the same formulas in float32. In an 8-bit chain (the converter's int8 LayerNormalization, its
NEG written as DEQUANTIZE, NEG, QUANTIZE) every node's result is rounded onto its output's grid as the separate
kernels' fake-quant steps round it (``QuantSteps``; the delegate's quantized inference only), and RSQRT is its
8-bit lookup table. The chain's last ADD stays as the node that emits the kernel (its post-ops, fake-quant step and
fused activation go with it); it reads x through ``read_as`` so that the other passes see x read there, and every
other node of the chain is removed. Declined: a chain of float and quantized tensors mixed otherwise, a
per-channel quantized tensor, a reduction over other axes, an intermediate read elsewhere, a fused activation
inside.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph import ACT_NONE, Graph, Node
from ..phwc4 import slices
from .context import GpuOp, LowerContext
from .fused_op import FusedOp
from .plan import CodeTable
from .postops import ACTIVATION_EXPR, grid_defines, lookup_grid, quant_grid, table_rows
from .view import PartitionView, PassResult

Defines = dict[str, int | float | str]
Grid = tuple[float, float, float]  # a fake-quant step: scale, and the bounds of the rounded quotient


@dataclass(frozen=True, eq=False)
class QuantSteps:
    """An 8-bit chain's roundings: each node's output grid, as dialect/fake_quant.inc.dialect's fake_quant reads
    it (postops.fake_quant_postop's), and RSQRT's table, looked up by the code of v + eps on its input's grid."""

    mean: Grid
    squared: Grid
    variance: Grid
    rsqrt_input: Grid
    rsqrt_offset: int  # the table's row of code 0
    rsqrt: CodeTable
    inv: Grid | None  # MUL(r, gamma); None without gamma
    neg: Grid | None  # QUANTIZE(NEG(m)), in the NEG form
    shift_product: Grid  # MUL(NEG(m), inv), or MUL(m, inv) in the SUB form
    shift: Grid | None  # SUB(beta, MUL(m, inv)), in the SUB form
    scaled: Grid  # MUL(x, inv)


@dataclass(frozen=True, eq=False)
class LayerNorm:
    """What the fused kernel needs."""

    source: int  # x
    gamma: np.ndarray  # float32, one per channel
    beta: np.ndarray
    eps: float
    add: GpuOp  # the chain's last ADD's own op, whose CPU form is still that node's meaning
    quant: QuantSteps | None = None


class LayerNormOp(FusedOp):
    """Stands in as the op of the chain's last ADD (a subclass per chain: ``for_chain``)."""

    layer_norm: ClassVar[LayerNorm]

    @classmethod
    def lower(cls, node: Node, graph: Graph, ctx: LowerContext) -> None:
        ln = cls.layer_norm
        c = ctx.bhwc(ln.source)[3]
        rows = slices(c) * 4

        def padded(values: np.ndarray) -> np.ndarray:
            return np.pad(values, (0, rows - c)).reshape(-1, 4)

        consts = {"gamma": ctx.const(f"layer_norm_gamma:{node.index}", functools.partial(padded, ln.gamma)),
                  "beta": ctx.const(f"layer_norm_beta:{node.index}", functools.partial(padded, ln.beta))}
        defines: Defines = {"EPS": ln.eps, "QUANT": 0}
        if ln.quant is not None:
            defines.update(_quant_defines(ln.quant))
            consts["rsqrt"] = ctx.const(f"layer_norm_rsqrt:{node.index}", functools.partial(table_rows, ln.quant.rsqrt))
        ctx.fuse_activation(node)
        grid, variants = ctx.pixels_layout(ln.source, "layer_norm")
        ctx.kernel("layer_norm", {"src": ln.source}, {"dst": node.outputs[0]}, consts, defines, grid=grid,
                   variants=variants)


def _quant_defines(q: QuantSteps) -> Defines:
    """layer_norm.dialect's defines of an 8-bit chain: QUANT, the form, and each step's grid as Q_<step>_S/LO/HI."""
    defines: Defines = {"QUANT": 1, "NEG_FORM": int(q.neg is not None), "HAS_INV": int(q.inv is not None),
                        "RSQRT_OFFSET": q.rsqrt_offset}
    steps = {"MEAN": q.mean, "SQ": q.squared, "VAR": q.variance, "RIN": q.rsqrt_input, "INV": q.inv, "NEG": q.neg,
             "SP": q.shift_product, "SHIFT": q.shift, "SCALED": q.scaled}
    for name, grid in steps.items():
        if grid is not None:
            defines.update(grid_defines(f"Q_{name}", grid))
    return defines


class _Chain:
    """The walk from one MEAN node along the chain, over the nodes still to lower."""

    def __init__(self, view: PartitionView, readers: dict[int, list[int]], names: dict[int, set[int]],
                 outputs: set[int]):
        self.view, self.graph = view, view.graph
        self.readers, self.names, self.outputs = readers, names, outputs
        self.nodes: list[int] = []

    def node(self, n: int) -> Node:
        return self.graph.nodes[n]

    def only_reader(self, t: int) -> Node | None:
        """The one node that reads ``t``, if no other reads it and it does not leave the partition."""
        users, leaves = self.view.buffer_readers(t, self.readers, self.names, self.outputs)
        return None if leaves or len(users) != 1 else self.node(users[0])

    def take(self, n: int) -> Node:
        self.nodes.append(n)
        return self.node(n)

    def reads(self, node: Node, op: str, *operands: int) -> bool:
        """Whether ``node`` is a plain ``op`` of exactly ``operands`` (any order)."""
        ins = self.view.node_inputs(node.index)
        return node.op == op and sorted(ins) == sorted(operands) and \
            int(node.attrs.get("fused_activation_function", ACT_NONE)) == ACT_NONE

    def other_operand(self, node: Node, op: str, t: int) -> int | None:
        """The operand of a plain binary ``op`` node beside ``t``."""
        ins = self.view.node_inputs(node.index)
        if node.op != op or len(ins) != 2 or t not in ins or \
                int(node.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
            return None
        return ins[1] if ins[0] == t else ins[0]

    def channel_const(self, t: int, channels: int, quantized: bool) -> np.ndarray | None:
        """Constant ``t`` as one float32 per channel (dequantized, in a ``quantized`` chain), if it broadcasts along
        the last axis only."""
        value = self.view.const(t)
        if value is None or (self.graph.tensors[t].quant is not None) != quantized or value.dtype.kind != "f":
            return None
        shape = np.shape(value)
        if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, channels)):
            return None
        return np.broadcast_to(np.asarray(value, np.float32).reshape(-1), (channels,)).copy()


def _is_channel_mean(view: PartitionView, node: Node) -> bool:
    if node.op != "MEAN" or not node.attrs.get("keep_dims", False):
        return False
    ins = view.node_inputs(node.index)
    axes = view.const(ins[1])
    rank = len(view.shapes[ins[0]])
    return axes is not None and rank > 0 and np.size(axes) == 1 and \
        int(np.asarray(axes).reshape(-1)[0]) % rank == rank - 1


def match(view: PartitionView, mean_node: Node, chain: _Chain, quantized: bool = True) -> LayerNorm | str:
    """The layer norm whose first MEAN is ``mean_node``, or why the nodes after it are not one (chain.nodes: the
    nodes taken, the last being the final ADD). An 8-bit chain only where ``quantized`` (the delegate rounds 8-bit
    results onto their grids)."""
    graph = view.graph
    x, _ = view.node_inputs(mean_node.index)
    m = mean_node.outputs[0]
    tensors = [x, m]
    channels = view.shapes[x][-1]
    eight_bit = graph.tensors[x].quant is not None
    if eight_bit and not quantized:
        return "an 8-bit chain, and the delegate does not round 8-bit results onto their grids"
    not_float = "a tensor of the chain is not float32"
    users, leaves = view.buffer_readers(m, chain.readers, chain.names, chain.outputs)
    if leaves or len(users) != 2:
        return f"the mean (tensor {m}) is not read by exactly two nodes"
    first, second = (chain.node(u) for u in users)
    if first.op != "SQUARED_DIFFERENCE":
        first, second = second, first
    if not chain.reads(first, "SQUARED_DIFFERENCE", x, m):
        return "no SQUARED_DIFFERENCE of the input and its mean"
    chain.take(mean_node.index)
    chain.take(first.index)
    variance = chain.only_reader(first.outputs[0])
    if variance is None or not _is_channel_mean(view, variance) or \
            view.node_inputs(variance.index)[0] != first.outputs[0]:
        return "the squared difference is not averaged over the channels alone"
    chain.take(variance.index)
    add_eps = chain.only_reader(variance.outputs[0])
    eps_t = chain.other_operand(add_eps, "ADD", variance.outputs[0]) if add_eps is not None else None
    eps = view.const(eps_t) if eps_t is not None else None
    if add_eps is None or eps is None or np.size(eps) != 1 or eps.dtype.kind != "f":
        return "the variance is not followed by an ADD of a constant epsilon"
    chain.take(add_eps.index)
    rsqrt = chain.only_reader(add_eps.outputs[0])
    if rsqrt is None or rsqrt.op != "RSQRT":
        return "the variance plus epsilon is not followed by RSQRT"
    table = view.op(rsqrt.index).gpu_table(rsqrt, graph) if eight_bit else None
    if eight_bit and table is None:
        return "RSQRT has no 8-bit lookup table"
    chain.take(rsqrt.index)
    inv = rsqrt.outputs[0]
    tensors += [first.outputs[0], variance.outputs[0], add_eps.outputs[0], inv]
    gamma = np.ones(channels, np.float32)
    scale: Node | None = None
    users, leaves = view.buffer_readers(inv, chain.readers, chain.names, chain.outputs)
    if not leaves and len(users) == 1:  # a scale: inv = MUL(r, gamma)
        scale = chain.take(users[0])
        gamma_t = chain.other_operand(scale, "MUL", inv)
        scaled = chain.channel_const(gamma_t, channels, eight_bit) if gamma_t is not None else None
        if scaled is None:
            return "the reciprocal deviation is multiplied by other than a per-channel constant"
        gamma, inv = scaled, scale.outputs[0]
        tensors.append(inv)
        users, leaves = view.buffer_readers(inv, chain.readers, chain.names, chain.outputs)
    if leaves or len(users) != 2:
        return f"the scale (tensor {inv}) is not read by exactly two MULs"
    scale_x = next((chain.node(u) for u in users if chain.reads(chain.node(u), "MUL", x, inv)), None)
    if scale_x is None:
        return "no MUL of the input by the scale"
    scale_m = chain.node(next(u for u in users if u != scale_x.index))
    beta = np.zeros(channels, np.float32)
    negated = _negated_mean(view, chain, second, m, eight_bit)
    sub: Node | None = None
    if isinstance(negated, int):  # t = MUL(NEG(m), inv)
        if not chain.reads(scale_m, "MUL", negated, inv) or chain.only_reader(negated) is not scale_m:
            return "the negated mean is not multiplied by the scale alone"
        chain.take(scale_m.index)
        shift = scale_m.outputs[0]
        tensors += [negated, shift]
    elif second.index == scale_m.index and chain.reads(scale_m, "MUL", m, inv):  # t = SUB(beta, MUL(m, inv))
        chain.take(scale_m.index)
        sub = chain.only_reader(scale_m.outputs[0])
        if sub is None or sub.op != "SUB" or view.node_inputs(sub.index)[1] != scale_m.outputs[0] or \
                int(sub.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
            return "the scaled mean is not subtracted from a constant"
        offset = chain.channel_const(view.node_inputs(sub.index)[0], channels, eight_bit)
        if offset is None:
            return "the scaled mean is subtracted from other than a per-channel constant"
        chain.take(sub.index)
        beta, shift = offset, sub.outputs[0]
        tensors += [scale_m.outputs[0], shift]
    else:
        return negated or f"the mean's other reader, {second}, is neither NEG nor its MUL by the scale"
    chain.take(scale_x.index)
    tensors.append(scale_x.outputs[0])
    final = chain.only_reader(scale_x.outputs[0])
    if final is None or final.op != "ADD" or sorted(view.node_inputs(final.index)) != \
            sorted([scale_x.outputs[0], shift]) or chain.only_reader(shift) is not final or \
            int(final.attrs.get("fused_activation_function", ACT_NONE)) not in (ACT_NONE, *ACTIVATION_EXPR):
        return "the scaled input and the shift do not meet in one ADD"
    chain.take(final.index)
    tensors.append(final.outputs[0])
    if view.shapes[final.outputs[0]] != view.shapes[x]:
        return "the output's shape is not the input's"
    if not eight_bit:
        if any(graph.tensors[t].quant is not None or graph.tensors[t].dtype != np.float32 for t in tensors):
            return not_float
        return LayerNorm(x, gamma, beta, float(eps.reshape(-1)[0]), view.op(final.index))
    grids = {t: quant_grid(graph.tensors[t]) for t in tensors}
    if any(g is None or graph.tensors[t].dtype.itemsize != 1 for t, g in grids.items()):
        return "a tensor of the 8-bit chain is not per-tensor quantized to 8 bits"
    assert table is not None
    rsqrt_input, rsqrt_offset = lookup_grid(table)
    steps = QuantSteps(
        mean=_grid(grids, m), squared=_grid(grids, first.outputs[0]), variance=_grid(grids, variance.outputs[0]),
        rsqrt_input=rsqrt_input, rsqrt_offset=rsqrt_offset, rsqrt=table,
        inv=_grid(grids, scale.outputs[0]) if scale is not None else None,
        neg=_grid(grids, negated) if isinstance(negated, int) else None,
        shift_product=_grid(grids, scale_m.outputs[0]), shift=_grid(grids, sub.outputs[0]) if sub else None,
        scaled=_grid(grids, scale_x.outputs[0]))
    return LayerNorm(x, gamma, beta, float(eps.reshape(-1)[0]), view.op(final.index), steps)


def _grid(grids: dict[int, Grid | None], t: int) -> Grid:
    grid = grids[t]
    assert grid is not None
    return grid


def _negated_mean(view: PartitionView, chain: _Chain, second: Node, m: int, eight_bit: bool) -> int | str | None:
    """The tensor holding -m where the mean's other reader ``second`` starts a NEG: NEG(m) in a float chain,
    QUANTIZE(NEG(DEQUANTIZE(m))) in an 8-bit one (the converter's int8 form; its NEG is float). Its nodes are
    taken. None where ``second`` starts no NEG; a reason where it starts one that is not that."""
    ins = view.node_inputs(second.index)
    if not eight_bit:
        if second.op != "NEG" or ins != [m]:
            return None
        chain.take(second.index)
        return second.outputs[0]
    if second.op != "DEQUANTIZE" or ins != [m]:
        return "the 8-bit mean is negated other than by DEQUANTIZE, NEG, QUANTIZE" if second.op == "NEG" else None
    neg = chain.only_reader(second.outputs[0])
    requantize = chain.only_reader(neg.outputs[0]) if neg is not None and neg.op == "NEG" else None
    if neg is None or requantize is None or requantize.op != "QUANTIZE" or \
            view.graph.tensors[neg.outputs[0]].dtype != np.float32:
        return "the dequantized mean is not negated in float and quantized again"
    for n in (second, neg, requantize):
        chain.take(n.index)
    return requantize.outputs[0]


def run(view: PartitionView, quantized: bool = True) -> PassResult:
    """Fuse every layer norm chain of the partition; 8-bit ones where ``quantized`` (LowerContext.quantized)."""
    result = PassResult("fuse_layer_norm")
    graph = view.graph
    removed: set[int] = set()
    names, outputs = view.buffer_names(), set(view.outputs)
    for n in list(view.nodes):
        node = graph.nodes[n]
        if n in removed or not _is_channel_mean(view, node):
            continue
        readers = view.readers()
        chain = _Chain(view, readers, names, outputs)
        found = match(view, node, chain, quantized)
        if isinstance(found, str):
            result.declined.append(f"{node}: {found}")
            continue
        final = chain.nodes[-1]
        view.ops[final] = LayerNormOp.for_chain(found.add, layer_norm=found)
        for k in range(len(graph.nodes[final].inputs)):
            view.read_as[(final, k)] = found.source
        removed.update(chain.nodes[:-1])
        view.nodes = [m for m in view.nodes if m not in removed]
        result.applied.append(f"layer norm of tensor {found.source}: nodes {', '.join(map(str, chain.nodes))} "
                              f"in one kernel")
    return result
