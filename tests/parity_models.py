"""Tiny one-op models for every op of issue 16 (GPU op parity with TFLite's GPU delegate): bool and int32
tensors, run-time GATHER indices and CONV_2D weights, many-group convolutions, wide concatenations, LSTM,
RELU_0_TO_1, MediaPipe's custom ops and rank-5 reshapes. ``bench/gpu_op_parity.py`` prints where each runs;
the GPU tests run them against LiteRT (or a numpy formula, for the custom ops).

Each entry: name -> (model bytes, inputs). ``every_op_model()`` is all of them in one graph."""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
from flatbuffers import flexbuffers

import gpu_delegate as gd
from gpu_delegate.tflite.reader import read_model
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import run, shared_delegate
from .test_ops_lstm_cells import lstm_basic_model, lstm_full_model

Model = tuple[bytes, list[np.ndarray]]
rng = np.random.default_rng(16)


def pool_options(filter_hw: tuple[int, int], stride_hw: tuple[int, int], padding: str = "VALID",
                 activation: int = 0) -> bytes:
    """MediaPipe's pooling custom options: the raw TfLitePoolParams struct (padding 1 SAME, 2 VALID; stride
    w, h; filter w, h; activation; computed padding), little-endian."""
    pad = {"SAME": 1, "VALID": 2}[padding]
    return struct.pack("<10i", pad, stride_hw[1], stride_hw[0], filter_hw[1], filter_hw[0], activation, 0, 0, 0, 0)


def flex(options: dict) -> bytes:
    return bytes(flexbuffers.Dumps(options))


def landmarks_options(subset: list[int], left: int, right: int, out_hw: tuple[int, int], scale: float = 1.5,
                      target: float = 0.0) -> bytes:
    """Landmarks2TransformMatrix (version 2) options as MediaPipe's face model writes them."""
    b = flexbuffers.Builder()
    with b.Map():
        b.Int("left_rotation_idx", left)
        b.Int("output_height", out_hw[0])
        b.Int("output_width", out_hw[1])
        b.Int("right_rotation_idx", right)
        b.Float("scale_x", scale)
        b.Float("scale_y", scale)
        b.TypedVectorFromElements("subset_idxs", subset, element_type=flexbuffers.Type.INT)
        b.Float("target_rotation_radians", target)
    return bytes(b.Finish())


def bilinear_options(out_hw: tuple[int, int]) -> bytes:
    b = flexbuffers.Builder()
    with b.Map():
        b.Int("output_height", out_hw[0])
        b.Int("output_width", out_hw[1])
    return bytes(b.Finish())


def _one(op: str, ins: list[tuple[tuple[int, ...], type] | np.ndarray], out: tuple[tuple[int, ...], type],
         samples: list[np.ndarray] | None = None, version: int = 1, custom: bytes | None = None,
         **attrs) -> Model:
    mb = ModelBuilder()
    ids, feeds = [], []
    for k, spec in enumerate(ins):
        if isinstance(spec, np.ndarray):
            ids.append(mb.const(f"c{k}", spec))
        else:
            ids.append(mb.input(f"x{k}", spec[0], spec[1]))
            feeds.append(_sample(spec[0], spec[1]))
    y = mb.tensor("y", out[0], out[1])
    mb.op(op, ids, [y], version=version, custom_options=custom, **attrs)
    mb.output(y)
    return mb.build(), samples if samples is not None else feeds


def _sample(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        return rng.integers(-5, 6, shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


F, I32, B = np.float32, np.int32, np.bool_
S4, S4B = (2, 3, 5, 7), (1, 1, 5, 7)


def _compare(op: str, dtype: type) -> Callable[[], Model]:
    return lambda: _one(op, [(S4, dtype), (S4B, dtype)], (S4, B))


def _concat_many() -> Model:
    mb = ModelBuilder()
    parts = [mb.input(f"x{k}", (2, 3, 4, 1 + k % 3)) for k in range(10)]
    y = mb.tensor("y", (2, 3, 4, sum(1 + k % 3 for k in range(10))))
    mb.op("CONCATENATION", parts, [y], axis=3)
    mb.output(y)
    return mb.build(), [_sample((2, 3, 4, 1 + k % 3), F) for k in range(10)]


def _upsampling_rank5(tile: bool) -> Model:
    """Keras 3 nearest UpSampling2D: EXPAND_DIMS to rank 5, repeat (TILE or BROADCAST_TO), RESHAPE back."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 5, 3))
    e = mb.tensor("e", (1, 4, 1, 5, 3))
    mb.op("EXPAND_DIMS", [x, mb.const("axis", np.array(2, np.int32))], [e])
    r = mb.tensor("r", (1, 4, 2, 5, 3))
    if tile:
        mb.op("TILE", [e, mb.const("multiples", np.array([1, 1, 2, 1, 1], np.int32))], [r])
    else:
        mb.op("BROADCAST_TO", [e, mb.const("shape", np.array([1, 4, 2, 5, 3], np.int32))], [r], version=2)
    y = mb.tensor("y", (1, 8, 5, 3))
    mb.op("RESHAPE", [r, mb.const("new_shape", np.array([1, 8, 5, 3], np.int32))], [y])
    mb.output(y)
    return mb.build(), [_sample((1, 4, 5, 3), F)]


def _face_landmarks(n: int = 20) -> np.ndarray:
    pts = rng.uniform(20, 170, (1, n, 3)).astype(np.float32)
    pts[..., 2] = rng.standard_normal(n)
    return pts


MODELS: dict[str, Callable[[], Model]] = {
    **{f"{op} float": _compare(op, F) for op in ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS",
                                                  "LESS_EQUAL")},
    **{f"{op} int32": _compare(op, I32) for op in ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS",
                                                  "LESS_EQUAL")},
    "EQUAL bool": _compare("EQUAL", B),
    "LOGICAL_AND": lambda: _one("LOGICAL_AND", [(S4, B), (S4B, B)], (S4, B)),
    "LOGICAL_OR": lambda: _one("LOGICAL_OR", [(S4, B), (S4B, B)], (S4, B)),
    "LOGICAL_NOT": lambda: _one("LOGICAL_NOT", [(S4, B)], (S4, B)),
    "SELECT": lambda: _one("SELECT", [((2,), B), (S4, F), (S4, F)], (S4, F)),
    "SELECT_V2": lambda: _one("SELECT_V2", [((2, 3, 1, 7), B), (S4, F), (S4B, F)], (S4, F)),
    "SELECT_V2 int32": lambda: _one("SELECT_V2", [(S4, B), (S4, I32), (S4, I32)], (S4, I32)),
    "CAST bool->float": lambda: _one("CAST", [(S4, B)], (S4, F)),
    "CAST float->bool": lambda: _one("CAST", [(S4, F)], (S4, B)),
    "CAST int32->float": lambda: _one("CAST", [(S4, I32)], (S4, F)),
    "CAST float->int32": lambda: _one("CAST", [(S4, F)], (S4, I32), samples=[(_sample(S4, F) * 40).astype(F)]),
    "ONE_HOT": lambda: _one("ONE_HOT", [((2, 5), I32), np.array(7, I32), np.array(2.5, F), np.array(-1.0, F)],
                            ((2, 5, 7), F), samples=[rng.integers(-1, 8, (2, 5)).astype(I32)], axis=-1),
    "CUMSUM float": lambda: _one("CUMSUM", [(S4, F), np.array(2, I32)], (S4, F)),
    "CUMSUM int32": lambda: _one("CUMSUM", [(S4, I32), np.array(3, I32)], (S4, I32), exclusive=True, reverse=True),
    "GATHER run-time indices": lambda: _one("GATHER", [((2, 6, 5, 7), F), ((3,), I32)], ((2, 3, 5, 7), F),
                                            samples=[_sample((2, 6, 5, 7), F), np.array([5, 0, 3], I32)], axis=1),
    "CONV_2D run-time weights": lambda: _one("CONV_2D", [((2, 8, 8, 6), F), ((5, 3, 3, 6), F)], ((2, 8, 8, 5), F),
                                             padding="SAME", stride_w=1, stride_h=1),
    "CONV_2D 12 groups": lambda: _one("CONV_2D", [((1, 8, 8, 24), F),
                                                  rng.standard_normal((36, 3, 3, 2)).astype(F)], ((1, 8, 8, 36), F),
                                      padding="SAME", stride_w=1, stride_h=1),
    "CONCATENATION 10 inputs": _concat_many,
    "LSTM full": lambda: (lstm_full_model(), [_sample((3, 7), F)]),
    "LSTM basic": lambda: (lstm_basic_model(), [_sample((2, 5), F)]),
    "RELU_0_TO_1": lambda: _one("RELU_0_TO_1", [(S4, F)], (S4, F)),
    "MaxPoolingWithArgmax2D": lambda: _pool_argmax(),
    "MaxUnpooling2D": lambda: _one("MaxUnpooling2D", [((2, 3, 4, 5), F), ((2, 3, 4, 5), F)], ((2, 6, 8, 5), F),
                                   samples=[_sample((2, 3, 4, 5), F),
                                            rng.integers(0, 4, (2, 3, 4, 5)).astype(F) + 0.1],
                                   custom=pool_options((2, 2), (2, 2))),
    "Landmarks2TransformMatrix": lambda: _one(
        "Landmarks2TransformMatrix", [((1, 20, 3), F)], ((1, 4, 4), F), samples=[_face_landmarks()], version=2,
        custom=landmarks_options([0, 3, 5, 7, 11, 2, 19, 4], 1, 6, (16, 16))),
    "TransformLandmarks": lambda: _one("TransformLandmarks", [((1, 9, 2), F), ((1, 4, 4), F)], ((1, 9, 2), F),
                                       version=2),
    "TransformTensorBilinear": lambda: _one("TransformTensorBilinear", [((1, 12, 12, 5), F), ((1, 4, 4), F)],
                                            ((1, 6, 6, 5), F), version=2, custom=bilinear_options((6, 6)),
                                            samples=[_sample((1, 12, 12, 5), F), _affine(2.0, 0.3, (1.0, 0.5))]),
    "rank 5 (EXPAND_DIMS, TILE)": lambda: _upsampling_rank5(tile=True),
    "rank 5 (EXPAND_DIMS, BROADCAST_TO)": lambda: _upsampling_rank5(tile=False),
}


def _affine(scale: float, angle: float, shift: tuple[float, float]) -> np.ndarray:
    c, s = np.cos(angle) * scale, np.sin(angle) * scale
    m = np.eye(4, dtype=F)
    m[0, :2], m[1, :2] = (c, -s), (s, c)
    m[0, 3], m[1, 3] = shift
    return m.reshape(1, 4, 4)


def _pool_argmax() -> Model:
    mb = ModelBuilder()
    x = mb.input("x", (2, 6, 8, 5))
    y, idx = mb.tensor("y", (2, 3, 4, 5)), mb.tensor("idx", (2, 3, 4, 5))
    mb.op("MaxPoolingWithArgmax2D", [x], [y, idx], custom_options=pool_options((2, 2), (2, 2)))
    mb.output(y, idx)
    return mb.build(), [_sample((2, 6, 8, 5), F)]


def run_gpu(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False) -> list[np.ndarray]:
    """Outputs of ``content`` on the GPU delegate; every node must have run on ``backend``."""
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend, fp16)])
    outs = run(it, inputs)
    for d in it.get_ops_details():
        assert d["backend"] == backend, f"node {d['index']} ({d['op_name']}) ran on {d['backend']}: " \
            f"{it.cpu_reasons().get(d['index'])}"
    return outs


def every_op_model() -> bytes:
    """Every model of MODELS side by side in one graph (their tensors renamed apart): what ``gpu-delegate inspect``
    shows wholly on the GPU."""
    mb = ModelBuilder()
    for name, make in MODELS.items():
        graph = read_model(make()[0], name).main
        ids: dict[int, int] = {}
        prefix = "".join(ch if ch.isalnum() else "_" for ch in name)
        for t in graph.tensors:
            quant = {} if t.quant is None else {"scale": t.quant.scale, "zero_point": t.quant.zero_point}
            if t.data is not None:
                ids[t.index] = mb.const(f"{prefix}/{t.name}", np.asarray(t.data), **quant)
            elif t.index in graph.inputs:
                ids[t.index] = mb.input(f"{prefix}/{t.name}", t.shape, t.dtype, **quant)
            else:
                ids[t.index] = mb.tensor(f"{prefix}/{t.name}", t.shape, t.dtype, is_variable=t.is_variable, **quant)
        for n in graph.nodes:
            mb.op(n.op, [ids[t] if t >= 0 else -1 for t in n.inputs], [ids[t] for t in n.outputs], version=n.version,
                  custom_options=n.custom_options or None, **({} if n.custom else n.attrs))
        mb.output(*(ids[t] for t in graph.outputs))
    return mb.build()
