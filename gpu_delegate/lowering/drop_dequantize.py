"""DEQUANTIZE of a tensor that the device holds as its dequantized floats (every non-constant 8-bit or float16 tensor,
ops/quantize.py) is no kernel: its output shares the input's buffer.

A DEQUANTIZE that is its input's only reader becomes a post-op of the producer anyway (fuse_elementwise); one whose
input other nodes read too was a copy kernel of its own: the 2-in/3-out net int8's feature map, which a MEAN reads
and which leaves the partition dequantized (25 of its 120 us of kernels). After the fusions that match chains holding
a DEQUANTIZE (an 8-bit LayerNormalization's negated mean), which keep theirs.
"""

from __future__ import annotations

from .view import PartitionView, PassResult


def run(view: PartitionView) -> PassResult:
    result = PassResult("drop_dequantize")
    kept = []
    for n in view.nodes:
        node = view.graph.nodes[n]
        src = view.node_inputs(n)[0] if node.op == "DEQUANTIZE" and node.inputs else -1
        if src < 0 or view.is_const(src) or not node.outputs:
            kept.append(n)
            continue
        view.aliases[node.outputs[0]] = src
        result.applied.append(f"dropped {node}: its input is held as its dequantized floats")
    view.nodes = kept
    return result
