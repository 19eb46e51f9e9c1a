"""Weights that a kernel streams once an invoke, stored as halves where every value is a float16 already.

A 1x1 convolution over one block of pixels (a FULLY_CONNECTED at batch 1: a classifier's head, MobileNetV3Small's
576 -> 1024 -> 1000 reads 6.4 MB of float32 weights) and the squeeze-and-excite gate's two products use each weight
once an invoke: they are bound by the bytes they read, not by their arithmetic. Where every value of such a constant
is exactly a float16 (a model the converter stored in float16, its weights dequantized once: TensorFlow's "float16
quantization"), the plan stores it as halves also when the delegate computes and stores in float32: half the bytes,
the same values, since each API widens a half to float32 exactly (F16C's vcvtph2ps on a CPU's OpenCL, vload_half,
GL's unpackHalf2x16). PoCL, those two head layers alone: 343 -> 207 us.

Other weights stay float32: a convolution over many pixels reads each weight from cache again and again, and there
the widening only adds instructions (every fp16-exact weight as halves: EfficientNetB0 fp16 1.06x and ResNet50 fp16
1.04x the time on PoCL). With fp16 storage (``precision_loss_allowed``) every constant is halves already.
"""

from __future__ import annotations

import numpy as np

from .plan import KernelCall, Plan
from .view import PassResult

# A fully_connected kernel over at most this many rows (pixels) reads its weights once a row: bound by their bytes.
STREAMING_ROWS = 4


def streamed_weights(call: KernelCall) -> list[str]:
    """The const names of ``call`` that it reads once (or a few times) an invoke, a value each multiply-add."""
    if call.kernel == "conv2d_1x1" and call.defines.get("PIX_BLOCKS") == 1:
        return ["w"]
    if call.kernel == "fully_connected" and call.grid[0] <= STREAMING_ROWS:
        return ["w"]
    if call.kernel == "squeeze_excite":
        return ["w1", "w2"]
    return []


def run(plan: Plan) -> PassResult:
    result = PassResult("half_weights")
    readers: list[str] = []
    for call in plan.kernels:
        for name in streamed_weights(call):
            key = call.consts.get(name)
            if key is None or key in plan.half_consts or key in plan.fp32_consts:
                continue
            rows = plan.consts[key]
            if not np.array_equal(rows.astype(np.float16).astype(np.float32), rows):
                result.declined.append(f"{call.label}: weights {key} are not all float16 values")
                continue
            plan.half_consts.add(key)
            readers.append(call.label)
    if plan.half_consts:
        values = sum(plan.consts[key].size for key in plan.half_consts)
        result.applied.append(f"{len(plan.half_consts)} weight constants ({values} values) stored as halves, each "
                              f"exact, for {', '.join(dict.fromkeys(readers))}")
    return result
