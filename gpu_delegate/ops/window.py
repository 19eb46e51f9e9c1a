"""What the window ops (convolutions, pooling) share: their window attributes, fused activation, and the
GPU support check for inputs that must be constants."""

from __future__ import annotations

import numpy as np

from ..cpu import conv as K
from ..errors import ModelError
from ..graph import PADDING_SAME, PADDING_VALID, Graph, Node
from .base import Defines, Op


def activation(node: Node) -> int:
    code = int(node.attrs.get("fused_activation_function", 0))
    if not 0 <= code <= 5:
        raise ModelError(f"{node}: unknown fused_activation_function {code}")
    return code


def window_attrs(node: Node) -> tuple[int, int, int, int, int]:
    """(padding, stride_h, stride_w, dilation_h, dilation_w) from the options, validated."""
    a = node.attrs
    padding = int(a.get("padding", PADDING_SAME))
    if padding not in (PADDING_SAME, PADDING_VALID):
        raise ModelError(f"{node}: unknown padding {padding} (0 = SAME, 1 = VALID)")
    sh, sw = int(a.get("stride_h", 0)), int(a.get("stride_w", 0))
    dh, dw = int(a.get("dilation_h_factor", 1)), int(a.get("dilation_w_factor", 1))
    if sh < 1 or sw < 1:
        raise ModelError(f"{node}: strides must be >= 1, got stride_h={sh} stride_w={sw}")
    if dh < 1 or dw < 1:
        raise ModelError(f"{node}: dilation factors must be >= 1, got {dh}, {dw}")
    return padding, sh, sw, dh, dw


def need_window(node: Node, win: K.Window) -> K.Window:
    if win.oh < 1 or win.ow < 1:
        raise ModelError(f"{node}: the window leaves an empty output ({win.oh}x{win.ow})")
    return win


def act_defines(code: int) -> Defines:
    """The fused activation as the kernels' ACT / ACT_MIN / ACT_MAX: TFLite's float clamp (TANH and SIGN_BIT
    are ignored by its conv, fully-connected and pool kernels, and so here)."""
    lo, hi = K.float_range(code)
    if np.isinf(lo) and np.isinf(hi):
        return {"ACT": 0}
    return {"ACT": 1, "ACT_MIN": float(lo), "ACT_MAX": float(hi)}


MAX_GPU_DILATION = 4096


def gpu_check(op: type[Op], node: Node, graph: Graph, consts: dict[int, str]) -> bool | str:
    """The op's own validation and the inputs that must be constants on the GPU (or DEQUANTIZE / DENSIFY
    of constants, which lowering folds): input slot -> what it is."""
    try:
        op.check(node, graph)
    except ModelError as e:
        return str(e)
    for i, what in consts.items():
        t = node.inputs[i] if i < len(node.inputs) else -1
        if t >= 0 and not graph.constant_like(t):
            return f"the {what} (input {i}) is computed at run time; the GPU path takes constant {what}s only"
    dilation = max(int(node.attrs.get("dilation_h_factor", 1)), int(node.attrs.get("dilation_w_factor", 1)))
    if dilation > MAX_GPU_DILATION:
        # a tap's offset (kernel size x dilation) must stay far inside the kernels' int32 index arithmetic
        return f"dilation {dilation} (the GPU path takes at most {MAX_GPU_DILATION})"
    return True
