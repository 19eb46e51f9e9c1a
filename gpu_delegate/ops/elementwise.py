"""Elementwise ops: unary math and activations, CAST, binary arithmetic with numpy broadcasting,
comparisons and logic, PRELU, ADD_N, SELECT and SELECT_V2.

Float tensors compute in their own dtype. 8-bit quantized tensors follow TFLite's integer kernels: ADD, SUB,
MUL, SQUARED_DIFFERENCE, PRELU and the comparisons in fixed point; every unary op through a 256-entry table
holding, for each input code, what TFLite's kernel gives (its float lookup table, or its fixed-point formula
for the RELUs, LEAKY_RELU and HARD_SWISH). What remains (16-bit tensors, DIV, POW, ...) is dequantized,
computed in float and requantized.

On the GPU every op here that maps floats to floats is a dialect expression (``gpu_expr``, kernels/README.md)
over FLT4 ``a`` and ``b``, which the lowering fuses into the kernel producing the input or runs standalone
(lowering/fuse_elementwise.py). Quantized tensors are held there as their dequantized floats, and the
framework rounds every quantized output to its grid, so the same expression serves both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..backends.codegen import literal
from ..cpu.conv import float_range
from ..cpu.elementwise import (
    abs_lut,
    add_sub_q8,
    apply_lut,
    codes,
    compare_scaled_q8,
    elu,
    f32,
    float_lut,
    fused_clamp,
    gelu,
    hard_swish,
    hard_swish_lut,
    logistic,
    mul_q8,
    rescale,
    round_half_away,
    rsqrt_lut,
    sqrt_lut,
    squared_difference_q8,
    truncate_divide,
)
from ..cpu.quant import activation_range, dequantize, dtype_range, quantize, quantize_multiplier
from ..dtypes import GPU_HELD_AS_FLOAT, GPU_INT_OFFSET, STRING
from ..errors import ModelError
from ..graph import ACT_NONE, ACT_RELU6, Graph, Node, Tensor
from ..lowering.context import LowerContext
from ..lowering.plan import CodeTable
from ..phwc4 import slices
from .base import CpuStep, Op, broadcast_shape, lower_elementwise, register
from .checks import all_required, arity, check_type, is_quantized, per_tensor, quant_of, required, type_kinds

if TYPE_CHECKING:
    from ..loop_program import LoopAssembler

Shapes = list[tuple[int, ...] | None]
_ACT = "fused_activation_function"


# The signatures of _Unary.compute and _Binary.compute, for the helpers that make them (a Callable type cannot
# name the parameters, and an override must keep their names).
class _UnaryCompute(Protocol):
    def __call__(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray: ...


class _BinaryCompute(Protocol):
    def __call__(self, node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray: ...


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> _UnaryCompute:
    """A unary op's ``compute`` that is ``fn`` of the input (no attribute matters)."""
    def compute(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        return fn(x)
    return compute


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> _BinaryCompute:
    """A binary op's ``compute`` that is ``fn`` of the two operands."""
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a, b)
    return compute


def _same_type(node: Node, a: Tensor, b: Tensor) -> None:
    if a.dtype != b.dtype or is_quantized(a) != is_quantized(b):
        def kind(t: Tensor) -> str:
            return f"{t.type_name or t.dtype}{' (quantized)' if is_quantized(t) else ''}"
        raise ModelError(f"{node}: tensors {a.index} ({a.name!r}) and {b.index} ({b.name!r}) must have the "
                         f"same type, are {kind(a)} and {kind(b)}")


def _plain(*tensors: Tensor) -> bool:
    """Whether every tensor is a plain float, integer or bool one (not quantized, not a string)."""
    return all(t.dtype.kind in "fiub" and not is_quantized(t) for t in tensors)


def _own_run_cpu(cls: type, base: type) -> bool:
    """Whether ``cls`` or a class between it and ``base`` defines its own run_cpu."""
    return any("run_cpu" in vars(k) for k in cls.__mro__[:cls.__mro__.index(base)])


def _int_zero_check(node: Node, b: np.ndarray) -> None:
    if b.dtype.kind in "iu" and np.any(b == 0):
        raise ModelError(f"{node}: integer division by zero")


# -- GPU forms ------------------------------------------------------------------------------------------

def _f(x: float) -> str:
    """A float constant in the kernel dialect, as an FLT4."""
    return f"SPLAT({literal(float(x))})"


def _horner(coeffs: tuple[float, ...], x: str) -> str:
    """The polynomial with ``coeffs`` (highest power first) at FLT4 expression ``x``, as dialect text."""
    text = _f(coeffs[0])
    for c in coeffs[1:]:
        text = f"({text} * {x} + {_f(c)})"
    return text


# erf in float32 (GLSL has no erf): z * P(z^2) / Q(z^2) on z clamped to [-4, 4] (erf(4) is 1 in float32), the
# rational approximation of Eigen's and XLA's float erf; within 4.2e-7 of erf (measured in float32 arithmetic).
# GELU's 1 + erf(z) then cancels for z < -2, as LiteRT's own `0.5 x (1 + erf(x / sqrt 2))` does: the absolute
# error stays below 1.2e-6. An erfc tail with exp() kept the relative precision there at 2.5x the cost (PoCL:
# 18.3 vs 7.2 ns a vec4; the text transformer's two FFN convolutions with GELU 440 -> 150 us each).
_ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                  -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                    -1.42647390514189e-02)


def _erf(z: str) -> str:
    """erf of the FLT4 expression ``z`` (a variable name or a parenthesised expression), as dialect text."""
    x = f"clamp({z}, -4.0f, 4.0f)"
    x2 = f"({x} * {x})"
    return f"({x} * {_horner(_ERF_NUMERATOR, x2)} / {_horner(_ERF_DENOMINATOR, x2)})"


def _pow_expr() -> str:
    """C pow on FLT4 a, b: GLSL's pow is undefined for a < 0 (and for 0^0), so take |a| and give the sign
    (or NaN) that C gives: a negative base needs an integer exponent, whose parity sets the sign."""
    p = "pow(FABS(a), b)"
    parity = f"({_f(1)} - {_f(2)} * FABS(b - {_f(2)} * floor(b * {_f(0.5)})))"  # 1 even, -1 odd
    negative = f"SELECT4(SPLAT(NAN_F), {p} * {parity}, EQ4(floor(b), b))"
    return f"SELECT4(SELECT4({p}, {negative}, LT4(a, {_f(0)})), {_f(1)}, EQ4(b, {_f(0)}))"


def _not_all_const(node: Node, graph: Graph) -> bool | str:
    if all(graph.tensors[t].is_const for t in node.inputs):
        return "every input is a constant"
    return True


# -- unary ----------------------------------------------------------------------------------------------

class _Unary(Op):
    ints: ClassVar[bool] = False  # also computes plain (non-quantized) integer tensors
    gpu_rank5 = True  # an elementwise lowering reads only BHWC shapes
    expr: ClassVar[str] = ""  # the GPU form: a dialect expression over FLT4 a

    @classmethod
    def type_summary(cls) -> str:
        return cls.types or type_kinds(ints=cls.ints)

    @classmethod
    def gpu_expr(cls, node: Node, graph: Graph) -> str | None:
        return cls.expr

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @classmethod
    def gpu_table(cls, node: Node, graph: Graph) -> CodeTable | None:
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if not (is_quantized(tx) and is_quantized(ty) and tx.dtype.itemsize == 1 and ty.dtype.itemsize == 1):
            return None
        qi, qo = quant_of(node, tx).scalar(), quant_of(node, ty).scalar()
        table = graph.prepared(("elementwise.lut", node.index), lambda: cls.table(node, qi, qo, tx.dtype))
        values = (np.asarray(table, np.int64) - qo[1]).astype(np.float32) * f32(qo[0])
        return CodeTable(values, float(qi[0]), int(qi[1]), dtype_range(tx.dtype)[0])

    lower = staticmethod(lower_elementwise)

    @staticmethod
    def compute(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        _same_type(node, x, y)
        check_type(node, x, ints=cls.ints)
        check_type(node, y, ints=cls.ints)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if is_quantized(tx):
            qi, qo = quant_of(node, tx).scalar(), quant_of(node, ty).scalar()
            if x.dtype.itemsize == 1:
                table = graph.prepared(("elementwise.lut", node.index), lambda: cls.table(node, qi, qo, x.dtype))
                return [apply_lut(table, x, ty.dtype)]
            with np.errstate(all="ignore"):
                return [quantize(cls.compute(dequantize(x, *qi), node.attrs), *qo, ty.dtype)]
        with np.errstate(all="ignore"):  # log(0), sqrt(-1): inf and nan, as TFLite gives them
            return [cls.compute(x, node.attrs)]

    @classmethod
    def cpu_step(cls, node: Node, graph: Graph) -> CpuStep | None:
        if not cls._plain_node(node, graph):
            return None
        compute, attrs, x, y = cls.compute, node.attrs, node.inputs[0], node.outputs[0]
        dtype = graph.tensors[y].dtype

        def step(values: list[np.ndarray | None]) -> None:
            values[y] = np.asarray(compute(values[x], attrs), dtype)  # type: ignore[arg-type]
        return step

    @classmethod
    def loop_code(cls, node: Node, graph: Graph, asm: LoopAssembler) -> None:
        if not cls._plain_node(node, graph):
            raise asm.declined(f"{node}: {node.op} of other than plain tensors")
        asm.elementwise(node.op, [node.inputs[0]], node.outputs[0])

    @classmethod
    def _plain_node(cls, node: Node, graph: Graph) -> bool:
        """Plain tensors (not quantized, not strings) where no subclass runs its own run_cpu: what cpu_step and
        loop_code take (the executor ignores floating-point errors)."""
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        return len(node.inputs) == 1 and _plain(tx, ty) and not _own_run_cpu(cls, _Unary)

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        """The output code for every input code of an 8-bit tensor."""
        return float_lut(lambda v: cls.compute(v, node.attrs), qi, qo, dtype)


@register
class Abs(_Unary):
    name, ints = "ABS", True
    expr = "FABS(a)"
    compute = staticmethod(_unary(np.abs))

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        return abs_lut(qi, qo, dtype)


@register
class Cos(_Unary):
    name = "COS"
    expr = "cos(a)"
    compute = staticmethod(_unary(np.cos))


@register
class Exp(_Unary):
    name = "EXP"
    expr = "exp(a)"
    compute = staticmethod(_unary(np.exp))


@register
class Floor(_Unary):
    name = "FLOOR"
    expr = "floor(a)"
    compute = staticmethod(_unary(np.floor))


@register
class Log(_Unary):
    name = "LOG"
    expr = "log(a)"
    compute = staticmethod(_unary(np.log))


@register
class Neg(_Unary):
    """TFLite negates 8-bit codes as plain integers, ignoring their quantization; so do we (on the GPU too: its
    table, ``gpu_table``)."""

    name, ints = "NEG", True
    expr = "-a"
    compute = staticmethod(_unary(np.negative))

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if is_quantized(x) and x.dtype.itemsize > 1:
            (sx, zx), (sy, zy) = quant_of(node, x).scalar(), quant_of(node, y).scalar()
            if sx != sy or zx + zy != 0:
                return ("quantized NEG negates the codes, which is a negation of the values only when the "
                        "output's scale is the input's and its zero point the input's negated")
        return True

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        return (-codes(dtype)).astype(dtype).astype(np.int64)  # wraps, as C's int8 negation does


@register
class Rsqrt(_Unary):
    name = "RSQRT"
    expr = "SPLAT(1.0f) / sqrt(a)"

    @staticmethod
    def compute(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        return 1 / np.sqrt(x)

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        if dtype == np.int8:  # TFLite's integer kernel; it has none for uint8, where the float table serves
            return rsqrt_lut(qi, qo, dtype)
        return super().table(node, qi, qo, dtype)


@register
class Sin(_Unary):
    name = "SIN"
    expr = "sin(a)"
    compute = staticmethod(_unary(np.sin))


@register
class Sqrt(_Unary):
    name = "SQRT"
    expr = "sqrt(a)"
    compute = staticmethod(_unary(np.sqrt))

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        return sqrt_lut(qi, qo, dtype)


@register
class Square(_Unary):
    name, ints = "SQUARE", True
    expr = "a * a"

    @staticmethod
    def compute(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        return x * x


@register
class Tanh(_Unary):
    name = "TANH"
    expr = "tanh(a)"
    compute = staticmethod(_unary(np.tanh))


@register
class Logistic(_Unary):
    name = "LOGISTIC"
    expr = "SPLAT(1.0f) / (SPLAT(1.0f) + exp(-a))"
    compute = staticmethod(_unary(logistic))


@register
class Elu(_Unary):
    name = "ELU"
    expr = "SELECT4(a, exp(min(a, 0.0f)) - SPLAT(1.0f), LT4(a, SPLAT(0.0f)))"
    compute = staticmethod(_unary(elu))


@register
class Gelu(_Unary):
    name = "GELU"

    @staticmethod
    def compute(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        return gelu(x, bool(attrs.get("approximate", False)))

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        if node.attrs.get("approximate", False):
            inner = f"{_f(math.sqrt(2 / math.pi))} * (a + {_f(0.044715)} * a * a * a)"
            return f"{_f(0.5)} * a * ({_f(1)} + tanh({inner}))"
        return f"{_f(0.5)} * a * ({_f(1)} + {_erf(f'(a * {_f(math.sqrt(0.5))})')})"


@register
class HardSwish(_Unary):
    name = "HARD_SWISH"
    expr = "a * clamp(a + SPLAT(3.0f), 0.0f, 6.0f) / SPLAT(6.0f)"
    compute = staticmethod(_unary(hard_swish))

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        return hard_swish_lut(qi, qo, dtype)


@register
class Sign(_Unary):
    name, ints = "SIGN", True
    expr = "sign(a)"
    compute = staticmethod(_unary(np.sign))


class _ReluX(_Unary):
    low: ClassVar[float] = 0.0
    high: ClassVar[float] = math.inf

    @classmethod
    def gpu_expr(cls, node: Node, graph: Graph) -> str | None:
        if cls.high == math.inf:
            return f"max(a, {literal(cls.low)})"
        return f"clamp(a, {literal(cls.low)}, {literal(cls.high)})"

    @classmethod
    def compute(cls, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        return np.clip(x, cls.low, cls.high).astype(x.dtype)

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        # TFLite's QuantizedReluX: rescale by s_in/s_out in fixed point, clamp at the quantized bounds
        lo, hi = dtype_range(dtype)
        act_lo = max(lo, qo[1] + int(round_half_away(f32(cls.low) / f32(qo[0]))))
        act_hi = hi if cls.high == math.inf else min(hi, qo[1] + int(round_half_away(f32(cls.high) / f32(qo[0]))))
        m, s = quantize_multiplier(float(f32(qi[0]) / f32(qo[0])))
        return rescale(codes(dtype) - qi[1], m, s, qo[1], act_lo, act_hi)


@register
class Relu(_ReluX):
    name = "RELU"


@register
class Relu6(_ReluX):
    name, high = "RELU6", 6.0


@register
class ReluN1To1(_ReluX):
    name, low, high = "RELU_N1_TO_1", -1.0, 1.0


@register
class LeakyRelu(_Unary):
    name = "LEAKY_RELU"

    @staticmethod
    def compute(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        alpha = np.asarray(attrs.get("alpha", 0.2), x.dtype)
        return np.where(x > 0, x, x * alpha).astype(x.dtype)

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        return f"SELECT4(a * {_f(node.attrs.get('alpha', 0.2))}, a, GT4(a, SPLAT(0.0f)))"

    @classmethod
    def table(cls, node: Node, qi: tuple[float, int], qo: tuple[float, int], dtype: np.dtype) -> np.ndarray:
        # TFLite's QuantizeLeakyRelu: one fixed-point multiplier per side of zero (computed in float)
        lo, hi = dtype_range(dtype)
        alpha = f32(node.attrs.get("alpha", 0.2))
        m_id, s_id = quantize_multiplier(float(f32(qi[0]) / f32(qo[0])))
        m_a, s_a = quantize_multiplier(float(f32(qi[0]) * alpha / f32(qo[0])))
        v = codes(dtype) - qi[1]
        return np.where(v >= 0, rescale(v, m_id, s_id, qo[1], lo, hi), rescale(v, m_a, s_a, qo[1], lo, hi))


@register
class LogicalNot(Op):
    name = "LOGICAL_NOT"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        for t in (node.inputs[0], node.outputs[0]):
            check_type(node, graph.tensors[t], bools=True, floats=False, quantized=False)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return [np.logical_not(required(node, inputs, 0))]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        asm.elementwise(node.op, [node.inputs[0]], node.outputs[0])

    gpu_ints = True
    gpu_support = staticmethod(_not_all_const)

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        return "SPLAT(1.0f) - a"

    lower = staticmethod(lower_elementwise)


@register
class Cast(Op):
    """Any numpy-castable pair; float -> integer truncates toward zero, x -> bool is x != 0."""

    name = "CAST"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        for t in (node.inputs[0], node.outputs[0]):
            check_type(node, graph.tensors[t], ints=True, bools=True)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        out = graph.tensors[node.outputs[0]].dtype
        if out == np.bool_:
            return [x != 0]
        if x.dtype.kind == "c" and out.kind != "c":
            x = x.real
        with np.errstate(invalid="ignore"):
            return [x.astype(out)]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        asm.elementwise("CAST", [node.inputs[0]], node.outputs[0])

    gpu_ints = True

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        for t in (x, y):
            if not (t.dtype.kind == "f" or t.dtype in GPU_HELD_AS_FLOAT) or is_quantized(t):
                return (f"CAST from {x.type_name or x.dtype} to {y.type_name or y.dtype}: the GPU casts between "
                        "float, int32 and bool")
        return _not_all_const(node, graph)

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if y.dtype == np.bool_:
            return "NE4(a, SPLAT(0.0f))"
        if y.dtype == np.int32 and x.dtype.kind == "f":
            return "trunc(a)"  # C's float -> int conversion (values out of int32's range are undefined there too)
        return "a"

    lower = staticmethod(lower_elementwise)


# -- binary ---------------------------------------------------------------------------------------------

class _Binary(Op):
    gpu_rank5 = True  # numpy broadcasting aligns shapes on the right: dropping leading 1s keeps its meaning
    ints: ClassVar[bool] = True  # plain integer tensors allowed
    quantized: ClassVar[bool] = True
    floats: ClassVar[bool] = True
    bools: ClassVar[bool] = False
    to_bool: ClassVar[bool] = False  # comparisons: the output is bool
    fused: ClassVar[bool] = False  # has fused_activation_function
    expr: ClassVar[str] = ""  # the GPU form over FLT4 a, b ("": none)
    gpu_quantized: ClassVar[bool] = True  # the GPU form also serves 8-bit quantized tensors

    @classmethod
    def type_summary(cls) -> str:
        kinds = type_kinds(ints=cls.ints, quantized=cls.quantized, floats=cls.floats, bools=cls.bools)
        return ", ".join([cls.types or kinds] + (["string"] if cls.strings else []))

    @classmethod
    def gpu_expr(cls, node: Node, graph: Graph) -> str | None:
        return cls.expr or None

    @classmethod
    def gpu_support(cls, node: Node, graph: Graph) -> bool | str:
        if not cls.expr:
            return f"{node.op} works on bool tensors (or makes one), which the GPU path does not hold"
        if not cls.gpu_quantized and is_quantized(graph.tensors[node.inputs[0]]):
            return f"{node.op} runs on the GPU for float tensors only"
        act = node.attrs.get(_ACT, ACT_NONE) if cls.fused else ACT_NONE
        if not ACT_NONE <= act <= ACT_RELU6:
            return f"fused activation {act} (TANH or SIGN_BIT), which TFLite's kernels do not apply to {node.op}"
        return _not_all_const(node, graph)

    lower = staticmethod(lower_elementwise)

    @staticmethod
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        a, b, y = (graph.tensors[t] for t in (*node.inputs, node.outputs[0]))
        _same_type(node, a, b)
        kinds = {"ints": cls.ints, "quantized": cls.quantized, "floats": cls.floats, "bools": cls.bools}
        if not (cls.strings and a.dtype == STRING):
            check_type(node, a, **kinds)
        if cls.to_bool:
            if y.dtype != np.bool_:
                raise ModelError(f"{node}: output must be bool, is {y.type_name or y.dtype}")
        else:
            _same_type(node, a, y)
            check_type(node, y, **kinds)
        act = node.attrs.get(_ACT, 0) if cls.fused else 0
        if not 0 <= act <= 5:
            raise ModelError(f"{node}: unknown fused activation {act}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [broadcast_shape(required(node, shapes, 0), required(node, shapes, 1), node)]

    @classmethod
    def run_cpu(cls, node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        a, b = all_required(node, inputs)
        ta, tb, ty = (graph.tensors[t] for t in (*node.inputs, node.outputs[0]))
        if is_quantized(ta):
            return [cls.run_quantized(node, a, b, quant_of(node, ta).scalar(), quant_of(node, tb).scalar(), ty)]
        with np.errstate(all="ignore"):
            y = cls.compute(node, a, b)
        if cls.fused:
            y = fused_clamp(y, node.attrs.get(_ACT, 0))
        return [y]

    @classmethod
    def cpu_step(cls, node: Node, graph: Graph) -> CpuStep | None:
        # plain tensors, where no subclass runs its own run_cpu (the executor ignores floating-point errors)
        tensors = [graph.tensors[t] for t in (*node.inputs, *node.outputs) if t >= 0]
        if len(node.inputs) != 2 or -1 in node.inputs or not _plain(*tensors) or \
                _own_run_cpu(cls, _Binary):
            return None
        compute, (a, b), y, dtype = cls.compute, node.inputs, node.outputs[0], tensors[-1].dtype
        act = int(node.attrs.get(_ACT, 0)) if cls.fused else 0

        def step(values: list[np.ndarray | None]) -> None:
            v = compute(node, values[a], values[b])  # type: ignore[arg-type]
            values[y] = np.asarray(fused_clamp(v, act) if act else v, dtype)
        return step

    @classmethod
    def loop_code(cls, node: Node, graph: Graph, asm: LoopAssembler) -> None:
        # (an op's own run_cpu is about integers or quantized tensors: of float32 ones it is the plain formula)
        tensors = [graph.tensors[t] for t in (*node.inputs, *node.outputs) if t >= 0]
        if len(node.inputs) != 2 or -1 in node.inputs or not _plain(*tensors) or \
                (_own_run_cpu(cls, _Binary) and any(t.dtype != np.float32 for t in tensors)):
            raise asm.declined(f"{node}: {node.op} of other than plain tensors")
        lo, hi = float_range(int(node.attrs.get(_ACT, 0)) if cls.fused else 0)
        asm.elementwise(node.op, list(node.inputs), node.outputs[0], float(lo), float(hi))

    @classmethod
    def run_quantized(cls, node: Node, a: np.ndarray, b: np.ndarray, qa: tuple[float, int],
                      qb: tuple[float, int], ty: Tensor) -> np.ndarray:
        """Dequantize, compute in float, requantize (clamped to the fused activation's range)."""
        with np.errstate(all="ignore"):
            y = cls.compute(node, dequantize(a, *qa), dequantize(b, *qb))
        if cls.to_bool:
            return y
        if cls.fused:
            y = fused_clamp(y, node.attrs.get(_ACT, 0))
        return quantize(y, *quant_of(node, ty).scalar(), ty.dtype)


def _act_range(node: Node, ty: Tensor) -> tuple[int, int]:
    scale, zp = quant_of(node, ty).scalar()
    return activation_range(node.attrs.get(_ACT, 0), scale, zp, ty.dtype)


@register
class Add(_Binary):
    name, fused = "ADD", True
    expr = "a + b"
    compute = staticmethod(_binary(np.add))

    @classmethod
    def gpu_takes_ints(cls, node: Node, graph: Graph) -> bool:
        """int32: a graph input plus or minus a constant within GPU_INT_OFFSET (Keras 3's Embedding adds the
        vocabulary to negative ids), with no fused activation; exact in float lanes since GpuKernel.invoke holds
        that input to GPU_EXACT_INT - GPU_INT_OFFSET."""
        if node.attrs.get(_ACT, ACT_NONE) != ACT_NONE:
            return False
        constant = [t for t in node.inputs if graph.tensors[t].data is not None]
        varying = [t for t in node.inputs if graph.tensors[t].data is None]
        if len(constant) != 1 or len(varying) != 1 or varying[0] not in graph.inputs:
            return False
        c = np.asarray(graph.tensors[constant[0]].data)
        return c.dtype == np.int32 and c.size > 0 and int(np.abs(c.astype(np.int64)).max()) <= GPU_INT_OFFSET

    @classmethod
    def run_quantized(cls, node: Node, a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
                      ty: Tensor) -> np.ndarray:
        if ty.dtype.itemsize != 1:
            return super().run_quantized(node, a, b, qa, qb, ty)
        lo, hi = _act_range(node, ty)
        return add_sub_q8(a, b, qa, qb, quant_of(node, ty).scalar(), cls.name == "SUB", lo, hi).astype(ty.dtype)


@register
class Sub(Add):
    name = "SUB"
    expr = "a - b"
    compute = staticmethod(_binary(np.subtract))


@register
class Mul(_Binary):
    name, fused = "MUL", True
    expr = "a * b"
    compute = staticmethod(_binary(np.multiply))

    @classmethod
    def run_quantized(cls, node: Node, a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
                      ty: Tensor) -> np.ndarray:
        if ty.dtype.itemsize != 1:
            return super().run_quantized(node, a, b, qa, qb, ty)
        lo, hi = _act_range(node, ty)
        return mul_q8(a, b, qa, qb, quant_of(node, ty).scalar(), lo, hi).astype(ty.dtype)


@register
class Div(_Binary):
    name, fused = "DIV", True
    expr = "a / b"

    @staticmethod
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu":
            _int_zero_check(node, b)
            return truncate_divide(a, b)
        return np.divide(a, b)


@register
class Pow(_Binary):
    name = "POW"
    expr = _pow_expr()

    @staticmethod
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if b.dtype.kind in "iu" and np.any(b < 0):
            raise ModelError(f"{node}: integer POW with a negative exponent")
        return np.power(a, b)


class _MinMax(_Binary):
    @classmethod
    def run_quantized(cls, node: Node, a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
                      ty: Tensor) -> np.ndarray:
        if qa == qb == quant_of(node, ty).scalar():  # TFLite's case: all three share one quantization
            return cls.compute(node, a, b)
        return super().run_quantized(node, a, b, qa, qb, ty)


@register
class Maximum(_MinMax):
    name = "MAXIMUM"
    expr = "max(a, b)"
    compute = staticmethod(_binary(np.maximum))


@register
class Minimum(_MinMax):
    name = "MINIMUM"
    expr = "min(a, b)"
    compute = staticmethod(_binary(np.minimum))


@register
class SquaredDifference(_Binary):
    name = "SQUARED_DIFFERENCE"
    expr = "(a - b) * (a - b)"

    @staticmethod
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = np.subtract(a, b)
        return d * d

    @classmethod
    def run_quantized(cls, node: Node, a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
                      ty: Tensor) -> np.ndarray:
        if ty.dtype != np.int8:
            return super().run_quantized(node, a, b, qa, qb, ty)
        return squared_difference_q8(a, b, qa, qb, quant_of(node, ty).scalar()).astype(ty.dtype)


@register
class FloorDiv(_Binary):
    name, gpu_quantized = "FLOOR_DIV", False
    expr = "floor(a / b)"

    @staticmethod
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu":
            _int_zero_check(node, b)
            return np.floor_divide(a, b)
        return np.floor(np.divide(a, b))


@register
class FloorMod(_Binary):
    name, gpu_quantized = "FLOOR_MOD", False
    # C fmod, moved onto the divisor's side when the signs differ (as TFLite's FloorMod)
    expr = ("SELECT4(FMOD(a, b), FMOD(a, b) + b, "
            "NE4(FMOD(a, b), SPLAT(0.0f)) * NE4(LT4(b, SPLAT(0.0f)), LT4(FMOD(a, b), SPLAT(0.0f))))")

    @staticmethod
    def compute(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu":
            _int_zero_check(node, b)
        return np.mod(a, b)  # the result takes the divisor's sign, as TFLite's FloorMod


class _Compare(_Binary):
    """On the GPU a bool is a float lane of 1.0 or 0.0: a comparison is one per-lane dialect compare."""

    to_bool, bools, gpu_ints = True, True, True

    @classmethod
    def gpu_support(cls, node: Node, graph: Graph) -> bool | str:
        a, b = (graph.tensors[t] for t in node.inputs)
        if is_quantized(a) and quant_of(node, a).scalar() != quant_of(node, b).scalar():
            # TFLite rescales both to a common fixed-point grid; the dequantized floats can tie differently
            return f"{node.op} of quantized tensors with different scales runs on the CPU"
        return super().gpu_support(node, graph)

    @classmethod
    def run_quantized(cls, node: Node, a: np.ndarray, b: np.ndarray, qa: tuple[float, int], qb: tuple[float, int],
                      ty: Tensor) -> np.ndarray:
        if qa == qb:
            return cls.compute(node, a, b)
        if a.dtype.itemsize == 1:
            return cls.compute(node, compare_scaled_q8(a, qa), compare_scaled_q8(b, qb))
        return super().run_quantized(node, a, b, qa, qb, ty)


@register
class Equal(_Compare):
    name = "EQUAL"
    expr = "EQ4(a, b)"
    strings = True
    compute = staticmethod(_binary(np.equal))


@register
class NotEqual(_Compare):
    name = "NOT_EQUAL"
    expr = "NE4(a, b)"
    strings = True
    compute = staticmethod(_binary(np.not_equal))


@register
class Greater(_Compare):
    name, bools = "GREATER", False
    expr = "GT4(a, b)"
    compute = staticmethod(_binary(np.greater))


@register
class GreaterEqual(_Compare):
    name, bools = "GREATER_EQUAL", False
    expr = "GE4(a, b)"
    compute = staticmethod(_binary(np.greater_equal))


@register
class Less(_Compare):
    name, bools = "LESS", False
    expr = "LT4(a, b)"
    compute = staticmethod(_binary(np.less))


@register
class LessEqual(_Compare):
    name, bools = "LESS_EQUAL", False
    expr = "LE4(a, b)"
    compute = staticmethod(_binary(np.less_equal))


class _Logical(_Binary):
    ints, quantized, floats, bools, gpu_ints = False, False, False, True, True


@register
class LogicalAnd(_Logical):
    name = "LOGICAL_AND"
    expr = "a * b"
    compute = staticmethod(_binary(np.logical_and))


@register
class LogicalOr(_Logical):
    name = "LOGICAL_OR"
    expr = "max(a, b)"
    compute = staticmethod(_binary(np.logical_or))


# -- the rest -------------------------------------------------------------------------------------------

@register
class Prelu(Op):
    """x if x >= 0 else alpha * x, alpha broadcast against x (per channel, usually)."""

    name = "PRELU"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 2, 1)
        x, alpha, y = (graph.tensors[t] for t in (*node.inputs, node.outputs[0]))
        _same_type(node, x, alpha)
        _same_type(node, x, y)
        for t in (x, alpha, y):
            check_type(node, t)
        if is_quantized(x) and x.dtype.itemsize != 1:
            raise ModelError(f"{node}: quantized PRELU needs int8 or uint8 tensors, has {x.dtype}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        return [broadcast_shape(required(node, shapes, 0), required(node, shapes, 1), node)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, alpha = all_required(node, inputs)
        tx, ta, ty = (graph.tensors[t] for t in (*node.inputs, node.outputs[0]))
        if not is_quantized(tx):
            return [np.where(x >= 0, x, x * alpha).astype(x.dtype)]
        # TFLite's reference PRELU: s_x/s_y on the positive side, s_x*s_alpha/s_y on the negative side
        (sx, zx), (sa, za), (so, zo) = (quant_of(node, t).scalar() for t in (tx, ta, ty))
        lo, hi = dtype_range(ty.dtype)
        m1, s1 = quantize_multiplier(float(f32(sx) / f32(so)))
        m2, s2 = quantize_multiplier(float(f32(sx) * f32(sa) / f32(so)))
        v = x.astype(np.int64) - zx
        pos = rescale(v, m1, s1, zo, lo, hi)
        neg = rescale(v * (alpha.astype(np.int64) - za), m2, s2, zo, lo, hi)
        return [np.where(v >= 0, pos, neg).astype(ty.dtype)]

    gpu_support = staticmethod(_not_all_const)

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        return "SELECT4(a * b, a, GE4(a, SPLAT(0.0f)))"

    lower = staticmethod(lower_elementwise)


# inputs summed per kernel pass: with the output, the 4 storage buffers GL ES 3.1 guarantees a shader
ADD_N_PER_PASS = 3


@register
class AddN(Op):
    name = "ADD_N"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if not node.inputs:
            raise ModelError(f"{node}: needs at least one input")
        arity(node, len(node.inputs), 1)
        first = graph.tensors[node.inputs[0]]
        for t in (*node.inputs, node.outputs[0]):
            _same_type(node, first, graph.tensors[t])
            check_type(node, graph.tensors[t], ints=True, quantized=False)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        given = all_required(node, shapes)
        for s in given[1:]:
            if s != given[0]:
                raise ModelError(f"{node}: all inputs must have one shape, got {[list(x) for x in given]}")
        return [given[0]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        given = all_required(node, inputs)
        total = given[0].copy()
        for x in given[1:]:
            total += x  # in order, in the input dtype, as TFLite sums
        return [total]

    gpu_support = staticmethod(_not_all_const)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        """kernels/dialect/add_n.dialect over up to ADD_N_PER_PASS inputs at a time, in input order. Passes after the
        first add to the partial sum already in the output; only the last writes it as "dst", so fused
        post-ops (and fake-quant) see the whole sum."""
        out = ctx.output(node)
        b, h, w, c = ctx.bhwc(out)
        grid = (w, h, b * slices(c))
        ins = [ctx.input(node, k) for k in range(len(node.inputs))]
        groups = [ins[k:k + ADD_N_PER_PASS] for k in range(0, len(ins), ADD_N_PER_PASS)]
        for g, group in enumerate(groups):
            arg = "dst" if g == len(groups) - 1 else "acc"
            terms = [f"{arg}_read(i)"] if g else []
            tensors, consts = {}, {}
            for k, t in enumerate(group):
                if ctx.is_const(t):
                    consts[f"x{k}"] = ctx.const_tensor("addn", t)
                else:
                    tensors[f"x{k}"] = t
                terms.append(f"x{k}_read(i)")
            helpers = (f"#define SUM_INPUTS(i) ({' + '.join(terms)})\n"
                       f"#define OUT_WRITE(i, v) {arg}_write(i, v)\n")
            ctx.kernel("add_n", tensors, {arg: out}, consts, grid=grid, helpers=helpers)


def _select_view(node: Node, ctx: LowerContext, k: int) -> int | None:
    """SELECT's vector condition picks whole rows along x's first dimension: that dimension's BHWC index (the
    condition is read at that coordinate); None where the operand broadcasts like numpy's."""
    shape, out = ctx.shape(ctx.input(node, k)), ctx.shape(node.outputs[0])
    if node.op == "SELECT" and k == 0 and len(shape) == 1 and len(out) > 1:
        return 4 - len(out)
    return None


def _fetch(arg: str, shape: tuple[int, int, int, int], row_dim: int | None) -> str:
    """``FLT4 fetch_<arg>(b, y, x, s)``: operand ``arg`` of BHWC ``shape`` at a dst position, broadcast (numpy's
    rules, a single channel across the lanes), or, with ``row_dim``, the vector element at that dst coordinate."""
    b, h, w, c = shape
    head = f"FLT4 fetch_{arg}(int b, int y, int x, int s BUFS_DECL) {{\n"
    if row_dim is not None:
        k = "byx"[row_dim]
        return head + f"  return SPLAT(LANE({arg}_read({k} / 4), {k} % 4));\n}}\n"
    index = f"(((b % {b}) * {slices(c)} + {'0' if c == 1 else 's'}) * {h} + (y % {h})) * {w} + (x % {w})"
    value = f"{arg}_read({index})"
    return head + f"  return {f'SPLAT({value}.x)' if c == 1 else value};\n}}\n"


@register
class SelectV2(Op):
    """condition ? x : y with numpy broadcasting of all three."""

    name = "SELECT_V2"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        c, x, y, out = (graph.tensors[t] for t in (*node.inputs, node.outputs[0]))
        if c.dtype != np.bool_:
            raise ModelError(f"{node}: condition must be bool, is {c.type_name or c.dtype}")
        _same_type(node, x, y)
        _same_type(node, x, out)
        if is_quantized(x) and per_tensor(node, x) != per_tensor(node, y):
            raise ModelError(f"{node}: quantized x and y must share scale and zero point")
        check_type(node, x, ints=True, bools=True)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        c, x, y = all_required(node, shapes)
        return [broadcast_shape(c, broadcast_shape(x, y, node), node)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        c, x, y = all_required(node, inputs)
        return [np.where(c, x, y)]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        c, x, y = node.inputs
        asm.select(c, x, y, node.outputs[0])

    gpu_ints = True

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if any(len(graph.tensors[t].shape) > 4 for t in node.inputs):
            return "an operand has rank above 4"
        return _not_all_const(node, graph)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        """kernels/dialect/where.dialect (OpenCL reserves the name select), each operand read through a generated
        fetch function."""
        dst = ctx.output(node)
        inputs: dict[str, int] = {}
        consts: dict[str, str] = {}
        helpers = ""
        for arg, k in (("c", 0), ("x", 1), ("y", 2)):
            t = ctx.input(node, k)
            if ctx.is_const(t):
                consts[arg] = ctx.const_tensor("select", t)
            else:
                inputs[arg] = t
            helpers += _fetch(arg, ctx.bhwc(t), _select_view(node, ctx, k))
        ctx.kernel("where", inputs, {"dst": dst}, consts, grid=ctx.grid(dst), helpers=helpers)


@register
class Select(SelectV2):
    """TFLite's SELECT: x and y of one shape; the condition has that shape too, or is a vector picking
    whole rows along the first dimension (or a scalar)."""

    name = "SELECT"

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[tuple[int, ...]]:
        c, x, y = all_required(node, shapes)
        if x != y or not (c == x or len(c) == 0 or (len(c) == 1 and len(x) >= 1 and c[0] == x[0])):
            raise ModelError(f"{node}: condition {list(c)}, x {list(x)} and y {list(y)} do not fit: x and y "
                             "need one shape, the condition the same or a vector over x's first dimension")
        return [x]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        c, x, y = all_required(node, inputs)
        if c.ndim == 1 and x.ndim > 1:
            c = c.reshape(c.shape + (1,) * (x.ndim - 1))
        return [np.where(c, x, y)]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        c, x, y = node.inputs
        asm.select(c, x, y, node.outputs[0], rows=len(asm.shape(c)) == 1 and len(asm.shape(x)) > 1)
