"""AVERAGE_POOL_2D and MAX_POOL_2D: float32, int8 and uint8 (input and output on one quantization grid);
L2_POOL_2D: float32 only, as in TFLite."""

from __future__ import annotations

import numpy as np

from ..cpu import conv as K
from ..cpu import pool as P
from ..cpu.quant import activation_range
from ..errors import ModelError
from ..graph import ACT_NONE, Graph, Node
from ..lowering.context import LowerContext
from .base import Defines, Op, as_f32, register
from .checks import F32, I8, U8, input_count, need_rank, output_of, quant_of, required, same_grid, scalar_quant
from .window import act_defines, activation, gpu_check, need_window, window_attrs


def _window(node: Node, xs: tuple[int, ...]) -> K.Window:
    padding, sh, sw, _, _ = window_attrs(node)
    kh, kw = int(node.attrs.get("filter_height", 0)), int(node.attrs.get("filter_width", 0))
    if kh < 1 or kw < 1:
        raise ModelError(f"{node}: filter size must be >= 1, got {kh}x{kw}")
    return need_window(node, K.Window.make(padding, xs[1], xs[2], kh, kw, sh, sw))


class _Pool2D(Op):
    is_max = False

    @classmethod
    def gpu_support(cls, node: Node, graph: Graph) -> bool | str:
        return gpu_check(cls, node, graph, {})

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        lower_pool(node, ctx)

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool:
        # the maximum of values on the grid, or kernels/dialect/pool.dialect's integer average (QUANT); a fused
        # activation's bounds may lie off the grid
        return activation(node) == ACT_NONE and same_grid(graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]])

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        input_count(node, 1)
        x, y = graph.tensors[node.inputs[0]] if node.inputs[0] >= 0 else None, output_of(node, graph)
        if x is None:
            raise ModelError(f"{node}: the input is required")
        need_rank(node, x, 4, "input")
        activation(node)
        _window(node, x.shape)
        if x.dtype != y.dtype or x.dtype not in (F32, I8, U8):
            raise ModelError(f"{node}: input {x.type_name or x.dtype} / output {y.type_name or y.dtype} is "
                             "not supported (float32, int8 or uint8, the same for both)")
        if x.dtype != F32:
            (xs, xz), (ys, yz) = scalar_quant(node, x, "input"), scalar_quant(node, y, "output")
            if abs(xs - ys) > 1e-6 or xz != yz:
                raise ModelError(f"{node}: input and output quantization must match (scale {xs} vs {ys}, "
                                 f"zero point {xz} vs {yz})")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        xs = required(node, shapes, 0)
        win = _window(node, xs)
        return [(xs[0], win.oh, win.ow, xs[3])]

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        win = _window(node, x.shape)
        code = activation(node)
        if x.dtype == F32:
            return [P.pool_float(as_f32(x), win, P.MAX if cls.is_max else P.AVERAGE, *K.float_range(code))]
        scale, zp = quant_of(node, graph.tensors[node.outputs[0]]).scalar()
        qmin, qmax = activation_range(code, scale, zp, x.dtype)
        return [P.pool_int(x, win, cls.is_max, qmin, qmax)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return output_of(node, graph).size * int(node.attrs.get("filter_height", 1)) * \
            int(node.attrs.get("filter_width", 1))


@register
class AveragePool2D(_Pool2D):
    name = "AVERAGE_POOL_2D"


@register
class MaxPool2D(_Pool2D):
    name = "MAX_POOL_2D"
    is_max = True


@register
class L2Pool2D(Op):
    """sqrt(mean of the squares of the window's pixels inside the input), then the fused clamp."""

    name = "L2_POOL_2D"
    types = "float32"
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        x, y = graph.tensors[node.inputs[0]] if node.inputs[0] >= 0 else None, output_of(node, graph)
        if x is None:
            raise ModelError(f"{node}: the input is required")
        need_rank(node, x, 4, "input")
        activation(node)
        _window(node, x.shape)
        if x.dtype != F32 or y.dtype != F32:
            raise ModelError(f"{node}: input {x.type_name or x.dtype} / output {y.type_name or y.dtype}: TFLite's "
                             "L2 pool takes float32 only")

    infer = staticmethod(_Pool2D.infer)
    macs = staticmethod(_Pool2D.macs)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list) -> list[np.ndarray]:
        x = as_f32(inputs[0])
        win = _window(node, x.shape)
        mean_square = P.pool_float(np.square(x), win, P.AVERAGE, np.float32(-np.inf), np.float32(np.inf))
        return [np.clip(np.sqrt(mean_square), *K.float_range(activation(node)))]


def lower_pool(node: Node, ctx: LowerContext) -> None:
    """kernels/dialect/pool.dialect, one output vec4 per work item (a CPU's OpenCL: opencl/pool.cl, 4 pixels); an
    average over 8-bit values in TFLite's integer arithmetic (the GPU holds them as floats on their quantization
    grid)."""
    src, dst = ctx.input(node, 0), ctx.output(node)
    _, h, w, _ = ctx.bhwc(src)
    ob, oh, ow, oc = ctx.bhwc(dst)
    _, sh, sw, _, _ = window_attrs(node)
    kh, kw = int(node.attrs["filter_height"]), int(node.attrs["filter_width"])
    pt, pl = ctx.padding(node, (h, w), (kh, kw), (sh, sw))
    is_max = node.op == "MAX_POOL_2D"
    defines: Defines = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PT": pt, "PL": pl, "IS_MAX": int(is_max), "QUANT": 0,
                        **act_defines(activation(node))}
    x = ctx.graph.tensors[node.inputs[0]]
    if not is_max and x.quant is not None and x.dtype.kind in "iu":
        scale, zp = x.quant.scalar()
        defines.update({"QUANT": 1, "IN_SCALE": scale, "IN_INV": float(np.float32(1) / np.float32(scale)),
                        "IN_ZP": float(zp)})
    grid, variants = ctx.quads_layout(dst, "pool")  # a CPU's OpenCL: kernels/opencl/pool.cl, 4 pixels a work item
    ctx.kernel("pool", {"src": src}, {"dst": dst}, defines=defines, grid=grid, variants=variants,
               constants=("IN_SCALE", "IN_INV", "IN_ZP") if defines["QUANT"] else ())
