"""What every op module provides, and the registry that finds an op by its name.

An op is one class, registered under its TFLite name, that holds everything about it:

    @register
    class Conv2D(Op):
        name = "CONV_2D"
        def infer(node, graph, shapes): ...        # output shapes from input shapes (and constants)
        def run_cpu(node, graph, inputs): ...      # the CPU kernel (numba, in gpu_delegate/cpu/)
        def gpu_support(node, graph): ...          # True, or why the GPU path cannot take this node
        def lower(node, graph, builder): ...       # the GPU kernel(s) for this node (gpu_delegate/kernels/)

All methods are static: an op has no state. Attributes come from ``node.attrs`` (see graph.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node

REGISTRY: dict[str, type[Op]] = {}


class Op:
    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    # The newest op version (operator_codes[].version) this class implements, as TFLite's op resolver
    # registers it; None: not yet audited, every version is accepted.
    max_version: ClassVar[int | None] = None

    @classmethod
    def check_version(cls, node: Node) -> None:
        """Refuse a node whose op version is newer than what this class implements."""
        if cls.max_version is not None and node.version > cls.max_version:
            raise ModelError(f"{node}: op version {node.version} is not supported (this kernel implements "
                             f"versions 1 to {cls.max_version})")

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        """Validate the node when the model is loaded: raise ModelError naming what is wrong."""

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        """Output shapes, given the input shapes (None for an omitted optional input)."""
        raise NotImplementedError

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        """Estimated multiply-accumulates (work), used to choose which partitions to delegate."""
        return sum(graph.tensors[t].size for t in node.outputs if t >= 0)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return "no GPU kernel for this op"

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        """Elementwise ops only: the result as a dialect expression over FLT4 ``a`` (input 0) and ``b``
        (input 1), e.g. ``"a + b"``. Such an op can be fused into the kernel that produces its input."""
        return None

    # GPU ops also define ``lower(node, graph, ctx)``: emit kernel calls through a lowering.emit.LowerContext.


def register(cls: type[Op]) -> type[Op]:
    for name in (cls.name, *cls.aliases):
        REGISTRY[name] = cls
    return cls


def get_op(name: str) -> type[Op] | None:
    from . import _load_all  # noqa: F401  (importing the package registers every op module)

    return REGISTRY.get(name)


# -- helpers op modules share ----------------------------------------------------------------------------

def const_input(node: Node, graph: Graph, i: int, what: str) -> np.ndarray:
    """The constant data of input ``i``; a ModelError if it is not a constant."""
    t = node.inputs[i] if i < len(node.inputs) else -1
    if t < 0 or graph.tensors[t].data is None:
        raise ModelError(f"{node}: input {i} ({what}) must be a constant tensor")
    return graph.tensors[t].data


def input_count(node: Node, low: int, high: int | None = None) -> None:
    high = low if high is None else high
    n = len(node.inputs)
    if not low <= n <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise ModelError(f"{node}: expects {want} inputs, has {n}")


def prepared(graph: Graph, key: tuple, make: Callable[[], object]):
    """Memoize a value derived from constants (dequantized weights, re-laid-out filters) on the graph."""
    cache = graph.__dict__.setdefault("_prepared", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], node: Node) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ModelError(f"{node}: shapes {list(a)} and {list(b)} do not broadcast") from None
