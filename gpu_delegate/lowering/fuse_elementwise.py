"""Fuse elementwise nodes (activations, ADD/MUL/... with a constant or an already-computed tensor) into the
kernel that produces their input, and give every quantized output its quantize-dequantize step.

Each fused node becomes a `PostOp` applied to the producer's result before it is stored, so the
intermediate tensor is never written. An elementwise op takes part by defining ``Op.gpu_expr``. On 8-bit grids,
steps whose result is a function of one value's code (swish, a rescaling by constants) become one lookup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..graph import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1
from ..phwc4 import bhwc
from .plan import CodeTable, PostOp
from .postops import (
    ACTIVATION_EXPR,
    ConstKey,
    TableKey,
    activation_postop,
    elementwise_postops,
    fake_quant_postop,
    lut_postop,
    table_rows,
)
from .view import PartitionView, PassResult


def run(view: PartitionView, quantized: bool, const_key: ConstKey, table_key: TableKey) -> PassResult:
    """``const_key(tensor, mode)`` registers a constant operand and returns its key, ``table_key(node, rows)`` a
    node's lookup table."""
    result = PassResult("fuse_elementwise")
    graph = view.graph
    position = {n: i for i, n in enumerate(view.nodes)}
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    root_of: dict[int, int] = {}  # tensor -> node whose kernel writes it
    fused: set[int] = set()
    # node m reading x and f(x), f fused with a "keep" of x before it: m -> (the slot, x, the node whose kernel runs)
    pending: dict[int, tuple[int, int, int]] = {}
    # node m whose result a composed lookup in node p's kernel gives already (composed_table): m -> p
    looked_up: dict[int, int] = {}
    for n in view.nodes:
        node = graph.nodes[n]
        ins = view.node_inputs(n)
        expr = view.op(n).gpu_expr(node, graph)
        fused_into = None
        if n in looked_up:
            fused_into = looked_up.pop(n)
            fused.add(n)
            result.applied.append(f"{node} looked up in the kernel of {graph.nodes[fused_into]}")
        elif n in pending and expr is not None:
            fused_into = _fuse_kept_reader(view, n, expr, pending.pop(n), result)
            fused.add(n)
        for flowing in range(min(2, len(ins))) if expr is not None and fused_into is None else ():
            t = ins[flowing]
            p = root_of.get(t)
            if p is None:
                continue
            why_not = ""
            users, leaves = view.buffer_readers(t, readers, names, outputs)
            partner = _reader_of_both(view, n, t, users, readers, names, outputs) \
                if not leaves and len(users) == 2 else None
            if leaves or (len(users) != 1 and partner is None):
                why_not = f"tensor {t} is read elsewhere too"
            elif len(node.outputs) != 1 or len(graph.nodes[p].outputs) != 1:
                why_not = "a node with several outputs takes part"
            ops = None if why_not else elementwise_postops(view, n, flowing, expr or "", const_key, table_key)
            if ops is None:
                why_not = why_not or "the other operand broadcasts in a way a post-op cannot read"
            else:
                operand = next((o.tensor_operand for o in ops if o.tensor_operand is not None), None)
                while operand in view.aliases:  # a dropped reshape's output is written by its source's writer
                    operand = view.aliases[operand]
                if operand is not None and operand in root_of and position[root_of[operand]] >= position[p]:
                    why_not = "the other operand is not ready when the producer runs"
            if why_not:
                result.declined.append(f"{node} into {graph.nodes[p]}: {why_not}")
                continue
            fused_into = p
            fused.add(n)
            steps = view.postops.setdefault(p, [])
            composed = composed_table(view, t, n, partner) if quantized and partner is not None else None
            if composed is not None and partner is not None:
                # swish on an 8-bit grid: MUL(x, f(x)) is a function of x's code alone, one lookup
                ops = [lut_postop(composed, table_key(partner, table_rows(composed)), partner)]
                view.written_as[node.outputs[0]] = graph.nodes[partner].outputs[0]
                looked_up[partner] = p
                partner = None
            if partner is not None:
                steps.append(PostOp("keep", slot=n, node=n))
                pending[partner] = (n, t, p)
            elif ops and ops[0].kind == "lut" and steps and _same_grid(steps[-1], ops[0]):
                # the lookup rounds onto the grid the producer's fake-quant step rounds onto, the same value
                ops = [dataclasses.replace(ops[0], exact=steps.pop().exact), *ops[1:]]
            steps.extend(ops or [])
            view.written_as[t] = node.outputs[0]
            result.applied.append(f"fused {node} into {graph.nodes[p]}" +
                                  (f", keeping tensor {t} for {graph.nodes[partner]}" if partner is not None else ""))
            break
        owner = fused_into if fused_into is not None else n
        for t in node.outputs:
            root_of[t] = owner
        # a looked-up value is on the output's grid already, as is the result of an op that keeps its input's grid
        if quantized and len(node.outputs) == 1 and view.op(n).gpu_table(node, graph) is None and \
                not _ends_in_lookup_of(view, owner, n) and not (owner == n and view.op(n).gpu_keeps_grid(node, graph)) \
                and n not in view.softmax_after:  # a product normalizing its scores rounds them itself
            fq = fake_quant_postop(view, node.outputs[0], n)
            if fq is not None:
                view.postops.setdefault(owner, []).append(fq)
                result.applied.append(f"fake-quant step after {node}")
    if quantized:
        for p, steps in view.postops.items():
            view.postops[p] = _fold_constant_chains(view, steps, table_key, result)
    view.nodes = [n for n in view.nodes if n not in fused]
    return result


def _fold_constant_chains(view: PartitionView, steps: list[PostOp], table_key: TableKey,
                          result: PassResult) -> list[PostOp]:
    """``steps`` with each run that starts at an 8-bit fake-quant step and goes on through steps with no operand
    but a scalar constant, up to its last fake-quant step (a rescaling x * a + b in int8: three divisions), as one
    lookup of the first step's code in a table of the run's float32 values (``_chain_values``): the run's
    result is a function of that code alone."""
    out: list[PostOp] = []
    i = 0
    while i < len(steps):
        first = steps[i]
        if first.kind != "fake_quant" or first.qmax - first.qmin > 255:
            out.append(first)
            i += 1
            continue
        v = np.arange(first.qmin, first.qmax + 1, dtype=np.float32) * np.float32(first.scale)
        end, folded = i, v
        for j in range(i + 1, len(steps)):
            stepped = _chain_step(view, steps[j], v)
            if stepped is None:
                break
            v = stepped
            if steps[j].kind == "fake_quant":
                end, folded = j, v
        if end == i:
            out.append(first)
            i += 1
            continue
        last = steps[end]
        table = CodeTable(folded, first.scale, int(-first.qmin), 0)
        out.append(lut_postop(table, table_key(last.node, table_rows(table)), last.node, first.exact))
        result.applied.append(f"{end - i + 1} steps after {view.graph.nodes[first.node]} looked up by its code")
        i = end + 1
    return out


def _chain_step(view: PartitionView, step: PostOp, v: np.ndarray) -> np.ndarray | None:
    """Post-op ``step`` applied to float32 values ``v`` as the kernel applies it, if it is a fake-quant step, a
    fused activation, or a binary op with a scalar constant operand (_FLOAT32_EXPRS); None for any other step."""
    if step.kind == "fake_quant":
        return fake_quant_float32(v, step.scale, step.qmin, step.qmax)
    if step.kind != "expr":
        return None
    with np.errstate(all="ignore"):
        if step.operand is None:
            activation = _ACTIVATIONS_BY_EXPR.get(step.expr)
            return activation(v).astype(np.float32) if activation is not None else None
        binary = _FLOAT32_EXPRS.get(step.expr)
        if step.operand != "scalar" or binary is None:
            return None
        consts = [view.const(u) for u in view.node_inputs(step.node) if view.is_const(u)]
        if len(consts) != 1 or consts[0] is None or np.size(consts[0]) != 1:
            return None
        b = np.float32(np.asarray(consts[0]).reshape(-1)[0])
        return (binary(np.full_like(v, b), v) if step.operand_first else binary(v, np.full_like(v, b))).astype(
            np.float32)


def _ends_in_lookup_of(view: PartitionView, p: int, n: int) -> bool:
    """Whether node p's kernel ends in a lookup of node n's output (a composed table: on n's grid already)."""
    steps = view.postops.get(p, [])
    return bool(steps) and steps[-1].kind == "lut" and steps[-1].node == n


def composed_table(view: PartitionView, x: int, n: int, m: int) -> CodeTable | None:
    """Node m's output for every code of 8-bit tensor ``x``, where unary node ``n`` reads x and m reads x and n's
    output (swish: MUL(x, LOGISTIC(x))): n's table, then m's post-ops (its expression, fused activation and
    fake-quant step) evaluated in float32 as the kernel evaluates them, so that the lookup gives what the steps it
    replaces gave, value for value. None unless n has a table, m's output is 8-bit and per-tensor quantized, and
    m's steps are plain float32 arithmetic (_FLOAT32_EXPRS, _FLOAT32_ACTIVATIONS)."""
    graph = view.graph
    node_n, node_m = graph.nodes[n], graph.nodes[m]
    table = view.op(n).gpu_table(node_n, graph)
    expr = view.op(m).gpu_expr(node_m, graph)
    fq = fake_quant_postop(view, node_m.outputs[0], m)
    if table is None or expr is None or fq is None or fq.qmax - fq.qmin > 255:
        return None
    codes = np.arange(table.values.size, dtype=np.float32) + np.float32(table.code_min - table.zero_point)
    on_grid = codes * np.float32(table.scale)  # x after its fake-quant step: the code times the scale, in float32
    binary = _FLOAT32_EXPRS.get(expr)
    activation = _FLOAT32_ACTIVATIONS.get(int(node_m.attrs.get("fused_activation_function", ACT_NONE)))
    if binary is None or activation is None:
        return None
    a, b = [on_grid if u == x else table.values for u in view.node_inputs(m)]
    with np.errstate(all="ignore"):
        v = activation(binary(a, b)).astype(np.float32)
    return CodeTable(fake_quant_float32(v, fq.scale, fq.qmin, fq.qmax), table.scale, table.zero_point,
                     table.code_min)


# Binary ops' dialect expressions (Op.gpu_expr) and fused activations as numpy computes them in float32, which rounds
# as OpenCL C and GLSL do (no transcendental functions: their last bits differ between libraries).
_FLOAT32_EXPRS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "a + b": np.add, "a - b": np.subtract, "a * b": np.multiply, "a / b": np.divide,
    "max(a, b)": np.maximum, "min(a, b)": np.minimum, "(a - b) * (a - b)": lambda a, b: (a - b) * (a - b)}
_FLOAT32_ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    ACT_NONE: lambda v: v, ACT_RELU: lambda v: np.maximum(v, np.float32(0.0)),
    ACT_RELU6: lambda v: np.minimum(np.maximum(v, np.float32(0.0)), np.float32(6.0)),
    ACT_RELU_N1_TO_1: lambda v: np.minimum(np.maximum(v, np.float32(-1.0)), np.float32(1.0))}


_ACTIVATIONS_BY_EXPR = {ACTIVATION_EXPR[code]: f for code, f in _FLOAT32_ACTIVATIONS.items() if code != ACT_NONE}


def fake_quant_float32(v: np.ndarray, scale: float, qmin: float, qmax: float) -> np.ndarray:
    """The fake-quant step as OpenCL's kernels compute it (dialect/fake_quant.inc.dialect with the prelude's
    QROUND: clamp, NaN to the lower bound, then truncate v + copysign(0.5, v)), in float32."""
    s = np.float32(scale)
    with np.errstate(all="ignore"):
        q = v / s
    q = np.where(q >= np.float32(qmin), q, np.float32(qmin))
    q = np.where(q <= np.float32(qmax), q, np.float32(qmax)).astype(np.float32)
    return np.trunc(q + np.copysign(np.float32(0.5), q)).astype(np.float32) * s


def _same_grid(fake_quant: PostOp, lut: PostOp) -> bool:
    return fake_quant.kind == "fake_quant" and (fake_quant.scale, fake_quant.qmin, fake_quant.qmax) == \
        (lut.scale, lut.qmin, lut.qmax)


def _reader_of_both(view: PartitionView, n: int, t: int, users: list[int], readers: dict[int, list[int]],
                    names: dict[int, set[int]], outputs: set[int]) -> int | None:
    """The node m that reads tensor ``t`` and the output of unary node ``n`` (its only reader), both of t's shape
    (swish: MUL(x, LOGISTIC(x))): fused with n into t's producer, keeping t for m. None if there is none."""
    graph = view.graph
    node = graph.nodes[n]
    others = [m for m in users if m != n]
    if len(view.node_inputs(n)) != 1 or len(node.outputs) != 1 or len(others) != 1:
        return None
    m, y = others[0], node.outputs[0]
    reader = graph.nodes[m]
    if sorted(view.node_inputs(m)) != sorted([t, y]) or len(reader.outputs) != 1 or \
            view.op(m).gpu_expr(reader, graph) is None or view.nodes.index(m) < view.nodes.index(n):
        return None
    if view.buffer_readers(y, readers, names, outputs) != ([m], False):
        return None
    shape = bhwc(view.shapes[t])
    return m if bhwc(view.shapes[y]) == shape == bhwc(view.shapes[reader.outputs[0]]) else None


def _fuse_kept_reader(view: PartitionView, m: int, expr: str, kept: tuple[int, int, int], result: PassResult) -> int:
    """Fuse node m, which reads the value kept in ``slot`` (tensor x) and the chain's value, into the kernel of
    node p that computes both; returns p."""
    slot, x, p = kept
    node = view.graph.nodes[m]
    ins = view.node_inputs(m)
    k, flowing = ins.index(x), 1 - ins.index(x)
    steps = [PostOp("expr", expr=expr, operand="kept", slot=slot, operand_first=k < flowing, node=m)]
    act = activation_postop(int(node.attrs.get("fused_activation_function", ACT_NONE)), m)
    view.postops[p].extend(steps + ([act] if act is not None else []))
    view.written_as[ins[flowing]] = node.outputs[0]
    result.applied.append(f"fused {node} into {view.graph.nodes[p]}, reading the kept tensor {x}")
    return p
