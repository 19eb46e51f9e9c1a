"""A PAD of trailing zero channels read by an ADD (BlazeFace's residual branch), dropped by
lowering/pad_channels.py: the ADD, fused into the convolution, reads the unpadded tensor with the channels beyond
read as 0. Both backends against LiteRT, fp32 and fp16 storage."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, plan_of, random_inputs, run, run_litert
from .reference import shared_delegate as delegate


def blaze_blocks(batch: int) -> tuple[bytes, int]:
    """Three residual blocks x -> conv -> ADD(PAD(x channels), conv) -> RELU, padding 7 -> 13 channels (the pad
    starts inside a slice, the padded count is odd), 13 -> 16 (the ADD reads the padded tensor second) and 8 -> 12
    (the pad starts at a slice boundary, after a MAX_POOL_2D); the number of PADs."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = mb.input("x", [batch, 6, 5, 7])

    def block(src: int, shape: list[int], channels: int, pad_first: bool) -> int:
        c = mb.tensor(f"c{src}", [*shape[:3], channels])
        w = mb.const(f"w{src}", rng.standard_normal((channels, 1, 1, shape[3])).astype(np.float32))
        b = mb.const(f"b{src}", rng.standard_normal(channels).astype(np.float32))
        mb.op("CONV_2D", [src, w, b], [c], padding="SAME", stride_w=1, stride_h=1)
        p = mb.tensor(f"p{src}", [*shape[:3], channels])
        mb.op("PAD", [src, mb.const(f"pads{src}", np.array([[0, 0], [0, 0], [0, 0], [0, channels - shape[3]]],
                                                            np.int32))], [p])
        y = mb.tensor(f"y{src}", [*shape[:3], channels])
        mb.op("ADD", [p, c] if pad_first else [c, p], [y], fused_activation_function="RELU")
        return y

    y1 = block(x, [batch, 6, 5, 7], 13, True)
    y2 = block(y1, [batch, 6, 5, 13], 16, False)
    c3 = mb.tensor("c3", [batch, 6, 5, 8])
    mb.op("CONV_2D", [y2, mb.const("w3", rng.standard_normal((8, 1, 1, 16)).astype(np.float32)),
                      mb.const("b3", np.zeros(8, np.float32))], [c3],
          padding="SAME", stride_w=1, stride_h=1)
    m = mb.tensor("m", [batch, 3, 2, 8])
    mb.op("MAX_POOL_2D", [c3], [m], padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2,
          fused_activation_function="NONE")
    mb.output(block(m, [batch, 3, 2, 8], 12, True))
    return mb.build(), 3


@pytest.mark.parametrize("batch,fp16", [(1, False), (2, False), (2, True)])
def test_pad_channels_into_add(backend, batch, fp16):
    content, pads = blaze_blocks(batch)
    inputs = random_inputs(content, 5)
    (ref,) = run_litert(content, inputs)
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, fp16)])
    (ours,) = run(it, inputs)
    assert all(d["backend"] == backend for d in it.get_ops_details())
    plan = plan_of(it)
    assert sum("channels beyond read as 0" in note for note in plan.notes) == pads, plan.notes
    assert "pad" not in [k.kernel for k in plan.kernels]
    assert_float_close(ours, ref, 2e-2 if fp16 else 1e-5)


def test_pad_kept_where_the_add_cannot_be_fused(backend):
    # the convolution's output leaves the model too, so the ADD stays a kernel of its own: it reads the PAD's output
    mb = ModelBuilder()
    x = mb.input("x", [2, 3, 4, 5])
    c, p, y = mb.tensor("c", [2, 3, 4, 7]), mb.tensor("p", [2, 3, 4, 7]), mb.tensor("y", [2, 3, 4, 7])
    w = mb.const("w", np.random.default_rng(4).standard_normal((7, 1, 1, 5)).astype(np.float32))
    mb.op("CONV_2D", [x, w, mb.const("b", np.zeros(7, np.float32))], [c], padding="SAME", stride_w=1, stride_h=1)
    mb.op("PAD", [x, mb.const("pads", np.array([[0, 0], [0, 0], [0, 0], [0, 2]], np.int32))], [p])
    mb.op("ADD", [p, c], [y])
    mb.output(y, c)
    content = mb.build()
    inputs = random_inputs(content, 6)
    ref = run_litert(content, inputs)
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, False)])
    ours = run(it, inputs)
    plan = plan_of(it)
    assert "pad" in [k.kernel for k in plan.kernels]
    for o, r in zip(ours, ref, strict=True):
        assert_float_close(o, r, 1e-5)
