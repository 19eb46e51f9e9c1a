"""Write an output that the partition's last nodes only reshape and concatenate straight in the dense order the
host reads (row-major BHWC), instead of in PHWC4 for a conversion kernel to reorder.

A detection head ends so: each level's convolution is RESHAPEd to [B, boxes, values] and the levels are
CONCATENATEd (YOLO, SSD). In PHWC4 a reshape that changes the channel count is a gather kernel, the concatenation a
copy, and the output another conversion at the end of every invoke (the YOLO-style head's: 0.3 ms of reshapes and
concatenation on PoCL, then the conversion). In the dense order a reshape moves nothing and a concatenation's part
is a run of rows at an offset, so each source tensor (a leaf of the tree of reshapes and concatenations) is
stored once, by kernels/opencl/convert_from_phwc4.cl, at its place: row after row of ROW values, STRIDE apart,
from OFFSET. The output is then read as it is (base.OutputRoute ``dense``).

Declined (with the reason) unless: the API is OpenCL (GL's raw buffers take whole vec4, and a part need not
start at one); the output is read by no node of the partition; its writer is a RESHAPE, SQUEEZE, EXPAND_DIMS or
CONCATENATION without a fused activation, whose post-ops are identities (a fake-quant step onto the grid its input
is on already, a DEQUANTIZE's copy); a concatenation fills a contiguous run of the output (not a strided part, as
inside another concatenation along a later axis); each leaf is a float-stored tensor (no constant) whose pixels
lie within the output's rows. The tree grows through a tensor that a node of the same kinds writes and the tree
alone reads; where that node cannot be taken, it stays a kernel and its output is a leaf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph import ACT_NONE, Graph, Node
from ..phwc4 import DENSE_RUN, bhwc, dense_store_grid
from .context import LowerContext
from .fused_op import FusedOp
from .place_concat import FLOAT_STORED
from .plan import PostOp
from .view import PartitionView, PassResult

RESHAPES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")


@dataclass(frozen=True)
class Store:
    """Leaf ``source`` (PHWC4) stored into the dense output: its values in row-major order, ``row`` at a time,
    rows ``stride`` apart, the first at ``offset``."""

    source: int
    row: int
    stride: int
    offset: int


class DenseStoreOp(FusedOp):
    """Stands in as the op of the tree's root node (a subclass per output: ``for_chain``)."""

    stores: ClassVar[tuple[Store, ...]]

    @classmethod
    def lower(cls, node: Node, graph: Graph, ctx: LowerContext) -> None:
        dst = ctx.view.final(node.outputs[0])
        ctx.dense_output(dst)
        for store in cls.stores:
            ctx.kernel("convert_from_phwc4", {"src": store.source}, {"dst": dst},
                       defines={"RUN": DENSE_RUN, "ROW": store.row, "STRIDE": store.stride, "OFFSET": store.offset},
                       grid=dense_store_grid(ctx.bhwc(store.source)), variants={"opencl": "convert_from_phwc4"})


@dataclass
class _Tree:
    view: PartitionView
    writer: dict[int, int]
    readers: dict[int, list[int]]
    names: dict[int, set[int]]
    outputs: set[int]
    nodes: list[int]
    stores: list[Store]


def run(view: PartitionView, api: str) -> PassResult:
    result = PassResult("dense_outputs")
    if api != "OpenCL":
        return result
    graph = view.graph
    writer = {view.final(graph.nodes[n].outputs[0]): n for n in view.nodes if graph.nodes[n].outputs}
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    for t in view.outputs:
        n = writer.get(t)
        if n is None or not _layout_node(view, n):
            continue
        if t in names:
            result.declined.append(f"output {t}: it shares its buffer with a dropped reshape")
            continue
        if readers.get(t):
            result.declined.append(f"output {t}: nodes of the partition read it")
            continue
        tree = _Tree(view, writer, readers, names, outputs, [], [])
        size = int(np.prod(view.shapes[t]))
        why_not = _take(tree, n, Store(-1, size, size, 0))
        if why_not:
            result.declined.append(f"output {t} ({graph.nodes[n]}): {why_not}")
            continue
        for m in tree.nodes:
            view.postops.pop(m, None)  # identities (_identity_steps)
        view.ops[n] = DenseStoreOp.for_chain(view.op(n), stores=tuple(tree.stores))
        view.nodes = [m for m in view.nodes if m == n or m not in tree.nodes]
        result.applied.append(f"output {t}: {len(tree.nodes)} reshapes and concatenations as {len(tree.stores)} "
                              "dense stores")
    return result


def _layout_node(view: PartitionView, n: int) -> bool:
    """Whether node ``n`` is still a reshape or concatenation of its own (no pass made it stand in for a chain)."""
    name, op = view.graph.nodes[n].op, view.op(n)
    return (name in RESHAPES or name == "CONCATENATION") and not (isinstance(op, type) and issubclass(op, FusedOp))


def _take(tree: _Tree, n: int, place: Store) -> str:
    """Take node ``n``, whose output goes to ``place`` (its source unset), and what it reads into the tree; why not,
    or ""."""
    view = tree.view
    node = view.graph.nodes[n]
    if int(node.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
        return f"{node} has a fused activation"
    inputs = view.node_inputs(n)
    why_not = _identity_steps(view, n, inputs[:1] if node.op in RESHAPES else inputs)
    if why_not:
        return why_not
    tree.nodes.append(n)
    if node.op in RESHAPES:
        return _place(tree, n, inputs[0], place)
    out_shape = view.graph_shape(node.outputs[0])
    axis = int(node.attrs.get("axis", 0)) % max(len(out_shape), 1)
    if place.row != math.prod(out_shape):
        return f"{node} joins into a strided part of the output"
    total = math.prod(out_shape[axis:])
    first = place.offset
    for t in inputs:
        inner = math.prod(view.graph_shape(t)[axis:])
        # the concatenation's output is a contiguous run of the output's values (checked above), so each part's
        # rows of ``inner`` values, ``total`` apart in it, land so there too
        why_not = _place(tree, n, t, Store(-1, inner, total, first))
        if why_not:
            return why_not
        first += inner
    return ""


def _place(tree: _Tree, reader: int, t: int, place: Store) -> str:
    """Place tensor ``t`` (read by ``reader``): further into the tree where a layout node of the tree alone writes
    it, else as a leaf."""
    view = tree.view
    users, leaves = view.buffer_readers(t, tree.readers, tree.names, tree.outputs)
    if users == [reader] and not leaves:
        while t in view.aliases:  # a dropped reshape: the same buffer, the same dense order
            t = view.aliases[t]
        m = tree.writer.get(t)
        if m is not None and _layout_node(view, m):
            taken = len(tree.nodes), len(tree.stores)
            if not _take(tree, m, place):
                return ""
            del tree.nodes[taken[0]:], tree.stores[taken[1]:]  # a leaf, then: its writer stays a kernel
    if view.is_const(t):
        return f"tensor {t} is a constant"
    dtype = np.dtype(view.graph.tensors[t].dtype)
    if dtype.type not in FLOAT_STORED:
        return f"tensor {t} is {dtype.name} (stored apart from the delegate's precision)"
    channels = bhwc(view.shapes[t])[3]
    if place.row % channels:
        return f"tensor {t}'s pixels of {channels} channels straddle the output's rows of {place.row}"
    tree.stores.append(Store(t, place.row, place.stride, place.offset))
    return ""


def _identity_steps(view: PartitionView, n: int, inputs: list[int]) -> str:
    """Why the post-ops fused into node ``n`` are not all identities on what it reads, or ""."""
    steps: list[PostOp] = view.postops.get(n, [])
    for p in steps:
        if p.kind == "expr" and p.expr == "a" and p.operand is None:
            continue  # a DEQUANTIZE (or QUANTIZE onto the same grid) fused after it
        if p.kind == "fake_quant" and p.node == n:
            grid = view.quant_grid(view.graph.nodes[n].outputs[0])
            if grid is not None and all(view.quant_grid(t) == grid for t in inputs):
                continue
        return f"{view.graph.nodes[n]} has a post-op that changes values ({p.kind})"
    return ""

