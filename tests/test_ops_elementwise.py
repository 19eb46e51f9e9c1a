"""Elementwise ops on the CPU path against LiteRT: unary math and activations, CAST, binary arithmetic with
broadcasting and fused activations, comparisons, logic, PRELU, ADD_N, SELECT; float, int32, int8 and uint8.

Quantized results are compared with LiteRT's reference kernels (TFLite's integer reference code); its
default resolver hands them to XNNPACK, which rounds differently."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_matches, run_litert, run_ours


@dataclass
class T:
    shape: tuple
    dtype: type = np.float32
    q: tuple | None = None  # (scale, zero_point)
    data: np.ndarray | None = None  # a constant


def op_model(op: str, ins: list[T], outs: list[T], version: int = 1, **attrs) -> bytes:
    mb = ModelBuilder()

    def quant(t: T) -> dict:
        return {} if t.q is None else {"scale": t.q[0], "zero_point": t.q[1]}
    ids = [mb.const(f"c{i}", t.data, t.dtype, **quant(t)) if t.data is not None
           else mb.input(f"x{i}", t.shape, t.dtype, **quant(t)) for i, t in enumerate(ins)]
    oids = [mb.tensor(f"y{i}", t.shape, t.dtype, **quant(t)) for i, t in enumerate(outs)]
    mb.op(op, ids, oids, version=version, **attrs)
    mb.output(*oids)
    return mb.build()


def check(content: bytes, inputs: list[np.ndarray], reference_kernels: bool = False, rel: float = 1e-4) -> None:
    assert_matches(run_ours(content, inputs), run_litert(content, inputs, reference_kernels), rel)


def codes(dtype, shape=(2, 4, 4, 8)) -> np.ndarray:
    """Every value of an 8-bit type, once each."""
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype).reshape(shape)


def rand_q(rng, shape, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def broadcast(a: tuple, b: tuple) -> tuple:
    return tuple(np.broadcast_shapes(a, b))


# -- unary ----------------------------------------------------------------------------------------------

UNARY_FLOAT = [("ABS", {}), ("COS", {}), ("EXP", {}), ("FLOOR", {}), ("LOG", {}), ("NEG", {}), ("RSQRT", {}),
               ("SIN", {}), ("SQRT", {}), ("SQUARE", {}), ("TANH", {}), ("LOGISTIC", {}), ("ELU", {}),
               ("GELU", {"approximate": False}), ("GELU", {"approximate": True}), ("HARD_SWISH", {}),
               ("LEAKY_RELU", {"alpha": 0.2}), ("LEAKY_RELU", {"alpha": -1.5}), ("RELU", {}), ("RELU6", {}),
               ("RELU_N1_TO_1", {}), ("SIGN", {})]


@pytest.mark.parametrize("op,attrs", UNARY_FLOAT, ids=[f"{o}{a}" for o, a in UNARY_FLOAT])
def test_unary_float(op, attrs):
    rng = np.random.default_rng(1)
    shape = (2, 3, 5, 7)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if op in ("LOG", "RSQRT", "SQRT"):
        x = np.abs(x) + 0.05
    x.reshape(-1)[:3] = [0.0, -3.0, 3.0]  # the kinks of the relus and hard swish
    if op in ("LOG", "RSQRT", "SQRT"):
        x.reshape(-1)[:3] = [0.05, 1.0, 3.0]
    check(op_model(op, [T(shape)], [T(shape)], **attrs), [x])


UNARY_Q = [("LOGISTIC", {}, "sigmoid"), ("TANH", {}, "tanh"), ("RELU", {}, None), ("RELU6", {}, None),
           ("RELU_N1_TO_1", {}, None), ("HARD_SWISH", {}, None), ("LEAKY_RELU", {"alpha": 0.1}, None),
           ("LEAKY_RELU", {"alpha": -0.3}, None), ("GELU", {"approximate": False}, None),
           ("GELU", {"approximate": True}, None)]
INT8_ONLY = [("ABS", {}, None), ("NEG", {}, None), ("EXP", {}, None), ("LOG", {}, None), ("RSQRT", {}, None),
             ("SQRT", {}, None)]  # LiteRT has no uint8 kernel for these
UNARY_Q_CASES = [(*c, d) for c in UNARY_Q for d in (np.int8, np.uint8)] + [(*c, np.int8) for c in INT8_ONLY]


@pytest.mark.parametrize("op,attrs,kind,dtype", UNARY_Q_CASES,
                         ids=[f"{o}{a}-{np.dtype(d)}" for o, a, _, d in UNARY_Q_CASES])
def test_unary_quantized(op, attrs, kind, dtype):
    """Every input code, through TFLite's lookup tables or fixed-point kernels."""
    lo = int(np.iinfo(dtype).min)
    zp_in = lo + 133  # asymmetric
    x = codes(dtype)
    if op in ("RSQRT", "SQRT"):  # LiteRT rejects negative inputs outright
        x = np.maximum(x.astype(np.int64), zp_in).astype(dtype)
    if kind == "sigmoid":
        qo = (1 / 256, lo)
    elif kind == "tanh":
        qo = (1 / 128, lo + 128)
    else:
        qo = (0.037, lo + 120)
    content = op_model(op, [T(x.shape, dtype, (0.045, zp_in))], [T(x.shape, dtype, qo)], **attrs)
    np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x], True)[0])


RSQRT_SCALES = [((0.0115981, -128), (0.00500632, -128)), ((0.00788964, -128), (0.00600153, -128)),
                ((0.01178778, -128), (0.00457087, -128)), ((0.3, 3), (0.011, -20)), ((0.0021, -7), (0.09, 40))]


@pytest.mark.parametrize("qi,qo", RSQRT_SCALES)
def test_int8_rsqrt_follows_tflites_fixed_point(qi, qo):
    """Every code from the zero point up, at the scales of a converted ViT's LayerNorms (where a float table
    is a step off TFLite on one code) and others: TFLite computes int8 RSQRT in fixed point."""
    x = np.arange(qi[1], 128, dtype=np.int64).astype(np.int8)
    content = op_model("RSQRT", [T(x.shape, np.int8, qi)], [T(x.shape, np.int8, qo)])
    np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x], True)[0])


@pytest.mark.parametrize("qi,qo", [((0.09476087, -57), (0.48481336, 4)), ((0.01490689, -65), (0.0630742, -18)),
                                   ((0.02, 10), (0.02, -3))])
def test_int8_abs_rescales_in_fixed_point(qi, qo):
    """Every code: TFLite moves |code - zp| to the output scale by a fixed-point multiplier (a float table is a
    step off on ~30 codes at the first two pairs), and only shifts it when the scales are equal."""
    x = codes(np.int8)
    content = op_model("ABS", [T(x.shape, np.int8, qi)], [T(x.shape, np.int8, qo)])
    np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x], True)[0])


@pytest.mark.parametrize("op,attrs,kind,dtype", UNARY_Q_CASES,
                         ids=[f"{o}{a}-{np.dtype(d)}" for o, a, _, d in UNARY_Q_CASES])
def test_unary_quantized_at_random_scales(op, attrs, kind, dtype):
    """Every code at 4 seeded random scale and zero-point pairs, exactly as LiteRT's reference kernels: the
    fixed scales above miss rescale paths (ABS and RSQRT were a step off at other scales)."""
    rng = np.random.default_rng(zlib.crc32(f"{op}{attrs}{np.dtype(dtype)}".encode()))
    lo = int(np.iinfo(dtype).min)
    for _ in range(4):
        qi = (float(np.exp(rng.uniform(-6, 0))), int(rng.integers(lo, lo + 256)))
        qo = {"sigmoid": (1 / 256, lo), "tanh": (1 / 128, lo + 128)}.get(
            kind or "", (float(np.exp(rng.uniform(-6, 0))), int(rng.integers(lo, lo + 256))))
        x = codes(dtype)
        if op in ("RSQRT", "SQRT", "LOG"):  # LiteRT refuses codes below the zero point
            x = np.maximum(x.astype(np.int64), qi[1]).astype(dtype)
        content = op_model(op, [T(x.shape, dtype, qi)], [T(x.shape, dtype, qo)], **attrs)
        np.testing.assert_array_equal(run_ours(content, [x])[0], run_litert(content, [x], True)[0],
                                      err_msg=f"{op} at {qi} -> {qo}")


def test_elu_int8_against_formula():
    """LiteRT registers no int8 ELU, so the float formula on dequantized codes is the reference."""
    x = codes(np.int8)
    (si, zi), (so, zo) = (0.045, 5), (0.037, -8)
    ours = run_ours(op_model("ELU", [T(x.shape, np.int8, (si, zi))], [T(x.shape, np.int8, (so, zo))]), [x])[0]
    v = si * (x.astype(np.float64) - zi)
    ref = np.clip(np.round(np.where(v < 0, np.expm1(v), v) / so) + zo, -128, 127).astype(np.int8)
    assert_matches([ours], [ref])


def test_unary_int32():
    x = np.array([[-7, -1, 0, 1, 5, 2**20]], np.int32)
    for op in ("ABS", "NEG", "SIGN"):
        check(op_model(op, [T(x.shape, np.int32)], [T(x.shape, np.int32)]), [x])


def test_logical_not():
    x = np.array([[True, False, True]])
    check(op_model("LOGICAL_NOT", [T(x.shape, np.bool_)], [T(x.shape, np.bool_)]), [x])


CASTS = [(np.float32, np.int32), (np.float32, np.int64), (np.float32, np.uint8), (np.float32, np.bool_),
         (np.int32, np.float32), (np.int32, np.int64), (np.int64, np.int32), (np.uint8, np.float32),
         (np.int8, np.int32), (np.int16, np.int32), (np.bool_, np.float32), (np.bool_, np.int32),
         (np.int32, np.bool_), (np.float32, np.float16), (np.float16, np.float32), (np.float32, np.float64),
         (np.int32, np.uint8)]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{np.dtype(a)}->{np.dtype(b)}" for a, b in CASTS])
def test_cast(src, dst):
    f = np.array([[-2.75, -1.5, -0.4, 0.0, 0.4, 1.5, 2.75, 100.9]], np.float32)
    if np.dtype(src) == np.bool_:
        x = f > 0
    elif np.dtype(src).kind == "f":
        x = (np.abs(f) if np.dtype(dst) == np.uint8 else f).astype(src)  # negative float -> uint8 is UB in C
    elif np.dtype(src) == np.uint8:
        x = np.array([[0, 1, 7, 128, 200, 255, 3, 9]], np.uint8)
    else:
        x = np.array([[-300, -1, 0, 1, 2, 127, 255, 4000]]).astype(src)
    check(op_model("CAST", [T(x.shape, src)], [T(x.shape, dst)]), [x])


# -- binary ---------------------------------------------------------------------------------------------

SHAPE_PAIRS = [((2, 5, 7, 3), (2, 5, 7, 3)), ((2, 5, 7, 3), ()), ((1, 5, 7, 13), (13,)),
               ((1, 5, 7, 3), (1, 1, 7, 1)), ((3, 1, 5), (1, 7, 1))]
ACTS = ["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT"]


def _operands(rng, op, sa, sb, dtype=np.float32):
    a = (rng.standard_normal(sa) * 3).astype(dtype)
    b = (rng.standard_normal(sb) * 3).astype(dtype)
    if op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
        b = (np.sign(b) + (b == 0)) * (0.5 + np.abs(b))  # keep away from zero
    if op == "POW":
        a = np.abs(a) + 0.1
    return a, b.astype(dtype)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV"])
def test_arithmetic_fused_float(op, act):
    rng = np.random.default_rng(2)
    for sa, sb in SHAPE_PAIRS:
        a, b = _operands(rng, op, sa, sb)
        check(op_model(op, [T(sa), T(sb)], [T(broadcast(sa, sb))], fused_activation_function=act), [a, b])


BINARY_FLOAT = ["POW", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "FLOOR_DIV", "FLOOR_MOD"]
COMPARE = ["EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"]


@pytest.mark.parametrize("op", BINARY_FLOAT + COMPARE)
def test_binary_float(op):
    rng = np.random.default_rng(3)
    for sa, sb in SHAPE_PAIRS:
        a, b = _operands(rng, op, sa, sb)
        if op in COMPARE:  # make ties happen
            a, b = np.round(a), np.round(b)
        out = np.bool_ if op in COMPARE else np.float32
        check(op_model(op, [T(sa), T(sb)], [T(broadcast(sa, sb), out)]), [a, b])


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "FLOOR_DIV", "FLOOR_MOD", "MAXIMUM", "MINIMUM",
                                "SQUARED_DIFFERENCE", "POW", "DIV", *COMPARE])
def test_binary_int32(op):
    rng = np.random.default_rng(4)
    for sa, sb in SHAPE_PAIRS[:4]:
        a = rng.integers(-50, 50, sa).astype(np.int32)
        b = rng.integers(-9, 10, sb).astype(np.int32)
        if op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
            b[b == 0] = 3
        if op == "POW":
            a, b = a % 7, np.abs(b) % 4
        out = np.bool_ if op in COMPARE else np.int32
        attrs = {"fused_activation_function": "RELU6"} if op in ("ADD", "SUB", "MUL") else {}
        check(op_model(op, [T(sa, np.int32), T(sb, np.int32)], [T(broadcast(sa, sb), out)], **attrs), [a, b])


@pytest.mark.parametrize("op", ["LOGICAL_AND", "LOGICAL_OR", "EQUAL", "NOT_EQUAL"])
def test_binary_bool(op):
    a = np.array([[True, True, False, False]])
    b = np.array([[True], [False]])
    check(op_model(op, [T(a.shape, np.bool_), T(b.shape, np.bool_)], [T((2, 4), np.bool_)]), [a, b])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
def test_arithmetic_quantized(op, dtype):
    """TFLite's fixed-point ADD/SUB/MUL: asymmetric zero points, unequal scales, broadcasting, every
    fused activation."""
    rng = np.random.default_rng(5)
    lo = int(np.iinfo(dtype).min)
    for act in ACTS[:4]:
        for sa, sb in SHAPE_PAIRS:
            qa, qb = (0.031, lo + 121), (0.017, lo + 140)
            qo = (0.048 if op != "MUL" else 0.19, lo + 117)
            content = op_model(op, [T(sa, dtype, qa), T(sb, dtype, qb)], [T(broadcast(sa, sb), dtype, qo)],
                               fused_activation_function=act)
            check(content, [rand_q(rng, sa, dtype), rand_q(rng, sb, dtype)], reference_kernels=True)


def test_fused_activation_bounds_round_like_tflite():
    """RELU_N1_TO_1 on scale 0.4: 1 / 0.4f is 2.5 in float32, and TFLite rounds that half up to 3."""
    x = codes(np.int8)
    q = (0.05, 0)
    content = op_model("ADD", [T(x.shape, np.int8, q), T(x.shape, np.int8, q)], [T(x.shape, np.int8, (0.4, 0))],
                       fused_activation_function="RELU_N1_TO_1")
    check(content, [x, x], reference_kernels=True)
    assert run_ours(content, [x, x])[0].max() == 3


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_binary_quantized_other(dtype):
    """MAXIMUM/MINIMUM on one shared quantization, comparisons across two, int8 SQUARED_DIFFERENCE."""
    rng = np.random.default_rng(6)
    lo = int(np.iinfo(dtype).min)
    q = (0.05, lo + 130)
    for sa, sb in SHAPE_PAIRS[:4]:
        a, b = rand_q(rng, sa, dtype), rand_q(rng, sb, dtype)
        so = broadcast(sa, sb)
        for op in ("MAXIMUM", "MINIMUM"):
            check(op_model(op, [T(sa, dtype, q), T(sb, dtype, q)], [T(so, dtype, q)]), [a, b], True)
        for op in COMPARE:
            check(op_model(op, [T(sa, dtype, q), T(sb, dtype, (0.071, lo + 110))], [T(so, np.bool_)]),
                  [a, b], True)
        if dtype == np.int8:
            content = op_model("SQUARED_DIFFERENCE", [T(sa, dtype, q), T(sb, dtype, (0.04, -3))],
                               [T(so, dtype, (0.5, -128))])
            check(content, [a, b], True)


def test_div_uint8_against_formula():
    """Quantized DIV goes through float. LiteRT's fixed-point uint8 DIV overflows for small numerators
    (it answers 255 for 0.02), so the reference here is the dequantize-divide-requantize formula."""
    rng = np.random.default_rng(12)
    shape = (2, 5, 7, 3)
    a = rand_q(rng, shape, np.uint8)
    b = rng.integers(150, 256, shape).astype(np.uint8)
    (sa, za), (sb, zb), (so, zo) = (0.05, 130), (0.04, 100), (0.2, 30)
    content = op_model("DIV", [T(shape, np.uint8, (sa, za)), T(shape, np.uint8, (sb, zb))],
                       [T(shape, np.uint8, (so, zo))], fused_activation_function="RELU")
    quotient = (sa * (a.astype(np.float64) - za)) / (sb * (b.astype(np.float64) - zb))
    ref = np.clip(np.round(np.maximum(quotient, 0) / so) + zo, 0, 255).astype(np.uint8)
    assert_matches(run_ours(content, [a, b]), [ref])


# -- PRELU, ADD_N, SELECT -------------------------------------------------------------------------------

ALPHA_SHAPES = [(3,), (1, 1, 3), (5, 7, 3), ()]


@pytest.mark.parametrize("alpha_shape", ALPHA_SHAPES)
def test_prelu_float(alpha_shape):
    rng = np.random.default_rng(7)
    shape = (2, 5, 7, 3)
    x = rng.standard_normal(shape).astype(np.float32)
    alpha = rng.uniform(-0.5, 0.5, alpha_shape).astype(np.float32)
    check(op_model("PRELU", [T(shape), T(alpha_shape, data=alpha)], [T(shape)]), [x])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_prelu_quantized(dtype):
    rng = np.random.default_rng(8)
    lo = int(np.iinfo(dtype).min)
    shape = (1, 5, 7, 13)
    alpha = rand_q(rng, (13,), dtype)
    content = op_model("PRELU", [T(shape, dtype, (0.05, lo + 140)), T((13,), dtype, (0.004, lo + 128), alpha)],
                       [T(shape, dtype, (0.03, lo + 100))])
    check(content, [rand_q(rng, shape, dtype)], reference_kernels=True)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_add_n(dtype):
    rng = np.random.default_rng(9)
    shape = (2, 3, 5)
    xs = [(rng.standard_normal(shape) * 10).astype(dtype) for _ in range(4)]
    check(op_model("ADD_N", [T(shape, dtype)] * 4, [T(shape, dtype)]), xs)


def test_select_v2_broadcasting():
    rng = np.random.default_rng(10)
    for sc, sx, sy in [((2, 1, 5), (1, 3, 5), (5,)), ((), (2, 3), (2, 3)), ((2, 3, 1), (2, 3, 7), (1, 1, 7))]:
        c = rng.integers(0, 2, sc).astype(bool)
        x, y = rng.standard_normal(sx).astype(np.float32), rng.standard_normal(sy).astype(np.float32)
        out = np.broadcast_shapes(sc, sx, sy)
        check(op_model("SELECT_V2", [T(sc, np.bool_), T(sx), T(sy)], [T(out)]), [c, x, y])


def test_select_rows_and_int8():
    rng = np.random.default_rng(11)
    shape = (4, 3, 5)
    for sc in [(4,), shape]:
        c = rng.integers(0, 2, sc).astype(bool)
        x, y = rand_q(rng, shape, np.int8), rand_q(rng, shape, np.int8)
        q = (0.1, 3)
        check(op_model("SELECT", [T(sc, np.bool_), T(shape, np.int8, q), T(shape, np.int8, q)],
                       [T(shape, np.int8, q)]), [c, x, y])


# -- errors -----------------------------------------------------------------------------------------------

def test_bad_broadcast_names_the_node():
    it = gd.Interpreter(model_content=op_model("ADD", [T((2, 3)), T((4,))], [T((2, 3))]))
    with pytest.raises(gd.ModelError, match=r"node 0 \(ADD\).*do not broadcast"):
        it.allocate_tensors()


def test_omitted_input_rejected():
    mb = ModelBuilder()
    x = mb.input("x", [2])
    y = mb.tensor("y", [2])
    mb.op("ADD", [x, -1], [y])
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"node 0 \(ADD\): input 1 is omitted"):
        gd.Interpreter(model_content=mb.build())


def test_mixed_types_rejected():
    with pytest.raises(gd.ModelError, match=r"node 0 \(MUL\).*same type"):
        gd.Interpreter(model_content=op_model("MUL", [T((2,)), T((2,), np.int32)], [T((2,))]))


def test_quantized_without_parameters_rejected():
    with pytest.raises(gd.ModelError, match=r"node 0 \(ADD\).*same type"):
        gd.Interpreter(model_content=op_model("ADD", [T((2,), np.int8, (0.1, 0)), T((2,), np.int8)],
                                              [T((2,), np.int8, (0.1, 0))]))
    with pytest.raises(gd.ModelError, match=r"node 0 \(TANH\).*does not support"):
        gd.Interpreter(model_content=op_model("TANH", [T((2,), np.int32)], [T((2,), np.int32)]))
