"""Fold DEQUANTIZE and DENSIFY of constants: run them once at preparation, keep the float result."""

from __future__ import annotations

import numpy as np

from ..ops import get_op
from .view import PartitionView

FOLDABLE = {"DEQUANTIZE", "DENSIFY"}


def run(view: PartitionView) -> None:
    graph = view.graph
    kept = []
    for n in view.nodes:
        node = graph.nodes[n]
        ins = view.node_inputs(n)
        if node.op in FOLDABLE and ins and all(view.is_const(t) for t in ins):
            # a folded input goes back to its tensor's type (fp16, int8 codes), as the op's run_cpu expects
            raw = [graph.tensors[t].data if t not in view.folded else view.folded[t].astype(graph.tensors[t].dtype)
                   for t in ins]
            (value,) = get_op(node.op).run_cpu(node, graph, raw)
            view.folded[node.outputs[0]] = np.asarray(value, np.float32)
            view.notes.append(f"folded {node}")
        else:
            kept.append(n)
    view.nodes = kept
