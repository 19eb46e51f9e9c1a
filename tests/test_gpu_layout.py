"""Layout and resize ops on the GPU, both backends, against LiteRT (or numpy where LiteRT differs by design).

Each model chains or fans out several ops so that one compile covers many cases; kernels compile once per
distinct shape, so the shapes are small. Pure data movement must match LiteRT bit for bit in fp32.
"""

from __future__ import annotations

import numpy as np

import gpu_delegate as gd
from gpu_delegate.tflite import read_model
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import (
    assert_float_close,
    assert_quant_close,
    need_models,
    plan_of,
    random_inputs,
    run,
    run_litert,
    run_wholly_on_gpu,
)
from .reference import shared_delegate as delegate

I32 = np.int32


def build(inputs: list[tuple], ops: list[tuple], outputs: list[str]) -> bytes:
    """inputs: (name, shape[, dtype, (scale, zero_point)]); ops: (op, [input name or constant array],
    [(output name, shape[, dtype, (scale, zero_point)])], options); outputs: the model's output names."""
    mb = ModelBuilder()
    ids = {}

    def quant(spec):
        return {"scale": spec[3][0], "zero_point": spec[3][1]} if len(spec) > 3 else {}

    for spec in inputs:
        ids[spec[0]] = mb.input(spec[0], spec[1], spec[2] if len(spec) > 2 else np.float32, **quant(spec))
    for k, (op, ins, results, opts) in enumerate(ops):
        args = [ids[x] if isinstance(x, str) else mb.const(f"c{k}_{j}", np.asarray(x)) for j, x in enumerate(ins)]
        for spec in results:
            ids[spec[0]] = mb.tensor(spec[0], spec[1], spec[2] if len(spec) > 2 else np.float32, **quant(spec))
        mb.op(op, args, [ids[spec[0]] for spec in results], **opts)
    mb.output(*(ids[name] for name in outputs))
    return mb.build()


def run_gpu(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False) -> list[np.ndarray]:
    """Our interpreter with the GPU delegate; every node must have run on ``backend``."""
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, fp16)])
    outs = run(it, inputs)
    where = {(d["index"], d["op_name"]): d["backend"] for d in it.get_ops_details()}
    assert all(b == backend for b in where.values()), f"nodes not on {backend}: {where}"
    return outs


def same_as_litert(content: bytes, backend: str, seed: int = 0) -> list[np.ndarray]:
    """Pure data movement: our outputs must equal LiteRT's bit for bit."""
    inputs = random_inputs(content, seed)
    ref = run_litert(content, inputs)
    ours = run_gpu(content, inputs, backend)
    for k, (o, r) in enumerate(zip(ours, ref, strict=True)):
        assert (o.dtype, o.shape) == (r.dtype, r.shape), f"output {k}: {o.dtype}{o.shape} vs {r.dtype}{r.shape}"
        np.testing.assert_array_equal(o, r, err_msg=f"output {k}")
    return ours


# Comments name the kernel path each op takes: "vec4" moves whole slices, "lanes" fetches channel by channel.

def test_pad_chain(backend):
    same_as_litert(build([("x", [2, 5, 6, 7])], [
        ("PAD", ["x", np.array([[0, 0], [1, 1], [2, 2], [0, 5]], I32)], [("p1", [2, 7, 10, 12])], {}),  # vec4
        ("PAD", ["p1", np.array([[0, 1], [1, 2], [2, 0], [1, 3]], I32)], [("p2", [3, 10, 12, 16])], {}),  # lanes
        ("PADV2", ["p2", np.array([[0, 0], [0, 0], [1, 0], [4, 4]], I32), np.array([2.5], np.float32)],
         [("p3", [3, 10, 13, 24])], {}),  # vec4 with a value
        ("MIRROR_PAD", ["p3", np.array([[1, 1], [0, 3], [2, 0], [3, 2]], I32)], [("p4", [5, 13, 15, 29])],
         {"mode": "SYMMETRIC"}),  # lanes
        ("PADV2", ["p4", np.array([[1, 0], [0, 1], [1, 1], [4, 0]], I32), np.array(-1.5, np.float32)],
         [("p5", [6, 14, 17, 33])], {}),  # lanes with a value
        ("MIRROR_PAD", ["p5", np.array([[1, 0], [2, 1], [1, 2], [0, 0]], I32)], [("p6", [7, 17, 20, 33])],
         {"mode": "REFLECT"}),  # vec4
    ], ["p6"]), backend)


def test_slice_transpose_tile(backend):
    same_as_litert(build([("x", [2, 7, 9, 13])], [
        ("TRANSPOSE", ["x", np.array([0, 3, 1, 2], I32)], [("a1", [2, 13, 7, 9])], {}),  # lanes
        ("SLICE", ["a1", np.array([0, 1, 0, 2], I32), np.array([2, 11, -1, 7], I32)], [("a2", [2, 11, 7, 7])], {}),
        ("TILE", ["a2", np.array([1, 1, 2, 2], I32)], [("a3", [2, 11, 14, 14])], {}),  # lanes
        ("STRIDED_SLICE", ["a3", np.array([0, -1, 0, 10], I32), np.array([0, 0, 0, 2], I32),
                           np.array([1, -2, 3, -3], I32)], [("a4", [2, 6, 5, 3])], {"begin_mask": 1, "end_mask": 7}),
        ("TRANSPOSE", ["x", np.array([2, 0, 1, 3], I32)], [("b1", [9, 2, 7, 13])], {}),  # vec4
        ("SLICE", ["b1", np.array([1, 0, 2, 4], I32), np.array([7, 2, 4, 8], I32)], [("b2", [7, 2, 4, 8])], {}),
        ("TILE", ["b2", np.array([1, 2, 1, 2], I32)], [("b3", [7, 4, 4, 16])], {}),  # vec4
        ("STRIDED_SLICE", ["b3", np.array([0, 0, 0, 1], I32), np.array([1, 4, 0, 4], I32),
                           np.array([1, 2, 1, 2], I32)], [("b4", [2, 1, 2, 16])],
         {"shrink_axis_mask": 1, "new_axis_mask": 4}),
    ], ["a4", "b4"]), backend)


def test_split_unpack_concat_pack(backend):
    same_as_litert(build([("x", [2, 6, 5, 13])], [
        ("SPLIT", [np.array(1, I32), "x"], [("a0", [2, 3, 5, 13]), ("a1", [2, 3, 5, 13])], {"num_splits": 2}),
        ("SPLIT_V", ["a0", np.array([4, -1, 6], I32), np.array(-1, I32)],
         [("b0", [2, 3, 5, 4]), ("b1", [2, 3, 5, 3]), ("b2", [2, 3, 5, 6])], {"num_splits": 3}),
        ("CONCATENATION", ["b2", "b0", "b1"], [("k", [2, 3, 5, 13])], {"axis": 3}),  # lanes
        ("UNPACK", ["a1"], [("u0", [3, 5, 13]), ("u1", [3, 5, 13])], {"num": 2, "axis": 0}),
        ("PACK", ["u1", "u0"], [("p", [3, 5, 2, 13])], {"axis": 2, "values_count": 2}),  # lanes, another layout
    ], ["k", "p"]), backend)


def test_concatenation_const_aligned_activation(backend):
    # LiteRT ignores a fused activation on CONCATENATION; the TFLite GPU delegate (and our CPU path) apply it,
    # so the reference is numpy's. Constant parts: a float32 one and a DEQUANTIZE of float16 folded at prepare.
    c32 = np.linspace(-1, 1, 80, dtype=np.float32).reshape(2, 4, 5, 2)
    c16 = np.linspace(3, -2, 40, dtype=np.float16).reshape(2, 4, 5, 1)
    content = build([("a", [2, 4, 5, 3]), ("d", [2, 4, 5, 7]), ("e", [2, 4, 5, 4]), ("f", [2, 3, 5, 17])], [
        ("DEQUANTIZE", [c16], [("h", [2, 4, 5, 1])], {}),
        ("CONCATENATION", ["a", c32, "d", "h"], [("k1", [2, 4, 5, 13])], {"axis": 3}),  # lanes
        ("CONCATENATION", ["e", "k1"], [("k2", [2, 4, 5, 17])], {"axis": -1}),  # vec4
        ("CONCATENATION", ["k2", "f"], [("k3", [2, 7, 5, 17])], {"axis": 1, "fused_activation_function": "RELU6"}),
    ], ["k3"])
    a, d, e, f = (x * 4 for x in random_inputs(content, 3))
    (ours,) = run_gpu(content, [a, d, e, f], backend)
    want = np.clip(np.concatenate([np.concatenate([e, a, c32, d, c16.astype(np.float32)], 3), f], 1), 0, 6)
    np.testing.assert_array_equal(ours, want)


def test_face_detection_tail(backend):
    # the reshapes and concatenation that end face_detection_short_range, with its shapes
    same_as_litert(build([("a", [1, 16, 16, 2]), ("b", [1, 8, 8, 6])], [
        ("RESHAPE", ["a"], [("ra", [1, 512, 1])], {"new_shape": [1, -1, 1]}),
        ("RESHAPE", ["b"], [("rb", [1, 384, 1])], {"new_shape": [1, -1, 1]}),
        ("CONCATENATION", ["ra", "rb"], [("k", [1, 896, 1])], {"axis": 1}),
    ], ["k"]), backend)


def test_reshape_depth_space_gather(backend):
    same_as_litert(build([("x", [2, 3, 4, 6])], [
        ("RESHAPE", ["x", np.array([4, 36], I32)], [("r1", [4, 36])], {}),
        ("EXPAND_DIMS", ["r1", np.array(2, I32)], [("r2", [4, 36, 1])], {}),
        ("SQUEEZE", ["r2"], [("r3", [4, 36])], {}),
        ("PACK", ["r3", "r1"], [("r4", [4, 36, 2])], {"axis": 2, "values_count": 2}),  # channels interleave
        ("RESHAPE", ["r4", np.array([2, 2, 6, 12], I32)], [("r5", [2, 2, 6, 12])], {}),  # lanes
        ("RESHAPE", ["r5", np.array([1, 4, 6, 12], I32)], [("r6", [1, 4, 6, 12])], {}),  # vec4
        ("SPACE_TO_DEPTH", ["r6"], [("d1", [1, 2, 3, 48])], {"block_size": 2}),  # vec4
        ("DEPTH_TO_SPACE", ["d1"], [("d2", [1, 8, 12, 3])], {"block_size": 4}),  # lanes
        ("SPACE_TO_DEPTH", ["d2"], [("d3", [1, 4, 6, 12])], {"block_size": 2}),  # lanes
        ("GATHER", ["d3", np.array([3, 0, 2], I32)], [("g1", [1, 3, 6, 12])], {"axis": 1}),  # vec4
        ("GATHER", ["g1", np.array([11, 0, 5, 5, 2], I32)], [("g2", [1, 3, 6, 5])], {"axis": -1}),  # lanes
    ], ["g2"]), backend)


def test_space_to_batch_and_back(backend):
    # an open-batch dilated Conv1D/Conv2D as the converter writes it: SPACE_TO_BATCH_ND, the convolution on the
    # blocks, BATCH_TO_SPACE_ND; 4-D with paddings and crops, and 3-D (the Conv1D), odd channel counts
    content = build([("x", [2, 5, 7, 3]), ("s", [3, 10, 5])], [
        ("SPACE_TO_BATCH_ND", ["x", np.array([2, 3], I32), np.array([[1, 0], [0, 2]], I32)],
         [("b4", [12, 3, 3, 3])], {}),
        ("CONV_2D", ["b4", sample_weights((5, 2, 2, 3)), np.zeros(5, np.float32)], [("c4", [12, 2, 2, 5])],
         {"padding": 1, "stride_h": 1, "stride_w": 1}),
        ("BATCH_TO_SPACE_ND", ["c4", np.array([2, 3], I32), np.array([[1, 0], [2, 1]], I32)],
         [("y4", [2, 3, 3, 5])], {}),
        ("SPACE_TO_BATCH_ND", ["s", np.array([4], I32), np.array([[3, 3]], I32)], [("b3", [12, 4, 5])], {}),
        ("BATCH_TO_SPACE_ND", ["b3", np.array([4], I32), np.array([[1, 2]], I32)], [("y3", [3, 13, 5])], {}),
    ], ["b4", "b3", "y3", "y4"])
    inputs = random_inputs(content, 0)
    ref, ours = run_litert(content, inputs), run_gpu(content, inputs, backend)
    for k in range(3):  # pure data movement: bit for bit
        np.testing.assert_array_equal(ours[k], ref[k], err_msg=f"output {k}")
    assert_float_close(ours[3], ref[3], 1e-5, what="through the convolution")


def sample_weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


def test_gather_far_indices_fp16(backend):
    # indices past 2048 are stored in two parts so that fp16 const storage keeps them exact
    content = build([("x", [2, 2101])], [
        ("GATHER", ["x", np.array([2100, 0, 2048, 1500, 7], I32)], [("g", [2, 5])], {"axis": 1}),  # lanes
    ], ["g"])
    inputs = random_inputs(content, 5)
    (ref,) = run_litert(content, inputs)
    (ours,) = run_gpu(content, inputs, backend, fp16=True)
    np.testing.assert_array_equal(ours, ref.astype(np.float16).astype(np.float32))


def test_resize(backend):
    content = build([("x", [2, 5, 7, 3])], [
        ("RESIZE_BILINEAR", ["x", np.array([9, 4], I32)], [("b1", [2, 9, 4, 3])], {}),
        ("RESIZE_BILINEAR", ["b1", np.array([6, 11], I32)], [("b2", [2, 6, 11, 3])], {"align_corners": True}),
        ("RESIZE_BILINEAR", ["b2", np.array([11, 16], I32)], [("b3", [2, 11, 16, 3])], {"half_pixel_centers": True}),
        ("RESIZE_NEAREST_NEIGHBOR", ["x", np.array([10, 13], I32)], [("n1", [2, 10, 13, 3])], {}),
        ("RESIZE_NEAREST_NEIGHBOR", ["n1", np.array([7, 9], I32)], [("n2", [2, 7, 9, 3])], {"align_corners": True}),
        ("RESIZE_NEAREST_NEIGHBOR", ["n2", np.array([5, 6], I32)], [("n3", [2, 5, 6, 3])],
         {"half_pixel_centers": True}),
    ], ["b3", "n3"])
    inputs = random_inputs(content, 1)
    ref = run_litert(content, inputs)
    ours = run_gpu(content, inputs, backend)
    assert_float_close(ours[0], ref[0], 1e-4, what="bilinear")
    np.testing.assert_array_equal(ours[1], ref[1], err_msg="nearest neighbour picks values: exact")


def test_chain_fp16(backend):
    # layout kernels feeding each other with fp16 storage (precision_loss_allowed)
    content = build([("x", [2, 5, 6, 7]), ("y", [2, 11, 9, 5])], [
        ("PAD", ["x", np.array([[0, 0], [1, 1], [0, 2], [0, 1]], I32)], [("p", [2, 7, 8, 8])], {}),
        ("RESIZE_BILINEAR", ["p", np.array([9, 11], I32)], [("r", [2, 9, 11, 8])], {"half_pixel_centers": True}),
        ("TRANSPOSE", ["r", np.array([0, 2, 1, 3], I32)], [("t", [2, 11, 9, 8])], {}),
        ("CONCATENATION", ["t", "y"], [("k", [2, 11, 9, 13])], {"axis": 3}),
        ("RESHAPE", ["k", np.array([2, 99, 13], I32)], [("z", [2, 99, 13])], {}),
    ], ["z"])
    inputs = random_inputs(content, 2)
    (ref,) = run_litert(content, inputs)
    (ours,) = run_gpu(content, inputs, backend, fp16=True)
    assert_float_close(ours, ref, 2e-2)


def test_int8(backend):
    # quantized tensors run as their float values: PAD pads with the zero point, CONCATENATION requantizes
    qx, qy, qo = (0.05, 3), (0.02, -20), (0.04, -5)
    inputs = [("x", [2, 5, 6, 7], np.int8, qx), ("y", [2, 5, 6, 2], np.int8, qy)]
    moves = [
        ("PAD", ["x", np.array([[0, 0], [1, 2], [0, 1], [0, 2]], I32)], [("p", [2, 8, 7, 9], np.int8, qx)], {}),
        ("TRANSPOSE", ["p", np.array([0, 2, 1, 3], I32)], [("t", [2, 7, 8, 9], np.int8, qx)], {}),
        ("RESIZE_BILINEAR", ["t", np.array([9, 11], I32)], [("r", [2, 9, 11, 9], np.int8, qx)], {}),
    ]
    concat = ("CONCATENATION", ["x", "y"], [("k", [2, 5, 6, 9], np.int8, qo)], {"axis": 3})
    content = build(inputs, [*moves, concat], ["r", "k"])
    x, y = random_inputs(content, 4)
    ours = run_gpu(content, [x, y], backend)
    # LiteRT's int8 kernel refuses inputs quantized unlike the output: its reference covers the moves only
    (ref,) = run_litert(build(inputs[:1], moves, ["r"]), [x])
    assert_quant_close(ours[0], ref, min_equal=0.97, max_steps=1, what="pad, transpose, resize")
    # the requantization in float32, rounding halves away from zero (numpy, not the package's helpers)
    real = np.concatenate([(x.astype(np.float32) - np.float32(qx[1])) * np.float32(qx[0]),
                           (y.astype(np.float32) - np.float32(qy[1])) * np.float32(qy[0])], 3)
    quotient = real / np.float32(qo[0])
    rounded = np.sign(quotient) * np.floor(np.abs(quotient.astype(np.float64)) + 0.5)
    want = np.clip(rounded + qo[1], -128, 127).astype(np.int8)
    # these scales put a quarter of the quotients on a half: a division within GLSL's 2.5 ulp (NVIDIA's GL is not
    # correctly rounded) or a contracted dequantization may round those either way. The rest must match.
    near_half = np.abs(np.abs(quotient - np.trunc(quotient)) - 0.5) <= 8 * np.spacing(np.abs(quotient))
    assert 0.1 < near_half.mean() < 0.5
    assert_quant_close(ours[1][~near_half], want[~near_half], max_steps=1, what="concatenation")
    assert_quant_close(ours[1][near_half], want[near_half], min_equal=0.0, max_steps=1, what="concatenation ties")


def test_real_model_layout_nodes_supported(backend):
    models = need_models() / "real"
    for name in ("face_detection_short_range", "iris_landmark"):
        graph = read_model((models / f"{name}.tflite").read_bytes()).main
        nodes = [n for n in graph.nodes if n.op in ("PAD", "RESHAPE", "CONCATENATION")]
        assert nodes
        for node in nodes:
            assert delegate(backend).is_node_supported(node, graph) is True, f"{name}: {node}"


def test_unsupported_nodes_say_why(backend):
    content = build([("x", [2, 3, 4]), ("v", [1]), ("i", [2], I32)] + [(f"a{k}", [1, 2]) for k in range(9)], [
        ("GATHER", ["x", np.array([[0], [1]], I32)], [("g", [2, 1, 4])], {"axis": 1, "batch_dims": 1}),
        ("PADV2", ["x", np.array([[0, 0], [1, 0], [0, 0]], I32), "v"], [("p", [2, 4, 4])], {}),
        ("GATHER", ["x", "i"], [("h", [2, 2, 4])], {"axis": 1}),
        ("CONCATENATION", [f"a{k}" for k in range(9)], [("k", [9, 2])], {"axis": 0}),
    ], ["g", "p", "h", "k"])
    graph = read_model(content).main
    verdicts = [delegate(backend).is_node_supported(n, graph) for n in graph.nodes]
    for verdict, words in zip(verdicts[:2], ["batch_dims", "constant value"], strict=True):
        assert isinstance(verdict, str) and words in verdict, verdict
    # run-time int32 indices and joins of more than 8 inputs run on the GPU since issue 16
    assert verdicts[2:] == [True, True]


def keras3_upsampling(shape: tuple[int, int, int, int], ky: int, kx: int) -> list[tuple]:
    """Keras 3's nearest UpSampling2D (ops.repeat over H, then W) as its TFLite converter writes it: RESHAPE, TILE,
    RESHAPE, TILE, RESHAPE, the rank-5 steps of batch 1."""
    b, h, w, c = shape
    return [("RESHAPE", ["x", np.array([b, h, 1, w, c], I32)], [("r1", [b, h, 1, w, c])], {}),
            ("TILE", ["r1", np.array([1, 1, ky, 1, 1], I32)], [("t1", [b, h, ky, w, c])], {}),
            ("RESHAPE", ["t1", np.array([b, h * ky, w, 1, c], I32)], [("r2", [b, h * ky, w, 1, c])], {}),
            ("TILE", ["r2", np.array([1, 1, 1, kx, 1], I32)], [("t2", [b, h * ky, w, kx, c])], {}),
            ("RESHAPE", ["t2", np.array([b, h * ky, w * kx, c], I32)], [("up", [b, h * ky, w * kx, c])], {})]


def dense_copies_model(batch: int) -> bytes:
    """Feature maps of whole slices that are outputs and read by nodes too: a depthwise convolution's (its wide
    stores of 4 pixels), a convolution's with a fused activation, an ADD's; one no node reads (the MUL's); 6-channel
    ones (PHWC4 pads them: converted as before)."""
    rng = np.random.default_rng(3)
    f32 = np.float32
    return build([("x", [batch, 9, 12, 8])], [
        ("DEPTHWISE_CONV_2D", ["x", rng.standard_normal((1, 3, 3, 8)).astype(f32), rng.standard_normal(8).astype(f32)],
         [("dw", [batch, 9, 12, 8])], {"padding": "SAME", "stride_w": 1, "stride_h": 1, "depth_multiplier": 1}),
        ("CONV_2D", ["dw", rng.standard_normal((12, 3, 3, 8)).astype(f32), rng.standard_normal(12).astype(f32)],
         [("cv", [batch, 5, 6, 12])], {"padding": "SAME", "stride_w": 2, "stride_h": 2,
                                       "fused_activation_function": "RELU6"}),
        ("MEAN", ["cv", np.array([1, 2], I32)], [("m", [batch, 12])], {"keep_dims": False}),
        ("ADD", ["dw", np.array([0.5], f32)], [("a", [batch, 9, 12, 8])], {}),
        ("MUL", ["a", "a"], [("sq", [batch, 9, 12, 8])], {}),
        ("CONV_2D", ["a", rng.standard_normal((6, 1, 1, 8)).astype(f32), rng.standard_normal(6).astype(f32)],
         [("six", [batch, 9, 12, 6])], {"padding": "SAME", "stride_w": 1, "stride_h": 1}),
        ("ADD", ["six", "six"], [("six2", [batch, 9, 12, 6])], {}),
    ], ["dw", "cv", "m", "a", "sq", "six", "six2"])


def test_outputs_that_nodes_read_stored_dense_too(backend):
    """On OpenCL an output of whole slices that nodes of the partition read as well is stored twice by its writers,
    in PHWC4 and in the host's dense order, which the host reads as it is (lowering/dense_copies.py): LiteRT's
    values, for one and two batches, float32 and float16 storage. GL converts them at the boundary."""
    for batch in (1, 2):
        content = dense_copies_model(batch)
        inputs = random_inputs(content)
        ref = run_litert(content, inputs)
        for fp16 in (False, True):
            it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, fp16)])
            outs = run(it, inputs)
            for name, o, r in zip(("dw", "cv", "m", "a", "sq", "six", "six2"), outs, ref, strict=True):
                assert_float_close(o, r, rel=4e-3 if fp16 else 1e-5, what=f"batch {batch} fp16 {fp16} {name}")
            copied = sorted(it.graph.tensors[t].name for t in plan_of(it).dense_copies)
            # m, [batch, 12], is one row of 12-channel pixels (PHWC4 interleaves its slices) where batch is 2
            want = ["a", "cv", "dw", *(["m"] if batch == 2 else []), "sq"]
            assert copied == (want if backend == "cl" else []), copied


def test_keras3_nearest_upsampling_is_one_resize(backend):
    """The chain of five nodes runs as one nearest resize (lowering/fuse_repeat.py), bit for bit LiteRT's, for
    unequal factors and channels that do not fill a slice; a TILE that repeats the whole tensor instead (a
    concatenation of copies, not a repeat of each pixel) keeps its own kernels, also LiteRT's values."""
    shape = (1, 3, 5, 6)
    content = build([("x", list(shape))], keras3_upsampling(shape, 2, 3), ["up"])
    inputs = random_inputs(content)
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    np.testing.assert_array_equal(outs[0], run_litert(content, inputs)[0])
    assert kernels == ["resize"], kernels

    whole = [("RESHAPE", ["x", np.array([1, 1, 3, 5, 6], I32)], [("r1", [1, 1, 3, 5, 6])], {}),
             ("TILE", ["r1", np.array([1, 2, 1, 1, 1], I32)], [("t1", [1, 2, 3, 5, 6])], {}),
             ("RESHAPE", ["t1", np.array([1, 6, 5, 6], I32)], [("up", [1, 6, 5, 6])], {})]
    content = build([("x", list(shape))], whole, ["up"])
    kernels, outs = run_wholly_on_gpu(content, inputs, backend)
    np.testing.assert_array_equal(outs[0], run_litert(content, inputs)[0])
    assert "resize" not in kernels, kernels


def test_outputs_of_reshapes_and_concatenations_stored_dense(backend):
    """On OpenCL an output that reshapes and concatenations make of other tensors is stored in the host's dense order,
    each source once at its place (lowering/dense_outputs.py), bit for bit LiteRT's: parts strided by the batch,
    pixels of channels that fill no slice, a part inside a channel concatenation inside a reshape, a reshape whose
    source's pixels straddle the output's rows (kept as a kernel, its output the part), an output that a node reads
    too (not dense). GL runs the same models through its kernels."""
    f32 = np.float32
    strided = build([("x1", [2, 4, 5, 7]), ("x2", [2, 3, 3, 14]), ("x3", [2, 2, 3, 6]), ("x4", [2, 4, 5])], [
        ("ADD", ["x1", np.array([1.5], f32)], [("a", [2, 4, 5, 7])], {}),
        ("MUL", ["x2", np.array([-2.0], f32)], [("b", [2, 3, 3, 14])], {}),
        ("RESHAPE", ["a", np.array([2, 20, 7], I32)], [("ra", [2, 20, 7])], {}),
        ("RESHAPE", ["b", np.array([2, 18, 7], I32)], [("rb", [2, 18, 7])], {}),
        ("CONCATENATION", ["ra", "rb"], [("k1", [2, 38, 7])], {"axis": 1}),
        ("RESHAPE", ["x3", np.array([2, 4, 9], I32)], [("c", [2, 4, 9])], {}),
        ("CONCATENATION", ["c", "x4"], [("k2", [2, 4, 14])], {"axis": 2}),
        ("RESHAPE", ["b", np.array([2, 126], I32)], [("r3", [2, 126])], {}),
        ("ADD", ["r3", "r3"], [("s", [2, 126])], {}),
    ], ["k1", "k2", "r3", "s"])
    nested = build([("y1", [1, 6, 5, 3]), ("y2", [1, 6, 5, 5]), ("y3", [1, 3, 4, 10])], [
        ("ADD", ["y1", np.array([0.25], f32)], [("t", [1, 6, 5, 3])], {}),
        ("CONCATENATION", ["t", "y2"], [("h", [1, 6, 5, 8])], {"axis": 3}),
        ("RESHAPE", ["h", np.array([1, 30, 8], I32)], [("rh", [1, 30, 8])], {}),
        ("RESHAPE", ["y3", np.array([1, 15, 8], I32)], [("r", [1, 15, 8])], {}),
        ("CONCATENATION", ["rh", "r"], [("out", [1, 45, 8])], {"axis": 1}),
    ], ["out"])
    dense_on_cl = {"strided": (4, ["reshape", "reshape"]), "nested": (3, [])}
    for name, content in (("strided", strided), ("nested", nested)):
        inputs = random_inputs(content)
        ref = run_litert(content, inputs)
        for fp16 in (False, True):
            kernels, outs = run_wholly_on_gpu(content, inputs, backend, fp16)
            for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
                if fp16:  # stored as float16 on the way
                    assert_float_close(o, r, rel=2e-3, what=f"{name} output {k} fp16")
                else:
                    np.testing.assert_array_equal(o, r, err_msg=f"{name} output {k}")
            stores, moves = dense_on_cl[name]
            if backend == "cl":
                assert kernels.count("convert_from_phwc4") == stores, kernels
                assert [k for k in kernels if k in ("reshape", "concat")] == moves, kernels
            else:
                assert "convert_from_phwc4" not in kernels and "concat" in kernels, kernels
