"""The graph IR: what a .tflite subgraph means, independent of any file format or backend.

Tensors and nodes are plain dataclasses. Node attributes are the op's builtin options as a dict with
snake_case keys named as in the TFLite schema (``stride_w``, ``fused_activation_function``, ``padding``...),
so an op module reads ``node.attrs["stride_w"]`` and nothing else about flatbuffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

# Enum values of the schema that op code compares against.
PADDING_SAME, PADDING_VALID = 0, 1
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = 0, 1, 2, 3, 4, 5

# No tensor may ask for more than this: a corrupt or hostile shape must fail cleanly, not exhaust memory.
MAX_TENSOR_BYTES = 4 << 30

# Ops that, on constant inputs, give the same value at every invoke and are computed once at preparation
# (fp16 and sparse weights go through them): their outputs count as constants wherever weights must be.
FOLDED_ON_CONSTANTS = frozenset({"DEQUANTIZE", "DENSIFY"})


@dataclass
class Quantization:
    """Affine quantization: real = scale * (q - zero_point), per tensor or per channel along ``axis``."""

    scale: np.ndarray  # float32, length 1 or number of channels
    zero_point: np.ndarray  # int64, same length
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    def scalar(self) -> tuple[float, int]:
        """(scale, zero_point) of a per-tensor quantization."""
        return float(self.scale[0]), int(self.zero_point[0])


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    shape_signature: tuple[int, ...] | None = None
    quant: Quantization | None = None
    data: np.ndarray | None = None  # constant contents, already shaped; read-only view into the file
    sparsity: dict | None = None  # DENSIFY input: traversal_order, block_map, dim_metadata
    is_variable: bool = False
    type_name: str = ""  # the schema's name ("INT4", "STRING", ...), for messages
    # In a graph resolved for one allocation (shapes.resolve): the shape depends on data, so it is known only
    # after the node that writes it has run (LiteRT's dynamic tensors)
    dynamic: bool = False

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # exact: a hostile shape must not wrap around int64


@dataclass
class Node:
    index: int
    op: str  # builtin name ("CONV_2D") or the custom code ("Convolution2DTransposeBias")
    inputs: list[int]  # tensor indices; -1 marks an omitted optional input
    outputs: list[int]
    attrs: dict = field(default_factory=dict)
    version: int = 1
    custom: bool = False
    custom_options: bytes = b""
    intermediates: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return f"node {self.index} ({self.op})"


@dataclass
class Graph:
    """One subgraph: tensors, nodes in execution order, and the graph's inputs and outputs."""

    tensors: list[Tensor]
    nodes: list[Node]
    inputs: list[int]
    outputs: list[int]
    name: str = ""
    model_digest: str = ""  # SHA-256 of the file this graph was read from
    index: int = 0  # which subgraph of the model
    # In a graph resolved for one allocation (shapes.resolve): nodes computed then, whose outputs are now
    # constants (shape arithmetic); they run no more and nothing partitions them
    folded: frozenset[int] = frozenset()
    # Variable tensors a folded DEQUANTIZE of a constant writes: their value at allocation (LiteRT dequantizes a
    # constant once, so the state an RNN op then updates in place carries over)
    variable_init: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def live_nodes(self) -> list[Node]:
        """The nodes that run at invoke: all but the folded ones, in execution order."""
        return [n for n in self.nodes if n.index not in self.folded] if self.folded else self.nodes

    def producers(self) -> dict[int, int]:
        """tensor index -> index of the live node that writes it (computed once: a graph's structure is fixed
        after it is read or resolved)."""
        cached: dict[int, int] | None = self.__dict__.get("_producers")
        if cached is None:
            cached = self.__dict__["_producers"] = {t: n.index for n in self.live_nodes for t in n.outputs if t >= 0}
        return cached

    def prepared(self, key: tuple, make: Callable[[], T]) -> T:
        """``make()``, memoized on the graph under ``key``: a value derived from constants (dequantized weights,
        re-laid-out filters, requantization tables) is computed once per graph."""
        cache: dict[tuple, Any] = self.__dict__.setdefault("_prepared", {})
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def folds_to_constant(self, node: Node) -> bool:
        """Whether ``node`` is a FOLDED_ON_CONSTANTS op whose inputs are all constants."""
        return node.op in FOLDED_ON_CONSTANTS and all(t < 0 or self.tensors[t].data is not None for t in node.inputs)

    def constant_like(self, t: int) -> bool:
        """Whether tensor ``t`` is a constant, or the output of a DEQUANTIZE / DENSIFY of constants (the same
        value at every invoke)."""
        if t < 0:
            return False
        if self.tensors[t].data is not None:
            return True
        producer = self.producers().get(t)
        return producer is not None and self.folds_to_constant(self.nodes[producer])

    def consumers(self) -> dict[int, list[int]]:
        """tensor index -> indices of the nodes that read it, in execution order."""
        out: dict[int, list[int]] = {}
        for n in self.live_nodes:
            for t in n.inputs:
                if t >= 0:
                    out.setdefault(t, []).append(n.index)
        return out


@dataclass
class Signature:
    key: str
    subgraph: int
    inputs: dict[str, int]  # signature name -> tensor index
    outputs: dict[str, int]


@dataclass
class Model:
    subgraphs: list[Graph]
    signatures: list[Signature]
    version: int = 3
    description: str = ""

    @property
    def main(self) -> Graph:
        return self.subgraphs[0]
