"""Lower a chain of RESHAPE and TILE nodes that repeats every pixel of an NHWC tensor ky x kx times to one nearest
resize (kernels/dialect/resize.dialect) instead of a kernel per node. Keras 3 writes nearest UpSampling2D (and
ops.repeat over H and W) as such a chain, which its TFLite converter keeps:

    RESHAPE [B, H, W, C] -> [B, H, 1, W, C]    TILE [1, 1, ky, 1, 1]    RESHAPE -> [B, H*ky, W, 1, C]
    TILE [1, 1, 1, kx, 1]                      RESHAPE -> [B, H*ky, W*kx, C]

(five kernels on the YOLO-style head, ~0.45 ms on PoCL). Whether a chain is such a repeat is decided on the values
themselves: the chain applied to the indices of its input (numpy's reshape and tile, TFLite's meanings) must give
np.repeat of them along H and W. The chain's last node stays as the node that emits the kernel, reading the chain's
input (``read_as``); the others are removed. The resize reads source pixel floor((o + 0.5) / k), exact for integer
factors. Declined: an intermediate read elsewhere or leaving the partition, tensors on different grids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph import Graph, Node
from .context import GpuOp, LowerContext
from .fused_op import FusedOp
from .view import PartitionView, PassResult

CHAIN_OPS = ("RESHAPE", "TILE")
MAX_CHECKED = 1 << 24  # values of a chain's tensor checked on its indices (int32: 64 MB at most)


@dataclass(frozen=True, eq=False)
class Repeat:
    source: int  # the chain's NHWC input
    ky: int
    kx: int
    last: GpuOp  # the chain's last node's own op, whose CPU form is still that node's meaning


class RepeatOp(FusedOp):
    """Stands in as the op of the chain's last node (a subclass per chain: ``for_chain``)."""

    repeat: ClassVar[Repeat]

    @classmethod
    def lower(cls, node: Node, graph: Graph, ctx: LowerContext) -> None:
        r = cls.repeat
        dst = node.outputs[0]
        defines: dict[str, int | float | str] = {"BILINEAR": 0, "ALIGN_CORNERS": 0, "HALF_PIXEL": 1,
                                                 "SCALE_Y": 1.0 / r.ky, "SCALE_X": 1.0 / r.kx}
        grid, variants = ctx.quads_layout(dst, "resize")
        ctx.kernel("resize", {"src": r.source}, {"dst": dst}, defines=defines, grid=grid, variants=variants)


def _applied(view: PartitionView, node: Node, values: np.ndarray) -> np.ndarray | None:
    """``node`` (RESHAPE or TILE) applied to ``values``, or None where its operands are not as expected."""
    out_shape = view.graph_shape(node.outputs[0])
    if node.op == "RESHAPE":
        return values.reshape(out_shape) if int(np.prod(out_shape)) == values.size else None
    multiples = view.const(view.node_inputs(node.index)[1]) if len(node.inputs) > 1 else None
    if multiples is None or np.size(multiples) != values.ndim:
        return None
    tiled = np.tile(values, [int(m) for m in np.asarray(multiples).reshape(-1)])
    return tiled if tiled.shape == out_shape else None


def _grid(view: PartitionView, t: int) -> tuple[tuple[float, ...], tuple[int, ...]] | None:
    q = view.graph.tensors[t].quant
    return None if q is None else (tuple(np.asarray(q.scale).tolist()), tuple(np.asarray(q.zero_point).tolist()))


def match(view: PartitionView, first: Node, readers: dict[int, list[int]], names: dict[int, set[int]],
          outputs: set[int]) -> tuple[list[int], Repeat] | str:
    """The chain from ``first`` on and what it repeats, or why it is none."""
    graph = view.graph
    source = view.node_inputs(first.index)[0]
    shape = tuple(view.shapes[source])
    if len(shape) != 4 or min(shape) < 1:
        return "its input is not a non-empty NHWC tensor"
    indices = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    values = indices
    node, chain = first, []
    while True:
        if int(np.prod(view.graph_shape(node.outputs[0]))) > MAX_CHECKED:
            return f"its tensors are too large to check on their indices (over {MAX_CHECKED} values)"
        applied = _applied(view, node, values)
        if applied is None or _grid(view, node.outputs[0]) != _grid(view, source):
            return "a node of the chain is not a plain reshape or tile of its input's values"
        values = applied
        chain.append(node.index)
        out = node.outputs[0]
        if values.ndim == 4 and len(chain) > 1 and values.shape[0] == shape[0] and values.shape[3] == shape[3] and \
                values.shape[1] % shape[1] == 0 and values.shape[2] % shape[2] == 0:
            ky, kx = values.shape[1] // shape[1], values.shape[2] // shape[2]
            if np.array_equal(values, np.repeat(np.repeat(indices, ky, axis=1), kx, axis=2)):
                return chain, Repeat(source, ky, kx, view.op(node.index))
        users, leaves = view.buffer_readers(out, readers, names, outputs)
        if leaves or len(users) != 1:
            return "an intermediate tensor is read elsewhere or leaves the partition"
        node = graph.nodes[users[0]]
        if node.op not in CHAIN_OPS or view.node_inputs(node.index)[0] != out:
            return "the chain ends before it repeats the input's pixels"
        if len(chain) > 8:
            return "the chain is longer than any repeat needs"


def run(view: PartitionView) -> PassResult:
    result = PassResult("fuse_repeat")
    graph = view.graph
    removed: set[int] = set()
    names, outputs = view.buffer_names(), set(view.outputs)
    for n in list(view.nodes):
        node = graph.nodes[n]
        if n in removed or node.op != "RESHAPE" or len(view.shapes[view.node_inputs(n)[0]]) != 4:
            continue
        found = match(view, node, view.readers(), names, outputs)
        if isinstance(found, str):
            result.declined.append(f"{node}: {found}")
            continue
        chain, repeat = found
        final = chain[-1]
        view.ops[final] = RepeatOp.for_chain(repeat.last, repeat=repeat)
        view.read_as[(final, 0)] = repeat.source
        removed.update(chain[:-1])
        view.nodes = [m for m in view.nodes if m not in removed]
        result.applied.append(f"nodes {', '.join(map(str, chain))}: every pixel of tensor {repeat.source} repeated "
                              f"{repeat.ky} x {repeat.kx}, one nearest resize")
    return result
