"""Run the float FULLY_CONNECTED layers (and 1x1 CONV_2Ds) that read one input as one kernel: an attention's query,
key and value projections, an Inception block's 1x1 branches. Their weights are joined along the output channels,
and each layer's output becomes a run of slices of the joined result (placed, as place_concat.py places a
concatenation's parts: codegen maps every reader's accesses, ``Arg.placed``), so that readers see it as itself.

What it saves is dispatches: on a CPU's OpenCL a kernel costs 10-20 us of the driver's own time however small it
is (PoCL: its command, its event, waking its threads), and a transformer's projections are small (a ViT block's:
64 tokens x 64 -> 64, 3 of them per attention).

A group is the layers of one input, in the order the partition lowers them; the joined kernel runs where the first
of them did (they all read an input that is there by then). A layer joins unless (the reason is in the plan's
notes): it is quantized or not float32; its weights or bias are not constants; a FULLY_CONNECTED's rows are not
its input's pixels, or a CONV_2D is not 1x1 at stride 1; its fused activation differs from the group's first, or
an elementwise step is fused into it (a post-op of one layer would need its own run of channels); its output is a
partition input or output, shares a buffer with a dropped reshape, or is placed already; or its output channels
are not a multiple of 4 and another layer follows it (the next part must start at a whole slice).
"""

from __future__ import annotations

from typing import ClassVar, Protocol, cast

import numpy as np

from ..graph import ACT_NONE, Graph, Node
from ..phwc4 import bhwc, slices
from .context import LowerContext
from .fused_op import FusedOp
from .view import PartitionView, PassResult

JOINABLE = ("FULLY_CONNECTED", "CONV_2D")


class JoinableOp(Protocol):
    """An op whose layers of one input can run as one kernel (ops/conv.py: CONV_2D, FULLY_CONNECTED)."""

    @staticmethod
    def lower_joined(nodes: list[Node], ctx: LowerContext, joined: int) -> None:
        """Lower ``nodes`` as one kernel writing their outputs side by side along the channels of ``joined``."""


class SiblingsOp(FusedOp):
    """Stands in as the op of a group's first layer (a subclass per group: ``for_chain``)."""

    members: ClassVar[tuple[int, ...]]  # the group's nodes, in the order of their channels in the joined result

    @classmethod
    def lower(cls, node: Node, graph: Graph, ctx: LowerContext) -> None:
        nodes = [graph.nodes[n] for n in cls.members]
        channels = [bhwc(ctx.view.shapes[m.outputs[0]])[3] for m in nodes]
        joined = ctx.scratch((*ctx.view.shapes[node.outputs[0]][:-1], sum(channels)))
        first = 0
        for m, c in zip(nodes, channels):
            ctx.view.placed[m.outputs[0]] = (joined, first)
            first += slices(c)
        cast(JoinableOp, cls.original).lower_joined(nodes, ctx, joined)


def _why_not(view: PartitionView, n: int, names: dict[int, set[int]]) -> str:
    """Why node ``n`` cannot join a group ("" if it can)."""
    graph = view.graph
    node = graph.nodes[n]
    ins = view.node_inputs(n)
    if node.op not in JOINABLE or len(ins) < 2 or not hasattr(view.op(n), "lower_joined"):
        return "not a FULLY_CONNECTED or CONV_2D"
    out = node.outputs[0]
    tensors = [ins[0], ins[1], out] + ([ins[2]] if len(ins) > 2 and ins[2] >= 0 else [])
    if any(graph.tensors[t].quant is not None or graph.tensors[t].dtype != np.float32 for t in tensors):
        return "not a float32 layer"
    if not all(view.is_const(t) for t in tensors[1:2] + tensors[3:]):
        return "its weights or bias are computed at run time"
    w_shape = view.shapes[ins[1]]
    if view.shapes[ins[0]][-1] != w_shape[-1]:
        return "its rows are not its input's pixels" if node.op == "FULLY_CONNECTED" else "a grouped convolution"
    if node.op == "CONV_2D" and (len(w_shape) != 4 or tuple(w_shape[1:3]) != (1, 1) or
                                 (int(node.attrs.get("stride_h", 1)), int(node.attrs.get("stride_w", 1))) != (1, 1)):
        return "not a 1x1 convolution at stride 1"
    if view.postops.get(n):
        return "an elementwise step is fused into it"
    if n in view.input_affine:
        return "it reads its input scaled and shifted (fuse_input_affine.py)"
    if out in view.inputs or out in view.outputs:
        return "its output crosses the partition's boundary"
    if out in names or out in view.shared_buffers():
        return "its output shares a buffer (a dropped reshape, a placed concatenation)"
    return ""


def run(view: PartitionView) -> PassResult:
    result = PassResult("fuse_siblings")
    graph = view.graph
    names = view.buffer_names()
    groups: dict[int, list[int]] = {}  # input -> the layers that can join, in lowering order
    for n in view.nodes:
        why = _why_not(view, n, names)
        if why:
            if graph.nodes[n].op in JOINABLE:
                result.declined.append(f"{graph.nodes[n]}: {why}")
            continue
        groups.setdefault(view.node_inputs(n)[0], []).append(n)
    removed: set[int] = set()
    for src, members in groups.items():
        act = graph.nodes[members[0]].attrs.get("fused_activation_function", ACT_NONE)
        group = [m for m in members if graph.nodes[m].attrs.get("fused_activation_function", ACT_NONE) == act]
        # every part but the last starts the next at a whole slice: the one of partial slices, if any, goes last
        whole = [m for m in group if bhwc(view.shapes[graph.nodes[m].outputs[0]])[3] % 4 == 0]
        group = whole + [m for m in group if m not in whole][:1]
        if len(group) < 2:
            continue
        root = min(group, key=view.nodes.index)  # the joined kernel runs where the first of them did
        view.ops[root] = SiblingsOp.for_chain(view.op(root), members=tuple(group))
        removed.update(m for m in group if m != root)
        result.applied.append(f"nodes {', '.join(map(str, group))} (reading tensor {src}) in one kernel")
    view.nodes = [n for n in view.nodes if n not in removed]
    return result
