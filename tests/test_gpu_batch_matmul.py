"""BATCH_MATMUL on both GPU backends against LiteRT: the blocked kernel (kernels/dialect/batch_matmul.dialect) over
odd row, column and contraction lengths, every adj_x / adj_y, broadcast batch dimensions, ranks 2 to 4, a constant
second operand and fp16 storage; and lowering/fuse_matmul_transpose.py, which folds the TRANSPOSEs and RESHAPEs of
an einsum (attention's heads split off the channels and moved to the front, and back) into the product's reads and
write: the folded model launches no remap
kernel and gives LiteRT's answer, nor a reshape kernel where the heads split the channels at a multiple of 4, and
transposes it cannot fold stay kernels of their own and stay right; and lowering/fuse_matmul_softmax.py, which
computes the scores, their scale and their SOFTMAX in one kernel (batch_matmul_softmax.dialect). Every
test asserts that the nodes ran on the backend."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, int8_grid, run_litert, run_wholly_on_gpu, to_int8


def logical(shape: tuple[int, ...], adj: bool) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2]) if adj else shape


def matmul_model(xs: tuple[int, ...], ys: tuple[int, ...], adj_x: bool, adj_y: bool,
                 y_const: np.ndarray | None = None) -> bytes:
    lx, ly = logical(xs, adj_x), logical(ys, adj_y)
    out = (*np.broadcast_shapes(lx[:-2], ly[:-2]), lx[-2], ly[-1])
    mb = ModelBuilder()
    x = mb.input("x", xs)
    y = mb.const("y", y_const) if y_const is not None else mb.input("y", ys)
    z = mb.tensor("z", out)
    mb.op("BATCH_MATMUL", [x, y], [z], adj_x=adj_x, adj_y=adj_y)
    mb.output(z)
    return mb.build()


def values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("xs, ys", [
    ((2, 3, 5, 7), (2, 3, 7, 6)),      # every length off a multiple of 4
    ((1, 4, 64, 13), (1, 4, 13, 64)),  # attention's scores with an odd head size
    ((2, 1, 9, 3), (3, 3, 10)),        # batch dims broadcast both ways, ranks 4 and 3
    ((1, 2, 17), (2, 17, 1)),          # one column
    ((6, 8), (8, 12)),                 # rank 2
    ((2, 1, 11, 9), (1, 3, 9, 21)),    # 6 slices of columns: on a CPU's OpenCL a group of 4 and one of 2
])
@pytest.mark.parametrize("adj_x, adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul_matches_litert(backend, xs, ys, adj_x, adj_y):
    xs, ys = logical(xs, adj_x), logical(ys, adj_y)
    content = matmul_model(xs, ys, adj_x, adj_y)
    inputs = [values(xs, 1), values(ys, 2)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5,
                       what=f"{xs} x {ys} adj_x={adj_x} adj_y={adj_y} on {backend}")


@pytest.mark.parametrize("adj_y", [False, True])
def test_batch_matmul_constant_second_operand(backend, adj_y):
    xs, ys = (2, 5, 11), logical((11, 7), adj_y)
    content = matmul_model(xs, ys, False, adj_y, y_const=values(ys, 3))
    inputs = [values(xs, 4)]
    _, outs = run_wholly_on_gpu(content, inputs, backend)
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"constant y adj_y={adj_y} on {backend}")


def test_batch_matmul_fp16_storage(backend):
    xs, ys = (2, 3, 9, 6), (2, 3, 6, 10)
    content = matmul_model(xs, ys, False, False)
    inputs = [values(xs, 5), values(ys, 6)]
    _, outs = run_wholly_on_gpu(content, inputs, backend, fp16=True)
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-2, what=f"fp16 storage on {backend}")


def attention_model(batch: int, tokens: int, heads: int, head: int, scores_perm: tuple[int, ...] = (0, 2, 3, 1),
                    also_keys: bool = False, merged: bool = False, scale: float | None = None, beta: float = 1.0,
                    also_scores: bool = False, reshaped_scores: str = "") -> bytes:
    """The converter's multi-head attention core from q, k, v of [batch, tokens, heads, head]: scores =
    TRANSPOSE(q, 0213) x TRANSPOSE(k, ``scores_perm``) (0231: keys already transposed for the product; 0213 with
    adj_y), SOFTMAX, x TRANSPOSE(v, 0213), back by TRANSPOSE 0213. ``also_keys``: the transposed keys are an output
    of the model as well. ``merged``: q, k, v come as [batch, tokens, heads * head], RESHAPEd to heads, and the
    result is RESHAPEd back so. ``scale``: the scores are multiplied by it before the SOFTMAX (of ``beta``).
    ``also_scores``: the scores are an output of the model as well. ``reshaped_scores``: "before" / "after" the
    scale, the scores go through a RESHAPE to their own shape (as the converter writes an open batch)."""
    adj_y = scores_perm == (0, 2, 1, 3)
    mb = ModelBuilder()
    shape = (batch, tokens, heads, head)
    if merged:
        flat = (batch, tokens, heads * head)
        q, k, v = (mb.tensor(name, shape) for name in ("q", "k", "v"))
        for name, t in (("qm", q), ("km", k), ("vm", v)):
            mb.op("RESHAPE", [mb.input(name, flat), mb.const(name + "_shape", np.array(shape, np.int32))], [t],
                  new_shape=list(shape))
    else:
        q, k, v = mb.input("q", shape), mb.input("k", shape), mb.input("v", shape)
    per_head = (batch, heads, tokens, head)
    qt, vt = mb.tensor("qt", per_head), mb.tensor("vt", per_head)
    kt = mb.tensor("kt", tuple(shape[p] for p in scores_perm))
    swap = mb.const("swap", np.array([0, 2, 1, 3], np.int32))
    mb.op("TRANSPOSE", [q, swap], [qt])
    mb.op("TRANSPOSE", [k, mb.const("kperm", np.array(scores_perm, np.int32))], [kt])
    mb.op("TRANSPOSE", [v, swap], [vt])
    square = (batch, heads, tokens, tokens)
    scores, probs = mb.tensor("scores", square), mb.tensor("probs", square)
    mb.op("BATCH_MATMUL", [qt, kt], [scores], adj_x=False, adj_y=adj_y)
    logits = scores

    def same_shape(where: str) -> None:
        nonlocal logits
        if reshaped_scores == where:
            same = mb.tensor("same", square)
            mb.op("RESHAPE", [logits, mb.const("square", np.array(square, np.int32))], [same], new_shape=list(square))
            logits = same

    same_shape("before")
    if scale is not None:
        scaled = mb.tensor("scaled", square)
        mb.op("MUL", [logits, mb.const("scale", np.float32(scale))], [scaled])
        logits = scaled
    same_shape("after")
    mb.op("SOFTMAX", [logits], [probs], beta=beta)
    ctx, out = mb.tensor("ctx", per_head), mb.tensor("out", shape)
    mb.op("BATCH_MATMUL", [probs, vt], [ctx], adj_x=False, adj_y=False)
    mb.op("TRANSPOSE", [ctx, swap], [out])
    if merged:
        flat_out = mb.tensor("flat_out", (batch, tokens, heads * head))
        mb.op("RESHAPE", [out, mb.const("out_shape", np.array([batch, tokens, heads * head], np.int32))], [flat_out],
              new_shape=[batch, tokens, heads * head])
        out = flat_out
    mb.output(out, *([kt] if also_keys else []), *([scores] if also_scores else []))
    return mb.build()


@pytest.mark.parametrize("batch, tokens, heads, head, scores_perm", [
    (1, 64, 4, 16, (0, 2, 3, 1)),  # the ViT block's
    (2, 9, 3, 13, (0, 2, 3, 1)),   # batch > 1, odd tokens and head size
    (1, 10, 2, 6, (0, 2, 1, 3)),   # keys read as rows (adj_y)
])
def test_attention_transposes_fold_into_the_products(backend, batch, tokens, heads, head, scores_perm):
    content = attention_model(batch, tokens, heads, head, scores_perm)
    shape = (batch, tokens, heads, head)
    inputs = [values(shape, 7), values(shape, 8), values(shape, 9)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"attention {shape} on {backend}")


@pytest.mark.parametrize("batch, tokens, heads, head, reshapes_left", [
    (1, 64, 4, 16, 0),  # the ViT block's: the channels split into heads and merged back inside the products
    (2, 7, 3, 8, 0),
    (2, 9, 2, 13, 4),   # a head of 13 channels does not start on a slice of 4: the reshapes stay kernels (on
])                      # OpenCL the last, the model's output, a dense store: lowering/dense_outputs.py)
def test_attention_reshapes_of_the_channels_fold_into_the_products(backend, batch, tokens, heads, head,
                                                                  reshapes_left):
    content = attention_model(batch, tokens, heads, head, merged=True)
    flat = (batch, tokens, heads * head)
    inputs = [values(flat, 18), values(flat, 19), values(flat, 20)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    reshapes = kernels.count("reshape") + kernels.count("convert_from_phwc4")
    assert "remap" not in kernels and reshapes == reshapes_left, kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"attention {flat} on {backend}")


def test_attention_transposes_fold_with_fp16_storage(backend):
    content = attention_model(2, 12, 2, 10)
    shape = (2, 12, 2, 10)
    inputs = [values(shape, 10), values(shape, 11), values(shape, 12)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend, fp16=True)
    assert "remap" not in kernels, kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-2, what=f"fp16 attention on {backend}")


@pytest.mark.parametrize("batch, tokens, heads, head, scores_perm, scale, beta", [
    (1, 64, 4, 16, (0, 2, 3, 1), 0.25, 1.0),   # the ViT block's
    (2, 9, 3, 13, (0, 2, 3, 1), 0.3, 1.0),     # batch > 1; 9 columns: the last slice has padding lanes
    (1, 10, 2, 6, (0, 2, 1, 3), None, 0.7),    # keys as rows (adj_y), no MUL, beta != 1
])
def test_scores_scale_and_softmax_are_one_kernel(backend, batch, tokens, heads, head, scores_perm, scale, beta):
    content = attention_model(batch, tokens, heads, head, scores_perm, scale=scale, beta=beta)
    shape = (batch, tokens, heads, head)
    inputs = [values(shape, 21), values(shape, 22) * 3, values(shape, 23)]  # scores spread wide: max matters
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"scores + softmax {shape} on {backend}")


def test_softmax_of_scores_far_below_zero(backend):
    """Every score of a row near -100 (9 columns: the last slice has padding lanes, whose exp relative to the row's
    max overflows to inf): the padding takes no part in the sum, the probabilities are LiteRT's, none NaN."""
    content = attention_model(2, 9, 3, 13, (0, 2, 3, 1), scale=0.3)
    shape = (2, 9, 3, 13)
    inputs = [5 + values(shape, 40) * 0.01, -5 + values(shape, 41) * 0.01, values(shape, 42)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert np.isfinite(outs[0]).all()
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"scores far below 0 on {backend}")


@pytest.mark.parametrize("where", ["before", "after"])
def test_scores_reshaped_to_their_own_shape_still_one_kernel(backend, where):
    shape = (2, 9, 2, 8)
    content = attention_model(*shape, scale=0.35, reshaped_scores=where)
    inputs = [values(shape, 30), values(shape, 31), values(shape, 32)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"reshaped scores on {backend}")


@pytest.mark.parametrize("adj_x, adj_y", [(True, False), (True, True), (False, False)])
def test_product_scale_and_softmax_of_any_operand_layout_are_one_kernel(backend, adj_x, adj_y):
    xs, ys = logical((2, 3, 7, 5), adj_x), logical((2, 1, 5, 10), adj_y)  # 7 rows: the last work item has 3
    mb = ModelBuilder()
    x, y = mb.input("x", xs), mb.input("y", ys)
    z, scaled, p = (mb.tensor(name, (2, 3, 7, 10)) for name in ("z", "scaled", "p"))
    mb.op("BATCH_MATMUL", [x, y], [z], adj_x=adj_x, adj_y=adj_y)
    mb.op("MUL", [mb.const("scale", np.float32(0.6)), z], [scaled])
    mb.op("SOFTMAX", [scaled], [p], beta=1.0)
    mb.output(p)
    content = mb.build()
    inputs = [values(xs, 33), values(ys, 34)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["batch_matmul_softmax"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5,
                       what=f"adj_x={adj_x} adj_y={adj_y} softmax on {backend}")


def test_scores_and_softmax_fp16_storage(backend):
    shape = (2, 11, 2, 8)
    content = attention_model(*shape, scale=0.35)
    inputs = [values(shape, 24), values(shape, 25), values(shape, 26)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend, fp16=True)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-2, what=f"fp16 scores + softmax on {backend}")


def test_scores_read_elsewhere_keep_their_own_softmax(backend):
    shape = (1, 9, 2, 8)
    content = attention_model(*shape, scale=0.35, also_scores=True)
    inputs = [values(shape, 27), values(shape, 28), values(shape, 29)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert "batch_matmul_softmax" not in kernels and "softmax" in kernels, kernels
    for o, r in zip(outs, run_litert(content, inputs)):
        assert_float_close(o, r, 1e-5, what=f"scores also an output on {backend}")


def test_transpose_moving_the_channels_to_a_batch_axis_stays_a_kernel(backend):
    # x's channels (5) become the product's batch axis: the kernel could not read 4 of them at once
    mb = ModelBuilder()
    x, y = mb.input("x", (2, 3, 5)), mb.input("y", (5, 3, 4))
    xt, z = mb.tensor("xt", (5, 2, 3)), mb.tensor("z", (5, 2, 4))
    mb.op("TRANSPOSE", [x, mb.const("perm", np.array([2, 0, 1], np.int32))], [xt])
    mb.op("BATCH_MATMUL", [xt, y], [z], adj_x=False, adj_y=False)
    mb.output(z)
    content = mb.build()
    inputs = [values((2, 3, 5), 13), values((5, 3, 4), 14)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels == ["remap", "batch_matmul"], kernels
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-5, what=f"unfolded transpose on {backend}")


def test_transpose_read_elsewhere_too_stays_a_kernel(backend):
    shape = (1, 8, 2, 4)
    content = attention_model(*shape, also_keys=True)
    inputs = [values(shape, 15), values(shape, 16), values(shape, 17)]
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    assert kernels.count("remap") == 1, kernels
    for o, r in zip(outs, run_litert(content, inputs)):
        assert_float_close(o, r, 1e-5, what=f"keys also an output on {backend}")


def int8_scores_model(heads: int, tokens: int, head: int, scale: float | None, q: np.ndarray, k: np.ndarray,
                      v: np.ndarray) -> tuple[bytes, list[dict[str, object]]]:
    """The converter's int8 attention: BATCH_MATMUL(q, k, adj_y) of [1, heads, tokens, head] int8 inputs, a MUL by
    an int8 scalar (unless ``scale`` is None), SOFTMAX onto TFLite's probability grid (1/256, -128), BATCH_MATMUL
    by v (so that the probabilities' rounding shows); each grid calibrated on the float chain over the float q, k
    and v. Returns the model and the inputs' grids."""
    shape, square = (1, heads, tokens, head), (1, heads, tokens, tokens)
    product = np.einsum("bhmk,bhnk->bhmn", q.astype(np.float64), k.astype(np.float64))
    logits = product * (scale or 1.0)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    grids = [int8_grid([t]) for t in (q, k, product, logits, v, probs @ v)]
    mb = ModelBuilder()
    tq, tk = mb.input("q", shape, **grids[0]), mb.input("k", shape, **grids[1])
    tv = mb.input("v", shape, **grids[4])
    scores = mb.tensor("scores", square, **grids[2])
    mb.op("BATCH_MATMUL", [tq, tk], [scores], adj_x=False, adj_y=True)
    if scale is not None:
        scaled = mb.tensor("scaled", square, **grids[3])
        mb.op("MUL", [scores, mb.const("scale", np.int8(127), scale=scale / 127, zero_point=0)], [scaled])
        scores = scaled
    tprobs = mb.tensor("probs", square, np.int8, scale=1 / 256, zero_point=-128)
    mb.op("SOFTMAX", [scores], [tprobs], beta=1.0)
    out = mb.tensor("out", shape, **grids[5])
    mb.op("BATCH_MATMUL", [tprobs, tv], [out], adj_x=False, adj_y=False)
    mb.output(out)
    return mb.build(), [grids[0], grids[1], grids[4]]


@pytest.mark.parametrize("heads, tokens, head, scale", [(4, 64, 16, 0.25), (3, 9, 13, 0.3), (2, 10, 6, None)])
def test_int8_scores_scale_and_softmax_are_one_kernel(backend, heads, tokens, head, scale):
    """The 8-bit chain in batch_matmul_softmax's QUANT form (each step rounded as its own kernel would round it),
    its probabilities times v, against LiteRT's int8 kernels: 9 columns (padding lanes in the last slice), no MUL.
    The bound is the separate kernels' own distance from TFLite's fixed-point softmax (float exps rounded onto the
    grid): up to 3 steps, 95% of values equal (the mutant without the probabilities' rounding: 60-87%)."""
    shape = (1, heads, tokens, head)
    q, k, v = values(shape, 31), values(shape, 32) * 2, values(shape, 33)
    content, grids = int8_scores_model(heads, tokens, head, scale, q, k, v)
    xs = [to_int8(x, g) for x, g in zip((q, k, v), grids)]
    kernels, outs = run_wholly_on_gpu(content, xs, backend)
    assert kernels == ["batch_matmul_softmax", "batch_matmul"], kernels
    assert_quant_close(outs[0], run_litert(content, xs)[0], min_equal=0.95, max_steps=3,
                       what=f"int8 scores + softmax {shape} on {backend}")
