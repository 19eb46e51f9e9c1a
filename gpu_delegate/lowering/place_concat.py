"""Write the parts of a channel concatenation in place: each part's producer stores straight into its run of
slices of the concatenation's buffer, and the CONCATENATION kernel, a copy of the whole joined tensor, is gone.

A dense block (DenseNet) joins a growing feature map with each layer's output, concatenation after
concatenation: copied each time, the traffic grows with the square of the block's depth. In the slice layout
(PHWC4: ``[b][slice][h][w]``) a part whose channels start at a multiple of 4 is a run of whole slices, so a part
stays readable as itself (codegen maps its accesses: ``Arg.placed``) while it lies inside the joined tensor, and
a concatenation that is itself a part places its parts further in: a whole block lands in one buffer. TFLite's
GPU delegate and XNNPACK do the same.

A concatenation is declined (with the reason) unless: it joins along the channels, without a fused activation or
an elementwise step fused after it (an 8-bit grid's fake-quant step alone is allowed where every part is on the
output's grid already, which makes it the identity); every part is a distinct tensor of the output's B, H and W,
written by a kernel under its own name (or a concatenation placed before), computed in the partition (not an
input, constant or output of it), not shared with a dropped reshape, not placed already, of float storage, on the
output's quantization; and every part but the last fills whole slices. Each part is written once and nothing
else writes the joined buffer, so readers of a part and of the whole see what they would have seen; the memory
plan keeps the buffer alive from the first part's write to the last read of any of them (plan.storage).
"""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE
from ..phwc4 import bhwc, slices
from .view import PartitionView, PassResult

FLOAT_STORED = (np.float32, np.float16, np.int8, np.uint8, np.int16)  # dtypes kept in the delegate's precision


def run(view: PartitionView) -> PassResult:
    result = PassResult("place_concat")
    graph = view.graph
    names, outputs, inputs = view.buffer_names(), set(view.outputs), set(view.inputs)
    written = {view.final(t) for n in view.nodes for t in graph.nodes[n].outputs}
    placed_concats: set[int] = set()  # outputs of the concatenations placed so far
    removed: set[int] = set()
    for n in view.nodes:
        node = graph.nodes[n]
        if node.op != "CONCATENATION":
            continue
        why_not = _why_not(view, n, names, outputs, inputs, written | placed_concats)
        if why_not:
            result.declined.append(f"{node}: {why_not}")
            continue
        out = node.outputs[0]
        first = 0
        for t in view.node_inputs(n):
            view.placed[t] = (out, first)
            first += slices(bhwc(view.shapes[t])[3])
        view.postops.pop(n, None)
        placed_concats.add(out)
        removed.add(n)
        result.applied.append(f"{node}: its {len(node.inputs)} parts written in place")
    view.nodes = [n for n in view.nodes if n not in removed]
    return result


def _why_not(view: PartitionView, n: int, names: dict[int, set[int]], outputs: set[int], inputs: set[int],
             written: set[int]) -> str:
    graph = view.graph
    node = graph.nodes[n]
    out = node.outputs[0]
    rank = len(view.shapes[out])
    if int(node.attrs.get("axis", 0)) % max(rank, 1) != rank - 1:
        return "it joins along an axis other than the channels"
    if int(node.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
        return "it has a fused activation"
    if out in view.written_as:
        return "an elementwise step is fused after it"
    steps = view.postops.get(n, [])
    if any(p.kind != "fake_quant" for p in steps):
        return "a post-op other than its fake-quant step is fused into it"
    out_quant = _quant(view, out)
    if steps and out_quant is None:
        return "its fake-quant step is on no per-tensor grid"
    parts = view.node_inputs(n)
    if len(set(parts)) != len(parts):
        return "a tensor is joined more than once"
    b, h, w, _ = bhwc(view.shapes[out])
    for k, t in enumerate(parts):
        tensor = graph.tensors[t]
        if view.is_const(t):
            return f"part {k} is a constant"
        if t in inputs or t in outputs:
            return f"part {k} (tensor {t}) crosses the partition's boundary"
        if t in names or t in view.aliases:
            return f"part {k} (tensor {t}) shares its buffer with a dropped reshape"
        if t in view.placed:
            return f"part {k} (tensor {t}) is placed in another concatenation already"
        if t not in written:
            return f"part {k} (tensor {t}) is not written by a kernel of its own"
        if np.dtype(tensor.dtype).type not in FLOAT_STORED:
            return f"part {k} is {np.dtype(tensor.dtype).name} (stored apart from the delegate's precision)"
        pb, ph, pw, pc = bhwc(view.shapes[t])
        if (pb, ph, pw) != (b, h, w):
            return f"part {k} has the shape {list(view.shapes[t])}, not the output's B, H, W"
        if pc % 4 and k < len(parts) - 1:
            return f"part {k} has {pc} channels: the next part would not start at a whole slice"
        if steps and _quant(view, t) != out_quant:
            return f"part {k} is on another quantization grid than the output (its values are rescaled)"
    return ""


def _quant(view: PartitionView, t: int) -> tuple[str, float, int] | None:
    """A tensor's 8-bit grid (dtype, scale, zero point); None if it has none or a per-channel one."""
    tensor = view.graph.tensors[t]
    q = tensor.quant
    if q is None or q.per_channel:
        return None
    scale, zero = q.scalar()
    return np.dtype(tensor.dtype).name, float(scale), int(zero)
