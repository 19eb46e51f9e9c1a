"""Control flow: WHILE, IF and CALL_ONCE run other subgraphs of the model (through the interpreter's Runtime).

Keras 3 RNNs convert to WHILE; `tf.cond` to IF; variable and hash-table initializers to CALL_ONCE. Each called
subgraph is resolved, partitioned and delegated like the main one (executor.SubgraphRun). Output shapes follow
LiteRT: static when the called subgraphs keep them (a WHILE body whose outputs have its inputs' shapes, IF
branches that agree), dynamic otherwise.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, Runtime, Shape, register
from .checks import data_dependent


def subgraph_attr(node: Node, name: str) -> int:
    value = node.attrs.get(name)
    if not isinstance(value, int) or value < 0:
        raise ModelError(f"{node}: {name} {value!r} is not a subgraph index")
    return value


def no_omitted(node: Node) -> None:
    if any(t < 0 for t in node.inputs):
        raise ModelError(f"{node}: input {node.inputs.index(-1)} is omitted; {node.op} passes every input on")


def present_inputs(inputs: list[np.ndarray | None], node: Node) -> list[np.ndarray]:
    out = []
    for k, v in enumerate(inputs):
        if v is None:
            raise ModelError(f"{node}: input {k} is missing")
        out.append(v)
    return out


def known_shapes(shapes: list[Shape | None], node: Node) -> list[Shape]:
    out = []
    for k, s in enumerate(shapes):
        if s is None:
            raise ModelError(f"{node}: input {k} is missing")
        out.append(s)
    return out


@register
class While(Op):
    """Loop: while cond(vars) is true, vars = body(vars); the outputs are the last vars."""

    name = "WHILE"
    types = "any (what the subgraphs take)"
    strings = True
    max_version = 1
    needs_runtime = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        subgraph_attr(node, "cond_subgraph_index")
        subgraph_attr(node, "body_subgraph_index")
        no_omitted(node)
        if len(node.outputs) != len(node.inputs):
            raise ModelError(f"{node}: {len(node.inputs)} loop inputs but {len(node.outputs)} outputs")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        loop = known_shapes(shapes, node)
        body = runtime.output_shapes(subgraph_attr(node, "body_subgraph_index"), loop)
        if len(body) != len(loop):
            raise ModelError(f"{node}: the body subgraph gives {len(body)} outputs for {len(loop)} loop variables")
        if any(b != s for b, s in zip(body, loop)):
            data_dependent(node)  # the body changes a shape: known once the loop has run
        return loop

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        cond_index = subgraph_attr(node, "cond_subgraph_index")
        body_index = subgraph_attr(node, "body_subgraph_index")
        values = present_inputs(inputs, node)
        looped = runtime.run_loop(cond_index, body_index, values)
        if looped is not None:
            return looped
        while True:
            (cond,) = runtime.call(cond_index, values)
            if cond.size != 1:
                raise ModelError(f"{node}: the condition subgraph gives {cond.size} values, not one")
            if not bool(cond.reshape(-1)[0]):
                return values
            values = runtime.call(body_index, values)
            if len(values) != len(node.outputs):
                raise ModelError(f"{node}: the body subgraph gives {len(values)} outputs for {len(node.outputs)} "
                                 "loop variables")


@register
class If(Op):
    """then_branch(inputs) if the condition (input 0) is true, else else_branch(inputs)."""

    name = "IF"
    types = "any (what the subgraphs take)"
    strings = True
    max_version = 1
    needs_runtime = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        subgraph_attr(node, "then_subgraph_index")
        subgraph_attr(node, "else_subgraph_index")
        no_omitted(node)
        if not node.inputs:
            raise ModelError(f"{node}: the condition input is missing")
        cond = graph.tensors[node.inputs[0]]
        if cond.size != 1:
            raise ModelError(f"{node}: the condition has shape {list(cond.shape)}, not a single value")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        args = known_shapes(shapes, node)[1:]
        then = runtime.output_shapes(subgraph_attr(node, "then_subgraph_index"), args)
        other = runtime.output_shapes(subgraph_attr(node, "else_subgraph_index"), args)
        for branch in (then, other):
            if len(branch) != len(node.outputs):
                raise ModelError(f"{node}: a branch gives {len(branch)} outputs, the node has {len(node.outputs)}")
        cond = graph.tensors[node.inputs[0]].data
        if cond is not None:  # decided already: that branch's shapes
            chosen = then if bool(cond.reshape(-1)[0]) else other
            if any(s is None for s in chosen):
                data_dependent(node)
            return [s for s in chosen if s is not None]
        if any(a is None or a != b for a, b in zip(then, other)):
            data_dependent(node)  # the branches disagree: known once one has run
        return [s for s in then if s is not None]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        cond, *args = present_inputs(inputs, node)
        branch = "then_subgraph_index" if bool(cond.reshape(-1)[0]) else "else_subgraph_index"
        return runtime.call(subgraph_attr(node, branch), args)


@register
class CallOnce(Op):
    """Run the init subgraph (variable and table initializers) at the first invoke of the interpreter's life."""

    name = "CALL_ONCE"
    max_version = 1
    needs_runtime = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        index = subgraph_attr(node, "init_subgraph_index")
        if index == graph.index:
            raise ModelError(f"{node}: calls its own subgraph {index}")
        if node.inputs or node.outputs:
            raise ModelError(f"{node}: takes no inputs and gives no outputs")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        return []

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        index = subgraph_attr(node, "init_subgraph_index")
        if runtime.first_time(("CALL_ONCE", index)):
            runtime.call(index, [])
        return []
