"""Keras' wrap of negative indices read by the GATHER it feeds: SELECT(LESS(i, 0), ADD(i, n), i) into a GATHER along
an axis of size n (Keras 3's Embedding and ``ops.take`` wrap token ids so) becomes the gather's read of i itself,
adding n to a negative index before the clamp the GPU gather applies anyway (``view.wrapped_indices``; the kernel's
WRAP). Three kernels fewer, and the same row for every i: one in [-n, n) is wrapped as before, one below -n stays
negative and clamps to row 0 either way, one from n on clamps to row n - 1 either way.
"""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE
from .view import PartitionView, PassResult

SELECTS = {"SELECT", "SELECT_V2"}


def run(view: PartitionView) -> PassResult:
    result = PassResult("fuse_index_wrap")
    graph = view.graph
    readers, outputs = view.readers(), set(view.outputs)
    writer = {t: n for n in view.nodes for t in graph.nodes[n].outputs}
    dropped: set[int] = set()

    def sole_writer(t: int, reader: int) -> int | None:
        """The node writing t, where ``reader`` alone reads t and t leaves the partition nowhere."""
        n = writer.get(t)
        return n if n is not None and readers.get(t) == [reader] and t not in outputs else None

    def scalar(t: int) -> float | None:
        value = view.const(t)
        return float(np.asarray(value).reshape(-1)[0]) if value is not None and value.size == 1 else None

    def other_input(n: int, i: int) -> int | None:
        ins = view.node_inputs(n)
        if len(ins) != 2 or ins.count(i) != 1:
            return None
        return ins[1 - ins.index(i)]

    for g in view.nodes:
        gather = graph.nodes[g]
        if gather.op != "GATHER":
            continue
        params, sel = view.node_inputs(g)[:2]
        s = sole_writer(sel, g)
        if s is None or graph.nodes[s].op not in SELECTS:
            continue
        cond, wrapped, i = view.node_inputs(s)
        less, add = sole_writer(cond, s), sole_writer(wrapped, s)
        if less is None or add is None or graph.nodes[less].op != "LESS" or graph.nodes[add].op != "ADD":
            continue
        zero, size = other_input(less, i), other_input(add, i)
        if zero is None or size is None or view.node_inputs(less)[0] != i:
            continue
        axis = int(gather.attrs.get("axis", 0))
        shape = view.shapes[params]
        axis += len(shape) if axis < 0 else 0
        why_not = ""
        if int(graph.nodes[add].attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
            why_not = "the ADD has an activation"
        elif scalar(zero) != 0.0:
            why_not = "the LESS does not compare with 0"
        elif not 0 <= axis < len(shape) or scalar(size) != shape[axis]:
            why_not = f"the ADD does not add the gathered axis' size {shape[axis] if 0 <= axis < len(shape) else '?'}"
        elif graph.tensors[i].dtype != np.int32 or view.shapes[i] != view.shapes[sel]:
            why_not = "the indices are not int32 of the SELECT's shape"
        if why_not:
            result.declined.append(f"{graph.nodes[s]} into {gather}: {why_not}")
            continue
        view.read_as[(g, 1)] = i
        for n in (less, add, s):
            readers.pop(graph.nodes[n].outputs[0], None)
        readers[i] = [r for r in readers.get(i, []) if r not in (less, add, s)] + [g]
        view.wrapped_indices.add(g)
        dropped.update((less, add, s))
        result.applied.append(f"{graph.nodes[less]}, {graph.nodes[add]} and {graph.nodes[s]} in the index reads of "
                              f"{gather}")
    view.nodes = [n for n in view.nodes if n not in dropped]
    return result
