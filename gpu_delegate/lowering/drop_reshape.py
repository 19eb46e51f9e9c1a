"""Drop reshapes that do not move data in PHWC4: the output shares the input's buffer."""

from __future__ import annotations

from .plan import bhwc
from .view import PartitionView

RESHAPES = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}


def same_layout(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """PHWC4 stores (b, s, y, x): two shapes share a layout when B, C and H*W agree."""
    ba, ha, wa, ca = bhwc(a)
    bb, hb, wb, cb = bhwc(b)
    return ba == bb and ca == cb and ha * wa == hb * wb


def run(view: PartitionView) -> None:
    kept = []
    for n in view.nodes:
        node = view.graph.nodes[n]
        src = view.node_inputs(n)[0] if node.inputs else -1
        out = node.outputs[0] if node.outputs else -1
        if node.op in RESHAPES and src >= 0 and not view.is_const(src) \
                and same_layout(view.shapes[src], view.shapes[out]):
            view.aliases[out] = src
            view.notes.append(f"dropped {node}: no-op in PHWC4")
        else:
            kept.append(n)
    view.nodes = kept
