"""From a partition to a plan: the passes of lowering/, in order (see lowering/__init__.py)."""

from __future__ import annotations

from ..graph import Graph
from ..phwc4 import bhwc, collapse
from . import (
    codes_only,
    dense_copies,
    dense_inputs,
    dense_outputs,
    drop_dequantize,
    drop_reshape,
    emit,
    fold_constants,
    fuse_channel_scale,
    fuse_elementwise,
    fuse_index_wrap,
    fuse_input_affine,
    fuse_layer_norm,
    fuse_matmul_softmax,
    fuse_matmul_transpose,
    fuse_repeat,
    fuse_siblings,
    fuse_squeeze_excite,
    half_weights,
    memory,
    merge_pad,
    pad_channels,
    place_concat,
)
from .context import GpuOp, LowerContext
from .plan import Plan
from .view import PartitionView, PassResult


def build_plan(graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int],
               shapes: dict[int, tuple[int, ...]], ops: dict[int, GpuOp], quantized: bool = True,
               device_type: str = "gpu", max_buffers: int | None = None, api: str = "",
               vector_width: int = 4, int8_dot: bool = False) -> Plan:
    """The plan of partition ``nodes``; ``ops`` gives each node's op class; no kernel binds more than
    ``max_buffers`` buffers through its fused post-ops (the device's limit; None: no limit); ``api`` and
    ``vector_width`` (DeviceInfo's) say whose kernel variants run and how wide the device's vectors are, where
    the blocking differs; ``int8_dot`` (DeviceInfo's) that 8-bit convolutions sum in int32."""
    # rank-5 tensors of batch 1 are stored as their rank-4 selves (ops that take them: Op.gpu_rank5)
    view = PartitionView(graph, list(nodes), {t: collapse(s) for t, s in shapes.items()}, list(inputs),
                         list(outputs), ops=dict(ops))
    ctx = LowerContext(view, device_type, max_buffers, api, vector_width, int8_dot, quantized)
    results: list[PassResult] = [fold_constants.run(view), fuse_repeat.run(view), fuse_index_wrap.run(view),
                                 drop_reshape.run(view), merge_pad.run(view), fuse_input_affine.run(view, api),
                                 fuse_layer_norm.run(view, quantized),
                                 fuse_matmul_transpose.run(view),
                                 fuse_matmul_softmax.run(view, quantized), drop_dequantize.run(view),
                                 pad_channels.run(view),
                                 fuse_elementwise.run(view, quantized, ctx.operand_const, ctx.table_const)]
    pad_channels.restore(view, results[-2])
    results.append(dense_outputs.run(view, api))
    results.append(place_concat.run(view))
    results.append(fuse_siblings.run(view))
    results.append(emit.run(view, ctx))
    results.append(fuse_channel_scale.run(view, ctx))
    results.append(fuse_squeeze_excite.run(view, ctx))
    for t in inputs + outputs:
        ctx.tensors.setdefault(t, bhwc(view.shapes[t]))
    for t, src in [*view.aliases.items(), *((t, outer) for t, (outer, _) in view.placed.items())]:
        ctx.tensors.setdefault(t, bhwc(view.shapes[t]))
        ctx.tensors.setdefault(src, bhwc(view.shapes[src]))
    updated = [t for t in ctx.state_updates.values() if t not in outputs]  # downloaded like outputs
    plan = Plan(ctx.tensors, ctx.consts, ctx.kernels, list(inputs), list(outputs) + updated, dict(view.aliases),
                placed=dict(view.placed), nodes=list(nodes), fp32_consts=set(ctx.fp32_consts),
                state_updates=dict(ctx.state_updates), dense=set(ctx.dense))
    plan.fp32_tensors = {plan.storage(t) for t in ctx.tensors if ctx.holds_ints(t)} | \
        {plan.storage(t) for t in ctx.fp32_tensors}
    results.append(codes_only.run(plan))
    results.append(dense_inputs.run(plan, graph, api))
    results.append(dense_copies.run(plan, api))
    results.append(half_weights.run(plan))
    results.append(memory.run(plan))
    plan.notes = [note for r in results if r.name != "emit" for note in r.applied]
    return plan
