"""Fold DEQUANTIZE and DENSIFY of constants: run them once at preparation, keep the float result."""

from __future__ import annotations

import numpy as np

from ..graph import FOLDED_ON_CONSTANTS
from .view import PartitionView, PassResult


def run(view: PartitionView) -> PassResult:
    result = PassResult("fold_constants")
    graph = view.graph
    kept = []
    for n in view.nodes:
        node = graph.nodes[n]
        ins = view.node_inputs(n)
        if node.op not in FOLDED_ON_CONSTANTS:
            kept.append(n)
            continue
        if not ins or not all(view.is_const(t) for t in ins):
            result.declined.append(f"{node}: its input is computed at run time")
            kept.append(n)
            continue
        # a folded input goes back to its tensor's type (fp16, int8 codes), as the op's run_cpu expects
        raw: list[np.ndarray | None] = [
            graph.tensors[t].data if t not in view.folded else view.folded[t].astype(graph.tensors[t].dtype)
            for t in ins]
        (value,) = view.op(n).run_cpu(node, graph, raw)
        view.folded[node.outputs[0]] = np.asarray(value, np.float32)
        result.applied.append(f"folded {node}")
    view.nodes = kept
    return result
