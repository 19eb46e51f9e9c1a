"""Attention's scores as one kernel: a float BATCH_MATMUL whose result only a MUL by a scalar constant reads, and
that product's only a SOFTMAX (or the result straight into the SOFTMAX; either may read through a reshape to the
same shape, which moved nothing), computed with the normalization over each
row by kernels/dialect/batch_matmul_softmax.dialect: one launch instead of two (the MUL was a post-op already). The
product then writes the SOFTMAX's output (``written_as``) and ``softmax_after`` holds the scale and beta; ops see
them through LowerContext.softmax_after. The kernel stores the raw scores in its output before it normalizes them,
so its output must have no post-ops: it has none, as only float tensors take part (no fake-quant step) and the
SOFTMAX's readers find no producer to fuse into once it is gone (fuse_elementwise runs after this pass).
"""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE
from .view import PartitionView, PassResult

MATMULS = {"BATCH_MATMUL"}


def run(view: PartitionView) -> PassResult:
    result = PassResult("fuse_matmul_softmax")
    graph = view.graph
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    dropped: set[int] = set()

    def sole_reader(t: int) -> tuple[int, set[int]] | None:
        """The node that alone reads tensor t, under its own name or a dropped reshape's of the same shape, and those
        reshapes' names (nothing reads them once that node is fused)."""
        users, leaves = view.buffer_readers(t, readers, names, outputs)
        if leaves or len(users) != 1:
            return None
        group = names.get(t, {t})
        if any(a in group and view.shapes[a] != view.shapes[t] for a in view.node_inputs(users[0])):
            return None
        return users[0], group - {t}

    def is_float(t: int) -> bool:
        return graph.tensors[t].dtype == np.float32 and graph.tensors[t].quant is None

    for n in view.nodes:
        node = graph.nodes[n]
        if node.op not in MATMULS or n in view.write_transposed:
            continue
        out = node.outputs[0]
        found = sole_reader(out)
        if found is None:
            continue
        u, unread = found
        scale, chain = 1.0, [u]
        if graph.nodes[u].op == "MUL":
            mul = graph.nodes[u]
            other = [t for t in view.node_inputs(u) if t != out and t not in unread]
            value = view.const(other[0]) if len(other) == 1 else None
            act = int(mul.attrs.get("fused_activation_function", ACT_NONE))
            if value is None or value.size != 1 or value.dtype.kind != "f" or act != ACT_NONE or \
                    not is_float(mul.outputs[0]):
                continue
            scale = float(np.asarray(value, np.float32).reshape(-1)[0])
            found = sole_reader(mul.outputs[0])
            if found is None:
                continue
            chain.append(found[0])
            unread |= found[1]
        softmax = graph.nodes[chain[-1]]
        if softmax.op != "SOFTMAX":
            continue
        beta = float(softmax.attrs.get("beta", 1.0))
        why_not = ""
        if not all(is_float(t) for t in [*view.node_inputs(n), out, softmax.outputs[0]]):
            why_not = "it is not float"
        elif not beta > 0:
            why_not = f"beta {beta} is not positive"
        elif view.shapes[softmax.outputs[0]] != view.shapes[out]:
            why_not = "the softmax's shape is not the product's"
        if why_not:
            result.declined.append(f"{softmax} into {node}: {why_not}")
            continue
        for alias in unread:
            del view.aliases[alias]
        view.written_as[out] = softmax.outputs[0]
        view.softmax_after[n] = (scale, beta)
        dropped.update(chain)
        result.applied.append(f"{' and '.join(str(graph.nodes[c]) for c in chain)} in the kernel of {node}")
    view.nodes = [n for n in view.nodes if n not in dropped]
    return result
