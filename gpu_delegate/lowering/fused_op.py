"""The op that stands in for the last node of a chain a pass fused into one kernel (fuse_layer_norm.py,
fuse_repeat.py): the pass sets it as that node's op in the view, and ``lower`` emits the chain's kernel."""

from __future__ import annotations

from typing import ClassVar, Self, cast

import numpy as np

from ..graph import Graph, Node
from .context import GpuOp
from .plan import CodeTable


class FusedOp:
    """No post-op form of its own (a fused chain is never a post-op of another kernel); its CPU form is still its
    node's own op (``original``). A pass subclasses it with ``lower`` and makes one class per chain (``for_chain``)."""

    original: ClassVar[GpuOp]

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        return None

    @staticmethod
    def gpu_table(node: Node, graph: Graph) -> CodeTable | None:
        return None

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool:
        return False

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return cls.original.run_cpu(node, graph, inputs)

    @classmethod
    def for_chain(cls, original: GpuOp, **chain: object) -> type[Self]:
        """A subclass for one chain: ``original`` the op of the node it stands in for, ``chain`` the class attributes
        its ``lower`` reads."""
        return cast(type[Self], type(cls.__name__, (cls,), {"original": original, **chain}))
