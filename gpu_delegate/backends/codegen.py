"""One kernel source, two APIs: wrap a kernel body written in the dialect of kernels/README.md into a
complete OpenCL C 1.2 program or a GLSL ES 3.10 compute shader.

A kernel is a ``KernelSpec``. Every argument is a buffer of 4-float vectors; an argument with a BHWC
``shape`` is a PHWC4 tensor and gets its geometry (``t_B``, ``t_H``, ``t_W``, ``t_C``, ``t_S``) and an index
macro ``t_idx(b, y, x, s)``. Everything else the kernel needs (shapes, strides, flags) is a ``#define``, so
the generated text alone determines the program; it is also the cache key for compiled binaries.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..lowering.plan import PostOp
from ..phwc4 import slices

ROLES = ("in", "out", "const")
PRECISIONS = ("fp32", "fp16")

# Kernel sources live in the top-level kernels/ folder of a checkout; an installed package may carry them
# next to its modules instead. One folder per language, and each language's files end with its own suffix.
_KERNEL_DIRS = (Path(__file__).resolve().parents[2] / "kernels", Path(__file__).resolve().parents[1] / "kernels")
LANGUAGES = {"dialect": ".dialect", "opencl": ".cl", "glsl": ".glsl"}
# The API each language runs on, and the languages a file of each language may include.
API_LANGUAGE = {"cl": "opencl", "gl": "glsl"}
_INCLUDABLE = {"dialect": ("dialect",), "opencl": ("dialect", "opencl"), "glsl": ("dialect", "glsl")}
# The line that separates a kernel file's helper functions (above) from its body (below).
BODY_MARKER = "// @body"
INCLUDE_MARKER = "@include"
# A kernel file whose text works with its tensors' channel counts (t_C, t_S) and its grid as values known only at
# run time says so in a line "// @runtime_channels" (runtime_channels); "// @runtime_channels crowded": only where a
# plan has more distinct kernels than the driver keeps loaded (the constants make it faster).
RUNTIME_MARKER = "@runtime_channels"
CROWDED = "crowded"
# A kernel file whose work items share memory says so in lines "// @shared NAME SIZE": an array of SIZE (a define or
# a number) vec4s that the whole work group reads and writes (shared_arrays), between BARRIER()s. Such a kernel
# runs as one work group: its grid is its work-group size.
SHARED_MARKER = "@shared"

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
    placed: (first slice, slices) where the tensor is a run of slices of a larger PHWC4 tensor of the same B, H
    and W that the buffer holds (a concatenation its producers write in place, lowering/place_concat.py): every
    access maps the tensor's own index there. None: the tensor is the buffer's, from index 0.
    codes: the buffer holds the 8-bit tensor's codes, a 32-bit word a vec4 (a quarter of its vec4), which its reads
    decode with the defines ``<name>_CODES_SCALE`` and ``<name>_CODES_OFF`` (PostOp.codes_of; OpenCL only).
    """

    name: str
    role: str
    shape: tuple[int, int, int, int] | None = None
    precision: str | None = None
    placed: tuple[int, int] | None = None
    codes: bool = False

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
        if self.placed is not None:
            first, total = (int(v) for v in self.placed)
            if self.shape is None or first < 0 or first + self.slices > total:
                raise ValueError(f"argument {self.name!r}: slices {first}..{first + self.slices - 1} do not lie in "
                                 f"a tensor of {total} slices")
            object.__setattr__(self, "placed", (first, total))

    @property
    def slices(self) -> int:
        return slices(self.shape[3]) if self.shape else 0

    @property
    def n_vec4(self) -> int:
        """vec4 count of a PHWC4 tensor argument (B * S * H * W); 0 for a plain buffer."""
        if self.shape is None:
            return 0
        b, h, w, _ = self.shape
        return -(-b * self.slices * h * w // 4) if self.codes else b * self.slices * h * w


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
    #: the kernel's text works with its tensors' channel counts and its grid as run-time values: an API that takes
    #: them as kernel arguments (OpenCL, ``runtime_values``) runs layers of other channel counts with the same
    #: compiled program (kernels/README.md)
    runtime_channels: bool = False
    #: the kernel may be made generic in its channels (``runtime_channels``) where a plan is crowded
    generic_when_crowded: bool = False
    #: the names among ``defines`` that are constants of the arithmetic, which no preprocessor test reads: the
    #: post-ops' scales, bounds and offsets (render_postops), an op's own (KernelCall.constants)
    constants: tuple[str, ...] = ()
    #: an API that takes them as kernel arguments (OpenCL, ``runtime_values``) runs layers that differ in nothing
    #: else (an 8-bit model's layers of one shape, each on its own grid) with the same compiled program
    runtime_constants: bool = False
    #: (name, vec4 count) of the arrays the work items of a group share (shared_arrays): the kernel then runs as
    #: one work group, its local_size its grid
    shared: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "kernel name")
        if self.precision not in PRECISIONS:
            raise ValueError(f"kernel {self.name}: precision {self.precision!r} is not one of {PRECISIONS}")
        self.grid = _three_sizes(self.grid, f"kernel {self.name}: grid")
        if self.local_size is not None:
            self.local_size = _three_sizes(self.local_size, f"kernel {self.name}: local_size")
        self.shared = tuple((str(name), str(size)) for name, size in self.shared)
        for name, _ in self.shared:
            _check_name(name, "shared array name")
        if self.shared and self.local_size != self.grid:
            raise ValueError(f"kernel {self.name} shares memory across its work items, so it runs as one work group: "
                             f"its local_size {self.local_size} must be its grid {self.grid}")
        if self.shared and self.runtime_channels:
            raise ValueError(f"kernel {self.name}: a kernel of one work group sizes its shared arrays by constants")
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
        for k in self.constants:
            if isinstance(self.defines.get(k), (str, type(None))):
                raise ValueError(f"kernel {self.name}: constant {k!r} is not a number among its defines")

    def number(self, name: str) -> int | float:
        """Define ``name``, one of ``constants`` (numbers, as __post_init__ checked)."""
        value = self.defines[name]
        assert not isinstance(value, str)
        return value

    def arg_precision(self, arg: Arg) -> str:
        return arg.precision or self.precision


def _three_sizes(values: Iterable[int], what: str) -> tuple[int, int, int]:
    """``values`` (any sequence of ints: a list from JSON, numpy ints) as a tuple of 3 positive Python ints."""
    sizes = tuple(int(v) for v in values)
    if len(sizes) != 3 or min(sizes) < 1:
        raise ValueError(f"{what} {sizes} must be 3 positive sizes")
    return sizes


_ARG_SUFFIXES = ("_B", "_H", "_W", "_C", "_S", "_FULL", "_HALF", "_FIRST", "_idx", "_slice", "_batch", "_at", "_read",
                 "_read1", "_read16", "_write", "_store", "_finish", "_finish16")
_RESERVED = ("GRID_X", "GRID_Y", "GRID_Z", "GID_X", "GID_Y", "GID_Z", "GID_FLAT", "BUFS", "BUFS_DECL", "FLT4",
             "INT4", "MAKE_FLT4", "MAKE_INT4", "SPLAT", "TO_INT", "TO_FLT", "TO_INT4", "TO_FLT4", "FABS", "RSQRT",
             "FMOD", "FMA", "ROUND", "RINT", "ATAN2", "LT4", "LE4", "GT4", "GE4", "EQ4", "NE4", "SELECT4",
             "LANE", "ZERO_PAD", "BARRIER")


def _kernel_file(relative: str) -> Path | None:
    return next((d / relative for d in _KERNEL_DIRS if (d / relative).is_file()), None)


def _with_includes(text: str, language: str, seen: tuple[str, ...] = ()) -> str:
    """``text`` with every ``// @include FOLDER/FILE`` line replaced by that file of kernels/ (itself expanded).
    A file includes only what its language can compile: the dialect includes dialect files, an API's own
    file also that API's."""
    out = []
    for line in text.splitlines(keepends=True):
        words = line.split()
        if words[:2] != ["//", INCLUDE_MARKER]:
            out.append(line)
            continue
        relative = words[2] if len(words) == 3 else ""
        folder = relative.split("/", 1)[0]
        if folder not in _INCLUDABLE[language] or not relative.endswith(".inc" + LANGUAGES[folder]):
            raise FileNotFoundError(f"kernel include {line.strip()!r}: a {language} file includes only "
                                    f"{' or '.join(f'{f}/*.inc{LANGUAGES[f]}' for f in _INCLUDABLE[language])}")
        path = _kernel_file(relative)
        if path is None or relative in seen:
            raise FileNotFoundError(f"kernel include {line.strip()!r}: no such file in kernels/, or a cycle")
        out.append(_with_includes(path.read_text(), folder, (*seen, relative)))
    return "".join(out)


@functools.cache
def kernel_text(relative: str) -> str:
    """The text of ``kernels/<relative>`` with its includes expanded (a prelude, for one)."""
    folder = relative.split("/", 1)[0]
    path = _kernel_file(relative)
    if folder not in LANGUAGES or path is None:
        raise FileNotFoundError(f"kernel source {relative} not found in {', '.join(str(d) for d in _KERNEL_DIRS)}")
    return _with_includes(path.read_text(), folder)


def load_kernel(name: str, language: str = "dialect") -> tuple[str, str]:
    """(helpers, body) of ``kernels/<language>/<name><suffix>``: the shared dialect by default, or a file
    written for one API alone ("opencl", "glsl"). The text above a ``// @body`` line is file-scope helper
    code, the text below it the body; a file without the marker is all body. A line
    ``// @include FOLDER/FILE`` stands for the text of ``kernels/FOLDER/FILE`` (helpers several kernels share)."""
    if language not in LANGUAGES:
        raise ValueError(f"kernel language {language!r} is not one of {sorted(LANGUAGES)}")
    lines = kernel_text(f"{language}/{name}{LANGUAGES[language]}").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == BODY_MARKER:
            return "".join(lines[:i]), "".join(lines[i + 1:])
    return "", "".join(lines)


@functools.cache
def runtime_channels(name: str, language: str = "dialect") -> str | None:
    """What the ``// @runtime_channels [crowded]`` line of ``kernels/<language>/<name><suffix>`` says: "" (its text
    works with its tensors' channel counts and its grid as run-time values), "crowded" (it can, but is faster with
    constants), or None (no such line). Read once, as kernel_text is."""
    path = _kernel_file(f"{language}/{name}{LANGUAGES.get(language, '')}")
    if path is None:
        raise FileNotFoundError(f"kernel source {language}/{name} not found")
    for line in path.read_text().splitlines():
        words = line.split()
        if words[:2] == ["//", RUNTIME_MARKER]:
            return " ".join(words[2:])
    return None


@functools.cache
def shared_arrays(name: str, language: str = "dialect") -> tuple[tuple[str, str], ...]:
    """The arrays the ``// @shared NAME SIZE`` lines of ``kernels/<language>/<name><suffix>`` declare, in order:
    (name, vec4 count as a define or a number). Read once, as kernel_text is."""
    path = _kernel_file(f"{language}/{name}{LANGUAGES.get(language, '')}")
    if path is None:
        raise FileNotFoundError(f"kernel source {language}/{name} not found")
    arrays = []
    for line in path.read_text().splitlines():
        words = line.split()
        if words[:2] == ["//", SHARED_MARKER]:
            if len(words) != 4:
                raise ValueError(f"{path}: a shared array is declared as '// {SHARED_MARKER} NAME SIZE', not {line!r}")
            arrays.append((words[2], words[3]))
    return tuple(arrays)


def runtime_values(spec: KernelSpec) -> list[tuple[str, int | float]]:
    """The scalar arguments an OpenCL kernel of ``spec`` takes after its buffers, by name, in order: where the
    spec says so (``runtime_channels``), its grid and each tensor's channel count and slices (ints); the first
    slice of each placed tensor (``t_FIRST``: kernels writing the parts of one concatenation share their
    program); and where the spec says so (``runtime_constants``), its constants (``constants``: floats, a
    lookup's offset an int)."""
    values: list[tuple[str, int | float]] = []
    if spec.runtime_channels:
        values += list(zip(("GRID_X", "GRID_Y", "GRID_Z"), spec.grid))
        values += [v for a in spec.args if a.shape is not None
                   for v in ((f"{a.name}_C", a.shape[3]), (f"{a.name}_S", a.slices))]
    values += [(f"{a.name}_FIRST", a.placed[0]) for a in spec.args if a.placed is not None]
    if spec.runtime_constants:
        values += [(name, spec.number(name)) for name in spec.constants]
    return values


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


# -- the dialect, per API (the preludes are kernels/opencl/prelude.inc.cl and kernels/glsl/prelude.inc.glsl) ----

def _geometry(spec: KernelSpec, at_run_time: frozenset[str] = frozenset()) -> str:
    """The defines of ``spec``: grid, each tensor's geometry, the spec's own; those named in ``at_run_time``
    are left out (they are the kernel's int arguments of those names)."""
    values: list[tuple[str, int | float | str]] = [*zip(("GRID_X", "GRID_Y", "GRID_Z"), spec.grid)]
    lines = []
    for a in spec.args:
        if a.shape is None:
            continue
        t = a.name
        b, h, w, c = a.shape
        values += [(f"{t}_B", b), (f"{t}_H", h), (f"{t}_W", w), (f"{t}_C", c), (f"{t}_S", a.slices)]
        # t_slice(i), t_batch(i): the slice and batch of vec4 (or int4 of vec4) i; with one batch, no division
        # by t_S (a run-time value in some kernels). t_FULL: the channels fill whole slices (a constant for #if);
        # t_HALF: fp16 storage
        plane = f"((i) / ({t}_H * {t}_W))"
        lines += [f"#define {t}_idx(b, y, x, s) (((((b) * {t}_S + (s)) * {t}_H + (y)) * {t}_W) + (x))",
                  f"#define {t}_slice(i) {plane if b == 1 else f'({plane} % {t}_S)'}",
                  f"#define {t}_batch(i) {'0' if b == 1 else f'({plane} / {t}_S)'}",
                  f"#define {t}_FULL {int(c % 4 == 0)}",
                  f"#define {t}_HALF {int(spec.arg_precision(a) == 'fp16')}"]
        if a.placed is not None:
            values.append((f"{t}_FIRST", a.placed[0]))
            lines.append(f"#define {t}_at(i) {_placed_index(a)}")
    values += list(spec.defines.items())
    lines = [f"#define {k} {literal(v)}" for k, v in values if k not in at_run_time] + lines
    return "\n".join(lines) + "\n"


_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(?:el)?if\b(.*)$", re.M)
_DEFINITION = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(.*)$", re.M)


def _check_run_time_names(spec: KernelSpec, text: str, names: set[str]) -> None:
    """Refuse a kernel whose preprocessor conditions read one of its run-time values (directly or through a
    macro): the preprocessor would read the unknown name as 0, silently."""
    found = _condition_reading(text, frozenset(names))
    if found is not None:
        condition, used = found
        raise ValueError(f"kernel {spec.name}: '#if{condition}' reads {', '.join(sorted(used))}, which the "
                         "kernel takes at run time (runtime_values)")


@functools.lru_cache(maxsize=1024)
def _condition_reading(text: str, names: frozenset[str]) -> tuple[str, frozenset[str]] | None:
    """The first ``#if``/``#elif`` condition of ``text`` that reads one of ``names``, directly or through the
    macros ``text`` defines, and the names it reads; None if there is none. (Cached: a plan asks for the text of a
    kernel several times.)"""
    code = _COMMENT.sub(" ", text).replace("\\\n", " ")
    used_by: dict[str, set[str]] = {}  # a name -> the macros whose definitions use it
    for macro, body in _DEFINITION.findall(code):
        for word in set(_IDENTIFIER.findall(body)):
            used_by.setdefault(word, set()).add(macro)
    reads: dict[str, set[str]] = {}  # a name -> the run-time values it stands for
    for root in names:
        todo, seen = [root], {root}
        while todo:
            name = todo.pop()
            reads.setdefault(name, set()).add(root)
            for macro in used_by.get(name, ()):
                if macro not in seen:
                    seen.add(macro)
                    todo.append(macro)
    for condition in _CONDITIONAL.findall(code):
        used = set().union(*(reads.get(word, set()) for word in _IDENTIFIER.findall(condition)))
        if used:
            return condition, frozenset(used)
    return None


def _placed_index(a: Arg) -> str:
    """The buffer's vec4 index of vec4 ``i`` of a placed tensor: batch b's slices start at slice ``t_FIRST`` of the
    larger tensor's batch b (one addition when there is one batch)."""
    assert a.shape is not None and a.placed is not None
    b, h, w, _ = a.shape
    t, total = a.name, a.placed[1]
    shift = f"(i) + {t}_FIRST * {h * w}"
    if b == 1 or total == a.slices:
        return f"({shift})"
    return f"({shift} + ((i) / ({t}_S * {h * w})) * ({total} - {t}_S) * {h * w})"


def _at(a: Arg, index: str) -> str:
    """``index`` (a vec4 index of ``a``'s own tensor) as an index into its buffer."""
    return f"{a.name}_at({index})" if a.placed is not None else index


def _at1(a: Arg, index: str) -> str:
    """``index`` (a float index of ``a``'s own tensor) as a float index into its buffer."""
    return f"(4 * {a.name}_at(({index}) >> 2) + (({index}) & 3))" if a.placed is not None else index


def _cl_param(spec: KernelSpec, a: Arg) -> str:
    const = "const " if a.role != "out" else ""
    elem = "float4" if spec.arg_precision(a) == "fp32" else "half"
    return f"__global {const}{elem}* restrict {a.name}_buf"


def _cl_accessors(spec: KernelSpec, a: Arg) -> str:
    t = a.name
    i, j = _at(a, "(i)"), _at1(a, "(j)")
    if a.codes:  # an 8-bit tensor read from its codes, a word a vec4 (PostOp.codes_of)
        word = f"((__global const uint*){t}_buf)"
        # what a post-op reads its operand with: a vec4 at index i, and (postop16) the 4 vec4 at the indices of int4
        # i4, a pixel's 4 slices, their words decoded as one
        return (f"#define {t}_read(i) gd_decode4({word}[{i}], {t}_CODES_SCALE, {t}_CODES_OFF)\n"
                f"#define {t}_read4(i4) gd_decode16((uint4)({word}[(i4).x], {word}[(i4).y], {word}[(i4).z], "
                f"{word}[(i4).w]), {t}_CODES_SCALE, {t}_CODES_OFF)\n")
    # read16: 4 vec4 along a row, which never leave one batch's run of slices
    if spec.arg_precision(a) == "fp32":
        lines = [f"#define {t}_read(i) ({t}_buf[{i}])",
                 f"#define {t}_read1(j) (((__global const float*){t}_buf)[{j}])",
                 f"#define {t}_read16(i) (*(__global const float16_at4*)({t}_buf + {i}))"]

        def store(index: str, v: str) -> str:
            return f"({t}_buf[{_at(a, index)}] = {v})"
    else:
        # GD_VLOAD_HALF*, GD_VSTORE_HALF4: vload_half*, vstore_half4_rte, or the prelude's own on a CPU
        lines = [f"#define {t}_read(i) GD_VLOAD_HALF4({i}, {t}_buf)",
                 f"#define {t}_read1(j) GD_VLOAD_HALF({j}, {t}_buf)",
                 f"#define {t}_read16(i) GD_VLOAD_HALF16({t}_buf + 4 * {i})"]

        def store(index: str, v: str) -> str:
            return f"GD_VSTORE_HALF4({v}, {_at(a, index)}, {t}_buf)"
    if a.role != "out":
        return "\n".join(lines) + "\n"
    if any(b.name == f"{t}_dense" for b in spec.args):
        # an output the host reads, which kernels of the plan read too: each store also stores the vec4 at its place
        # in the dense BHWC order, in t_dense, a float4 buffer (lowering/dense_copies.py: t_C is a multiple of 4)
        lines.append(f"#define {t}_dense_of(i) {_dense_index(a)}")
        plain = store

        def store(index: str, v: str) -> str:
            value = f"{t}_d_"
            return (f"do {{ float4 {value} = {v}; {plain(index, value)}; "
                    f"{t}_dense_buf[{t}_dense_of({index})] = {value}; }} while (0)")
    # t_store16(i4, v, n): the first n (of 4) vec4 of float16 v at indices i4.x, i4.y, ... as they are (the wide
    # kernels' stores, after t_finish16)
    v16, i4, n = f"{t}_v16_", f"{t}_i4_", f"{t}_n_"
    parts = list(zip(("s0123", "s4567", "s89ab", "scdef"), "xyzw"))
    head = f"#define {t}_store16(i4, v, n) do {{ float16 {v16} = (v); int4 {i4} = (i4); int {n} = (n); "
    if any(b.name == f"{t}_codes" for b in spec.args):
        # an 8-bit tensor that integer convolutions read (ops/conv.py emit_conv_int8): each store also stores the
        # word of its codes at the vec4's index (prelude's gd_code4, gd_code16; t_QINV, t_QOFF their constants); only
        # the word where nothing reads the values (define t_CODES_ONLY: lowering/codes_only.py) unless the kernel
        # reads back what it stored
        codes = f"((__global uint*){t}_codes_buf)"
        values = not spec.defines.get(f"{t}_CODES_ONLY") or f"{t}_read" in spec.helpers + spec.body
        write = (f"#define {t}_write(i, v) do {{ float4 {t}_v_ = (v); "
                 + (f"{store('(i)', f'{t}_v_')}; " if values else "")
                 + f"{codes}[i] = gd_code4({t}_v_, {t}_QINV, {t}_QOFF); }} while (0)")
        store16 = head + f"uint4 {t}_w4_ = gd_code16({v16}, {t}_QINV, {t}_QOFF); " + " ".join(
            f"if ({n} > {k}) {{ " + (f"{store(f'{i4}.{c}', f'{v16}.{p}')}; " if values else "")
            + f"{codes}[{i4}.{c}] = {t}_w4_.{c}; }}" for k, (p, c) in enumerate(parts)) + " } while (0)"
    else:
        write = f"#define {t}_write(i, v) {store('(i)', '(v)')}"
        store16 = head + " ".join(f"if ({n} > {k}) {store(f'{i4}.{c}', f'{v16}.{p}')};"
                                  for k, (p, c) in enumerate(parts)) + " } while (0)"
    lines.append(_wrapped_write(spec, a, write))
    if not _finishes(spec, a):
        lines.append(f"#define {t}_store(i, v) {t}_write((i), (v))")
    lines.append(store16)
    return "\n".join(lines) + "\n"


def _dense_index(a: Arg) -> str:
    """The vec4 index in the dense BHWC order of PHWC4 vec4 ``i`` of ``a`` (whole slices: no padding lanes)."""
    assert a.shape is not None
    t, plane = a.name, f"({a.name}_H * {a.name}_W)"
    if a.shape[0] == 1:
        return f"(((i) % {plane}) * {t}_S + (i) / {plane})"
    return f"((((i) / {plane} / {t}_S) * {plane} + (i) % {plane}) * {t}_S + ((i) / {plane}) % {t}_S)"


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
        head = f"__attribute__((always_inline)) inline float16 {t}_finish16(float16 v, int4 i BUFS_DECL)"
        if not _finishes(spec, a):
            # nothing to apply: inlined, the call's index arithmetic is dead code (a variadic macro would do
            # without inlining, but NVIDIA's OpenCL compiler refuses variadic macros)
            if prototypes:
                out.append(f"{head} {{ return v; }}\n")
            continue
        if prototypes:
            out.append(head + ";\n")
            continue
        parts = ("s0123", "s4567", "s89ab", "scdef")
        if spec.postop_arg == t and spec.wide_postop:
            body = "v = postop16(v, i BUFS); "
            if a.shape is not None and a.shape[3] % 4:
                body += (f"int4 s = {t}_slice(i); return (float16)(" + ", ".join(
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
            body += f"v = ZERO_PAD(v, {t}_slice(i), {t}_C); "
        out.append(f"FLT4 {t}_finish(FLT4 v, int i BUFS_DECL) {{ {body}return v; }}\n")
    return "".join(out)


def _bounds_check(spec: KernelSpec) -> str:
    """The return of the work items past the grid, where the dispatch rounds it up to whole groups. A kernel of one
    work group (shared arrays) has none past its grid, and none may return before a barrier the others wait at."""
    return "" if spec.shared else "  if (GID_X >= GRID_X || GID_Y >= GRID_Y || GID_Z >= GRID_Z) return;\n"


def opencl_source(spec: KernelSpec, entry: str | None = None, prelude: bool = True) -> str:
    """The complete OpenCL C 1.2 program for ``spec``: one ``__kernel`` named ``entry`` (default
    ``spec.name``); without ``prelude``, the part after the prelude (a section of ``opencl_bundle``)."""
    scalars = runtime_values(spec)
    at_run_time = [name for name, _ in scalars]
    params = [_cl_param(spec, a) for a in spec.args] + [
        f"const {'float' if isinstance(value, float) else 'int'} {name}" for name, value in scalars]
    names = [f"{a.name}_buf" for a in spec.args] + at_run_time
    parts = [kernel_text("opencl/prelude.inc.cl") if prelude else "", _geometry(spec, frozenset(at_run_time))]
    parts += [_cl_accessors(spec, a) for a in spec.args]
    parts.append("#define BUFS_DECL " + "".join(f", {p}" for p in params) + "\n")
    parts.append("#define BUFS " + "".join(f", {n}" for n in names) + "\n")
    parts.append(_finisher_prototypes(spec) + _cl_wide_finishers(spec, prototypes=True))
    parts.append(spec.helpers.rstrip() + "\n" if spec.helpers.strip() else "")
    parts.append(_finishers(spec) + _cl_wide_finishers(spec))
    parts.append(
        f"__kernel void {entry or spec.name}({', '.join(params) if params else 'void'}) {{\n"
        + "".join(f"  __local float4 {name}[{size}];\n" for name, size in spec.shared) +
        "  const int GID_X = get_global_id(0);\n"
        "  const int GID_Y = get_global_id(1);\n"
        "  const int GID_Z = get_global_id(2);\n"
        + _bounds_check(spec) + "  {\n" + spec.body.rstrip() + "\n  }\n}\n")
    if at_run_time:
        _check_run_time_names(spec, "".join(parts[1:]), set(at_run_time))
    return "".join(parts)


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_C_TOKEN = re.compile(r"[A-Za-z_]\w*|\S")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_DEFINED = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)


def file_scope_names(text: str) -> list[str]:
    """The names that OpenCL C ``text`` declares at file scope outside the preprocessor: its functions (kernels
    included), each identifier followed by ``(`` outside braces and parentheses after a type, and its typedef
    names, each the last identifier of a ``typedef`` statement."""
    code = _COMMENT.sub(" ", text).replace("\\\n", " ")
    names: list[str] = []
    depth = parens = 0
    before = ["", ""]
    typedef = False  # within a file-scope typedef statement
    for line in code.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for token in _C_TOKEN.findall(line):
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
            elif token == "(":
                if depth == 0 and parens == 0 and not typedef and before[1] != "__attribute__" \
                        and _IDENTIFIER.fullmatch(before[1]) and (_IDENTIFIER.fullmatch(before[0]) or before[0] == "*"):
                    names.append(before[1])
                parens += 1
            elif token == ")":
                parens -= 1
            elif token == "typedef" and depth == 0:
                typedef = True
            elif token == ";" and depth == 0 and typedef:
                typedef = False
                if _IDENTIFIER.fullmatch(before[1]):
                    names.append(before[1])
            before = [before[1], token]
    return names


def opencl_bundle(kernels: list[tuple[KernelSpec, str]]) -> str | None:
    """One OpenCL C program holding every ``(spec, entry)`` of ``kernels``, each as the ``__kernel`` named
    ``entry``: the prelude once, then each kernel's own text between a ``#define`` per file-scope function or
    typedef name (renamed ``entry_name``, so that two kernels may both define ``postop``) and an ``#undef`` of
    every name it defined (so that its shapes and flags end with it). One driver build then compiles them all: PoCL pays
    its fixed cost of a build (front end, linking its built-in library) once instead of once per kernel.
    None if a kernel's text redefines a name the prelude defines, which would leak into the next."""
    prelude = kernel_text("opencl/prelude.inc.cl")
    shared = set(_DEFINED.findall(prelude)) | set(file_scope_names(prelude))
    parts = [prelude]
    for spec, entry in kernels:
        section = opencl_source(spec, entry, prelude=False)
        functions = set(file_scope_names(section)) - {entry}
        defined = set(_DEFINED.findall(section))
        if (functions | defined) & shared:
            return None
        parts += [f"#define {f} {entry}_{f}\n" for f in sorted(functions)]
        parts.append(section)
        parts += [f"#undef {name}\n" for name in sorted(defined | functions)]
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
    i, j4 = _at(a, "(i)"), _at(a, "((j) >> 2)")
    if texture:  # texelFetch widens an RGBA16F texel to float32 exactly
        return (f"#define {t}_read(i) texelFetch({t}_buf, {i})\n"
                f"#define {t}_read1(j) (texelFetch({t}_buf, {j4})[(j) & 3])\n")
    if spec.arg_precision(a) == "fp32":
        lines = [f"#define {t}_read(i) ({t}_buf[{i}])", f"#define {t}_read1(j) ({t}_buf[{j4}][(j) & 3])"]
        write = f"#define {t}_write(i, v) ({t}_buf[{i}] = (v))"
    else:
        # two halves per uint: packHalf2x16 / unpackHalf2x16 do the fp16 conversion
        read = (f"vec4 {t}_read(int i) {{ uvec2 p = {t}_buf[{i}]; "
                "return vec4(unpackHalf2x16(p.x), unpackHalf2x16(p.y)); }")
        lines = [read,
                 f"float {t}_read1(int j) {{ return unpackHalf2x16({t}_buf[{j4}][(j >> 1) & 1])[j & 1]; }}"]
        write = f"void {t}_write(int i, vec4 v) {{ {t}_buf[{i}] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)); }}"
    if a.role == "out":
        lines.append(_wrapped_write(spec, a, write))
        if not _finishes(spec, a):
            lines.append(f"#define {t}_store(i, v) {t}_write((i), (v))")
    return "\n".join(lines) + "\n"


# A work group of a GL dispatch, when its x size is at least twice the grid's (a size no 3-D choice takes:
# choose_local_size and local_size_candidates stay below that), runs the grid's x and y, or x, y and z, as one
# flattened x (flat_dims): llvmpipe runs a group's invocations as SIMD lanes along x only, its y and z one after
# another, so a (1, 4, 8) group of ResNet50's 4x4x512 3x3 convolution used 1 lane in 8 (13.2 ms; flattened,
# 2.1 ms). A GPU packs a group's invocations into its warps x first, y, then z anyway, so the order of the
# invocations is the same there.
GL_SIMD_LANES = 8  # llvmpipe's lanes (256-bit vectors of float32), and the least x worth flattening for


def flat_dims(grid: tuple[int, int, int], local_size: tuple[int, int, int]) -> int:
    """How many of the grid's dimensions a GL dispatch of ``grid`` with work groups of ``local_size``
    flattens into x: 0 (none, a 3-D dispatch), 2 (x and y, where they make GL_SIMD_LANES invocations; z stays
    a dimension of its own, so what z alone indexes, a convolution's weights, is the same for a whole group)
    or 3."""
    if local_size[1] != 1 or local_size[2] != 1 or local_size[0] < 2 * grid[0]:
        return 0
    return 2 if grid[0] * grid[1] >= GL_SIMD_LANES else 3


def gl_groups(grid: tuple[int, int, int], local_size: tuple[int, int, int]) -> tuple[int, int, int]:
    """The work-group counts of a GL dispatch of ``grid`` (flat_dims)."""
    gx, gy, gz = grid
    flat = flat_dims(grid, local_size)
    if flat == 3:
        return -(-(gx * gy * gz) // local_size[0]), 1, 1
    if flat == 2:
        return -(-(gx * gy) // local_size[0]), 1, gz
    return -(-gx // local_size[0]), -(-gy // local_size[1]), -(-gz // local_size[2])


def _gl_invocation(spec: KernelSpec, local_size: tuple[int, int, int]) -> str:
    """GID_X, GID_Y and GID_Z of a GL invocation, and the return of those past the grid (flat_dims)."""
    flat = flat_dims(spec.grid, local_size)
    if flat == 0:
        return ("  int GID_X = int(gl_GlobalInvocationID.x);\n"
                "  int GID_Y = int(gl_GlobalInvocationID.y);\n"
                "  int GID_Z = int(gl_GlobalInvocationID.z);\n" + _bounds_check(spec))
    if flat == 3:
        last, y, z = "GRID_X * GRID_Y * GRID_Z", "(GID_FLAT / GRID_X) % GRID_Y", "GID_FLAT / (GRID_X * GRID_Y)"
    else:
        last, y, z = "GRID_X * GRID_Y", "GID_FLAT / GRID_X", "int(gl_GlobalInvocationID.z)"
    return ("  int GID_FLAT = int(gl_GlobalInvocationID.x);\n"
            f"  if (GID_FLAT >= {last}) return;\n"
            f"  int GID_X = GID_FLAT % GRID_X;\n  int GID_Y = {y};\n  int GID_Z = {z};\n")


def glsl_source(spec: KernelSpec, local_size: tuple[int, int, int], textures: frozenset[int] = frozenset()) -> str:
    """The complete GLSL ES 3.10 compute shader for ``spec`` with the given work-group size (which may
    flatten the grid: flat_dims); buffer ``i`` of ``spec.args`` is bound at SSBO binding ``i``, or, for
    ``i`` in ``textures`` (arguments it only reads), as a buffer texture (GL_EXT_texture_buffer) at texture
    unit ``i``."""
    lx, ly, lz = local_size
    extension = "#extension GL_EXT_texture_buffer : require\n" if textures else ""
    parts = ["#version 310 es\n" + extension + "precision highp float;\nprecision highp int;\n",
             f"layout(local_size_x = {lx}, local_size_y = {ly}, local_size_z = {lz}) in;\n",
             kernel_text("glsl/prelude.inc.glsl"), _geometry(spec)]
    parts += [_gl_buffer(spec, i, a, i in textures) for i, a in enumerate(spec.args)]
    parts += [f"shared vec4 {name}[{size}];\n" for name, size in spec.shared]
    parts += [_gl_accessors(spec, a, i in textures) for i, a in enumerate(spec.args)]
    parts.append("#define BUFS_DECL\n#define BUFS\n")
    parts.append(_finisher_prototypes(spec))
    parts.append(spec.helpers.rstrip() + "\n" if spec.helpers.strip() else "")
    parts.append(_finishers(spec))
    parts.append(
        "void main() {\n" + _gl_invocation(spec, local_size) +
        "  {\n" + spec.body.rstrip() + "\n  }\n}\n")
    return "".join(parts)


# -- post-ops: the fused steps a kernel applies to a result before it stores it (lowering/plan.py PostOp) ----

# Names a post-op expression may use and still mean the same for a float16 (4 vec4 at once, postop16), with their
# float16 spelling: OpenCL's generic math functions (every width) and the prelude's overloads (min/max/clamp/ROUND,
# FABS/RSQRT/RINT/FMOD as generic calls) as they are; SPLAT and the FLT4-typed comparisons and SELECT4 as the
# prelude's float16 twins. An expression with any other name runs a vec4 at a time.
_WIDE_NAMES = {"FLT4": "float16", "SPLAT": "SPLAT16", "a": "a", "b": "b", "INF_F": "INF_F", "NAN_F": "NAN_F",
               **{f: f for f in ("max", "min", "clamp", "exp", "tanh", "log", "sqrt", "sin", "cos", "pow", "floor",
                                 "ceil", "trunc", "sign", "fmin", "fmax", "FABS", "RSQRT", "RINT", "ROUND", "FMOD")},
               **{f"{f}4": f"{f}16" for f in ("LT", "LE", "GT", "GE", "EQ", "NE", "SELECT")}}
_TOKEN = re.compile(r"(?P<number>(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?f?)|(?P<name>[A-Za-z_]\w*)")
_OPERAND_INDEX = {"tensor": "i", "channel": "s", "scalar": "0"}


def _wide_expr(expr: str) -> str | None:
    """``expr`` written for float16 operands, or None if it uses a name that may not mean the same there."""
    names = [m.group("name") for m in _TOKEN.finditer(expr) if m.group("name")]
    if any(n not in _WIDE_NAMES for n in names):
        return None
    return _TOKEN.sub(lambda m: _WIDE_NAMES[m.group("name")] if m.group("name") else m.group(0), expr)


def _postop_constants(k: int, p: PostOp) -> dict[str, float | int]:
    """The constants of post-op ``k`` by the names its step reads them under (defines, or kernel arguments:
    KernelSpec.runtime_constants): a fake-quant step's or lookup's scale (or its reciprocal, PostOp.exact) and
    bounds, a lookup's offset into its table."""
    if p.kind not in ("fake_quant", "lut"):
        return {}
    constants: dict[str, float | int] = {f"PQ{k}_LO": float(p.qmin), f"PQ{k}_HI": float(p.qmax)}
    constants[f"PQ{k}_SCALE"] = float(np.float32(p.scale))
    if not p.exact:
        constants[f"PQ{k}_INVERSE"] = float(np.float32(1) / np.float32(p.scale))
    if p.kind == "lut":
        constants[f"PQ{k}_OFFSET"] = int(p.offset)
    return constants


def _postop_step(k: int, p: PostOp, vec: str, expr: str, operand: str, language: str | None = None) -> str:
    """One post-op as a statement updating ``v`` of type ``vec``; ``operand`` reads post-op ``k``'s operand and
    ``PQ<k>_*`` its constants (_postop_constants). ``language`` "opencl": a lookup of a vec4 is the prelude's
    GD_LOOKUP4 (a gather where the compiler targets one)."""
    if p.kind == "fake_quant":
        name = ("fake_quant" if vec == "FLT4" else "fake_quant16") + ("" if p.exact else "_rcp")
        inverse = "" if p.exact else f"PQ{k}_INVERSE, "
        return f"v = {name}(v, {inverse}PQ{k}_SCALE, PQ{k}_LO, PQ{k}_HI);"
    if p.kind == "keep":
        return f"{vec} kept{p.slot} = v;"
    if p.kind == "lut":  # the codes are exact integers in float: the conversion to int truncates nothing
        wide = vec == "float16"
        splat = "SPLAT16" if wide else "SPLAT"
        quotient = f"v / {splat}(PQ{k}_SCALE)" if p.exact else f"v * {splat}(PQ{k}_INVERSE)"
        rounded = f"QROUND({quotient}, PQ{k}_LO, PQ{k}_HI)"
        code = (f"GD_CONVERT({rounded}, int16)" if wide else f"TO_INT4({rounded})") + f" + PQ{k}_OFFSET"
        # a table is float32 whatever the storage (LowerContext.table_const): OpenCL's prelude gathers it
        if wide:
            return f"{{ int16 c = {code}; v = GD_LOOKUP16(p{k}_buf, c); }}"
        if language == "opencl":
            return f"{{ INT4 c = {code}; v = GD_LOOKUP4(p{k}_buf, c); }}"
        return f"{{ INT4 c = {code}; v = MAKE_FLT4(" + ", ".join(f"p{k}_read1(c.{lane})" for lane in "xyzw") + "); }"
    if p.operand is None:
        return f"{{ {vec} a = v; v = {expr}; }}"
    a, b = ("o", "v") if p.operand_first else ("v", "o")
    return f"{{ {vec} o = {operand}; {vec} a = {a}; {vec} b = {b}; v = {expr}; }}"


def render_steps(name: str, postops: list[PostOp], constants: bool = False, language: str | None = None) -> str:
    """``FLT4 name(FLT4 v)``: post-ops that read no buffer and no constant (expressions of the value alone, and
    those of a value it kept: an activation, swish) applied to a value a kernel keeps to itself, such as a
    squeeze-and-excite's hidden layer (kernels/dialect/squeeze_excite.dialect). With ``constants``
    (``FLT4 name(FLT4 v BUFS_DECL)``), fake-quant steps and lookups too (value_steps), whose constants and tables
    the kernel has for the same post-ops (render_postops)."""
    if not (value_steps(postops) if constants else all(self_contained(p) for p in postops)):
        raise ValueError(f"{name}: a post-op that reads a buffer or a constant has no place outside a stored result")
    body = "".join(f"  {_postop_step(k, p, 'FLT4', p.expr, f'kept{p.slot}', language)}\n"
                   for k, p in enumerate(postops))
    return f"FLT4 {name}(FLT4 v{' BUFS_DECL' if constants else ''}) {{\n{body}  return v;\n}}\n"


def self_contained(p: PostOp) -> bool:
    """Whether post-op ``p`` reads nothing but the value and what the steps before it kept (render_steps)."""
    return p.kind == "keep" or p.kind == "expr" and p.operand in (None, "kept")


def _zero_extended_read(k: int) -> str:
    """``FLT4 p<k>_zero_extended(int i)``: operand ``p<k>`` (the output's B, H, W, fewer channels) at the output's
    linear PHWC4 index i; its slices past its own, and its lanes past its channel count, read as 0. No branch:
    a slice past its own reads its last one, which ZERO_PAD then zeroes (this is inlined at each of a
    convolution's stores; with a branch, llvmpipe's cold compile of face_detection_short_range took 0.3 s more
    than the PADs it replaces, without it 0.2 s)."""
    return (f"FLT4 p{k}_zero_extended(int i BUFS_DECL) {{\n"
            "  int hw = dst_H * dst_W; int s = dst_slice(i);\n"
            f"  return ZERO_PAD(p{k}_read((dst_batch(i) * p{k}_S + min(s, p{k}_S - 1)) * hw + i % hw), s, p{k}_C);"
            "\n}")


def value_steps(postops: list[PostOp]) -> bool:
    """Whether the post-ops are a function of each value alone (no operand, no index; a lookup's table is the same
    for every value): they may then apply to values packed in any order (render_postops' ``values``)."""
    return all(p.kind in ("fake_quant", "lut") or self_contained(p) for p in postops)


def render_postops(postops: list[PostOp], dst_channels: int, language: str | None = None, values: bool = False
                   ) -> tuple[str, bool, dict[str, float | int]]:
    """``FLT4 postop(FLT4 v, int i)``: the post-ops applied to a result at linear PHWC4 index i of the output
    ``dst`` (their operands are arguments p0, p1, ... in order); for OpenCL, when every step allows, also
    ``float16 postop16(float16 v, int4 i)`` for 4 results at once (the wide kernels' stores). With ``values``
    (value_steps holds), also ``FLT4 postop_values(FLT4 v BUFS_DECL)``, the steps on any 4 values, no padding zeroed,
    and the define GD_POSTOP_VALUES. Returns the text, whether the wide form is there, and the constants it
    reads by name (the kernel's defines, which KernelSpec.constants lists)."""
    fake = any(p.kind == "fake_quant" for p in postops)
    lines = [kernel_text("dialect/fake_quant.inc.dialect")] if fake else []
    lines += [_zero_extended_read(k) for k, p in enumerate(postops) if p.operand == "zero_extended"]
    lines += ["FLT4 postop(FLT4 v, int i BUFS_DECL) {", "  int s = dst_slice(i);"]
    for k, p in enumerate(postops):
        operand = f"p{k}_read({_OPERAND_INDEX[p.operand]})" if p.operand in _OPERAND_INDEX else \
            f"kept{p.slot}" if p.operand == "kept" else f"p{k}_zero_extended(i BUFS)" if p.operand == "zero_extended" \
            else ""
        lines.append("  " + _postop_step(k, p, "FLT4", p.expr, operand, language))
    lines.append("  return ZERO_PAD(v, s, dst_C);" if dst_channels % 4 else "  return v;")
    lines.append("}")
    if values:
        steps = render_steps("postop_values", postops, constants=True, language=language)
        lines += ["#define GD_POSTOP_VALUES 1", steps.rstrip()]
    wide = [_wide_expr(p.expr) if p.kind == "expr" else "" for p in postops] if language == "opencl" else [None]
    has_wide = all(e is not None for e in wide)
    if has_wide:
        if fake:
            lines.append(kernel_text("opencl/fake_quant16.inc.cl"))
        lines += ["float16 postop16(float16 v, int4 i BUFS_DECL) {", "  int4 s = dst_slice(i);"]
        for k, (p, e) in enumerate(zip(postops, wide)):
            operand = ""
            if p.operand == "scalar":
                operand = f"(float16)(p{k}_read(0), p{k}_read(0), p{k}_read(0), p{k}_read(0))"
            elif p.operand in _OPERAND_INDEX and p.codes_of >= 0:  # the 4 words decoded as one (_cl_accessors)
                operand = f"p{k}_read4({_OPERAND_INDEX[p.operand]})"
            elif p.operand in _OPERAND_INDEX:
                index = _OPERAND_INDEX[p.operand]
                operand = "(float16)(" + ", ".join(f"p{k}_read({index}.{lane})" for lane in "xyzw") + ")"
            elif p.operand == "kept":
                operand = f"kept{p.slot}"
            elif p.operand == "zero_extended":
                operand = "(float16)(" + ", ".join(f"p{k}_zero_extended(i.{lane} BUFS)" for lane in "xyzw") + ")"
            lines.append("  " + _postop_step(k, p, "float16", e or "", operand))
        lines += ["  return v;", "}"]
    constants = {name: value for k, p in enumerate(postops) for name, value in _postop_constants(k, p).items()}
    return "\n".join(lines) + "\n", has_wide, constants
