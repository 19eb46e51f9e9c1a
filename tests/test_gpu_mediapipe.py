"""MediaPipe's custom ops (issue 16) against plain numpy formulas written here from MediaPipe's definitions (LiteRT
cannot run them): the CPU kernels, and the GPU kernels on cl and gl in fp32 and fp16 storage. Odd channel counts,
batch 2, overlapping windows, SAME padding and activations. Then a graph built like MediaPipe's face landmark
model with attention (the three transform ops) must run wholly on the GPU, and so must the real model where
../shared/models/real holds it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .parity_models import bilinear_options, flex, landmarks_options, pool_options, run_gpu
from .reference import assert_float_close, run, shared_delegate

SMALL_PARTITIONS_ON_CPU = True  # real models: placement as users get it (tests/conftest.py)

# -- the formulas ------------------------------------------------------------------------------------------


def ref_pool_argmax(x, k, s, pads, out_hw, lo=-np.inf, hi=np.inf):
    b_n, h, w, c_n = x.shape
    oh, ow = out_hw
    out = np.zeros((b_n, oh, ow, c_n), np.float32)
    idx = np.zeros_like(out)
    for b in range(b_n):
        for oy in range(oh):
            for ox in range(ow):
                for c in range(c_n):
                    best, where = -np.inf, 0
                    for ky in range(k[0]):
                        for kx in range(k[1]):
                            y, xx = oy * s[0] - pads[0] + ky, ox * s[1] - pads[1] + kx
                            if 0 <= y < h and 0 <= xx < w and x[b, y, xx, c] > best:
                                best, where = x[b, y, xx, c], ky * k[1] + kx
                    out[b, oy, ox, c] = min(max(best, lo), hi)
                    idx[b, oy, ox, c] = where + 0.1
    return out, idx


def ref_unpool(x, idx, k, s, pads, out_hw):
    out = np.zeros((x.shape[0], *out_hw, x.shape[3]), np.float32)
    for b, iy, ix, c in np.ndindex(*x.shape):
        ky, kx = divmod(int(idx[b, iy, ix, c]), k[1])
        oy, ox = iy * s[0] - pads[0] + ky, ix * s[1] - pads[1] + kx
        if 0 <= oy < out_hw[0] and 0 <= ox < out_hw[1]:
            out[b, oy, ox, c] = x[b, iy, ix, c]
    return out


def rot(a):
    m = np.eye(4)
    m[:2, :2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return m


def shift(x, y):
    m = np.eye(4)
    m[:2, 3] = x, y
    return m


def ref_landmarks_matrix(points, subset, left, right, out_hw, scale, target=0.0):
    p = points.reshape(-1, 3).astype(np.float64)
    r = target - np.arctan2(p[right, 1] - p[left, 1], p[right, 0] - p[left, 0])
    turned = (rot(r)[:2, :2] @ p[subset, :2].T).T
    lo, hi = turned.min(0), turned.max(0)
    center = rot(-r)[:2, :2] @ ((lo + hi) / 2)
    size = hi - lo
    scaling = np.diag([scale * size[0] / out_hw[1], scale * size[1] / out_hw[0], 1, 1])
    return (shift(*center) @ rot(-r) @ scaling @ shift(-out_hw[1] / 2, -out_hw[0] / 2)).reshape(1, 4, 4)


def ref_transform_landmarks(points, m):
    m = m.reshape(4, 4).astype(np.float64)
    out = points.astype(np.float64).copy()
    xy1 = np.concatenate([points[..., :2], np.zeros_like(points[..., :1]), np.ones_like(points[..., :1])], -1)
    out[..., 0], out[..., 1] = xy1 @ m[0], xy1 @ m[1]
    return out


def ref_bilinear(x, m, out_hw):
    m = m.reshape(4, 4).astype(np.float64)
    _, h, w, c = x.shape
    out = np.zeros((1, *out_hw, c))
    for oy, ox in np.ndindex(*out_hw):
        tx, ty = m[:2] @ [ox + 0.5, oy + 0.5, 0, 1] - 0.5  # version 2 samples at pixel centers
        if not (0 <= tx <= w - 1 and 0 <= ty <= h - 1):
            continue
        x0, y0 = int(np.floor(tx)), int(np.floor(ty))
        fx, fy = tx - x0, ty - y0
        for dy, dx, wgt in ((0, 0, (1 - fy) * (1 - fx)), (0, 1, (1 - fy) * fx), (1, 0, fy * (1 - fx)), (1, 1, fy * fx)):
            if y0 + dy < h and x0 + dx < w:
                out[0, oy, ox] += wgt * x[0, y0 + dy, x0 + dx]
    return out


# -- models ------------------------------------------------------------------------------------------------

def one_op(op, ins, outs, options, version=1):
    mb = ModelBuilder()
    ids = [mb.input(f"x{k}", s) for k, s in enumerate(ins)]
    out_ids = [mb.tensor(f"y{k}", s) for k, s in enumerate(outs)]
    mb.op(op, ids, out_ids, version=version, custom_options=options)
    mb.output(*out_ids)
    return mb.build()


def check(content, inputs, refs, backend, fp16, rel=None):
    outs = run(gd.Interpreter(model_content=content), inputs) if backend == "cpu" else \
        run_gpu(content, inputs, backend, fp16)
    for k, (o, r) in enumerate(zip(outs, refs)):
        assert_float_close(o, np.asarray(r, np.float32), rel or (2e-2 if fp16 else 2e-5), what=f"output {k}")


WHERE = [("cpu", False), ("cl", False), ("cl", True), ("gl", False), ("gl", True)]
rng = np.random.default_rng(7)


@pytest.mark.parametrize("where,fp16", WHERE)
@pytest.mark.parametrize("case", ["2x2 VALID", "3x3 stride 1 SAME relu", "3x2 stride 2 SAME"])
def test_max_pool_argmax_and_unpool(where, fp16, case):
    k, s, padding, act = {"2x2 VALID": ((2, 2), (2, 2), "VALID", 0),
                          "3x3 stride 1 SAME relu": ((3, 3), (1, 1), "SAME", 1),
                          "3x2 stride 2 SAME": ((3, 2), (2, 2), "SAME", 0)}[case]
    shape = (2, 6, 7, 5)
    x = rng.standard_normal(shape).astype(np.float32)
    if fp16:
        x = x.astype(np.float16).astype(np.float32)
    if padding == "VALID":
        oh, ow = (shape[1] - k[0]) // s[0] + 1, (shape[2] - k[1]) // s[1] + 1
    else:
        oh, ow = -(-shape[1] // s[0]), -(-shape[2] // s[1])
    pt = max((oh - 1) * s[0] + k[0] - shape[1], 0) // 2
    pl = max((ow - 1) * s[1] + k[1] - shape[2], 0) // 2
    options = pool_options(k, s, padding, act)
    pooled, idx = ref_pool_argmax(x, k, s, (pt, pl), (oh, ow), lo=0 if act else -np.inf)
    content = one_op("MaxPoolingWithArgmax2D", [shape], [(2, oh, ow, 5)] * 2, options)
    check(content, [x], [pooled, idx], *(where, fp16))

    out_hw = (oh * k[0], ow * k[1])
    upt = max((oh - 1) * s[0] + k[0] - out_hw[0], 0) // 2
    upl = max((ow - 1) * s[1] + k[1] - out_hw[1], 0) // 2
    unpool = one_op("MaxUnpooling2D", [(2, oh, ow, 5)] * 2, [(2, *out_hw, 5)], options)
    check(unpool, [pooled, idx], [ref_unpool(pooled, idx, k, s, (upt, upl), out_hw)], where, fp16)


def face_points(n, seed):
    g = np.random.default_rng(seed)
    return np.concatenate([g.uniform(20, 170, (1, n, 2)), g.standard_normal((1, n, 1))], -1).astype(np.float32)


@pytest.mark.parametrize("where,fp16", WHERE)
def test_landmarks_to_transform_matrix(where, fp16):
    subset, left, right = [0, 3, 5, 7, 11, 2, 19, 4, 8], 1, 6
    content = one_op("Landmarks2TransformMatrix", [(1, 20, 3)], [(1, 4, 4)],
                     landmarks_options(subset, left, right, (16, 24), scale=1.5, target=0.3), version=2)
    for seed in range(3):
        pts = face_points(20, seed)
        if fp16:
            pts = pts.astype(np.float16).astype(np.float32)
        ref = ref_landmarks_matrix(pts, subset + [subset[-1]], left, right, (16, 24), 1.5, target=0.3)
        check(content, [pts], [ref], where, fp16, rel=1e-3 if fp16 else 2e-6)


@pytest.mark.parametrize("where,fp16", WHERE)
@pytest.mark.parametrize("dims", [2, 3])
def test_transform_landmarks(where, fp16, dims):
    content = one_op("TransformLandmarks", [(1, 9, dims), (1, 4, 4)], [(1, 9, dims)], None, version=2)
    pts = rng.uniform(0, 16, (1, 9, dims)).astype(np.float32)
    m = ref_landmarks_matrix(face_points(20, 1), [0, 3, 5, 7], 1, 6, (16, 16), 1.5).astype(np.float32)
    if fp16:
        pts = pts.astype(np.float16).astype(np.float32)
    check(content, [pts, m], [ref_transform_landmarks(pts, m)], where, fp16, rel=1e-3 if fp16 else 2e-6)


@pytest.mark.parametrize("where,fp16", WHERE)
def test_transform_tensor_bilinear(where, fp16):
    content = one_op("TransformTensorBilinear", [(1, 12, 13, 7), (1, 4, 4)], [(1, 6, 5, 7)],
                     bilinear_options((6, 5)), version=2)
    x = rng.standard_normal((1, 12, 13, 7)).astype(np.float32)
    if fp16:
        x = x.astype(np.float16).astype(np.float32)
    for angle, scale, dx, dy in ((0.3, 2.0, 1.2, 0.4), (-1.1, 1.7, 6.0, 5.0), (0.0, 3.0, -2.0, 0.5)):
        m = np.eye(4, dtype=np.float32)
        m[:2, :2] = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        m[:2, 3] = dx, dy
        check(content, [x, m.reshape(1, 4, 4)], [ref_bilinear(x, m, (6, 5))], where, fp16)


def face_crop_model() -> tuple[bytes, list[np.ndarray]]:
    """The face landmark model's crop: landmarks -> matrix -> bilinear crop of a feature map (then a conv), and
    2-D landmarks of the crop mapped back through the matrix (then reshaped), as MediaPipe's model wires them."""
    mb = ModelBuilder()
    feat = mb.input("features", (1, 24, 24, 5))
    pts = mb.input("landmarks", (1, 20, 3))
    local = mb.input("local", (1, 6, 2))
    m = mb.tensor("matrix", (1, 4, 4))
    mb.op("Landmarks2TransformMatrix", [pts], [m], version=2,
          custom_options=landmarks_options([0, 3, 5, 7, 11, 2, 19, 4], 1, 6, (8, 8)))
    quarter = mb.tensor("quarter", (1, 4, 4))
    mb.op("MUL", [m, mb.const("q", np.float32(0.25))], [quarter])
    crop = mb.tensor("crop", (1, 8, 8, 5))
    mb.op("TransformTensorBilinear", [feat, quarter], [crop], version=2, custom_options=bilinear_options((8, 8)))
    conv = mb.tensor("conv", (1, 8, 8, 3))
    mb.op("CONV_2D", [crop, mb.const("w", rng.standard_normal((3, 3, 3, 5)).astype(np.float32)), -1], [conv],
          padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
    back = mb.tensor("back", (1, 6, 2))
    mb.op("TransformLandmarks", [local, m], [back], version=2)
    flat = mb.tensor("flat", (1, 12))
    mb.op("RESHAPE", [back, mb.const("shape", np.array([1, 12], np.int32))], [flat])
    mb.output(conv, flat)
    inputs = [rng.standard_normal((1, 24, 24, 5)).astype(np.float32), face_points(20, 4) / 2,
              rng.uniform(0, 8, (1, 6, 2)).astype(np.float32)]
    return mb.build(), inputs


@pytest.mark.parametrize("fp16", [False, True])
def test_face_crop_graph_runs_wholly_on_the_gpu(backend, fp16):
    content, inputs = face_crop_model()
    cpu = run(gd.Interpreter(model_content=content), inputs)
    for o, r in zip(run_gpu(content, inputs, backend, fp16), cpu):
        assert_float_close(o, r, 2e-2 if fp16 else 1e-4)


def test_flexbuffer_options_are_validated():
    content = one_op("Landmarks2TransformMatrix", [(1, 20, 3)], [(1, 4, 4)], flex({"left_rotation_idx": 1}),
                     version=2)
    with pytest.raises(gd.ModelError, match="Landmarks2TransformMatrix.*right_rotation_idx"):
        gd.Interpreter(model_content=content)
    content = one_op("Landmarks2TransformMatrix", [(1, 20, 3)], [(1, 4, 4)],
                     landmarks_options([0, 25], 1, 6, (8, 8)), version=2)
    with pytest.raises(gd.ModelError, match="outside the 20 landmarks"):
        gd.Interpreter(model_content=content)
    with pytest.raises(gd.ModelError, match="TfLitePoolParams"):
        gd.Interpreter(model_content=one_op("MaxUnpooling2D", [(1, 2, 2, 1)] * 2, [(1, 4, 4, 1)], b"\x01"))


def test_face_landmark_with_attention_model(backend):
    """MediaPipe's face landmark model with attention (MediaPipe 0.10.21's wheel, Apache-2.0: tests/models/mediapipe)
    runs wholly on the GPU, its Landmarks2TransformMatrix, TransformTensorBilinear and TransformLandmarks too. LiteRT
    cannot run those custom ops, so the reference is our CPU path, whose custom kernels the tests above check
    against numpy formulas, and whose other ops are LiteRT's."""
    content = (Path(__file__).parent / "models" / "mediapipe" / "face_landmark_with_attention.tflite").read_bytes()
    x = np.random.default_rng(0).uniform(0, 1, (1, 192, 192, 3)).astype(np.float32)
    cpu = run(gd.Interpreter(model_content=content), [x])
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    gpu = run(it, [x])
    assert {d["backend"] for d in it.get_ops_details()} <= {backend, "folded"}
    assert {"Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"} <= \
        {d["op_name"] for d in it.get_ops_details() if d["backend"] == backend}
    for o, r in zip(gpu, cpu):
        assert_float_close(o, r, 1e-4)
