"""Merge a zero PAD of H and W into the VALID convolution that reads it (the kernel pads on the fly)."""

from __future__ import annotations

import numpy as np

from ..graph import PADDING_VALID
from ..phwc4 import bhwc
from .view import PartitionView, PassResult

TAKERS = {"CONV_2D", "DEPTHWISE_CONV_2D"}


def zero_pads(view: PartitionView, n: int, ranks: tuple[int, ...] = (4,)) -> np.ndarray | str:
    """The paddings of a PAD / PADV2 node of a tensor of one of ``ranks`` that pads with the constant 0, as the
    [4, 2] paddings of its BHWC form (phwc4.bhwc: missing leading dimensions are 1), or why it is not one (shared with
    pad_channels)."""
    node = view.graph.nodes[n]
    ins = view.node_inputs(n)
    rank = len(view.shapes[ins[0]])
    if rank not in ranks:
        return "its input is not 4-D" if ranks == (4,) else f"its input has rank {rank}"
    pads = view.const(ins[1])
    if pads is None or np.shape(pads) != (rank, 2):
        return f"its paddings are not a constant [{rank}, 2]"
    if node.op == "PADV2" and (len(ins) < 3 or view.const(ins[2]) is None or np.any(view.const(ins[2]) != 0)):
        return "it pads with a value other than 0"
    bhwc_pads = np.zeros((4, 2), np.int64)
    bhwc_pads[4 - rank:] = np.asarray(pads, np.int64)
    return bhwc_pads


def spatial_pads(view: PartitionView, n: int) -> tuple[int, int, int, int] | str:
    """(top, bottom, left, right) of a PAD node that pads only H and W (of its input's BHWC form: a Conv1D's causal
    PAD of [B, T, C] pads W) with zeros, or why it is not one."""
    pads = zero_pads(view, n, ranks=(2, 3, 4))
    if isinstance(pads, str):
        return pads
    x, y = view.node_inputs(n)[0], view.graph.nodes[n].outputs[0]
    grid = view.quant_grid(x)
    if view.graph.tensors[x].quant is not None and (grid is None or grid != view.quant_grid(y)):
        # on one grid the pad's zero point stands for 0.0, which the convolutions pad with (conv2d_int8: its code)
        return "its input is quantized on another grid than its output"
    if np.any(pads[0] != 0) or np.any(pads[3] != 0) or np.any(pads < 0):
        return "it pads the batch or channels, or crops"
    return int(pads[1, 0]), int(pads[1, 1]), int(pads[2, 0]), int(pads[2, 1])


def run(view: PartitionView) -> PassResult:
    result = PassResult("merge_pad")
    graph = view.graph
    removed = set()
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    for n in view.nodes:
        node = graph.nodes[n]
        if node.op not in ("PAD", "PADV2"):
            continue
        pads = spatial_pads(view, n)
        if isinstance(pads, str):
            result.declined.append(f"{node}: {pads}")
            continue
        out = node.outputs[0]
        users, leaves = view.buffer_readers(out, readers, names, outputs)
        if len(users) != 1 or leaves:
            result.declined.append(f"{node}: its output is read by {len(users)} nodes or leaves the partition")
            continue
        user = graph.nodes[users[0]]
        read = view.node_inputs(user.index)[0]  # out, or a dropped reshape's name for out's buffer
        if user.op not in TAKERS or user.attrs.get("padding") != PADDING_VALID or \
                read not in names.get(out, {out}) or bhwc(view.shapes[read]) != bhwc(view.shapes[out]):
            result.declined.append(f"{node}: its reader {user} is not a VALID convolution reading it as input 0")
            continue
        source = view.node_inputs(n)[0]
        view.read_as[(user.index, 0)] = source
        readers[read].remove(user.index)
        readers.setdefault(source, []).append(user.index)
        for alias in names.get(out, set()) - {out}:  # the dropped reshapes of the PAD's output: nothing reads them now
            view.aliases.pop(alias, None)
        view.extra_padding[user.index] = pads
        removed.add(n)
        result.applied.append(f"merged {node} into {user}")
    view.nodes = [n for n in view.nodes if n not in removed]
    return result
