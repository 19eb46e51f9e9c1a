"""Rearranging elements between dimensions: SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, REVERSE_V2,
REVERSE_SEQUENCE, MATRIX_DIAG, MATRIX_SET_DIAG and DILATE.

They move elements without arithmetic, so any element type goes through (quantized tensors as their codes).
New elements are zeros, except that SPACE_TO_BATCH_ND pads 8- and 16-bit tensors with the output's zero point
and DILATE fills with its padding-value input, as TFLite's kernels do. Block shapes, paddings, crops, axes and
dilations may be tensors computed at run time; the output shape then follows from their values when the node
runs. The data movement is numpy reshapes, transposes and strided views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..cpu.loop_vm import strides_of
from ..errors import ModelError
from ..graph import Graph, Node
from ..lowering.context import LowerContext
from .base import Defines, Op, register
from .checks import arity, data_dependent, type_names
from .layout import _gpu_check
from .operands import (
    Inputs,
    Shape,
    arrays,
    bounded,
    int_list,
    known,
    operand,
    require_type,
    same_quantization,
    same_type,
    scalar_of,
    tensor_in,
    tensor_out,
)

if TYPE_CHECKING:
    from ..loop_program import LoopAssembler

_ANY = (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
        np.uint64, np.bool_, np.complex64, np.complex128)
# TFLite's MATRIX_DIAG and MATRIX_SET_DIAG switch over these; any other type falls to a float copy there
_DIAG_TYPES = (np.float32, np.int8, np.uint8, np.int16, np.int32, np.int64)


def _check_copy(node: Node, graph: Graph, types: tuple[type, ...] = _ANY) -> None:
    """Input 0 and output 0 hold one element type (one quantization), among ``types``."""
    x, y = tensor_in(node, graph, 0), tensor_out(node, graph)
    require_type(node, x, types, "the input")
    same_type(node, x, y)
    same_quantization(node, x, y)


# -- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND -----------------------------------------------------------------

def _block_params(node: Node, rank: int, block: np.ndarray, pairs: np.ndarray, what: str) -> tuple[list[int],
                                                                                                  list[int]]:
    """The block shape and the [spatial, 2] paddings or crops of a 3-D (NHC) or 4-D (NHWC) tensor."""
    if rank not in (3, 4):
        raise ModelError(f"{node}: the input must be 3-D or 4-D, has rank {rank}")
    spatial = rank - 2
    if block.shape != (spatial,) or pairs.shape != (spatial, 2):
        raise ModelError(f"{node}: a rank-{rank} input needs a block shape of shape [{spatial}] and {what} of "
                         f"shape [{spatial}, 2], has {list(block.shape)} and {list(pairs.shape)}")
    sizes = int_list(node, block, "the block shape")
    if any(b < 1 for b in sizes):
        raise ModelError(f"{node}: block shape {sizes} must be positive")
    amounts = int_list(node, pairs, what)
    if any(a < 0 for a in amounts):
        raise ModelError(f"{node}: {what} {amounts} must not be negative")
    return sizes, amounts


def _space_to_batch_shape(node: Node, shape: Shape, block: list[int], pads: list[int]) -> Shape:
    spatial = []
    for d, b in enumerate(block):
        padded = shape[1 + d] + pads[2 * d] + pads[2 * d + 1]
        if padded % b:
            raise ModelError(f"{node}: padded dimension {1 + d} of size {padded} is not a multiple of block "
                             f"size {b}")
        spatial.append(padded // b)
    return (shape[0] * int(np.prod(block)), *spatial, shape[-1])


def _batch_to_space_shape(node: Node, shape: Shape, block: list[int], crops: list[int]) -> Shape:
    blocks = int(np.prod(block))
    if shape[0] % blocks:
        raise ModelError(f"{node}: batch {shape[0]} is not a multiple of the {blocks} blocks of {block}")
    spatial = []
    for d, b in enumerate(block):
        size = shape[1 + d] * b - crops[2 * d] - crops[2 * d + 1]
        if size < 0:
            raise ModelError(f"{node}: crops {crops[2 * d:2 * d + 2]} exceed dimension {1 + d} of size "
                             f"{shape[1 + d] * b}")
        spatial.append(size)
    return (shape[0] // blocks, *spatial, shape[-1])


def _pad_value(graph: Graph, node: Node) -> int:
    """What SPACE_TO_BATCH_ND pads with: the output's zero point for 8- and 16-bit types, else 0."""
    out = tensor_out(node, graph)
    if out.dtype.itemsize in (1, 2) and out.quant is not None:
        return int(out.quant.zero_point[0])
    return 0


class _BlockOp(Op):
    """Shared shape handling: input 1 is the block shape, input 2 the paddings (or crops), both int32."""

    max_version = 4
    pairs_name = ""

    @staticmethod
    def out_shape(node: Node, shape: Shape, block: list[int], pairs: list[int]) -> Shape:
        raise NotImplementedError

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        _check_copy(node, graph)
        require_type(node, tensor_in(node, graph, 1), (np.int32,), "the block shape")
        require_type(node, tensor_in(node, graph, 2), (np.int32,), cls.pairs_name)
        x = tensor_in(node, graph, 0)
        if x.dtype == np.int16 and x.quant is not None and x.quant.zero_point[0] != 0:
            raise ModelError(f"{node}: an int16 input must have zero point 0")

    @classmethod
    def infer(cls, node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape = known(node, shapes)[0]
        block, pairs = operand(node, graph, None, 1), operand(node, graph, None, 2)
        if block is None or pairs is None:
            data_dependent(node)
        return [cls.out_shape(node, shape, *_block_params(node, len(shape), block, pairs, cls.pairs_name))]

    @classmethod
    def gpu_support(cls, node: Node, graph: Graph) -> bool | str:
        # an open-batch TCN's dilated causal Conv1D: without these on the GPU it delegated 23% of its nodes
        return _gpu_check(node, graph, params={1: "the block shape", 2: cls.pairs_name},
                          plan=lambda n, g: cls.infer(n, g, [g.tensors[n.inputs[0]].shape]))

    @classmethod
    def lower(cls, node: Node, graph: Graph, ctx: LowerContext) -> None:
        """kernels/dialect/space_batch.dialect; a 3-D tensor as a 4-D one with a block height of 1."""
        src, dst = ctx.input(node, 0), ctx.output(node, 0)
        shape = ctx.shape(src)
        block = [int(b) for b in ctx.const_ints(ctx.input(node, 1)).reshape(-1)]
        pairs = [int(p) for p in ctx.const_ints(ctx.input(node, 2)).reshape(-1)]
        spatial = (1, shape[1]) if len(shape) == 3 else (shape[1], shape[2])
        if len(shape) == 3:
            block, pairs = [1, *block], [0, 0, *pairs]
        defines: Defines = {"INVERSE": cls.name == "BATCH_TO_SPACE_ND", "RANK3": len(shape) == 3,
                            "BLOCK_H": block[0], "BLOCK_W": block[1], "PAD_T": pairs[0], "PAD_L": pairs[2],
                            "SRC_N": shape[0], "DST_N": ctx.shape(dst)[0], "SRC_Y": spatial[0],
                            "SRC_X": spatial[1]}
        ctx.kernel("space_batch", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


@register
class SpaceToBatchNd(_BlockOp):
    """Pad the spatial dimensions, then move each block offset to the batch: output batch index
    (offset_h * block_w + offset_w) * batch + b."""

    name, pairs_name = "SPACE_TO_BATCH_ND", "the paddings"

    @staticmethod
    def out_shape(node: Node, shape: Shape, block: list[int], pairs: list[int]) -> Shape:
        return _space_to_batch_shape(node, shape, block, pairs)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, block_value, pads_value = arrays(node, inputs)
        block, pads = _block_params(node, x.ndim, block_value, pads_value, "the paddings")
        out_shape = bounded(node, _space_to_batch_shape(node, x.shape, block, pads), x.dtype)
        widths = [(0, 0)] + [(pads[2 * d], pads[2 * d + 1]) for d in range(len(block))] + [(0, 0)]
        padded = np.pad(x, widths, constant_values=np.array(_pad_value(graph, node)).astype(x.dtype))
        # (B, H/bh, bh, W/bw, bw, C) -> (bh, bw, B, H/bh, W/bw, C)
        split = [x.shape[0]]
        for d, b in enumerate(block):
            split += [out_shape[1 + d], b]
        split.append(x.shape[-1])
        spatial = len(block)
        order = [2 + 2 * d for d in range(spatial)] + [0] + [1 + 2 * d for d in range(spatial)] + [2 * spatial + 1]
        return [padded.reshape(split).transpose(order).reshape(out_shape)]


@register
class BatchToSpaceNd(_BlockOp):
    """The inverse of SPACE_TO_BATCH_ND: blocks moved from the batch back to space, then cropped."""

    name, pairs_name = "BATCH_TO_SPACE_ND", "the crops"

    @staticmethod
    def out_shape(node: Node, shape: Shape, block: list[int], pairs: list[int]) -> Shape:
        return _batch_to_space_shape(node, shape, block, pairs)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, block_value, crops_value = arrays(node, inputs)
        block, crops = _block_params(node, x.ndim, block_value, crops_value, "the crops")
        _batch_to_space_shape(node, x.shape, block, crops)
        spatial = len(block)
        batch = x.shape[0] // int(np.prod(block))
        # (bh, bw, B, H, W, C) -> (B, H, bh, W, bw, C)
        blocks = x.reshape(*block, batch, *x.shape[1:])
        order = [spatial] + [p for d in range(spatial) for p in (spatial + 1 + d, d)] + [2 * spatial + 1]
        full = blocks.transpose(order).reshape(batch, *(x.shape[1 + d] * block[d] for d in range(spatial)),
                                               x.shape[-1])
        window = tuple(slice(crops[2 * d], full.shape[1 + d] - crops[2 * d + 1]) for d in range(spatial))
        return [np.array(full[(slice(None), *window)], copy=True)]


# -- REVERSE_V2 / REVERSE_SEQUENCE ---------------------------------------------------------------------------

def _reverse_axes(node: Node, axes_value: np.ndarray, rank: int) -> list[int]:
    """Axes to reverse: in range (negative ones count from the end) and contiguous, as TFLite requires."""
    axes = sorted(a + rank if a < 0 else a for a in int_list(node, axes_value, "the axes"))
    if any(not 0 <= a < rank for a in axes):
        raise ModelError(f"{node}: axes {int_list(node, axes_value, 'the axes')} are out of range for rank {rank}")
    if axes and axes != list(range(axes[0], axes[0] + len(axes))):
        raise ModelError(f"{node}: axes {axes} are not contiguous, which TFLite's REVERSE_V2 does not support")
    return axes


@register
class ReverseV2(Op):
    name, max_version = "REVERSE_V2", 4
    _TYPES = (np.float16, np.float32, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_)
    types = type_names(_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _check_copy(node, graph, ReverseV2._TYPES)
        require_type(node, tensor_in(node, graph, 1), (np.int32,), "the axes")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape = known(node, shapes)[0]
        axes = operand(node, graph, None, 1)
        if axes is not None:
            _reverse_axes(node, axes, len(shape))
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, axes = arrays(node, inputs)
        return [np.array(np.flip(x, tuple(_reverse_axes(node, axes, x.ndim))), copy=True)]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        # a copy walking the reversed axes backwards: from their last element, with negated strides
        x, axes_value = node.inputs[0], asm.value(node.inputs[1])
        if axes_value is None:
            raise asm.declined(f"{node}: the axes are computed at run time")
        shape = asm.shape(x)
        axes = _reverse_axes(node, axes_value, len(shape))
        strides = strides_of(shape)
        base = sum((shape[a] - 1) * strides[a] for a in axes)
        backwards = [-st if a in axes else st for a, st in enumerate(strides)]
        asm.copy(node.outputs[0], 0, strides, x, base, backwards, shape)


@register
class ReverseSequence(Op):
    """Along ``seq_dim``, the first seq_lengths[b] elements of each batch entry b (along ``batch_dim``)
    reversed; the rest left in place."""

    name, max_version = "REVERSE_SEQUENCE", 1
    _TYPES = (np.float32, np.uint8, np.int16, np.int32, np.int64)
    types = type_names(_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _check_copy(node, graph, ReverseSequence._TYPES)
        require_type(node, tensor_in(node, graph, 1), (np.int32, np.int64), "the sequence lengths")

    @staticmethod
    def _dims(node: Node, shape: Shape, lengths: Shape) -> tuple[int, int]:
        seq, batch = node.attrs.get("seq_dim", 0), node.attrs.get("batch_dim", 0)
        if not (0 <= seq < len(shape) and 0 <= batch < len(shape)) or seq == batch:
            raise ModelError(f"{node}: seq_dim {seq} and batch_dim {batch} must be two different dimensions of "
                             f"a rank-{len(shape)} input")
        if lengths != (shape[batch],):
            raise ModelError(f"{node}: sequence lengths of shape {list(lengths)} for a batch of {shape[batch]}")
        return seq, batch

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape, lengths = known(node, shapes)
        ReverseSequence._dims(node, shape, lengths)
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, lengths_value = arrays(node, inputs)
        seq, batch = ReverseSequence._dims(node, x.shape, lengths_value.shape)
        lengths = int_list(node, lengths_value, "the sequence lengths")
        if any(not 0 <= n <= x.shape[seq] for n in lengths):
            raise ModelError(f"{node}: sequence lengths {lengths} must lie in [0, {x.shape[seq]}]")
        # the source position along seq_dim for every (batch entry, position)
        pos = np.arange(x.shape[seq])
        n = np.array(lengths)[:, None]
        source = np.where(pos[None, :] < n, n - 1 - pos[None, :], pos[None, :])
        moved = np.moveaxis(x, (batch, seq), (0, 1))
        out = np.take_along_axis(moved, source.reshape(source.shape + (1,) * (x.ndim - 2)), axis=1)
        return [np.array(np.moveaxis(out, (0, 1), (batch, seq)), copy=True)]


# -- MATRIX_DIAG / MATRIX_SET_DIAG ---------------------------------------------------------------------------

@register
class MatrixDiag(Op):
    """[..., N] -> [..., N, N] with the input on the diagonal and zeros (zero codes) elsewhere."""

    name, max_version = "MATRIX_DIAG", 1
    types = type_names(_DIAG_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        _check_copy(node, graph, _DIAG_TYPES)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape = known(node, shapes)[0]
        if not shape:
            raise ModelError(f"{node}: the input must have rank >= 1")
        return [(*shape, shape[-1])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, = arrays(node, inputs)
        n = MatrixDiag.infer(node, graph, [x.shape])[0][-1]
        out = np.zeros((*x.shape, n), x.dtype)
        idx = np.arange(n)
        out[..., idx, idx] = x
        return [out]


@register
class MatrixSetDiag(Op):
    """[..., M, N] with its main diagonal replaced by the [..., min(M, N)] second input."""

    name, max_version = "MATRIX_SET_DIAG", 1
    types = type_names(_DIAG_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _check_copy(node, graph, _DIAG_TYPES)
        same_type(node, tensor_in(node, graph, 0), tensor_in(node, graph, 1))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape, diag = known(node, shapes)
        if len(shape) < 2 or diag != (*shape[:-2], min(shape[-2:])):
            raise ModelError(f"{node}: a diagonal of shape {list(diag)} does not fit matrices of shape "
                             f"{list(shape)}")
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, diag = arrays(node, inputs)
        MatrixSetDiag.infer(node, graph, [x.shape, diag.shape])
        out = np.array(x, copy=True)
        idx = np.arange(diag.shape[-1])
        out[..., idx, idx] = diag
        return [out]


# -- DILATE ------------------------------------------------------------------------------------------------------

def _dilations(node: Node, value: np.ndarray, rank: int) -> list[int]:
    if value.shape != (rank,):
        raise ModelError(f"{node}: dilations of shape {list(value.shape)} for an input of rank {rank}")
    factors = int_list(node, value, "the dilations")
    if any(f < 1 for f in factors):
        raise ModelError(f"{node}: dilations {factors} must be >= 1")
    return factors


@register
class Dilate(Op):
    """Each dimension spread out by its dilation factor, the gaps filled with the padding value (input 2):
    size s becomes (s - 1) * d + 1."""

    name, max_version = "DILATE", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        _check_copy(node, graph)
        same_type(node, tensor_in(node, graph, 0), tensor_in(node, graph, 2))
        require_type(node, tensor_in(node, graph, 1), (np.int32,), "the dilations")

    @staticmethod
    def _shape(shape: Shape, factors: list[int]) -> Shape:
        return tuple((s - 1) * f + 1 if s else 0 for s, f in zip(shape, factors))

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        shape = known(node, shapes)[0]
        if not shape:
            raise ModelError(f"{node}: the input must have rank >= 1")
        value = operand(node, graph, None, 1)
        if value is None:
            data_dependent(node)
        return [Dilate._shape(shape, _dilations(node, value, len(shape)))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, dilations, padding = arrays(node, inputs)
        if x.ndim == 0:
            raise ModelError(f"{node}: the input must have rank >= 1")
        factors = _dilations(node, dilations, x.ndim)
        out = np.full(bounded(node, Dilate._shape(x.shape, factors), x.dtype),
                      scalar_of(node, padding, "the padding value"), x.dtype)
        out[tuple(slice(None, None, f) for f in factors)] = x
        return [out]
