"""The delegate interface: TFLite's SimpleDelegate, in Python.

Both interpreters (ours, and LiteRT's through litert.py) speak to a delegate only through these two
classes, so a delegate written here in numpy, numba or anything else runs in either of them.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

import numpy as np

from .graph import Graph, Node
from .litert import native_delegate_pointer


class DelegateKernel:
    """Runs one partition: a set of nodes the delegate took, seen from outside as a single node."""

    def init(self, graph: Graph, node_indices: list[int], input_ids: list[int], output_ids: list[int]) -> None:
        """Called once per partition. ``input_ids``/``output_ids`` are the partition's non-constant
        boundary tensors; constants are read from ``graph``."""

    def prepare(self, tensors: Mapping[int, np.ndarray]) -> None:
        """Called after (re)allocation or a resize; ``tensors`` holds the boundary inputs' current arrays
        (their shapes are final, their contents not yet meaningful)."""

    def invoke(self, tensors: MutableMapping[int, np.ndarray]) -> None:
        """Read the inputs from ``tensors`` and write every output into ``tensors[id]`` (an array of the
        output's dtype and shape)."""
        raise NotImplementedError

    def free(self) -> None:
        """Called once when the interpreter drops the kernel (it is deleted, or re-delegates its graph after a
        resize): release device memory and other resources here, not in ``__del__``."""


class SimpleDelegate:
    name: str = "SimpleDelegate"
    #: how many partitions the interpreter may hand this delegate; 0 means no limit
    max_partitions: int = 0

    def is_node_supported(self, node: Node, graph: Graph) -> bool | str:
        """True, or the reason the node stays on the CPU."""
        return False

    def create_kernel(self) -> DelegateKernel:
        raise NotImplementedError

    def partition_weight(self, nodes: list[Node], graph: Graph) -> float:
        """How much a partition is worth delegating; partitions with the largest weight are kept."""
        return float(len(nodes))

    def partition_declined(self, nodes: list[Node], graph: Graph) -> str:
        """Why a partition of supported nodes stays on the CPU as a whole, or "" (it is delegated)."""
        return ""

    def _get_native_delegate_pointer(self) -> int:
        """The address of a TfLiteDelegate that runs this delegate inside LiteRT's own interpreter:
        ``ai_edge_litert.interpreter.Interpreter(..., experimental_delegates=[delegate])`` calls this."""
        return native_delegate_pointer(self)
