"""The float32 ADD/SUB delegate of TensorFlow Lite's "Implementing a Custom Delegate" guide, in numpy, running
inside LiteRT's own interpreter (``ai_edge_litert.interpreter.Interpreter``).

The guide's C++ delegate takes ADD and SUB nodes whose tensors are float32 and whose two inputs have the same
shape, and evaluates each partition node by node. Here it is a `gpu_delegate.SimpleDelegate`, so the same
object also runs in `gpu_delegate.Interpreter`. Run this file to see it at work:

    python examples/add_sub_delegate.py
"""

from __future__ import annotations

import numpy as np

import gpu_delegate as gd
from gpu_delegate.graph import Graph, Node

# fused_activation_function -> clamp bounds (TFLite's schema numbering); TANH and SIGN_BIT are left to LiteRT
ACTIVATIONS = {0: (None, None), 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


class AddSubDelegate(gd.SimpleDelegate):
    name = "AddSubDelegate"

    def is_node_supported(self, node: Node, graph: Graph) -> bool | str:
        if node.op not in ("ADD", "SUB"):
            return f"{node.op} is neither ADD nor SUB"
        if len(node.inputs) != 2 or len(node.outputs) != 1:
            return "expects two inputs and one output"
        tensors = [graph.tensors[t] for t in (*node.inputs, *node.outputs)]
        if any(t.dtype != np.float32 for t in tensors):
            return "only float32 tensors"
        if tensors[0].shape != tensors[1].shape:
            return "the two inputs differ in shape (the guide's kernel does not broadcast)"
        if node.attrs.get("fused_activation_function", 0) not in ACTIVATIONS:
            return "fused activation other than NONE, RELU, RELU_N1_TO_1 or RELU6"
        return True

    def create_kernel(self) -> AddSubKernel:
        return AddSubKernel()


class AddSubKernel(gd.DelegateKernel):
    """One partition: a chain of ADD/SUB nodes, evaluated in order; the values between them live here."""

    def init(self, graph: Graph, node_indices: list[int], input_ids: list[int], output_ids: list[int]) -> None:
        self.steps = []
        for i in node_indices:
            node = graph.nodes[i]
            lo, hi = ACTIVATIONS[node.attrs.get("fused_activation_function", 0)]
            self.steps.append((np.add if node.op == "ADD" else np.subtract, *node.inputs, node.outputs[0], lo, hi))
        # Constants are read-only views of the model; the kernel may keep them as long as it lives.
        self.constants = {t: graph.tensors[t].data for i in node_indices for t in graph.nodes[i].inputs
                          if graph.tensors[t].data is not None}
        self.outputs = list(output_ids)

    def invoke(self, tensors) -> None:
        values = dict(self.constants)
        for fn, a, b, out, lo, hi in self.steps:
            y = fn(values[a] if a in values else tensors[a], values[b] if b in values else tensors[b])
            values[out] = y if lo is None and hi is None else np.clip(y, lo, hi)
        for t in self.outputs:
            tensors[t] = values[t]


def demo_model() -> bytes:
    """y = ((x + c) - x) * x, then + c with RELU6: three ADD/SUB nodes in two partitions around a MUL."""
    from gpu_delegate.tflite import ModelBuilder

    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 8, 3])
    c = mb.const("c", np.linspace(-4, 4, 3 * 64, dtype=np.float32).reshape(1, 8, 8, 3))
    h = mb.tensor("h", [1, 8, 8, 3])
    mb.op("ADD", [x, c], [h])
    h2 = mb.tensor("h2", [1, 8, 8, 3])
    mb.op("SUB", [h, x], [h2])
    m = mb.tensor("m", [1, 8, 8, 3])
    mb.op("MUL", [h2, x], [m])
    y = mb.tensor("y", [1, 8, 8, 3])
    mb.op("ADD", [m, c], [y], fused_activation_function="RELU6")
    mb.output(y)
    return mb.build()


def main() -> None:
    from ai_edge_litert.interpreter import Interpreter

    from gpu_delegate.litert import bridge_of

    content = demo_model()
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 3)).astype(np.float32)
    results = {}
    delegate = AddSubDelegate()
    for label, delegates in (("LiteRT alone", None), ("LiteRT + AddSubDelegate", [delegate])):
        it = Interpreter(model_content=content, experimental_delegates=delegates)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        results[label] = it.get_tensor(it.get_output_details()[0]["index"])
    b = bridge_of(delegate)
    print(f"AddSubDelegate took the partitions {b.last_partitions}; LiteRT kept {b.last_reasons}")
    diff = np.max(np.abs(results["LiteRT alone"] - results["LiteRT + AddSubDelegate"]))
    print(f"max |difference| between LiteRT alone and LiteRT + AddSubDelegate: {diff:.3g}")


if __name__ == "__main__":
    main()
