"""One kernel source, two APIs: wrap a kernel body written in the dialect of kernels/README.md into a
complete OpenCL C 1.2 program or a GLSL ES 3.10 compute shader.

A kernel is a ``KernelSpec``. Every argument is a buffer of 4-float vectors; an argument with a BHWC
``shape`` is a PHWC4 tensor and gets its geometry (``t_B``, ``t_H``, ``t_W``, ``t_C``, ``t_S``) and an index
macro ``t_idx(b, y, x, s)``. Everything else the kernel needs (shapes, strides, flags) is a ``#define``, so
the generated text alone determines the program; it is also the cache key for compiled binaries.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROLES = ("in", "out", "const")
PRECISIONS = ("fp32", "fp16")

# Kernel sources live in the top-level kernels/ folder of a checkout; an installed package may carry them
# next to its modules instead.
_KERNEL_DIRS = (Path(__file__).resolve().parents[2] / "kernels", Path(__file__).resolve().parents[1] / "kernels")
# The line that separates a kernel file's helper functions (above) from its body (below).
BODY_MARKER = "// @body"
INCLUDE_MARKER = "@include"

# A name must be an identifier in both languages: GLSL reserves "__" anywhere and the "gl_"/"GL_" prefixes.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*$")


def _check_name(name: str, what: str) -> None:
    if not _NAME.match(name) or name.lower().startswith("gl_"):
        raise ValueError(f"{what} {name!r} is not a valid kernel identifier "
                         "(letters, digits, single underscores; no leading underscore or gl_ prefix)")


@dataclass(frozen=True)
class Arg:
    """One buffer argument of a kernel.

    role: "in" (read), "out" (read and write) or "const" (read; weights prepared once).
    shape: BHWC geometry of a PHWC4 tensor, or None for a plain buffer of vec4 (weights, raw data).
    precision: storage precision of this buffer; None takes the spec's.
    """

    name: str
    role: str
    shape: tuple[int, int, int, int] | None = None
    precision: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "argument name")
        if self.role not in ROLES:
            raise ValueError(f"argument {self.name!r}: role {self.role!r} is not one of {ROLES}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ValueError(f"argument {self.name!r}: precision {self.precision!r} is not one of {PRECISIONS}")
        if self.shape is not None:
            shape = tuple(int(d) for d in self.shape)
            if len(shape) != 4 or min(shape) < 1:
                raise ValueError(f"argument {self.name!r}: shape {self.shape} is not a BHWC shape of positive sizes")
            object.__setattr__(self, "shape", shape)

    @property
    def slices(self) -> int:
        return math.ceil(self.shape[3] / 4) if self.shape else 0

    @property
    def n_vec4(self) -> int:
        """vec4 count of a PHWC4 tensor argument (B * S * H * W); 0 for a plain buffer."""
        if self.shape is None:
            return 0
        b, h, w, _ = self.shape
        return b * self.slices * h * w


@dataclass
class KernelSpec:
    """Everything that determines one compiled kernel (see kernels/README.md for the dialect)."""

    name: str
    body: str
    args: list[Arg]
    grid: tuple[int, int, int]
    defines: dict[str, int | float | str] = field(default_factory=dict)
    #: file-scope text placed before the kernel: helper functions (the lowering's fused ``postop``)
    helpers: str = ""
    #: storage precision of every buffer whose Arg does not say otherwise; compute is always float32
    precision: str = "fp32"
    #: work-group size; None lets the backend choose (base.choose_local_size)
    local_size: tuple[int, int, int] | None = None
    #: the out argument whose writes first go through ``FLT4 postop(FLT4 v, int i BUFS_DECL)`` from helpers
    postop_arg: str | None = None
    #: OpenCL: the helpers also define ``float16 postop16(float16 v, int4 i BUFS_DECL)``, the post-ops of 4
    #: vec4 at once (else ``t_finish16`` applies ``postop`` a vec4 at a time)
    wide_postop: bool = False

    def __post_init__(self) -> None:
        _check_name(self.name, "kernel name")
        if self.precision not in PRECISIONS:
            raise ValueError(f"kernel {self.name}: precision {self.precision!r} is not one of {PRECISIONS}")
        self.grid = tuple(int(g) for g in self.grid)
        if len(self.grid) != 3 or min(self.grid) < 1:
            raise ValueError(f"kernel {self.name}: grid {self.grid} must be 3 positive sizes")
        if self.local_size is not None:
            self.local_size = tuple(int(g) for g in self.local_size)
            if len(self.local_size) != 3 or min(self.local_size) < 1:
                raise ValueError(f"kernel {self.name}: local_size {self.local_size} must be 3 positive sizes")
        taken = set(_RESERVED)
        for a in self.args:
            generated = {a.name + "_buf"} | {a.name + sfx for sfx in _ARG_SUFFIXES}
            if generated & taken:
                raise ValueError(f"kernel {self.name}: argument {a.name!r} clashes with another name")
            taken |= generated
        for k in self.defines:
            _check_name(k, f"kernel {self.name}: define")
            if k in taken:
                raise ValueError(f"kernel {self.name}: define {k!r} clashes with a generated name")

    def arg_precision(self, arg: Arg) -> str:
        return arg.precision or self.precision


_ARG_SUFFIXES = ("_B", "_H", "_W", "_C", "_S", "_idx", "_read", "_read1", "_read16", "_write", "_store", "_finish",
                 "_finish16")
_RESERVED = ("GRID_X", "GRID_Y", "GRID_Z", "GID_X", "GID_Y", "GID_Z", "BUFS", "BUFS_DECL", "FLT4", "INT4",
             "MAKE_FLT4", "MAKE_INT4", "SPLAT", "TO_INT", "TO_FLT", "TO_INT4", "TO_FLT4", "FABS", "RSQRT",
             "FMOD", "FMA", "ROUND", "RINT", "ATAN2", "LT4", "LE4", "GT4", "GE4", "EQ4", "NE4", "SELECT4",
             "LANE", "ZERO_PAD")


def _kernel_file(name: str) -> Path | None:
    return next((d / name for d in _KERNEL_DIRS if (d / name).is_file()), None)


def _with_includes(text: str, seen: tuple[str, ...] = ()) -> str:
    """``text`` with every ``// @include FILE`` line replaced by that file of kernels/ (itself expanded)."""
    out = []
    for line in text.splitlines(keepends=True):
        words = line.split()
        if words[:2] != ["//", INCLUDE_MARKER]:
            out.append(line)
            continue
        name = words[2] if len(words) == 3 else ""
        path = _kernel_file(name)
        if path is None or name in seen:
            raise FileNotFoundError(f"kernel include {line.strip()!r}: no such file in kernels/, or a cycle")
        out.append(_with_includes(path.read_text(), (*seen, name)))
    return "".join(out)


def load_kernel(name: str, api: str | None = None) -> tuple[str, str]:
    """(helpers, body) of ``kernels/<name>.cl``: the text above a ``// @body`` line is file-scope helper
    code, the text below it the body; a file without the marker is all body. With ``api`` ("cl" or
    "gl"), a file ``<name>.<api>.cl`` written for that API alone takes precedence. A line
    ``// @include FILE`` stands for the text of ``kernels/FILE`` (helpers several kernels share)."""
    names = ([f"{name}.{api}.cl"] if api else []) + [f"{name}.cl"]
    path = next((p for p in map(_kernel_file, names) if p is not None), None)
    if path is None:
        raise FileNotFoundError(f"kernel source {name}.cl not found in {', '.join(str(d) for d in _KERNEL_DIRS)}")
    text = _with_includes(path.read_text())
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == BODY_MARKER:
            return "".join(lines[:i]), "".join(lines[i + 1:])
    return "", text


def literal(value: float | bool | str) -> str:
    """A define's value as text valid in both languages: ints as-is, floats as float32 with an f suffix."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        if not -(2**31) <= int(value) < 2**31:
            raise ValueError(f"integer define {value} does not fit in a 32-bit int")
        text = str(int(value))
    elif isinstance(value, (float, np.floating)):
        v = np.float32(value)
        if np.isnan(v):
            return "NAN_F"
        if np.isinf(v):
            return "INF_F" if v > 0 else "(-INF_F)"
        # numpy prints the shortest decimal that reads back as exactly this float32
        text = str(v)
        text = (text if "." in text or "e" in text else text + ".0") + "f"
    else:
        raise TypeError(f"a define's value must be an int, float, bool or str, not {type(value).__name__}")
    # parenthesized so that "x-NEG" cannot become "x--1"
    return f"({text})" if text.startswith("-") else text


# -- the dialect, per API -------------------------------------------------------------------------------

_CL_PRELUDE = r"""// Plain arithmetic is never contracted into fma (GLSL ES 3.1 cannot fuse it either); FMA() fuses
// where the device has a fused multiply-add. FMA() is a product and a sum compiled with contraction on,
// not fma(): PoCL 3.0 (LLVM 14) calls a software fma() (a 1x1 conv ran at 10 GFLOP/s), while a contracted
// product and sum becomes the hardware instruction (156 GFLOP/s), and does on a GPU's compiler too.
#pragma OPENCL FP_CONTRACT ON
#define FMA_OF(T) inline T __attribute__((overloadable)) FMA(T a, T b, T c) { return a * b + c; }
FMA_OF(float) FMA_OF(float2) FMA_OF(float4) FMA_OF(float8) FMA_OF(float16)
#undef FMA_OF
#pragma OPENCL FP_CONTRACT OFF
// T_read16(i) (OpenCL-only kernels): the 4 vec4 from index i on as one float16. A float16 is 64-byte
// aligned by default, a vec4 index only 16: the load goes through this type of vec4 alignment.
typedef float16 __attribute__((aligned(16))) float16_at4;
// PoCL 3.0 as pip ships it links min, max, clamp and select as calls, never inlined: a depthwise 3x3 made
// 60 calls per work item. These inline versions keep the built-ins' meaning (min/max as fmin/fmax: a NaN
// operand yields the other one; select by the mask's sign bit for vectors, by non-zero for scalars).
// clamp's bounds are never NaN here (constants and indices), so it is one max and one min instruction
// (a NaN x still gives lo) instead of fmax/fmin's NaN tests, 8 instructions a vector.
#define GD_MINMAX(T) \
  inline T __attribute__((overloadable)) gd_min(T a, T b) { return (b < a || a != a) ? b : a; } \
  inline T __attribute__((overloadable)) gd_max(T a, T b) { return (a < b || a != a) ? b : a; } \
  inline T __attribute__((overloadable)) gd_clamp(T x, T lo, T hi) { x = x > lo ? x : lo; return x < hi ? x : hi; }
#define GD_MINMAX_V(T, S) GD_MINMAX(T) \
  inline T __attribute__((overloadable)) gd_min(T a, S b) { return gd_min(a, (T)(b)); } \
  inline T __attribute__((overloadable)) gd_max(T a, S b) { return gd_max(a, (T)(b)); } \
  inline T __attribute__((overloadable)) gd_clamp(T x, S lo, S hi) { return gd_clamp(x, (T)(lo), (T)(hi)); }
GD_MINMAX(int) GD_MINMAX(float) GD_MINMAX_V(int4, int)
GD_MINMAX_V(float4, float) GD_MINMAX_V(float8, float) GD_MINMAX_V(float16, float)
#undef GD_MINMAX
#undef GD_MINMAX_V
#undef min
#undef max
#undef clamp
#undef select
#define min(a, b) gd_min((a), (b))
#define max(a, b) gd_max((a), (b))
#define clamp(x, lo, hi) gd_clamp((x), (lo), (hi))
#define select(a, b, c) ((c) ? (b) : (a))
// C round() (halves away from zero), inline for the same reason: the fake-quant step after every int8 op
// calls it on every value. Below 2^23, adding and subtracting 2^23 rounds to nearest even (exact; nothing
// is contracted here); a tie that went down is then moved up.
#define GD_ROUND(T) inline T __attribute__((overloadable)) gd_round(T x) { \
    T a = x < (T)(0.0f) ? -x : x; \
    T r = a < (T)(8388608.0f) ? (a + (T)(8388608.0f)) - (T)(8388608.0f) : a; \
    r = r - a == (T)(-0.5f) ? r + (T)(1.0f) : r; \
    return x < (T)(0.0f) ? -r : r; \
  }
GD_ROUND(float) GD_ROUND(float4) GD_ROUND(float16)
#undef GD_ROUND
// QROUND(x, lo, hi) = ROUND(clamp(x, lo, hi)) for integer bounds below 2^22 in magnitude, a NaN giving lo:
// the fake-quant step of every int8 op. Truncating x + copysign(0.5, x) is C round() except within an ulp
// below a half (where x + 0.5 rounds up first), far inside the float emulation's own error against TFLite's
// integer kernels; it takes 7 vector instructions where clamp and gd_round take about 20.
// (Conversions through clang's __builtin_convertvector where the compiler has it: PoCL calls convert_T.)
#if defined(__has_builtin)
#if __has_builtin(__builtin_convertvector)
#define GD_CONVERT(x, T) __builtin_convertvector((x), T)
#endif
#endif
#ifndef GD_CONVERT
#define GD_CONVERT(x, T) convert_##T(x)
#endif
#define GD_QROUND(T, I, U) inline T __attribute__((overloadable)) gd_qround(T x, float lo, float hi) { \
    x = x >= (T)(lo) ? x : (T)(lo); \
    x = x <= (T)(hi) ? x : (T)(hi); \
    T h = as_##T((as_##U(x) & (U)(0x80000000u)) | (U)(0x3f000000u)); \
    return GD_CONVERT(GD_CONVERT(x + h, I), T); \
  }
GD_QROUND(float4, int4, uint4) GD_QROUND(float16, int16, uint16)
#undef GD_QROUND
#define FLT4 float4
#define INT4 int4
#define MAKE_FLT4(a, b, c, d) ((float4)((a), (b), (c), (d)))
#define MAKE_INT4(a, b, c, d) ((int4)((a), (b), (c), (d)))
#define SPLAT(x) ((float4)(x))
#define SPLAT16(x) ((float16)(x))
#define TO_INT(x) ((int)(x))
#define TO_FLT(x) ((float)(x))
#define TO_INT4(v) convert_int4(v)
#define TO_FLT4(v) convert_float4(v)
#define FABS(x) fabs(x)
#define RSQRT(x) rsqrt(x)
#define FMOD(x, y) fmod((x), (y))
#define ROUND(x) gd_round(x)
#define QROUND(x, lo, hi) gd_qround((x), (lo), (hi))
#define RINT(x) rint(x)
#define ATAN2(y, x) atan2((y), (x))
#define INF_F INFINITY
#define NAN_F NAN
float4 LT4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a < b); }
float4 LE4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a <= b); }
float4 GT4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a > b); }
float4 GE4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a >= b); }
float4 EQ4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a == b); }
float4 NE4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a != b); }
float4 SELECT4(float4 f, float4 t, float4 m) { return select(f, t, m != (float4)(0.0f)); }
float LANE(float4 v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
float4 ZERO_PAD(float4 v, int s, int c) {
  return select(v, (float4)(0.0f), (int4)(4 * s) + (int4)(0, 1, 2, 3) >= (int4)(c));
}
"""

_GL_PRELUDE = r"""#define FLT4 vec4
#define INT4 ivec4
#define MAKE_FLT4(a, b, c, d) vec4((a), (b), (c), (d))
#define MAKE_INT4(a, b, c, d) ivec4((a), (b), (c), (d))
#define SPLAT(x) vec4(x)
#define TO_INT(x) int(x)
#define TO_FLT(x) float(x)
#define TO_INT4(v) ivec4(v)
#define TO_FLT4(v) vec4(v)
#define FABS(x) abs(x)
#define RSQRT(x) inversesqrt(x)
// GLSL ES 3.1 has no fma(); the product is rounded before the add.
#define FMA(a, b, c) ((a) * (b) + (c))
#define RINT(x) roundEven(x)
#define ATAN2(y, x) atan((y), (x))
#define INF_F uintBitsToFloat(0x7f800000u)
#define NAN_F uintBitsToFloat(0x7fc00000u)
// C fmod, exact like OpenCL's: subtract |y| * 2^k, largest first; each step is exact (Sterbenz), and
// there are at most exponent(x) - exponent(y) + 1 of them (the bound only guards against a hang).
float FMOD(float x, float y) {
  if (isinf(x) || isnan(x) || isnan(y) || y == 0.0) return NAN_F;
  float ay = abs(y);
  float r = abs(x);
  for (int it = 0; it < 300 && r >= ay; it++) {
    int er;
    int ey;
    frexp(r, er);
    frexp(ay, ey);
    float d = ldexp(ay, er - ey);
    if (d > r) d *= 0.5;
    r -= d;
  }
  return x < 0.0 ? -r : r;
}
vec4 FMOD(vec4 x, vec4 y) { return vec4(FMOD(x.x, y.x), FMOD(x.y, y.y), FMOD(x.z, y.z), FMOD(x.w, y.w)); }
// C round(): halves away from zero (GLSL round() leaves the direction to the implementation).
float ROUND(float x) { float t = trunc(x); return t + sign(x) * step(0.5, abs(x - t)); }
vec4 ROUND(vec4 x) { vec4 t = trunc(x); return t + sign(x) * step(0.5, abs(x - t)); }
#define QROUND(x, lo, hi) ROUND(clamp((x), (lo), (hi)))
vec4 LT4(vec4 a, vec4 b) { return vec4(lessThan(a, b)); }
vec4 LE4(vec4 a, vec4 b) { return vec4(lessThanEqual(a, b)); }
vec4 GT4(vec4 a, vec4 b) { return vec4(greaterThan(a, b)); }
vec4 GE4(vec4 a, vec4 b) { return vec4(greaterThanEqual(a, b)); }
vec4 EQ4(vec4 a, vec4 b) { return vec4(equal(a, b)); }
vec4 NE4(vec4 a, vec4 b) { return vec4(notEqual(a, b)); }
vec4 SELECT4(vec4 f, vec4 t, vec4 m) { return mix(f, t, notEqual(m, vec4(0.0))); }
float LANE(vec4 v, int k) { return v[k]; }
vec4 ZERO_PAD(vec4 v, int s, int c) {
  return mix(v, vec4(0.0), greaterThanEqual(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(c)));
}
"""


def _geometry(spec: KernelSpec) -> str:
    lines = [f"#define GRID_X {spec.grid[0]}", f"#define GRID_Y {spec.grid[1]}", f"#define GRID_Z {spec.grid[2]}"]
    for a in spec.args:
        if a.shape is None:
            continue
        t = a.name
        b, h, w, c = a.shape
        lines += [f"#define {t}_B {b}", f"#define {t}_H {h}", f"#define {t}_W {w}", f"#define {t}_C {c}",
                  f"#define {t}_S {a.slices}",
                  f"#define {t}_idx(b, y, x, s) (((((b) * {t}_S + (s)) * {t}_H + (y)) * {t}_W) + (x))"]
    lines += [f"#define {k} {literal(v)}" for k, v in spec.defines.items()]
    return "\n".join(lines) + "\n"


def _cl_param(spec: KernelSpec, a: Arg) -> str:
    const = "const " if a.role != "out" else ""
    elem = "float4" if spec.arg_precision(a) == "fp32" else "half"
    return f"__global {const}{elem}* restrict {a.name}_buf"


def _cl_accessors(spec: KernelSpec, a: Arg) -> str:
    t = a.name
    if spec.arg_precision(a) == "fp32":
        lines = [f"#define {t}_read(i) ({t}_buf[(i)])",
                 f"#define {t}_read1(j) (((__global const float*){t}_buf)[(j)])",
                 f"#define {t}_read16(i) (*(__global const float16_at4*)({t}_buf + (i)))"]
        write = f"#define {t}_write(i, v) ({t}_buf[(i)] = (v))"
    else:
        lines = [f"#define {t}_read(i) vload_half4((i), {t}_buf)", f"#define {t}_read1(j) vload_half((j), {t}_buf)",
                 f"#define {t}_read16(i) vload_half16(0, {t}_buf + 4 * (i))"]
        write = f"#define {t}_write(i, v) vstore_half4_rte((v), (i), {t}_buf)"
    if a.role == "out":
        lines.append(_wrapped_write(spec, a, write))
        if not _finishes(spec, a):
            lines.append(f"#define {t}_store(i, v) {t}_write((i), (v))")
    return "\n".join(lines) + "\n"


def _finishes(spec: KernelSpec, a: Arg) -> bool:
    """Whether writes to ``a`` go through a finisher: the fused post-ops, and zeroing the padding lanes of
    a last slice (so a tensor's padding channels stay zero whatever the kernel computes there)."""
    return a.role == "out" and (spec.postop_arg == a.name or (a.shape is not None and a.shape[3] % 4 != 0))


def _wrapped_write(spec: KernelSpec, a: Arg, write: str) -> str:
    if not _finishes(spec, a):
        return write
    t = a.name
    raw = write.replace(f"{t}_write(", f"{t}_store(", 1)
    return raw + f"\n#define {t}_write(i, v) {t}_store((i), {t}_finish((v), (i) BUFS))"


def _finisher_prototypes(spec: KernelSpec) -> str:
    """Declarations of the finishers, placed before the helpers: a helper may write an output (the
    finishers themselves come after the helpers, since they call the post-ops the helpers define)."""
    return "".join(f"FLT4 {a.name}_finish(FLT4 v, int i BUFS_DECL);\n" for a in spec.args if _finishes(spec, a))


def _cl_wide_finishers(spec: KernelSpec, prototypes: bool = False) -> str:
    """OpenCL: ``float16 t_finish16(float16 v, int4 i BUFS_DECL)`` per out argument, what ``t_write`` does
    before it stores, for 4 vec4 at indices i.x .. i.w at once; a wide kernel stores the parts with
    ``t_store``. Every index must lie inside the tensor (a post-op operand is read there)."""
    out = []
    for a in spec.args:
        if a.role != "out":
            continue
        t = a.name
        if not _finishes(spec, a):
            if prototypes:  # a macro, so that a kernel's index arithmetic for it is dead code
                out.append(f"#define {t}_finish16(v, ...) (v)\n")
            continue
        head = f"__attribute__((always_inline)) inline float16 {t}_finish16(float16 v, int4 i BUFS_DECL)"
        if prototypes:
            out.append(head + ";\n")
            continue
        parts = ("s0123", "s4567", "s89ab", "scdef")
        if spec.postop_arg == t and spec.wide_postop:
            body = "v = postop16(v, i BUFS); "
            if a.shape is not None and a.shape[3] % 4:
                s4 = f"(i / ({t}_H * {t}_W)) % {t}_S"
                body += (f"int4 s = {s4}; return (float16)(" + ", ".join(
                    f"ZERO_PAD(v.{p}, s.{c}, {t}_C)" for p, c in zip(parts, "xyzw")) + ");")
            else:
                body += "return v;"
        else:
            body = "return (float16)(" + ", ".join(
                f"{t}_finish(v.{p}, i.{c} BUFS)" for p, c in zip(parts, "xyzw")) + ");"
        out.append(f"{head} {{ {body} }}\n")
    return "".join(out)


def _finishers(spec: KernelSpec) -> str:
    out = []
    for a in spec.args:
        if not _finishes(spec, a):
            continue
        t = a.name
        body = "v = postop(v, i BUFS); " if spec.postop_arg == t else ""
        if a.shape is not None and a.shape[3] % 4:
            body += f"v = ZERO_PAD(v, (i / ({t}_H * {t}_W)) % {t}_S, {t}_C); "
        out.append(f"FLT4 {t}_finish(FLT4 v, int i BUFS_DECL) {{ {body}return v; }}\n")
    return "".join(out)


def opencl_source(spec: KernelSpec) -> str:
    """The complete OpenCL C 1.2 program for ``spec``: one ``__kernel`` named ``spec.name``."""
    params = [_cl_param(spec, a) for a in spec.args]
    parts = [_CL_PRELUDE, _geometry(spec)]
    parts += [_cl_accessors(spec, a) for a in spec.args]
    parts.append("#define BUFS_DECL " + "".join(f", {p}" for p in params) + "\n")
    parts.append("#define BUFS " + "".join(f", {a.name}_buf" for a in spec.args) + "\n")
    parts.append(_finisher_prototypes(spec) + _cl_wide_finishers(spec, prototypes=True))
    parts.append(spec.helpers.rstrip() + "\n" if spec.helpers.strip() else "")
    parts.append(_finishers(spec) + _cl_wide_finishers(spec))
    parts.append(
        f"__kernel void {spec.name}({', '.join(params) if params else 'void'}) {{\n"
        "  const int GID_X = get_global_id(0);\n"
        "  const int GID_Y = get_global_id(1);\n"
        "  const int GID_Z = get_global_id(2);\n"
        "  if (GID_X >= GRID_X || GID_Y >= GRID_Y || GID_Z >= GRID_Z) return;\n"
        "  {\n" + spec.body.rstrip() + "\n  }\n}\n")
    return "".join(parts)


def _gl_buffer(spec: KernelSpec, binding: int, a: Arg, texture: bool) -> str:
    t = a.name
    if texture:
        # the storage precision is the texture's format, not the shader's: the comment keeps the text (a
        # compiled program's identity) apart between precisions
        return f"layout(binding = {binding}) uniform highp samplerBuffer {t}_buf;  // {spec.arg_precision(a)}\n"
    access = "readonly restrict" if a.role != "out" else "restrict"
    elem = "vec4" if spec.arg_precision(a) == "fp32" else "uvec2"
    return f"layout(std430, binding = {binding}) {access} buffer {t}_ssbo {{ {elem} {t}_buf[]; }};\n"


def _gl_accessors(spec: KernelSpec, a: Arg, texture: bool) -> str:
    t = a.name
    if texture:  # texelFetch widens an RGBA16F texel to float32 exactly
        return (f"#define {t}_read(i) texelFetch({t}_buf, (i))\n"
                f"#define {t}_read1(j) (texelFetch({t}_buf, (j) >> 2)[(j) & 3])\n")
    if spec.arg_precision(a) == "fp32":
        lines = [f"#define {t}_read(i) ({t}_buf[(i)])", f"#define {t}_read1(j) ({t}_buf[(j) >> 2][(j) & 3])"]
        write = f"#define {t}_write(i, v) ({t}_buf[(i)] = (v))"
    else:
        # two halves per uint: packHalf2x16 / unpackHalf2x16 do the fp16 conversion
        read = (f"vec4 {t}_read(int i) {{ uvec2 p = {t}_buf[i]; "
                "return vec4(unpackHalf2x16(p.x), unpackHalf2x16(p.y)); }")
        lines = [read,
                 f"float {t}_read1(int j) {{ return unpackHalf2x16({t}_buf[j >> 2][(j >> 1) & 1])[j & 1]; }}"]
        write = f"void {t}_write(int i, vec4 v) {{ {t}_buf[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)); }}"
    if a.role == "out":
        lines.append(_wrapped_write(spec, a, write))
    return "\n".join(lines) + "\n"


def glsl_source(spec: KernelSpec, local_size: tuple[int, int, int], textures: frozenset[int] = frozenset()) -> str:
    """The complete GLSL ES 3.10 compute shader for ``spec`` with the given work-group size; buffer
    ``i`` of ``spec.args`` is bound at SSBO binding ``i``, or, for ``i`` in ``textures`` (arguments it
    only reads), as a buffer texture (GL_EXT_texture_buffer) at texture unit ``i``."""
    lx, ly, lz = local_size
    extension = "#extension GL_EXT_texture_buffer : require\n" if textures else ""
    parts = ["#version 310 es\n" + extension + "precision highp float;\nprecision highp int;\n",
             f"layout(local_size_x = {lx}, local_size_y = {ly}, local_size_z = {lz}) in;\n",
             _GL_PRELUDE, _geometry(spec)]
    parts += [_gl_buffer(spec, i, a, i in textures) for i, a in enumerate(spec.args)]
    parts += [_gl_accessors(spec, a, i in textures) for i, a in enumerate(spec.args)]
    parts.append("#define BUFS_DECL\n#define BUFS\n")
    parts.append(_finisher_prototypes(spec))
    parts.append(spec.helpers.rstrip() + "\n" if spec.helpers.strip() else "")
    parts.append(_finishers(spec))
    parts.append(
        "void main() {\n"
        "  int GID_X = int(gl_GlobalInvocationID.x);\n"
        "  int GID_Y = int(gl_GlobalInvocationID.y);\n"
        "  int GID_Z = int(gl_GlobalInvocationID.z);\n"
        "  if (GID_X >= GRID_X || GID_Y >= GRID_Y || GID_Z >= GRID_Z) return;\n"
        "  {\n" + spec.body.rstrip() + "\n  }\n}\n")
    return "".join(parts)
