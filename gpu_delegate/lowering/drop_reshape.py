"""Drop reshapes that do not move data in PHWC4: the output shares the input's buffer."""

from __future__ import annotations

from ..phwc4 import same_layout
from .view import PartitionView, PassResult

RESHAPES = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}


def run(view: PartitionView) -> PassResult:
    result = PassResult("drop_reshape")
    kept = []
    for n in view.nodes:
        node = view.graph.nodes[n]
        if node.op not in RESHAPES:
            kept.append(n)
            continue
        src = view.node_inputs(n)[0] if node.inputs else -1
        out = node.outputs[0] if node.outputs else -1
        if src < 0 or view.is_const(src):
            result.declined.append(f"{node}: its input is a constant")
            kept.append(n)
        elif not same_layout(view.shapes[src], view.shapes[out]):
            result.declined.append(f"{node}: {list(view.shapes[src])} -> {list(view.shapes[out])} moves data in PHWC4")
            kept.append(n)
        else:
            view.aliases[out] = src
            result.applied.append(f"dropped {node}: no-op in PHWC4")
    view.nodes = kept
    return result
