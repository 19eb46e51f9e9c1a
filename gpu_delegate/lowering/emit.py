"""Turn the nodes left after the passes into kernel calls, through each op's ``lower`` (see context.py)."""

from __future__ import annotations

import functools

from ..phwc4 import bhwc, to_rows
from .context import LowerContext
from .view import PartitionView, PassResult


def run(view: PartitionView, ctx: LowerContext) -> PassResult:
    result = PassResult("emit")
    for n in view.nodes:
        node = view.graph.nodes[n]
        ctx.node = node
        before = len(ctx.kernels)
        view.op(n).lower(node, view.graph, ctx)
        result.applied.append(f"{node}: {', '.join(k.kernel for k in ctx.kernels[before:]) or 'no kernel'}")
    ctx.node = None
    for t in view.outputs:
        if t in view.folded:  # a folded constant (DEQUANTIZE of weights) read outside the partition
            key = ctx.const(f"folded:{t}", functools.partial(to_rows, view.folded[t], bhwc(view.shapes[t])))
            copy_grid, variants = ctx.copy_layout(t)
            ctx.kernel("copy", {}, {"dst": t}, consts={"src": key}, grid=copy_grid, variants=variants)
            result.applied.append(f"folded constant {t} copied to the partition's output")
    return result
