"""The convolution family: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, MediaPipe's Convolution2DTransposeBias,
FULLY_CONNECTED and BATCH_MATMUL.

Three kinds of arithmetic, chosen from the tensor types:
- float: float32 activations and weights (the weights may be the output of a DEQUANTIZE node).
- hybrid (dynamic range): float32 activations, int8 weights; the weights are dequantized once and the op
  runs in float. LiteRT instead quantizes the activations on the fly, so the two differ by that rounding.
- quant: int8 or uint8 activations and weights, int32 bias: TFLite's integer arithmetic (cpu/conv.py).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..cpu import conv as K
from ..cpu.quant import activation_range, dequantize, quantize_multipliers
from ..errors import DelegateError, ModelError
from ..graph import ACT_SIGN_BIT, ACT_TANH, Graph, Node, Tensor
from ..lowering.context import LowerContext
from ..lowering.plan import KernelCall
from ..lowering.postops import grid_defines, lookup_grid, table_rows
from ..phwc4 import bhwc, slices, to_rows
from .base import CpuStep, Defines, Op, as_f32, register, with_const
from .checks import (
    F32,
    I8,
    I32,
    U8,
    data_dependent,
    input_count,
    need_rank,
    output_of,
    quant_of,
    required,
    required_tensor,
    scalar_quant,
    tensor_of,
)
from .window import act_defines, activation, gpu_check, need_window, window_attrs

if TYPE_CHECKING:
    from ..loop_program import LoopAssembler

FLOAT, HYBRID, QUANT = "float", "hybrid", "quant"
# a transposed convolution's (output height, width), (pad top, left), (stride h, w)
Geometry = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


# -- helpers shared by the ops of this family (pool.py uses some) --------------------------------------------


def float_bias(node: Node, graph: Graph, inputs: list[np.ndarray | None], i: int) -> np.ndarray | None:
    if i >= len(inputs) or inputs[i] is None:
        return None
    return with_const(node, graph, i, "bias_f32", lambda: np.array(inputs[i], np.float32).reshape(-1))


def int_bias(inputs: list[np.ndarray | None], i: int, n: int) -> np.ndarray:
    bias = inputs[i] if i < len(inputs) else None
    if bias is None:
        return np.zeros(n, np.int64)
    return bias.reshape(-1).astype(np.int64)


def kind_of(node: Node, x: Tensor, w: Tensor, b: Tensor | None, y: Tensor, out_axis: int,
            symmetric_int8: bool = True) -> str:
    """Which arithmetic the node needs; a ModelError for a type combination TFLite has no kernel for.
    ``symmetric_int8``: the int8 kernel ignores the filter's zero point, so it must be 0."""
    if w.sparsity is not None:
        raise ModelError(f"{node}: sparse weights {w.name!r} must go through DENSIFY first")
    if x.dtype == F32:
        if y.dtype != F32:
            raise ModelError(f"{node}: float32 input needs a float32 output, not {y.dtype}")
        if b is not None and b.dtype != F32:
            raise ModelError(f"{node}: float32 input needs a float32 bias, not {b.dtype}")
        if w.dtype == F32:
            return FLOAT
        if w.dtype in (I8, U8) and w.quant is not None:
            return HYBRID
        raise ModelError(f"{node}: float32 input with {w.type_name or w.dtype} weights is not supported")
    if x.dtype in (I8, U8):
        if w.dtype != x.dtype or y.dtype != x.dtype:
            raise ModelError(f"{node}: {x.dtype} input needs {x.dtype} weights and output, got "
                             f"{w.dtype} weights and {y.dtype} output")
        scalar_quant(node, x, "input")
        scalar_quant(node, y, "output")
        if w.quant is None:
            raise ModelError(f"{node}: quantized weights {w.name!r} have no quantization parameters")
        if w.quant.per_channel:
            if x.dtype == U8:
                raise ModelError(f"{node}: per-channel weights need int8; TFLite has no uint8 kernel "
                                 "for them")
            if w.quant.axis != out_axis:
                raise ModelError(f"{node}: per-channel weights must be quantized along dimension {out_axis}, "
                                 f"not {w.quant.axis}")
        if x.dtype == I8 and symmetric_int8 and np.any(w.quant.zero_point != 0):
            raise ModelError(f"{node}: int8 weights must be symmetric (zero point 0)")
        if b is not None and b.dtype != I32:
            raise ModelError(f"{node}: quantized {x.dtype} op needs an int32 bias, not {b.dtype}")
        return QUANT
    raise ModelError(f"{node}: {x.type_name or x.dtype} input is not supported")


def dequantized(node: Node, graph: Graph, inputs: list[np.ndarray | None], i: int) -> np.ndarray:
    """Hybrid weights as float32, dequantized once per model."""
    q = quant_of(node, required_tensor(node, graph, i))
    return with_const(node, graph, i, "dequantized", lambda: dequantize(
        required(node, inputs, i), q.scale, q.zero_point, q.axis if q.per_channel else None))


def requant_params(node: Node, x: Tensor, w: Tensor, y: Tensor, channels: int,
                   per_channel_math: bool, single_rounding: bool = False) -> K.Requant:
    """TFLite's output multipliers. The per-channel kernels (int8 conv) compute input_scale * filter_scale /
    output_scale in double; the per-tensor ones (uint8, per-tensor FC) take the product in float32 first
    (GetQuantizedConvolutionMultipler). The two differ at rounding ties. ``single_rounding``: the kernel rounds
    acc * multiplier once (LiteRT's reference int8 FULLY_CONNECTED), not twice (its convolutions)."""
    in_s, _ = quant_of(node, x).scalar()
    out_s, out_zp = quant_of(node, y).scalar()
    ws = quant_of(node, w).scale
    if per_channel_math:
        reals = [float(np.float64(in_s) * np.float64(s) / np.float64(out_s)) for s in ws]
    else:
        reals = [float(np.float64(np.float32(in_s) * np.float32(ws[0])) / np.float64(out_s))]
    mult, shift = quantize_multipliers(np.array(reals))
    if mult.size == 1:
        mult, shift = np.repeat(mult, channels), np.repeat(shift, channels)
    qmin, qmax = activation_range(activation(node), out_s, out_zp, y.dtype)
    return K.Requant(mult, shift, out_zp, qmin, qmax, y.dtype, single_rounding)


def filter_zp(node: Node, w: Tensor, channels: int) -> np.ndarray:
    """The weights' zero point per output channel, int64."""
    zp = quant_of(node, w).zero_point.astype(np.int64)
    return zp if zp.size == channels else np.repeat(zp[:1], channels)


# -- CONV_2D -------------------------------------------------------------------------------------------------

def _window(node: Node, xs: tuple[int, ...], ws: tuple[int, ...]) -> K.Window:
    """Window of a conv or depthwise conv: input NHWC, filter [*, KH, KW, *]."""
    padding, sh, sw, dh, dw = window_attrs(node)
    return need_window(node, K.Window.make(padding, xs[1], xs[2], ws[1], ws[2], sh, sw, dh, dw))


def _conv_shapes(node: Node, xs: tuple[int, ...], ws: tuple[int, ...]) -> K.Window:
    """Validate CONV_2D input [N, H, W, C] against filter [O, KH, KW, C / groups]; the window."""
    if len(xs) != 4 or len(ws) != 4:
        raise ModelError(f"{node}: input and filter must have rank 4, have {list(xs)} and {list(ws)}")
    o, cg = ws[0], ws[3]
    if cg < 1 or xs[3] % cg:
        raise ModelError(f"{node}: input channels {xs[3]} are not a multiple of the filter's {cg}")
    if o % (xs[3] // cg):
        raise ModelError(f"{node}: {o} output channels do not split into {xs[3] // cg} groups")
    return _window(node, xs, ws)


@register
class Conv2D(Op):
    name = "CONV_2D"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return conv2d_gpu_support(node, graph)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        lower_conv2d(node, ctx)

    @staticmethod
    def lower_joined(nodes: list[Node], ctx: LowerContext, joined: int) -> None:
        lower_joined_1x1(nodes, ctx, joined)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2, 3)
        x, w, b = (tensor_of(node, graph, i) for i in range(3))
        y = output_of(node, graph)
        if x is None or w is None:
            raise ModelError(f"{node}: input and filter are required")
        _conv_shapes(node, x.shape, w.shape)
        if b is not None and b.size != w.shape[0]:
            raise ModelError(f"{node}: bias has {b.size} values for {w.shape[0]} output channels")
        activation(node)
        kind_of(node, x, w, b, y, out_axis=0)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        xs, ws = required(node, shapes, 0), required(node, shapes, 1)
        win = _conv_shapes(node, xs, ws)
        return [(xs[0], win.oh, win.ow, ws[0])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, w = required(node, inputs, 0), required(node, inputs, 1)
        xt, wt, bt = required_tensor(node, graph, 0), required_tensor(node, graph, 1), tensor_of(node, graph, 2)
        yt = graph.tensors[node.outputs[0]]
        win = _window(node, x.shape, w.shape)
        o, _, _, cg = w.shape
        groups = x.shape[3] // cg
        kind = kind_of(node, xt, wt, bt, yt, out_axis=0)
        if kind != QUANT:
            if kind == HYBRID:
                w = dequantized(node, graph, inputs, 1)
            mats = with_const(node, graph, 1, "conv_f32",
                              lambda: K.weight_matrices(np.asarray(w, np.float32), groups))
            lo, hi = K.float_range(activation(node))
            return [K.conv2d_float(as_f32(x), mats, float_bias(node, graph, inputs, 2), win, lo, hi)]
        og = o // groups

        def quant_mats() -> list[K.QuantMatrix]:
            zp = filter_zp(node, wt, o)
            return [K.quant_matrix(w[g * og:(g + 1) * og].reshape(og, -1).T, zp[g * og:(g + 1) * og])
                    for g in range(groups)]

        ms = with_const(node, graph, 1, "quant_matrix", quant_mats)
        rq = graph.prepared(("requant", node.index),
                      lambda: requant_params(node, xt, wt, yt, o, per_channel_math=xt.dtype == I8))
        return [K.conv2d_quant(x, quant_of(node, xt).scalar()[1], ms, win, int_bias(inputs, 2, o), rq)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        w, y = required_tensor(node, graph, 1), output_of(node, graph)
        return y.size * math.prod(w.shape[1:])


# -- DEPTHWISE_CONV_2D ---------------------------------------------------------------------------------------

def _dw_shapes(node: Node, xs: tuple[int, ...], ws: tuple[int, ...]) -> K.Window:
    """Validate DEPTHWISE_CONV_2D input [N, H, W, C] against filter [1, KH, KW, C * multiplier]. The
    depth_multiplier option is not checked: TFLite's kernels derive the multiplier from the shapes too."""
    if len(xs) != 4 or len(ws) != 4:
        raise ModelError(f"{node}: input and filter must have rank 4, have {list(xs)} and {list(ws)}")
    c, oc = xs[3], ws[3]
    if ws[0] != 1:
        raise ModelError(f"{node}: a depthwise filter has shape [1, H, W, C], not {list(ws)}")
    if c < 1 or oc % c:
        raise ModelError(f"{node}: filter channels {oc} are not a multiple of input channels {c}")
    return _window(node, xs, ws)


def _repeat_channels(x: np.ndarray, multiplier: int) -> np.ndarray:
    """Output channel c reads input channel c // multiplier: repeat the input channels to match."""
    return x if multiplier == 1 else np.repeat(x, multiplier, axis=3)


@register
class DepthwiseConv2D(Op):
    name = "DEPTHWISE_CONV_2D"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return gpu_check(DepthwiseConv2D, node, graph, {1: "filter", 2: "bias"})

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        lower_depthwise(node, ctx)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2, 3)
        x, w, b = (tensor_of(node, graph, i) for i in range(3))
        y = output_of(node, graph)
        if x is None or w is None:
            raise ModelError(f"{node}: input and filter are required")
        _dw_shapes(node, x.shape, w.shape)
        if b is not None and b.size != w.shape[3]:
            raise ModelError(f"{node}: bias has {b.size} values for {w.shape[3]} output channels")
        activation(node)
        kind_of(node, x, w, b, y, out_axis=3)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        xs, ws = required(node, shapes, 0), required(node, shapes, 1)
        win = _dw_shapes(node, xs, ws)
        return [(xs[0], win.oh, win.ow, ws[3])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, w = required(node, inputs, 0), required(node, inputs, 1)
        xt, wt, bt = required_tensor(node, graph, 0), required_tensor(node, graph, 1), tensor_of(node, graph, 2)
        yt = graph.tensors[node.outputs[0]]
        win = _window(node, x.shape, w.shape)
        oc = w.shape[3]
        mult = oc // x.shape[3]
        kind = kind_of(node, xt, wt, bt, yt, out_axis=3)
        if kind != QUANT:
            if kind == HYBRID:
                w = dequantized(node, graph, inputs, 1)
            wk = with_const(node, graph, 1, "dw_f32", lambda: as_f32(np.array(w[0], np.float32)))
            bias = float_bias(node, graph, inputs, 2)
            lo, hi = K.float_range(activation(node))
            return [K.depthwise_float(_repeat_channels(as_f32(x), mult), wk,
                                      bias if bias is not None else np.zeros(oc, np.float32), win, lo, hi)]
        wk = with_const(node, graph, 1, "dw_quant",
                        lambda: as_f32(w[0].astype(np.int64) - filter_zp(node, wt, oc).reshape(1, 1, -1)))
        rq = graph.prepared(("requant", node.index),
                      lambda: requant_params(node, xt, wt, yt, oc, per_channel_math=xt.dtype == I8))
        xs = K.shifted_f32(x, quant_of(node, xt).scalar()[1])
        return [K.depthwise_quant(_repeat_channels(xs, mult), wk, win, int_bias(inputs, 2, oc), rq)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        w, y = required_tensor(node, graph, 1), output_of(node, graph)
        return y.size * w.shape[1] * w.shape[2]


# -- TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias -----------------------------------------------

def check_transpose_conv(node: Node, graph: Graph, xi: int, wi: int, bi: int) -> None:
    x, w, b = tensor_of(node, graph, xi), tensor_of(node, graph, wi), tensor_of(node, graph, bi)
    if x is None or w is None:
        raise ModelError(f"{node}: input and weights are required")
    need_rank(node, x, 4, "input")
    need_rank(node, w, 4, "weights")
    if x.shape[3] != w.shape[3]:
        raise ModelError(f"{node}: input has {x.shape[3]} channels, weights [O, H, W, I] expect {w.shape[3]}")
    if b is not None and b.size != w.shape[0]:
        raise ModelError(f"{node}: bias has {b.size} values for {w.shape[0]} output channels")
    kind_of(node, x, w, b, output_of(node, graph), out_axis=0)


def transpose_conv(node: Node, graph: Graph, inputs: list[np.ndarray | None], xi: int, wi: int, bi: int,
                   out_hw: tuple[int, int], pads: tuple[int, int], strides: tuple[int, int], act: int) -> np.ndarray:
    """TFLite's TransposeConv: input pixel (iy, ix) adds x[iy, ix, :] . w[o, ky, kx, :] to output pixel
    (iy*sh - pt + ky, ix*sw - pl + kx) of channel o; weights [O, KH, KW, I]. A matmul gives every
    (pixel, ky, kx, o) product sum at once, and a scatter adds them into place."""
    x, w = required(node, inputs, xi), required(node, inputs, wi)
    xt, wt, bt = required_tensor(node, graph, xi), required_tensor(node, graph, wi), tensor_of(node, graph, bi)
    yt = graph.tensors[node.outputs[0]]
    n, h, wd, ci = x.shape
    o, kh, kw, _ = w.shape
    (oh, ow), (pt, pl), (sh, sw) = out_hw, pads, strides
    kind = kind_of(node, xt, wt, bt, yt, out_axis=0)
    if kind != QUANT:
        if kind == HYBRID:
            w = dequantized(node, graph, inputs, wi)
        wm = with_const(node, graph, wi, "tconv_f32", lambda: np.ascontiguousarray(
            np.asarray(w, np.float32).transpose(3, 1, 2, 0).reshape(ci, -1)))
        with K.serial_blas():
            cols = as_f32(x).reshape(-1, ci) @ wm
        y = np.ascontiguousarray(K.col2im_add(cols, n, h, wd, kh, kw, sh, sw, pt, pl, oh, ow)).reshape(-1, o)
        K.bias_act(y, float_bias(node, graph, inputs, bi), *K.float_range(act))
        return y.reshape(n, oh, ow, o)
    qm = with_const(node, graph, wi, "tconv_quant", lambda: K.quant_matrix(
        w.transpose(3, 1, 2, 0).reshape(ci, -1), np.tile(filter_zp(node, wt, o), kh * kw)))
    rq = graph.prepared(("requant", node.index),
                  lambda: requant_params(node, xt, wt, yt, o, per_channel_math=xt.dtype == I8))
    xs, shift = K.int8_range(x.reshape(-1, ci))
    x_zp = quant_of(node, xt).scalar()[1] - shift
    with K.serial_blas():
        sums = K.qmatmul(xs, qm).astype(np.float64) - x_zp * qm.colsum.astype(np.float64)
    acc = np.ascontiguousarray(K.col2im_add(sums, n, h, wd, kh, kw, sh, sw, pt, pl, oh, ow)).reshape(-1, o)
    return K.requantize(acc, int_bias(inputs, bi, o), rq).reshape(n, oh, ow, o)


def _tconv_geometry(node: Node, shape: tuple[int, ...], ws: tuple[int, ...]) -> Geometry:
    """TRANSPOSE_CONV: the output size is given; the padding is that of the forward conv from output to
    input."""
    padding, sh, sw, _, _ = window_attrs(node)
    oh, ow = shape[1], shape[2]
    pt = K.pad_before(oh, ws[1], sh, 1, K.out_size(padding, oh, ws[1], sh))
    pl = K.pad_before(ow, ws[2], sw, 1, K.out_size(padding, ow, ws[2], sw))
    return (oh, ow), (pt, pl), (sh, sw)


def _output_shape(node: Node, graph: Graph) -> tuple[int, ...] | None:
    """The output_shape input's constant value; None when it is computed at run time."""
    t = required_tensor(node, graph, 0)
    if t.dtype != I32 or t.shape != (4,):
        raise ModelError(f"{node}: output_shape must be an int32 tensor of 4 values, is {t.dtype} {list(t.shape)}")
    return None if t.data is None else _output_shape_value(node, t.data)


def _output_shape_value(node: Node, value: np.ndarray) -> tuple[int, ...]:
    shape = tuple(int(d) for d in value.reshape(-1))
    if min(shape) < 1:
        raise ModelError(f"{node}: output_shape {list(shape)} has a dimension < 1")
    return shape


@register
class TransposeConv(Op):
    """Inputs: output_shape (int32 [4]; computed at run time makes the output dynamic), weights [O, KH, KW, I],
    input, optional bias."""

    name = "TRANSPOSE_CONV"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return gpu_check(TransposeConv, node, graph, {1: "weights", 3: "bias"})

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        _, pads, strides = _tconv_geometry(node, ctx.shape(node.outputs[0]), ctx.shape(ctx.input(node, 1)))
        lower_transpose_conv(node, ctx, 2, 1, 3, pads, strides, activation(node))

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 3, 4)
        check_transpose_conv(node, graph, 2, 1, 3)
        x, w = required_tensor(node, graph, 2), required_tensor(node, graph, 1)
        shape = _output_shape(node, graph)
        if shape is not None and (shape[0] != x.shape[0] or shape[3] != w.shape[0]):
            raise ModelError(f"{node}: output_shape {list(shape)} does not match batch {x.shape[0]} and "
                             f"{w.shape[0]} output channels")
        activation(node)
        window_attrs(node)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        shape = _output_shape(node, graph)
        if shape is None:
            data_dependent(node)
        return [shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        shape = _output_shape_value(node, required(node, inputs, 0))
        x, w = required(node, inputs, 2), required(node, inputs, 1)
        if shape[0] != x.shape[0] or shape[3] != w.shape[0]:
            raise ModelError(f"{node}: output_shape {list(shape)} does not match batch {x.shape[0]} and "
                             f"{w.shape[0]} output channels")
        hw, pads, strides = _tconv_geometry(node, shape, w.shape)
        return [transpose_conv(node, graph, inputs, 2, 1, 3, hw, pads, strides, activation(node))]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return required_tensor(node, graph, 2).size * math.prod(required_tensor(node, graph, 1).shape[:3])


TFLITE_PADDING_SAME, TFLITE_PADDING_VALID = 1, 2  # TfLitePadding (C API), not the schema's numbering


def _mediapipe_params(node: Node) -> tuple[int, int, int]:
    """custom_options is the raw C struct TfLiteTransposeConvParams {padding, stride_width, stride_height}."""
    if len(node.custom_options) < 12:
        raise ModelError(f"{node}: custom options hold {len(node.custom_options)} bytes, expected the "
                         "12-byte TfLiteTransposeConvParams")
    padding, sw, sh = struct.unpack_from("<iii", node.custom_options)
    if padding not in (TFLITE_PADDING_SAME, TFLITE_PADDING_VALID):
        raise ModelError(f"{node}: unknown padding {padding} (1 = SAME, 2 = VALID)")
    if sw < 1 or sh < 1:
        raise ModelError(f"{node}: strides must be >= 1, got {sw}, {sh}")
    return padding, sh, sw


def _mediapipe_geometry(node: Node, xs: tuple[int, ...], ws: tuple[int, ...]) -> Geometry:
    """MediaPipe's Prepare: SAME trims max(0, k - (in - 1) % s - 1) from the full size (in - 1) * s + k."""
    padding, sh, sw = _mediapipe_params(node)
    hw, pads = [], []
    for size, k, s in ((xs[1], ws[1], sh), (xs[2], ws[2], sw)):
        trim = max(0, k - (size - 1) % s - 1) if padding == TFLITE_PADDING_SAME else 0
        hw.append(s * (size - 1) + k - trim)
        pads.append(trim // 2)
    return (hw[0], hw[1]), (pads[0], pads[1]), (sh, sw)


@register
class Convolution2DTransposeBias(Op):
    """MediaPipe's custom op (float32 only, like its kernel). Inputs: input, weights [O, KH, KW, I], bias."""

    name = "Convolution2DTransposeBias"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return gpu_check(Convolution2DTransposeBias, node, graph, {1: "weights", 2: "bias"})

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        _, pads, strides = _mediapipe_geometry(node, ctx.shape(ctx.input(node, 0)),
                                           ctx.shape(ctx.input(node, 1)))
        lower_transpose_conv(node, ctx, 0, 1, 2, pads, strides, 0)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 3)
        check_transpose_conv(node, graph, 0, 1, 2)
        if required_tensor(node, graph, 0).dtype != F32 or required_tensor(node, graph, 1).dtype != F32:
            raise ModelError(f"{node}: MediaPipe's transposed convolution takes float32 input and weights "
                             "only")
        _mediapipe_params(node)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        xs, ws = required(node, shapes, 0), required(node, shapes, 1)
        (oh, ow), _, _ = _mediapipe_geometry(node, xs, ws)
        return [(xs[0], oh, ow, ws[0])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        hw, pads, strides = _mediapipe_geometry(node, required(node, inputs, 0).shape, required(node, inputs, 1).shape)
        return [transpose_conv(node, graph, inputs, 0, 1, 2, hw, pads, strides, 0)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return required_tensor(node, graph, 0).size * math.prod(required_tensor(node, graph, 1).shape[:3])


# -- FULLY_CONNECTED -----------------------------------------------------------------------------------------

# Input types whose FULLY_CONNECTED LiteRT's reference kernels requantize with one rounding (measured against
# LiteRT 2.3's BUILTIN_REF kernels: the 12k-value case of tests/test_ops_conv.py::test_fully_connected_quant)
FC_SINGLE_ROUNDING: dict[np.dtype, bool] = {np.dtype(np.int8): True, np.dtype(np.uint8): True}

def _fc_matrix(node: Node, graph: Graph, w: np.ndarray) -> np.ndarray:
    """The float weights [O, K] as linear_float's C-contiguous [K, O] matrix, once per graph where they are constant."""
    return with_const(node, graph, 1, "fc_f32", lambda: K.weight_matrices(np.asarray(w, np.float32), 1)[0])


def _fc_float(node: Node, graph: Graph, w: np.ndarray, b: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray | None, np.float32, np.float32]:
    """The float path's operands from float weights and bias: linear_float's matrix, the bias, the clamp's bounds
    (run_cpu, cpu_step and loop_code alike)."""
    lo, hi = K.float_range(activation(node))
    return _fc_matrix(node, graph, w), float_bias(node, graph, [None, w, b], 2), lo, hi


def _fc_shape(node: Node, xs: tuple[int, ...], ws: tuple[int, ...]) -> tuple[int, ...]:
    k = ws[1]
    size = math.prod(map(int, xs))
    if node.attrs.get("keep_num_dims", False):
        if not xs or xs[-1] != k:
            raise ModelError(f"{node}: keep_num_dims needs the input's last dimension ({list(xs)}) to be {k}")
        return (*xs[:-1], ws[0])
    if k < 1 or size % k:
        raise ModelError(f"{node}: input of {size} values does not split into rows of {k}")
    return (size // k, ws[0])


@register
class FullyConnected(Op):
    name = "FULLY_CONNECTED"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return gpu_check(FullyConnected, node, graph, {1: "weights", 2: "bias"})

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        lower_fully_connected(node, ctx)

    @staticmethod
    def lower_joined(nodes: list[Node], ctx: LowerContext, joined: int) -> None:
        lower_joined_1x1(nodes, ctx, joined)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2, 3)
        x, w, b = (tensor_of(node, graph, i) for i in range(3))
        if x is None or w is None:
            raise ModelError(f"{node}: input and weights are required")
        need_rank(node, w, 2, "weights")
        if int(node.attrs.get("weights_format", 0)) != 0:
            raise ModelError(f"{node}: shuffled weights format {node.attrs['weights_format']} is not "
                             "supported")
        if b is not None and b.size != w.shape[0]:
            raise ModelError(f"{node}: bias has {b.size} values for {w.shape[0]} outputs")
        if activation(node) in (ACT_TANH, ACT_SIGN_BIT):
            name = "TANH" if activation(node) == ACT_TANH else "SIGN_BIT"
            raise ModelError(f"{node}: fused activation {name} is not supported by FULLY_CONNECTED (TFLite "
                             "refuses it too)")
        _fc_shape(node, x.shape, w.shape)
        kind_of(node, x, w, b, output_of(node, graph), out_axis=0, symmetric_int8=False)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return [_fc_shape(node, required(node, shapes, 0), required(node, shapes, 1))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, w = required(node, inputs, 0), required(node, inputs, 1)
        xt, wt, bt = required_tensor(node, graph, 0), required_tensor(node, graph, 1), tensor_of(node, graph, 2)
        yt = graph.tensors[node.outputs[0]]
        shape = _fc_shape(node, x.shape, w.shape)
        o, k = w.shape
        x2 = x.reshape(-1, k)
        kind = kind_of(node, xt, wt, bt, yt, out_axis=0, symmetric_int8=False)
        if kind != QUANT:
            if kind == HYBRID:
                w = dequantized(node, graph, inputs, 1)
            y = K.linear_float(as_f32(x2), *_fc_float(node, graph, w, inputs[2] if len(inputs) > 2 else None))
            return [y.reshape(shape)]
        qm = with_const(node, graph, 1, "quant_matrix", lambda: K.quant_matrix(w.T, filter_zp(node, wt, o)))
        rq = graph.prepared(("requant", node.index),
                      lambda: requant_params(node, xt, wt, yt, o, per_channel_math=quant_of(node, wt).per_channel,
                                             single_rounding=FC_SINGLE_ROUNDING.get(np.dtype(xt.dtype), False)))
        xs, shift = K.int8_range(x2)
        out = K.linear_quant(xs, quant_of(node, xt).scalar()[1] - shift, qm, int_bias(inputs, 2, o), rq)
        return [out.reshape(shape)]

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # float, of constant weights and bias and a static input shape: run_cpu's float path, its matrices once
        xt, wt, bt = required_tensor(node, graph, 0), required_tensor(node, graph, 1), tensor_of(node, graph, 2)
        yt = graph.tensors[node.outputs[0]]
        if kind_of(node, xt, wt, bt, yt, out_axis=0, symmetric_int8=False) != FLOAT or wt.data is None or \
                (bt is not None and bt.data is None) or xt.dynamic or min(xt.shape, default=0) < 0:
            return None
        wm, bias, lo, hi = _fc_float(node, graph, wt.data, None if bt is None else bt.data)
        x, y, k, shape = node.inputs[0], node.outputs[0], wt.shape[1], _fc_shape(node, xt.shape, wt.shape)

        def step(values: list[np.ndarray | None]) -> None:
            rows = np.asarray(values[x], np.float32).reshape(-1, k)
            values[y] = K.linear_float(rows, wm, bias, lo, hi).reshape(shape)
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        # as run_cpu's float path: float activations, constant weights (float, float16 that a DEQUANTIZE in the
        # loop makes, or dynamic-range int8 dequantized once) and bias
        xt, wt, bt = required_tensor(node, graph, 0), required_tensor(node, graph, 1), tensor_of(node, graph, 2)
        yt = graph.tensors[node.outputs[0]]
        w, b = asm.value(node.inputs[1]), asm.value(node.inputs[2] if len(node.inputs) > 2 else -1)
        kind = kind_of(node, xt, wt, bt, yt, out_axis=0, symmetric_int8=False)
        if kind == QUANT or w is None or (bt is not None and b is None):
            raise asm.declined(f"{node}: not float activations with constant weights")
        if kind == HYBRID:
            w = dequantized(node, graph, [None, w, None], 1)
        matrix, bias, lo, hi = _fc_float(node, graph, w, b)
        asm.dense(node.inputs[0], matrix, bias, node.outputs[0], float(lo), float(hi))

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return output_of(node, graph).size * required_tensor(node, graph, 1).shape[1]


# -- BATCH_MATMUL --------------------------------------------------------------------------------------------

def _bmm_dims(node: Node, xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """(output shape, contraction length) with adj_x / adj_y and broadcast batch dimensions."""
    if not (2 <= len(xs) <= 5 and 2 <= len(ys) <= 5):
        raise ModelError(f"{node}: operands must have rank 2 to 5, have {list(xs)} and {list(ys)}")
    m, kx = (xs[-1], xs[-2]) if node.attrs.get("adj_x", False) else (xs[-2], xs[-1])
    ky, n = (ys[-1], ys[-2]) if node.attrs.get("adj_y", False) else (ys[-2], ys[-1])
    if kx != ky:
        raise ModelError(f"{node}: contraction sizes differ ({kx} vs {ky}) for shapes {list(xs)}, {list(ys)}")
    try:
        batch = np.broadcast_shapes(tuple(xs[:-2]), tuple(ys[:-2]))
    except ValueError:
        raise ModelError(f"{node}: batch dimensions of {list(xs)} and {list(ys)} do not broadcast") from None
    return (*batch, m, n), kx


@register
class BatchMatMul(Op):
    name = "BATCH_MATMUL"

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return batch_matmul_gpu_support(node, graph)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        lower_batch_matmul(node, ctx)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        x, w = tensor_of(node, graph, 0), tensor_of(node, graph, 1)
        y = output_of(node, graph)
        if x is None or w is None:
            raise ModelError(f"{node}: both operands are required")
        _bmm_dims(node, x.shape, w.shape)
        if x.dtype == U8:
            raise ModelError(f"{node}: uint8 operands are not supported (TFLite has no uint8 kernel)")
        if kind_of(node, x, w, None, y, out_axis=len(w.shape) - 1, symmetric_int8=False) == QUANT:
            scalar_quant(node, w, "second operand")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return [_bmm_dims(node, required(node, shapes, 0), required(node, shapes, 1))[0]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, w = required(node, inputs, 0), required(node, inputs, 1)
        xt, wt = required_tensor(node, graph, 0), required_tensor(node, graph, 1)
        yt = graph.tensors[node.outputs[0]]
        shape, _ = _bmm_dims(node, x.shape, w.shape)
        kind = kind_of(node, xt, wt, None, yt, out_axis=len(wt.shape) - 1, symmetric_int8=False)
        if kind == QUANT:
            # Exact: float64 sums of products of 9-bit integers.
            x = np.subtract(x, np.float64(quant_of(node, xt).scalar()[1]), dtype=np.float64)
            w = np.subtract(w, np.float64(quant_of(node, wt).scalar()[1]), dtype=np.float64)
        elif kind == HYBRID:
            w = dequantized(node, graph, inputs, 1)
        if node.attrs.get("adj_x", False):
            x = np.swapaxes(x, -1, -2)
        if node.attrs.get("adj_y", False):
            w = np.swapaxes(w, -1, -2)
        with K.serial_blas():
            y = np.matmul(x, w)
        if kind != QUANT:
            return [y.astype(np.float32, copy=False)]
        rq = graph.prepared(("requant", node.index),
                      lambda: requant_params(node, xt, wt, yt, shape[-1], per_channel_math=False))
        acc = np.ascontiguousarray(y.reshape(-1, shape[-1]))
        return [K.requantize(acc, np.zeros(shape[-1], np.int64), rq).reshape(shape)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        x, w = required_tensor(node, graph, 0), required_tensor(node, graph, 1)
        shape, k = _bmm_dims(node, x.shape, w.shape)
        return math.prod(shape) * k


# -- the GPU side (kernels/dialect/conv2d.dialect and friends): support, blocking, weight layouts -------------
#
# Every weight layout is built once per preparation through ctx.const, in the order the kernel's inner loop
# reads it. The float value of a constant comes from ctx.const_data (int8 / fp16 / hybrid already
# dequantized); quantized models run in float, with the framework's fake-quant after each op.


def _pow2_at_most(n: int, cap: int) -> int:
    """The largest power of two <= min(n, cap), at least 1."""
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


FLAT_ROW = 16384  # conv2d_1x1.dialect numbers its blocks of pixels in rows of this many work items
WIDE_PIXELS = 2048  # 1x1 layers of at least this many pixels take 8 pixels per work item on a CPU device
# OpenCL convolutions of fewer multiply-adds keep 4 output slices a work item where 8 would fit (gpu_blocking's
# ``wide``): below ~1M the wider work item ran no faster (the face detector's 16x16 and 8x8 layers, PoCL), and
# each distinct kernel of 8 slices takes PoCL a quarter longer to compile (a first start)
WIDE_MIN_MACS = 2_000_000


def gpu_blocking(device_type: str, dst_slices: int, pixels: int, flat: bool = False,
                 wide: bool = False) -> tuple[int, int]:
    """(output slices, pixels) per work item. A CPU device (PoCL, llvmpipe) runs few work items at a time
    and is bound by loads: 4 x 4 gives each loaded weight row 4 uses and each input value 16 (2-3x the
    speed of one output vec4 per work item on PoCL). llvmpipe, whose every buffer load is a gather, runs
    the 1x1 kernel 1.3-1.8x faster at 8 pixels (kernels/opencl/conv2d_1x1.cl does them 4 at a time on PoCL), but
    compiles it twice as slowly (~1.5 s): only layers of many pixels get 8. ``wide``: the OpenCL convolutions
    (kernels/opencl/conv_wide.inc.cl) on a CPU of 16-float vectors (AVX-512), which take 8 output slices, two
    such vectors a pixel: an input value broadcast then feeds two multiply-adds, 10 loads for 16 of them at 8
    pixels where 4 slices took 9 loads for 8 (PoCL, each layer alone: MobileNetV1's 1x1 layers 0.67-0.90x,
    ResNet50's other convolutions 0.80x). With 8-float vectors (AVX2) the 4 slices already fill the 16
    registers. A GPU wants many more work items and fewer registers each."""
    cap_s, cap_x = ((8 if wide else 4, 8 if flat and pixels >= WIDE_PIXELS else 4) if device_type == "cpu"
                    else (2, 2))
    block_s = cap_s if dst_slices >= cap_s else _pow2_at_most(2 * dst_slices - 1, cap_s)
    return block_s, _pow2_at_most(pixels, cap_x)


def conv_weight_rows(w: np.ndarray, block_s: int) -> np.ndarray:
    """Filter [O, KH, KW, I] as conv2d.dialect's rows [block][ky][kx][src slice][c][j]: row = the 4 output channels
    4 * (block * block_s + j) + 0..3 for input channel 4 * (src slice) + c, zero-padded. The block_s rows of
    one input channel are adjacent: kernels/opencl/conv2d_1x1.cl reads them as one wide vector."""
    o, kh, kw, i = w.shape
    blocks = -(-slices(o) // block_s)
    padded = np.zeros((blocks * block_s * 4, kh, kw, slices(i) * 4), np.float32)
    padded[:o, :, :, :i] = w
    r = padded.reshape(blocks, block_s, 4, kh, kw, slices(i), 4)  # [blk, j, lane, ky, kx, s, c]
    return np.ascontiguousarray(r.transpose(0, 3, 4, 5, 6, 1, 2)).reshape(-1, 4)


def dense_filter(w: np.ndarray, groups: int) -> np.ndarray:
    """A grouped filter [O, KH, KW, I / groups] as the equivalent dense one, zero outside each group's block
    of input channels (a grouped convolution then costs as much as a dense one)."""
    if groups == 1:
        return w
    o, kh, kw, cg = w.shape
    og = o // groups
    dense = np.zeros((o, kh, kw, cg * groups), np.float32)
    for g in range(groups):
        dense[g * og:(g + 1) * og, :, :, g * cg:(g + 1) * cg] = w[g * og:(g + 1) * og]
    return dense


def channel_rows(values: np.ndarray, n_slices: int) -> np.ndarray:
    """Per-channel values (a bias) as one row per slice, zero-padded to n_slices rows."""
    rows = np.zeros(n_slices * 4, np.float32)
    v = np.asarray(values, np.float32).reshape(-1)
    rows[: v.size] = v
    return rows.reshape(-1, 4)


# OpenCL's conv2d_1x1 (opencl/conv2d_1x1.cl) orders its work items with the blocks of output slices fastest
# (BLOCKS_INNER) where the input is large and the weights small: consecutive work items and groups then compute
# every output block of one block of pixels, read from memory once for all of them instead of once per block.
# PoCL, whole plans in sequence, against the plain order: MobileNetV2 0.90x, EfficientNetB0 0.91x, DenseNet121
# 0.92x, MobileNetV1 0.95x, ResNet50 0.99x, MobileNetV3Small 1.04x; for every layer (weights up to 16 MB)
# MobileNetV1 was 1.08x and ResNet50 1.06x: their large weights, read again by every group, left the cache.
BLOCKS_INNER_MAX_WEIGHT_BYTES = 1 << 20
BLOCKS_INNER_MIN_INPUT_BYTES = 128 << 10


def blocks_inner(pixels: int, src_slices: int, dst_slices: int, blocks: int) -> bool:
    weight_bytes, input_bytes = 64 * src_slices * dst_slices, 16 * pixels * src_slices
    return blocks > 1 and weight_bytes <= BLOCKS_INNER_MAX_WEIGHT_BYTES and input_bytes >= BLOCKS_INNER_MIN_INPUT_BYTES


def emit_conv(ctx: LowerContext, node: Node, src: int, dst: int, bias: int | tuple[str, Callable[[], np.ndarray]],
              w_key: str, weights: Callable[[], np.ndarray], kernel_hw: tuple[int, int], stride: tuple[int, int],
              dilation: tuple[int, int], pads: tuple[int, int], act: int, groups: int = 1,
              src_pad: tuple[float, ...] | None = None) -> None:
    """A convolution through kernels/dialect/conv2d.dialect, or conv2d_1x1.dialect for a 1x1 window at stride 1 without
    padding: that one numbers pixels across the batch, which also serves a FULLY_CONNECTED whose rows are
    pixels (src and dst then differ in shape but not in pixel count). ``weights()`` gives the filter
    [O, KH, KW, I / groups]; its layout is keyed by ``w_key`` and the blocking. ``groups`` > 1: a grouped convolution
    of whole slices (input and output channels a group multiples of 4; not a flat one), each block of output slices
    reading its group's input slices only. ``bias``: a constant tensor, -1 for none, or (key, the values) where no
    one tensor holds them. ``src_pad``: the value of each input channel (one for all, or up to 4) that the padding
    reads instead of 0 (emit_affine_conv)."""
    b, h, w, c = ctx.bhwc(src)
    ob, oh, ow, oc = ctx.bhwc(dst)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl) = kernel_hw, stride, dilation, pads
    flat = (kh, kw, sh, sw, pt, pl) == (1, 1, 1, 1, 0, 0) and b * h * w == ob * oh * ow and \
        (node.op == "FULLY_CONNECTED" or (h, w) == (oh, ow)) and groups == 1
    block_s, block_x = gpu_blocking(ctx.device_type, slices(oc), ob * oh * ow if flat else ow, flat,
                                    wide=ctx.api == "OpenCL" and ctx.vector_width >= 16
                                    and ob * oh * ow * oc * c * kh * kw // groups >= WIDE_MIN_MACS)
    group_slices = slices(oc // groups)
    while groups > 1 and group_slices % block_s:  # a block's output slices lie in one group
        block_s //= 2
    blocks = -(-slices(oc) // block_s)
    consts = {"w": ctx.const(f"{w_key}:{block_s}", lambda: conv_weight_rows(weights(), block_s))}
    if isinstance(bias, tuple):
        bias_key, bias_values = bias
        consts["bias"] = ctx.const(f"{bias_key}:{blocks * block_s}",
                                   lambda: channel_rows(bias_values(), blocks * block_s))
    elif bias >= 0:
        tensor = bias
        consts["bias"] = ctx.const(f"conv_bias:{tensor}:{blocks * block_s}",
                                   lambda: channel_rows(ctx.const_value(node, tensor), blocks * block_s))
    defines: Defines = {"BLOCK_S": block_s, "BLOCK_X": block_x, "HAS_BIAS": int("bias" in consts), **act_defines(act)}
    if flat:
        pix_blocks = -(-ob * oh * ow // block_x)
        defines["PIX_BLOCKS"] = pix_blocks
        defines["SRC_SCALE"] = 0  # lowering/fuse_channel_scale.py may scale the input's channels
        defines["BLOCKS_INNER"] = int(blocks_inner(b * h * w, slices(c), blocks * block_s, blocks))
        grid = (min(pix_blocks, FLAT_ROW), -(-pix_blocks // FLAT_ROW), blocks)
        ctx.kernel("conv2d_1x1", {"src": src}, {"dst": dst}, consts, defines, grid, variants={"opencl": "conv2d_1x1"})
        return
    masked = pt > 0 or pl > 0 or (oh - 1) * sh - pt + (kh - 1) * dh >= h or (ow - 1) * sw - pl + (kw - 1) * dw >= w
    defines.update({"KH": kh, "KW": kw, "SH": sh, "SW": sw, "DH": dh, "DW": dw, "PT": pt, "PL": pl,
                    "DST_BLOCKS": blocks, "MASKED": int(masked), "GROUPED": int(groups > 1)})
    if masked and src_pad is not None and any(v != 0.0 for v in src_pad):
        assert len(src_pad) <= 4 or len(set(src_pad)) == 1, "more than 4 channels of different padding values"
        lanes = src_pad if len(src_pad) <= 4 else src_pad[:1]
        defines.update({"SRC_PAD": 1, **{f"PADV{k}": float(lanes[min(k, len(lanes) - 1)]) for k in range(4)}})
    if groups > 1:
        defines.update({"GROUP_S": slices(c // groups), "GROUP_BLOCKS": group_slices // block_s})
    ctx.kernel("conv2d", {"src": src}, {"dst": dst}, consts, defines, (-(-ow // block_x), oh, ob * blocks),
               variants={"opencl": "conv2d"})


def lower_joined_1x1(nodes: list[Node], ctx: LowerContext, joined: int) -> None:
    """Float 1x1 CONV_2Ds at stride 1 and FULLY_CONNECTEDs whose rows are pixels, all of one input, as one
    convolution writing their outputs side by side along the channels of ``joined`` (lowering/fuse_siblings.py)."""
    def filter_of(node: Node) -> np.ndarray:  # [O, 1, 1, K]
        w = np.asarray(ctx.const_value(node, ctx.input(node, 1)), np.float32)
        return w.reshape(w.shape[0], 1, 1, w.shape[-1])

    def bias_of(node: Node, channels: int) -> np.ndarray:
        bias = ctx.input(node, 2)
        return np.asarray(ctx.const_value(node, bias), np.float32).reshape(channels) if bias >= 0 else \
            np.zeros(channels, np.float32)

    filters = [filter_of(node) for node in nodes]
    key = ":".join(str(node.index) for node in nodes)
    emit_conv(ctx, nodes[0], ctx.input(nodes[0], 0), joined,
              (f"joined_bias:{key}", lambda: np.concatenate([bias_of(n, f.shape[0]) for n, f in zip(nodes, filters)])),
              f"joined_w:{key}", lambda: np.concatenate(filters), (1, 1), (1, 1), (1, 1), (0, 0), activation(nodes[0]))


def lower_conv2d(node: Node, ctx: LowerContext) -> None:
    src, wt, bias, dst = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2), ctx.output(node)
    xs = ctx.bhwc(src)  # src may be a merged PAD's input of lower rank (lowering/merge_pad.py)
    o, kh, kw, cg = ctx.shape(wt)
    _, sh, sw, dh, dw = window_attrs(node)
    groups = xs[3] // cg
    pads = ctx.padding(node, (xs[1], xs[2]), (kh, kw), (sh, sw), (dh, dw))
    if ctx.is_const(wt) and (bias < 0 or ctx.is_const(bias)) and cg == 1 and groups > 1 and o % groups == 0:
        # one input channel a group (ConvNeXt's and grouped Keras Conv2D's depthwise layers): a depthwise convolution,
        # output channel j reading input channel j // (o / groups) as TFLite's grouped CONV_2D does (ConvNeXtTiny's
        # 7x7 ones, each alone: 78.1 ms on conv2d_grouped, 2.5 as depthwise)
        emit_depthwise(ctx, node, (kh, kw), f"grouped_dw_w:{wt}",
                       lambda: ctx.const_value(node, wt).reshape(o, kh, kw).transpose(1, 2, 0))
        return
    constant = ctx.is_const(wt) and (bias < 0 or ctx.is_const(bias))
    if constant and groups > 1 and cg % 4 == 0 and (o // groups) % 4 == 0:
        # whole slices a group (ResNeXt's and RegNet's 3x3 layers): the dense kernels over each group's slices only
        # (PoCL, a ResNeXt's 3x3 layers alone: 16 groups of 8 channels 1.2 ms on conv2d_grouped -> 0.15 ms, 8 groups
        # of 8 channels 0.79 ms as a dense filter -> 0.28 ms; the whole net 5.5 -> 2.4 ms)
        emit_conv(ctx, node, src, dst, bias, f"conv_w_groups:{wt}", lambda: ctx.const_value(node, wt), (kh, kw),
                  (sh, sw), (dh, dw), pads, activation(node), groups)
        return
    if not constant or groups > MAX_GPU_GROUPS:
        lower_conv2d_grouped(node, ctx, groups, pads)
        return
    if groups == 1 and ctx.int8_dot and emit_conv_int8(ctx, node, src, dst, wt, bias, (sh, sw), (dh, dw), pads):
        return
    affine = ctx.input_affine(node)
    if affine is not None:
        emit_affine_conv(ctx, node, src, dst, wt, bias, affine, (kh, kw), (sh, sw), (dh, dw), pads)
        return
    emit_conv(ctx, node, src, dst, bias, f"conv_w:{wt}:{groups}",
              lambda: dense_filter(ctx.const_value(node, wt), groups), (kh, kw), (sh, sw), (dh, dw), pads,
              activation(node))


def emit_affine_conv(ctx: LowerContext, node: Node, src: int, dst: int, wt: int, bias: int,
                     affine: tuple[np.ndarray, np.ndarray], kernel_hw: tuple[int, int], stride: tuple[int, int],
                     dilation: tuple[int, int], pads: tuple[int, int]) -> None:
    """A CONV_2D of one group that reads scale * src + shift (per input channel; lowering/fuse_input_affine.py):
    weights times the scale, bias plus the weights times the shift, the padding read as -shift / scale."""
    scale, shift = affine

    def weights() -> np.ndarray:
        return (ctx.const_value(node, wt).astype(np.float64) * scale).astype(np.float32)

    def bias_values() -> np.ndarray:
        w = ctx.const_value(node, wt).astype(np.float64)
        b = ctx.const_value(node, bias).astype(np.float64) if bias >= 0 else np.zeros(w.shape[0])
        return (b + (w * shift).sum(axis=(1, 2, 3))).astype(np.float32)

    emit_conv(ctx, node, src, dst, (f"affine_conv_bias:{node.index}", bias_values), f"affine_conv_w:{node.index}",
              weights, kernel_hw, stride, dilation, pads, activation(node), src_pad=tuple(-shift / scale))


# An 8-bit CONV_2D on a device with integer dot products (LowerContext.int8_dot: x86 VNNI or AVX2 under PoCL) runs as
# kernels/opencl/conv2d_int8.cl, which sums its input's codes (q + 128, a byte a value) times the model's int8 weights
# in int32, as LiteRT does, 64 products an instruction (PoCL on AVX-512 VNNI: ~430-560 GOP/s on whole layers, the
# float kernels ~160; on AVX2, vpmaddwd's 16 products an instruction, twice a float FMA's 8). The codes come from
# the kernels that write the input (_input_codes).
INT8_OFFSET = 128  # u = q + 128 makes an int8 code the unsigned byte vpdpbusd takes
# Layers too small for the dot products to pay (the codes their input's producer stores, a second kernel where a
# quantize pass makes them): an input value taking part in fewer products (output channels x taps) than
# INT8_MIN_PRODUCTS, or fewer multiply-adds than INT8_MIN_MACS. PoCL, AVX-512 VNNI, whole int8 models A/B against
# 128 products and 8M multiply-adds (what paid while every input took a quantize pass): DenseNet121 0.73x the time,
# EfficientNetB0 0.84x, EfficientNetV2B0 0.81x, MobileNetV2 0.81x, MobileNetV3Large 0.90x, NASNetMobile 0.84x,
# ResNet50 0.97x (at 32 products, 1M); 16 products against 32: MobileNetV2 0.92x (its projections to 24 channels),
# MobileNetV3Large 0.96x, the EfficientNets unchanged; every layer (1 and 0): 0.93-1.09x, within the host's noise.
# INT8_MIN_MACS holds only where a quantize pass would make the codes: where the input's writers store them beside
# their values anyway (a kernel of the plan writes it whole), the smaller layers sum codes too, the model's outputs
# unchanged bit for bit. Whole models, 15 interleaved rounds: MobileNetV3Small int8 0.90x (its 1M-MAC layers and
# gates), the ViT block int8 0.77x (its 64-token dense layers), the text CNN int8 0.92x.
INT8_MIN_PRODUCTS = 16
INT8_MIN_MACS = 1_000_000
# Except where the weights outnumber the input's values this many times: the layer is bound by reading them, and
# int8's are a quarter of the bytes (a classifier's 1280 x 1000: 125 -> ~30 us)
INT8_WEIGHT_BOUND = 16
# conv2d_int8's defines that a crowded plan passes as kernel arguments (with its channel counts: the file's
# `@runtime_channels crowded`): the window's size, strides and dilations stay constants of the code
INT8_RUNTIME_DEFINES = ("IN_H", "IN_W", "IN_S", "PT", "PL", "DST_BLOCKS", "PAD_WORD")


def _raw(ctx: LowerContext, t: int, dtype: np.dtype) -> np.ndarray | None:
    """Graph tensor ``t``'s stored values when it is a constant of ``dtype`` (not dequantized), else None."""
    if not 0 <= t < len(ctx.graph.tensors):
        return None
    tensor = ctx.graph.tensors[t]
    return np.asarray(tensor.data) if tensor.data is not None and tensor.dtype == dtype else None


def int8_weight_words(w: np.ndarray, block_s: int, src_slices: int) -> np.ndarray:
    """int8 filter [O, KH, KW, I] as conv2d_int8.cl reads it: [block][ky][kx][src slice][NV][16 output channels]
    [4 input channels] (NV = block_s / 4), zero-padded, its bytes as float32 rows of 4 (a constant buffer)."""
    o, kh, kw, i = w.shape
    blocks = -(-slices(o) // block_s)
    padded = np.zeros((blocks * block_s * 4, kh, kw, src_slices * 4), np.int8)
    padded[:o, :, :, :i] = w
    r = padded.reshape(blocks, block_s // 4, 16, kh, kw, src_slices, 4)  # [blk, v, lane, ky, kx, s, c]
    return np.ascontiguousarray(r.transpose(0, 3, 4, 5, 1, 2, 6)).view(np.float32).reshape(-1, 4)


def _input_codes(ctx: LowerContext, src: int, scale: float, zero_point: int) -> int:
    """The scratch tensor of ``src``'s codes, a 32-bit word (prelude's gd_code4) at each of its vec4 indices, made
    once for all of its integer convolutions: stored by the kernels that write ``src`` where they write it whole
    under its own name (each store then also stores the word: codegen._cl_accessors), else by a quantize_u8 pass
    (a model input, a concatenation whose parts are written in place)."""
    codes = ctx.derived.get(("codes", src))
    if codes is not None:
        return codes
    b, h, w, c = ctx.bhwc(src)
    # a word per vec4 of src: shaped as src with a channel per slice (room for all), so that layers differing in
    # channels alone share their programs in a crowded plan (a shape's channels can be kernel arguments)
    codes = ctx.derived[("codes", src)] = ctx.scratch((b, h, w, slices(c)), fp32=True)
    inv, offset = 1.0 / scale, float(zero_point + INT8_OFFSET)
    writers = _code_writers(ctx, src)
    if writers:
        for call, arg in writers:
            call.outputs[f"{arg}_codes"] = codes
            call.defines.update({f"{arg}_QINV": inv, f"{arg}_QOFF": offset})
            # kernel arguments in a crowded plan: layers differing in their grids alone share a program
            call.constants = (*call.constants, f"{arg}_QINV", f"{arg}_QOFF")
    else:
        ctx.kernel("quantize_u8", {"src": src}, {"q": codes}, defines={"INV": inv, "OFFSET": offset},
                   grid=ctx.quads_grid(src), variants={"opencl": "quantize_u8"})
    return codes


def _code_writers(ctx: LowerContext, src: int) -> list[tuple[KernelCall, str]]:
    """The emitted kernels (and their output argument) that write ``src`` whole under its own name, and so may
    store its codes beside it; empty where a quantize_u8 pass must make them."""
    writers = [(call, arg) for call in ctx.kernels for arg, t in call.outputs.items() if t == src]
    if src in ctx.view.placed or any(parent == src for parent, _ in ctx.view.placed.values()) or \
            any(f"{arg}_codes" in call.outputs for call, arg in writers):
        return []
    return writers


def emit_conv_int8(ctx: LowerContext, node: Node, src: int, dst: int, wt: int, bias: int, stride: tuple[int, int],
                   dilation: tuple[int, int], pads: tuple[int, int]) -> bool:
    """The CONV_2D (or FULLY_CONNECTED, weights [O, K] read as [O, 1, 1, K]) as quantize_u8 + conv2d_int8 where it
    is one of TFLite's int8 convolutions (int8 input and output, per-tensor input quantization, symmetric int8
    weights, int32 bias, all constants as stored) of a size where that pays; False, emitting nothing, otherwise."""
    graph = ctx.graph
    w = _raw(ctx, wt, I8)
    b = _raw(ctx, bias, I32) if bias >= 0 else np.zeros(0, np.int32)
    if w is not None and w.ndim == 2:
        w = w.reshape(w.shape[0], 1, 1, w.shape[1])
    if not ctx.quantized or w is None or b is None or w.ndim != 4 or not 0 <= src < len(graph.tensors):
        return False
    x_t, w_t, y_t = graph.tensors[src], graph.tensors[wt], graph.tensors[dst]
    if x_t.dtype != I8 or y_t.dtype != I8 or x_t.quant is None or x_t.quant.scale.size != 1 or w_t.quant is None \
            or np.any(w_t.quant.zero_point != 0):
        return False
    x_scale, x_zp = x_t.quant.scalar()
    o, kh, kw, i = w.shape
    ob, oh, ow, oc = ctx.bhwc(dst)
    xb, xh, xw, xc = ctx.bhwc(src)
    codes_ready = ("codes", src) in ctx.derived or bool(_code_writers(ctx, src))
    small = o * kh * kw < INT8_MIN_PRODUCTS or (ob * oh * ow * o * kh * kw * i < INT8_MIN_MACS and not codes_ready)
    if small and o * kh * kw * i < INT8_WEIGHT_BOUND * xb * xh * xw * xc:
        return False
    w_scale = np.broadcast_to(np.asarray(w_t.quant.scale, np.float64).reshape(-1), (o,))
    bias_q = b.reshape(-1).astype(np.int64) if b.size else np.zeros(o, np.int64)
    corr = bias_q - (x_zp + INT8_OFFSET) * w.reshape(o, -1).astype(np.int64).sum(axis=1)
    if bias_q.size != o or np.abs(corr).max(initial=0) >= 2**31:
        return False
    src_s, dst_s = slices(xc), slices(oc)
    if src_s * 4 < i:
        return False
    # 8 output slices (two int16 accumulators a pixel) where the registers hold 16 ints: on AVX2, 4 pixels' two
    # took all 16 (MobileNetV1 int8's conv2d_int8 layers each alone 6.95 -> 6.21 ms with one; ResNet50's unchanged)
    block_s = 8 if dst_s >= 8 and ctx.vector_width >= 16 else 4
    blocks = -(-dst_s // block_s)
    channels = blocks * block_s * 4

    def per_channel(values: np.ndarray) -> np.ndarray:  # int32 or float32 values as float32 rows of 4
        padded: np.ndarray = np.zeros(channels, values.dtype)
        padded[:o] = values
        return padded.view(np.float32).reshape(-1, 4)

    q = _input_codes(ctx, src, x_scale, x_zp)
    consts = {"w": ctx.const(f"conv_w_int8:{wt}:{block_s}:{src_s}", lambda: int8_weight_words(w, block_s, src_s), True),
              "corr": ctx.const(f"conv_corr_int8:{wt}:{bias}:{x_zp}:{channels}",
                                lambda: per_channel(corr.astype(np.int32)), True),
              "scale": ctx.const(f"conv_scale_int8:{wt}:{x_scale!r}:{channels}",
                                 lambda: per_channel((x_scale * w_scale).astype(np.float32)), True)}
    pad_word = (x_zp + INT8_OFFSET) * 0x01010101
    (sh, sw), (dh, dw), (pt, pl) = stride, dilation, pads
    block_x = _pow2_at_most(ow, 4)
    defines: Defines = {"BLOCK_S": block_s, "BLOCK_X": block_x, "KH": kh, "KW": kw, "SH": sh, "SW": sw, "DH": dh,
                        "DW": dw, "PT": pt, "PL": pl, "DST_BLOCKS": blocks, "IN_H": xh, "IN_W": xw, "IN_S": src_s,
                        "PAD_WORD": pad_word - 2**32 if pad_word >= 2**31 else pad_word,
                        **act_defines(activation(node))}
    ctx.kernel("conv2d_int8", {"q": q}, {"dst": dst}, consts, defines, (-(-ow // block_x), oh, ob * blocks),
               variants={"opencl": "conv2d_int8"}, constants=INT8_RUNTIME_DEFINES)
    return True


def lower_conv2d_grouped(node: Node, ctx: LowerContext, groups: int, pads: tuple[int, int]) -> None:
    """kernels/dialect/conv2d_grouped.dialect: the filter (and bias) read as they are, from a tensor computed at
    run time or a constant; each group's input channels only."""
    src, wt, bias, dst = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2), ctx.output(node)
    o, kh, kw, cg = ctx.shape(wt)
    _, sh, sw, dh, dw = window_attrs(node)
    inputs, consts = {"src": src}, {}
    if ctx.is_const(wt):
        consts["w"] = ctx.const_tensor("conv_w_grouped", wt)
    else:
        inputs["w"] = wt
    if bias >= 0 and ctx.is_const(bias):
        consts["bias"] = ctx.const(f"conv_bias:{bias}:{slices(o)}",
                                   lambda: channel_rows(ctx.const_value(node, bias), slices(o)))
    elif bias >= 0:
        inputs["bias"] = bias
    defines: Defines = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "DH": dh, "DW": dw, "PT": pads[0], "PL": pads[1],
                        "CG": cg, "OG": o // groups, "W_S": slices(cg), "ALIGNED": cg % 4 == 0,
                        "HAS_BIAS": bias >= 0}
    ctx.fuse_activation(node)
    ctx.kernel("conv2d_grouped", inputs, {"dst": dst}, consts, defines, grid=ctx.grid(dst))


def lower_depthwise(node: Node, ctx: LowerContext) -> None:
    wt = ctx.input(node, 1)
    _, kh, kw, oc = ctx.const_value(node, wt).shape
    emit_depthwise(ctx, node, (kh, kw), f"dw_w:{wt}", lambda: ctx.const_value(node, wt).reshape(kh, kw, oc))


def emit_depthwise(ctx: LowerContext, node: Node, window: tuple[int, int], w_key: str,
                   filter_hwo: Callable[[], np.ndarray]) -> None:
    """kernels/dialect/depthwise_conv2d.dialect for node's input 0 -> output 0 (its bias input 2, strides, dilations,
    padding and activation): output channel j reads input channel j // (output channels / input channels), with the
    taps ``filter_hwo()`` [KH, KW, OC] of the ``window`` (KH, KW), whose layout is keyed by ``w_key``."""
    src, bias, dst = ctx.input(node, 0), ctx.input(node, 2), ctx.output(node)
    b, h, w, c = ctx.bhwc(src)
    ob, oh, ow, oc = ctx.bhwc(dst)
    _, sh, sw, dh, dw = window_attrs(node)
    kh, kw = window
    pt, pl = ctx.padding(node, (h, w), (kh, kw), (sh, sw), (dh, dw))
    block_x = _pow2_at_most(ow, 4 if ctx.device_type == "cpu" else 2)
    s = slices(oc)

    def rows() -> np.ndarray:  # [KH, KW, OC] -> [slice][ky][kx], 4 channels a row
        padded = np.zeros((kh, kw, s * 4), np.float32)
        padded[:, :, :oc] = filter_hwo()
        return np.ascontiguousarray(padded.reshape(kh, kw, s, 4).transpose(2, 0, 1, 3)).reshape(-1, 4)

    consts = {"w": ctx.const(w_key, rows)}
    if bias >= 0:
        consts["bias"] = ctx.const(f"conv_bias:{bias}:{s}", lambda: channel_rows(ctx.const_value(node, bias), s))
    masked = pl > 0 or (ow - 1) * sw - pl + (kw - 1) * dw >= w
    defines: Defines = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "DH": dh, "DW": dw, "PT": pt, "PL": pl,
                        "BLOCK_X": block_x, "MULT": oc // c, "MASKED": int(masked), "HAS_BIAS": int(bias >= 0),
                        **act_defines(activation(node))}
    ctx.kernel("depthwise_conv2d", {"src": src}, {"dst": dst}, consts, defines, (-(-ow // block_x), oh, ob * s),
               variants={"opencl": "depthwise_conv2d"})


def lower_transpose_conv(node: Node, ctx: LowerContext, xi: int, wi: int, bi: int, pads: tuple[int, int],
                         strides: tuple[int, int], act: int) -> None:
    src, wt, dst = ctx.input(node, xi), ctx.input(node, wi), ctx.output(node)
    bias = ctx.input(node, bi)
    ob, oh, ow, oc = ctx.bhwc(dst)
    _, kh, kw, _ = ctx.const_value(node, wt).shape
    block_s = gpu_blocking(ctx.device_type, slices(oc), 1)[0]
    blocks = -(-slices(oc) // block_s)
    consts = {"w": ctx.const(f"tconv_w:{wt}:{block_s}",
                             lambda: conv_weight_rows(ctx.const_value(node, wt), block_s))}
    if bias >= 0:
        consts["bias"] = ctx.const(f"conv_bias:{bias}:{blocks * block_s}",
                                   lambda: channel_rows(ctx.const_value(node, bias), blocks * block_s))
    defines: Defines = {"KH": kh, "KW": kw, "SH": strides[0], "SW": strides[1], "PT": pads[0], "PL": pads[1],
                        "BLOCK_S": block_s, "DST_BLOCKS": blocks, "HAS_BIAS": int(bias >= 0), **act_defines(act)}
    # pixels strides[1] apart a work item: 4 on every OpenCL device (kernels/opencl/conv_transpose.cl) and on a CPU's
    # GL, one on a GPU's GL
    pixels = 4 if ctx.api == "OpenCL" or ctx.device_type == "cpu" else 1
    defines["PIXELS"] = pixels
    per_phase = math.ceil(ow / strides[1])  # output columns of one phase (ox % strides[1])
    grid = (strides[1] * math.ceil(per_phase / pixels), oh, ob * blocks)
    ctx.kernel("conv_transpose", {"src": src}, {"dst": dst}, consts, defines, grid,
               variants={"opencl": "conv_transpose"} if ctx.api == "OpenCL" else None)


def lower_fully_connected(node: Node, ctx: LowerContext) -> None:
    src, wt, bias, dst = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2), ctx.output(node)
    o, k = ctx.const_value(node, wt).shape
    if ctx.int8_dot and ctx.bhwc(src)[:3] == ctx.bhwc(dst)[:3] and ctx.bhwc(src)[3] == k and \
            emit_conv_int8(ctx, node, src, dst, wt, bias, (1, 1), (1, 1), (0, 0)):
        return
    if ctx.bhwc(src)[3] == k:  # rows are pixels: a 1x1 convolution
        emit_conv(ctx, node, src, dst, bias, f"fc_w:{wt}", lambda: ctx.const_value(node, wt).reshape(o, 1, 1, k),
                  (1, 1), (1, 1), (1, 1), (0, 0), activation(node))
        return
    s = slices(o)

    def rows() -> np.ndarray:  # [O, K] -> [slice][k], 4 outputs a row
        padded = np.zeros((s * 4, k), np.float32)
        padded[:o] = ctx.const_value(node, wt)
        return np.ascontiguousarray(padded.reshape(s, 4, k).transpose(0, 2, 1)).reshape(-1, 4)

    consts = {"w": ctx.const(f"fc_rows:{wt}", rows)}
    if bias >= 0:
        consts["bias"] = ctx.const(f"conv_bias:{bias}:{s}", lambda: channel_rows(ctx.const_value(node, bias), s))
    ob, oh, ow, _ = ctx.bhwc(dst)
    defines: Defines = {"K": k, "HAS_BIAS": int(bias >= 0), **act_defines(activation(node))}
    ctx.kernel("fully_connected", {"src": src}, {"dst": dst}, consts, defines, (ob * oh * ow, s, 1))


BMM_ROWS = 4  # rows m per work item of batch_matmul(_softmax).dialect (an X stored with m as channels: 4 a read)


def _axis_strides(shape: tuple[int, ...], seen: tuple[int, ...], axes: list[int]) -> tuple[list[int], int]:
    """For an operand whose axis i is axis ``axes[i]`` of a tensor of ``shape`` in PHWC4 seen as ``seen`` (``shape``
    itself, or ``shape`` with its channels split into groups of seen[-1], a multiple of 4): each axis's stride in
    vec4 (in slices of 4 for the axis stored as channels; 0 for an axis of size 1, which broadcasts), right-aligned
    to 4 axes (missing leading axes: 0), and which of the 4 is stored as channels (-1 if none)."""
    b, h, w, c = bhwc(shape)
    role = [slices(c) * h * w, w, 1, h * w]  # B, H, W, C (per slice)
    own = [role[4 - len(shape) + a] for a in range(len(shape))]
    if tuple(seen) != tuple(shape):
        own = own[:-1] + [own[-1] * (seen[-1] // 4), own[-1]]
    strides = [0] * (4 - len(axes))
    channels = -1
    for i, a in enumerate(axes):
        strides.append(own[a] if seen[a] != 1 else 0)
        if a == len(seen) - 1:
            channels = 4 - len(axes) + i
    return strides, channels


def _operand(node: Node, ctx: LowerContext, k: int) -> tuple[int, tuple[int, ...], list[int], int]:
    """Input ``k`` of a BATCH_MATMUL: (tensor read, its logical shape, strides, channel axis) as _axis_strides."""
    t = ctx.input(node, k)
    shape = ctx.shape(t)
    seen, perm = ctx.input_transposed(node, k) or (shape, tuple(range(len(shape))))
    strides, channels = _axis_strides(shape, seen, list(perm))
    return t, tuple(seen[a] for a in perm), strides, channels


def lower_batch_matmul(node: Node, ctx: LowerContext) -> None:
    """batch_matmul.dialect, reading each operand and writing the result through strides: a TRANSPOSE (and a RESHAPE
    of the channels) a pass fused into the read or the write (ctx.input_transposed / output_transposed) is a change
    of strides. With a scale and SOFTMAX fused after it (ctx.softmax_after), batch_matmul_softmax.dialect."""
    x, xs, x_strides, x_channels = _operand(node, ctx, 0)
    y, ys, y_strides, y_channels = _operand(node, ctx, 1)
    (*_, m, n), k = _bmm_dims(node, xs, ys)
    adj_x, adj_y = bool(node.attrs.get("adj_x", False)), bool(node.attrs.get("adj_y", False))
    # the logical X[.., m, k] and Y[.., k, n] as axes 2 and 3 of the stored operands
    xm, xk = (3, 2) if adj_x else (2, 3)
    yk, yn = (3, 2) if adj_y else (2, 3)
    if x_channels not in (xm, xk) or y_channels not in (yk, yn):
        raise DelegateError(f"{node}: an operand is read through a transpose that moves its channels to a batch axis")
    out = ctx.output(node)
    written = ctx.output_transposed(node)
    rank = len(ctx.shape(out))
    dst, seen, d_axes = (out, ctx.shape(out), list(range(rank))) if written is None else \
        (written[0], written[1], [int(a) for a in np.argsort(written[2])])
    d_strides, d_channels = _axis_strides(ctx.shape(dst), seen, d_axes)
    if d_channels != 3:
        raise DelegateError(f"{node}: its output is written through a transpose that moves its columns off channels")
    ob, oh, _, _ = bhwc(ctx.shape(out))
    defines: Defines = {"M": m, "N": n, "K": k, "Y_CONST": int(ctx.is_const(y)),
                        "X_K_VEC": int(x_channels == xk), "Y_N_VEC": int(y_channels == yn),
                        "X_SB": x_strides[0], "X_SH": x_strides[1], "X_SM": x_strides[xm], "X_SK": x_strides[xk],
                        "Y_SB": y_strides[0], "Y_SH": y_strides[1], "Y_SK": y_strides[yk], "Y_SN": y_strides[yn],
                        "D_SB": d_strides[0], "D_SH": d_strides[1], "D_SM": d_strides[2], "D_SN": d_strides[3]}
    inputs, consts = {"x": x}, {}
    if ctx.is_const(y):
        consts["yc"] = ctx.const(f"bmm_rhs:{y}", lambda: to_rows(ctx.const_value(node, y), ctx.bhwc(y)))
    else:
        inputs["y"] = y
    softmax = ctx.softmax_after(node)
    if softmax is not None:
        defines.update({"SCALE": softmax.scale, "BETA": softmax.beta, "QUANT": 0})
        rounding = softmax.rounding
        if rounding is not None:
            p_scale, p_lo, p_hi = rounding.product
            defines.update({"QUANT": 1, "Q_IN_INV": float(np.float32(1) / np.float32(p_scale)), "Q_IN_LO": p_lo,
                            "Q_IN_HI": p_hi, "SCORES_OFFSET": lookup_grid(rounding.scores)[1],
                            **grid_defines("Q_OUT", rounding.out)})
            # a lookup table, float32 whatever the storage, which OpenCL on a CPU gathers (prelude GD_LOOKUP16)
            consts["scores"] = ctx.table_const(node.index, table_rows(rounding.scores))
        ctx.kernel("batch_matmul_softmax", inputs, {"dst": out}, consts, defines, (-(-m // BMM_ROWS), oh, ob),
                   variants={"opencl": "batch_matmul_softmax"} if ctx.cpu_opencl else None)
        return
    column_groups = slices(n)
    if ctx.cpu_opencl and defines["Y_N_VEC"]:  # opencl/batch_matmul.cl: up to 4 slices a work item
        column_groups = -(-slices(n) // min(slices(n), 4))
    ctx.kernel("batch_matmul", inputs, {"dst": out}, consts, defines, (-(-m // BMM_ROWS), oh, ob * column_groups),
               variants={"opencl": "batch_matmul"} if ctx.cpu_opencl else None)


MAX_GPU_GROUPS = 8  # up to this many groups a filter runs as a dense one (groups times the work, faster kernels)


def conv2d_gpu_support(node: Node, graph: Graph) -> bool | str:
    """Constant filters of up to MAX_GPU_GROUPS groups run dense (conv2d.dialect); filters or biases computed at
    run time, and more groups, run on conv2d_grouped.dialect."""
    verdict = gpu_check(Conv2D, node, graph, {})
    if verdict is not True:
        return verdict
    for i in (1, 2):
        t = node.inputs[i] if i < len(node.inputs) else -1
        if t >= 0 and len(graph.tensors[t].shape) != (4 if i == 1 else 1):
            return f"input {i} has shape {list(graph.tensors[t].shape)}"
    return True


def batch_matmul_gpu_support(node: Node, graph: Graph) -> bool | str:
    verdict = gpu_check(BatchMatMul, node, graph, {})
    if verdict is not True:
        return verdict
    if graph.constant_like(node.inputs[0]):
        return "the first operand is a constant (the GPU path takes a constant second operand only)"
    for t in node.inputs:
        if len(graph.tensors[t].shape) > 4:
            return f"operand {graph.tensors[t].name!r} has rank {len(graph.tensors[t].shape)} (at most 4 on the GPU)"
    return True
