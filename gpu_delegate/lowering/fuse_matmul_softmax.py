"""Attention's scores as one kernel: a BATCH_MATMUL whose result only a MUL by a scalar constant reads, and that
product's only a SOFTMAX (or the result straight into the SOFTMAX; either may read through a reshape to the same
shape, which moved nothing), computed with the normalization over each row by
kernels/dialect/batch_matmul_softmax.dialect: one launch instead of two (the MUL was a post-op already). The product
then writes the SOFTMAX's output (``written_as``) and ``softmax_after`` holds a plan.SoftmaxAfter; ops see it through
LowerContext.softmax_after. The kernel stores the raw scores in its output before it normalizes them, so its output
must have no post-ops: the SOFTMAX's readers find no producer to fuse into once it is gone (fuse_elementwise runs
after this pass), and in an 8-bit chain (where the delegate rounds 8-bit results: ``quantized``) the kernel rounds
as the separate kernels' fake-quant steps would, itself (fuse_elementwise adds none after the product): the
product onto its grid, its code's score from a table (the MUL and its rounding in float32, as fuse_elementwise's
_fold_constant_chains computes its tables), the probabilities onto the SOFTMAX's grid.
"""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE
from .fuse_elementwise import fake_quant_float32
from .plan import CodeTable, ScoreRounding, SoftmaxAfter
from .postops import quant_grid
from .view import PartitionView, PassResult

MATMULS = {"BATCH_MATMUL"}


def run(view: PartitionView, quantized: bool = True) -> PassResult:
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

    def is_8bit(t: int) -> bool:
        return quant_grid(graph.tensors[t]) is not None and graph.tensors[t].dtype.itemsize == 1

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
                    not (is_float(mul.outputs[0]) or is_8bit(mul.outputs[0])):
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
        chain_tensors = [*view.node_inputs(n), out, *(graph.nodes[c].outputs[0] for c in chain)]
        eight_bit = quantized and all(is_8bit(t) for t in chain_tensors)
        if not eight_bit and not all(is_float(t) for t in chain_tensors):
            why_not = "it is neither float nor 8-bit throughout" if quantized else "it is not float"
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
        view.softmax_after[n] = _rounded(view, out, chain, scale, beta) if eight_bit else SoftmaxAfter(scale, beta)
        dropped.update(chain)
        result.applied.append(f"{' and '.join(str(graph.nodes[c]) for c in chain)} in the kernel of {node}")
    view.nodes = [n for n in view.nodes if n not in dropped]
    return result


def _rounded(view: PartitionView, product: int, chain: list[int], scale: float, beta: float) -> SoftmaxAfter:
    """The 8-bit chain's SoftmaxAfter: the product's grid, each of its codes' score (times the MUL's scale and
    rounded onto the MUL's grid, in float32 as the fake-quant steps compute it), the SOFTMAX's grid."""
    graph = view.graph
    grid = quant_grid(graph.tensors[product])
    out = quant_grid(graph.tensors[graph.nodes[chain[-1]].outputs[0]])
    assert grid is not None and out is not None
    lo, hi = grid[1], grid[2]
    values = np.arange(lo, hi + 1, dtype=np.float32) * np.float32(grid[0])
    if len(chain) == 2:  # the MUL: by the scale, onto its grid
        mul_grid = quant_grid(graph.tensors[graph.nodes[chain[0]].outputs[0]])
        assert mul_grid is not None
        with np.errstate(all="ignore"):
            values = fake_quant_float32((values * np.float32(scale)).astype(np.float32), *mul_grid)
    return SoftmaxAfter(1.0, beta, ScoreRounding(grid, CodeTable(values, grid[0], int(-lo), 0), out))
