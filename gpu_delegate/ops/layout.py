"""Shape and layout ops: reshape, slice, concatenate, pad, gather, transpose and friends.

They move data without arithmetic, so quantized tensors go through untouched (TFLite requires the
quantization of input and output to match for most of them); CONCATENATION alone requantizes inputs whose
quantization differs from the output's. Index math follows TFLite's kernels, including its clamping rules.

Some of these ops take their parameters (a new shape, slice bounds, paddings) from a tensor. When that tensor
is a constant, `infer` computes the output shape from it; when a node computes it at run time, `infer`
returns the shape the model declares and `run_cpu` uses the actual values.

On the GPU these parameters must be constants. The kernels: remap.dialect (slices, transposes, tiles, splits),
pad.dialect (constant and mirror padding), concat.dialect (CONCATENATION, PACK), reshape.dialect, gather.dialect,
depth_to_space.dialect and space_to_depth.dialect; SHAPE and ONE_HOT produce integers and stay on the CPU.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..cpu import layout as k
from ..cpu.activation import apply_activation
from ..cpu.loop_vm import strides_of
from ..cpu.quant import activation_range
from ..dtypes import STRING
from ..errors import DelegateError, ModelError
from ..graph import ACT_NONE, ACT_SIGN_BIT, Graph, Node
from ..lowering.context import LowerContext
from ..phwc4 import BHWC, bhwc, same_layout, slices, to_rows
from .base import CpuStep, Defines, Op, register
from .checks import all_required, const_input, data_dependent, input_count, moves_grid_values, required, same_grid

if TYPE_CHECKING:
    from ..loop_program import LoopAssembler

Shape = tuple[int, ...]
Shapes = list[Shape | None]
Inputs = list[np.ndarray | None]
# a slice along each dimension: a fixed index (a shrunk axis) or a slice
Index = tuple[int | slice, ...]


# -- helpers ----------------------------------------------------------------------------------------------

def _value(node: Node, graph: Graph, inputs: Inputs | None, i: int) -> np.ndarray | None:
    """Input ``i``'s contents: the run-time array when running, the constant data when inferring."""
    if i >= len(node.inputs) or node.inputs[i] < 0:
        return None
    if inputs is not None:
        return inputs[i]
    return graph.tensors[node.inputs[i]].data


def _const(node: Node, graph: Graph, i: int) -> np.ndarray | None:
    """Input ``i``'s constant contents: None when it is omitted or computed at run time (``infer`` then gives
    the declared output shapes)."""
    return _value(node, graph, None, i)


def _ints(node: Node, v: np.ndarray, what: str) -> list[int]:
    if v.dtype.kind not in "iu":
        raise ModelError(f"{node}: {what} must be an integer tensor, got {v.dtype}")
    return np.asarray(v).reshape(-1).tolist()  # Python ints (a loop's slice bounds, every iteration)


def _scalar(node: Node, v: np.ndarray, what: str) -> int:
    vals = _ints(node, v, what)
    if len(vals) != 1:
        raise ModelError(f"{node}: {what} must hold one value, has {len(vals)}")
    return vals[0]


def _axis(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ModelError(f"{node}: {what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _size(shape: Shape) -> int:
    return math.prod(map(int, shape))


def _pieces(x: np.ndarray, axis: int, sizes: Sequence[int]) -> list[np.ndarray]:
    """``x`` cut along ``axis`` into consecutive pieces of ``sizes`` (np.split by slicing: a tenth of its cost on
    the small tensors of a recurrent net's loop body)."""
    return [x[where] for where in _piece_index(axis, sizes)]


def _piece_index(axis: int, sizes: Sequence[int]) -> list[tuple[slice, ...]]:
    """The index of each of _pieces' pieces."""
    lead = (slice(None),) * axis
    return [(*lead, slice(end - size, end)) for size, end in zip(sizes, itertools.accumulate(sizes))]


def _dynamic(graph: Graph, *tensors: int) -> bool:
    """Whether any of ``tensors`` has a shape known only at run time."""
    return any(graph.tensors[t].dynamic or min(graph.tensors[t].shape, default=0) < 0 for t in tensors)


def _loop_copy_all(node: Node, asm: LoopAssembler) -> None:
    """A reshape in a loop program: the elements in their order (loop_program.py)."""
    x, y = node.inputs[0], node.outputs[0]
    n = math.prod(asm.shape(x))
    asm.copy(y, 0, [1], x, 0, [1], [n])


def _c_order(a: np.ndarray) -> np.ndarray:
    """A slice comes out as a strided view; kernels downstream expect C-contiguous arrays. (Not ascontiguousarray:
    it makes a 0-d array 1-d.)"""
    return a if a.flags.c_contiguous else np.array(a, order="C", copy=True)


def _contiguous(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [_c_order(a) for a in arrays]


def _outputs(node: Node, low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(node.outputs) <= high:
        raise ModelError(f"{node}: expects {low if low == high else f'{low} to {high}'} outputs, "
                         f"has {len(node.outputs)}")


# -- GPU side: shared by the lowerings below -------------------------------------------------------------------
#
# Every kernel here runs one work item per output vec4 on the grid (W, H, B * S) of its output, and reads its
# input at BHWC coordinates: a rank-r tensor's dimension i is BHWC dimension i + 4 - r (ctx.bhwc pads leading
# 1s). Constant parameters (shapes, bounds, paddings, permutations) become defines.

MAX_CONCAT_PARTS = 8  # parts per kernel pass: llvmpipe binds 16 buffers, and fused post-ops may add their own


def _gpu_check(node: Node, graph: Graph, data: tuple[int, ...] = (0,), params: dict[int, str] | None = None,
               plan: Callable[[Node, Graph], object] | None = None) -> bool | str:
    """The limits every layout op shares: ``data`` inputs computed at run time, ``params`` inputs constant,
    no empty tensor, and ``plan(node, graph)`` (the op's own parameter check) not raising."""
    for i in data:
        if graph.constant_like(node.inputs[i]):
            return f"input {i} is a constant (the GPU path moves run-time data only)"
    for i, what in (params or {}).items():
        if i >= len(node.inputs) or node.inputs[i] < 0 or graph.tensors[node.inputs[i]].data is None:
            return f"input {i} ({what}) is not a constant"
    for t in [*node.inputs, *node.outputs]:
        if t >= 0 and graph.tensors[t].data is None and graph.tensors[t].size == 0:
            return f"tensor {graph.tensors[t].name!r} is empty"
    if plan is not None:
        try:
            plan(node, graph)
        except ModelError as e:
            return str(e)
    return True


def _remap(ctx: LowerContext, src: int, dst: int, start: list[int], step: list[int], source: list[int],
           tile: bool = False) -> None:
    """Emit remap.dialect: along dimension i of src (its own rank), the source coordinate is start[i] + step[i] *
    (the coordinate of dst dimension source[i], in dst's own rank; -1 for none), modulo the size with tile."""
    rs, rd = len(ctx.shape(src)), len(ctx.shape(dst))
    st, sp, fr = [0] * 4, [0] * 4, [0] * 4
    for i in range(rs):
        d = i + 4 - rs
        st[d] = int(start[i])
        if source[i] >= 0 and step[i] != 0:
            sp[d], fr[d] = int(step[i]), source[i] + 4 - rd
    src_c, dst_c = ctx.bhwc(src)[3], ctx.bhwc(dst)[3]
    vec4 = fr[3] == 3 and sp[3] == 1 and st[3] % 4 == 0 and (not tile or src_c % 4 == 0 or dst_c <= src_c)
    defines: Defines = {"VEC4": vec4, "TILE": tile}
    for d, name in enumerate("BHWC"):
        defines.update({f"START_{name}": st[d], f"STEP_{name}": sp[d], f"FROM_{name}": fr[d]})
    ctx.kernel("remap", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


def _lower_slice(ctx: LowerContext, src: int, dst: int, index: Sequence[int | range]) -> None:
    """A slice of src: per dimension of src a fixed index or a range of indices. The ranges of more than one
    element are dst's dimensions of size > 1, in order (dimensions of size 1 come and go freely, as in
    STRIDED_SLICE's new and shrunk axes)."""
    free = [j for j, d in enumerate(ctx.shape(dst)) if d > 1]
    start: list[int] = []
    step: list[int] = []
    source: list[int] = []
    for ix in index:
        if isinstance(ix, range) and len(ix) > 1:
            if not free:
                raise DelegateError(f"slice {index} does not match the shape {list(ctx.shape(dst))}")
            start.append(ix.start)
            step.append(ix.step)
            source.append(free.pop(0))
        else:
            start.append(ix if isinstance(ix, int) else ix.start)
            step.append(0)
            source.append(-1)
    if free:
        raise DelegateError(f"slice {index} does not match the shape {list(ctx.shape(dst))}")
    _remap(ctx, src, dst, start, step, source)


def _lower_concat(ctx: LowerContext, node: Node, parts: list[tuple[int, BHWC]], dst: int, axis: int,
                  activation: bool = True) -> None:
    """Emit concat.dialect: ``parts`` are (tensor, its BHWC view with the joined axis in place), joined along BHWC
    ``axis``. The per-part reads are generated macros (see concat.dialect); a constant part is a const buffer.
    More than MAX_CONCAT_PARTS parts go in passes of that many, each writing its parts into the output.
    ``activation``: the node's fused activation applies to the result (a CONCATENATION's does)."""
    starts = list(np.cumsum([0] + [view[axis] for _, view in parts[:-1]]))
    vec4 = all(same_layout(view, ctx.bhwc(t)) for t, view in parts) and \
        (axis != 3 or all(p % 4 == 0 for p in starts))
    passes = range(0, len(parts), MAX_CONCAT_PARTS)
    # OpenCL on a CPU: 4 pixels of a row per work item (opencl/concat.cl), where those lie in one part's vec4s, or
    # where tensors (no constant) are joined along the channels inside slices in one pass (_joined16)
    shifted = axis == 3 and len(passes) == 1 and all(
        not ctx.is_const(t) and same_layout(view, ctx.bhwc(t)) for t, view in parts)
    wide = ctx.cpu_opencl and axis != 2 and (vec4 or shifted)
    if activation:
        ctx.fuse_activation(node)
    for first in passes:
        inputs: dict[str, int] = {}
        consts: dict[str, str] = {}
        vecs: dict[int, str] = {}
        vec16s: dict[int, str] = {}
        lanes: dict[int, str] = {}
        for n in range(first, min(first + MAX_CONCAT_PARTS, len(parts))):
            t, view = parts[n]
            real = ctx.bhwc(t)
            if ctx.is_const(t):
                arg = f"c{n}"
                consts[arg] = ctx.const_tensor("concat_part", t)
            else:
                arg = f"in{n}"
                inputs[arg] = t
            _, vh, vw, vc = view
            vs = slices(vc)
            vecs[n] = f"{arg}_read(index4((b), (y), (x), (s), {vh}, {vw}, {vs}))"
            vec16s[n] = f"{arg}_read16(index4((b), (y), (x), (s), {vh}, {vw}, {vs}))"
            if same_layout(view, real):
                lanes[n] = f"{arg}_read1(4 * index4((b), (y), (x), (c) / 4, {vh}, {vw}, {vs}) + (c) % 4)"
            else:  # e.g. PACK along the last axis: find the element by its row-major position
                lin = f"((((b) * {vh} + (y)) * {vw} + (x)) * {vc} + (c))"
                lanes[n] = (f"{arg}_read1(4 * linear_index4({lin}, {real[1]}, {real[2]}, {real[3]}) + "
                            f"linear_lane({lin}, {real[3]}))")
        last = first == passes[-1]
        out = "dst" if last else "acc"  # post-ops go with the last pass, which writes every element
        helpers = (f"#define PART_START(k) {_chain(dict(enumerate(starts)))}\n"
                   f"#define PART_VEC(k, b, y, x, s) {_chain(vecs)}\n"
                   f"#define PART_LANE(k, b, y, x, c) {_chain(lanes)}\n"
                   f"#define OUT_READ(i) {out}_read(i)\n#define OUT_WRITE(i, v) {out}_write(i, v)\n"
                   f"#define OUT_IDX(b, y, x, s) {out}_idx(b, y, x, s)\n#define OUT_S {out}_S\n#define OUT_C {out}_C\n")
        defines: Defines = {"PARTS": len(parts), "AXIS": axis, "VEC4": vec4, "FIRST": first,
                            "COUNT": len(vecs), "LAST_PASS": last}
        if wide:
            if not vec4:
                helpers += _joined16([(f"in{n}", view) for n, (_, view) in enumerate(parts)], starts)
            helpers += (f"#define PART_VEC16(k, b, y, x, s) {_chain(vec16s)}\n#define OUT_W {out}_W\n"
                        f"#define OUT_FINISH16(v, i) {out}_finish16(v, i BUFS)\n"
                        f"#define OUT_STORE16(i4, v, n) {out}_store16(i4, v, n)\n")
            ctx.kernel("concat", inputs, {out: dst}, consts, defines, grid=ctx.quads_grid(dst), helpers=helpers,
                       variants={"opencl": "concat"})
            continue
        ctx.kernel("concat", inputs, {out: dst}, consts, defines, grid=ctx.grid(dst), helpers=helpers)


def _joined16(parts: list[tuple[str, BHWC]], starts: list[int]) -> str:
    """``float16 joined16(int b, int y, int x0, int s)``: output slice s of 4 pixels from x0 of tensors joined along
    the channels at ``starts``, part by part: a part starting at lane o of a slice fills its lanes of the output slice
    from two of its own slices, the lanes shifted by o (a shuffle the compiler sees), selected where the part's
    channels lie. Every part is read, a slice clamped into it where it has none there; opencl/concat.cl (JOINED16)."""
    lines = ["float16 joined16(int b, int y, int x0, int s BUFS_DECL) {", "  float16 v = (float16)(0.0f);",
             "  int4 c4 = (int4)(4 * s) + (int4)(0, 1, 2, 3);", "  int16 c = (int16)(c4, c4, c4, c4);"]
    for (arg, (_, h, w, channels)), start in zip(parts, starts):
        ps, o = slices(channels), int(start) % 4
        index = f"((b * {ps} + clamp(%s, 0, {ps - 1})) * {h} + y) * {w} + x0"
        lines.append(f"  {{ int sl = s - {int(start) // 4};")
        lines.append(f"    float16 hi = {arg}_read16({index % 'sl'});")
        if o:
            lines.append(f"    float16 lo = {arg}_read16({index % '(sl - 1)'});")
            picks = [f"lo.s{4 * p + j - o + 4:x}" if j < o else f"hi.s{4 * p + j - o:x}" for p in range(4)
                     for j in range(4)]
            lines.append(f"    hi = (float16)({', '.join(picks)});")
        lines.append(f"    v = select(v, hi, (c >= (int16)({start})) & (c < (int16)({start + channels}))); }}")
    lines += ["  return v;", "}", "#define JOINED16(b, y, x0, s) joined16(b, y, x0, s BUFS)"]
    return "\n".join(lines) + "\n"


def _chain(values: Mapping[int, object]) -> str:
    """A macro body picking ``values[k]`` by the part number k (the last one where k matches none)."""
    keys = sorted(values)
    text = str(values[keys[-1]])
    for n in reversed(keys[:-1]):
        text = f"((k) == {n} ? {values[n]} : {text})"
    return text


def _lower_reshape(node: Node, graph: Graph, ctx: LowerContext) -> None:
    """A reshape that moves data in PHWC4 (drop_reshape has already removed those that do not)."""
    src, dst = ctx.input(node, 0), ctx.output(node, 0)
    vec4 = ctx.bhwc(src)[3] % 4 == 0 and ctx.bhwc(dst)[3] % 4 == 0
    ctx.kernel("reshape", {"src": src}, {"dst": dst}, defines={"VEC4": vec4}, grid=ctx.grid(dst))


# -- reshaping ----------------------------------------------------------------------------------------------

def _reshape_spec(node: Node, graph: Graph, inputs: Inputs | None) -> list[int] | None:
    """The requested shape, possibly with one -1. Like TFLite, a 1-D shape tensor wins over the option."""
    if len(node.inputs) == 2 and node.inputs[1] >= 0 and len(graph.tensors[node.inputs[1]].shape) == 1:
        v = _value(node, graph, inputs, 1)
        return None if v is None else _ints(node, v, "shape")
    if "new_shape" in node.attrs:
        spec = list(node.attrs["new_shape"])
        return [] if spec == [0] else spec  # legacy converters wrote [0] for a scalar
    return None


def _resolve_shape(node: Node, spec: list[int], count: int) -> Shape:
    unknown = [i for i, d in enumerate(spec) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in spec):
        raise ModelError(f"{node}: new shape {spec} may hold one -1 and otherwise sizes >= 0")
    known = _size(tuple(d for d in spec if d != -1))
    out = list(spec)
    if unknown:
        if known == 0 or count % known:
            raise ModelError(f"{node}: cannot reshape {count} elements to {spec}")
        out[unknown[0]] = count // known
    if _size(tuple(out)) != count:
        raise ModelError(f"{node}: cannot reshape {count} elements to {spec}")
    return tuple(out)


@register
class Reshape(Op):
    name = "RESHAPE"
    gpu_ints = gpu_rank5 = True
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1, 2)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        spec = _reshape_spec(node, graph, None)
        if spec is None:
            if len(node.inputs) == 2 and node.inputs[1] >= 0:
                data_dependent(node)  # the shape is computed at run time
            return [graph.tensors[node.outputs[0]].shape]  # no shape given: the output's own, as TFLite
        return [_resolve_shape(node, spec, _size(required(node, shapes, 0)))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        spec = _reshape_spec(node, graph, inputs)
        shape = graph.tensors[node.outputs[0]].shape if spec is None else _resolve_shape(node, spec, x.size)
        return [x.reshape(shape)]

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # a static output shape (shapes.resolve computed it): a view of the input
        x, y = node.inputs[0], node.outputs[0]
        if _dynamic(graph, x, y):
            return None
        shape = graph.tensors[y].shape

        def step(values: list[np.ndarray | None]) -> None:
            values[y] = values[x].reshape(shape)  # type: ignore[union-attr]
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        _loop_copy_all(node, asm)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph)

    lower = staticmethod(_lower_reshape)


def _squeeze_axes(node: Node, shape: Shape) -> tuple[int, ...]:
    dims = node.attrs.get("squeeze_dims") or []
    if not dims:
        return tuple(i for i, d in enumerate(shape) if d == 1)
    axes = tuple(sorted({_axis(node, a, len(shape), "squeeze dimension") for a in dims}))
    for a in axes:
        if shape[a] != 1:
            raise ModelError(f"{node}: cannot squeeze dimension {a} of shape {list(shape)}: "
                             "its size is not 1")
    return axes


@register
class Squeeze(Op):
    name = "SQUEEZE"
    gpu_ints = gpu_rank5 = True
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs = required(node, shapes, 0)
        axes = _squeeze_axes(node, xs)
        return [tuple(d for i, d in enumerate(xs) if i not in axes)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        return [np.squeeze(x, _squeeze_axes(node, x.shape))]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        _loop_copy_all(node, asm)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph)

    lower = staticmethod(_lower_reshape)


def _expand_axis(node: Node, v: np.ndarray, rank: int) -> int:
    axis = _scalar(node, v, "axis")
    if not -rank - 1 <= axis <= rank:
        raise ModelError(f"{node}: axis {axis} is out of range for a rank {rank} input")
    return axis + rank + 1 if axis < 0 else axis


@register
class ExpandDims(Op):
    name = "EXPAND_DIMS"
    gpu_ints = gpu_rank5 = True
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, v = required(node, shapes, 0), _const(node, graph, 1)
        if v is None:
            data_dependent(node)
        axis = _expand_axis(node, v, len(xs))
        return [xs[:axis] + (1,) + xs[axis:]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        return [np.expand_dims(x, _expand_axis(node, required(node, inputs, 1), x.ndim))]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        _loop_copy_all(node, asm)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph)

    lower = staticmethod(_lower_reshape)


# -- joining and splitting ----------------------------------------------------------------------------------

def _concat_shape(node: Node, shapes: list[Shape]) -> tuple[int, Shape]:
    rank = len(shapes[0])
    axis = _axis(node, int(node.attrs.get("axis", 0)), rank)
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ModelError(f"{node}: input shapes {[list(x) for x in shapes]} do not match "
                             f"outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return axis, tuple(out)


@register
class Concatenation(Op):
    name = "CONCATENATION"
    gpu_ints = gpu_rank5 = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if not node.inputs:
            raise ModelError(f"{node}: needs at least one input")
        _outputs(node, 1)
        if any(t < 0 for t in node.inputs):
            raise ModelError(f"{node}: an input is omitted")
        act = int(node.attrs.get("fused_activation_function", ACT_NONE))
        if not ACT_NONE <= act < ACT_SIGN_BIT:
            raise ModelError(f"{node}: unsupported fused activation {act}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        return [_concat_shape(node, all_required(node, shapes))[1]]

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # plain tensors of a known rank (the parts' sizes along the axis may change: a loop's list)
        out = graph.tensors[node.outputs[0]]
        tensors = [graph.tensors[t] for t in node.inputs]
        if out.quant is not None or out.dtype.kind not in "fiub" or any(t.quant is not None for t in tensors):
            return None
        axis = _axis(node, int(node.attrs.get("axis", 0)), len(out.shape))
        act, dtype, parts, y = int(node.attrs.get("fused_activation_function", ACT_NONE)), out.dtype, node.inputs, \
            node.outputs[0]

        def step(values: list[np.ndarray | None]) -> None:
            # parts that do not fit: numpy's ValueError, which the executor reports as the node's
            joined = np.concatenate([values[t] for t in parts], axis).astype(dtype, copy=False)
            values[y] = apply_activation(joined, act) if act != ACT_NONE else joined
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        if int(node.attrs.get("fused_activation_function", ACT_NONE)) != ACT_NONE:
            raise asm.declined(f"{node}: a fused activation")
        y = node.outputs[0]
        out_shape = asm.shape(y)
        axis, out_strides, offset = _axis(node, int(node.attrs.get("axis", 0)), len(out_shape)), \
            strides_of(out_shape), 0
        for t in node.inputs:  # each part at its offset along the axis
            shape = asm.shape(t)
            asm.copy(y, offset * out_strides[axis], out_strides, t, 0, strides_of(shape), shape)
            offset += shape[axis]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        arrays = all_required(node, inputs)
        axis, _ = _concat_shape(node, [x.shape for x in arrays])
        act = int(node.attrs.get("fused_activation_function", ACT_NONE))
        out = graph.tensors[node.outputs[0]]
        if out.dtype.kind == "f":
            return [apply_activation(np.concatenate(arrays, axis).astype(out.dtype, copy=False), act)]
        if out.quant is None or out.dtype not in (np.int8, np.uint8, np.int16):
            return [np.concatenate(arrays, axis)]
        oscale, ozp = out.quant.scalar()
        parts = []
        for t, x in zip(node.inputs, arrays):
            q = graph.tensors[t].quant
            if q is not None and q.scalar() != (oscale, ozp):
                x = k.requantize_copy(x.astype(out.dtype, copy=False), *q.scalar(), oscale, ozp)
            parts.append(x)
        y = np.concatenate(parts, axis).astype(out.dtype, copy=False)
        if act != ACT_NONE:
            lo, hi = activation_range(act, oscale, ozp, out.dtype)
            y = np.clip(y, lo, hi)
        return [y]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        if all(graph.constant_like(t) for t in node.inputs):
            return "every input is a constant"
        return _gpu_check(node, graph, data=())

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        dst = ctx.output(node, 0)
        rank = len(graph.tensors[node.outputs[0]].shape)  # the axis counts in the graph's rank, maybe 5
        axis = _axis(node, int(node.attrs.get("axis", 0)), rank) + 4 - rank
        if axis < 0:
            raise DelegateError(f"{node}: joins along a dimension the GPU layout collapses")
        parts = [ctx.input(node, k) for k in range(len(node.inputs))]
        _lower_concat(ctx, node, [(t, ctx.bhwc(t)) for t in parts], dst, axis)

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool:
        # parts on the output's grid are stored as they are; a fused activation's bounds may lie off the grid
        return int(node.attrs.get("fused_activation_function", ACT_NONE)) == ACT_NONE and \
            moves_grid_values(node, graph, range(len(node.inputs)))


@register
class Pack(Op):
    name = "PACK"
    gpu_ints = True

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool:
        return moves_grid_values(node, graph, range(len(node.inputs)))

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if not node.inputs or any(t < 0 for t in node.inputs):
            raise ModelError(f"{node}: needs at least one input and none omitted")
        _outputs(node, 1)
        count = int(node.attrs.get("values_count", len(node.inputs)))
        if count != len(node.inputs):
            raise ModelError(f"{node}: values_count {count} but {len(node.inputs)} inputs")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        given = all_required(node, shapes)
        if any(s != given[0] for s in given):
            raise ModelError(f"{node}: inputs have different shapes {[list(s) for s in given]}")
        axis = _axis(node, int(node.attrs.get("axis", 0)), len(given[0]) + 1)
        return [given[0][:axis] + (len(given),) + given[0][axis:]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        arrays = all_required(node, inputs)
        Pack.infer(node, graph, [x.shape for x in arrays])
        return [np.stack(arrays, _axis(node, int(node.attrs.get("axis", 0)), arrays[0].ndim + 1))]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return Concatenation.gpu_support(node, graph)

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        dst = ctx.output(node, 0)
        rank = len(ctx.shape(dst))
        axis = _axis(node, int(node.attrs.get("axis", 0)), rank)
        parts: list[tuple[int, BHWC]] = []
        for n in range(len(node.inputs)):
            t = ctx.input(node, n)
            shape = ctx.shape(t)
            parts.append((t, bhwc(shape[:axis] + (1,) + shape[axis:])))
        _lower_concat(ctx, node, parts, dst, axis + 4 - rank)


@register
class Unpack(Op):
    name = "UNPACK"
    gpu_ints = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        num = int(node.attrs.get("num", len(node.outputs)))
        if num != len(node.outputs):
            raise ModelError(f"{node}: num {num} but {len(node.outputs)} outputs")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        s = required(node, shapes, 0)
        axis = _axis(node, int(node.attrs.get("axis", 0)), len(s))
        if s[axis] != len(node.outputs):
            raise ModelError(f"{node}: dimension {axis} of shape {list(s)} is not {len(node.outputs)}")
        return [s[:axis] + s[axis + 1:]] * len(node.outputs)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        Unpack.infer(node, graph, [x.shape])
        axis = _axis(node, int(node.attrs.get("axis", 0)), x.ndim)
        return _contiguous(list(np.moveaxis(x, axis, 0)))

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, plan=lambda n, g: Unpack.infer(n, g, [g.tensors[n.inputs[0]].shape]))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 0)
        shape = ctx.shape(src)
        axis = _axis(node, int(node.attrs.get("axis", 0)), len(shape))
        for n in range(len(node.outputs)):
            index = [n if i == axis else range(d) for i, d in enumerate(shape)]
            _lower_slice(ctx, src, ctx.output(node, n), index)


def _split_sizes(node: Node, dim: int, sizes: list[int]) -> list[int]:
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in sizes):
        raise ModelError(f"{node}: split sizes {sizes} may hold one -1 and otherwise sizes >= 0")
    if unknown:
        sizes = list(sizes)
        sizes[unknown[0]] = dim - sum(s for s in sizes if s != -1)
    if sum(sizes) != dim or min(sizes, default=0) < 0:
        raise ModelError(f"{node}: split sizes {sizes} do not add up to the dimension's size {dim}")
    return sizes


def _split(x_shape: Shape, axis: int, sizes: list[int]) -> list[Shape]:
    return [x_shape[:axis] + (s,) + x_shape[axis + 1:] for s in sizes]


@register
class Split(Op):
    name = "SPLIT"
    gpu_ints = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        n = int(node.attrs.get("num_splits", len(node.outputs)))
        if n != len(node.outputs) or n < 1:
            raise ModelError(f"{node}: num_splits {n} but {len(node.outputs)} outputs")

    @staticmethod
    def _plan(node: Node, v: np.ndarray, shape: Shape) -> tuple[int, list[int]]:
        """(axis, sizes) from the axis input's value ``v``."""
        axis = _axis(node, _scalar(node, v, "axis"), len(shape))
        n = len(node.outputs)
        if shape[axis] % n:
            raise ModelError(f"{node}: dimension {axis} of shape {list(shape)} does not split into {n} parts")
        return axis, [shape[axis] // n] * n

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        v = _const(node, graph, 0)
        if v is None:
            data_dependent(node)
        xs = required(node, shapes, 1)
        return _split(xs, *Split._plan(node, v, xs))

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 1)
        axis, sizes = Split._plan(node, required(node, inputs, 0), x.shape)
        return _contiguous(_pieces(x, axis, sizes))

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # a constant axis and a static input shape: the pieces' bounds once
        v, x = _const(node, graph, 0), node.inputs[1]
        if v is None or _dynamic(graph, x, *node.outputs):
            return None
        axis, sizes = Split._plan(node, v, graph.tensors[x].shape)
        pieces = list(zip(node.outputs, _piece_index(axis, sizes)))

        def step(values: list[np.ndarray | None]) -> None:
            data = values[x]
            for y, where in pieces:
                values[y] = _c_order(data[where])  # type: ignore[index]
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        v, x = _const(node, graph, 0), node.inputs[1]
        if v is None:
            raise asm.declined(f"{node}: the axis is computed at run time")
        shape = asm.shape(x)
        axis, sizes = Split._plan(node, v, shape)
        x_strides, start = strides_of(shape), 0
        for y, size in zip(node.outputs, sizes):
            out_shape = asm.shape(y)
            asm.copy(y, 0, strides_of(out_shape), x, start * x_strides[axis], x_strides, out_shape)
            start += size

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, data=(1,), params={0: "axis"},
                          plan=lambda n, g: Split._plan(n, const_input(n, g, 0, "axis"),
                                                        g.tensors[n.inputs[1]].shape))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 1)
        shape = ctx.shape(src)
        axis, sizes = Split._plan(node, const_input(node, graph, 0, "axis"), shape)
        offset = 0
        for n, size in enumerate(sizes):
            index = [range(offset, offset + size) if i == axis else range(d) for i, d in enumerate(shape)]
            _lower_slice(ctx, src, ctx.output(node, n), index)
            offset += size


@register
class SplitV(Op):
    name = "SPLIT_V"
    gpu_ints = True

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 3)
        n = int(node.attrs.get("num_splits", len(node.outputs)))
        if n != len(node.outputs) or n < 1:
            raise ModelError(f"{node}: num_splits {n} but {len(node.outputs)} outputs")

    @staticmethod
    def _plan(node: Node, sv: np.ndarray, av: np.ndarray, shape: Shape) -> tuple[int, list[int]]:
        """(axis, sizes) from the values of the size_splits and axis inputs."""
        axis = _axis(node, _scalar(node, av, "axis"), len(shape))
        sizes = _ints(node, sv, "size_splits")
        if len(sizes) != len(node.outputs):
            raise ModelError(f"{node}: {len(sizes)} split sizes but {len(node.outputs)} outputs")
        return axis, _split_sizes(node, shape[axis], sizes)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        sv, av = _const(node, graph, 1), _const(node, graph, 2)
        if sv is None or av is None:
            data_dependent(node)
        xs = required(node, shapes, 0)
        return _split(xs, *SplitV._plan(node, sv, av, xs))

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        axis, sizes = SplitV._plan(node, required(node, inputs, 1), required(node, inputs, 2), x.shape)
        return _contiguous(_pieces(x, axis, sizes))

    @staticmethod
    def _const_plan(node: Node, graph: Graph, shape: Shape) -> tuple[int, list[int]]:
        return SplitV._plan(node, const_input(node, graph, 1, "size_splits"), const_input(node, graph, 2, "axis"),
                            shape)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, params={1: "size_splits", 2: "axis"},
                          plan=lambda n, g: SplitV._const_plan(n, g, g.tensors[n.inputs[0]].shape))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 0)
        shape = ctx.shape(src)
        axis, sizes = SplitV._const_plan(node, graph, shape)
        offset = 0
        for n, size in enumerate(sizes):
            index = [range(offset, offset + size) if i == axis else range(d) for i, d in enumerate(shape)]
            _lower_slice(ctx, src, ctx.output(node, n), index)
            offset += size


# -- slicing ------------------------------------------------------------------------------------------------

def _slice_plan(node: Node, bv: np.ndarray, sv: np.ndarray, shape: Shape) -> tuple[list[int], list[int]]:
    """(begin, size) from the values of the begin and size inputs, a size of -1 resolved."""
    begin, size = _ints(node, bv, "begin"), _ints(node, sv, "size")
    if len(begin) != len(shape) or len(size) != len(shape):
        raise ModelError(f"{node}: begin {begin} and size {size} must have one entry per dimension of "
                         f"{list(shape)}")
    out = []
    for b, s, d in zip(begin, size, shape):
        s = d - b if s == -1 else s
        if b < 0 or s < 0 or b + s > d:
            raise ModelError(f"{node}: begin {begin} and size {size} do not fit shape {list(shape)}")
        out.append(s)
    return begin, out


@register
class Slice(Op):
    name = "SLICE"
    gpu_ints = True
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 3)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        bv, sv = _const(node, graph, 1), _const(node, graph, 2)
        if bv is None or sv is None:
            data_dependent(node)
        return [tuple(_slice_plan(node, bv, sv, required(node, shapes, 0))[1])]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        begin, size = _slice_plan(node, required(node, inputs, 1), required(node, inputs, 2), x.shape)
        return _contiguous([x[tuple(slice(b, b + s) for b, s in zip(begin, size))]])

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # begin and size may change every run (a loop's TensorList item written at its counter): checked each time
        x, b, s, y = *node.inputs, node.outputs[0]
        if min(node.inputs) < 0:
            return None

        def step(values: list[np.ndarray | None]) -> None:
            data = values[x]
            begin, size = _slice_plan(node, values[b], values[s], data.shape)  # type: ignore[arg-type, union-attr]
            values[y] = _c_order(data[tuple([slice(i, i + n) for i, n in zip(begin, size)])])  # type: ignore[index]
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        # a run-time begin (a loop's counter) is read and checked in the program; the size must be constant
        x, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
        shape, bv, sv = asm.shape(x), _const(node, graph, 1), _const(node, graph, 2)
        if sv is None or (bv is None and any(v < 0 for v in _ints(node, sv, "size"))):
            raise asm.declined(f"{node}: a size computed at run time")
        x_strides = strides_of(shape)
        if bv is not None:
            begin, size = _slice_plan(node, bv, sv, shape)
            base = sum(i * st for i, st in zip(begin, x_strides))
            asm.copy(y, 0, strides_of(tuple(size)), x, base, x_strides, size)
            return
        size = _ints(node, sv, "size")
        if len(size) != len(shape) or any(n > d for n, d in zip(size, shape)):
            raise ModelError(f"{node}: size {size} does not fit shape {list(shape)}")
        asm.copy(y, 0, strides_of(tuple(size)), x, 0, x_strides, size,
                 [(b, d, x_strides[d], shape[d] - size[d]) for d in range(len(shape))])

    @staticmethod
    def _const_plan(node: Node, graph: Graph, shape: Shape) -> tuple[list[int], list[int]]:
        return _slice_plan(node, const_input(node, graph, 1, "begin"), const_input(node, graph, 2, "size"), shape)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, params={1: "begin", 2: "size"},
                          plan=lambda n, g: Slice._const_plan(n, g, g.tensors[n.inputs[0]].shape))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 0)
        begin, size = Slice._const_plan(node, graph, ctx.shape(src))
        _lower_slice(ctx, src, ctx.output(node, 0), [range(b, b + s) for b, s in zip(begin, size)])


def _strided_plan(node: Node, shape: Shape, begin: list[int], end: list[int],
                  strides: list[int]) -> tuple[Shape, Index]:
    """TFLite's BuildStridedSliceParams + StridedSlice{Start,End}ForAxis.

    Returns (effective input shape with the new axes inserted, one index per effective dimension: an int
    for a shrunk axis, a slice otherwise)."""
    a = node.attrs
    begin_mask, end_mask = int(a.get("begin_mask", 0)), int(a.get("end_mask", 0))
    ellipsis_mask, new_axis_mask = int(a.get("ellipsis_mask", 0)), int(a.get("new_axis_mask", 0))
    shrink_mask, offset = int(a.get("shrink_axis_mask", 0)), bool(a.get("offset", False))
    n = len(begin)
    if len(end) != n or len(strides) != n:
        raise ModelError(f"{node}: begin, end and strides have {n}, {len(end)} and {len(strides)} entries")
    if any(s == 0 for s in strides):
        raise ModelError(f"{node}: strides {strides} contain a zero")
    rank = len(shape)
    num_add = sum(1 for i in range(n) if not ellipsis_mask >> i & 1 and new_axis_mask >> i & 1)
    dims = rank + num_add
    if n > dims:
        raise ModelError(f"{node}: {n} slice entries for a rank {rank} input")

    # Where the ellipsis sits once expanded, and which effective dimensions are new axes.
    eff_ellipsis = eff_new = 0
    ellipsis_start, expanded = dims, 0
    i = 0
    while i < dims:
        if ellipsis_mask >> i & 1:
            ellipsis_start = i
            stop = max(i + 1, min(i + 1 + num_add + rank - n, dims))
            expanded = stop - ellipsis_start - 1
            while i < stop:
                eff_ellipsis |= 1 << i
                i += 1
            continue
        if new_axis_mask >> (i - expanded) & 1:
            eff_new |= 1 << i
        i += 1

    eff_shape: list[int] = []
    index: list[int | slice] = []
    added_ellipsis = added_axes = 0
    for i in range(dims):
        if eff_ellipsis >> i & 1:
            added_ellipsis = max(0, i - ellipsis_start)
            eff_shape.append(shape[i - added_axes])
            index.append(slice(None))
            continue
        if eff_new >> i & 1:
            eff_shape.append(1)
            index.append(slice(None))
            added_axes += 1
            continue
        size = shape[i - added_axes]
        eff_shape.append(size)
        if i >= n + expanded:
            index.append(slice(None))
            continue
        j = i - added_ellipsis
        stride = strides[j]
        start = begin[j] + size if begin[j] < 0 else begin[j]
        start = min(max(start, 0), size) if stride > 0 else min(max(start, -1), size - 1)
        if begin_mask >> j & 1:
            start = 0 if stride > 0 else size - 1
        if shrink_mask >> j & 1:
            if not 0 <= start < size:
                raise ModelError(f"{node}: index {begin[j]} of shrunk axis {i} is out of range "
                                 f"for size {size}")
            index.append(start)
            continue
        stop = end[j] + start if offset else end[j]
        stop = stop + size if stop < 0 else stop
        stop = min(max(stop, 0), size) if stride > 0 else min(max(stop, -1), size - 1)
        if end_mask >> j & 1:
            stop = size if stride > 0 else -1
        count = len(range(start, stop, stride))
        if count == 0:
            index.append(slice(0, 0))
        else:
            last = start + (count - 1) * stride
            index.append(slice(start, last + 1 if stride > 0 else (last - 1 if last > 0 else None), stride))
    return tuple(eff_shape), tuple(index)


_STRIDED_ARGS = {1: "begin", 2: "end", 3: "strides"}


def _strided_args(node: Node, values: list[np.ndarray]) -> tuple[list[int], list[int], list[int]]:
    """(begin, end, strides) from the values of inputs 1 to 3."""
    begin, end, strides = (_ints(node, v, what) for v, what in zip(values, _STRIDED_ARGS.values()))
    return begin, end, strides


@register
class StridedSlice(Op):
    name = "STRIDED_SLICE"
    gpu_ints = True
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 4)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        values = [_const(node, graph, i) for i in _STRIDED_ARGS]
        known = [v for v in values if v is not None]
        if len(known) < len(values):
            data_dependent(node)
        eff_shape, index = _strided_plan(node, required(node, shapes, 0), *_strided_args(node, known))
        return [tuple(len(range(*ix.indices(d))) for d, ix in zip(eff_shape, index) if isinstance(ix, slice))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        args = _strided_args(node, [required(node, inputs, i) for i in _STRIDED_ARGS])
        eff_shape, index = _strided_plan(node, x.shape, *args)
        return _contiguous([x.reshape(eff_shape)[index]])

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # the plan once where begin, end and strides are constants and the input's shape static; else at each run
        x, y, args = node.inputs[0], node.outputs[0], [node.inputs[i] for i in _STRIDED_ARGS]
        if min(node.inputs) < 0:
            return None
        constants = [v for i in _STRIDED_ARGS if (v := _const(node, graph, i)) is not None]
        if not _dynamic(graph, x) and len(constants) == len(_STRIDED_ARGS):
            eff_shape, index = _strided_plan(node, graph.tensors[x].shape, *_strided_args(node, constants))

            def fixed(values: list[np.ndarray | None]) -> None:
                values[y] = _c_order(values[x].reshape(eff_shape)[index])  # type: ignore[union-attr]
            return fixed

        def step(values: list[np.ndarray | None]) -> None:
            data = values[x]
            shape, where = _strided_plan(node, data.shape, *_strided_args(node, [values[t] for t in args]))  # type: ignore[union-attr, misc]
            values[y] = _c_order(data.reshape(shape)[where])  # type: ignore[union-attr]
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        constants = [v for i in _STRIDED_ARGS if (v := _const(node, graph, i)) is not None]
        if len(constants) != len(_STRIDED_ARGS):
            raise asm.declined(f"{node}: begin, end or strides computed at run time")
        x = node.inputs[0]
        eff_shape, index = _strided_plan(node, asm.shape(x), *_strided_args(node, constants))
        eff_strides, counts, steps, base = strides_of(eff_shape), [], [], 0
        for d, st, ix in zip(eff_shape, eff_strides, index):
            if isinstance(ix, int):
                base += ix * st
                counts.append(1)
                steps.append(0)
            else:
                start, stop, step = ix.indices(d)
                base += start * st
                counts.append(len(range(start, stop, step)))
                steps.append(step * st)
        asm.copy(node.outputs[0], 0, strides_of(tuple(counts)), x, base, steps, counts)

    @staticmethod
    def _const_plan(node: Node, graph: Graph, shape: Shape) -> tuple[Shape, Index]:
        args = _strided_args(node, [const_input(node, graph, i, what) for i, what in _STRIDED_ARGS.items()])
        return _strided_plan(node, shape, *args)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, params=_STRIDED_ARGS,
                          plan=lambda n, g: StridedSlice._const_plan(n, g, g.tensors[n.inputs[0]].shape))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 0)
        shape = ctx.shape(src)
        eff_shape, eff_index = StridedSlice._const_plan(node, graph, shape)
        # New axes are effective dimensions of size 1 that src lacks: matching the dimensions of size > 1
        # pairs every other effective dimension with its src dimension.
        big = [ix if isinstance(ix, int) else range(*ix.indices(d))
               for d, ix in zip(eff_shape, eff_index) if d > 1]
        _lower_slice(ctx, src, ctx.output(node, 0), [big.pop(0) if d > 1 else 0 for d in shape])


# -- reordering ---------------------------------------------------------------------------------------------

def _perm(node: Node, v: np.ndarray, rank: int) -> list[int]:
    perm = _ints(node, v, "perm")
    if sorted(perm) != list(range(rank)):
        raise ModelError(f"{node}: perm {perm} is not a permutation of the {rank} input dimensions")
    return perm


@register
class Transpose(Op):
    name = "TRANSPOSE"
    gpu_ints = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, v = required(node, shapes, 0), _const(node, graph, 1)
        if v is None:
            data_dependent(node)
        return [tuple(xs[p] for p in _perm(node, v, len(xs)))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        v = _value(node, graph, inputs, 1)  # omitted: numpy's transpose(None) reverses the dimensions
        return [np.ascontiguousarray(x.transpose(None if v is None else _perm(node, v, x.ndim)))]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        x, v = node.inputs[0], _const(node, graph, 1)
        if v is None:
            raise asm.declined(f"{node}: the permutation is computed at run time")
        shape = asm.shape(x)
        x_strides = strides_of(shape)
        perm = _perm(node, v, len(shape))
        out_shape = tuple(shape[q] for q in perm)
        asm.copy(node.outputs[0], 0, strides_of(out_shape), x, 0, [x_strides[q] for q in perm], out_shape)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, params={1: "perm"},
                          plan=lambda n, g: _perm(n, const_input(n, g, 1, "perm"), len(g.tensors[n.inputs[0]].shape)))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 0)
        rank = len(ctx.shape(src))
        source = [0] * rank
        for j, p in enumerate(_perm(node, const_input(node, graph, 1, "perm"), rank)):
            source[p] = j
        _remap(ctx, src, ctx.output(node, 0), [0] * rank, [1] * rank, source)


def _multiples(node: Node, v: np.ndarray, rank: int) -> list[int]:
    m = _ints(node, v, "multiples")
    if len(m) != rank or any(x < 0 for x in m):
        raise ModelError(f"{node}: multiples {m} must hold {rank} values >= 0")
    return m


@register
class Tile(Op):
    name = "TILE"
    gpu_ints = gpu_rank5 = True
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, v = required(node, shapes, 0), _const(node, graph, 1)
        if v is None:
            data_dependent(node)
        return [tuple(d * r for d, r in zip(xs, _multiples(node, v, len(xs))))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        return [np.tile(x, _multiples(node, required(node, inputs, 1), x.ndim))]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, params={1: "multiples"},
                          plan=lambda n, g: _multiples(n, const_input(n, g, 1, "multiples"),
                                                       len(g.tensors[n.inputs[0]].shape)))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src = ctx.input(node, 0)
        rank = len(ctx.shape(src))
        _remap(ctx, src, ctx.output(node, 0), [0] * rank, [1] * rank, list(range(rank)), tile=True)


def _gather_axes(node: Node, params: Shape, indices: Shape) -> tuple[int, int]:
    axis = _axis(node, int(node.attrs.get("axis", 0)), len(params))
    batch_dims = int(node.attrs.get("batch_dims", 0))
    if batch_dims < 0:
        batch_dims += len(indices)
    if not 0 <= batch_dims <= min(axis, len(indices)):
        raise ModelError(f"{node}: batch_dims {node.attrs.get('batch_dims')} must lie in [0, axis {axis}] "
                         f"and not exceed the indices' rank {len(indices)}")
    if params[:batch_dims] != indices[:batch_dims]:
        raise ModelError(f"{node}: the first {batch_dims} dimensions of params {list(params)} and indices "
                         f"{list(indices)} differ")
    return axis, batch_dims


@register
class Gather(Op):
    name = "GATHER"
    strings = True
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        _outputs(node, 1)
        if node.inputs[1] < 0 or graph.tensors[node.inputs[1]].dtype.kind not in "iu":
            raise ModelError(f"{node}: indices must be an integer tensor")
        params = graph.tensors[node.inputs[0]]
        if params.dtype == STRING and len(params.shape) != 1:
            raise ModelError(f"{node}: STRING params must be 1-D (as LiteRT's kernel requires), have shape "
                             f"{list(params.shape)}")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        p, i = all_required(node, shapes)
        axis, bd = _gather_axes(node, p, i)
        return [p[:axis] + i[bd:] + p[axis + 1:]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        params, indices = all_required(node, inputs)
        axis, bd = _gather_axes(node, params.shape, indices.shape)
        if indices.size and (indices.min() < 0 or indices.max() >= params.shape[axis]):
            raise ModelError(f"{node}: gather index out of bounds: indices span [{indices.min()}, "
                             f"{indices.max()}] for a dimension of size {params.shape[axis]}")
        return [k.gather(params, indices, axis, bd)]

    @staticmethod
    def cpu_step(node: Node, graph: Graph) -> CpuStep | None:
        # static shapes (the indices' values may change every run: bounds checked each time)
        p, i, y = *node.inputs, node.outputs[0]
        if graph.tensors[p].dtype == STRING or _dynamic(graph, p, i, y):
            return None
        params, indices = graph.tensors[p].shape, graph.tensors[i].shape
        axis, bd = _gather_axes(node, params, indices)
        size, lead = params[axis], (slice(None),) * axis

        def step(values: list[np.ndarray | None]) -> None:
            where = values[i]
            assert where is not None
            if where.ndim == 0:  # one index (a loop's step): a copy of its slice
                index = int(where)
                if not 0 <= index < size:
                    raise ModelError(f"{node}: gather index {index} out of bounds for a dimension of size {size}")
                values[y] = np.array(values[p][lead + (index,)])  # type: ignore[index]
                return
            low, high = (where.min(), where.max()) if where.size else (0, 0)
            if low < 0 or high >= size:
                raise ModelError(f"{node}: gather index out of bounds: indices span [{low}, {high}] for a dimension "
                                 f"of size {size}")
            # without batch dimensions GATHER is numpy's take (a tenth of k.gather's time on a loop body's rows)
            values[y] = np.take(values[p], where, axis) if bd == 0 else k.gather(values[p], where, axis, bd)  # type: ignore[arg-type]
        return step

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        # each index's slice: outer dimensions x its row, the index read (and checked) in the program
        p, i, y = *node.inputs, node.outputs[0]
        params, indices = asm.shape(p), asm.shape(i)
        axis, bd = _gather_axes(node, params, indices)
        if bd or graph.tensors[p].dtype == STRING:
            raise asm.declined(f"{node}: batch dimensions")
        outer, inner, count = math.prod(params[:axis]), math.prod(params[axis + 1:]), math.prod(indices)
        for j in range(count):
            asm.copy(y, j * inner, [count * inner, 1], p, 0, [params[axis] * inner, 1], [outer, inner],
                     [(i, j, inner, params[axis] - 1)])

    gpu_ints = True  # int32 params move exactly; run-time int32 indices are read from float32 storage

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        params, indices = (graph.tensors[t] for t in node.inputs)
        runtime = indices.data is None
        if runtime and (graph.constant_like(node.inputs[1]) or indices.dtype != np.int32):
            return f"run-time indices of type {indices.type_name or indices.dtype} (the GPU reads int32 ones)"
        # constant params with run-time indices: an embedding lookup (the table becomes a const buffer)
        verdict = _gpu_check(node, graph, data=() if runtime and graph.constant_like(node.inputs[0]) else (0,),
                             params={} if runtime else {1: "indices"})
        if verdict is not True:
            return verdict
        try:
            axis, batch_dims = _gather_axes(node, params.shape, indices.shape)
        except ModelError as e:
            return str(e)
        if batch_dims:
            return "batch_dims > 0"
        if len(indices.shape) + len(params.shape) - 1 > 4:
            return f"the output would have rank {len(indices.shape) + len(params.shape) - 1}"
        if not runtime:
            values = np.asarray(indices.data).reshape(-1)
            if values.size and (values.min() < 0 or values.max() >= params.shape[axis]):
                return f"indices outside [0, {params.shape[axis]})"
        if params.shape[axis] > 2048 * 2048:
            return f"dimension {axis} of size {params.shape[axis]} is too long to index in fp16"
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        """Constant indices go in a table; run-time ones are read from their tensor (clamped into range, where
        TFLite's kernel would fail the invoke)."""
        src, indices = ctx.input(node, 0), ctx.input(node, 1)
        shape = ctx.shape(src)
        axis, _ = _gather_axes(node, shape, ctx.shape(indices))
        runtime = not ctx.is_const(indices)
        defines: Defines = {"COUNT": _size(ctx.shape(indices)), "AXIS_SIZE": shape[axis],
                            "INNER": _size(shape[axis + 1:]), "VEC4": axis < len(shape) - 1, "RUNTIME": runtime,
                            "CONST_SRC": False, "WRAP": ctx.wraps_indices(node),
                            "ROWS": False}
        dst = ctx.output(node, 0)
        if runtime:
            inputs, consts = {"src": src, "indices": indices}, {}
            if ctx.is_const(src):  # a const buffer has no geometry defines of its own: the table's go along
                del inputs["src"]
                _, h, w, c = table_shape = ctx.bhwc(src)
                defines.update(CONST_SRC=True, TABLE_H=h, TABLE_W=w, TABLE_C=c, TABLE_S=slices(c))
                # pixel-major (a row's slices side by side): a looked-up row is read from consecutive memory, where
                # PHWC4 puts its slices a table plane apart (the text transformer's embedding lookup, profiled:
                # 190 -> 130 us)
                consts["src"] = ctx.const(f"gather_rows:{src}",
                                          lambda: to_rows(ctx.const_value(node, src), table_shape, pixel_major=True),
                                          fp32=ctx.holds_ints(src))
            out_b, out_h, out_w, out_c = ctx.bhwc(dst)
            rows = ctx.cpu_opencl and ctx.is_const(src) and axis == 0 and len(shape) == 2 and out_c == shape[1]
            defines["ROWS"] = rows  # gather.dialect: a work item per looked-up row
            ctx.kernel("gather", inputs, {"dst": dst}, consts, defines,
                       grid=(out_w, out_h, out_b) if rows else ctx.grid(dst))
            return
        values = ctx.const_ints(indices).reshape(-1)

        def table() -> np.ndarray:
            rows = np.zeros(-(-2 * values.size // 4) * 4, np.float32)
            rows[0:2 * values.size:2] = values % 2048
            rows[1:2 * values.size:2] = values // 2048
            return rows.reshape(-1, 4)

        ctx.kernel("gather", {"src": src}, {"dst": dst}, {"table": ctx.const(f"gather:{indices}", table)}, defines,
                   grid=ctx.grid(dst))


@register
class OneHot(Op):
    name = "ONE_HOT"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 4)
        _outputs(node, 1)

    @staticmethod
    def _plan(node: Node, v: np.ndarray, rank: int) -> tuple[int, int]:
        """(depth, axis) from the depth input's value ``v`` and the indices' rank."""
        depth = _scalar(node, v, "depth")
        if depth < 0:
            raise ModelError(f"{node}: depth {depth} is negative")
        axis = int(node.attrs.get("axis", -1))
        if not -1 <= axis <= rank:
            raise ModelError(f"{node}: axis {axis} is out of range for rank {rank} indices")
        return depth, rank if axis == -1 else axis

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, v = required(node, shapes, 0), _const(node, graph, 1)
        if v is None:
            data_dependent(node)
        depth, axis = OneHot._plan(node, v, len(xs))
        return [xs[:axis] + (depth,) + xs[axis:]]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        indices, depth_v, on, off = all_required(node, inputs)
        depth, axis = OneHot._plan(node, depth_v, indices.ndim)
        dtype = graph.tensors[node.outputs[0]].dtype
        return [k.one_hot(indices, depth, on.reshape(-1)[0], off.reshape(-1)[0], axis, dtype)]

    gpu_ints = True

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        indices = graph.tensors[node.inputs[0]]
        if indices.dtype != np.int32:
            return f"indices of type {indices.type_name or indices.dtype} (the GPU reads int32 ones)"
        verdict = _gpu_check(node, graph, params={1: "depth", 2: "on value", 3: "off value"},
                             plan=lambda n, g: OneHot._plan(n, const_input(n, g, 1, "depth"), len(indices.shape)))
        if verdict is not True:
            return verdict
        if len(indices.shape) >= 4:
            return f"the output would have rank {len(indices.shape) + 1}"
        return True

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        indices, dst = ctx.input(node, 0), ctx.output(node, 0)
        rank = len(ctx.shape(indices))
        depth, axis = OneHot._plan(node, const_input(node, graph, 1, "depth"), rank)
        on, off = (float(np.asarray(const_input(node, graph, i, "value")).reshape(-1)[0]) for i in (2, 3))
        defines: Defines = {"DEPTH": depth, "INNER": _size(ctx.shape(dst)[axis + 1:]), "ON_VALUE": on,
                            "OFF_VALUE": off}
        ctx.kernel("one_hot", {"indices": indices}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


@register
class ShapeOp(Op):
    name = "SHAPE"
    strings = True
    reads_shapes_only = True  # the input's shape, not its values

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        _outputs(node, 1)
        if graph.tensors[node.outputs[0]].dtype not in (np.int32, np.int64):
            raise ModelError(f"{node}: output type must be int32 or int64")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        return [(len(required(node, shapes, 0)),)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        return [np.array(required(node, inputs, 0).shape, graph.tensors[node.outputs[0]].dtype)]


# -- padding and block rearrangement ------------------------------------------------------------------------

def _paddings(node: Node, v: np.ndarray, rank: int) -> np.ndarray:
    """The paddings input's value ``v`` as [rank, 2] (before, after)."""
    pads = np.asarray(_ints(node, v, "paddings"), np.int64)
    if pads.size != 2 * rank or pads.min(initial=0) < 0:
        raise ModelError(f"{node}: paddings must be a [{rank}, 2] tensor of values >= 0, got "
                         f"{pads.tolist()}")
    return pads.reshape(rank, 2)


def _padded(shape: Shape, pads: np.ndarray) -> Shape:
    return tuple(d + int(p.sum()) for d, p in zip(shape, pads))


@register
class Pad(Op):
    name = "PAD"
    aliases = ("PADV2",)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2, 3 if node.op == "PADV2" else 2)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, v = required(node, shapes, 0), _const(node, graph, 1)
        if v is None:
            data_dependent(node)
        return [_padded(xs, _paddings(node, v, len(xs)))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        pads = _paddings(node, required(node, inputs, 1), x.ndim)
        out = graph.tensors[node.outputs[0]]
        given = inputs[2] if len(inputs) > 2 else None
        if given is not None:
            value = given.reshape(-1)[0]
        elif out.quant is not None and out.dtype.kind in "iu":
            value = out.quant.scalar()[1]  # quantized zero
        else:
            value = 0
        return [np.pad(x, pads, constant_values=np.asarray(value).astype(x.dtype))]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        params = {1: "paddings", 2: "constant value"} if len(node.inputs) > 2 and node.inputs[2] >= 0 \
            else {1: "paddings"}
        return _gpu_check(node, graph, params=params,
                          plan=lambda n, g: _paddings(n, const_input(n, g, 1, "paddings"),
                                                      len(g.tensors[n.inputs[0]].shape)))

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool:
        # PAD pads with 0.0, the zero point's value (PADV2's constant may lie off the grid)
        return node.op == "PAD" and same_grid(graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]])

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node, 0)
        rank = len(ctx.shape(src))
        pads = np.zeros((4, 2), np.int64)
        pads[4 - rank:] = ctx.const_ints(ctx.input(node, 1)).reshape(rank, 2)
        mode = 0
        # a quantized tensor pads with its zero point: 0.0 in the float domain the GPU computes in
        value_t = ctx.input(node, 2)
        value = float(np.asarray(ctx.const_data(value_t)).reshape(-1)[0]) if value_t >= 0 else 0.0
        src_c = ctx.bhwc(src)[3]
        # whole slices move when channels shift by whole slices and the source's zero padding lanes never
        # show where the pad value belongs
        vec4 = pads[3, 0] % 4 == 0 and (not pads[3].any() or (mode == 0 and (value == 0 or src_c % 4 == 0)))
        defines: Defines = {"MODE": mode, "PAD_VALUE": value, "VEC4": bool(vec4)}
        defines.update({f"BEFORE_{d}": int(p) for d, p in zip("BHWC", pads[:, 0])})
        ctx.kernel("pad", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


@register
class MirrorPad(Op):
    name = "MIRROR_PAD"
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2)
        _outputs(node, 1)
        if int(node.attrs.get("mode", 0)) not in (0, 1):
            raise ModelError(f"{node}: unknown mode {node.attrs.get('mode')} (0 REFLECT, 1 SYMMETRIC)")

    @staticmethod
    def _pads(node: Node, v: np.ndarray, shape: Shape) -> np.ndarray:
        pads = _paddings(node, v, len(shape))
        offset = 1 if int(node.attrs.get("mode", 0)) == 0 else 0
        for d, (a, b) in zip(shape, pads):
            if max(a, b) > d - offset:
                raise ModelError(f"{node}: paddings {pads.tolist()} exceed what shape "
                                 f"{list(shape)} can mirror")
        return pads

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs, v = required(node, shapes, 0), _const(node, graph, 1)
        if v is None:
            data_dependent(node)
        return [_padded(xs, MirrorPad._pads(node, v, xs))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        pads = MirrorPad._pads(node, required(node, inputs, 1), x.shape)
        return [k.mirror_pad(x, pads, 1 if int(node.attrs.get("mode", 0)) == 0 else 0)]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, params={1: "paddings"},
                          plan=lambda n, g: MirrorPad._pads(n, const_input(n, g, 1, "paddings"),
                                                            g.tensors[n.inputs[0]].shape))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node, 0)
        rank = len(ctx.shape(src))
        pads = np.zeros((4, 2), np.int64)
        pads[4 - rank:] = ctx.const_ints(ctx.input(node, 1)).reshape(rank, 2)
        mode = 1 if int(node.attrs.get("mode", 0)) == 0 else 2  # REFLECT, SYMMETRIC
        value = 0.0
        src_c = ctx.bhwc(src)[3]
        # whole slices move when channels shift by whole slices and the source's zero padding lanes never
        # show where the pad value belongs
        vec4 = pads[3, 0] % 4 == 0 and (not pads[3].any() or (mode == 0 and (value == 0 or src_c % 4 == 0)))
        defines: Defines = {"MODE": mode, "PAD_VALUE": value, "VEC4": bool(vec4)}
        defines.update({f"BEFORE_{d}": int(p) for d, p in zip("BHWC", pads[:, 0])})
        ctx.kernel("pad", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


def _block(node: Node, shape: Shape) -> int:
    bs = int(node.attrs.get("block_size", 0))
    if bs < 1:
        raise ModelError(f"{node}: block_size {bs} must be >= 1")
    if len(shape) != 4:
        raise ModelError(f"{node}: input must be 4-D NHWC, got shape {list(shape)}")
    return bs


@register
class DepthToSpace(Op):
    name = "DEPTH_TO_SPACE"
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs = required(node, shapes, 0)
        bs = _block(node, xs)
        b, h, w, c = xs
        if c % (bs * bs):
            raise ModelError(f"{node}: depth {c} is not a multiple of block_size² {bs * bs}")
        return [(b, h * bs, w * bs, c // (bs * bs))]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        DepthToSpace.infer(node, graph, [x.shape])
        return [k.depth_to_space(x, _block(node, x.shape))]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, plan=lambda n, g: DepthToSpace.infer(n, g, [g.tensors[n.inputs[0]].shape]))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node, 0)
        vec4 = ctx.bhwc(dst)[3] % 4 == 0
        defines: Defines = {"BLOCK": _block(node, ctx.shape(src)), "VEC4": vec4}
        ctx.kernel("depth_to_space", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))


@register
class SpaceToDepth(Op):
    name = "SPACE_TO_DEPTH"
    gpu_keeps_grid = staticmethod(moves_grid_values)

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 1)
        _outputs(node, 1)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: Shapes) -> list[Shape]:
        xs = required(node, shapes, 0)
        bs = _block(node, xs)
        b, h, w, c = xs
        if h % bs or w % bs:
            raise ModelError(f"{node}: height {h} and width {w} must be multiples of block_size {bs}")
        return [(b, h // bs, w // bs, c * bs * bs)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        SpaceToDepth.infer(node, graph, [x.shape])
        return [k.space_to_depth(x, _block(node, x.shape))]

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return _gpu_check(node, graph, plan=lambda n, g: SpaceToDepth.infer(n, g, [g.tensors[n.inputs[0]].shape]))

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        src, dst = ctx.input(node, 0), ctx.output(node, 0)
        vec4 = ctx.bhwc(src)[3] % 4 == 0
        defines: Defines = {"BLOCK": _block(node, ctx.shape(src)), "VEC4": vec4}
        ctx.kernel("space_to_depth", {"src": src}, {"dst": dst}, defines=defines, grid=ctx.grid(dst))
