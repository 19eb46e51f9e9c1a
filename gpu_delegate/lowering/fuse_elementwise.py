"""Fuse elementwise nodes (activations, ADD/MUL/... with a constant or an already-computed tensor) into the
kernel that produces their input, and give every quantized output its quantize-dequantize step.

Each fused node becomes a `PostOp` applied to the producer's result before it is stored, so the
intermediate tensor is never written. An elementwise op takes part by defining ``Op.gpu_expr``.
"""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH
from ..backends.codegen import literal
from ..ops import get_op
from .plan import PostOp, bhwc, slices
from .view import PartitionView

ACTIVATION_EXPR = {
    ACT_RELU: "max(a, SPLAT(0.0f))",
    ACT_RELU6: "clamp(a, SPLAT(0.0f), SPLAT(6.0f))",
    ACT_RELU_N1_TO_1: "clamp(a, SPLAT(-1.0f), SPLAT(1.0f))",
    ACT_TANH: "tanh(a)",
}


def activation_postop(code: int, node: int) -> PostOp | None:
    if code == ACT_NONE:
        return None
    if code not in ACTIVATION_EXPR:
        raise ValueError(f"fused activation {code} has no GPU form")
    return PostOp(_assign(ACTIVATION_EXPR[code]), node=node)


def _assign(expr: str, operand: bool = False, flowing_first: bool = True) -> str:
    if not operand:
        return f"{{ FLT4 a = v; v = {expr}; }}"
    if flowing_first:
        return f"{{ FLT4 a = v; FLT4 b = o; v = {expr}; }}"
    return f"{{ FLT4 a = o; FLT4 b = v; v = {expr}; }}"


def fake_quant_postop(view: PartitionView, t: int, node: int) -> PostOp | None:
    q = view.graph.tensors[t].quant
    dtype = view.graph.tensors[t].dtype
    if q is None or dtype.kind not in "iu" or q.per_channel:
        return None
    info = np.iinfo(dtype)
    scale, zp = q.scalar()
    args = [literal(x) for x in (float(scale), float(info.min - zp), float(info.max - zp))]
    return PostOp(f"v = fake_quant(v, {', '.join(args)});", node=node)


def elementwise_postops(view: PartitionView, n: int, flowing: int,
                        const_key) -> list[PostOp] | None:
    """The post-ops that compute node ``n`` from its input slot ``flowing``; None if it cannot be fused."""
    graph = view.graph
    node = graph.nodes[n]
    op = get_op(node.op)
    expr = op.gpu_expr(node, graph) if op is not None else None
    if expr is None:
        return None
    ins = view.node_inputs(n)
    data_ins = [k for k, t in enumerate(ins) if t >= 0]
    out_shape = bhwc(view.shapes[node.outputs[0]])
    if bhwc(view.shapes[ins[flowing]]) != out_shape:
        return None
    ops: list[PostOp] = []
    others = [k for k in data_ins if k != flowing]
    if len(others) > 1:
        return None
    if not others:
        ops.append(PostOp(_assign(expr), node=n))
    else:
        k = others[0]
        u = ins[k]
        mode = operand_mode(view, u, out_shape)
        if mode is None:
            return None
        source = const_key(u, mode) if view.is_const(u) else u
        ops.append(PostOp(_assign(expr, True, flowing_first=flowing < k), operand=mode, source=source, node=n))
    act = activation_postop(node.attrs.get("fused_activation_function", ACT_NONE), n)
    if act is not None:
        ops.append(act)
    return ops


def operand_mode(view: PartitionView, u: int, out: tuple[int, int, int, int]) -> str | None:
    shape = bhwc(view.shapes[u])
    if view.is_const(u) and int(np.prod(shape)) == 1:
        return "scalar"
    if shape == out:
        return "tensor"
    if shape[:3] == (1, 1, 1) and shape[3] == out[3]:
        return "channel"
    return None


def channel_const(view: PartitionView, u: int, mode: str) -> np.ndarray:
    """A constant operand as the vec4 rows a post-op reads: one row (scalar), one per slice (channel), or
    the whole tensor in PHWC4 (tensor)."""
    if mode == "tensor":
        from .emit import to_phwc4  # emit imports this module

        return to_phwc4(np.asarray(view.const(u), np.float32).reshape(bhwc(view.shapes[u])))
    value = np.asarray(view.const(u), np.float32).reshape(-1)
    if mode == "scalar":
        return np.full((1, 4), value[0], np.float32)
    rows = np.zeros(slices(value.size) * 4, np.float32)
    rows[: value.size] = value
    return rows.reshape(-1, 4)


def run(view: PartitionView, quantized: bool, const_key) -> None:
    """``const_key(tensor, mode)`` registers a constant operand and returns its key."""
    graph = view.graph
    position = {n: i for i, n in enumerate(view.nodes)}
    root_of: dict[int, int] = {}  # tensor -> node whose kernel writes it
    fused: set[int] = set()
    for n in view.nodes:
        node = graph.nodes[n]
        ins = view.node_inputs(n)
        fused_into = None
        for flowing in range(min(2, len(ins))):
            t = ins[flowing]
            p = root_of.get(t)
            if p is None or t in view.outputs or len(view.consumers(t)) != 1 or len(node.outputs) != 1:
                continue
            if len(graph.nodes[p].outputs) != 1:
                continue
            ops = elementwise_postops(view, n, flowing, const_key)
            if ops is None:
                continue
            operand = next((o.source for o in ops if o.operand and not isinstance(o.source, str)), None)
            if operand is not None and operand in root_of and position[root_of[operand]] >= position[p]:
                continue  # the other operand is not ready when the producer runs
            fused_into = p
            fused.add(n)
            view.postops.setdefault(p, []).extend(ops)
            view.written_as[t] = node.outputs[0]
            view.notes.append(f"fused {node} into {graph.nodes[p]}")
            break
        owner = fused_into if fused_into is not None else n
        for t in node.outputs:
            root_of[t] = owner
        if quantized and len(node.outputs) == 1:
            fq = fake_quant_postop(view, node.outputs[0], n)
            if fq is not None:
                view.postops.setdefault(owner, []).append(fq)
    view.nodes = [n for n in view.nodes if n not in fused]
