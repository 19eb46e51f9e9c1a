"""Squeeze-and-excite's gate read by the convolution after it: a float MUL of a tensor x by a per-channel tensor g
(shape [1, 1, 1, C]: the gate that MEAN, two small convolutions and a sigmoid computed from x), lowered as a copy
kernel whose one post-op multiplies by g, and whose result only a 1x1 convolution reads (the block's projection),
becomes that convolution reading x with its input channels scaled by g: ``scale`` (define SRC_SCALE). The product
is never stored: one launch and a write and read of the whole activation fewer per block (EfficientNet and
MobileNetV3: 8-10% of the kernels' time was these copies). The convolution computes sum_c w[o, c] (x[c] g[c]) as
(w[o, c] g[c]) x[c]: a float rounding apart from the product stored first.

This pass runs on the emitted kernels (after emit, before memory assigns buffers). A MUL with a fake-quant step
(8-bit models) keeps its kernel: its product is rounded to the output's grid, which the convolution's read would
skip.
"""

from __future__ import annotations

from .context import LowerContext
from .plan import KernelCall
from .view import PartitionView, PassResult

SCALED_READERS = {"conv2d_1x1"}


def _is_gate_product(call: KernelCall) -> bool:
    if call.kernel != "copy" or len(call.postops) != 1 or set(call.inputs) != {"src"} or set(call.outputs) != {"dst"}:
        return False
    p = call.postops[0]
    return p.kind == "expr" and p.expr == "a * b" and p.operand == "channel" and isinstance(p.source, int)


def run(view: PartitionView, ctx: LowerContext) -> PassResult:
    result = PassResult("fuse_channel_scale")
    kernels = ctx.kernels
    outputs = set(view.outputs)
    held = view.shared_buffers()
    limit = ctx.max_buffers if ctx.max_buffers is not None else float("inf")

    def uses(t: int) -> list[int]:
        return [k for k, c in enumerate(kernels) if c.reads(t) or t in c.outputs.values()]

    gone: set[int] = set()
    for k, call in enumerate(kernels):
        if not _is_gate_product(call):
            continue
        x, product, gate = call.inputs["src"], call.outputs["dst"], call.postops[0].tensor_operand
        assert gate is not None
        readers = [j for j in uses(product) if j != k]
        if product in outputs or product in held or len(readers) != 1:
            result.declined.append(f"node {call.node} (MUL): its product is read elsewhere than by one kernel")
            continue
        reader = kernels[readers[0]]
        buffers = len(reader.inputs) + len(reader.outputs) + len(reader.consts) + \
            sum(p.source is not None for p in reader.postops)
        if reader.kernel not in SCALED_READERS or reader.inputs != {"src": product} or \
                any(p.tensor_operand == product for p in reader.postops) or buffers + 1 > limit or \
                ctx.tensors[x] != ctx.tensors[product]:
            result.declined.append(f"node {call.node} (MUL): read by {reader.label}, which cannot scale its input")
            continue
        reader.inputs = {"src": x, "scale": gate}
        reader.defines["SRC_SCALE"] = 1
        reader.fused_nodes = (*reader.fused_nodes, call.node)
        del ctx.tensors[product]  # no kernel reads or writes it now
        gone.add(k)
        result.applied.append(f"fused node {call.node} (MUL by a per-channel gate) into the input of {reader.label}")
    ctx.kernels[:] = [c for k, c in enumerate(kernels) if k not in gone]
    return result
