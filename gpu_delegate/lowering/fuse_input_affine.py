"""A float convolution's input scaled and shifted by constants (MUL, ADD, SUB, DIV of a scalar or a per-channel vector)
folded into the convolution: its weights times the scale, its bias plus the weights times the shift, and the
padding it reads outside its input the value the shift maps to 0.

An image model's preprocessing does this to its input: Keras' Rescaling(1/127.5, offset=-1) in MobileNetV3 and
EfficientNet is a MUL and an ADD, a normalization (x - mean) / std a SUB and a DIV. Left alone the chain is a copy
kernel over the whole image (MobileNetV3Small at 160x160, PoCL: 88 us) that also keeps the input in PHWC4 (its
conversion: 75 us more, where dense_inputs.py then lets the convolution read it as the host wrote it).

conv(A x + B) with zero padding equals conv'(x) with w' = A w, bias' = bias + sum(w B) over the window, where the
padding reads x = -B / A (the value A x + B maps to 0): kernels/opencl/conv2d.cl reads lane k of a pixel outside
its input as PADV<k> under SRC_PAD (ops/conv.py sets both from ``view.input_affine``). A 1x1 convolution at stride
1 without padding needs no padding value.

Declined (with the reason) unless: the API is OpenCL (conv2d.cl); the convolution is float32 of constant weights and
bias, one group; every step is float32 without a fused activation, a constant operand of one value or one per
input channel, the variable one the first of a SUB or DIV; each step's output is read by the next step alone and
leaves the partition nowhere; the scale is nowhere 0; where the convolution pads, its padding values are one for all
channels or the input has at most 4 channels (PADV0..PADV3).
"""

from __future__ import annotations

import numpy as np

from ..graph import ACT_NONE, PADDING_SAME
from .view import PartitionView, PassResult

STEPS = ("MUL", "ADD", "SUB", "DIV")


def run(view: PartitionView, api: str) -> PassResult:
    result = PassResult("fuse_input_affine")
    if api != "OpenCL":
        return result
    graph = view.graph
    readers, outputs = view.readers(), set(view.outputs)
    writer = {t: n for n in view.nodes for t in graph.nodes[n].outputs}
    dropped: set[int] = set()
    for c in view.nodes:
        conv = graph.nodes[c]
        if conv.op != "CONV_2D" or c in dropped:
            continue
        ins = view.node_inputs(c)
        if not _float_conv_of_constants(view, ins):
            continue
        channels = int(view.shapes[ins[0]][-1])
        scale, shift = np.ones(channels), np.zeros(channels)
        chain: list[int] = []
        x = ins[0]
        while True:
            n = writer.get(x)
            if n is None or readers.get(x) != [chain[-1] if chain else c] or x in outputs:
                break
            step = _step(view, n, x, channels)
            if isinstance(step, str):
                if graph.nodes[n].op in STEPS:
                    result.declined.append(f"{graph.nodes[n]} into {conv}: {step}")
                break
            a, b, x = step
            scale, shift = scale * a, scale * b + shift  # the new step runs first: A (a x + b) + B
            chain.append(n)
        if not chain:
            continue
        why_not = _fold_why_not(view, c, scale, shift)
        if why_not:
            result.declined.append(f"{', '.join(str(graph.nodes[n]) for n in chain)} into {conv}: {why_not}")
            continue
        view.read_as[(c, 0)] = x
        view.input_affine[c] = (scale, shift)
        for n in chain:
            readers.pop(graph.nodes[n].outputs[0], None)
        readers[x] = [r for r in readers.get(x, []) if r not in chain] + [c]
        dropped.update(chain)
        result.applied.append(f"{', '.join(str(graph.nodes[n]) for n in reversed(chain))} into the weights of {conv}")
    view.nodes = [n for n in view.nodes if n not in dropped]
    return result


def _float_conv_of_constants(view: PartitionView, ins: list[int]) -> bool:
    """Whether a CONV_2D of inputs ``ins`` is a float convolution of one group with constant weights and bias."""
    x = view.graph.tensors[ins[0]]
    return x.dtype == np.float32 and x.quant is None and view.is_const(ins[1]) and \
        (len(ins) < 3 or ins[2] < 0 or view.is_const(ins[2])) and view.shapes[ins[1]][-1] == view.shapes[ins[0]][-1]


def _step(view: PartitionView, n: int, out: int, channels: int) -> tuple[np.ndarray, np.ndarray, int] | str:
    """(a, b, x): node ``n`` writes ``out`` = a x + b per channel, or why it is no such step."""
    graph = view.graph
    node = graph.nodes[n]
    if node.op not in STEPS:
        return f"a {node.op}"
    if int(node.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
        return "it has a fused activation"
    ins = view.node_inputs(n)
    if len(ins) != 2 or any(graph.tensors[t].dtype != np.float32 or graph.tensors[t].quant is not None
                            for t in (*ins, out)):
        return "not float32"
    consts = [view.is_const(t) for t in ins]
    if consts.count(True) != 1:
        return "not one constant operand"
    k = consts.index(True)
    x = ins[1 - k]
    if tuple(view.shapes[x]) != tuple(view.shapes[out]):
        return "its constant broadcasts the variable operand"
    value = np.asarray(view.const(ins[k]), np.float64)
    if value.size not in (1, channels) or (value.size > 1 and value.shape[-1] != channels):
        return "its constant is not one value or one per channel"
    v = np.broadcast_to(value.reshape(-1), (channels,))
    one, zero = np.ones(channels), np.zeros(channels)
    if node.op == "MUL":
        return v, zero, x
    if node.op == "ADD":
        return one, v, x
    if k == 0:
        return ("the constant is divided by the variable" if node.op == "DIV" else (-one, v, x))
    return (one, -v, x) if node.op == "SUB" else (1.0 / v, zero, x)


def _fold_why_not(view: PartitionView, c: int, scale: np.ndarray, shift: np.ndarray) -> str:
    if not np.all(np.isfinite(scale)) or not np.all(np.isfinite(shift)) or np.any(scale == 0):
        return "a scale of 0 or a value that is not finite"
    pad = -shift / scale
    if scale.size > 4 and np.any(pad != pad[0]) and _pads(view, c):
        return f"a convolution that pads reads {scale.size} channels of different padding values"
    return ""


def _pads(view: PartitionView, c: int) -> bool:
    """Whether convolution ``c`` may read outside its input (SAME padding, a merged PAD)."""
    node = view.graph.nodes[c]
    w = view.shapes[view.node_inputs(c)[1]]
    return (node.attrs.get("padding", PADDING_SAME) == PADDING_SAME and tuple(w[1:3]) != (1, 1)) or \
        c in view.extra_padding
