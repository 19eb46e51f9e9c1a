"""MediaPipe's custom ops, the ones TFLite's GPU delegate also parses: MaxPoolingWithArgmax2D and MaxUnpooling2D
(segmentation models), Landmarks2TransformMatrix, TransformLandmarks and TransformTensorBilinear (the face
landmark model with attention crops its eye and lip regions with them). Registered by their custom names, like
builtins; float32 only, as MediaPipe's own kernels.

Options: the pooling pair reads a raw TfLitePoolParams struct (padding 1 SAME / 2 VALID, strides, filter,
activation, as int32s); the other three read flexbuffer maps, whose keys depend on the op version. Semantics and
numerics: gpu_delegate/cpu/mediapipe.py. On the GPU each is one kernel (kernels/dialect/max_pool_argmax,
max_unpool, landmarks_to_matrix, transform_landmarks, transform_tensor_bilinear); the matrix and index inputs may
be computed at run time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from flatbuffers import flexbuffers

from ..cpu import mediapipe as K
from ..cpu.conv import float_range, out_size, pad_before
from ..errors import ModelError
from ..graph import PADDING_SAME, PADDING_VALID, Graph, Node
from ..lowering.context import LowerContext
from .base import Defines, Op, register
from .checks import F32, arity, required
from .window import act_defines

Shape = tuple[int, ...]
Shapes = list[Shape | None]
Inputs = list[np.ndarray | None]


def _float_tensors(node: Node, graph: Graph) -> None:
    for t in (*node.inputs, *node.outputs):
        tensor = graph.tensors[t]
        if tensor.dtype != F32:
            raise ModelError(f"{node}: tensor {tensor.name!r} is {tensor.type_name or tensor.dtype}; {node.op} "
                             "takes float32 only")


def _rank(node: Node, shape: Shape, rank: int, what: str) -> None:
    if len(shape) != rank:
        raise ModelError(f"{node}: {what} must have rank {rank}, has shape {list(shape)}")


def _flex(node: Node) -> dict[str, Any]:
    """The node's flexbuffer options as a dict."""
    try:
        options = flexbuffers.Loads(node.custom_options) if node.custom_options else {}
    except Exception as e:  # noqa: BLE001  (any decoding failure of hostile bytes is a bad model)
        raise ModelError(f"{node}: custom options are not a readable flexbuffer ({type(e).__name__}: {e})") from None
    if not isinstance(options, dict):
        raise ModelError(f"{node}: custom options are not a flexbuffer map")
    return options


def _option(node: Node, options: dict[str, Any], key: str, kind: type) -> Any:
    if key not in options:
        raise ModelError(f"{node}: custom option {key!r} is missing")
    value = options[key]
    try:
        return [kind(v) for v in value] if isinstance(value, list) else kind(value)
    except (TypeError, ValueError):
        raise ModelError(f"{node}: custom option {key!r} = {value!r} is not {kind.__name__}") from None


def _version(node: Node, low: int = 1, high: int = 2) -> int:
    if not low <= node.version <= high:
        raise ModelError(f"{node}: version {node.version} is not one TFLite's GPU delegate parses ({low} to {high})")
    return node.version


def _matrix(node: Node, graph: Graph, i: int) -> None:
    shape = graph.tensors[node.inputs[i]].shape
    if int(np.prod(shape)) != 16:
        raise ModelError(f"{node}: the transform matrix (input {i}) must hold 16 values (4x4), has shape {list(shape)}")


def _matrix_gpu_support(node: Node, graph: Graph) -> bool | str:
    """The kernels read the matrix's first two rows as vec4 0 and 1 of its PHWC4 buffer: so they are where the
    last dimension is 4 (rows are pixels of one slice) or 16 (rows are slices of one pixel)."""
    shape = graph.tensors[node.inputs[1]].shape
    if not shape or shape[-1] not in (4, 16):
        return f"the transform matrix has shape {list(shape)}; the GPU reads [..., 4, 4] or [..., 16]"
    return True


# -- pooling with indices ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolParams:
    padding: int  # graph.PADDING_SAME / PADDING_VALID
    sh: int
    sw: int
    kh: int
    kw: int
    activation: int


def _pool_params(node: Node) -> PoolParams:
    raw = node.custom_options
    if len(raw) < 24:
        raise ModelError(f"{node}: custom options hold {len(raw)} bytes; a TfLitePoolParams needs 24")
    pad, sw, sh, kw, kh, act = struct.unpack_from("<6i", raw)
    if pad not in (1, 2):
        raise ModelError(f"{node}: padding {pad} is not SAME (1) or VALID (2)")
    if min(sw, sh, kw, kh) < 1:
        raise ModelError(f"{node}: strides {sh}x{sw} and filter {kh}x{kw} must be >= 1")
    if not 0 <= act <= 5:
        raise ModelError(f"{node}: unknown activation {act}")
    return PoolParams(PADDING_SAME if pad == 1 else PADDING_VALID, sh, sw, kh, kw, act)


@register
class MaxPoolingWithArgmax2D(Op):
    """MAX_POOL_2D that also outputs where each maximum was: ky * filter_w + kx + 0.1 (float), the first maximum
    of the window in row-major order."""

    name, max_version = "MaxPoolingWithArgmax2D", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 2)
        _float_tensors(node, graph)
        _rank(node, graph.tensors[node.inputs[0]].shape, 4, "the input")
        _pool_params(node)

    @staticmethod
    def _geometry(node: Node, xs: Shape) -> tuple[PoolParams, int, int, int, int]:
        """(params, out_h, out_w, pad_top, pad_left)."""
        p = _pool_params(node)
        oh, ow = out_size(p.padding, xs[1], p.kh, p.sh), out_size(p.padding, xs[2], p.kw, p.sw)
        if oh < 1 or ow < 1:
            raise ModelError(f"{node}: a {p.kh}x{p.kw} window does not fit input {list(xs)}")
        return p, oh, ow, pad_before(xs[1], p.kh, p.sh, 1, oh), pad_before(xs[2], p.kw, p.sw, 1, ow)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs = required(node, shapes, 0)
        _, oh, ow, _, _ = MaxPoolingWithArgmax2D._geometry(node, xs)
        return [(xs[0], oh, ow, xs[3])] * 2

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = np.ascontiguousarray(required(node, inputs, 0), np.float32)
        p, oh, ow, pt, pl = MaxPoolingWithArgmax2D._geometry(node, x.shape)
        lo, hi = float_range(p.activation)
        return list(K.max_pool_argmax(x, p.kh, p.kw, p.sh, p.sw, pt, pl, oh, ow, float(lo), float(hi)))

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        p = _pool_params(node)
        return graph.tensors[node.outputs[0]].size * p.kh * p.kw

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst, idx = ctx.input(node, 0), ctx.output(node, 0), ctx.output(node, 1)
        p, _, _, pt, pl = MaxPoolingWithArgmax2D._geometry(node, ctx.shape(src))
        defines: Defines = {"KH": p.kh, "KW": p.kw, "SH": p.sh, "SW": p.sw, "PT": pt, "PL": pl,
                            **act_defines(p.activation)}
        ctx.kernel("max_pool_argmax", {"src": src}, {"dst": dst, "idx": idx}, defines=defines, grid=ctx.grid(dst))


@register
class MaxUnpooling2D(Op):
    """Puts each input value back at the place in its window that its index (as MaxPoolingWithArgmax2D gives it)
    names; zero elsewhere. The output is the input times the filter size. On the GPU, indices outside the window
    (which MaxPoolingWithArgmax2D never gives) drop their value."""

    name, max_version = "MaxUnpooling2D", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _float_tensors(node, graph)
        x, idx = (graph.tensors[t].shape for t in node.inputs)
        _rank(node, x, 4, "the input")
        _rank(node, idx, 4, "the indices")
        _pool_params(node)

    @staticmethod
    def _geometry(node: Node, xs: Shape) -> tuple[PoolParams, int, int, int, int]:
        """(params, out_h, out_w, pad_top, pad_left): TFLite's ComputePadding with the roles of in and out
        swapped, as MediaPipe's kernel computes it."""
        p = _pool_params(node)
        oh, ow = xs[1] * p.kh, xs[2] * p.kw
        return p, oh, ow, pad_before(oh, p.kh, p.sh, 1, xs[1]), pad_before(ow, p.kw, p.sw, 1, xs[2])

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, idx = required(node, shapes, 0), required(node, shapes, 1)
        if tuple(xs) != tuple(idx):
            raise ModelError(f"{node}: input {list(xs)} and indices {list(idx)} must have one shape")
        _, oh, ow, _, _ = MaxUnpooling2D._geometry(node, xs)
        return [(xs[0], oh, ow, xs[3])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, idx = (np.ascontiguousarray(required(node, inputs, k), np.float32) for k in (0, 1))
        MaxUnpooling2D.infer(node, graph, [x.shape, idx.shape])
        p, oh, ow, pt, pl = MaxUnpooling2D._geometry(node, x.shape)
        return [K.max_unpool(x, idx, p.kh, p.kw, p.sh, p.sw, pt, pl, oh, ow)]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, idx, dst = ctx.input(node, 0), ctx.input(node, 1), ctx.output(node, 0)
        p, _, _, pt, pl = MaxUnpooling2D._geometry(node, ctx.shape(src))
        defines: Defines = {"KH": p.kh, "KW": p.kw, "SH": p.sh, "SW": p.sw, "PT": pt, "PL": pl}
        inputs = {"src": src, "indices": idx}
        consts = {}
        if ctx.is_const(idx):
            consts["indices"] = ctx.const_tensor("unpool_idx", idx)
            del inputs["indices"]
        ctx.kernel("max_unpool", inputs, {"dst": dst}, consts, defines, grid=ctx.grid(dst))


# -- the face landmark model's crop transform --------------------------------------------------------------------

@dataclass(frozen=True)
class MatrixParams:
    subset: list[int]  # landmark indices whose box the crop holds (pairs flattened; an odd last one doubled)
    left: int
    right: int
    # version 2
    target: float = 0.0
    out_hw: tuple[int, int] = (1, 1)
    scale_xy: tuple[float, float] = (1.0, 1.0)
    # version 1
    multiplier: float = 1.0
    landmarks_range: int = 1
    in_hw: tuple[int, int] = (1, 1)


def _matrix_params(node: Node) -> MatrixParams:
    o = _flex(node)
    left, right = _option(node, o, "left_rotation_idx", int), _option(node, o, "right_rotation_idx", int)
    if _version(node) == 2:
        subset = _option(node, o, "subset_idxs", int)
        p = MatrixParams(subset, left, right,
                         _option(node, o, "target_rotation_radians", float),
                         (_option(node, o, "output_height", int), _option(node, o, "output_width", int)),
                         (_option(node, o, "scale_x", float), _option(node, o, "scale_y", float)))
        if min(p.out_hw) <= 0 or min(p.scale_xy) <= 0:
            raise ModelError(f"{node}: output size {p.out_hw} and scales {p.scale_xy} must be positive")
    else:
        if _option(node, o, "dimensions", int) != 3:
            raise ModelError(f"{node}: version 1 takes 3-D landmarks (dimensions 3)")
        in_hw, out_hw = _option(node, o, "input_hw", int), _option(node, o, "output_hw", int)
        subset = _option(node, o, "subset", int)
        p = MatrixParams(subset, left, right, multiplier=_option(node, o, "bbox_size_multiplier", float),
                         landmarks_range=_option(node, o, "landmarks_range", int),
                         in_hw=(in_hw[0], in_hw[1]), out_hw=(out_hw[0], out_hw[1]))
        if p.multiplier == 0 or p.landmarks_range <= 0 or min(*p.in_hw, *p.out_hw) <= 0:
            raise ModelError(f"{node}: bbox_size_multiplier, landmarks_range, input_hw and output_hw must be "
                             "positive")
    if not subset:
        raise ModelError(f"{node}: the landmark subset is empty")
    if len(subset) % 2:
        subset = [*subset, subset[-1]]
    return MatrixParams(**{**p.__dict__, "subset": list(subset)})


@register
class Landmarks2TransformMatrix(Op):
    """Landmarks [1, N, 3] (version 2; version 1: [1, 1, 1, 3N]) -> the 4x4 matrix [1, 4, 4] taking pixels of the
    crop around a subset of them to input coordinates."""

    name, max_version = "Landmarks2TransformMatrix", 2

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        _float_tensors(node, graph)
        shape = graph.tensors[node.inputs[0]].shape
        p = _matrix_params(node)
        if node.version == 2:
            _rank(node, shape, 3, "the landmarks")
            count = shape[0] * shape[1] if shape[2] == 3 else -1
        else:
            _rank(node, shape, 4, "the landmarks")
            count = shape[3] // 3 if shape[:3] == (1, 1, 1) and shape[3] % 3 == 0 else -1
        if count < 0:
            raise ModelError(f"{node}: landmarks of shape {list(shape)} are not 3-D points")
        used = [*p.subset, p.left, p.right]
        if min(used) < 0 or max(used) >= count:
            raise ModelError(f"{node}: landmark indices {min(used)}..{max(used)} fall outside the {count} landmarks")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        return [(1, 4, 4)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        p = _matrix_params(node)
        if node.version == 2:
            return [K.landmarks_to_matrix_v2(x, p.subset, p.left, p.right, p.target, p.out_hw, p.scale_xy)]
        return [K.landmarks_to_matrix_v1(x, p.subset, p.left, p.right, p.multiplier, p.landmarks_range, p.in_hw,
                                         p.out_hw)]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node)
        p = _matrix_params(node)
        def subset_rows() -> np.ndarray:
            rows = np.zeros(-(-len(p.subset) // 4) * 4, np.float32)
            rows[:len(p.subset)] = p.subset
            return rows

        key = ctx.const(f"landmark_subset:{node.index}", subset_rows, fp32=True)
        defines: Defines = {"VERSION": node.version, "PACKED": int(node.version == 1), "N_SUBSET": len(p.subset),
                            "LEFT": p.left, "RIGHT": p.right, "TARGET": p.target, "OUT_H": p.out_hw[0],
                            "OUT_W": p.out_hw[1], "SCALE_X": p.scale_xy[0], "SCALE_Y": p.scale_xy[1],
                            "MULTIPLIER": p.multiplier, "LANDMARKS_RANGE": float(p.landmarks_range),
                            "IN_H": p.in_hw[0], "IN_W": p.in_hw[1]}
        ctx.keep_fp32(dst)
        ctx.kernel("landmarks_to_matrix", {"src": src}, {"dst": dst}, {"subset": key}, defines, grid=(1, 1, 1))


@register
class TransformLandmarks(Op):
    """Landmarks through a 4x4 matrix: x, y of each landmark (its ``dimensions`` coordinates along the last
    axis: version 2 reads them from the shape, version 1 from its options, with a ``scale`` on the translation)
    map to the matrix's first two rows applied to (x, y, 0, 1); z passes."""

    name, max_version = "TransformLandmarks", 2

    @staticmethod
    def _dims(node: Node, shape: Shape) -> tuple[int, float]:
        """(dimensions, scale)."""
        if _version(node) == 2:
            dims, scale = shape[-1], 1.0
        else:
            o = _flex(node)
            dims, scale = _option(node, o, "dimensions", int), _option(node, o, "scale", float)
            if scale == 0:
                raise ModelError(f"{node}: scale must not be 0")
        if dims not in (2, 3) or shape[-1] % dims:
            raise ModelError(f"{node}: landmarks of shape {list(shape)} do not hold {dims}-D points (2 or 3)")
        return dims, scale

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _float_tensors(node, graph)
        shape = graph.tensors[node.inputs[0]].shape
        _rank(node, shape, 3 if _version(node) == 2 else 4, "the landmarks")
        TransformLandmarks._dims(node, shape)
        _matrix(node, graph, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        return [required(node, shapes, 0)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, m = required(node, inputs, 0), required(node, inputs, 1)
        dims, scale = TransformLandmarks._dims(node, x.shape)
        return [K.transform_landmarks(x, m, dims, scale)]

    gpu_support = staticmethod(_matrix_gpu_support)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, m, dst = ctx.input(node, 0), ctx.input(node, 1), ctx.output(node)
        dims, scale = TransformLandmarks._dims(node, ctx.shape(src))
        inputs, consts = _matrix_arg(ctx, {"src": src}, m)
        ctx.kernel("transform_landmarks", inputs, {"dst": dst}, consts, {"DIMS": dims, "SCALE": scale},
                   grid=ctx.grid(dst))


def _matrix_arg(ctx: LowerContext, inputs: dict[str, int], m: int) -> tuple[dict[str, int], dict[str, str]]:
    """The kernels read the matrix's rows as vec4 0 and 1 of argument ``m``: a tensor (kept in float32: its
    translation, in pixels, would move by up to a sixteenth of one in fp16), or a constant buffer."""
    if ctx.is_const(m):
        return inputs, {"m": ctx.const(f"transform:{m}", lambda: ctx.const_value(_node(ctx), m).reshape(-1, 4),
                                       fp32=True)}
    ctx.keep_fp32(m)
    return {**inputs, "m": m}, {}


def _node(ctx: LowerContext) -> Node:
    if ctx.node is None:
        raise ModelError("a transform matrix was asked for outside any node's lowering")
    return ctx.node


@register
class TransformTensorBilinear(Op):
    """Resample x [1, H, W, C] at the matrix's image of each output pixel, bilinearly, zero outside; version 2
    (align corners: pixel centers) takes output_height / output_width, version 1 output_size."""

    name, max_version = "TransformTensorBilinear", 2
    aliases = ("TransformTensor",)

    @staticmethod
    def _out_hw(node: Node) -> tuple[int, int]:
        o = _flex(node)
        if _version(node) == 2:
            hw = (_option(node, o, "output_height", int), _option(node, o, "output_width", int))
        else:
            if o.get("mode", "bilinear") != "bilinear":
                raise ModelError(f"{node}: mode {o.get('mode')!r}: only bilinear interpolation exists")
            size = _option(node, o, "output_size", int)
            if len(size) != 2:
                raise ModelError(f"{node}: output_size must hold height and width, holds {size}")
            hw = (size[0], size[1])
        if min(hw) <= 0:
            raise ModelError(f"{node}: output size {hw} must be positive")
        return hw

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        _float_tensors(node, graph)
        shape = graph.tensors[node.inputs[0]].shape
        _rank(node, shape, 4, "the input")
        if shape[0] != 1:
            raise ModelError(f"{node}: the input must have batch 1 (one matrix), has shape {list(shape)}")
        _matrix(node, graph, 1)
        TransformTensorBilinear._out_hw(node)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs = required(node, shapes, 0)
        return [(1, *TransformTensorBilinear._out_hw(node), xs[3])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x, m = required(node, inputs, 0), required(node, inputs, 1)
        return [K.transform_tensor_bilinear(np.asarray(x, np.float32), m, TransformTensorBilinear._out_hw(node),
                                            node.version == 2)]

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        return 4 * graph.tensors[node.outputs[0]].size

    gpu_support = staticmethod(_matrix_gpu_support)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, m, dst = ctx.input(node, 0), ctx.input(node, 1), ctx.output(node)
        inputs, consts = _matrix_arg(ctx, {"src": src}, m)
        ctx.kernel("transform_tensor_bilinear", inputs, {"dst": dst}, consts, {"ALIGN_CORNERS": node.version == 2},
                   grid=ctx.grid(dst))
