"""Elementwise ops on the GPU (OpenCL and OpenGL ES) against LiteRT: unary math and activations, binary
arithmetic with every broadcasting shape and fused activations, PRELU, ADD_N, CAST, QUANTIZE/DEQUANTIZE,
fusion of elementwise chains, int8/uint8 models (held as floats with a fake-quant step per op) and fp16
storage. Every test asserts that the nodes ran on the GPU backend under test."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, assert_quant_close, plan_of, run, run_litert, runner_of
from .reference import shared_delegate as delegate


def run_gpu(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False,
            cpu_ops: tuple[str, ...] = ()) -> tuple[gd.Interpreter, list[np.ndarray]]:
    """Run on the GPU delegate; every node but those of ``cpu_ops`` must have run on ``backend``."""
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate(backend, fp16)])
    outs = run(it, inputs)
    for d in it.get_ops_details():
        want = "cpu" if d["op_name"] in cpu_ops else backend
        assert d["backend"] == want, f"node {d['index']} ({d['op_name']}) ran on {d['backend']}, not {want}"
    return it, outs


def check_float(content: bytes, inputs: list[np.ndarray], backend: str, names: list[str], fp16: bool = False):
    ref = run_litert(content, inputs)
    it, outs = run_gpu(content, inputs, backend, fp16)
    for name, o, r in zip(names, outs, ref):
        assert_float_close(o, r, 2e-2 if fp16 else 1e-4, what=f"{name} on {backend}")
    return it



def chain(mb: ModelBuilder, src: int, shape: tuple[int, ...], steps: list[tuple]) -> int:
    """Apply ``steps`` (op, [other operand | None for the running value], attrs) one after the other; the
    framework fuses them all into the kernel of the first."""
    t = src
    for k, (op, operands, attrs) in enumerate(steps):
        out = mb.tensor(f"{mb.tensors[src]['name']}_{op.lower()}{k}_{len(mb.tensors)}", shape)
        mb.op(op, [t if u is None else u for u in operands], [out], **attrs)
        t = out
    return t


# every unary op, in chains that keep each one visible in the result (a clamp or a floor comes before a smooth op,
# not after)
UNARY_CHAINS = [
    [("ABS", [None], {}), ("SQRT", [None], {}), ("LOG", [None], {}), ("NEG", [None], {}), ("EXP", [None], {}),
     ("RSQRT", [None], {})],
    [("TANH", [None], {}), ("COS", [None], {}), ("SQUARE", [None], {})],
    [("ELU", [None], {}), ("GELU", [None], {}), ("LEAKY_RELU", [None], {"alpha": 0.15})],
    [("RELU", [None], {}), ("LOGISTIC", [None], {})],
    [("RELU6", [None], {}), ("SIN", [None], {})],
    [("FLOOR", [None], {}), ("TANH", [None], {})],
    [("SIGN", [None], {}), ("HARD_SWISH", [None], {})],
    [("RELU_N1_TO_1", [None], {}), ("GELU", [None], {"approximate": True}), ("CAST", [None], {})],
]


def chain_names(chains: list[list[tuple]]) -> list[str]:
    return [" -> ".join(op for op, _, _ in c) for c in chains]


def unary_model(shape: tuple[int, ...]) -> tuple[bytes, list[str]]:
    """UNARY_CHAINS on x, and GELU alone on g, over the whole range of its erf."""
    mb = ModelBuilder()
    x = mb.input("x", shape)
    g = mb.input("g", shape)
    outs = [chain(mb, x, shape, c) for c in UNARY_CHAINS] + [chain(mb, g, shape, [("GELU", [None], {})])]
    mb.output(*outs)
    return mb.build(), chain_names(UNARY_CHAINS) + ["GELU (exact)"]


def test_unary(backend):
    shape = (2, 3, 5, 7)
    content, names = unary_model(shape)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.flat[:6] = [0.5, -0.5, 3.0, -3.0, 6.5, -1.0]  # the corners of the piecewise activations
    g = np.concatenate([np.linspace(-14, 14, 207), [-np.sqrt(2), np.sqrt(2), 1e-6]]).astype(np.float32)
    it = check_float(content, [x, g.reshape(shape)], backend, names)
    assert len(plan_of(it).kernels) == len(names)  # each chain fused into one kernel


def test_unary_chains_fused_into_convolutions(backend, caplog):
    """Each unary chain fused into the stores of a 1x1 convolution. OpenCL's wide convolutions apply post-ops to 4
    vec4 at once (postop16: the dialect's helpers in their float16 forms) where every step has that form, as each
    of these does; the erf of GELU spans its whole range (outputs of up to ~20 in magnitude). The convolutions
    build as one program (each kernel's file-scope names renamed apart, codegen.opencl_bundle)."""
    shape = (1, 6, 8, 16)
    rng = np.random.default_rng(4)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    chains = UNARY_CHAINS + [[("GELU", [None], {})]]
    outs = []
    for k, steps in enumerate(chains):
        w = mb.const(f"w{k}", (rng.standard_normal((16, 1, 1, 16)) * 0.5).astype(np.float32))
        bias = mb.const(f"bias{k}", rng.standard_normal(16).astype(np.float32))
        y = mb.tensor(f"conv{k}", shape)
        mb.op("CONV_2D", [x, w, bias], [y], padding="VALID", stride_h=1, stride_w=1)
        outs.append(chain(mb, y, shape, steps))
    mb.output(*outs)
    inputs = [(rng.standard_normal(shape) * 3).astype(np.float32)]
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        it = check_float(mb.build(), inputs, backend, chain_names(chains))
    assert not [r for r in caplog.records if "failed to build as one program" in r.getMessage()]
    runner = runner_of(it)
    assert [c.kernel for c in runner.plan.kernels] == ["conv2d_1x1"] * len(chains)  # each chain fused
    if backend == "cl":
        assert all("v = postop16(v, i BUFS)" in p.source for p in runner.programs)


def binary_model(rng: np.random.Generator) -> tuple[bytes, list[str], list[np.ndarray]]:
    """Binary ops over the broadcasting shapes, batch 2: a scalar constant, a per-channel constant, a full
    tensor and a full constant (batch 1) fuse; a [1, H, W, 1]-like tensor and a constant broadcast over the
    batch take the general broadcasting kernel. Constants come first in some, as the second operand."""
    s5, s13, sm = (2, 3, 4, 5), (1, 2, 3, 13), (2, 3, 4, 1)
    mb = ModelBuilder()
    x, y, m, z, pos = (mb.input(n, s) for n, s in (("x", s5), ("y", s5), ("m", sm), ("z", s13), ("pos", s5)))
    inputs = [rng.standard_normal(s5) * 2, rng.choice([-1, 1], s5) * rng.uniform(0.5, 3, s5),
              rng.standard_normal(sm), rng.standard_normal(s13), rng.uniform(0.1, 3, s5)]

    def const(name, value):
        return mb.const(name, np.asarray(value, np.float32))
    scalar, chan = const("scalar", 1.5), const("chan", rng.standard_normal(5))
    chan13, alpha = const("chan13", rng.uniform(0.1, 0.5, 13)), const("alpha", rng.uniform(0, 0.5, (1, 1, 5)))
    relu6, relu = {"fused_activation_function": "RELU6"}, {"fused_activation_function": "RELU"}
    chains = {
        "ADD/SUB/MUL/DIV/MAXIMUM": (x, s5, [("ADD", [None, scalar], relu6), ("SUB", [chan, None], {}),
                                            ("MUL", [None, y], {}), ("DIV", [None, y], relu),
                                            ("MAXIMUM", [pos, None], {})]),
        "FLOOR_MOD/SQUARED_DIFFERENCE/MINIMUM": (x, s5, [("FLOOR_MOD", [None, y], {}),
                                                         ("SQUARED_DIFFERENCE", [None, pos], {}),
                                                         ("MINIMUM", [None, scalar], {})]),
        "POW odd/PRELU/SUB/DIV": (x, s5, [("POW", [None, const("three", 3.0)], {}), ("PRELU", [None, alpha], {}),
                                          ("SUB", [None, y], {}), ("DIV", [chan, None], {})]),
        "FLOOR_DIV/MUL/POW even": (x, s5, [("FLOOR_DIV", [None, y], {}), ("MUL", [None, pos], {}),
                                           ("POW", [None, const("two", 2.0)], {})]),
        "POW tensor": (pos, s5, [("POW", [None, y], {})]),
        "MAXIMUM/MINIMUM/PRELU": (z, s13, [("MAXIMUM", [None, const("full13", rng.standard_normal((2, 3, 13)))], {}),
                                           ("MINIMUM", [chan13, None], {}), ("PRELU", [None, chan13], {})]),
        "MUL bcast": (x, s5, [("MUL", [None, m], {"fused_activation_function": "RELU_N1_TO_1"})]),
        "SQUARED_DIFFERENCE bcast": (m, s5, [("SQUARED_DIFFERENCE", [None, x], {})]),
        "PRELU bcast": (x, s5, [("PRELU", [None, m], {})]),
        "MAXIMUM bcast const": (x, s5, [("MAXIMUM", [const("full5", rng.standard_normal((3, 4, 5))), None], {})]),
        "ADD_N 2": (x, s5, [("ADD_N", [None, y], {})]),
        "ADD_N 5": (x, s5, [("ADD_N", [None, y, const("batch5", rng.standard_normal(s5)), pos, x], {})]),
    }
    outs = [chain(mb, src, shape, steps) for src, shape, steps in chains.values()]
    mb.output(*outs)
    return mb.build(), list(chains), [v.astype(np.float32) for v in inputs]


def test_binary(backend):
    content, names, inputs = binary_model(np.random.default_rng(2))
    it = check_float(content, inputs, backend, names)
    kernels = [c.kernel for c in plan_of(it).kernels]
    assert kernels.count("copy") == 6 and kernels.count("broadcast_binary") == 4
    assert kernels.count("add_n") == 3  # 2 inputs in one pass, 5 in two


@pytest.mark.parametrize("fp16", [False, True])
def test_fused_chain(backend, fp16):
    """SQUARE -> SUB from a per-channel constant -> RELU -> MUL by a tensor -> LOGISTIC: one kernel, the
    plan says so; then an ADD broadcasting a [B, H, W, 1] tensor, a kernel of its own."""
    shape = (2, 4, 3, 7)
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    w = mb.input("w", shape)
    m = mb.input("m", (2, 4, 3, 1))
    c = mb.const("c", rng.standard_normal(7).astype(np.float32))
    fused = chain(mb, x, shape, [("SQUARE", [None], {}), ("SUB", [c, None], {}), ("RELU", [None], {}),
                                 ("MUL", [w, None], {}), ("LOGISTIC", [None], {})])
    out = chain(mb, fused, shape, [("ADD", [None, m], {})])
    mb.output(out)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in (shape, shape, (2, 4, 3, 1))]
    it = check_float(mb.build(), inputs, backend, ["chain"], fp16=fp16)
    plan = plan_of(it)
    assert [k.kernel for k in plan.kernels] == ["copy", "broadcast_binary"]
    assert sum(note.startswith("fused ") for note in plan.notes) == 4, plan.notes


def test_bool_and_int_ops_run_on_the_gpu(backend):
    """bool and int32 tensors are float lanes on the GPU since issue 16 (more in test_gpu_bool_int.py)."""
    shape = (1, 2, 3, 5)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.input("y", shape)
    less = mb.tensor("less", shape, np.bool_)
    mb.op("LESS", [x, y], [less])
    sel = mb.tensor("sel", shape)
    mb.op("SELECT_V2", [less, x, y], [sel])
    total = mb.tensor("total", shape)
    mb.op("ADD", [sel, x], [total])
    ints = mb.tensor("ints", shape, np.int32)
    mb.op("CAST", [total], [ints])
    mb.output(ints, total)
    content = mb.build()
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(shape).astype(np.float32) * 4 for _ in range(2)]
    ref = run_litert(content, inputs)
    _, outs = run_gpu(content, inputs, backend)
    np.testing.assert_array_equal(outs[0], ref[0])
    assert_float_close(outs[1], ref[1])


def assert_steps(ours: np.ndarray, ref: np.ndarray, scale: float, what: str) -> None:
    """Floats that are dequantized int8 values: >= 99% identical, never more than 2 steps apart."""
    steps = np.abs(ours.astype(np.float64) - ref) / scale
    assert np.mean(steps < 0.5) >= 0.99 and steps.max() < 2.5, f"{what}: up to {steps.max():.2f} steps apart"


def test_int8_and_uint8(backend):
    """Quantized elementwise ops against LiteRT's reference (integer) kernels, alone and fused; QUANTIZE of a
    float input, an int8 -> int8 requantization and DEQUANTIZE of the result; DEQUANTIZE of a constant,
    folded."""
    rng = np.random.default_rng(6)
    shape = (2, 3, 4, 13)
    mb = ModelBuilder()
    f = mb.input("f", shape)
    a = mb.input("a", shape, np.int8, scale=0.05, zero_point=3)
    b = mb.input("b", shape, np.int8, scale=0.04, zero_point=-5)
    u = mb.input("u", shape, np.uint8, scale=0.03, zero_point=128)

    def out(name, op, ins, dtype=np.int8, scale=None, zero_point=None, **attrs):
        kw = {} if scale is None else {"scale": scale, "zero_point": zero_point}
        t = mb.tensor(name, shape, dtype, **kw)
        mb.op(op, ins, [t], **attrs)
        return t
    outs = [out("add", "ADD", [a, b], scale=0.08, zero_point=-2, fused_activation_function="RELU"),
            out("mul", "MUL", [a, b], scale=0.1, zero_point=0),
            out("logistic", "LOGISTIC", [a], scale=1 / 256, zero_point=-128),
            out("tanh", "TANH", [a], scale=1 / 128, zero_point=0),
            out("relu6", "RELU6", [a], scale=0.03, zero_point=-128),
            out("uadd", "ADD", [u, u], np.uint8, scale=0.05, zero_point=120)]
    # fused into one kernel, each step rounded to its own grid
    outs.append(out("sig_of_sum", "LOGISTIC", [out("sum", "ADD", [a, b], scale=0.03, zero_point=5)],
                    scale=1 / 256, zero_point=-128))
    q = out("q", "QUANTIZE", [f], scale=0.03, zero_point=2)
    q2 = out("q2", "QUANTIZE", [q], scale=0.05, zero_point=-7)
    deq = out("deq", "DEQUANTIZE", [q2], np.float32)
    w = mb.const("w", rng.integers(-128, 128, shape[1:]).astype(np.int8), scale=0.02, zero_point=0)
    wf = mb.tensor("wf", shape[1:])
    mb.op("DEQUANTIZE", [w], [wf])
    fsum = out("fsum", "ADD", [f, wf], np.float32)
    mb.output(*outs, deq, fsum)
    content = mb.build()
    inputs = [rng.standard_normal(shape).astype(np.float32) * 2,
              *(rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2)),
              rng.integers(0, 256, shape).astype(np.uint8)]
    ref = run_litert(content, inputs, reference_kernels=True)
    it, got = run_gpu(content, inputs, backend)
    for t, o, r in zip(outs, got, ref):
        assert_quant_close(o, r, what=f"{mb.tensors[t]['name']} on {backend}")
    assert_steps(got[-2], ref[-2], 0.05, f"QUANTIZE, requantize, DEQUANTIZE on {backend}")
    assert_float_close(got[-1], ref[-1], what=f"ADD of a folded DEQUANTIZE on {backend}")
    assert any(note.startswith("folded ") for note in plan_of(it).notes)


def test_folded_dequantize_read_by_the_cpu(backend):
    """A DEQUANTIZE of a constant alone in its partition (its reader stays on the CPU) still delivers it."""
    shape = (1, 3, 4, 7)
    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    c = mb.const("c", rng.standard_normal(shape).astype(np.float16))
    d = mb.tensor("d", shape)
    mb.op("DEQUANTIZE", [c], [d])
    y = mb.tensor("y", shape)
    mb.op("ATAN2", [x, d], [y])  # no GPU kernel
    mb.output(y)
    content = mb.build()
    inputs = [rng.standard_normal(shape).astype(np.float32)]
    _, outs = run_gpu(content, inputs, backend, cpu_ops=("ATAN2",))
    assert_float_close(outs[0], run_litert(content, inputs)[0], 1e-6)


def test_densify_and_dequantize_of_constants_are_folded(backend):
    """A sparse fp16 constant (1x4 blocks) through DENSIFY and DEQUANTIZE, added to the input: both folded
    at preparation, the ADD on the GPU reading the dense constant."""
    from .test_ops_quantize import _densify_model, to_sparse

    rng = np.random.default_rng(8)
    dense = (rng.standard_normal((4, 8)) * 5).astype(np.float16)
    dense[rng.random((4, 8)) < 0.6] = 0
    values, sparsity = to_sparse(dense, [0, 1, 2], [0, 1, 0], (1,), (4,))
    content = _densify_model(values, sparsity, (4, 8), np.float16, dequantize=True)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    it, (y,) = run_gpu(content, [x], backend)
    np.testing.assert_array_equal(y, x + dense.astype(np.float32))
    assert sum(note.startswith("folded ") for note in plan_of(it).notes) == 2


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantized_unary_ops_are_bit_exact(backend, dtype):
    """Every 8-bit unary op LiteRT has a kernel for, on every input code, alone and fused after an ADD, equals
    LiteRT's reference (integer) kernels code for code: the GPU looks the output code up in the op's table, as
    TFLite's kernels do (HARD_SWISH in float is a step off on ~1% of codes, LOGISTIC and TANH similar)."""
    from .test_ops_elementwise import UNARY_Q_CASES

    lo = int(np.iinfo(dtype).min)
    zp_in, shape = lo + 133, (2, 4, 4, 8)
    cases = [(op, attrs, kind) for op, attrs, kind, d in UNARY_Q_CASES if d == dtype]
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype, scale=0.045, zero_point=zp_in)
    positive = mb.input("positive", shape, dtype, scale=0.045, zero_point=zp_in)  # SQRT, RSQRT refuse x < 0
    outs = []
    for k, (op, attrs, kind) in enumerate(cases):
        qo = {"sigmoid": (1 / 256, lo), "tanh": (1 / 128, lo + 128)}.get(kind, (0.037, lo + 120))
        src = positive if op in ("SQRT", "RSQRT") else x
        doubled = mb.tensor(f"doubled{k}", shape, dtype, scale=0.09, zero_point=zp_in)  # the same codes as src
        mb.op("ADD", [src, src], [doubled])
        for name, inp in ((f"{op}{k}", src), (f"{op}{k}_fused", doubled)):
            y = mb.tensor(name, shape, dtype, scale=qo[0], zero_point=qo[1])
            mb.op(op, [inp], [y], **attrs)
            outs.append(y)
    mb.output(*outs)
    content = mb.build()
    every = np.arange(lo, lo + 256).astype(dtype).reshape(shape)
    inputs = [every, np.maximum(every, np.asarray(zp_in).astype(dtype))]
    ref = run_litert(content, inputs, reference_kernels=True)
    it, got = run_gpu(content, inputs, backend)
    for t, o, r in zip(outs, got, ref):
        np.testing.assert_array_equal(o, r, err_msg=f"{mb.tensors[t]['name']} on {backend}")
    luts = [p for call in plan_of(it).kernels for p in call.postops if p.kind == "lut"]
    assert len(luts) == len(outs)  # looked up, fused or not


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantized_swish_is_one_lookup_on_every_code(backend, dtype):
    """An 8-bit swish, MUL(x, LOGISTIC(x)), alone and with a fused RELU, on every code of x: one lookup of x's code
    in the kernel that computes x (a table of the float32 steps it replaces), code for code LiteRT's default
    kernels, as the unfused steps are."""
    lo = int(np.iinfo(dtype).min)
    shape = (2, 4, 4, 8)
    mb = ModelBuilder()
    src = mb.input("src", shape, dtype, scale=0.03, zero_point=lo + 130)
    outs = []
    for k, (act, yq) in enumerate([("NONE", (0.029, lo + 20)), ("RELU", (0.041, lo + 3))]):
        x = mb.tensor(f"x{k}", shape, dtype, scale=0.06, zero_point=lo + 130)  # src + src: src's codes
        mb.op("ADD", [src, src], [x])
        fx = mb.tensor(f"sigmoid{k}", shape, dtype, scale=1 / 256, zero_point=lo)
        y = mb.tensor(f"swish{k}", shape, dtype, scale=yq[0], zero_point=yq[1])
        mb.op("LOGISTIC", [x], [fx])
        mb.op("MUL", [x, fx], [y], fused_activation_function=act)
        outs.append(y)
    mb.output(*outs)
    content = mb.build()
    inputs = [np.arange(lo, lo + 256).astype(dtype).reshape(shape)]
    ref = run_litert(content, inputs)
    it, got = run_gpu(content, inputs, backend)
    for o, r, name in zip(got, ref, ("swish", "swish + relu")):
        np.testing.assert_array_equal(o, r, err_msg=f"{name} on {backend}")
    kinds = [[p.kind for p in k.postops] for k in plan_of(it).kernels]
    assert kinds == [["expr", "lut"]] * 2 or kinds == [["lut"]] * 2, kinds


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantized_rescaling_chain_is_one_lookup(backend, dtype):
    """keras' Rescaling in an 8-bit model, x * a + b with scalar constants after a QUANTIZE of a float input: the
    chain of fake-quant steps after the first is one lookup of the first step's code (a table of the float32 steps
    it replaces), on every code equal to LiteRT's default kernels, as those steps are."""
    lo = int(np.iinfo(dtype).min)
    shape = (2, 4, 4, 8)
    mb = ModelBuilder()
    src = mb.input("src", shape, np.float32)
    q = mb.tensor("q", shape, dtype, scale=0.05, zero_point=lo + 128)
    mb.op("QUANTIZE", [src], [q])
    a = mb.const("a", np.array([lo + 225], dtype), scale=0.004, zero_point=lo + 128)
    b = mb.const("b", np.array([lo + 10], dtype), scale=0.02, zero_point=lo + 128)
    scaled = mb.tensor("scaled", shape, dtype, scale=0.021, zero_point=lo + 120)
    y = mb.tensor("y", shape, dtype, scale=0.027, zero_point=lo + 140)
    mb.op("MUL", [q, a], [scaled])
    mb.op("ADD", [scaled, b], [y], fused_activation_function="RELU6")
    mb.output(y)
    content = mb.build()
    inputs = [((np.arange(256) - 128) * 0.05).astype(np.float32).reshape(shape)]  # every code of q
    ref = run_litert(content, inputs)
    it, got = run_gpu(content, inputs, backend)
    np.testing.assert_array_equal(got[0], ref[0], err_msg=f"x * a + b on {backend}")
    kinds = [[p.kind for p in k.postops] for k in plan_of(it).kernels]
    assert kinds == [["expr", "lut"]], kinds


@pytest.mark.parametrize("quantized", [False, True])
def test_swish_runs_in_the_kernel_of_its_input(backend, quantized):
    """swish as the converter writes it, MUL(x, LOGISTIC(x)) (also SUB(tanh(x), x), operands swapped), after an ADD
    that computes x: the three nodes are one kernel and x is never stored. In float x is kept in the ADD's kernel
    for the node that reads it and the unary op's result; in int8 the pair is a function of x's code alone, one
    lookup of a table made by both nodes' integer kernels: code for code LiteRT's reference kernels (the float
    SUB of two grids was a step off TFLite's fixed-point one on ~2% of values)."""
    rng = np.random.default_rng(8)
    shape = (1, 5, 6, 11)
    mb = ModelBuilder()
    q = {"dtype": np.int8, "scale": 0.05, "zero_point": -3} if quantized else {}

    def tensor(name: str, scale: float = 0.05, zero_point: int = -3, dtype=np.int8) -> int:
        return mb.tensor(name, shape, **({"dtype": dtype, "scale": scale, "zero_point": zero_point} if quantized
                                         else {}))
    a, b = mb.input("a", shape, **q), mb.input("b", shape, **q)
    outs = []
    for k, (unary, binary, swap, uq) in enumerate([("LOGISTIC", "MUL", False, (1 / 256, -128)),
                                                   ("TANH", "SUB", True, (1 / 128, 0))]):
        # x on the inputs' grid: the ADD is exact in float, so x's codes are TFLite's and what follows is checked
        x, fx, y = tensor(f"x{k}", 0.05, -3), tensor(f"f{k}", *uq), tensor(f"y{k}", 0.04, -1)
        mb.op("ADD", [a, b], [x])
        mb.op(unary, [x], [fx])
        mb.op(binary, [fx, x] if swap else [x, fx], [y])
        outs.append(y)
    mb.output(*outs)
    content = mb.build()
    if quantized:
        inputs = [rng.integers(-64, 64, shape).astype(np.int8) for _ in range(2)]  # sums within x's range
        ref = run_litert(content, inputs, reference_kernels=True)
        it, got = run_gpu(content, inputs, backend)
        for o, r, name in zip(got, ref, ("swish", "tanh - x")):
            np.testing.assert_array_equal(o, r, err_msg=f"{name} on {backend}")
    else:
        inputs = [rng.standard_normal(shape).astype(np.float32) * 3 for _ in range(2)]
        it = check_float(content, inputs, backend, ["swish", "tanh - x"])
    plan = plan_of(it)
    assert [k.kernel for k in plan.kernels] == ["broadcast_binary"] * 2 or \
        [k.kernel for k in plan.kernels] == ["copy"] * 2, [k.kernel for k in plan.kernels]
    if quantized:
        assert sum("looked up in the kernel of" in note for note in plan.notes) == 2, plan.notes
        kinds = [[p.kind for p in k.postops] for k in plan.kernels]
        assert all(steps[-1] == "lut" and "keep" not in steps for steps in kinds), kinds
    else:
        assert sum("keeping tensor" in note for note in plan.notes) == 2, plan.notes


def test_fp16_constants_beyond_its_range_saturate(backend):
    """An attention mask's -1e9 in fp16 storage: saturated to -65504, not -inf, so that 0 * mask is 0 and the masked
    softmax has no NaN (the text transformer of bench/converter_models.py gave NaN on cl and gl in fp16)."""
    shape = (1, 2, 3, 8)
    mb = ModelBuilder()
    masked, scores = mb.input("masked", shape), mb.input("scores", shape)
    fill = mb.const("fill", np.array([-1e9, -1e9, 0, 0, -7e4, 3, -1e9, -1e9], np.float32))
    drop, biased, y = mb.tensor("drop", shape), mb.tensor("biased", shape), mb.tensor("y", shape)
    mb.op("MUL", [masked, fill], [drop])
    mb.op("ADD", [scores, drop], [biased])
    mb.op("SOFTMAX", [biased], [y], beta=1.0)
    mb.output(y)
    rng = np.random.default_rng(5)
    inputs = [rng.integers(0, 2, shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)]
    inputs[0][0, 0, 0] = 1.0  # a row masked whole: uniform in both
    inputs[0][0, 0, 1] = 0.0
    (ref,) = run_litert(mb.build(), inputs)
    it = gd.Interpreter(model_content=mb.build(), experimental_delegates=[delegate(backend, True)])
    (ours,) = run(it, inputs)
    assert {d["backend"] for d in it.get_ops_details()} == {backend}
    assert_float_close(ours, ref, 3e-3)
