"""Drop nodes that move no data on the device: the output shares the input's buffer.

Reshapes between shapes of one PHWC4 layout, and DEQUANTIZE of a tensor the device holds as its dequantized floats
(every non-constant 8-bit or float16 tensor, ops/quantize.py): the 2-in/3-out net int8's feature map output, which
a MEAN reads too, was a copy kernel of its own (25 of its 120 us of kernels).
"""

from __future__ import annotations

from ..phwc4 import same_layout
from .view import PartitionView, PassResult

RESHAPES = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}
IDENTITIES = RESHAPES | {"DEQUANTIZE"}


def run(view: PartitionView) -> PassResult:
    result = PassResult("drop_reshape")
    kept = []
    for n in view.nodes:
        node = view.graph.nodes[n]
        if node.op not in IDENTITIES:
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
            result.applied.append(f"dropped {node}: " + ("no-op in PHWC4" if node.op in RESHAPES else
                                                            "its input is held as its dequantized floats"))
    view.nodes = kept
    return result
