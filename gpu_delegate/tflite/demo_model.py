"""The built-in demo model: a MobileNetV2 with random weights, laid out as the TFLite converter emits one.

The graph follows what `keras.applications.MobileNetV2` becomes after conversion (compare
../shared/models/mobilenet/mobilenet_v2_224_fp32.tflite): batch norm folded into each convolution's bias,
ReLU6 fused into CONV_2D / DEPTHWISE_CONV_2D, the stride-2 zero padding folded into SAME padding, residual
ADDs, a MEAN over H and W with keep_dims false, FULLY_CONNECTED and SOFTMAX, and a "serving_default"
signature. Weights are random (He initialisation), so the outputs mean nothing as classes, but the shapes,
the op mix and the work per image are those of the real network.
"""

from __future__ import annotations

import numpy as np

from .writer import ModelBuilder

# (expansion t, output channels c, repeats n, first stride s): Table 2 of the MobileNetV2 paper.
BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
          (6, 320, 1, 1))


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor`` without dropping more than 10% (as Keras does)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class _Net:
    """Adds layers to a ModelBuilder, keeping track of the current activation tensor and its shape."""

    def __init__(self, mb: ModelBuilder, rng: np.random.Generator, x: int, shape: list[int]):
        self.mb, self.rng, self.x, self.shape = mb, rng, x, shape
        self.prefix = "mobilenetv2"

    def _weights(self, name: str, shape: list[int], fan_in: int, gain: float) -> int:
        w = self.rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(gain / fan_in))
        return self.mb.const(f"{self.prefix}/{name}/weights", w)

    def _bias(self, name: str, n: int) -> int:
        # A folded batch norm leaves a small per-channel shift.
        return self.mb.const(f"{self.prefix}/{name}/bias", self.rng.normal(0.0, 0.05, n).astype(np.float32))

    def _out(self, name: str, shape: list[int]) -> int:
        self.shape = shape
        return self.mb.tensor(f"{self.prefix}/{name}", shape)

    def conv(self, name: str, cout: int, kernel: int = 1, stride: int = 1, relu6: bool = True,
             padding: str = "SAME") -> int:
        n, h, w, cin = self.shape
        # ReLU layers get He's gain of 2; linear projections 1, which keeps the residual sums near unit scale.
        wt = self._weights(name, [cout, kernel, kernel, cin], kernel * kernel * cin, 2.0 if relu6 else 1.0)
        y = self._out(name, [n, -(-h // stride), -(-w // stride), cout])
        self.mb.op("CONV_2D", [self.x, wt, self._bias(name, cout)], [y], padding=padding, stride_w=stride,
                   stride_h=stride, dilation_w_factor=1, dilation_h_factor=1,
                   fused_activation_function="RELU6" if relu6 else "NONE")
        self.x = y
        return y

    def depthwise(self, name: str, stride: int) -> int:
        n, h, w, c = self.shape
        wt = self._weights(name, [1, 3, 3, c], 9, 2.0)
        y = self._out(name, [n, -(-h // stride), -(-w // stride), c])
        self.mb.op("DEPTHWISE_CONV_2D", [self.x, wt, self._bias(name, c)], [y], padding="SAME",
                   stride_w=stride, stride_h=stride, depth_multiplier=1, dilation_w_factor=1,
                   dilation_h_factor=1, fused_activation_function="RELU6")
        self.x = y
        return y

    def inverted_residual(self, block: int, expansion: int, cout: int, stride: int) -> None:
        skip, cin = self.x, self.shape[3]
        name = f"block_{block}" if block else "expanded_conv"
        if expansion != 1:
            self.conv(f"{name}_expand", cin * expansion)
        self.depthwise(f"{name}_depthwise", stride)
        self.conv(f"{name}_project", cout, relu6=False)
        if stride == 1 and cin == cout:
            y = self._out(f"{name}_add", list(self.shape))
            self.mb.op("ADD", [skip, self.x], [y], fused_activation_function="NONE")
            self.x = y


def mobilenet_v2_model(input_size: int = 224, width: float = 1.0, num_classes: int = 1000,
                       seed: int = 0) -> bytes:
    """A float32 MobileNetV2 as .tflite bytes: input [1, input_size, input_size, 3], output [1, num_classes]
    (softmax probabilities). ``width`` is the width multiplier (alpha) of the paper."""
    if not isinstance(input_size, int) or input_size < 8:
        raise ValueError(f"demo model input size must be an int >= 8, got {input_size!r}")
    if not width > 0:
        raise ValueError(f"demo model width must be > 0, got {width!r}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"demo model num_classes must be an int >= 1, got {num_classes!r}")
    rng = np.random.default_rng(seed)
    mb = ModelBuilder(description=f"gpu_delegate demo MobileNetV2 (input {input_size}, width {width:g}, "
                                  f"seed {seed})")
    x = mb.input("serving_default_input:0", [1, input_size, input_size, 3])
    net = _Net(mb, rng, x, [1, input_size, input_size, 3])
    net.conv("Conv1", make_divisible(32 * width), kernel=3, stride=2)
    block = 0
    for expansion, channels, repeats, stride in BLOCKS:
        cout = make_divisible(int(channels * width))
        for r in range(repeats):
            net.inverted_residual(block, expansion, cout, stride if r == 0 else 1)
            block += 1
    net.conv("Conv_1", make_divisible(1280 * width) if width > 1.0 else 1280, padding="VALID")
    axes = mb.const(f"{net.prefix}/global_average_pooling2d/Mean/reduction_indices",
                    np.array([1, 2], np.int32))
    pooled = net._out("global_average_pooling2d/Mean", [1, net.shape[3]])
    mb.op("MEAN", [net.x, axes], [pooled], keep_dims=False)
    fc_w = net._weights("predictions/MatMul", [num_classes, net.shape[1]], net.shape[1], 1.0)
    logits = net._out("predictions/BiasAdd", [1, num_classes])
    mb.op("FULLY_CONNECTED", [pooled, fc_w, net._bias("predictions", num_classes)], [logits],
          fused_activation_function="NONE", keep_num_dims=False)
    probs = mb.tensor("StatefulPartitionedCall:0", [1, num_classes])
    mb.op("SOFTMAX", [logits], [probs], beta=1.0)
    mb.output(probs)
    mb.add_signature("serving_default", {"input": x}, {"output_0": probs})
    return mb.build()
