"""A WHILE loop of small tensors as one numba call: its condition and body as programs for the interpreter here.

A Keras recurrent layer converts to a WHILE whose body is ~26 nodes on tensors of a few dozen values (a gate's
[1, 64]); run node by node, each prepared step cost 2-10 us of Python for well under a microsecond of arithmetic,
and a 50-step bidirectional LSTM took ~10x LiteRT's time. loop_program.py translates the condition and the body
into instructions over one float64 workspace where every tensor of both subgraphs has its place (int32 and bool
values are exact there), and ``run_loop`` runs them until the condition is false: compiled once for every model
(cache=True), no code made per model.

An instruction is a row of ``WIDTH`` int64 (the ``F_`` field offsets) and a row of ``FWIDTH`` float64 (a clamp's
bounds):
  UNARY / BINARY  out[i] = fn(a[i] (, b[i])) over a box of up to 4 dimensions (``N0..N3``), each operand's element
                  at its base plus the index times its strides (0: broadcast); then the fused clamp (BINARY) and
                  the rounding of the output type (float32: to float32; int32: wrapped to 32 bits; bool: 0 or 1).
  COPY            out[i] = a[i] over such a box, the source's base (``fn`` 1: the output's) moved by up to 4 run-time
                  indices read from the workspace, each checked against its range (a GATHER's index, a SLICE's
                  begin, a list's item written at the loop's counter): a RESHAPE, SLICE, STRIDED_SLICE, SPLIT,
                  GATHER, TRANSPOSE or a part of a CONCATENATION.
  SELECT          out[i] = b[i] where a[i] else c[i] over such a box (c's base and strides from ``F_C``).
  CHECK           a value (``F_A``) is another's (``F_B``) plus ``F_N``, or where ``F_B`` is -1, one of the two
                  values at ``F_N + 1`` and ``F_N + 2``: what a translation assumed of run-time values.
  DENSE           a FULLY_CONNECTED: out[m, o] = clamp(sum_k x[m, k] w[k, o] + bias[o]) (w as [K, O]: the inner
                  loop runs along a row of w and an output row, which the compiler vectorizes), rounded to float32.
Float32 arithmetic runs in float64, each result rounded to float32: for + - * / and sqrt that is float32's own
result; exp and tanh are float64 values (within a few float64 ulps) rounded once more: within an ulp of numpy's
float32 functions, which LiteRT's kernels are not bit for bit either (a TANH row's exp is _exp_rows', vectorized);
the logistic float32's own formula, as the op's CPU kernel.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

# instruction kinds
UNARY, BINARY, COPY, DENSE, CHECK, SELECT = 0, 1, 2, 3, 4, 5
# COPY's fn: what its run-time indices move
MOVE_SOURCE, MOVE_OUTPUT = 0, 1
# output types: how a result is rounded on its store
F32, I32, BOOL = 0, 1, 2
# functions, by op name
UNARY_FNS = {"IDENTITY": 0, "LOGISTIC": 1, "TANH": 2, "RELU": 3, "RELU6": 4, "EXP": 5, "NEG": 6, "ABS": 7,
             "SQRT": 8, "RSQRT": 9, "LOG": 10, "SQUARE": 11, "LOGICAL_NOT": 12, "RELU_N1_TO_1": 13, "CAST": 14}
BINARY_FNS = {"ADD": 0, "SUB": 1, "MUL": 2, "DIV": 3, "MAXIMUM": 4, "MINIMUM": 5, "LESS": 6, "LESS_EQUAL": 7,
              "GREATER": 8, "GREATER_EQUAL": 9, "EQUAL": 10, "NOT_EQUAL": 11, "LOGICAL_AND": 12, "LOGICAL_OR": 13,
              "SQUARED_DIFFERENCE": 14}
# what each function takes besides float32: int32 (exact in the workspace, and as TFLite computes it), bool
INT_FNS = {"IDENTITY", "RELU", "RELU6", "RELU_N1_TO_1", "NEG", "ABS", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM",
           "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "CAST"}
BOOL_FNS = {"IDENTITY", "LOGICAL_NOT", "LOGICAL_AND", "LOGICAL_OR", "EQUAL", "NOT_EQUAL", "CAST"}

# the fields of an instruction row
F_KIND, F_FN, F_TYPE = 0, 1, 2
F_N = 3  # 4 counts (DENSE: M, K, O at F_N .. F_N + 2)
F_OUT = 7  # base, then 4 strides
F_A = 12  # base, then 4 strides (DENSE: x's base)
F_B = 17  # base, then 4 strides (DENSE: w's base)
F_BIAS = 22  # DENSE: the bias's base, or -1
F_DYN = 22  # COPY: 4 run-time indices, each (workspace place or -1, stride, largest index)
F_C = 22  # SELECT: the third operand's base, then 4 strides
WIDTH = 34
FWIDTH = 2  # clamp's low and high bounds


def strides_of(shape: tuple[int, ...] | list[int]) -> list[int]:
    """Row-major element strides: where the workspace holds a tensor's elements."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


@njit(cache=True, error_model="numpy")
def _wrap_int32(r: np.int64) -> float:
    """An integer wrapped to int32's range, as TFLite's int32 arithmetic overflows."""
    return np.float64(((r + 2147483648) % 4294967296) - 2147483648)


@njit(cache=True, error_model="numpy")
def _store(ws: np.ndarray, at: int, v: float, kind: int) -> None:
    if kind == F32:
        ws[at] = np.float64(np.float32(v))
    elif kind == I32:
        ws[at] = _wrap_int32(np.int64(v)) if v >= 2147483648.0 or v < -2147483648.0 else v
    else:
        ws[at] = 1.0 if v != 0.0 else 0.0


@njit(cache=True, error_model="numpy")
def _unary(fn: int, v: float) -> float:
    if fn == 0:
        return v
    if fn == 1:
        return _logistic(v)
    if fn == 2:
        return np.tanh(v)
    if fn == 3:
        return 0.0 if v < 0.0 else v
    if fn == 4:
        return 0.0 if v < 0.0 else (6.0 if v > 6.0 else v)
    if fn == 5:
        return np.exp(v)
    if fn == 6:
        return -v
    if fn == 7:
        return abs(v)
    if fn == 8:
        return np.sqrt(v)
    if fn == 9:
        return 1.0 / np.sqrt(v)
    if fn == 10:
        return np.log(v)
    if fn == 11:
        return v * v
    if fn == 12:
        return 1.0 if v == 0.0 else 0.0
    if fn == 13:
        return -1.0 if v < -1.0 else (1.0 if v > 1.0 else v)
    return np.trunc(v)  # CAST: toward zero, which the store of an int32 keeps (a bool's store tests v != 0)


@njit(cache=True, error_model="numpy")
def _binary(fn: int, a: float, b: float, ints: bool) -> float:
    if ints and fn <= 2:  # int32 ADD, SUB, MUL: exact in int64, wrapped by the store
        ia, ib = np.int64(a), np.int64(b)
        return _wrap_int32(ia + ib if fn == 0 else (ia - ib if fn == 1 else ia * ib))
    if fn == 0:
        return a + b
    if fn == 1:
        return a - b
    if fn == 2:
        return a * b
    if fn == 3:
        return a / b
    if fn == 4:
        return a if a >= b or a != a else b
    if fn == 5:
        return a if a <= b or a != a else b
    if fn == 6:
        return 1.0 if a < b else 0.0
    if fn == 7:
        return 1.0 if a <= b else 0.0
    if fn == 8:
        return 1.0 if a > b else 0.0
    if fn == 9:
        return 1.0 if a >= b else 0.0
    if fn == 10:
        return 1.0 if a == b else 0.0
    if fn == 11:
        return 1.0 if a != b else 0.0
    if fn == 12:
        return 1.0 if a != 0.0 and b != 0.0 else 0.0
    if fn == 13:
        return 1.0 if a != 0.0 or b != 0.0 else 0.0
    d = a - b
    return d * d


@njit(cache=True, error_model="numpy")
def _clamp(v: float, lo: float, hi: float) -> float:
    # a NaN stays NaN, as numpy's maximum and clip keep it (cpu/elementwise.fused_clamp)
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@njit(cache=True, error_model="numpy")
def _box(code: np.ndarray, fparams: np.ndarray, k: int, ws: np.ndarray, a_base: int, ob: int) -> None:
    """UNARY, BINARY or COPY instruction ``k`` over its box, the source's and output's bases given (moved by run-time
    indices)."""
    row = code[k]
    kind, fn, out_type = row[F_KIND], row[F_FN], row[F_TYPE]
    lo, hi = fparams[k, 0], fparams[k, 1]
    clamped = lo > -np.inf or hi < np.inf
    ints = out_type == I32
    n0, n1, n2, n3 = row[F_N], row[F_N + 1], row[F_N + 2], row[F_N + 3]
    os0, os1, os2, os3 = row[F_OUT + 1], row[F_OUT + 2], row[F_OUT + 3], row[F_OUT + 4]
    as0, as1, as2, as3 = row[F_A + 1], row[F_A + 2], row[F_A + 3], row[F_A + 4]
    bb, bs0, bs1, bs2, bs3 = row[F_B], row[F_B + 1], row[F_B + 2], row[F_B + 3], row[F_B + 4]
    cb, cs0, cs1, cs2, cs3 = row[F_C], row[F_C + 1], row[F_C + 2], row[F_C + 3], row[F_C + 4]
    for i0 in range(n0):
        for i1 in range(n1):
            for i2 in range(n2):
                o = ob + i0 * os0 + i1 * os1 + i2 * os2
                a = a_base + i0 * as0 + i1 * as1 + i2 * as2
                b = bb + i0 * bs0 + i1 * bs1 + i2 * bs2
                if kind == SELECT:
                    c = cb + i0 * cs0 + i1 * cs1 + i2 * cs2
                    for i3 in range(n3):
                        ws[o + i3 * os3] = ws[b + i3 * bs3] if ws[a + i3 * as3] != 0.0 else ws[c + i3 * cs3]
                elif kind == COPY:
                    for i3 in range(n3):
                        ws[o + i3 * os3] = ws[a + i3 * as3]
                elif kind == BINARY and out_type == F32 and not clamped and fn <= 2:
                    _float_arithmetic(ws, fn, o, os3, a, as3, b, bs3, n3)
                elif kind == UNARY and out_type == F32 and not clamped and 1 <= fn <= 2:
                    _gate(ws, fn, o, os3, a, as3, n3)
                else:
                    for i3 in range(n3):
                        va = ws[a + i3 * as3]
                        if kind == UNARY:
                            v = _unary(fn, va)
                        else:
                            v = _binary(fn, va, ws[b + i3 * bs3], ints)
                        if clamped:
                            v = _clamp(v, lo, hi)
                        _store(ws, o + i3 * os3, v, out_type)


@njit(cache=True, error_model="numpy")
def _float_arithmetic(ws: np.ndarray, fn: int, o: int, os: int, a: int, as_: int, b: int, bs: int, n: int) -> None:
    """A row of a float32 ADD, SUB or MUL, a loop of its own for each (the generic loop's per-value choice of the
    function took ~5 ns a value, a third of a recurrent body's time)."""
    if os == 1 and as_ == 1 and bs <= 1:  # rows in order (b's broadcast or not): loops the compiler vectorizes
        if bs == 0:
            _float_arithmetic_scalar(ws[o:o + n], ws[a:a + n], ws[b], fn)
        else:
            _float_arithmetic_rows(ws[o:o + n], ws[a:a + n], ws[b:b + n], fn)
        return
    if fn == 0:
        for i in range(n):
            ws[o + i * os] = np.float64(np.float32(ws[a + i * as_] + ws[b + i * bs]))
    elif fn == 1:
        for i in range(n):
            ws[o + i * os] = np.float64(np.float32(ws[a + i * as_] - ws[b + i * bs]))
    else:
        for i in range(n):
            ws[o + i * os] = np.float64(np.float32(ws[a + i * as_] * ws[b + i * bs]))


@njit(cache=True, error_model="numpy")
def _float_arithmetic_rows(out: np.ndarray, a: np.ndarray, b: np.ndarray, fn: int) -> None:
    if fn == 0:
        for i in range(out.size):
            out[i] = np.float64(np.float32(a[i] + b[i]))
    elif fn == 1:
        for i in range(out.size):
            out[i] = np.float64(np.float32(a[i] - b[i]))
    else:
        for i in range(out.size):
            out[i] = np.float64(np.float32(a[i] * b[i]))


@njit(cache=True, error_model="numpy")
def _float_arithmetic_scalar(out: np.ndarray, a: np.ndarray, b: float, fn: int) -> None:
    if fn == 0:
        for i in range(out.size):
            out[i] = np.float64(np.float32(a[i] + b))
    elif fn == 1:
        for i in range(out.size):
            out[i] = np.float64(np.float32(a[i] - b))
    else:
        for i in range(out.size):
            out[i] = np.float64(np.float32(a[i] * b))


# exp(x) in loops the compiler vectorizes (np.exp and np.tanh are a call a value, 7-20 ns; a recurrent cell's gates
# are most of its values): x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, Cody and Waite), e^r by its Taylor
# polynomial to r^13 / 13! (the next term below 1e-17 of it), 2^k made as the bits of its exponent field. Within 2
# ulps of float64's exp (measured on 1e5 values: 2.2e-16 at most), so float32's result rounded from it is the
# correctly rounded one but for values within ~1e-16 of a float32 midpoint.
_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer, held in the low bits of the mantissa
_EXP_BOUND = 700.0  # exp beyond it is out of float32's range either way (and 2**k stays a normal float64)
_TANH_SERIES = 0.0625  # below it tanh's Taylor series (to x^11): 1 - 2 / (e^2x + 1) loses bits to cancellation


@njit(cache=True, error_model="numpy")
def _exp_rows(x: np.ndarray, out: np.ndarray, scale: np.ndarray) -> None:
    """out = exp(x) (a NaN stays NaN), ``scale`` a scratch row of x's size."""
    for i in range(x.size):
        c = max(min(x[i], _EXP_BOUND), -_EXP_BOUND)
        t = c * _LOG2E + _SHIFTER
        k = t - _SHIFTER
        r = (c - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        out[i] = p * r + 1.0
        scale[i] = t
    bits = scale.view(np.int64)
    for i in range(x.size):
        bits[i] = (bits[i] + 1023) << 52  # k's low 12 bits (two's complement) into the exponent field: 2**k
    for i in range(x.size):
        v = x[i]
        out[i] = out[i] * scale[i] if v == v else v


@njit(cache=True, error_model="numpy")
def _logistic(v: float) -> float:
    # in float32, as the op's CPU kernel computes 1 / (1 + exp(-x)) (float32's exp: ~3.5 ns a value, faster than
    # _exp_rows' float64 for the rows of a gate)
    x = np.float32(v)
    return np.float64(np.float32(1.0) / (np.float32(1.0) + np.exp(-x)))


@njit(cache=True, error_model="numpy")
def _gate(ws: np.ndarray, fn: int, o: int, os: int, a: int, as_: int, n: int) -> None:
    """A row of a float32 LOGISTIC or TANH (a recurrent cell's gates). TANH as sign(x) (1 - 2 / (e^2|x| + 1)) with
    _exp_rows' exp in float64 (its series near 0), rounded to float32: np.tanh took ~20 ns a value, this ~6."""
    if fn == 1:
        for i in range(n):
            ws[o + i * os] = _logistic(ws[a + i * as_])
        return
    scratch = np.empty(3 * n)
    arg, e = scratch[:n], scratch[n:2 * n]
    for i in range(n):
        arg[i] = 2.0 * abs(ws[a + i * as_])
    _exp_rows(arg, e, scratch[2 * n:])
    for i in range(n):
        v = ws[a + i * as_]
        x2 = v * v
        series = v * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (
            62.0 / 2835.0 + x2 * (-1382.0 / 155925.0))))))
        large = 1.0 - 2.0 / (e[i] + 1.0)
        large = large if v >= 0.0 else -large
        ws[o + i * os] = np.float64(np.float32(series if abs(v) < _TANH_SERIES else large))


@njit(cache=True, error_model="numpy")
def _dense(code: np.ndarray, fparams: np.ndarray, k: int, ws: np.ndarray) -> None:
    row = code[k]
    m_rows, depth, width = row[F_N], row[F_N + 1], row[F_N + 2]
    out, x, w, bias = row[F_OUT], row[F_A], row[F_B], row[F_BIAS]
    lo, hi = fparams[k, 0], fparams[k, 1]
    acc = np.zeros(width)
    for m in range(m_rows):
        acc[:] = 0.0
        kk, xm = 0, x + m * depth
        # 4 rows of w a pass, each output's sum still taken in order: a load and a store of acc per 4 products
        # (a masked LSTM's 64 x 192: 3.75 -> 2.87 us; 8 a pass, indexing ws, kept the compiler from vectorizing)
        while kk + 4 <= depth:
            x0, x1, x2, x3 = ws[xm + kk], ws[xm + kk + 1], ws[xm + kk + 2], ws[xm + kk + 3]
            w0 = ws[w + kk * width:w + (kk + 1) * width]  # views: the loop below vectorizes (2.6x indexing ws)
            w1 = ws[w + (kk + 1) * width:w + (kk + 2) * width]
            w2 = ws[w + (kk + 2) * width:w + (kk + 3) * width]
            w3 = ws[w + (kk + 3) * width:w + (kk + 4) * width]
            for o in range(width):
                acc[o] = (((acc[o] + x0 * w0[o]) + x1 * w1[o]) + x2 * w2[o]) + x3 * w3[o]
            kk += 4
        for j in range(kk, depth):
            xv = ws[xm + j]
            w_row = ws[w + j * width:w + (j + 1) * width]
            for o in range(width):
                acc[o] += xv * w_row[o]
        for o in range(width):
            v = acc[o]
            if bias >= 0:
                v += ws[bias + o]
            ws[out + m * width + o] = np.float64(np.float32(_clamp(v, lo, hi)))


@njit(cache=True, error_model="numpy")
def _run(code: np.ndarray, fparams: np.ndarray, ws: np.ndarray) -> int:
    """Every instruction in order; -1, or the index of one whose run-time index fell outside its range or whose
    CHECK failed."""
    for k in range(code.shape[0]):
        kind = code[k, F_KIND]
        if kind == DENSE:
            _dense(code, fparams, k, ws)
            continue
        if kind == CHECK:
            v, other = ws[code[k, F_A]], code[k, F_B]
            if not (v == ws[other] + code[k, F_N] if other >= 0 else v == code[k, F_N + 1] or v == code[k, F_N + 2]):
                return k
            continue
        a_base, ob = code[k, F_A], code[k, F_OUT]
        if kind == COPY:
            for j in range(4):
                at = code[k, F_DYN + 3 * j]
                if at >= 0:
                    index = ws[at]
                    if not (0.0 <= index <= code[k, F_DYN + 3 * j + 2]):
                        return k
                    if code[k, F_FN] == MOVE_OUTPUT:
                        ob += np.int64(index) * code[k, F_DYN + 3 * j + 1]
                    else:
                        a_base += np.int64(index) * code[k, F_DYN + 3 * j + 1]
        _box(code, fparams, k, ws, a_base, ob)
    return -1


@njit(cache=True, error_model="numpy")
def run_loop(cond: np.ndarray, cond_f: np.ndarray, body: np.ndarray, body_f: np.ndarray, ws: np.ndarray,
             flag: int, carry: np.ndarray, stage: np.ndarray) -> tuple[int, int]:
    """The loop until ws[flag] (the condition's output) is 0 after the condition's program: (0, 0), or (1, k) /
    (2, k) where instruction k of the condition / body met an index outside its range or a failed CHECK. ``carry``
    rows (source, place, count): each of the body's outputs into its loop variable's place, through ``stage`` (an
    output may be another variable's input)."""
    while True:
        k = _run(cond, cond_f, ws)
        if k >= 0:
            return 1, k
        if ws[flag] == 0.0:
            return 0, 0
        k = _run(body, body_f, ws)
        if k >= 0:
            return 2, k
        p = 0
        for r in range(carry.shape[0]):
            src, n = carry[r, 0], carry[r, 2]
            stage[p:p + n] = ws[src:src + n]
            p += n
        p = 0
        for r in range(carry.shape[0]):
            dst, n = carry[r, 1], carry[r, 2]
            ws[dst:dst + n] = stage[p:p + n]
            p += n
