"""Drop a PAD that appends zero channels to a tensor an elementwise node reads (BlazeFace's residual branch:
x -> MAX_POOL_2D -> PAD channels -> ADD): the node's fused post-op reads the unpadded tensor, its channels
beyond the tensor's read as 0 (plan.PostOp operand "zero_extended"), which is exactly what the PAD wrote there.

``run`` goes before fuse_elementwise and redirects the read; the node must then be fused into the kernel of its
other operand, as a post-op: ``restore`` (after fuse_elementwise) puts back every PAD whose reader was not.
"""

from __future__ import annotations

import numpy as np

from ..graph import Node
from ..phwc4 import bhwc
from .merge_pad import zero_pads
from .view import PartitionView, PassResult


def channel_pad(view: PartitionView, n: int) -> str | None:
    """None if PAD node ``n`` appends zeros after the channels of a float tensor and pads nothing else; else why
    it does not."""
    pads = zero_pads(view, n)
    if isinstance(pads, str):
        return pads
    tensor = view.graph.tensors[view.node_inputs(n)[0]]
    if tensor.quant is not None or tensor.dtype.kind != "f":
        return "its input is not a float tensor (a quantized zero is the zero point, not 0.0)"
    if np.any(pads[:3] != 0) or pads[3, 0] != 0 or pads[3, 1] <= 0:
        return "it pads more than the end of the channels"
    return None


def _applied(reader: Node, pad: Node) -> str:
    """The note of a PAD dropped for its reader (run writes it, restore takes it back)."""
    return f"{reader} reads the input of {pad}, its channels beyond read as 0"


def run(view: PartitionView) -> PassResult:
    result = PassResult("pad_channels")
    graph = view.graph
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    removed = set()
    for n in view.nodes:
        node = graph.nodes[n]
        if node.op not in ("PAD", "PADV2"):
            continue
        why_not = channel_pad(view, n)
        out = node.outputs[0]
        if why_not is None:
            users, leaves = view.buffer_readers(out, readers, names, outputs)
            if len(users) != 1 or leaves or names.get(out, {out}) != {out}:
                why_not = f"its output is read by {len(users)} nodes, under another name, or leaves the partition"
        if why_not is None:
            user = graph.nodes[users[0]]
            slots = [k for k, t in enumerate(view.node_inputs(user.index)) if t == out]
            if view.op(user.index).gpu_expr(user, graph) is None or len(user.inputs) != 2 or len(slots) != 1:
                why_not = f"its reader {user} is not a binary elementwise node reading it once"
            elif bhwc(view.shapes[user.outputs[0]]) != bhwc(view.shapes[out]):
                why_not = f"its reader {user} broadcasts it"
        if why_not is not None:
            result.declined.append(f"{node}: {why_not}")
            continue
        source = view.node_inputs(n)[0]
        view.read_as[(user.index, slots[0])] = source
        view.zero_extended[(user.index, slots[0])] = (n, out)
        readers[out].remove(user.index)
        readers.setdefault(source, []).append(user.index)
        removed.add(n)
        result.applied.append(_applied(user, node))
    view.nodes = [n for n in view.nodes if n not in removed]
    return result


def restore(view: PartitionView, result: PassResult) -> None:
    """Put back, just before its reader, each PAD whose reader is still a node of its own (fuse_elementwise did not
    make it a post-op reading the unpadded tensor): only a post-op reads a tensor with fewer channels."""
    graph = view.graph
    for (m, slot), (pad, padded) in sorted(view.zero_extended.items()):
        if m not in view.nodes:
            continue
        view.read_as.pop((m, slot))
        if graph.nodes[m].inputs[slot] != padded:
            view.read_as[(m, slot)] = padded
        del view.zero_extended[(m, slot)]
        view.nodes.insert(view.nodes.index(m), pad)
        result.applied.remove(_applied(graph.nodes[m], graph.nodes[pad]))
        result.declined.append(f"{graph.nodes[pad]}: its reader {graph.nodes[m]} was not fused as a post-op")
