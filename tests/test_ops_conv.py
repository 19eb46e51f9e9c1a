"""The convolution family on the CPU path against LiteRT: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV,
FULLY_CONNECTED, BATCH_MATMUL (float32, int8, uint8, hybrid int8 weights), and MediaPipe's
Convolution2DTransposeBias against a direct numpy formula (LiteRT does not have that op).

Integer results must equal LiteRT's reference kernels (TFLite's integer reference code) exactly, and be
close (assert_quant_close) to its default kernels, which XNNPACK runs with float requantization."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.cpu.conv import Requant, requantize
from gpu_delegate.cpu.quant import quantize_multipliers
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, run_litert, run_ours

ACTS = ["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT"]
QACTS = ["NONE", "RELU", "RELU_N1_TO_1", "RELU6"]


def out_len(size: int, k: int, stride: int, padding: str, dilation: int = 1) -> int:
    eff = (k - 1) * dilation + 1
    return -(-size // stride) if padding == "SAME" else (size - eff) // stride + 1


def check_float(content: bytes, inputs: list[np.ndarray], ref_content: bytes | None = None) -> None:
    ref = run_litert(ref_content or content, inputs)
    ours = run_ours(content, inputs)
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert_float_close(o, r)


def check_quant(content: bytes, inputs: list[np.ndarray]) -> None:
    """Bit-exact against TFLite's reference kernels, close to LiteRT's default (XNNPACK) kernels."""
    ours = run_ours(content, inputs)[0]
    ref = run_litert(content, inputs, reference_kernels=True)[0]
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert 0.02 < np.mean(ref == ref.min()) + np.mean(ref == ref.max()) < 0.8 or ref.std() > 3, \
        "the test's scales leave the output degenerate"
    np.testing.assert_array_equal(ours, ref)
    assert_quant_close(ours, run_litert(content, inputs)[0])


class Q:
    """Random quantized test data: an 8-bit type, its zero points, and scales that keep outputs in range."""

    def __init__(self, dtype, seed: int):
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.lo, self.hi = (-128, 127) if self.dtype == np.int8 else (0, 255)
        self.x_zp = 3 if self.dtype == np.int8 else 131
        self.y_zp = -7 if self.dtype == np.int8 else 119
        self.x_scale = 0.02

    def values(self, shape) -> np.ndarray:
        return self.rng.integers(self.lo, self.hi + 1, shape).astype(self.dtype)

    def weights(self, shape, channels: int, per_channel: bool):
        """(weights, scales, zero points): int8 symmetric in [-127, 127], uint8 around 128."""
        if self.dtype == np.int8:
            w, zp = self.rng.integers(-127, 128, shape).astype(np.int8), np.zeros(channels, np.int64)
        else:
            w, zp = self.values(shape), np.full(channels, 128, np.int64)
        scale = self.rng.uniform(0.002, 0.01, channels) if per_channel else np.full(1, 0.005)
        return w, scale, (zp if per_channel else zp[:1])

    def out_scale(self, taps: int, w_scale: np.ndarray) -> float:
        """About 3 sigma of the output spans the 8-bit range."""
        x_std = 74 * self.x_scale
        w_std = 74 * float(np.mean(w_scale))
        return 3 * np.sqrt(taps) * x_std * w_std / 128

    def bias(self, channels: int, taps: int, w_scale: np.ndarray):
        b = self.rng.integers(-1, 2, channels) * self.rng.integers(0, int(60 * 60 * np.sqrt(taps)), channels)
        return b.astype(np.int32), self.x_scale * np.broadcast_to(w_scale, (channels,))


# -- CONV_2D -----------------------------------------------------------------------------------------------

def conv_model(cin: int, cout: int, k: tuple, stride: int, padding: str, dilation: int, act: str,
               n: int = 1, hw: tuple = (9, 11), groups: int = 1, bias: str = "yes", seed: int = 0):
    """A float CONV_2D model and its input; bias "yes", "no" (omitted) or "zero" (a zero constant)."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", [n, *hw, cin])
    w = mb.const("w", rng.standard_normal([cout, *k, cin // groups]).astype(np.float32))
    b = {"yes": lambda: mb.const("b", rng.standard_normal(cout).astype(np.float32)),
         "zero": lambda: mb.const("b", np.zeros(cout, np.float32)), "no": lambda: -1}[bias]()
    oh, ow = out_len(hw[0], k[0], stride, padding, dilation), out_len(hw[1], k[1], stride, padding, dilation)
    y = mb.tensor("y", [n, oh, ow, cout])
    mb.op("CONV_2D", [x, w, b], [y], padding=padding, stride_w=stride, stride_h=stride,
          dilation_w_factor=dilation, dilation_h_factor=dilation, fused_activation_function=act)
    mb.output(y)
    return mb.build(), [rng.standard_normal([n, *hw, cin]).astype(np.float32)]


CONV_CASES = [
    # cin, cout, kernel, stride, padding, dilation, act, batch, groups
    (3, 5, (3, 3), 1, "SAME", 1, "NONE", 1, 1),
    (5, 7, (3, 3), 2, "SAME", 1, "RELU", 1, 1),
    (7, 13, (3, 3), 2, "VALID", 1, "RELU6", 1, 1),
    (13, 3, (1, 1), 1, "SAME", 1, "RELU_N1_TO_1", 1, 1),
    (13, 7, (1, 1), 2, "VALID", 1, "TANH", 2, 1),
    (5, 5, (2, 3), 1, "SAME", 2, "SIGN_BIT", 1, 1),
    (7, 5, (3, 3), 1, "VALID", 2, "RELU", 2, 1),
    (3, 13, (5, 5), 2, "SAME", 1, "NONE", 2, 1),
    (6, 9, (3, 3), 1, "SAME", 1, "RELU", 1, 3),  # grouped: 3 groups of 2 input channels
    (8, 4, (1, 1), 2, "SAME", 1, "NONE", 2, 4),
]


@pytest.mark.parametrize("cin,cout,k,stride,padding,dilation,act,n,groups", CONV_CASES)
def test_conv2d_float(cin, cout, k, stride, padding, dilation, act, n, groups):
    content, inputs = conv_model(cin, cout, k, stride, padding, dilation, act, n, groups=groups)
    check_float(content, inputs)


def test_conv2d_float_without_bias():
    # LiteRT's CONV_2D insists on a bias tensor, so the reference is the same model with a zero bias.
    content, inputs = conv_model(5, 7, (3, 3), 1, "SAME", 1, "RELU", bias="no")
    ref, _ = conv_model(5, 7, (3, 3), 1, "SAME", 1, "RELU", bias="zero")
    check_float(content, inputs, ref)


def qconv_model(dtype, per_channel: bool, cin: int, cout: int, k: int, stride: int, padding: str,
                dilation: int, act: str, n: int = 1, groups: int = 1, bias: str = "yes", hw: tuple = (9, 10),
                seed: int = 1):
    q = Q(dtype, seed)
    mb = ModelBuilder()
    x = mb.input("x", [n, *hw, cin], q.dtype, scale=q.x_scale, zero_point=q.x_zp)
    taps = k * k * cin // groups
    wv, ws, wzp = q.weights([cout, k, k, cin // groups], cout, per_channel)
    w = mb.const("w", wv, scale=ws, zero_point=wzp, axis=0)
    b = -1
    if bias != "no":
        bv, bs = q.bias(cout, taps, ws)
        b = mb.const("b", bv * (bias == "yes"), scale=bs if per_channel else bs[:1],
                     zero_point=np.zeros(bs.size if per_channel else 1))
    oh, ow = out_len(hw[0], k, stride, padding, dilation), out_len(hw[1], k, stride, padding, dilation)
    y = mb.tensor("y", [n, oh, ow, cout], q.dtype, scale=q.out_scale(taps, ws), zero_point=q.y_zp)
    mb.op("CONV_2D", [x, w, b], [y], padding=padding, stride_w=stride, stride_h=stride,
          dilation_w_factor=dilation, dilation_h_factor=dilation, fused_activation_function=act,
          version=3 if per_channel else 1)
    mb.output(y)
    return mb.build(), [q.values([n, *hw, cin])]


QCONV_CASES = [
    # per_channel, cin, cout, k, stride, padding, dilation, act, batch, groups
    (True, 3, 5, 3, 1, "SAME", 1, "NONE", 1, 1),
    (True, 5, 7, 3, 2, "SAME", 1, "RELU6", 2, 1),
    (True, 13, 13, 1, 1, "VALID", 1, "RELU", 1, 1),
    (True, 7, 3, 3, 1, "VALID", 2, "RELU_N1_TO_1", 1, 1),
    (True, 6, 4, 3, 1, "SAME", 1, "NONE", 1, 2),
    (False, 5, 7, 3, 1, "SAME", 1, "RELU", 1, 1),
    (False, 13, 5, 1, 2, "SAME", 1, "NONE", 2, 1),
    (False, 7, 7, 3, 2, "VALID", 1, "RELU6", 1, 1),
]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel,cin,cout,k,stride,padding,dilation,act,n,groups", QCONV_CASES)
def test_conv2d_quant(dtype, per_channel, cin, cout, k, stride, padding, dilation, act, n, groups):
    if dtype == np.uint8 and (per_channel or groups > 1):
        pytest.skip("TFLite has uint8 convolutions with per-tensor weights only, and no grouped uint8 kernel")
    content, inputs = qconv_model(dtype, per_channel, cin, cout, k, stride, padding, dilation, act, n, groups)
    check_quant(content, inputs)


def test_conv2d_quant_without_bias():
    content, inputs = qconv_model(np.int8, True, 5, 7, 3, 1, "SAME", 1, "NONE", bias="no")
    ref, _ = qconv_model(np.int8, True, 5, 7, 3, 1, "SAME", 1, "NONE", bias="zero")
    ours = run_ours(content, inputs)[0]
    np.testing.assert_array_equal(ours, run_litert(ref, inputs, reference_kernels=True)[0])


def test_conv2d_quant_long_contraction():
    """K = 3*3*160 = 1440 products of up to 128*127: past float32's exact range, so the sum is chunked."""
    content, inputs = qconv_model(np.int8, True, 160, 8, 3, 1, "SAME", 1, "NONE", hw=(5, 6))
    check_quant(content, inputs)


def test_conv2d_uint8_per_channel_is_refused():
    q = Q(np.uint8, 0)
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3], np.uint8, scale=0.1, zero_point=128)
    w = mb.const("w", q.values([2, 1, 1, 3]), scale=[0.1, 0.2], zero_point=[128, 128], axis=0)
    y = mb.tensor("y", [1, 4, 4, 2], np.uint8, scale=0.1, zero_point=128)
    mb.op("CONV_2D", [x, w, -1], [y], padding="SAME", stride_w=1, stride_h=1)
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"node 0 \(CONV_2D\).*per-channel"):
        gd.Interpreter(model_content=mb.build())


def hybrid_error(content: bytes, inputs: list[np.ndarray]) -> float:
    """Max |ours - LiteRT| / max|LiteRT| for a float model with int8 weights."""
    ref = run_litert(content, inputs)[0]
    ours = run_ours(content, inputs)[0]
    assert ours.dtype == ref.dtype == np.float32 and ours.shape == ref.shape
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def test_conv2d_hybrid():
    """Float input, int8 per-channel weights. LiteRT quantizes the input to int8 on the fly; we dequantize
    the weights and stay in float. With 4 x 4 x 6 taps the difference measured 0.5% to 1.1% of max|ref|
    over five inputs; a wrong or per-tensor weight scale is off by tens of percent."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 8, 6])
    w = mb.const("w", rng.integers(-127, 128, [5, 4, 4, 6]).astype(np.int8), scale=rng.uniform(0.01, 0.02, 5),
                 zero_point=np.zeros(5), axis=0)
    b = mb.const("b", rng.standard_normal(5).astype(np.float32))
    y = mb.tensor("y", [1, 8, 8, 5])
    mb.op("CONV_2D", [x, w, b], [y], padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU",
          version=5)
    mb.output(y)
    assert hybrid_error(mb.build(), [rng.standard_normal([1, 8, 8, 6]).astype(np.float32)]) < 0.02


# -- DEPTHWISE_CONV_2D ---------------------------------------------------------------------------------------

def dw_model(c: int, mult: int, k: int, stride: int, padding: str, dilation: int, act: str, n: int = 1,
             dtype=np.float32, per_channel: bool = True, seed: int = 2, hw: tuple = (10, 9)):
    oh, ow = out_len(hw[0], k, stride, padding, dilation), out_len(hw[1], k, stride, padding, dilation)
    opts = dict(padding=padding, stride_w=stride, stride_h=stride, depth_multiplier=mult,
                dilation_w_factor=dilation, dilation_h_factor=dilation, fused_activation_function=act)
    mb = ModelBuilder()
    if dtype == np.float32:
        rng = np.random.default_rng(seed)
        x = mb.input("x", [n, *hw, c])
        w = mb.const("w", rng.standard_normal([1, k, k, c * mult]).astype(np.float32))
        b = mb.const("b", rng.standard_normal(c * mult).astype(np.float32))
        y = mb.tensor("y", [n, oh, ow, c * mult])
        mb.op("DEPTHWISE_CONV_2D", [x, w, b], [y], version=2, **opts)
        mb.output(y)
        return mb.build(), [rng.standard_normal([n, *hw, c]).astype(np.float32)]
    q = Q(dtype, seed)
    oc = c * mult
    x = mb.input("x", [n, *hw, c], q.dtype, scale=q.x_scale, zero_point=q.x_zp)
    wv, ws, wzp = q.weights([1, k, k, oc], oc, per_channel)
    w = mb.const("w", wv, scale=ws, zero_point=wzp, axis=3)
    bv, bs = q.bias(oc, k * k, ws)
    b = mb.const("b", bv, scale=bs if per_channel else bs[:1],
                 zero_point=np.zeros(bs.size if per_channel else 1))
    y = mb.tensor("y", [n, oh, ow, oc], q.dtype, scale=q.out_scale(k * k, ws), zero_point=q.y_zp)
    mb.op("DEPTHWISE_CONV_2D", [x, w, b], [y], version=3, **opts)
    mb.output(y)
    return mb.build(), [q.values([n, *hw, c])]


DW_CASES = [
    # channels, multiplier, kernel, stride, padding, dilation, act, batch
    (3, 1, 3, 1, "SAME", 1, "RELU6", 1),
    (5, 2, 3, 2, "SAME", 1, "NONE", 1),
    (7, 1, 3, 2, "VALID", 1, "RELU", 2),
    (13, 3, 5, 1, "SAME", 2, "RELU_N1_TO_1", 1),
    (4, 1, 3, 1, "VALID", 2, "TANH", 1),
    (5, 1, 2, 1, "SAME", 1, "SIGN_BIT", 2),
]


@pytest.mark.parametrize("c,mult,k,stride,padding,dilation,act,n", DW_CASES)
def test_depthwise_float(c, mult, k, stride, padding, dilation, act, n):
    check_float(*dw_model(c, mult, k, stride, padding, dilation, act, n))


@pytest.mark.parametrize("dtype,per_channel", [(np.int8, True), (np.int8, False), (np.uint8, False)])
@pytest.mark.parametrize("c,mult,k,stride,padding,dilation,act,n", [c for c in DW_CASES if c[6] in QACTS])
def test_depthwise_quant(dtype, per_channel, c, mult, k, stride, padding, dilation, act, n):
    check_quant(*dw_model(c, mult, k, stride, padding, dilation, act, n, dtype, per_channel))


# -- TRANSPOSE_CONV ------------------------------------------------------------------------------------------

def tconv_model(cin: int, cout: int, k: int, stride: int, padding: str, hw: tuple, out_hw: tuple,
                bias: bool = True, act: str | None = None, n: int = 1, dtype=np.float32,
                per_channel: bool = True):
    mb = ModelBuilder()
    shape = mb.const("shape", np.array([n, *out_hw, cout], np.int32))
    opts = dict(padding=padding, stride_w=stride, stride_h=stride)
    if act is not None:
        opts["fused_activation_function"] = act
    version = 4 if act is not None else 3 if bias else 1
    if dtype == np.float32:
        rng = np.random.default_rng(4)
        x = mb.input("x", [n, *hw, cin])
        w = mb.const("w", rng.standard_normal([cout, k, k, cin]).astype(np.float32))
        b = mb.const("b", rng.standard_normal(cout).astype(np.float32)) if bias else -1
        y = mb.tensor("y", [n, *out_hw, cout])
        inputs = [rng.standard_normal([n, *hw, cin]).astype(np.float32)]
    else:
        q = Q(dtype, 5)
        x = mb.input("x", [n, *hw, cin], q.dtype, scale=q.x_scale, zero_point=q.x_zp)
        wv, ws, wzp = q.weights([cout, k, k, cin], cout, per_channel)
        w = mb.const("w", wv, scale=ws, zero_point=wzp, axis=0)
        b = -1
        if bias:
            bv, bs = q.bias(cout, cin * 2, ws)
            b = mb.const("b", bv, scale=bs if per_channel else bs[:1],
                         zero_point=np.zeros(bs.size if per_channel else 1))
        taps = cin * max(1, (k // stride) ** 2)
        y = mb.tensor("y", [n, *out_hw, cout], q.dtype, scale=q.out_scale(taps, ws), zero_point=q.y_zp)
        inputs = [q.values([n, *hw, cin])]
        version = max(version, 3)
    mb.op("TRANSPOSE_CONV", [shape, w, x, b] if bias else [shape, w, x], [y], version=version, **opts)
    mb.output(y)
    return mb.build(), inputs


TCONV_CASES = [
    # cin, cout, kernel, stride, padding, input hw, output hw, bias
    (3, 5, 3, 1, "SAME", (5, 6), (5, 6), True),
    (5, 3, 3, 2, "SAME", (4, 5), (8, 10), True),
    (4, 7, 4, 2, "SAME", (4, 4), (8, 8), False),
    (7, 4, 3, 2, "VALID", (4, 5), (9, 11), True),
    (6, 5, 2, 2, "VALID", (3, 4), (6, 8), False),
    (5, 6, 3, 2, "SAME", (4, 4), (7, 7), True),  # output smaller than the full 9x9: SAME crops it
]


@pytest.mark.parametrize("cin,cout,k,stride,padding,hw,out_hw,bias", TCONV_CASES)
def test_transpose_conv_float(cin, cout, k, stride, padding, hw, out_hw, bias):
    check_float(*tconv_model(cin, cout, k, stride, padding, hw, out_hw, bias))


@pytest.mark.parametrize("act", ["RELU", "RELU6"])
def test_transpose_conv_float_activation(act):
    check_float(*tconv_model(5, 3, 3, 2, "SAME", (4, 5), (8, 10), True, act=act, n=2))


@pytest.mark.parametrize("dtype,per_channel", [(np.int8, True), (np.int8, False), (np.uint8, False)])
@pytest.mark.parametrize("case", [TCONV_CASES[1], TCONV_CASES[3], TCONV_CASES[4]])
def test_transpose_conv_quant(dtype, per_channel, case):
    check_quant(*tconv_model(*case, dtype=dtype, per_channel=per_channel))


def mediapipe_model(x_shape, w, b, padding: int, stride: tuple, out_hw: tuple) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", x_shape)
    wi, bi = mb.const("w", w), mb.const("b", b)
    y = mb.tensor("y", [x_shape[0], *out_hw, w.shape[0]])
    mb.op("Convolution2DTransposeBias", [x, wi, bi], [y],
          custom_options=struct.pack("<iii", padding, stride[1], stride[0]))
    mb.output(y)
    return mb.build()


def transpose_conv_reference(x, w, b, stride, pads, out_hw) -> np.ndarray:
    """Straight from the definition: each input pixel adds its dot product with every filter tap."""
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    out = np.zeros((n, *out_hw, o), np.float64) + b
    for iy in range(h):
        for ix in range(wd):
            for ky in range(kh):
                for kx in range(kw):
                    oy, ox = iy * stride[0] - pads[0] + ky, ix * stride[1] - pads[1] + kx
                    if 0 <= oy < out_hw[0] and 0 <= ox < out_hw[1]:
                        out[:, oy, ox, :] += x[:, iy, ix, :].astype(np.float64) @ w[:, ky, kx, :].T
    return out.astype(np.float32)


@pytest.mark.parametrize("padding,k,stride,hw,out_hw,pads", [
    # MediaPipe's SAME (TfLitePadding 1) trims max(0, k - (in - 1) % s - 1) off (in - 1) * s + k,
    # the top/left getting the smaller half; VALID (2) keeps it all.
    (1, 4, (2, 2), (5, 6), (9, 12), (1, 1)),
    (1, 3, (2, 2), (5, 6), (9, 12), (1, 0)),
    (1, 3, (1, 2), (5, 4), (5, 8), (1, 0)),
    (1, 2, (2, 2), (4, 5), (8, 9), (0, 0)),
    (2, 3, (2, 2), (4, 5), (9, 11), (0, 0)),
    (2, 2, (2, 2), (3, 3), (6, 6), (0, 0)),
])
def test_mediapipe_transpose_conv_bias(padding, k, stride, hw, out_hw, pads):
    rng = np.random.default_rng(6)
    x = rng.standard_normal([2, *hw, 5]).astype(np.float32)
    w = rng.standard_normal([3, k, k, 5]).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    content = mediapipe_model(x.shape, w, b, padding, stride, out_hw)
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    assert tuple(it.get_output_details()[0]["shape"]) == (2, *out_hw, 3)
    ours = run_ours(content, [x])[0]
    assert_float_close(ours, transpose_conv_reference(x, w, b, stride, pads, out_hw))


def test_mediapipe_transpose_conv_bias_bad_options():
    w, b = np.zeros([3, 2, 2, 5], np.float32), np.zeros(3, np.float32)
    content = mediapipe_model([1, 4, 4, 5], w, b, 0, (2, 2), (8, 8))
    with pytest.raises(gd.ModelError, match=r"Convolution2DTransposeBias.*padding 0"):
        gd.Interpreter(model_content=content)


# -- FULLY_CONNECTED -------------------------------------------------------------------------------------

def fc_model(x_shape, units: int, keep_num_dims: bool = False, bias: str = "yes", act: str = "NONE",
             dtype=np.float32, per_channel: bool = False, seed: int = 7):
    k = x_shape[-1]
    rows = int(np.prod(x_shape)) // k
    y_shape = [*x_shape[:-1], units] if keep_num_dims else [rows, units]
    mb = ModelBuilder()
    opts = dict(fused_activation_function=act, keep_num_dims=keep_num_dims)
    if dtype == np.float32:
        rng = np.random.default_rng(seed)
        x = mb.input("x", x_shape)
        w = mb.const("w", rng.standard_normal([units, k]).astype(np.float32))
        b = {"yes": lambda: mb.const("b", rng.standard_normal(units).astype(np.float32)),
             "zero": lambda: mb.const("b", np.zeros(units, np.float32)), "no": lambda: -1}[bias]()
        y = mb.tensor("y", y_shape)
        mb.op("FULLY_CONNECTED", [x, w, b], [y], **opts)
        mb.output(y)
        return mb.build(), [rng.standard_normal(x_shape).astype(np.float32)]
    q = Q(dtype, seed)
    x = mb.input("x", x_shape, q.dtype, scale=q.x_scale, zero_point=q.x_zp)
    wv, ws, wzp = q.weights([units, k], units, per_channel)
    w = mb.const("w", wv, scale=ws, zero_point=wzp, axis=0)
    b = -1
    if bias == "yes":
        bv, bs = q.bias(units, k, ws)
        b = mb.const("b", bv, scale=bs if per_channel else bs[:1],
                     zero_point=np.zeros(bs.size if per_channel else 1))
    y = mb.tensor("y", y_shape, q.dtype, scale=q.out_scale(k, ws), zero_point=q.y_zp)
    mb.op("FULLY_CONNECTED", [x, w, b], [y], version=5 if per_channel else 4, **opts)
    mb.output(y)
    return mb.build(), [q.values(x_shape)]


@pytest.mark.parametrize("x_shape,units,keep,act", [
    ((1, 13), 7, False, "NONE"),
    ((5, 7), 3, False, "RELU"),
    ((2, 3, 13), 5, True, "RELU6"),
    ((2, 3, 13), 5, False, "RELU_N1_TO_1"),
    ((2, 2, 3, 6), 4, False, "RELU"),
    ((4, 1040), 9, False, "NONE"),
])
def test_fully_connected_float(x_shape, units, keep, act):
    check_float(*fc_model(x_shape, units, keep, act=act))


def test_fully_connected_refuses_tanh():
    """Unlike CONV_2D, which ignores a fused TANH, TFLite's FULLY_CONNECTED refuses it."""
    content, _ = fc_model((2, 6), 4, act="TANH")
    with pytest.raises(gd.ModelError, match=r"node 0 \(FULLY_CONNECTED\).*TANH"):
        gd.Interpreter(model_content=content)


def test_fully_connected_float_without_bias():
    content, inputs = fc_model((3, 13), 5, bias="no")
    check_float(content, inputs, fc_model((3, 13), 5, bias="zero")[0])


@pytest.mark.parametrize("dtype,per_channel", [(np.int8, False), (np.int8, True), (np.uint8, False)])
@pytest.mark.parametrize("x_shape,units,keep,act,bias", [
    ((3, 13), 7, False, "NONE", "yes"),
    ((2, 3, 5), 5, True, "RELU", "yes"),
    ((4, 1300), 6, False, "RELU6", "no"),  # K = 1300: the exact float32 sum is split in two
    # 12k values: enough rounding ties to tell LiteRT's one rounding of acc * multiplier from convolutions' two
    ((3, 128, 40), 32, True, "NONE", "no"),
])
def test_fully_connected_quant(dtype, per_channel, x_shape, units, keep, act, bias):
    if dtype == np.uint8 and per_channel:
        pytest.skip("TFLite has uint8 FULLY_CONNECTED with per-tensor weights only")
    check_quant(*fc_model(x_shape, units, keep, bias, act, dtype, per_channel))


def test_fully_connected_hybrid():
    """Float input, int8 per-channel weights (the dynamic-range MobileNet V2 classifier is built so).
    LiteRT quantizes each input row to int8; with K = 64 the difference measured 0.3% to 0.6% of max|ref|
    over five inputs."""
    rng = np.random.default_rng(8)
    mb = ModelBuilder()
    x = mb.input("x", [3, 64])
    w = mb.const("w", rng.integers(-127, 128, [10, 64]).astype(np.int8), scale=rng.uniform(0.01, 0.02, 10),
                 zero_point=np.zeros(10), axis=0)
    y = mb.tensor("y", [3, 10])
    mb.op("FULLY_CONNECTED", [x, w, -1], [y], asymmetric_quantize_inputs=True, version=12)
    mb.output(y)
    assert hybrid_error(mb.build(), [rng.standard_normal([3, 64]).astype(np.float32)]) < 0.02


# -- BATCH_MATMUL ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("xs,ys,adj_x,adj_y,const_y", [
    ((3, 5), (5, 7), False, False, False),
    ((2, 3, 5), (2, 5, 4), False, False, False),
    ((2, 5, 3), (2, 5, 4), True, False, False),
    ((2, 3, 5), (2, 4, 5), False, True, True),
    ((2, 1, 3, 5), (4, 5, 6), False, False, False),  # batch dims broadcast to [2, 4]
    ((1, 4, 5, 3), (3, 1, 6, 5), True, True, False),
    ((3, 2, 7), (7, 13), False, False, True),
])
def test_batch_matmul_float(xs, ys, adj_x, adj_y, const_y):
    rng = np.random.default_rng(9)
    m = xs[-1] if adj_x else xs[-2]
    n = ys[-2] if adj_y else ys[-1]
    out = (*np.broadcast_shapes(xs[:-2], ys[:-2]), m, n)
    mb = ModelBuilder()
    x = mb.input("x", xs)
    yv = rng.standard_normal(ys).astype(np.float32)
    y = mb.const("y", yv) if const_y else mb.input("y", ys)
    z = mb.tensor("z", out)
    mb.op("BATCH_MATMUL", [x, y], [z], adj_x=adj_x, adj_y=adj_y)
    mb.output(z)
    inputs = [rng.standard_normal(xs).astype(np.float32)] + ([] if const_y else [yv])
    check_float(mb.build(), inputs)


def test_batch_matmul_int8():
    q = Q(np.int8, 10)
    mb = ModelBuilder()
    x = mb.input("x", [2, 3, 6], np.int8, scale=q.x_scale, zero_point=q.x_zp)
    y = mb.input("y", [2, 6, 5], np.int8, scale=0.03, zero_point=-4)
    z = mb.tensor("z", [2, 3, 5], np.int8, scale=q.out_scale(6, np.array([0.03])), zero_point=q.y_zp)
    mb.op("BATCH_MATMUL", [x, y], [z], version=2)
    mb.output(z)
    check_quant(mb.build(), [q.values([2, 3, 6]), q.values([2, 6, 5])])


# -- errors and arithmetic details ----------------------------------------------------------------------

def test_conv2d_bad_channels():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 5])
    w = mb.const("w", np.zeros([2, 3, 3, 2], np.float32))
    y = mb.tensor("y", [1, 4, 4, 2])
    mb.op("CONV_2D", [x, w, -1], [y], padding="SAME", stride_w=1, stride_h=1)
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"node 0 \(CONV_2D\): input channels 5 .* filter's 2"):
        gd.Interpreter(model_content=mb.build())


def test_transpose_conv_output_shape_computed_at_run_time():
    """output_shape as an input, not a constant: the output is a dynamic tensor sized at invoke, as in LiteRT."""
    mb = ModelBuilder()
    s = mb.input("s", [4], np.int32)
    x = mb.input("x", [1, 4, 4, 3])
    w = mb.const("w", np.random.default_rng(3).standard_normal([2, 3, 3, 3]).astype(np.float32))
    y = mb.tensor("y", [1, 8, 8, 2])
    mb.op("TRANSPOSE_CONV", [s, w, x], [y], padding="SAME", stride_w=2, stride_h=2)
    mb.output(y)
    content = mb.build()
    xv = np.random.default_rng(4).standard_normal([1, 4, 4, 3]).astype(np.float32)
    for shape in ([1, 8, 8, 2], [1, 7, 7, 2]):
        sv = np.array(shape, np.int32)
        ours, ref = run_ours(content, [sv, xv])[0], run_litert(content, [sv, xv])[0]
        assert ours.shape == tuple(shape)
        assert_float_close(ours, ref, what=f"output_shape {shape}")


def tflite_mbqm(x: int, multiplier: int, shift: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier in Python integers, from gemmlowp's definitions: a doubling
    high multiply rounding half away from zero, then a rounding right shift (ties away from zero)."""
    left, right = max(shift, 0), max(-shift, 0)
    ab = x * (1 << left) * multiplier
    v = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    high = (abs(v) >> 31) * (1 if v >= 0 else -1)  # C division truncates toward zero
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if (high & mask) > threshold else 0)


def test_requantize_matches_tflite_fixed_point():
    """The vectorized requantization against TFLite's formula, with rounding ties, both signs and
    multipliers above 1 (a left shift)."""
    rng = np.random.default_rng(11)
    reals = np.array([0.5, 0.25, 1 / 3, 0.0007, 0.1234567, 1.5, 3.0])
    mult, shift = quantize_multipliers(reals)
    zp = 5
    acc = np.stack([np.concatenate([rng.integers(int(-140 / r), int(140 / r), 300), np.arange(-40, 41)])
                    for r in reals], axis=1).astype(np.float32)
    corr = np.arange(reals.size, dtype=np.int64) - 3
    rq = Requant(mult, shift, zp, -128, 127, np.dtype(np.int8))
    want = np.array([[tflite_mbqm(int(a) + int(corr[c]), int(mult[c]), int(shift[c])) + zp
                      for c, a in enumerate(row)] for row in acc]).clip(-128, 127)
    got = requantize(acc, corr, rq)
    assert 0 < np.mean(np.abs(want) < 120)
    np.testing.assert_array_equal(got, want)


# -- work split across threads ------------------------------------------------------------------------------

def test_conv2d_split_across_threads():
    """Big enough to be split into one block of output rows per thread; with batch 3 and two threads a block
    boundary falls in the middle of an image. (On a one-core machine it runs as one block.)"""
    content, inputs = conv_model(16, 32, (3, 3), 1, "SAME", 1, "RELU6", n=3, hw=(16, 16))
    check_float(content, inputs)
    check_quant(*qconv_model(np.int8, True, 16, 32, 3, 1, "SAME", 1, "NONE", n=3, hw=(16, 16)))


def test_depthwise_split_across_threads():
    content, inputs = dw_model(32, 1, 3, 1, "SAME", 1, "RELU", n=3, hw=(24, 24))
    check_float(content, inputs)
    check_quant(*dw_model(32, 1, 3, 1, "SAME", 1, "RELU", n=3, hw=(24, 24), dtype=np.int8))


@pytest.mark.parametrize("option", [0, 1, 3])
def test_depthwise_multiplier_comes_from_the_shapes(option):
    """TFLite's kernels ignore a depth_multiplier option that disagrees with the shapes (3 -> 6 channels is
    a multiplier of 2); its reference kernels are the judge (XNNPACK refuses such a node)."""
    rng = np.random.default_rng(12)
    mb = ModelBuilder()
    x = mb.input("x", [1, 5, 5, 3])
    w = mb.const("w", rng.standard_normal([1, 3, 3, 6]).astype(np.float32))
    y = mb.tensor("y", [1, 5, 5, 6])
    b = mb.const("b", np.zeros(6, np.float32))
    mb.op("DEPTHWISE_CONV_2D", [x, w, b], [y], padding="SAME", stride_w=1, stride_h=1,
          depth_multiplier=option, version=2)
    mb.output(y)
    content, inputs = mb.build(), [rng.standard_normal([1, 5, 5, 3]).astype(np.float32)]
    assert_float_close(run_ours(content, inputs)[0], run_litert(content, inputs, reference_kernels=True)[0])
