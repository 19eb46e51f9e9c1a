"""From a partition to a plan: one pass per file, run in this order.

    fold_constants    DEQUANTIZE / DENSIFY of constants computed once
    drop_reshape      reshapes that are no-ops in PHWC4 share their input's buffer
    merge_pad         a zero PAD of H/W folded into the VALID conv that reads it
    fuse_elementwise  activations and elementwise chains folded into their producer; fake-quant steps
    emit              each remaining node lowered to kernel calls by its op
    memory            buffers shared between tensors whose lifetimes do not overlap
"""

from __future__ import annotations

from ..graph import Graph
from . import drop_reshape, emit, fold_constants, fuse_elementwise, memory, merge_pad
from .plan import Plan
from .view import PartitionView


def build_plan(graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int],
               shapes: dict[int, tuple[int, ...]], quantized: bool = True, device_type: str = "gpu") -> Plan:
    view = PartitionView(graph, list(nodes), shapes, list(inputs), list(outputs))
    fold_constants.run(view)
    drop_reshape.run(view)
    merge_pad.run(view)
    ctx = emit.LowerContext(view, device_type)
    fuse_elementwise.run(view, quantized, ctx.operand_const)
    ctx = emit.emit(view, device_type, ctx)
    for t in inputs + outputs:
        ctx.tensors.setdefault(t, emit.bhwc(shapes[t]))
    for t, src in view.aliases.items():
        ctx.tensors.setdefault(t, emit.bhwc(shapes[t]))
        ctx.tensors.setdefault(src, emit.bhwc(shapes[src]))
    plan = Plan(ctx.tensors, ctx.consts, ctx.kernels, list(inputs), list(outputs), dict(view.aliases),
                nodes=list(nodes), notes=view.notes)
    memory.run(plan)
    return plan
