"""Resource variables: VAR_HANDLE names a variable, ASSIGN_VARIABLE stores a value in it, READ_VARIABLE reads it.

The variables live in the interpreter (executor.ModelRun), shared by every subgraph, as in LiteRT: a handle is an
int32 the interpreter hands out per (container, shared_name). A read's shape is known only once something has
been assigned, so READ_VARIABLE's output is a dynamic tensor, as LiteRT makes it.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, Runtime, Shape, register
from .checks import arity, data_dependent


def _handle(node: Node, value: np.ndarray | None) -> int:
    if value is None or value.size != 1:
        raise ModelError(f"{node}: the resource input is not a variable handle")
    return int(value.reshape(-1)[0])


def _check_resource(node: Node, graph: Graph) -> None:
    t = graph.tensors[node.inputs[0]]
    if t.type_name != "RESOURCE":
        raise ModelError(f"{node}: input 0 ({t.name!r}) is {t.type_name or t.dtype}, not a RESOURCE tensor")


@register
class VarHandle(Op):
    name = "VAR_HANDLE"
    types = "resource handle"
    max_version = 1
    needs_runtime = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 0, 1)
        if graph.tensors[node.outputs[0]].type_name != "RESOURCE":
            raise ModelError(f"{node}: the output must be a RESOURCE tensor")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        return [()]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        handle = runtime.resource(str(node.attrs.get("container", "")), str(node.attrs.get("shared_name", "")))
        return [np.array(handle, np.int32)]


@register
class AssignVariable(Op):
    name = "ASSIGN_VARIABLE"
    types = "any numeric"
    max_version = 1
    needs_runtime = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 0)
        _check_resource(node, graph)

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        return []

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        value = inputs[1]
        if value is None:
            raise ModelError(f"{node}: the value input is missing")
        handle = _handle(node, inputs[0])
        old = runtime.variable(handle)
        if old is not None and old.dtype != value.dtype:
            raise ModelError(f"{node}: assigns {value.dtype} to a variable holding {old.dtype}")
        runtime.assign(handle, value)
        return []


@register
class ReadVariable(Op):
    name = "READ_VARIABLE"
    types = "any numeric"
    max_version = 1
    needs_runtime = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        _check_resource(node, graph)

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        data_dependent(node)

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        value = runtime.variable(_handle(node, inputs[0]))
        if value is None:
            raise ModelError(f"{node}: reads a variable nothing has assigned yet")
        out = graph.tensors[node.outputs[0]]
        if value.dtype != out.dtype:
            raise ModelError(f"{node}: the variable holds {value.dtype}, the output is {out.dtype}")
        return [np.array(value, copy=True)]
