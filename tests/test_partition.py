"""Partitioning: which nodes a delegate gets, in how many partitions, and that the result stays right.

A small numpy delegate (ADD and MUL) stands in for the GPU so these tests exercise the interpreter and the
partitioner alone; the reference is LiteRT on the same model.
"""

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.partition import group_supported
from gpu_delegate.tflite import ModelBuilder, read_model

from .reference import run, run_litert


class NumpyKernel(gd.DelegateKernel):
    def init(self, graph, node_indices, input_ids, output_ids):
        self.graph, self.nodes, self.outputs = graph, node_indices, output_ids
        self.invocations = 0

    def invoke(self, tensors):
        self.invocations += 1
        values = {}

        def get(t):
            if t in values:
                return values[t]
            data = self.graph.tensors[t].data
            return data if data is not None else tensors[t]

        for n in self.nodes:
            node = self.graph.nodes[n]
            a, b = get(node.inputs[0]), get(node.inputs[1])
            values[node.outputs[0]] = (a + b if node.op == "ADD" else a * b).astype(np.float32)
        for t in self.outputs:
            tensors[t] = values[t]


class NumpyDelegate(gd.SimpleDelegate):
    name = "numpy"
    backend_name = "numpy"

    def __init__(self, max_partitions=0, ops=("ADD", "MUL")):
        self.max_partitions = max_partitions
        self.ops = ops
        self.kernels = []

    def is_node_supported(self, node, graph):
        return True if node.op in self.ops else f"{node.op} is not ADD or MUL"

    def partition_weight(self, nodes, graph):
        return float(sum(graph.tensors[n.outputs[0]].size for n in nodes))

    def create_kernel(self):
        k = NumpyKernel()
        self.kernels.append(k)
        return k


def chain_model(shapes_and_ops):
    """x -> op0 -> op1 -> ... with a constant second operand per op (TANH takes none)."""
    mb = ModelBuilder()
    rng = np.random.default_rng(1)
    shape = [1, 4, 4, 3]
    t = mb.input("x", shape)
    for k, op in enumerate(shapes_and_ops):
        out = mb.tensor(f"t{k}", shape)
        if op == "TANH":
            mb.op(op, [t], [out])
        else:
            c = mb.const(f"c{k}", rng.standard_normal(shape[-1]).astype(np.float32))
            mb.op(op, [t, c], [out])
        t = out
    mb.output(t)
    return mb.build()


def backends(it):
    return [d["backend"] for d in it.get_ops_details()]


def test_unsupported_op_in_the_middle_runs_delegate_cpu_delegate():
    content = chain_model(["ADD", "MUL", "TANH", "ADD", "MUL"])
    delegate = NumpyDelegate()
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate])
    x = np.random.default_rng(0).standard_normal([1, 4, 4, 3]).astype(np.float32)
    (ours,) = run(it, [x])
    (ref,) = run_litert(content, [x])
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
    assert backends(it) == ["numpy", "numpy", "cpu", "numpy", "numpy"]
    assert len(delegate.kernels) == 2 and all(k.invocations == 1 for k in delegate.kernels)
    assert "not ADD or MUL" in it.cpu_reasons()[2]


@pytest.mark.parametrize("limit, expected", [(1, ["cpu", "cpu", "cpu", "numpy", "numpy", "numpy"]),
                                             (2, ["numpy", "cpu", "cpu", "numpy", "numpy", "numpy"])])
def test_max_partitions_keeps_the_heaviest(limit, expected):
    # partition 1 is one node; partition 2 is three: with a limit of 1 the larger (more work) one wins
    content = chain_model(["ADD", "TANH", "TANH", "ADD", "MUL", "ADD"])
    it = gd.Interpreter(model_content=content, experimental_delegates=[NumpyDelegate(max_partitions=limit)])
    x = np.random.default_rng(0).standard_normal([1, 4, 4, 3]).astype(np.float32)
    (ours,) = run(it, [x])
    (ref,) = run_litert(content, [x])
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
    assert backends(it) == expected


def test_partition_choice_is_by_work_not_node_count():
    """Two nodes on a big tensor outweigh three nodes on a small one."""
    mb = ModelBuilder()
    big = mb.input("big", [1, 32, 32, 8])
    small = mb.input("small", [1, 2, 2, 3])
    a = mb.tensor("a", [1, 32, 32, 8])
    b = mb.tensor("b", [1, 32, 32, 8])
    mb.op("ADD", [big, big], [a])
    mb.op("MUL", [a, a], [b])
    s = mb.tensor("s", [1, 2, 2, 3])
    mb.op("TANH", [small], [s])  # puts the small chain in a partition of its own
    for k in range(3):
        out = mb.tensor(f"s{k}", [1, 2, 2, 3])
        mb.op("ADD", [s, s], [out])
        s = out
    tb = mb.tensor("tb", [1, 32, 32, 8])
    mb.op("TANH", [b], [tb])
    mb.output(tb, s)
    content = mb.build()
    two = gd.Interpreter(model_content=content, experimental_delegates=[NumpyDelegate(max_partitions=2)])
    assert backends(two) == ["numpy", "numpy", "cpu", "numpy", "numpy", "numpy", "cpu"]
    one = gd.Interpreter(model_content=content, experimental_delegates=[NumpyDelegate(max_partitions=1)])
    assert backends(one) == ["numpy", "numpy", "cpu", "cpu", "cpu", "cpu", "cpu"]
    xs = [np.random.default_rng(2).standard_normal(s).astype(np.float32) for s in ([1, 32, 32, 8], [1, 2, 2, 3])]
    for ours, ref in zip(run(one, xs), run_litert(content, xs)):
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


def test_output_consumed_inside_the_partition_is_still_returned():
    mb = ModelBuilder()
    x = mb.input("x", [1, 3, 3, 5])
    c = mb.const("c", np.arange(5, dtype=np.float32))
    a, b = mb.tensor("a", [1, 3, 3, 5]), mb.tensor("b", [1, 3, 3, 5])
    mb.op("ADD", [x, c], [a])
    mb.op("MUL", [a, a], [b])
    mb.output(a, b)
    content = mb.build()
    it = gd.Interpreter(model_content=content, experimental_delegates=[NumpyDelegate()])
    xs = [np.random.default_rng(3).standard_normal([1, 3, 3, 5]).astype(np.float32)]
    ours, ref = run(it, xs), run_litert(content, xs)
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o, r, rtol=1e-6)
    assert backends(it) == ["numpy", "numpy"]


def test_partitions_are_convex():
    """ADD(x) feeds both a CPU node and the next ADD, which also reads the CPU node's output: the two ADDs
    cannot share a partition (the CPU node would have to run in the middle of it)."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 2, 2, 4])
    a, t, b = mb.tensor("a", [1, 2, 2, 4]), mb.tensor("t", [1, 2, 2, 4]), mb.tensor("b", [1, 2, 2, 4])
    mb.op("ADD", [x, x], [a])
    mb.op("TANH", [a], [t])
    mb.op("ADD", [a, t], [b])
    mb.output(b)
    graph = read_model(mb.build()).main
    parts = group_supported(graph, {0, 2})
    assert [p.nodes for p in parts] == [[0], [2]]
    assert parts[0].outputs == [graph.nodes[0].outputs[0]] and parts[1].inputs == [graph.nodes[0].outputs[0],
                                                                                   graph.nodes[1].outputs[0]]


def test_a_side_chain_joins_the_partition_that_reads_it():
    """A text model's attention mask: built from the token ids by supported nodes beside a CPU node that adjusts the
    ids, and read only after it. The chain runs as late as its reader and shares its partition (it used to sit at the
    graph's start, a partition apart, and with one partition allowed on the CPU)."""
    mb = ModelBuilder()
    shape = [1, 2, 2, 4]
    x = mb.input("x", shape)
    t, m1, m2, y = (mb.tensor(n, shape) for n in ("t", "m1", "m2", "y"))
    mb.op("TANH", [x], [t])  # the CPU node
    mb.op("ADD", [x, x], [m1])  # the side chain, from the input alone
    mb.op("MUL", [m1, m1], [m2])
    mb.op("ADD", [t, m2], [y])  # its reader, after the CPU node
    mb.output(y)
    content = mb.build()
    graph = read_model(content).main
    assert [p.nodes for p in group_supported(graph, {1, 2, 3})] == [[1, 2, 3]]
    it = gd.Interpreter(model_content=content, experimental_delegates=[NumpyDelegate(max_partitions=1)])
    assert backends(it) == ["cpu", "numpy", "numpy", "numpy"]
    xs = [np.random.default_rng(4).standard_normal(shape).astype(np.float32)]
    np.testing.assert_allclose(run(it, xs)[0], run_litert(content, xs)[0], rtol=1e-6)
