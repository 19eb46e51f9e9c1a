"""Fuse a per-channel elementwise chain into the 1x1 convolution that reads its result: the kernel applies it to
each vec4 of its input as it reads it (KernelCall.preops), and the chain's own pass over the tensor is gone.

A pre-activation layer (DenseNet's BN -> ReLU -> 1x1 conv) scales and shifts every channel of a large tensor
(the block's whole concatenated map) and clamps it, only for one convolution to read the result. Folding the
scale and shift into the filter would be exact only without the ReLU between them; applying them at the read is
exact always: the same float steps on the same values, in the same order (in fp16 storage one rounding fewer,
since the chain's result is no longer stored). The convolution reads each input vec4 once per block of output
slices, so the chain's few operations per value come at a fraction of the copy's memory traffic and launch.

Fused where: the chain is a standalone elementwise node (fuse_elementwise left it, with whatever it fused after
it), every step of it reads nothing but a per-slice or scalar constant (expr) or rounds onto a grid (fake_quant),
its input has its output's shape, its result is read by exactly one node and by nothing outside the partition or
through a dropped reshape, and that node is a CONV_2D with a constant filter of a 1x1 window at stride 1 that
reads it as its input (the flat conv2d_1x1 kernel, which carries the chain); declined otherwise, with the reason.
A chain that fuse_elementwise fused into a CONCATENATION moves on to such a convolution the same way, so that the
concatenation is a plain join again (one place_concat can drop).
"""

from __future__ import annotations

from ..graph import Graph
from ..phwc4 import bhwc
from .plan import PostOp
from .postops import ConstKey, TableKey, elementwise_postops
from .view import PartitionView, PassResult

READ_OPERANDS = (None, "channel", "scalar")


def run(view: PartitionView, const_key: ConstKey, table_key: TableKey, max_buffers: int | None = None
        ) -> PassResult:
    """``max_buffers``: the most buffers one kernel may bind (the device's limit; None: no limit), which the
    convolution's own, its post-ops' operands and the chain's operands must fit together."""
    result = PassResult("fuse_input_chain")
    graph = view.graph
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    fused: set[int] = set()
    for n in view.nodes:
        node = graph.nodes[n]
        if node.op == "CONCATENATION":
            _move_from_concat(view, n, readers, names, outputs, max_buffers, result)
            continue
        expr = view.op(n).gpu_expr(node, graph)
        if expr is None or len(node.outputs) != 1:
            continue
        out = view.final(node.outputs[0])
        users, leaves = view.buffer_readers(out, readers, names, outputs)
        if len(users) != 1 or graph.nodes[users[0]].op != "CONV_2D":
            continue  # not a chain ending at a convolution: nothing to consider
        conv = users[0]
        why_not, steps, src = _chain(view, n, expr, out, conv, leaves, const_key, table_key)
        if not why_not and max_buffers is not None and _buffers(view, conv, steps) > max_buffers:
            why_not = f"the convolution would bind more than the device's {max_buffers} buffers"
        if why_not:
            result.declined.append(f"{node} into {graph.nodes[conv]}: {why_not}")
            continue
        view.preops[conv] = steps
        view.read_as[(conv, 0)] = src
        fused.add(n)
        result.applied.append(f"fused {node} into the input read of {graph.nodes[conv]}")
    view.nodes = [n for n in view.nodes if n not in fused]
    return result


def _move_from_concat(view: PartitionView, n: int, readers: dict[int, list[int]], names: dict[int, set[int]],
                      outputs: set[int], max_buffers: int | None, result: PassResult) -> None:
    """A chain fuse_elementwise fused into a CONCATENATION (its sole reader) moves on to the 1x1 convolution that
    reads the chain's result, where the same conditions hold: the concatenation is then a plain join, which
    place_concat may drop (DenseNet's transition layers: BN -> ReLU -> 1x1 conv on a dense block's whole map).
    The concatenation's own steps (its fake-quant step) stay with it."""
    graph = view.graph
    node = graph.nodes[n]
    out = node.outputs[0]
    steps = view.postops.get(n, [])
    own = 0
    while own < len(steps) and steps[own].node == n:
        own += 1
    chain = steps[own:]
    end = view.final(out)
    if not chain or end == out:
        return
    users, leaves = view.buffer_readers(end, readers, names, outputs)
    if len(users) != 1 or graph.nodes[users[0]].op != "CONV_2D":
        return
    conv = users[0]
    why_not = ""
    if leaves:
        why_not = "its result is needed outside the partition"
    elif any(p.kind not in ("expr", "fake_quant") or p.operand not in READ_OPERANDS for p in chain):
        why_not = "a step of the chain needs more than a per-slice constant"
    elif view.node_inputs(conv)[0] != end or end in view.node_inputs(conv)[1:]:
        why_not = "the convolution reads it other than as its input"
    else:
        why_not = _flat_conv(view, graph, conv)
    if not why_not and max_buffers is not None and _buffers(view, conv, chain) > max_buffers:
        why_not = f"the convolution would bind more than the device's {max_buffers} buffers"
    if why_not:
        result.declined.append(f"the chain fused into {node}, into {graph.nodes[conv]}: {why_not}")
        return
    view.preops[conv] = chain
    view.postops[n] = steps[:own]
    view.read_as[(conv, 0)] = out
    t = out
    while t in view.written_as:  # the concatenation writes its own output again
        t = view.written_as.pop(t)
    result.applied.append(f"moved the chain fused into {node} to the input read of {graph.nodes[conv]}")


def _chain(view: PartitionView, n: int, expr: str, out: int, conv: int, leaves: bool, const_key: ConstKey,
           table_key: TableKey) -> tuple[str, list[PostOp], int]:
    """(why not, or "", the chain's steps, the tensor it reads)."""
    graph = view.graph
    if leaves:
        return "its result is needed outside the partition", [], -1
    ins = view.node_inputs(n)
    flowing = [k for k, t in enumerate(ins) if t >= 0 and not view.is_const(t)]
    if len(flowing) != 1:
        return "it reads more than one computed tensor", [], -1
    src = ins[flowing[0]]
    if bhwc(view.shapes[src]) != bhwc(view.shapes[out]):
        return "its input broadcasts", [], -1
    ops = elementwise_postops(view, n, flowing[0], expr, const_key, table_key)
    if ops is None:
        return "its constant operand broadcasts in a way a per-slice read cannot follow", [], -1
    steps = ops + view.postops.get(n, [])
    for p in steps:
        if p.kind not in ("expr", "fake_quant") or p.operand not in READ_OPERANDS:
            return f"a step ({p.kind}, operand {p.operand}) needs more than a per-slice constant", [], -1
    conv_ins = view.node_inputs(conv)
    if conv_ins[0] != out or out in conv_ins[1:]:
        return "the convolution reads it other than as its input", [], -1
    why = _flat_conv(view, graph, conv)
    if why:
        return why, [], -1
    return "", steps, src


def _buffers(view: PartitionView, conv: int, steps: list[PostOp]) -> int:
    """Buffers the fused convolution binds: src, dst, filter, bias, its post-ops' operands, the chain's."""
    ins = view.node_inputs(conv)
    own = 3 + int(len(ins) > 2 and ins[2] >= 0)
    return own + sum(p.source is not None for p in [*view.postops.get(conv, []), *steps])


def _flat_conv(view: PartitionView, graph: Graph, conv: int) -> str:
    """Why CONV_2D ``conv`` does not lower to the flat 1x1 kernel (conv.emit_conv), or ""."""
    node = graph.nodes[conv]
    ins = view.node_inputs(conv)
    if not view.is_const(ins[1]) or (len(ins) > 2 and ins[2] >= 0 and not view.is_const(ins[2])):
        return "the convolution's filter or bias is computed at run time"
    o, kh, kw, cg = view.shapes[ins[1]]
    if (kh, kw) != (1, 1) or (node.attrs.get("stride_h", 1), node.attrs.get("stride_w", 1)) != (1, 1):
        return "the convolution's window is not 1x1 at stride 1"
    if cg != bhwc(view.shapes[ins[0]])[3]:
        return "the convolution is grouped"
    if conv in view.extra_padding:
        return "the convolution pads its input"
    if bhwc(view.shapes[ins[0]])[:3] != bhwc(view.shapes[node.outputs[0]])[:3]:
        return "the convolution's output has another size"
    return ""
