"""Quantized models on the GPU path (OpenCL and OpenGL ES) against LiteRT's integer kernels.

The GPU holds int8/uint8 tensors as their dequantized floats and rounds every quantized op's result onto its
output's grid (a fused fake-quant step); these tests check that this follows the fixed-point graph through
chains of ops: per-tensor and per-channel weights, asymmetric zero points on every activation, requantizing
ops (CONV_2D, DEPTHWISE, FULLY_CONNECTED, ADD, MUL, uint8 CONCATENATION) next to ops that keep their input's
grid (AVERAGE/MAX_POOL, MEAN, PAD, RESHAPE, RESIZE_BILINEAR, int8 CONCATENATION), SOFTMAX onto its fixed
grid, uint8 weights with non-zero zero points. Also: enable_quantized_inference=False keeps the quantized
nodes on the CPU, and constants are dequantized once, at preparation, never per invoke.

Activation grids are calibrated as the TFLite converter does: the float twin of each model (same weights,
dequantized) runs on LiteRT and each tensor gets an asymmetric grid spanning (twice) its range. Where the GPU
differs from LiteRT it is LiteRT that is off the exact result: its requantization rounds twice (a 31-bit
high multiply, then a rounding shift), so values within ~2^-(shift+1) of a half step round the other way
(every value the GPU gets "wrong" on these models is within 0.01 step of a half, and the GPU's equals the
exactly rounded value); its reference int8 MUL rounds so more often than its optimized one, and both its
int8 MEANs lose up to half a step when they requantize. So each node's output is compared with LiteRT's
reference kernels and with its optimized (BUILTIN) kernels, a value matching either counting as equal.

Tolerance (as TFLite's GPU delegate tests): per tensor, at most 1% of values differ (at least one may, for
the small head tensors), and none by more than 2 steps.

The real MobileNets run whole in test_gpu_models.py (int8, fp16 and dynamic range on OpenCL, fp32 on both),
which compares the int8 ones by their (degenerate) outputs only; here the int8 MobileNet V1 is checked node
by node, on both backends.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter

import numpy as np
import pytest

import gpu_delegate as gd
import gpu_delegate.runner
from gpu_delegate.backends import codegen
from gpu_delegate.ops import conv as conv_ops
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import (
    assert_float_close,
    need_models,
    on_cpu_opencl,
    plan_of,
    run,
    run_litert,
    runner_of,
    shared_delegate,
)

I32 = np.int32


def litert_both(content: bytes, inputs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per output: (LiteRT's reference kernels' result, its optimized BUILTIN kernels' result; not XNNPACK,
    which refuses some of these models' int8 convolutions)."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    optimized = litert.Interpreter(model_content=content, num_threads=1,
                                   experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return list(zip(run_litert(content, inputs, reference_kernels=True), run(optimized, inputs), strict=True))


def assert_quantized_match(ours: np.ndarray, refs: tuple[np.ndarray, ...], what: str) -> None:
    """At most 1% of the values (and at least 1) differ from every reference, none by more than 2 steps."""
    for ref in refs:
        assert ours.shape == ref.shape and ours.dtype == ref.dtype, f"{what}: {ours.dtype}{ours.shape} vs " \
            f"{ref.dtype}{ref.shape}"
    diff = np.min([np.abs(ours.astype(np.int64) - ref.astype(np.int64)) for ref in refs], axis=0)
    off = int(np.count_nonzero(diff))
    assert off <= max(1, ours.size // 100), f"{what}: {off} of {ours.size} values differ from LiteRT"
    assert diff.max(initial=0) <= 2, f"{what}: {diff.max()} quantization steps from LiteRT"


class QModel:
    """A quantized model described op by op over named tensors, built twice: as its float twin (weights
    dequantized, float activations) to calibrate the activation grids, then quantized.

    An op's output grid ``q`` is None (calibrated), "input" (its first input's grid: ops TFLite requires to
    keep it) or a fixed (scale, zero point). Calibrated grids span ``headroom`` times the float range, as
    if calibrated on more varied inputs: a coarser grid means a smaller requantization multiplier, hence
    fewer of the double-rounding differences the module docstring describes. Inputs get random integers
    over their type's whole range. Every node's output is an output of the model."""

    def __init__(self, dtype, seed: int, headroom: float = 2.0):
        self.headroom = headroom
        self.dtype = np.dtype(dtype)
        self.info = np.iinfo(self.dtype)
        self.rng = np.random.default_rng(seed)
        self.inputs: list[tuple[str, list[int], tuple[float, int]]] = []
        self.feeds: list[np.ndarray] = []
        self.nodes: list[tuple] = []  # (op, inputs, output, shape, q, version, options)
        self.shapes: dict[str, list[int]] = {}
        # constants: name -> ("int", data) | ("weights", codes, scales, zero points, axis) | ("bias", floats, w)
        self.consts: dict[str, tuple] = {}
        self.q: dict[str, tuple[float, int]] = {}  # activation grids, set by calibrate()

    def input(self, name: str, shape: list[int], q: tuple[float, int]) -> str:
        self.inputs.append((name, list(shape), q))
        self.shapes[name] = list(shape)
        self.feeds.append(self.rng.integers(self.info.min, self.info.max + 1, shape).astype(self.dtype))
        return name

    def const(self, value) -> str:
        name = f"c{len(self.consts)}"
        self.consts[name] = ("int", np.asarray(value))
        return name

    def weights(self, shape: list[int], fan_in: int, axis: int | None = None, zero_point: int = 0) -> str:
        """Codes over the whole 8-bit range (int8: symmetric), per channel along ``axis`` or with one scale,
        scaled so that activations keep their magnitude from layer to layer (codes have a std of ~74)."""
        name = f"w{len(self.consts)}"
        codes = self.rng.integers(max(self.info.min, -127), self.info.max + 1, shape).astype(self.dtype)
        n = 1 if axis is None else shape[axis]
        scales = self.rng.uniform(0.7, 1.4, n) / (74 * np.sqrt(fan_in))
        self.consts[name] = ("weights", codes, scales, np.full(n, zero_point), axis)
        return name

    def bias(self, n: int, weights: str) -> str:
        """A float bias, stored as int32 on the grid input scale x weight scale once the input's is known."""
        name = f"b{len(self.consts)}"
        self.consts[name] = ("bias", self.rng.normal(0.0, 0.3, n).astype(np.float32), weights)
        return name

    def op(self, op: str, ins: list[str], out: str, shape: list[int], q=None, version: int = 1, **opts) -> str:
        self.nodes.append((op, list(ins), out, list(shape), q, version, opts))
        self.shapes[out] = list(shape)
        return out

    @property
    def outputs(self) -> list[str]:
        return [node[2] for node in self.nodes]

    def conv(self, x: str, out: str, cout: int, k: int, stride: int, per_channel: bool, act: str = "NONE",
             w_zero_point: int = 0, **kw) -> str:
        n, h, w, cin = self.shapes[x]
        wt = self.weights([cout, k, k, cin], k * k * cin, 0 if per_channel else None, w_zero_point)
        return self.op("CONV_2D", [x, wt, self.bias(cout, wt)], out, [n, -(-h // stride), -(-w // stride), cout],
                       padding="SAME", stride_h=stride, stride_w=stride, fused_activation_function=act,
                       version=3, **kw)

    def depthwise(self, x: str, out: str, k: int, stride: int, per_channel: bool, act: str = "NONE",
                  w_zero_point: int = 0, **kw) -> str:
        n, h, w, c = self.shapes[x]
        wt = self.weights([1, k, k, c], k * k, 3 if per_channel else None, w_zero_point)
        return self.op("DEPTHWISE_CONV_2D", [x, wt, self.bias(c, wt)], out, [n, -(-h // stride), -(-w // stride), c],
                       padding="SAME", stride_h=stride, stride_w=stride, depth_multiplier=1,
                       fused_activation_function=act, version=3, **kw)

    # -- building ----------------------------------------------------------------------------------------
    def calibrate(self) -> None:
        """Run the float twin on the dequantized inputs; give each activation the grid spanning its range."""
        for name, _, q in self.inputs:
            self.q[name] = q
        content = self._build(self.inputs, self.nodes, quantized=False)
        floats = [((x.astype(np.float64) - q[1]) * q[0]).astype(np.float32)
                  for x, (_, _, q) in zip(self.feeds, self.inputs)]
        values = dict(zip([n[2] for n in self.nodes], run_litert(content, floats)))
        for _, ins, out, _, q, _, _ in self.nodes:
            if q == "input":
                self.q[out] = self.q[ins[0]]
            elif q is not None:
                self.q[out] = q
            else:
                lo = self.headroom * min(float(values[out].min()), 0.0)
                hi = self.headroom * max(float(values[out].max()), 0.0)
                scale = (hi - lo) / (self.info.max - self.info.min) or 1.0
                zero = int(np.clip(round(self.info.min - lo / scale), self.info.min, self.info.max))
                self.q[out] = (scale, zero)

    def build(self, outputs: list[str] | None = None) -> bytes:
        """The quantized model; its outputs every node's, or those named."""
        if not self.q:
            self.calibrate()
        return self._build(self.inputs, self.nodes, outputs=outputs)

    def node_model(self, k: int) -> tuple[bytes, list[str]]:
        """Node k alone, the tensors it computes from made the model's inputs: (model, their names)."""
        computed = [x for x in self.nodes[k][1] if x in self.shapes]
        return self._build([(x, self.shapes[x], self.q[x]) for x in computed], [self.nodes[k]]), computed

    def _build(self, inputs: list[tuple], nodes: list[tuple], quantized: bool = True,
               outputs: list[str] | None = None) -> bytes:
        mb = ModelBuilder()
        act_type = self.dtype if quantized else np.float32
        ids: dict[str, int] = {}

        def grid(name: str) -> dict:
            return {"scale": self.q[name][0], "zero_point": self.q[name][1]} if quantized else {}

        def constant(name: str, reader: str) -> int:
            kind, *rest = self.consts[name]
            if kind == "int":
                return mb.const(name, rest[0])
            if kind == "weights":
                codes, scales, zps, axis = rest
                if quantized:
                    return mb.const(name, codes, scale=scales, zero_point=zps, axis=axis or 0)
                shape = [1] * codes.ndim
                shape[axis or 0] = scales.size
                return mb.const(name, (codes - zps.reshape(shape)) * scales.reshape(shape), np.float32)
            values, weights = rest
            if not quantized:
                return mb.const(name, values)
            scales = self.q[reader][0] * self.consts[weights][2]
            scales = np.broadcast_to(scales, values.shape)
            return mb.const(name, np.round(values / scales).astype(I32), scale=scales, zero_point=0)

        for name, shape, _ in inputs:
            ids[name] = mb.input(name, shape, act_type, **grid(name))
        for op, ins, out, shape, _, version, opts in nodes:
            args = [ids[x] if x in ids else constant(x, ins[0]) for x in ins]
            ids[out] = mb.tensor(out, shape, act_type, **grid(out))
            mb.op(op, args, [ids[out]], version=version, **opts)
        mb.output(*(ids[name] for name in (outputs or [node[2] for node in nodes])))
        return mb.build()


def conv_trunk(seed: int = 11) -> QModel:
    """int8: CONV_2D (per-tensor weights, RELU) -> CONV_2D 1x1 (per-channel) -> DEPTHWISE (per-channel,
    stride 2) and AVERAGE_POOL of the same input -> ADD (RELU) -> MUL by per-channel constants -> MEAN over
    H, W (on its input's grid: LiteRT's int8 MEAN loses up to half a step when it requantizes) ->
    FULLY_CONNECTED (per-channel) -> SOFTMAX."""
    b = QModel(np.int8, seed)
    b.input("x", [2, 12, 14, 6], (0.03, -7))
    b.conv("x", "conv_per_tensor", 16, 3, 1, per_channel=False, act="RELU")
    b.conv("conv_per_tensor", "conv_1x1", 12, 1, 1, per_channel=True)
    b.depthwise("conv_1x1", "depthwise", 3, 2, per_channel=True)
    b.op("AVERAGE_POOL_2D", ["conv_1x1"], "avg_pool", [2, 6, 7, 12], "input", padding="SAME", stride_h=2,
         stride_w=2, filter_height=3, filter_width=3)
    b.op("ADD", ["depthwise", "avg_pool"], "add", [2, 6, 7, 12], fused_activation_function="RELU")
    b.op("MUL", ["add", b.weights([12], 1)], "mul", [2, 6, 7, 12])
    b.op("MEAN", ["mul", b.const(np.array([1, 2], I32))], "mean", [2, 1, 1, 12], "input", keep_dims=True)
    wt = b.weights([10, 12], 12, axis=0)
    b.op("FULLY_CONNECTED", ["mean", wt, b.bias(10, wt)], "fc", [2, 10], version=5)
    b.op("SOFTMAX", ["fc"], "softmax", [2, 10], (1 / 256, -128), beta=1.0)
    return b


def layout_chain(seed: int = 12) -> QModel:
    """int8 ops that keep their input's grid, chained: PAD (with the zero point, not 0) -> MAX_POOL ->
    RESIZE_BILINEAR; CONCATENATION of the pool and a 1x1 CONV_2D onto its grid -> RESHAPE -> ADD."""
    b = QModel(np.int8, seed)
    b.input("x", [2, 7, 9, 5], (0.05, 17))
    b.op("PAD", ["x", b.const(np.array([[0, 0], [1, 2], [2, 1], [0, 0]], I32))], "pad", [2, 10, 12, 5], "input")
    b.op("MAX_POOL_2D", ["pad"], "max_pool", [2, 9, 11, 5], "input", padding="VALID", stride_h=1, stride_w=1,
         filter_height=2, filter_width=2)
    b.op("RESIZE_BILINEAR", ["max_pool", b.const(np.array([13, 15], I32))], "resize", [2, 13, 15, 5], "input",
         half_pixel_centers=True)
    b.conv("max_pool", "conv", 6, 1, 1, per_channel=True, q="input")
    b.op("CONCATENATION", ["max_pool", "conv"], "concat", [2, 9, 11, 11], "input", axis=3)
    b.op("RESHAPE", ["concat", b.const(np.array([2, 99, 11], I32))], "reshape", [2, 99, 11], "input",
         new_shape=[2, 99, 11])
    b.op("ADD", ["reshape", "reshape"], "add", [2, 99, 11])
    return b


def uint8_chain(seed: int = 13) -> QModel:
    """uint8 with non-zero weight zero points (per-tensor, as uint8 allows): CONV_2D (RELU6) -> DEPTHWISE ->
    CONCATENATION of the two on different grids (uint8's rescaling concat) -> AVERAGE_POOL -> SOFTMAX."""
    b = QModel(np.uint8, seed)
    b.input("x", [1, 9, 8, 3], (0.02, 128))
    b.conv("x", "conv", 7, 3, 1, per_channel=False, act="RELU6", w_zero_point=120)
    b.depthwise("conv", "depthwise", 3, 1, per_channel=False, w_zero_point=131)
    b.op("CONCATENATION", ["conv", "depthwise"], "concat", [1, 9, 8, 14], axis=3)
    b.op("AVERAGE_POOL_2D", ["concat"], "avg_pool", [1, 4, 4, 14], "input", padding="VALID", stride_h=2,
         stride_w=2, filter_height=2, filter_width=2)
    b.op("SOFTMAX", ["avg_pool"], "softmax", [1, 4, 4, 14], (1 / 256, 0), beta=1.0)
    return b


def dot_convs(seed: int = 15) -> QModel:
    """int8 CONV_2Ds of the kind that sum integer dot products where the device has them (ops/conv.py
    emit_conv_int8: output channels x taps >= INT8_MIN_PRODUCTS; layers this small only with INT8_MIN_MACS 0):
    partial input and output slices, batch 2, SAME padding with the input's non-zero zero point, stride 2,
    dilation, per-tensor and per-channel weights, RELU and RELU6, convolutions of one input (which share its
    quantize pass; two of them of one shape), a residual ADD, and a FULLY_CONNECTED whose rows are pixels."""
    b = QModel(np.int8, seed)
    b.input("x", [2, 9, 11, 6], (0.04, -9))
    b.conv("x", "c3x3_40_relu", 40, 3, 1, per_channel=True, act="RELU")
    b.conv("x", "c3x3_s2_30_relu6", 30, 3, 2, per_channel=False, act="RELU6")
    for name in ("c3x3_s2_24_a", "c3x3_s2_24_b"):  # two layers of one shape (and two output grids)
        b.conv("x", name, 24, 3, 2, per_channel=True, act="RELU")
    b.conv("c3x3_40_relu", "c1x1_264", 264, 1, 1, per_channel=True)
    b.conv("c1x1_264", "c3x3_d2_32", 32, 3, 1, per_channel=True, dilation_h_factor=2, dilation_w_factor=2)
    # a residual block's end: the 1x1 convolution's ADD of its own input, which it reads as codes where fused
    b.conv("c3x3_d2_32", "c1x1_32", 32, 1, 1, per_channel=True)
    b.op("ADD", ["c1x1_32", "c3x3_d2_32"], "residual_add", [2, 9, 11, 32])
    wt = b.weights([130, 30], 30)  # per-tensor, as TFLite's converter quantizes a FULLY_CONNECTED
    b.op("FULLY_CONNECTED", ["c3x3_s2_30_relu6", wt, b.bias(130, wt)], "fc_rows_130", [2, 5, 6, 130], version=5,
         keep_num_dims=True)
    return b


def grid_keepers(seed: int = 16) -> QModel:
    """int8 ops whose kernels store values of their input's grid, each on that grid (no fake-quant step of their own:
    Op.gpu_keeps_grid): AVERAGE_POOL 3x3 (SAME, its sum rounded once), 7x7 (VALID), 1x1 (stride 2) and 9x9 (each value
    rounded: more than 64), MAX_POOL, PAD, and the ops that move or pick values (STRIDED_SLICE, SLICE, TRANSPOSE,
    TILE, RESHAPE across channels, GATHER, MIRROR_PAD, RESIZE_NEAREST_NEIGHBOR, REDUCE_MAX, a CONCATENATION of
    parts on its grid, DEPTH_TO_SPACE, SPACE_TO_DEPTH);
    and an AVERAGE_POOL whose fused RELU6 bounds lie off the grid, which keeps its step (uint8_chain's
    CONCATENATION of parts on other grids keeps its own: test_quantized_chain)."""
    b = QModel(np.int8, seed)
    b.input("x", [2, 9, 10, 6], (0.05, -4))
    b.op("AVERAGE_POOL_2D", ["x"], "avg_3x3", [2, 9, 10, 6], "input", padding="SAME", stride_h=1, stride_w=1,
         filter_height=3, filter_width=3)
    b.op("AVERAGE_POOL_2D", ["avg_3x3"], "avg_7x7", [2, 3, 4, 6], "input", padding="VALID", stride_h=1, stride_w=1,
         filter_height=7, filter_width=7)
    b.op("AVERAGE_POOL_2D", ["x"], "avg_1x1_s2", [2, 5, 5, 6], "input", padding="VALID", stride_h=2, stride_w=2,
         filter_height=1, filter_width=1)
    b.op("AVERAGE_POOL_2D", ["x"], "avg_9x9", [2, 1, 2, 6], "input", padding="VALID", stride_h=1, stride_w=1,
         filter_height=9, filter_width=9)
    b.op("MAX_POOL_2D", ["avg_1x1_s2"], "max_pool", [2, 4, 4, 6], "input", padding="VALID", stride_h=1,
         stride_w=1, filter_height=2, filter_width=2)
    b.op("PAD", ["max_pool", b.const(np.array([[0, 0], [1, 0], [0, 2], [0, 0]], I32))], "pad", [2, 5, 6, 6], "input")
    b.op("AVERAGE_POOL_2D", ["x"], "avg_relu6", [2, 5, 5, 6], "input", padding="SAME", stride_h=2, stride_w=2,
         filter_height=2, filter_width=2, fused_activation_function="RELU6")
    b.op("STRIDED_SLICE", ["x", b.const(np.array([0, 1, 1, 0], I32)), b.const(np.array([2, 8, 10, 6], I32)),
                           b.const(np.array([1, 1, 2, 1], I32))], "strided_slice", [2, 7, 5, 6], "input")
    b.op("SLICE", ["avg_3x3", b.const(np.array([0, 0, 2, 1], I32)), b.const(np.array([2, 9, 5, 5], I32))], "slice",
         [2, 9, 5, 5], "input")
    b.op("TRANSPOSE", ["x", b.const(np.array([0, 2, 1, 3], I32))], "transpose", [2, 10, 9, 6], "input")
    b.op("TILE", ["slice", b.const(np.array([1, 1, 2, 1], I32))], "tile", [2, 9, 10, 5], "input")
    b.op("RESHAPE", ["x", b.const(np.array([2, 9, 60], I32))], "reshape", [2, 9, 60], "input", new_shape=[2, 9, 60])
    b.op("GATHER", ["x", b.const(np.array([8, 0, 4], I32))], "gather", [2, 3, 10, 6], "input", axis=1)
    b.op("MIRROR_PAD", ["avg_3x3", b.const(np.array([[0, 0], [1, 1], [2, 0], [0, 0]], I32))], "mirror_pad",
         [2, 11, 12, 6], "input", mode="REFLECT")
    b.op("RESIZE_NEAREST_NEIGHBOR", ["x", b.const(np.array([13, 15], I32))], "resize_nearest", [2, 13, 15, 6],
         "input")
    b.op("REDUCE_MAX", ["x", b.const(np.array([1, 2], I32))], "reduce_max", [2, 1, 1, 6], "input", keep_dims=True)
    b.op("CONCATENATION", ["x", "avg_3x3"], "concat", [2, 9, 10, 12], "input", axis=3)
    b.op("DEPTH_TO_SPACE", ["concat"], "depth_to_space", [2, 18, 20, 3], "input", block_size=2)
    b.op("SPACE_TO_DEPTH", ["depth_to_space"], "space_to_depth", [2, 9, 10, 12], "input", block_size=2)
    return b


def padded_convs(seed: int = 17) -> QModel:
    """int8 PADs on their input's grid read by VALID convolutions (merged into them by lowering/merge_pad.py, which
    pad with the zero point's value): a 3x3 CONV_2D (RELU), a 3x3 DEPTHWISE, and a causal Conv1D's PAD of a rank-3
    tensor read through a RESHAPE by a 1x3 CONV_2D."""
    b = QModel(np.int8, seed)
    b.input("x", [1, 8, 9, 6], (0.04, -9))
    b.op("PAD", ["x", b.const(np.array([[0, 0], [1, 1], [2, 0], [0, 0]], I32))], "pad", [1, 10, 11, 6], "input")
    wt = b.weights([20, 3, 3, 6], 54, 0)
    b.op("CONV_2D", ["pad", wt, b.bias(20, wt)], "conv", [1, 8, 9, 20], padding="VALID", stride_h=1, stride_w=1,
         fused_activation_function="RELU", version=3)
    b.op("PAD", ["x", b.const(np.array([[0, 0], [1, 1], [1, 1], [0, 0]], I32))], "pad_dw", [1, 10, 11, 6], "input")
    wt = b.weights([1, 3, 3, 6], 9, 3)
    b.op("DEPTHWISE_CONV_2D", ["pad_dw", wt, b.bias(6, wt)], "dw", [1, 8, 9, 6], padding="VALID", stride_h=1,
         stride_w=1, depth_multiplier=1, version=3)
    b.input("t", [1, 20, 8], (0.05, 4))
    b.op("PAD", ["t", b.const(np.array([[0, 0], [2, 0], [0, 0]], I32))], "pad_t", [1, 22, 8], "input")
    b.op("RESHAPE", ["pad_t", b.const(np.array([1, 1, 22, 8], I32))], "rows", [1, 1, 22, 8], "input",
         new_shape=[1, 1, 22, 8])
    wt = b.weights([10, 1, 3, 8], 24, 0)
    b.op("CONV_2D", ["rows", wt, b.bias(10, wt)], "causal", [1, 1, 20, 10], padding="VALID", stride_h=1,
         stride_w=1, version=3)
    return b


@pytest.mark.parametrize("int8_dot", [False, True])
def test_int8_pads_merge_into_their_convolutions(backend, int8_dot, monkeypatch):
    """padded_convs with only the convolutions as outputs: no PAD kernel is left, and the outputs match LiteRT; with
    integer dot products (OpenCL) the two CONV_2Ds run as conv2d_int8 on the PADs' inputs' codes, padding with the
    zero point's code."""
    if int8_dot:
        if backend != "cl":
            pytest.skip("integer dot products are OpenCL's")
        monkeypatch.setitem(shared_delegate("cl", quantized=True).backend._info, "int8_dot", True)
        monkeypatch.setattr(conv_ops, "INT8_MIN_MACS", 0)
    b = padded_convs()
    outputs = ["conv", "dw", "causal"]
    content = b.build(outputs=outputs)
    it, outs = run_gpu(content, b.feeds, backend)
    kernels = Counter(c.kernel for c in runner_of(it).plan.kernels)
    assert "pad" not in kernels and (kernels["conv2d_int8"] == 2) == int8_dot, kernels
    for name, got, refs in zip(outputs, outs, litert_both(content, b.feeds), strict=True):
        assert_quantized_match(got, refs, f"{name} on {backend}, int8_dot={int8_dot}")


MODELS = {"int8_conv_trunk": conv_trunk, "int8_layout_chain": layout_chain, "uint8_chain": uint8_chain,
          "int8_dot_convs": dot_convs, "int8_grid_keepers": grid_keepers}


@functools.cache
def model(name: str) -> tuple[QModel, bytes, list[tuple[np.ndarray, np.ndarray]]]:
    """(description, model, LiteRT's outputs with its reference and its optimized kernels)."""
    b = MODELS[name]()
    content = b.build()
    refs = litert_both(content, b.feeds)
    for out, (ref, _) in zip(b.outputs, refs, strict=True):
        # a reference that is mostly one value (saturated, or all zero) would match almost anything
        assert ref.std() > 2 and np.unique(ref, return_counts=True)[1].max() < 0.6 * ref.size, \
            f"{name}: {out} is degenerate in the reference"
    return b, content, refs


def run_gpu(content: bytes, inputs: list[np.ndarray], backend: str, quantized: bool = True):
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend, quantized=quantized)])
    return it, run(it, inputs)


def placement(it) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in it.get_ops_details():
        out.setdefault(d["backend"], []).append(d["op_name"])
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_quantized_chain(backend, name):
    """Each node's output against LiteRT fed the very inputs the GPU gave that node; the whole chain against
    LiteRT's run of the whole model, pooled over every tensor (one step of difference upstream moves values
    downstream across rounding boundaries, so the per-node check is the one that pins each op down)."""
    check_chain(backend, name)


def test_ops_that_keep_their_grid_take_no_fake_quant_step(backend):
    """The pools, the PAD and the ops that move values in grid_keepers store their results without a fake-quant step
    of their own (they match LiteRT node by node in test_quantized_chain); the pool with RELU6 fused keeps its step.
    Each runs on the GPU."""
    b, content, _ = model("int8_grid_keepers")
    it, _ = run_gpu(content, b.feeds, backend)
    plan = runner_of(it).plan
    names = {k: b.nodes[k][2] for k in range(len(b.nodes))}
    stepped = {names[p.node] for call in plan.kernels for p in call.postops if p.kind == "fake_quant"}
    assert stepped == {"avg_relu6"}, stepped
    assert set(placement(it)) == {backend}, placement(it)


def test_small_int8_convolutions_sum_codes_where_their_writers_store_them(monkeypatch):
    """Below INT8_MIN_MACS a convolution sums integer dot products only where its input's codes come free: a kernel
    of the plan writes the input whole and stores its codes beside it. In dot_convs (every layer small but two) the
    four convolutions of the model's input, which would need a quantize pass, stay float; c1x1_32 and the
    FULLY_CONNECTED (~0.2 M multiply-adds each, their inputs written by other convolutions) sum codes, as do the
    two larger ones; all match LiteRT."""
    backend = shared_delegate("cl", quantized=True).backend  # run_gpu's
    monkeypatch.setitem(backend._info, "int8_dot", True)
    it = check_chain("cl", "int8_dot_convs")
    plan = runner_of(it).plan
    summed = sorted(it.graph.tensors[c.outputs["dst"]].name for c in plan.kernels if c.kernel == "conv2d_int8")
    assert summed == ["c1x1_264", "c1x1_32", "c3x3_d2_32", "fc_rows_130"], summed
    assert not any(c.kernel == "quantize_u8" for c in plan.kernels)


def test_int8_convolutions_on_integer_dot_products(monkeypatch):
    """OpenCL told that its device has 4-byte integer dot products (DeviceInfo.int8_dot; true of PoCL on x86 with
    VNNI, and conv2d_int8.cl's portable sum runs anywhere else): every convolution of dot_convs (and its
    FULLY_CONNECTED) runs as conv2d_int8 on codes that quantize_u8 made (the model's input, which two of them read)
    or that their producers stored alongside their values, and all match LiteRT."""
    backend = shared_delegate("cl", quantized=True).backend  # run_gpu's
    monkeypatch.setitem(backend._info, "int8_dot", True)
    monkeypatch.setattr(conv_ops, "INT8_MIN_MACS", 0)  # these layers are small: the size that pays is a speed matter
    it = check_chain("cl", "int8_dot_convs")
    plan = runner_of(it).plan
    kernels = Counter(c.kernel for c in plan.kernels)
    # the model's input takes a quantize pass; the 4 other inputs' codes come with their producers' stores
    assert kernels["conv2d_int8"] == 8 and kernels["quantize_u8"] == 1, kernels
    assert sorted(c.kernel for c in plan.kernels if "dst_codes" in c.outputs) == ["conv2d_int8"] * 4
    spec = model("int8_dot_convs")[0]
    feeds = spec.feeds
    plain = run(it, feeds)
    # with the intermediates that integer convolutions alone read no longer outputs, their writers store their codes
    # and not their values (lowering/codes_only.py), the residual ADD fused into c1x1_32 reading c3x3_d2_32's codes:
    # the same outputs, bit for bit
    last = ["c3x3_s2_24_a", "c3x3_s2_24_b", "residual_add", "fc_rows_130"]
    it_last, outs = run_gpu(spec.build(outputs=last), feeds, "cl")
    calls = runner_of(it_last).plan.kernels
    codes_only = [c.kernel for c in calls if c.defines.get("dst_CODES_ONLY")]
    # of c3x3_40_relu, c3x3_s2_30_relu6, c1x1_264, c3x3_d2_32
    assert codes_only == ["conv2d_int8"] * 4, codes_only
    assert [(c.kernel, p.expr) for c in calls for p in c.postops if p.codes_of >= 0] == [("conv2d_int8", "a + b")]
    runner = runner_of(it_last)
    for call, program in zip(runner.plan.kernels, runner.programs, strict=True):
        if "dst_codes" not in call.outputs:
            continue
        (store16,) = [line for line in program.source.splitlines() if line.startswith("#define dst_store16")]
        assert ("dst_buf" in store16) != bool(call.defines.get("dst_CODES_ONLY")), store16
    for name, got in zip(last, outs, strict=True):
        np.testing.assert_array_equal(got, plain[spec.outputs.index(name)], err_msg=name)
    # a crowded plan (past the kernels the driver keeps loaded): the shapes and constants become arguments
    from gpu_delegate.backends.opencl import OpenCLBackend
    monkeypatch.setattr(OpenCLBackend, "loaded_kernels", 1)
    it = check_chain("cl", "int8_dot_convs")
    programs = [p for p in runner_of(it).programs if p.name == "conv2d_int8"]
    assert len(programs) == 8 and len({p.source for p in programs}) == 7  # the two of one shape share theirs
    assert sum(p.spec.runtime_constants for p in programs) == 2
    for got, want in zip(run(it, feeds), plain, strict=True):
        np.testing.assert_array_equal(got, want)
    it_last, crowded = run_gpu(spec.build(outputs=last), feeds, "cl")  # the decoding's constants as arguments too
    assert [p.name for p in runner_of(it_last).programs if "p1_CODES_SCALE" in p.spec.constants] == ["conv2d_int8"]
    for name, got, want in zip(last, crowded, outs, strict=True):
        np.testing.assert_array_equal(got, want, err_msg=name)
    # the other sums, as a compiler without VNNI builds conv2d_int8.cl: AVX2's pairs (where the host has AVX2), and
    # the portable sum of shifted bytes
    kernel_text = codegen.kernel_text
    for undefined in (["__AVX512VNNI__", "__AVXVNNI__"], ["__AVX512VNNI__", "__AVXVNNI__", "__AVX2__"]):
        prelude = kernel_text("opencl/prelude.inc.cl") + "".join(f"\n#undef {m}" for m in undefined) + "\n"
        monkeypatch.setattr(codegen, "kernel_text", lambda name, prelude=prelude: prelude
                            if name == "opencl/prelude.inc.cl" else kernel_text(name))
        check_chain("cl", "int8_dot_convs")
    monkeypatch.undo()
    monkeypatch.setitem(backend._info, "int8_dot", False)
    it = check_chain("cl", "int8_dot_convs")
    assert not {"conv2d_int8", "quantize_u8"} & {c.kernel for c in runner_of(it).plan.kernels}


def check_chain(backend: str, name: str) -> gd.Interpreter:
    """test_quantized_chain's checks of model ``name`` on ``backend``; the interpreter."""
    b, content, refs = model(name)
    it, outs = run_gpu(content, b.feeds, backend)
    where = placement(it)
    assert list(where) == [backend], f"{name}: nodes not on {backend}: {where}; why: {it.cpu_reasons()}"
    values = {n: x for (n, _, _), x in zip(b.inputs, b.feeds)} | dict(zip(b.outputs, outs, strict=True))
    for k, out in enumerate(b.outputs):
        single, computed = b.node_model(k)
        (step_refs,) = litert_both(single, [values[x] for x in computed])
        assert_quantized_match(values[out], step_refs, f"{name}: {b.nodes[k][0]} {out} on {backend}")
    whole = np.concatenate([o.ravel() for o in outs]).astype(np.int64)
    ref_whole = [np.concatenate([r[j].ravel() for r in refs]) for j in (0, 1)]
    off = int(np.count_nonzero((whole != ref_whole[0]) & (whole != ref_whole[1])))
    assert off <= whole.size // 100, f"{name} on {backend}: {off} of {whole.size} values differ from LiteRT's " \
        "run of the whole model"
    return it


def mixed_model() -> tuple[bytes, list[np.ndarray]]:
    """float CONV_2D -> QUANTIZE -> int8 ADD -> int8 AVERAGE_POOL -> DEQUANTIZE: float and quantized nodes."""
    rng = np.random.default_rng(14)
    mb = ModelBuilder()
    x = mb.input("x", [2, 8, 9, 5])
    y = mb.tensor("conv", [2, 8, 9, 6])
    mb.op("CONV_2D", [x, mb.const("w", rng.standard_normal([6, 3, 3, 5]).astype(np.float32) / 6),
                      mb.const("b", rng.standard_normal(6).astype(np.float32))], [y], padding="SAME",
          stride_h=1, stride_w=1)
    q = mb.tensor("quantized", [2, 8, 9, 6], np.int8, scale=0.02, zero_point=-3)
    mb.op("QUANTIZE", [y], [q])
    s = mb.tensor("add", [2, 8, 9, 6], np.int8, scale=0.03, zero_point=5)
    mb.op("ADD", [q, q], [s])
    p = mb.tensor("pool", [2, 4, 5, 6], np.int8, scale=0.03, zero_point=5)
    mb.op("AVERAGE_POOL_2D", [s], [p], padding="SAME", stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    f = mb.tensor("dequantized", [2, 4, 5, 6])
    mb.op("DEQUANTIZE", [p], [f])
    mb.output(y, s, f)
    return mb.build(), [rng.standard_normal([2, 8, 9, 5]).astype(np.float32)]


def near_halves(scale: float, zero_point: int, size: int) -> np.ndarray:
    """float32 values at and 1-2 ulps either side of every half between int8 codes of (scale, zero_point) but the
    halves next to 0 (where OpenCL's QROUND may round a value an ulp below up), repeated to ``size`` values."""
    codes = np.arange(-128, 127) - zero_point
    halves = (codes[(codes != 0) & (codes != -1)] + 0.5) * scale
    base = halves.astype(np.float32)
    up1 = np.nextafter(base, np.float32(np.inf))
    down1 = np.nextafter(base, np.float32(-np.inf))
    values = np.concatenate([base, up1, np.nextafter(up1, np.float32(np.inf)), down1,
                             np.nextafter(down1, np.float32(-np.inf))])
    return np.resize(values, size)


def test_quantize_rounds_the_correctly_rounded_quotient(backend):
    """A float input's QUANTIZE rounds the correctly rounded quotient x / scale half away from zero, as LiteRT's
    reference kernel does (its optimized ones multiply by the reciprocal and round halves to even), for values at
    and 1-2 ulps either side of halves between codes: 3 channels (4 pixels a work item, a row's last alone) and 8.
    GLSL's division may be 2.5 ulp off, so on GL a step either way."""
    scale, zero_point = 0.05, -3
    mb = ModelBuilder()
    names = []
    for name, shape in (("rgb", [1, 25, 17, 3]), ("wide", [1, 5, 7, 8])):
        x = mb.input(name, shape)
        q = mb.tensor(name + "_q", shape, np.int8, scale=scale, zero_point=zero_point)
        mb.op("QUANTIZE", [x], [q])
        names.append(q)
    mb.output(*names)
    content = mb.build()
    inputs = [near_halves(scale, zero_point, 25 * 17 * 3).reshape(1, 25, 17, 3),
              near_halves(scale, zero_point, 5 * 7 * 8)[::-1].reshape(1, 5, 7, 8)]
    _, ours = run_gpu(content, inputs, backend)
    for x, got, ref in zip(inputs, ours, run_litert(content, inputs, reference_kernels=True), strict=True):
        quotient = (x / np.float32(scale)).astype(np.float64)  # float32 division: correctly rounded
        want = np.clip(np.sign(quotient) * np.floor(np.abs(quotient) + 0.5) + zero_point, -128, 127).astype(np.int8)
        np.testing.assert_array_equal(ref, want, err_msg="LiteRT's reference QUANTIZE")
        if backend == "cl":
            np.testing.assert_array_equal(got, want, err_msg="QUANTIZE on cl")
        else:
            assert np.abs(got.astype(np.int64) - want).max() <= 1


def test_image_rescaling_after_quantize(backend):
    """An int8 image model's first nodes (Keras' Rescaling, as MobileNetV3 converts): a float RGB (and a
    one-channel) input QUANTIZEd, then MUL and ADD by int8 constants, which become a lookup of the code on the input's
    copy; on a CPU's OpenCL the copy steps 4 pixels' values as one vec4 a channel (codegen.value_steps). LiteRT's
    codes exactly (its default kernels: its reference ADD rounds one of these values two codes apart)."""
    mb = ModelBuilder()
    outs = []
    for name, shape in (("rgb", [1, 6, 11, 3]), ("gray", [2, 5, 9, 1])):
        x = mb.input(name, shape)
        q = mb.tensor(name + "_q", shape, np.int8, scale=1.0, zero_point=-128)
        mb.op("QUANTIZE", [x], [q])
        m = mb.tensor(name + "_m", shape, np.int8, scale=0.0117647, zero_point=-43)
        mb.op("MUL", [q, mb.const(name + "_k", np.array([-127], np.int8), scale=3.0757e-05, zero_point=-128)], [m])
        a = mb.tensor(name + "_a", shape, np.int8, scale=0.0078431, zero_point=-1)
        mb.op("ADD", [m, mb.const(name + "_c", np.array([127], np.int8), scale=0.0039216, zero_point=127)], [a])
        outs.append(a)
    mb.output(*outs)
    content = mb.build()
    rng = np.random.default_rng(9)
    inputs = [rng.uniform(-2, 258, shape).astype(np.float32) for shape in ([1, 6, 11, 3], [2, 5, 9, 1])]
    it, ours = run_gpu(content, inputs, backend)
    for got, ref in zip(ours, run_litert(content, inputs), strict=True):
        np.testing.assert_array_equal(got, ref)
    copies = [c for c in runner_of(it).plan.kernels if c.kernel == "copy" and c.defines.get("SRC_DENSE")]
    if on_cpu_opencl(backend):  # a GPU keeps the dialect's copy, a work item per vec4, which reads PHWC4
        assert sorted(c.defines["DENSE_C"] for c in copies) == [1, 3], [c.defines for c in copies]
        assert all(any(p.kind == "lut" for p in c.postops) for c in copies), [c.postops for c in copies]


def test_dequantize_of_a_stored_tensor_moves_no_data(backend):
    """A DEQUANTIZE of a non-constant int8 tensor is no kernel: the device holds the tensor as its dequantized floats,
    so the float output shares its buffer (lowering/drop_dequantize.py). A feature map that a MEAN reads and that leaves
    dequantized (as the 2-in/3-out net's), the same one left as int8 too, and a dequantized MEAN: LiteRT's values,
    and on OpenCL the feature map's writer stores it in the dense order once for both outputs
    (lowering/dense_copies.py)."""
    rng = np.random.default_rng(21)
    mb = ModelBuilder()
    x = mb.input("x", [1, 6, 7, 8])
    q = mb.tensor("q", [1, 6, 7, 8], np.int8, scale=0.02, zero_point=3)
    mb.op("QUANTIZE", [x], [q])
    feat = mb.tensor("feat", [1, 6, 7, 8], np.int8, scale=0.03, zero_point=-5)
    mb.op("ADD", [q, q], [feat], fused_activation_function="RELU")
    feat_f = mb.tensor("feat_f", [1, 6, 7, 8])
    mb.op("DEQUANTIZE", [feat], [feat_f])
    mean = mb.tensor("mean", [1, 8], np.int8, scale=0.01, zero_point=-20)
    mb.op("MEAN", [feat, mb.const("axes", np.array([1, 2], I32))], [mean], keep_dims=False)
    mean_f = mb.tensor("mean_f", [1, 8])
    mb.op("DEQUANTIZE", [mean], [mean_f])
    mb.output(feat_f, feat, mean_f)
    content = mb.build()
    inputs = [rng.uniform(-1, 1.5, [1, 6, 7, 8]).astype(np.float32)]
    it, ours = run_gpu(content, inputs, backend)
    assert [d["backend"] for d in it.get_ops_details()] == [backend] * 5
    ref_feat_f, ref_feat, ref_mean_f = run_litert(content, inputs, reference_kernels=True)
    assert_quantized_match(ours[1], (ref_feat,), f"int8 ADD on {backend}")
    for got, ref, scale, name in ((ours[0], ref_feat_f, 0.03, "feat_f"), (ours[2], ref_mean_f, 0.01, "mean_f")):
        steps = np.round((got.astype(np.float64) - ref) / scale).astype(np.int64)
        assert_quantized_match(steps, (np.zeros_like(steps),), f"DEQUANTIZE {name} on {backend}")
    np.testing.assert_array_equal(ours[0], (ours[1].astype(np.float32) + 5) * np.float32(0.03))
    plan = plan_of(it)
    names = {t: it.graph.tensors[t].name for t in plan.tensors if t < len(it.graph.tensors)}
    assert sorted(names[t] for t, s in plan.aliases.items()) == ["feat_f", "mean_f"], plan.aliases
    assert [c.kernel for c in plan.kernels] == ["copy", "copy", "reduce"], [c.label for c in plan.kernels]
    copies = {names[t]: c for t, c in plan.dense_copies.items()}
    assert (copies.keys(), len(set(copies.values()))) == (({"feat_f", "feat"}, 1) if backend == "cl" else (set(), 0))


@pytest.mark.parametrize("quantized", [False, True])
def test_quantized_inference_option(backend, quantized):
    """enable_quantized_inference=False leaves every node that touches an int8 tensor to the CPU (with the
    reason) while the float CONV_2D still runs on the GPU; True takes them all. The outputs match either way."""
    content, inputs = mixed_model()
    it, (conv, add, dequantized) = run_gpu(content, inputs, backend, quantized)
    where = [d["backend"] for d in it.get_ops_details()]
    assert where == ([backend] * 5 if quantized else [backend, "cpu", "cpu", "cpu", "cpu"]), where
    if not quantized:
        assert all("quantized inference is disabled" in why for why in it.cpu_reasons().values()), it.cpu_reasons()
    ref_conv, ref_add, ref_dequantized = run_litert(content, inputs, reference_kernels=True)
    assert_float_close(conv, ref_conv, what=f"float CONV_2D on {backend}")
    # QUANTIZE of the GPU's float result: rounding boundaries may fall either side, as in the chains above
    assert_quantized_match(add, (ref_add,), f"int8 ADD, quantized={quantized} on {backend}")
    steps = np.round((dequantized.astype(np.float64) - ref_dequantized) / 0.03).astype(np.int64)
    assert_quantized_match(steps, (np.zeros_like(steps),), f"DEQUANTIZE, quantized={quantized} on {backend}")


def same_shape_layers(seed: int = 14) -> QModel:
    """int8 layers of one shape on grids of their own: three 1x1 CONV_2Ds in a row, then two AVERAGE_POOLs (each
    on its input's grid) of the last two; the kernels of one op differ in their grids alone."""
    b = QModel(np.int8, seed)
    b.input("x", [1, 6, 5, 8], (0.04, 3))
    for k, x in enumerate(["x", "conv0", "conv1"]):
        b.conv(x, f"conv{k}", 8, 1, 1, per_channel=True)
    for x in ("conv1", "conv2"):
        b.op("AVERAGE_POOL_2D", [x], f"pool_{x}", [1, 6, 5, 8], "input", padding="SAME", stride_h=1, stride_w=1,
             filter_height=3, filter_width=3)
    return b


def test_a_crowded_int8_plan_takes_its_grids_at_run_time(monkeypatch):
    """Past the kernels the driver keeps loaded (PoCL: 128, each past it reloaded at every dispatch), an 8-bit
    plan's kernels take their constants (fake-quant scales and bounds, an average pool's input grid) as
    arguments, and layers of one shape share a program; within the limit each keeps its constants. LiteRT's
    results either way, and the same values."""
    from gpu_delegate.backends.opencl import OpenCLBackend

    b = same_shape_layers()
    content = b.build()
    refs = litert_both(content, b.feeds)
    results = {}
    for limit, crowded in ((1000, False), (1, True)):
        monkeypatch.setattr(OpenCLBackend, "loaded_kernels", limit)
        it = gd.Interpreter(model_content=content, experimental_delegates=[gd.GpuDelegate(backend="cl")])
        outs = results[crowded] = run(it, b.feeds)
        programs = runner_of(it).programs
        for name, layers in (("conv2d_1x1", 3), ("pool", 2)):
            kernels = [p for p in programs if p.name == name]
            assert len(kernels) == layers and all(p.spec.runtime_constants == crowded for p in kernels), name
            assert len({p.source for p in kernels}) == (1 if crowded else layers), name
        for out, got, ref in zip(b.outputs, outs, refs, strict=True):
            assert_quantized_match(got, ref, f"{out}, loaded-kernel limit {limit}")
    for plain, shared in zip(results[False], results[True], strict=True):
        np.testing.assert_array_equal(shared, plain)


def test_constants_are_prepared_once(backend, monkeypatch, one_device):
    """Weights, biases and constant operands are dequantized and uploaded at preparation; an invoke then
    sends only the model's int8 input, in the backend's one-trip invoke: a small input, dequantized on the host
    on its way straight into the tensor (a large one OpenCL dequantizes on the device)."""
    from gpu_delegate.cpu.quant import dequantize

    calls: Counter[str] = Counter()

    def counting(module: str, fn):
        def wrapper(*args, **kwargs):
            calls[module] += 1
            return fn(*args, **kwargs)
        return wrapper

    # every module of the package that imported the function, each under its own name
    for name, module in list(sys.modules.items()):
        if name.startswith("gpu_delegate") and getattr(module, "dequantize", None) is dequantize:
            monkeypatch.setattr(module, "dequantize", counting(name, dequantize))
    monkeypatch.setattr(gpu_delegate.runner, "build_plan", counting("build_plan", gpu_delegate.runner.build_plan))
    d = shared_delegate(backend)
    monkeypatch.setattr(d.backend, "upload", counting("upload", d.backend.upload))
    monkeypatch.setattr(d.backend, "to_device", counting("to_device", d.backend.to_device))
    monkeypatch.setattr(d.backend, "invoke", counting("invoke", d.backend.invoke))

    b, content, refs = model("int8_conv_trunk")
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], b.feeds[0])
    it.invoke()
    prepared = Counter(calls)
    quantized_consts = sum(kind in ("weights", "bias") for kind, *_ in b.consts.values())
    assert prepared["build_plan"] == 1 and prepared["gpu_delegate.lowering.view"] == quantized_consts, prepared
    for _ in range(3):
        it.invoke()
    grown = Counter(calls)
    grown.subtract(prepared)
    assert +grown == Counter({"invoke": 3, "gpu_delegate.backends.base": 3}), f"3 invokes did {+grown}"
    assert_quantized_match(it.get_tensor(it.get_output_details()[-1]["index"]), refs[-1],
                           f"{backend}: the last output after 4 invokes")


def litert_node(graph, node, values: dict[int, np.ndarray]) -> np.ndarray:
    """One node of a read model run alone on LiteRT's optimized integer kernels (BUILTIN, without XNNPACK),
    its computed inputs taken from ``values``."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    mb = ModelBuilder()
    args, feeds = [], []

    def grid(t) -> dict:
        q = t.quant
        return {} if q is None else {"scale": np.asarray(q.scale), "zero_point": np.asarray(q.zero_point),
                                     "axis": q.axis or 0}

    for t in node.inputs:
        tensor = graph.tensors[t] if t >= 0 else None
        if tensor is None:
            args.append(-1)
        elif tensor.data is not None:
            args.append(mb.const(tensor.name, np.asarray(tensor.data), **grid(tensor)))
        else:
            args.append(mb.input(tensor.name, tensor.shape, tensor.dtype, **grid(tensor)))
            feeds.append(values[t])
    out = graph.tensors[node.outputs[0]]
    y = mb.tensor(out.name, out.shape, out.dtype, **grid(out))
    mb.op(node.op, args, [y], version=node.version, **node.attrs)
    mb.output(y)
    it = litert.Interpreter(model_content=mb.build(), num_threads=1,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    (ref,) = run(it, feeds)
    return ref


@pytest.mark.parametrize("backend_name", ["cl", "gl"])
def test_int8_mobilenet_node_by_node(backend_name):
    """The full-integer MobileNet V1 wholly on the GPU, every node's output against LiteRT running that node
    on the GPU's own inputs (V2 adds only int8 ADD and FULLY_CONNECTED, which the chains above cover, and
    another minute of compiling). Their final outputs prove nothing (random weights: the activations die out by
    the middle of the network and every class gets the same code), and comparing tensors of the whole
    run is no better: one-step differences compound layer after layer (V2's 17th node agrees with LiteRT's
    whole run on under half of its values, V1's 8th on 88%, while no node of either is off by more than
    0.3% on its own inputs).
    LiteRT's reference kernels cannot serve: its reference int8 SOFTMAX aborts the process on the
    constant logits these models end with."""
    name = "mobilenet_v1_224_int8"
    content = (need_models() / "mobilenet" / f"{name}.tflite").read_bytes()
    inputs = [np.random.default_rng(0).integers(-128, 128, (1, 224, 224, 3)).astype(np.int8)]
    d = shared_delegate(backend_name)
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    where = placement(it)
    assert list(where) == [backend_name], f"{name}: nodes not on {backend_name}: {where}; why: {it.cpu_reasons()}"
    graph = it.graph
    (partition,) = [s.partition for s in it._steps if hasattr(s, "partition")]
    # every node's output read back, through the kernel interface the interpreter itself calls
    produced = [graph.nodes[n].outputs[0] for n in partition.nodes]
    kernel = d.create_kernel()
    kernel.init(graph, partition.nodes, partition.inputs, list(dict.fromkeys([*partition.outputs, *produced])))
    values = dict(zip([x["index"] for x in it.get_input_details()], inputs, strict=True))
    kernel.prepare(values)
    try:
        kernel.invoke(values)
    finally:
        kernel.runner.close()
    alive = 0
    for n in partition.nodes:
        node = graph.nodes[n]
        ref = litert_node(graph, node, values)
        assert_quantized_match(values[node.outputs[0]], (ref,), f"{name}: {node} on {backend_name}")
        alive += bool(ref.std() > 2)
    assert alive >= 10, f"{name}: only {alive} nodes have activations that vary; the check proves little"
