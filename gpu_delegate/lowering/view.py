"""A partition as the lowering passes see and rewrite it, and what each pass reports.

The passes never touch the graph: they remove nodes from ``nodes``, record folded constants, renames and
fused post-ops here, and `emit.py` turns what remains into kernel calls. They reach an op's behaviour (its
expression, CPU kernel, lowering) through `op()`, never by importing gpu_delegate.ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..cpu.quant import dequantize
from ..graph import Graph
from .plan import PostOp, SoftmaxAfter

if TYPE_CHECKING:
    from .context import GpuOp


@dataclass
class PartitionView:
    graph: Graph
    nodes: list[int]  # nodes still to lower, in execution order
    shapes: dict[int, tuple[int, ...]]  # tensor -> shape for this preparation
    inputs: list[int]  # boundary inputs (non-constant)
    outputs: list[int]  # boundary outputs
    ops: dict[int, GpuOp] = field(default_factory=dict)  # node -> its op class
    folded: dict[int, np.ndarray] = field(default_factory=dict)  # tensor -> constant computed at prepare
    postops: dict[int, list[PostOp]] = field(default_factory=dict)  # node -> post-ops fused into its output
    written_as: dict[int, int] = field(default_factory=dict)  # tensor a node writes -> tensor it really writes
    read_as: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, input slot) -> tensor it reads
    # (node, input slot) -> (shape, perm): the node reads TRANSPOSE(RESHAPE(tensor it reads, shape), perm), the
    # RESHAPE (which splits the channels) and the TRANSPOSE dropped
    read_transposed: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    # node -> (shape, perm): the node writes its output 0 as TRANSPOSE(output, perm), of that shape, reshaped into
    # final(output), the TRANSPOSE and the RESHAPE (which merges the last two axes into the channels) dropped
    write_transposed: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    # node -> its scores' scale, beta (and 8-bit roundings): the node's output 0 goes through MUL by scale and
    # SOFTMAX(beta) in the node's own kernel, into final(output), the MUL and the SOFTMAX dropped
    softmax_after: dict[int, SoftmaxAfter] = field(default_factory=dict)
    # CONV_2D node -> (scale, shift) per input channel: it reads scale * x + shift, the MULs, ADDs, SUBs and DIVs by
    # constants that computed it from x (its read_as) dropped (fuse_input_affine.py)
    input_affine: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # GATHER nodes that add the gathered axis' size to a negative index (a SELECT, a LESS and an ADD dropped)
    wrapped_indices: set[int] = field(default_factory=set)
    extra_padding: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)  # node -> t, b, l, r
    aliases: dict[int, int] = field(default_factory=dict)  # tensor -> tensor whose buffer it shares
    # tensor -> (the concatenation it is a part of, its first slice there): written in place (place_concat.py)
    placed: dict[int, tuple[int, int]] = field(default_factory=dict)
    # (node, input slot) reading a tensor with fewer channels, the rest read as 0 -> (the PAD dropped, its output)
    zero_extended: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

    def op(self, n: int) -> GpuOp:
        return self.ops[n]

    def const(self, t: int) -> np.ndarray | None:
        """The float32 value of a constant tensor (dequantized once), or None if it is not constant."""
        if t < 0:
            return None
        if t in self.folded:
            return self.folded[t]
        tensor = self.graph.tensors[t]
        if tensor.data is None:
            return None
        data = tensor.data
        q = tensor.quant
        if q is not None and data.dtype.kind in "iu":  # int8/uint8 weights, int32 biases
            value = dequantize(data, q.scale, q.zero_point, q.axis if q.per_channel else None)
        elif data.dtype.kind == "f":
            value = np.asarray(data, np.float32)
        else:
            value = data  # shapes, axes, paddings: read as they are
        self.folded[t] = value
        return value

    def is_const(self, t: int) -> bool:
        return t >= 0 and (t in self.folded or self.graph.tensors[t].data is not None)

    def readers(self) -> dict[int, list[int]]:
        """tensor -> the nodes still to lower that read it (as ``read_as`` stands now: a pass that
        redirects a read after asking keeps this map up to date itself). One pass over the nodes, so that a pass
        asking about every tensor stays linear in the partition's size."""
        out: dict[int, list[int]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(self.node_inputs(n)):
                out.setdefault(t, []).append(n)
        return out

    def buffer_names(self) -> dict[int, set[int]]:
        """tensor -> every name its buffer goes by: itself and the dropped reshapes that share it (``aliases``,
        followed to the tensor a kernel writes). Tensors nothing aliases are absent."""
        def root(t: int) -> int:
            while t in self.aliases:
                t = self.aliases[t]
            return t

        names: dict[int, set[int]] = {}
        for alias in self.aliases:
            source = root(alias)
            names.setdefault(source, {source}).add(alias)
        return {t: group for group in names.values() for t in group}

    def shared_buffers(self) -> set[int]:
        """Tensors whose buffer another tensor shares: both sides of a dropped reshape (``aliases``) and of a part a
        concatenation's producer writes in place (``placed``)."""
        return set(self.aliases) | set(self.aliases.values()) | set(self.placed) | {o for o, _ in self.placed.values()}

    @staticmethod
    def buffer_readers(t: int, readers: dict[int, list[int]], names: dict[int, set[int]], outputs: set[int]
                       ) -> tuple[list[int], bool]:
        """The nodes that read t's buffer, directly or through a dropped reshape that shares it, and whether the
        buffer leaves the partition (is in ``outputs``) under any of its names; ``readers`` and ``names`` as
        ``readers()`` and ``buffer_names()`` give them. A pass that stops t from being written must ask this: a
        reshape's reader reads t too."""
        group = names.get(t, {t})
        users = sorted({n for name in group for n in readers.get(name, ())})
        return users, any(name in outputs for name in group)

    def quant_grid(self, t: int) -> tuple[str, float, int] | None:
        """Tensor ``t``'s 8-bit grid (dtype, scale, zero point); None if it has none or a per-channel one."""
        tensor = self.graph.tensors[t]
        q = tensor.quant
        if q is None or q.per_channel:
            return None
        scale, zero = q.scalar()
        return np.dtype(tensor.dtype).name, float(scale), int(zero)

    def graph_shape(self, t: int) -> tuple[int, ...]:
        """Tensor ``t``'s shape with the leading 1s that ``collapse`` took off a rank-5 tensor put back: the rank
        its node's attributes count (an axis, a TILE's multiples)."""
        shape = tuple(self.shapes[t])
        return (1,) * max(0, len(self.graph.tensors[t].shape) - len(shape)) + shape

    def node_inputs(self, n: int) -> list[int]:
        return [self.read_as.get((n, k), t) for k, t in enumerate(self.graph.nodes[n].inputs)]

    def final(self, t: int) -> int:
        while t in self.written_as:
            t = self.written_as[t]
        return t


@dataclass
class PassResult:
    """What one pass did to a partition, as TFLite's transformations report it: the rewrites it applied, and
    the candidates it looked at and declined, each with the reason."""

    name: str
    applied: list[str] = field(default_factory=list)
    declined: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)
