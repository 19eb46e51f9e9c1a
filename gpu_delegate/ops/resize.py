"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: NHWC input, the new [height, width] in input 1.

Quantized tensors are resized on their integers: TFLite requires input and output to share one
quantization, so no rescaling is involved. On the GPU (kernels/dialect/resize.dialect) they run in float with TFLite's
float index math, so a quantized bilinear resize may land one step away from TFLite's fixed-point one.
"""

from __future__ import annotations

import numpy as np

from ..cpu import resize as k
from ..errors import ModelError
from ..graph import Graph, Node
from ..lowering.context import LowerContext
from .base import Defines, Op, register
from .checks import check_run_shapes, data_dependent, input_count, moves_grid_values, required, type_names

_TYPES = (np.float32, np.int8, np.uint8, np.int16)


def _const_size(node: Node, graph: Graph) -> tuple[int, int] | None:
    """The output size when the size input is a constant, else None."""
    v = graph.tensors[node.inputs[1]].data
    return None if v is None else _size(node, v)


def _size(node: Node, v: np.ndarray) -> tuple[int, int]:
    if v.dtype.kind not in "iu" or v.size != 2:
        raise ModelError(f"{node}: size must be an int32 tensor holding [new_height, new_width], got "
                         f"{v.dtype} of shape {list(v.shape)}")
    h, w = (int(d) for d in v.reshape(-1))
    if h < 1 or w < 1:
        raise ModelError(f"{node}: output size {[h, w]} must be positive")
    return h, w


def _check(node: Node, graph: Graph) -> None:
    input_count(node, 2)
    if len(node.outputs) != 1:
        raise ModelError(f"{node}: expects 1 output, has {len(node.outputs)}")
    if node.inputs[1] < 0:
        raise ModelError(f"{node}: the size input is omitted")
    x = graph.tensors[node.inputs[0]]
    if x.dtype not in _TYPES:
        raise ModelError(f"{node}: input type {x.type_name or x.dtype} is not supported "
                         "(float32, int8, uint8, int16)")


def _infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
    x = required(node, shapes, 0)
    if len(x) != 4:
        raise ModelError(f"{node}: input must be 4-D NHWC, got shape {list(x)}")
    size = _const_size(node, graph)
    if size is None:
        data_dependent(node)
    return [(x[0], *size, x[3])]


def _flags(node: Node) -> tuple[bool, bool]:
    return bool(node.attrs.get("align_corners", False)), bool(node.attrs.get("half_pixel_centers", False))


# -- GPU side: kernels/dialect/resize.dialect, one work item per output vec4 (a CPU's OpenCL: opencl/resize.cl) --

def _gpu_support(node: Node, graph: Graph) -> bool | str:
    x = graph.tensors[node.inputs[0]]
    if x.data is not None:
        return "the input is a constant"
    if graph.tensors[node.inputs[1]].data is None:
        return "the size is not a constant"
    if len(x.shape) != 4 or x.size == 0:
        return f"input shape {list(x.shape)} is not a non-empty NHWC shape"
    return True


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """TFLite's float32 scale: (in - 1) / (out - 1) with align_corners, else in / out."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _lower(node: Node, ctx: LowerContext, bilinear: bool) -> None:
    src, dst = ctx.input(node, 0), ctx.output(node, 0)
    b, in_h, in_w, _ = ctx.bhwc(src)
    _, out_h, out_w, c = ctx.bhwc(dst)
    align, half = _flags(node)
    defines: Defines = {"BILINEAR": bilinear, "ALIGN_CORNERS": align, "HALF_PIXEL": half,
                        "SCALE_Y": float(_scale(in_h, out_h, align)), "SCALE_X": float(_scale(in_w, out_w, align))}
    grid, variants = ctx.quads_layout(dst, "resize")
    ctx.kernel("resize", {"src": src}, {"dst": dst}, defines=defines, grid=grid, variants=variants)


@register
class ResizeBilinear(Op):
    name = "RESIZE_BILINEAR"
    types = type_names(_TYPES)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        _check(node, graph)
        if all(_flags(node)):  # TFLite's kernel refuses this combination too
            raise ModelError(f"{node}: align_corners and half_pixel_centers cannot both be true")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return _infer(node, graph, shapes)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        check_run_shapes(_infer, node, graph, [x.shape])
        return [k.resize_bilinear(x, *_size(node, required(node, inputs, 1)), *_flags(node))]

    gpu_support = staticmethod(_gpu_support)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        _lower(node, ctx, bilinear=True)


@register
class ResizeNearestNeighbor(Op):
    name = "RESIZE_NEAREST_NEIGHBOR"
    types = type_names(_TYPES)
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        _check(node, graph)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return _infer(node, graph, shapes)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        check_run_shapes(_infer, node, graph, [x.shape])
        return [k.resize_nearest(x, *_size(node, required(node, inputs, 1)), *_flags(node))]

    gpu_support = staticmethod(_gpu_support)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        _lower(node, ctx, bilinear=False)
