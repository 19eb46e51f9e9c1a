"""Merge a zero PAD of H and W into the VALID convolution that reads it (the kernel pads on the fly)."""

from __future__ import annotations

import numpy as np

from ..graph import PADDING_VALID
from .view import PartitionView

TAKERS = {"CONV_2D", "DEPTHWISE_CONV_2D"}


def spatial_pads(view: PartitionView, n: int) -> tuple[int, int, int, int] | None:
    node = view.graph.nodes[n]
    ins = view.node_inputs(n)
    if node.op not in ("PAD", "PADV2") or len(view.shapes[ins[0]]) != 4:
        return None
    pads = view.const(ins[1])
    if pads is None or np.shape(pads) != (4, 2):
        return None
    if node.op == "PADV2" and (len(ins) < 3 or view.const(ins[2]) is None or np.any(view.const(ins[2]) != 0)):
        return None
    if view.graph.tensors[ins[0]].quant is not None:
        return None  # quantized zero is the zero point, not 0.0
    pads = np.asarray(pads, np.int64)
    if np.any(pads[0] != 0) or np.any(pads[3] != 0) or np.any(pads < 0):
        return None
    return int(pads[1, 0]), int(pads[1, 1]), int(pads[2, 0]), int(pads[2, 1])


def run(view: PartitionView) -> None:
    graph = view.graph
    removed = set()
    for n in view.nodes:
        pads = spatial_pads(view, n)
        if pads is None:
            continue
        out = graph.nodes[n].outputs[0]
        users = view.consumers(out)
        if len(users) != 1 or out in view.outputs:
            continue
        user = graph.nodes[users[0]]
        if user.op not in TAKERS or user.attrs.get("padding") != PADDING_VALID or \
                view.node_inputs(user.index)[0] != out:
            continue
        view.read_as[(user.index, 0)] = view.node_inputs(n)[0]
        view.extra_padding[user.index] = pads
        removed.add(n)
        view.notes.append(f"merged {graph.nodes[n]} into {user}")
    view.nodes = [n for n in view.nodes if n not in removed]
