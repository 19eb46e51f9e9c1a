"""Write the parts of a channel concatenation in place: each part's producer stores straight into its run of
slices of the concatenation's buffer, and the CONCATENATION kernel, a copy of the whole joined tensor, is gone.

A dense block (DenseNet) joins a growing feature map with each layer's output, concatenation after
concatenation: copied each time, the traffic grows with the square of the block's depth. In the slice layout
(PHWC4: ``[b][slice][h][w]``) a part whose channels start at a multiple of 4 is a run of whole slices, so a part
stays readable as itself (codegen maps its accesses: ``Arg.placed``) while it lies inside the joined tensor, and
a concatenation that is itself a part places its parts further in: a whole block lands in one buffer. On PoCL the
gain is mostly the dispatches saved (about 0.1 ms each on this 2-core host under load), more than the bytes.

A concatenation is declined (with the reason) unless: it joins along the channels, without a fused activation; its
own fake-quant step (8-bit) is the identity, every part being on the output's grid already; the steps
fuse_elementwise fused after it (an activation) act on each value alone (no operand), and then every part is read
by the concatenation alone, so that its producer applies them before it stores; every part is a distinct tensor of
the output's B, H and W, written by a kernel under its own name (or a concatenation placed before), computed in the
partition (not an input, constant or output of it), not shared with a dropped reshape, not placed already, of float
storage; and every part but the last fills whole slices. Each part is written once and nothing else writes the
joined buffer, so readers of a part and of the whole see what they would have seen; the memory plan keeps the
buffer alive from the first part's write to the last read of any of them (plan.storage).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..graph import ACT_NONE
from ..phwc4 import bhwc, slices
from .plan import PostOp
from .view import PartitionView, PassResult

FLOAT_STORED = (np.float32, np.float16, np.int8, np.uint8, np.int16)  # dtypes kept in the delegate's precision


def run(view: PartitionView) -> PassResult:
    result = PassResult("place_concat")
    graph = view.graph
    names, outputs, inputs = view.buffer_names(), set(view.outputs), set(view.inputs)
    readers = view.readers()
    writer = {view.final(graph.nodes[n].outputs[0]): n for n in view.nodes if graph.nodes[n].outputs}
    written = {view.final(t) for n in view.nodes for t in graph.nodes[n].outputs}
    placed_concats: set[int] = set()  # the tensors that placed concatenations' parts make up
    removed: set[int] = set()
    for n in view.nodes:
        node = graph.nodes[n]
        if node.op != "CONCATENATION":
            continue
        why_not, pushed = _why_not(view, n, names, outputs, inputs, written | placed_concats, readers, writer)
        if why_not:
            result.declined.append(f"{node}: {why_not}")
            continue
        root = view.final(node.outputs[0])
        first = 0
        for t in view.node_inputs(n):
            view.placed[t] = (root, first)
            first += slices(bhwc(view.shapes[t])[3])
            if pushed:
                view.postops.setdefault(writer[t], []).extend(replace(p) for p in pushed)
        view.postops.pop(n, None)
        placed_concats.add(root)
        removed.add(n)
        result.applied.append(f"{node}: its {len(node.inputs)} parts written in place" +
                              (f", each applying the {len(pushed)} steps fused after it" if pushed else ""))
    view.nodes = [n for n in view.nodes if n not in removed]
    return result


def _why_not(view: PartitionView, n: int, names: dict[int, set[int]], outputs: set[int], inputs: set[int],
             written: set[int], readers: dict[int, list[int]], writer: dict[int, int]) -> tuple[str, list[PostOp]]:
    """Why concatenation ``n`` is not placed ("" if it is), and the steps fused after it that each part's producer
    then applies (an activation's, which acts on each value alone)."""
    graph = view.graph
    node = graph.nodes[n]
    out = node.outputs[0]
    rank = len(view.shapes[out])
    if int(node.attrs.get("axis", 0)) % max(rank, 1) != rank - 1:
        return "it joins along an axis other than the channels", []
    if int(node.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
        return "it has a fused activation", []
    steps = view.postops.get(n, [])
    own = [p for p in steps if p.node == n]
    pushed = [p for p in steps if p.node != n]
    if steps[:len(own)] != own or any(p.kind != "fake_quant" for p in own):
        return "a post-op other than its fake-quant step is its own", []
    if pushed and any(p.kind not in ("expr", "fake_quant") or p.operand is not None for p in pushed):
        return "an elementwise step with an operand is fused after it", []
    out_quant = view.quant_grid(out)
    if own and out_quant is None:
        return "its fake-quant step is on no per-tensor grid", []
    parts = view.node_inputs(n)
    if len(set(parts)) != len(parts):
        return "a tensor is joined more than once", []
    b, h, w, _ = bhwc(view.shapes[out])
    for k, t in enumerate(parts):
        tensor = graph.tensors[t]
        if view.is_const(t):
            return f"part {k} is a constant", []
        if t in inputs or t in outputs:
            return f"part {k} (tensor {t}) crosses the partition's boundary", []
        if t in names or t in view.aliases:
            return f"part {k} (tensor {t}) shares its buffer with a dropped reshape", []
        if t in view.placed:
            return f"part {k} (tensor {t}) is placed in another concatenation already", []
        if t not in written:
            return f"part {k} (tensor {t}) is not written by a kernel of its own", []
        if pushed and (t not in writer or readers.get(t, []) != [n]):
            return f"part {k} (tensor {t}) is read elsewhere too: the steps fused after the concatenation " \
                "cannot go into its producer", []
        if np.dtype(tensor.dtype).type not in FLOAT_STORED:
            return f"part {k} is {np.dtype(tensor.dtype).name} (stored apart from the delegate's precision)", []
        pb, ph, pw, pc = bhwc(view.shapes[t])
        if (pb, ph, pw) != (b, h, w):
            return f"part {k} has the shape {list(view.shapes[t])}, not the output's B, H, W", []
        if pc % 4 and k < len(parts) - 1:
            return f"part {k} has {pc} channels: the next part would not start at a whole slice", []
        if own and view.quant_grid(t) != out_quant:
            return f"part {k} is on another quantization grid than the output (its values are rescaled)", []
    return "", pushed

