"""The convolution family on the GPU (OpenCL and OpenGL ES) against LiteRT: CONV_2D (windows, strides,
dilation, every fused activation, groups, batch 2), DEPTHWISE_CONV_2D (depth multipliers), TRANSPOSE_CONV,
FULLY_CONNECTED (pixel rows and rows that cut across pixels, keep_num_dims), BATCH_MATMUL (two computed
operands, broadcast batches, adjoints, a constant right side), AVERAGE/MAX_POOL_2D, a PAD merged into the
convolution that reads it, elementwise ops fused into a convolution, int8 models against TFLite's reference
kernels, fp16 storage; MediaPipe's Convolution2DTransposeBias against a numpy formula (LiteRT lacks it).

Each model fans out or chains many ops so that one model covers many cases: a kernel compiles once per
distinct shape. Channel counts are odd (3, 5, 7, 13) so that last slices are partial, and spatial sizes
leave partial blocks of pixels. Every test asserts that each node ran on the backend under test.
"""

from __future__ import annotations

import struct

import numpy as np

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, on_cpu_opencl, plan_of, run, run_litert
from .reference import shared_delegate as delegate

I32 = np.int32


class Builder:
    """A model built op by op over named tensors; constants are given as arrays. ``no_bias`` omits an
    optional bias in our model but gives LiteRT's (which refuses an omitted CONV_2D bias) a zero one."""

    def __init__(self):
        self.mb = ModelBuilder()
        self.ids: dict[str, int] = {}
        self.feeds: list[np.ndarray] = []
        self.rng = np.random.default_rng(0)
        self.zero_biases: dict[tuple[int, int], int] = {}  # (op, input slot) -> zero constant

    def no_bias(self, channels: int) -> tuple[str, int]:
        return ("no_bias", self.const(np.zeros(channels, np.float32)))

    def input(self, name: str, shape, dtype=np.float32, q=None) -> str:
        self.ids[name] = self.mb.input(name, shape, dtype, **self._quant(q))
        if np.dtype(dtype) == np.float32:
            self.feeds.append(self.rng.standard_normal(shape).astype(np.float32))
        else:
            info = np.iinfo(dtype)
            self.feeds.append(self.rng.integers(info.min, info.max + 1, shape).astype(dtype))
        return name

    def const(self, value, dtype=None, q=None) -> int:
        value = np.asarray(value, dtype)
        return self.mb.tensor(f"c{len(self.mb.tensors)}", value.shape, value.dtype, data=value, **self._quant(q))

    def weights(self, shape) -> int:
        return self.const(self.rng.standard_normal(shape).astype(np.float32))

    def op(self, op: str, ins: list, out: str, shape, dtype=np.float32, q=None, output: bool = True,
           custom_options: bytes | None = None, version: int = 1, **opts) -> str:
        for slot, x in enumerate(ins):
            if isinstance(x, tuple):
                self.zero_biases[len(self.mb.ops), slot] = x[1]
        args = [self.ids[x] if isinstance(x, str) else -1 if isinstance(x, tuple) else x for x in ins]
        self.ids[out] = self.mb.tensor(out, shape, dtype, **self._quant(q))
        self.mb.op(op, args, [self.ids[out]], custom_options=custom_options, version=version, **opts)
        if output:
            self.mb.output(self.ids[out])
        return out

    @staticmethod
    def _quant(q) -> dict:
        if q is None:
            return {}
        scale, zp = q[0], q[1]
        return {"scale": scale, "zero_point": zp, "axis": q[2] if len(q) > 2 else 0}

    def build(self, reference: bool = False) -> bytes:
        if not reference:
            return self.mb.build()
        ops = list(self.mb.ops)
        for (k, slot), t in self.zero_biases.items():
            op = ops[k]
            ops[k] = (op[0], [t if j == slot else i for j, i in enumerate(op[1])], *op[2:])
        ours, self.mb.ops = self.mb.ops, ops
        try:
            return self.mb.build()
        finally:
            self.mb.ops = ours


def out_len(size: int, k: int, stride: int, padding: str, dilation: int = 1) -> int:
    eff = (k - 1) * dilation + 1
    return -(-size // stride) if padding == "SAME" else (size - eff) // stride + 1


def run_gpu(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False):
    """Our interpreter with the GPU delegate; every node must have run on ``backend``."""
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, fp16)])
    outs = run(it, inputs)
    off = [(d["index"], d["op_name"], d["backend"]) for d in it.get_ops_details() if d["backend"] != backend]
    assert not off, f"nodes not on {backend}: {off}; why: {it.cpu_reasons()}"
    return it, outs


def check_float(b: Builder, backend: str, fp16: bool = False):
    ref = run_litert(b.build(reference=True), b.feeds)
    it, outs = run_gpu(b.build(), b.feeds, backend, fp16)
    names = [b.mb.tensors[t]["name"] for t in b.mb.outputs]
    for name, o, r in zip(names, outs, ref, strict=True):
        assert_float_close(o, r, 2e-2 if fp16 else 1e-4, what=f"{name} on {backend}{' fp16' if fp16 else ''}")
    return it


def plan_notes(it: gd.Interpreter) -> list[str]:
    return plan_of(it).notes


def conv(b: Builder, x: str, out: str, cin: int, hw: tuple, cout: int, k: tuple, stride: int, padding: str,
         dilation: int = 1, act: str = "NONE", bias: bool = True, n: int = 2, groups: int = 1,
         output: bool = True) -> str:
    oh = out_len(hw[0], k[0], stride, padding, dilation)
    ow = out_len(hw[1], k[1], stride, padding, dilation)
    w = b.weights([cout, *k, cin // groups])
    bias_t = b.weights([cout]) if bias else b.no_bias(cout)
    return b.op("CONV_2D", [x, w, bias_t], out, [n, oh, ow, cout], padding=padding, stride_h=stride,
                stride_w=stride, dilation_h_factor=dilation, dilation_w_factor=dilation,
                fused_activation_function=act, output=output)


def depthwise(b: Builder, x: str, out: str, c: int, hw: tuple, mult: int, k: int, stride: int, padding: str,
              dilation: int = 1, act: str = "NONE", bias: bool = True, n: int = 2, output: bool = True) -> str:
    oh, ow = (out_len(s, k, stride, padding, dilation) for s in hw)
    w = b.weights([1, k, k, c * mult])
    bias_t = b.weights([c * mult]) if bias else b.no_bias(c * mult)
    return b.op("DEPTHWISE_CONV_2D", [x, w, bias_t], out, [n, oh, ow, c * mult], padding=padding,
                stride_h=stride, stride_w=stride, dilation_h_factor=dilation, dilation_w_factor=dilation,
                depth_multiplier=mult, fused_activation_function=act, output=output)


def test_conv_and_depthwise(backend):
    """Every window kind of conv2d / conv2d_1x1 / depthwise_conv2d on a batch of 2 with 5 channels."""
    b = Builder()
    x = b.input("x", [2, 9, 11, 5])
    hw = (9, 11)
    conv(b, x, "c3x3_same_relu", 5, hw, 7, (3, 3), 1, "SAME", act="RELU")
    conv(b, x, "c3x3_valid_s2_relu6_nobias", 5, hw, 13, (3, 3), 2, "VALID", act="RELU6", bias=False)
    conv(b, x, "c1x1_relu_n1_to_1", 5, hw, 3, (1, 1), 1, "SAME", act="RELU_N1_TO_1")
    conv(b, x, "c2x3_dilated_tanh", 5, hw, 5, (2, 3), 1, "SAME", dilation=2, act="TANH")
    conv(b, x, "c1x1_s2_sign_bit", 5, hw, 13, (1, 1), 2, "VALID", act="SIGN_BIT")
    conv(b, x, "c5x5_s2", 5, hw, 4, (5, 5), 2, "SAME")
    conv(b, x, "c3x3_valid_dilated", 5, hw, 17, (3, 3), 1, "VALID", dilation=2)
    g = b.input("g", [2, 9, 11, 6])
    conv(b, g, "grouped_3", 6, hw, 9, (3, 3), 1, "SAME", groups=3, act="RELU")
    # one input channel a group (ConvNeXt's depthwise layers): run as depthwise convolutions
    conv(b, g, "grouped_depthwise_7x7", 6, hw, 6, (7, 7), 1, "SAME", groups=6)
    conv(b, g, "grouped_depthwise_mult2_s2_relu6", 6, hw, 12, (3, 3), 2, "VALID", groups=6, act="RELU6", bias=False)
    depthwise(b, x, "dw3x3_relu6", 5, hw, 1, 3, 1, "SAME", act="RELU6")
    depthwise(b, x, "dw3x3_s2_mult2", 5, hw, 2, 3, 2, "VALID", bias=False)
    depthwise(b, x, "dw3x3_dilated_relu", 5, hw, 1, 3, 1, "SAME", dilation=2, act="RELU")
    depthwise(b, x, "dw5x5_s2_mult3", 5, hw, 3, 5, 2, "SAME", act="RELU_N1_TO_1")
    big = b.input("big", [1, 300, 450, 3])  # 16875 blocks of 8 pixels: a second row of work items
    conv(b, big, "c1x1_many_pixels", 3, (300, 450), 5, (1, 1), 1, "VALID", n=1)
    # 37 channels: 2 or 3 blocks of output slices (8 or 4 slices each), taken fastest in the work items' order
    # (BLOCKS_INNER), across rows
    conv(b, big, "c1x1_many_pixels_blocks_inner", 3, (300, 450), 37, (1, 1), 1, "VALID", n=1)
    it = check_float(b, backend)
    inner = [c.outputs["dst"] for c in plan_of(it).kernels if c.defines.get("BLOCKS_INNER")]
    assert [b.mb.tensors[t]["name"] for t in inner] == ["c1x1_many_pixels_blocks_inner"]
    kernels = {b.mb.tensors[c.outputs["dst"]]["name"]: c.kernel for c in plan_of(it).kernels}
    assert kernels["grouped_depthwise_7x7"] == kernels["grouped_depthwise_mult2_s2_relu6"] == "depthwise_conv2d"


def test_wide_rows(backend):
    """Rows wide enough that work items lie wholly inside the input (OpenCL's depthwise takes those 4 pixels
    at a time, its conv2d drops masks and clamps there) beside the edge ones: strides 1 and 2, dilation, a
    5x5 window, 10 input channels (a partial last slice), fused post-ops on a depthwise and a 1x1 conv
    (applied to 4 vec4 at once, or one by one), fp32 and fp16 storage."""
    for fp16 in (False, True):
        b = Builder()
        hw = (5, 41)
        x = b.input("x", [1, *hw, 10])
        depthwise(b, x, "dw3x3_same_relu6", 10, hw, 1, 3, 1, "SAME", act="RELU6", n=1)
        depthwise(b, x, "dw3x3_s2_same", 10, hw, 1, 3, 2, "SAME", n=1)
        depthwise(b, x, "dw3x3_s2_valid_nobias", 10, hw, 1, 3, 2, "VALID", bias=False, n=1)
        depthwise(b, x, "dw3x3_dilated", 10, hw, 1, 3, 1, "SAME", dilation=2, n=1)
        depthwise(b, x, "dw5x5_valid", 10, hw, 1, 5, 1, "VALID", n=1)
        conv(b, x, "c3x3_s2_same", 10, hw, 7, (3, 3), 2, "SAME", n=1)
        conv(b, x, "c3x3_valid_relu6", 10, hw, 9, (3, 3), 1, "VALID", act="RELU6", n=1)
        depthwise(b, x, "dw_to_add", 10, hw, 1, 3, 1, "SAME", n=1, output=False)
        y = b.input("y", [1, *hw, 10])
        b.op("ADD", ["dw_to_add", y], "dw_plus_y", [1, *hw, 10])
        # post-ops a wide store applies to 4 vec4 at once (ADD, RELU) and one it takes a vec4 at a time
        conv(b, x, "c1x1_to_add", 10, hw, 10, (1, 1), 1, "VALID", n=1, output=False)
        b.op("ADD", [y, "c1x1_to_add"], "y_plus_c1x1", [1, *hw, 10], fused_activation_function="RELU")
        depthwise(b, x, "dw_to_leaky", 10, hw, 1, 3, 1, "SAME", n=1, output=False)
        b.op("LEAKY_RELU", ["dw_to_leaky"], "dw_leaky", [1, *hw, 10], alpha=0.3)
        notes = plan_notes(check_float(b, backend, fp16=fp16))
        for op in ("(ADD)", "(LEAKY_RELU)"):
            assert sum(n.startswith("fused") and op in n for n in notes) >= 1, notes


def chain(b: Builder) -> None:
    """PAD -> VALID conv (merged) -> + y -> RELU (both fused into the conv) -> PAD -> VALID depthwise
    (merged) -> 1x1 conv -> MAX_POOL -> FULLY_CONNECTED over the flattened pixels."""
    x = b.input("x", [1, 8, 9, 13])
    b.op("PAD", [x, b.const(np.array([[0, 0], [1, 1], [2, 1], [0, 0]], I32))], "padded", [1, 10, 12, 13],
         output=False)
    conv(b, "padded", "conv", 13, (10, 12), 7, (3, 3), 1, "VALID", n=1, output=False)
    y = b.input("y", [1, 8, 10, 7])
    b.op("ADD", ["conv", y], "sum", [1, 8, 10, 7], output=False)
    b.op("RELU", ["sum"], "relu", [1, 8, 10, 7])
    b.op("PAD", ["relu", b.const(np.array([[0, 0], [1, 1], [1, 1], [0, 0]], I32))], "padded2", [1, 10, 12, 7],
         output=False)
    depthwise(b, "padded2", "dw", 7, (10, 12), 1, 3, 1, "VALID", n=1, output=False)
    conv(b, "dw", "pointwise", 7, (8, 10), 5, (1, 1), 1, "VALID", act="RELU6", n=1, output=False)
    b.op("MAX_POOL_2D", ["pointwise"], "pool", [1, 4, 5, 5], padding="VALID", stride_h=2, stride_w=2,
         filter_height=2, filter_width=2, output=False)
    b.op("FULLY_CONNECTED", ["pool", b.weights([3, 100]), b.weights([3])], "fc", [1, 3])


def test_merged_pad_and_fused_elementwise(backend):
    b = Builder()
    chain(b)
    notes = plan_notes(check_float(b, backend))
    assert any(n.startswith("merged") and "CONV_2D" in n for n in notes), notes
    assert any(n.startswith("merged") and "DEPTHWISE_CONV_2D" in n for n in notes), notes
    assert any(n.startswith("fused") and "(ADD)" in n for n in notes), notes
    assert any(n.startswith("fused") and "(RELU)" in n for n in notes), notes


def test_causal_conv1d_pads_merged(backend):
    """Keras Conv1D(padding="causal") as the converter writes it: PAD of the rank-3 [B, T, C] (T is W of its BHWC
    form), RESHAPE to [B, 1, T + pad, C], VALID CONV_2D with a 1 x 3 window (dilations 1 and 2) or a grouped one of
    one channel a group (a depthwise layer); each PAD merged into its convolution, which reads the unpadded tensor.
    Batch 1: [B, T, C] is then stored as the convolution's [B, 1, T, C] is (a batch of 2 would need the reshape)."""
    b = Builder()
    x = b.input("x", [1, 20, 6])
    for name, dilation, groups in (("causal", 1, 1), ("causal_dilated", 2, 1), ("causal_depthwise", 2, 6)):
        pad = 2 * dilation
        padded = b.op("PAD", [x, b.const(np.array([[0, 0], [pad, 0], [0, 0]], I32))], f"{name}_padded",
                      [1, 20 + pad, 6], output=False)
        rows = b.op("RESHAPE", [padded, b.const(np.array([1, 1, 20 + pad, 6], I32))], f"{name}_rows",
                    [1, 1, 20 + pad, 6], output=False)
        cout = 6 if groups > 1 else 5
        out = b.op("CONV_2D", [rows, b.weights([cout, 1, 3, 6 // groups]), b.weights([cout])], name,
                   [1, 1, 20, cout], padding="VALID", stride_h=1, stride_w=1, dilation_h_factor=1,
                   dilation_w_factor=dilation, fused_activation_function="RELU", output=False)
        b.op("RESHAPE", [out, b.const(np.array([1, 20, cout], I32))], f"{name}_out", [1, 20, cout])
    it = check_float(b, backend)
    assert "pad" not in [c.kernel for c in plan_of(it).kernels], plan_notes(it)
    assert sum(n.startswith("merged") for n in plan_notes(it)) == 3, plan_notes(it)


def test_inputs_read_dense(backend):
    """On OpenCL an input that convolutions alone read is written as the host has it and read in that dense order
    (lowering/dense_inputs.py): channels past a slice (5, batch 2), a reshape dropped before it (an audio model's
    [1, T, 1]), grouped slices, a 1x1 convolution and a FULLY_CONNECTED; fp16 storage around it. On a CPU's OpenCL
    an elementwise op's copy kernel reads one so too (4 pixels at a time, a row's last 2 one by one; one or three
    channels' through steps of the value alone, as a TANH's, on 4 pixels' values at once). An input that an ADD reads
    twice (the copy's source and its post-op's operand) stays PHWC4. GL converts them all."""
    for fp16 in (False, True):
        b = Builder()
        x = b.input("x", [2, 9, 11, 5])
        conv(b, x, "x_3x3_relu", 5, (9, 11), 7, (3, 3), 1, "SAME", act="RELU")
        conv(b, x, "x_3x3_s2", 5, (9, 11), 6, (3, 3), 2, "VALID")
        conv(b, x, "x_1x1", 5, (9, 11), 9, (1, 1), 1, "VALID")
        audio = b.input("audio", [1, 37, 1])
        b.op("RESHAPE", [audio, b.const(np.array([1, 1, 37, 1], I32))], "audio_rows", [1, 1, 37, 1], output=False)
        b.op("CONV_2D", ["audio_rows", b.weights([8, 1, 9, 1]), b.weights([8])], "audio_conv", [1, 1, 8, 8],
             padding="VALID", stride_h=1, stride_w=4, dilation_h_factor=1, dilation_w_factor=1,
             fused_activation_function="RELU")
        g = b.input("g", [1, 7, 6, 8])
        conv(b, g, "g_grouped", 8, (7, 6), 8, (3, 3), 1, "SAME", groups=2, n=1)
        f = b.input("f", [3, 7])
        b.op("FULLY_CONNECTED", [f, b.weights([4, 7]), b.weights([4])], "f_fc", [3, 4])
        y = b.input("y", [1, 7, 6, 8])
        conv(b, y, "y_1x1", 8, (7, 6), 5, (1, 1), 1, "VALID", n=1)
        b.op("ADD", [y, y], "y_twice", [1, 7, 6, 8])
        e = b.input("e", [2, 5, 10, 6])
        b.op("MUL", [e, b.const(np.float32(-2.5))], "e_scaled", [2, 5, 10, 6], fused_activation_function="RELU")
        for name, c in (("mono", 1), ("pair", 2), ("rgb", 3)):  # 4 pixels in one or two loads (copy.cl dense16)
            b.op("MUL", [b.input(name, [2, 3, 9, c]), b.const(np.float32(0.5))], f"{name}_scaled", [2, 3, 9, c])
        # one channel, steps of the value alone: 4 pixels' values stepped as one vec4 (postop_values)
        b.op("TANH", [b.input("wave", [2, 3, 9, 1])], "wave_scaled", [2, 3, 9, 1])
        b.op("TANH", [b.input("wave3", [2, 3, 9, 3])], "wave3_scaled", [2, 3, 9, 3])  # three channels: 3 vec4 of 4
        it = check_float(b, backend, fp16)
        plan = plan_of(it)
        copies = ["e", "mono", "pair", "rgb", "wave", "wave3"] if on_cpu_opencl(backend) else []
        dense = sorted(b.mb.tensors[t]["name"] for t in plan.dense)
        assert dense == (sorted(["audio", "f", "g", "x", *copies]) if backend == "cl" else []), plan.notes
        readers = sorted(b.mb.tensors[c.outputs["dst"]]["name"] for c in plan.kernels if c.defines.get("SRC_DENSE"))
        assert readers == (sorted(["audio_conv", "f_fc", "g_grouped", "x_1x1", "x_3x3_relu", "x_3x3_s2",
                                   *(f"{t}_scaled" for t in copies)]) if backend == "cl" else [])


def test_input_scale_and_shift_folded_into_the_convolution(backend):
    """On OpenCL a float convolution's input scaled and shifted by constants (an image model's preprocessing: MUL, ADD,
    SUB, DIV by a scalar or per channel) is folded into its weights and bias, its padding reading the value the
    steps map to 0 (lowering/fuse_input_affine.py): SAME padding of 3 channels with one padding value each, of 6 with
    one for all, a constant minus the input, a 1x1 convolution. Declined: a step with an activation, a step whose
    output leaves the partition, a convolution that pads 6 channels of different padding values. GL runs the steps."""
    for fp16 in (False, True):
        b = Builder()
        img = b.input("img", [1, 13, 11, 3])
        b.op("MUL", [img, b.const(np.float32(1 / 127.5))], "img_scaled", [1, 13, 11, 3], output=False)
        b.op("ADD", ["img_scaled", b.const(np.array([-1.0, 0.5, 2.0], np.float32))], "img_shifted", [1, 13, 11, 3],
             output=False)
        conv(b, "img_shifted", "img_conv", 3, (13, 11), 16, (3, 3), 2, "SAME", n=1, act="RELU6")
        x = b.input("x", [2, 9, 7, 6])
        b.op("SUB", [x, b.const(np.float32(0.25))], "x_centred", [2, 9, 7, 6], output=False)
        b.op("DIV", ["x_centred", b.const(np.float32(0.5))], "x_scaled", [2, 9, 7, 6], output=False)
        conv(b, "x_scaled", "x_conv", 6, (9, 7), 5, (3, 3), 1, "SAME")
        b.op("SUB", [b.const(np.float32(3.0)), x], "x_flipped", [2, 9, 7, 6], output=False)
        b.op("MUL", ["x_flipped", b.const(np.linspace(0.5, 2.0, 6).astype(np.float32))], "x_weighted", [2, 9, 7, 6],
             output=False)
        conv(b, "x_weighted", "x_1x1", 6, (9, 7), 7, (1, 1), 1, "VALID")
        y = b.input("y", [1, 8, 8, 6])
        b.op("ADD", [y, b.const(np.linspace(-1.0, 1.0, 6).astype(np.float32))], "y_shifted", [1, 8, 8, 6], output=False)
        conv(b, "y_shifted", "y_conv", 6, (8, 8), 4, (3, 3), 1, "SAME", n=1)
        b.op("ADD", [y, b.const(np.float32(1.0))], "y_relu", [1, 8, 8, 6], output=False,
             fused_activation_function="RELU")
        conv(b, "y_relu", "y_relu_conv", 6, (8, 8), 4, (3, 3), 1, "VALID", n=1)
        b.op("MUL", [y, b.const(np.float32(2.0))], "y_doubled", [1, 8, 8, 6])
        conv(b, "y_doubled", "y_doubled_conv", 6, (8, 8), 4, (3, 3), 1, "VALID", n=1)
        it = check_float(b, backend, fp16)
        plan = plan_of(it)
        folded = sorted(b.mb.tensors[c.outputs["dst"]]["name"] for c in plan.kernels if c.kernel.startswith("conv2d")
                        and any(f"into the weights of node {c.node} " in n for n in plan.notes))
        assert folded == (["img_conv", "x_1x1", "x_conv"] if backend == "cl" else []), plan.notes
        padded = {b.mb.tensors[c.outputs["dst"]]["name"]: [c.defines[f"PADV{k}"] for k in range(3)]
                  for c in plan.kernels if c.defines.get("SRC_PAD")}
        if backend == "cl":
            np.testing.assert_allclose(padded.pop("img_conv"), [127.5, -63.75, -255.0], rtol=1e-6)
            np.testing.assert_allclose(padded.pop("x_conv"), [0.25] * 3, rtol=1e-6)
        assert not padded


def test_fp16_storage(backend):
    b = Builder()
    chain(b)
    conv(b, "x", "c3x3_s2", 13, (8, 9), 7, (3, 3), 2, "SAME", n=1)
    b.op("BATCH_MATMUL", ["x", b.weights([13, 6])], "bmm", [1, 8, 9, 6])
    check_float(b, backend, fp16=True)


def test_transpose_conv(backend):
    b = Builder()
    x = b.input("x", [2, 4, 5, 5])
    for name, cout, k, stride, padding, out_hw, bias, act in [
        ("t3_s2_same", 3, 3, 2, "SAME", (8, 10), True, None),
        ("t4_s2_same_nobias", 7, 4, 2, "SAME", (8, 10), False, None),
        ("t3_s2_valid_relu", 13, 3, 2, "VALID", (9, 11), True, "RELU"),
        ("t3_s2_same_cropped", 5, 3, 2, "SAME", (7, 9), True, None),
        ("t2_s1_valid", 4, 2, 1, "VALID", (5, 6), False, None),
        ("t3_s1x3_valid", 6, 3, (1, 3), "VALID", (6, 15), True, "RELU6"),  # OpenCL: 4 pixels 3 apart a work item
    ]:
        shape = b.const(np.array([2, *out_hw, cout], I32))
        ins = [shape, b.weights([cout, k, k, 5]), x] + ([b.weights([cout])] if bias else [])
        opts = {"fused_activation_function": act} if act else {}
        sh, sw = stride if isinstance(stride, tuple) else (stride, stride)
        b.op("TRANSPOSE_CONV", ins, name, [2, *out_hw, cout], padding=padding, stride_h=sh, stride_w=sw,
             version=4 if act else 3 if bias else 1, **opts)
    # rows wide enough for OpenCL's work items whose 4 pixels read only columns inside the input (no masks), beside
    # the edge ones, at both phases and every padding a window of 3-5 gets
    wide = b.input("wide", [1, 3, 16, 6])
    for k in (3, 4, 5):
        name = f"wide_t{k}_s2_same"
        ins = [b.const(np.array([1, 6, 32, 8], I32)), b.weights([8, k, k, 6]), wide, b.weights([8])]
        b.op("TRANSPOSE_CONV", ins, name, [1, 6, 32, 8], padding="SAME", stride_h=2, stride_w=2, version=3)
    check_float(b, backend)


def transpose_conv_reference(x, w, bias, stride, pads, out_hw) -> np.ndarray:
    """Straight from the definition: input pixel (iy, ix) adds its products with tap (ky, kx) to output
    pixel (iy * sh - pt + ky, ix * sw - pl + kx)."""
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    out = np.zeros((n, *out_hw, o)) + bias
    for iy in range(h):
        for ix in range(wd):
            for ky in range(kh):
                for kx in range(kw):
                    oy, ox = iy * stride[0] - pads[0] + ky, ix * stride[1] - pads[1] + kx
                    if 0 <= oy < out_hw[0] and 0 <= ox < out_hw[1]:
                        out[:, oy, ox] += x[:, iy, ix].astype(np.float64) @ w[:, ky, kx].T.astype(np.float64)
    return out.astype(np.float32)


def test_mediapipe_transpose_conv_bias(backend):
    """Convolution2DTransposeBias: custom options are TfLiteTransposeConvParams {padding (1 SAME, 2 VALID),
    stride_w, stride_h}; SAME trims max(0, k - (in - 1) % s - 1) off (in - 1) * s + k, the top/left half
    rounded down."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal([2, 5, 6, 7]).astype(np.float32)
    mb = ModelBuilder()
    xi = mb.input("x", x.shape)
    cases = [(1, 4, (2, 2), (9, 12), (1, 1)), (1, 3, (1, 2), (5, 12), (1, 0)), (2, 3, (2, 2), (11, 13), (0, 0))]
    weights = []
    for k, (padding, ksize, stride, out_hw, _) in enumerate(cases):
        w = rng.standard_normal([5, ksize, ksize, 7]).astype(np.float32)
        bias = rng.standard_normal(5).astype(np.float32)
        weights.append((w, bias))
        y = mb.tensor(f"y{k}", [2, *out_hw, 5])
        mb.op("Convolution2DTransposeBias", [xi, mb.const(f"w{k}", w), mb.const(f"b{k}", bias)], [y],
              custom_options=struct.pack("<iii", padding, stride[1], stride[0]))
        mb.output(y)
    _, outs = run_gpu(mb.build(), [x], backend)
    for (padding, _, stride, out_hw, pads), (w, bias), out in zip(cases, weights, outs):
        assert_float_close(out, transpose_conv_reference(x, w, bias, stride, pads, out_hw),
                           what=f"padding {padding} stride {stride} on {backend}")


def test_fully_connected_and_batch_matmul(backend):
    b = Builder()
    x2 = b.input("x2", [3, 20])
    b.op("FULLY_CONNECTED", [x2, b.weights([7, 20]), b.weights([7])], "fc_rows", [3, 7],
         fused_activation_function="RELU")
    x4 = b.input("x4", [1, 2, 3, 5])
    b.op("FULLY_CONNECTED", [x4, b.weights([6, 30]), b.no_bias(6)], "fc_flattened", [1, 6])
    x3 = b.input("x3", [2, 3, 12])
    b.op("FULLY_CONNECTED", [x3, b.weights([5, 12]), b.weights([5])], "fc_keep_dims", [2, 3, 5],
         keep_num_dims=True, fused_activation_function="RELU6")
    b.op("FULLY_CONNECTED", ["x4", b.weights([5, 10]), b.weights([5])], "fc_cut_rows", [3, 5],
         fused_activation_function="RELU_N1_TO_1")
    bx = b.input("bx", [2, 3, 5, 7])
    by = b.input("by", [2, 3, 7, 6])
    b.op("BATCH_MATMUL", [bx, by], "bmm", [2, 3, 5, 6])
    ax = b.input("ax", [2, 1, 7, 5])
    ay = b.input("ay", [3, 6, 7])
    b.op("BATCH_MATMUL", [ax, ay], "bmm_adj_broadcast", [2, 3, 5, 6], adj_x=True, adj_y=True)
    b.op("BATCH_MATMUL", ["x3", b.weights([12, 9])], "bmm_const", [2, 3, 9])
    check_float(b, backend)


def test_pool(backend):
    b = Builder()
    x = b.input("x", [2, 9, 11, 13])
    for name, op, k, stride, padding, act in [
        ("avg3_s2_same", "AVERAGE_POOL_2D", (3, 3), 2, "SAME", "NONE"),  # edge windows average fewer pixels
        ("max2_s2_valid_relu", "MAX_POOL_2D", (2, 2), 2, "VALID", "RELU"),
        ("max3_s1_same_relu6", "MAX_POOL_2D", (3, 3), 1, "SAME", "RELU6"),
        ("avg2x3_valid_relu_n1_to_1", "AVERAGE_POOL_2D", (2, 3), 1, "VALID", "RELU_N1_TO_1"),
    ]:
        oh, ow = out_len(9, k[0], stride, padding), out_len(11, k[1], stride, padding)
        b.op(op, [x], name, [2, oh, ow, 13], padding=padding, stride_h=stride, stride_w=stride,
             filter_height=k[0], filter_width=k[1], fused_activation_function=act)
    check_float(b, backend)


def test_int8(backend):
    """Full-integer int8 with per-channel weights, run in float with a fake-quant step after each op,
    against TFLite's integer reference kernels. Every op reads the model's input: in a chain, one step of
    difference upstream moves downstream values across rounding boundaries, and each op's own agreement
    would be lost in that noise."""
    rng = np.random.default_rng(5)
    b = Builder()
    x = b.input("x", [2, 10, 9, 5], np.int8, (0.02, 3))

    def qweights(shape, axis: int, channels: int):
        scales = rng.uniform(0.004, 0.01, channels)
        return b.const(rng.integers(-127, 128, shape).astype(np.int8), q=(scales, np.zeros(channels), axis)), scales

    def qbias(channels: int, w_scales):
        return b.const(rng.integers(-2000, 2000, channels).astype(I32), q=(0.02 * w_scales, np.zeros(channels)))

    w, ws = qweights([7, 3, 3, 5], 0, 7)
    b.op("CONV_2D", [x, w, qbias(7, ws)], "conv", [2, 10, 9, 7], np.int8, (0.05, -5), padding="SAME",
         stride_h=1, stride_w=1, fused_activation_function="RELU6", version=3)
    w, ws = qweights([1, 3, 3, 10], 3, 10)
    b.op("DEPTHWISE_CONV_2D", [x, w, qbias(10, ws)], "dw", [2, 5, 4, 10], np.int8, (0.04, 2),
         padding="SAME", stride_h=2, stride_w=3, depth_multiplier=2, version=3)
    w, ws = qweights([10, 3, 3, 1], 0, 10)
    b.op("CONV_2D", [x, w, qbias(10, ws)], "grouped_dw", [2, 10, 9, 10], np.int8, (0.04, -2), padding="SAME",
         stride_h=1, stride_w=1, version=3)
    b.op("AVERAGE_POOL_2D", [x], "pool", [2, 5, 5, 5], np.int8, (0.02, 3), padding="SAME", stride_h=2,
         stride_w=2, filter_height=3, filter_width=2)
    b.op("MAX_POOL_2D", [x], "max_pool", [2, 4, 4, 5], np.int8, (0.02, 3), padding="VALID", stride_h=2,
         stride_w=2, filter_height=3, filter_width=3, fused_activation_function="RELU")
    w, ws = qweights([11, 450], 0, 11)
    b.op("FULLY_CONNECTED", [x, w, qbias(11, ws)], "fc", [2, 11], np.int8, (0.2, -3), version=5)
    w, ws = qweights([6, 5], 0, 6)
    b.op("FULLY_CONNECTED", [x, w, -1], "fc_pixels", [180, 6], np.int8, (0.03, 1), version=5)
    content = b.build()
    ref = run_litert(content, b.feeds, reference_kernels=True)
    _, outs = run_gpu(content, b.feeds, backend)
    for name, o, r in zip(["conv", "dw", "grouped_dw", "pool", "max_pool", "fc", "fc_pixels"], outs, ref,
                          strict=True):
        assert r.std() > 3 and np.mean(r == -128) + np.mean(r == 127) < 0.3, \
            f"{name}: the test's scales leave the reference degenerate"
        assert_quant_close(o, r, what=f"{name} on {backend}")


def test_eight_output_slices_a_work_item(backend):
    """Where the device's vectors hold 16 floats (AVX-512 PoCL), OpenCL's convolutions of at least WIDE_MIN_MACS
    take 8 output slices a work item, two 16-float accumulators a pixel (opencl/conv_wide.inc.cl): output channels
    that leave the last block partial (33, 36, 37: its second half partly or wholly past the last slice), 1x1
    layers of 8 pixels a work item (2 pixels past the last block) and of 4, 3x3 windows at strides 1 and 2 with
    edges, batch 2, a FULLY_CONNECTED over pixels, a fused ADD and RELU (post-ops on both halves), an input scaled
    per channel (squeeze-and-excite), and int8 (the fake-quant step on both halves) against TFLite's reference
    kernels; a small layer keeps 4. GL keeps 4 slices: the same cases against LiteRT."""
    b = Builder()
    x = b.input("x", [1, 45, 46, 40])  # 2070 pixels: 259 blocks of 8, the last of 6
    conv(b, x, "c1x1_8px_37", 40, (45, 46), 37, (1, 1), 1, "VALID", n=1)
    y = b.input("y", [2, 25, 40, 40])  # 2000 pixels: 4 a work item
    conv(b, y, "c1x1_4px_33_relu6", 40, (25, 40), 33, (1, 1), 1, "VALID", act="RELU6")
    conv(b, y, "c3x3_same_36", 40, (25, 40), 36, (3, 3), 1, "SAME")
    conv(b, y, "c3x3_s2_valid_33_nobias", 40, (25, 40), 33, (3, 3), 2, "VALID", bias=False)
    b.op("FULLY_CONNECTED", [y, b.weights([45, 40]), b.weights([45])], "fc_pixels_45", [2000, 45])
    conv(b, y, "c1x1_to_add", 40, (25, 40), 36, (1, 1), 1, "VALID", output=False)
    z = b.input("z", [2, 25, 40, 36])
    b.op("ADD", ["c1x1_to_add", z], "c1x1_plus_z_relu", [2, 25, 40, 36], fused_activation_function="RELU")
    b.input("se", [1, 45, 46, 48])
    squeeze_excite(b, "se", "se", (45, 46), 48, out_c=37)
    small = b.input("small", [1, 7, 9, 10])
    conv(b, small, "c1x1_small_37", 10, (7, 9), 37, (1, 1), 1, "VALID", n=1)
    it = check_float(b, backend)
    plan = plan_of(it)
    names = {t: b.mb.tensors[t]["name"] for t in range(len(b.mb.tensors))}
    eight = sorted(names.get(c.outputs["dst"], "") for c in plan.kernels if c.defines.get("BLOCK_S") == 8)
    info = delegate(backend).backend.device_info()
    if backend == "cl" and info["device_type"] == "cpu" and info["vector_width"] >= 16:
        assert eight == sorted(["c1x1_8px_37", "c1x1_4px_33_relu6", "c3x3_same_36", "c3x3_s2_valid_33_nobias",
                                "fc_pixels_45", "c1x1_plus_z_relu", "se_projected"]), eight
        assert any(c.defines.get("SRC_SCALE") and c.defines["BLOCK_S"] == 8 for c in plan.kernels)
    else:
        assert not eight

    rng = np.random.default_rng(6)
    q = Builder()
    xq = q.input("x", [1, 48, 43, 32], np.int8, (0.02, 3))  # 2064 pixels: 8 a work item
    for name, k, cout in (("q1x1_40", 1, 40), ("q3x3_36", 3, 36)):
        scales = rng.uniform(0.001, 0.004, cout)
        w = q.const(rng.integers(-127, 128, [cout, k, k, 32]).astype(np.int8), q=(scales, np.zeros(cout), 0))
        bias = q.const(rng.integers(-2000, 2000, cout).astype(I32), q=(0.02 * scales, np.zeros(cout)))
        q.op("CONV_2D", [xq, w, bias], name, [1, 48, 43, cout], np.int8, (0.1 * k, -5), padding="SAME",
             stride_h=1, stride_w=1, version=3)
    content = q.build()
    ref = run_litert(content, q.feeds, reference_kernels=True)
    it, outs = run_gpu(content, q.feeds, backend)
    for name, o, r in zip(["q1x1_40", "q3x3_36"], outs, ref, strict=True):
        assert r.std() > 3 and np.mean(r == -128) + np.mean(r == 127) < 0.3, \
            f"{name}: the test's scales leave the reference degenerate"
        assert_quant_close(o, r, what=f"{name} on {backend}")
    assert len([c for c in plan_of(it).kernels if c.defines.get("BLOCK_S") == 8]) == (2 if eight else 0)


def test_grouped_convs_of_whole_slices(backend):
    """Grouped CONV_2Ds whose groups hold whole slices (input and output channels a group multiples of 4: ResNeXt's
    and RegNet's 3x3 layers, ShuffleNet's grouped 1x1s) run on the dense kernels over each group's slices only,
    any number of groups; blocks of output slices never straddle two groups (8 output channels a group: 2 slices).
    Batch 2, fp32 and fp16 storage, against LiteRT."""
    for fp16 in (False, True):
        b = Builder()
        hw = (9, 11)
        x = b.input("x", [2, *hw, 32])
        conv(b, x, "g2_3x3_same_relu", 32, hw, 32, (3, 3), 1, "SAME", groups=2, act="RELU")
        conv(b, x, "g4_3x3_s2_valid_og8", 32, hw, 32, (3, 3), 2, "VALID", groups=4)
        conv(b, x, "g8_3x3_dilated_nobias_og4", 32, hw, 32, (3, 3), 1, "SAME", dilation=2, groups=8, bias=False)
        conv(b, x, "g4_1x1_og12", 32, hw, 48, (1, 1), 1, "VALID", groups=4, act="RELU6")
        h = b.input("h", [2, *hw, 64])
        conv(b, h, "g16_3x3_og8", 64, hw, 128, (3, 3), 1, "SAME", groups=16)
        # a dense one of 11 output slices keeps blocks of several slices (the rule above once cut them to 1: a
        # NASNetMobile, whose layers have 11, 22 and 44 channels, ran 1.7x slower)
        conv(b, x, "dense_44", 32, hw, 44, (3, 3), 1, "SAME")
        it = check_float(b, backend, fp16=fp16)
        kernels = {b.mb.tensors[c.outputs["dst"]]["name"]: (c.kernel, c.defines.get("GROUPED"), c.defines["BLOCK_S"])
                   for c in plan_of(it).kernels}
        dense = kernels.pop("dense_44")
        assert dense[:2] == ("conv2d", 0) and dense[2] > 1, dense
        assert {k[:2] for k in kernels.values()} == {("conv2d", 1)}, kernels


def test_run_time_filters_and_many_groups_run_on_the_gpu(backend):
    """A filter computed at run time and a convolution of more than 8 groups (conv2d_grouped.dialect: not run as
    a dense one, which would cost groups times the work) run on the GPU, and agree with the CPU path (issue 16)."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 16])
    w = mb.input("w", [2, 1, 1, 16])
    y = mb.tensor("y", [1, 4, 4, 2])
    mb.op("CONV_2D", [x, w, -1], [y], padding="VALID", stride_h=1, stride_w=1)
    z = mb.tensor("z", [1, 4, 4, 16])
    mb.op("CONV_2D", [x, mb.const("g", np.arange(16, dtype=np.float32).reshape(16, 1, 1, 1)), -1], [z],
          padding="VALID", stride_h=1, stride_w=1)
    mb.output(y, z)
    content = mb.build()
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend)])
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 4, 16), (2, 1, 1, 16))]
    ours = run(it, inputs)
    assert [d["backend"] for d in it.get_ops_details()] == [backend, backend]
    for o, r in zip(ours, run(gd.Interpreter(model_content=content), inputs)):
        assert_float_close(o, r, 1e-5)


def squeeze_excite(b: Builder, x: str, tag: str, hw: tuple, c: int, batch: int = 1, also_out: bool = False,
                   out_c: int = 16, mid: int | None = None, hidden: str = "RELU", gate: str = "LOGISTIC") -> str:
    """EfficientNet's block tail: MEAN over H and W, a 1x1 convolution down to ``mid`` (c // 4) channels with RELU
    (``hidden`` "SWISH": x * LOGISTIC(x), EfficientNet's), one back up, LOGISTIC (``gate`` "HARD": MobileNetV3's
    RELU6(x + 3) / 6): the gate; x times the gate, then a 1x1 projection to ``out_c`` channels."""
    mid = mid or c // 4
    axes = b.const(np.array([1, 2], np.int32))
    mean = b.op("MEAN", [x, axes], f"{tag}_mean", [batch, 1, 1, c], output=False, keep_dims=True)
    squeezed = conv(b, mean, f"{tag}_squeeze", c, (1, 1), mid, (1, 1), 1, "VALID", act=hidden if hidden != "SWISH"
                    else "NONE", n=batch, output=False)
    if hidden == "SWISH":
        sigmoid = b.op("LOGISTIC", [squeezed], f"{tag}_squeeze_sigmoid", [batch, 1, 1, mid], output=False)
        squeezed = b.op("MUL", [squeezed, sigmoid], f"{tag}_squeeze_swish", [batch, 1, 1, mid], output=False)
    excited = conv(b, squeezed, f"{tag}_excite", mid, (1, 1), c, (1, 1), 1, "VALID", n=batch, output=False)
    if gate == "HARD":
        shifted = b.op("ADD", [excited, b.const(np.array([3.0], np.float32))], f"{tag}_shifted", [batch, 1, 1, c],
                       output=False, fused_activation_function="RELU6")
        gated = b.op("MUL", [shifted, b.const(np.array([1 / 6], np.float32))], f"{tag}_gate", [batch, 1, 1, c],
                     output=False)
    else:
        gated = b.op("LOGISTIC", [excited], f"{tag}_gate", [batch, 1, 1, c], output=False)
    scaled = b.op("MUL", [x, gated], f"{tag}_scaled", [batch, *hw, c], output=also_out)
    return conv(b, scaled, f"{tag}_projected", c, hw, out_c, (1, 1), 1, "VALID", n=batch)


def test_squeeze_excite_gate_is_one_kernel(backend):
    """A squeeze-and-excite gate (MEAN, two one-pixel 1x1 convolutions and their activations) runs as one kernel of
    one work group (lowering/fuse_squeeze_excite.py, kernels/*/squeeze_excite): RELU and swish (post-ops inside the
    kernel) in the hidden layer, LOGISTIC and hard sigmoid on the gate; 16 channels over 40x40 pixels (the pixels
    of a slice summed in parts), 13 and 3 channels (partial slices), 576 -> 144 (more slices than work items),
    fp32 and fp16 storage, against LiteRT. Declined, and still right: a gate per batch (batch 2), a classifier's
    head of 64 -> 512 -> 600 channels, and on GL on a CPU the 144 hidden channels."""
    for fp16 in (False, True):
        b = Builder()
        for tag, hw, c, mid, hidden, gate in (("plane", (40, 40), 16, 4, "RELU", "HARD"),
                                              ("odd", (5, 6), 13, 3, "SWISH", "LOGISTIC"),
                                              ("wide", (3, 3), 576, 144, "RELU", "HARD"),
                                              ("swish", (7, 5), 40, 10, "SWISH", "LOGISTIC")):
            b.input(tag, [1, *hw, c])
            squeeze_excite(b, tag, tag, hw, c, mid=mid, hidden=hidden, gate=gate)
        b.input("batch", [2, 5, 6, 24])
        squeeze_excite(b, "batch", "batch", (5, 6), 24, batch=2)
        # a classifier's head of the same shape: too many multiply-adds for one work group (MAX_GATE_MACS)
        head = b.input("head", [1, 3, 4, 64])
        pooled = b.op("MEAN", [head, b.const(np.array([1, 2], np.int32))], "head_mean", [1, 1, 1, 64], output=False,
                      keep_dims=True)
        hidden = conv(b, pooled, "head_hidden", 64, (1, 1), 512, (1, 1), 1, "VALID", act="RELU", n=1, output=False)
        conv(b, hidden, "head_logits", 512, (1, 1), 600, (1, 1), 1, "VALID", n=1)
        it = check_float(b, backend, fp16=fp16)
        plan = plan_of(it)
        names = {t: b.mb.tensors[t]["name"] for t in range(len(b.mb.tensors))}
        # GL on a CPU keeps the three kernels where the hidden layer is wide (fuse_squeeze_excite.GL_CPU_MAX_HIDDEN)
        info = delegate(backend).backend.device_info()
        three = ["batch", "head", "wide"] if backend == "gl" and info["device_type"] == "cpu" else ["batch", "head"]
        gates = sorted(names[c.inputs["src"]] for c in plan.kernels if c.kernel == "squeeze_excite")
        assert gates == sorted({"odd", "plane", "swish", "wide"} - set(three)), gates
        assert sorted(names[c.inputs["src"]] for c in plan.kernels if c.kernel == "reduce") == three
        ops = {n.index: n.op for n in it.graph.nodes}
        for call in (c for c in plan.kernels if c.kernel == "squeeze_excite"):
            assert ops[call.node] == "MEAN" and sorted(ops[n] for n in call.nodes).count("CONV_2D") == 2


def test_squeeze_excite_gate_is_read_by_the_projection(backend):
    """The MUL of x by its squeeze-and-excite gate is no kernel of its own where only the 1x1 projection reads the
    product: the projection reads x with its input channels scaled (lowering/fuse_channel_scale.py). Declined,
    and still right, where the product is also an output and where the gate differs per batch. 13 and 24
    channels: a partial last slice, and a projection with more input slices than one block."""
    b = Builder()
    for tag, c, batch, also_out in (("a", 24, 1, False), ("b", 13, 1, False), ("out", 24, 1, True),
                                    ("batch", 24, 2, False)):
        b.input(tag, [batch, 5, 6, c])
        squeeze_excite(b, tag, tag, (5, 6), c, batch, also_out)
    it = check_float(b, backend)
    plan = plan_of(it)
    names = {t: b.mb.tensors[t]["name"] for t in range(len(b.mb.tensors))}
    scaled = [names[c.outputs["dst"]] for c in plan.kernels if c.defines.get("SRC_SCALE")]
    assert sorted(scaled) == ["a_projected", "b_projected"]
    stored = {names.get(t, "") for c in plan.kernels for t in c.outputs.values()}
    assert {"out_scaled", "batch_scaled"} <= stored and not {"a_scaled", "b_scaled"} & stored
    fused = [c for c in plan.kernels if c.defines.get("SRC_SCALE")]
    assert all(len(c.fused_nodes) == 1 and it.graph.nodes[c.fused_nodes[0]].op == "MUL" for c in fused)


def test_squeeze_excite_plan_from_the_serialization_dir(backend, tmp_path):
    """The fused plan written to a serialization dir and read back (a second start) keeps the scaled convolution
    and which MUL it computes, and gives the first start's outputs."""
    b = Builder()
    b.input("x", [1, 5, 6, 24])
    squeeze_excite(b, "x", "x", (5, 6), 24)
    outs = []
    for _ in range(2):  # the first start writes the dir, the second reads the plan from it
        d = gd.GpuDelegate(backend=backend, serialization_dir=tmp_path, model_token="se")
        it = gd.Interpreter(model_content=b.build(), experimental_delegates=[d])
        outs.append(run(it, b.feeds))
        (fused,) = [c for c in plan_of(it).kernels if c.defines.get("SRC_SCALE")]
        assert fused.fused_nodes == (next(n.index for n in it.graph.nodes if n.op == "MUL"),)
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    ref = run_litert(b.build(reference=True), b.feeds)[0]
    assert_float_close(outs[1][0], ref, 1e-4, what=f"second start on {backend}")


def test_streamed_float16_weights_are_stored_as_halves(backend, tmp_path, monkeypatch):
    """Weights that a kernel reads once an invoke (a FULLY_CONNECTED of one row: a one-pixel 1x1 convolution), each
    value a float16 (a DEQUANTIZE of a float16 constant, as the converter's float16 models have), are stored as
    halves in a float32 plan (lowering/half_weights.py): LiteRT's values, bit for bit the plan's without halves, and
    the same from a second start that reads the plan from the serialization dir. Kept as float32: the same weights
    read by a 1x1 convolution over 42 pixels (from cache, again and again), and one-row weights that are not all
    float16 values."""
    from gpu_delegate.lowering import half_weights

    b = Builder()
    x = b.input("x", [1, 40])
    w16 = (b.rng.standard_normal([24, 40]) * 0.3).astype(np.float16)
    b.op("DEQUANTIZE", [b.const(w16)], "w16", [24, 40], output=False)
    b.op("FULLY_CONNECTED", [x, "w16", b.weights([24])], "fc_halves", [1, 24], fused_activation_function="RELU")
    b.op("FULLY_CONNECTED", [x, b.weights([12, 40]), b.weights([12])], "fc_float32", [1, 12])
    pixels = b.input("pixels", [1, 6, 7, 40])
    b.op("DEQUANTIZE", [b.const(w16.reshape(24, 1, 1, 40))], "w16_filter", [24, 1, 1, 40], output=False)
    b.op("CONV_2D", [pixels, "w16_filter", b.weights([24])], "conv_pixels", [1, 6, 7, 24], padding="VALID",
         stride_h=1, stride_w=1)
    ref = run_litert(b.build(reference=True), b.feeds)
    outs = []
    for start in range(2):  # the first start writes the dir, the second reads the plan from it
        d = gd.GpuDelegate(backend=backend, serialization_dir=tmp_path, model_token="halves")
        it = gd.Interpreter(model_content=b.build(), experimental_delegates=[d])
        outs.append(run(it, b.feeds))
        plan = plan_of(it)
        names = {t: b.mb.tensors[t]["name"] for t in range(len(b.mb.tensors))}
        halved = sorted(names[c.outputs["dst"]] for c in plan.kernels if c.consts.get("w") in plan.half_consts)
        assert halved == ["fc_halves"], (start, halved, plan.notes)
        (runner,) = [s.kernel.runner for s in it._steps if getattr(getattr(s, "kernel", None), "runner", None)]
        assert {runner.const_buffers[key].precision for key in plan.half_consts} == {"fp16"}
    for name, o, r in zip(["fc_halves", "fc_float32", "conv_pixels"], outs[1], ref, strict=True):
        assert_float_close(o, r, 1e-4, what=f"{name} on {backend}")
    monkeypatch.setattr(half_weights, "streamed_weights", lambda call: [])
    it, plain = run_gpu(b.build(), b.feeds, backend)
    assert not plan_of(it).half_consts
    for o, p in zip(outs[0], plain, strict=True):
        np.testing.assert_array_equal(o, p)
