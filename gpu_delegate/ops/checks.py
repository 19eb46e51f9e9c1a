"""Validation helpers every op family shares: arity, ranks, types and quantization parameters of a node's
tensors. Each raises a ModelError that names the node and what is wrong with it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from ..dtypes import is_quantized_int
from ..errors import DataDependentShape, ModelError
from ..graph import Graph, Node, Quantization, Tensor

F32, I8, U8, I32 = np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)
V = TypeVar("V")
# type names that no kernel computes on
_UNCOMPUTABLE = ("STRING", "RESOURCE", "VARIANT", "BFLOAT16")


def input_count(node: Node, low: int, high: int | None = None) -> None:
    high = low if high is None else high
    n = len(node.inputs)
    if not low <= n <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise ModelError(f"{node}: expects {want} inputs, has {n}")


def const_input(node: Node, graph: Graph, i: int, what: str) -> np.ndarray:
    """The constant data of input ``i``; a ModelError if it is not a constant."""
    t = node.inputs[i] if i < len(node.inputs) else -1
    data = graph.tensors[t].data if t >= 0 else None
    if data is None:
        raise ModelError(f"{node}: input {i} ({what}) must be a constant tensor")
    return data


def arity(node: Node, n_in: int, n_out: int) -> None:
    """Exactly ``n_in`` inputs, none of them omitted (-1), and ``n_out`` outputs."""
    input_count(node, n_in)
    if -1 in node.inputs:
        raise ModelError(f"{node}: input {node.inputs.index(-1)} is omitted, but {node.op} needs it")
    if len(node.outputs) != n_out:
        raise ModelError(f"{node}: expects {n_out} output{'s' if n_out > 1 else ''}, has {len(node.outputs)}")


def required(node: Node, values: Sequence[V | None], i: int) -> V:
    """Input i's value (an array in ``run_cpu``, a shape in ``infer``) for an input the op needs; the
    interpreter passes None only for an omitted one, which is a ModelError naming the node."""
    value = values[i]
    if value is None:
        raise ModelError(f"{node}: input {i} is omitted, but {node.op} needs it")
    return value


def all_required(node: Node, values: Sequence[V | None]) -> list[V]:
    """Every input's value, where ``check`` has required all of them (``arity``)."""
    return [required(node, values, i) for i in range(len(values))]


def quant_of(node: Node, t: Tensor) -> Quantization:
    """``t``'s quantization parameters, where ``check`` has required them."""
    if t.quant is None:
        raise ModelError(f"{node}: tensor {t.index} ({t.name!r}) is {t.dtype} without quantization parameters")
    return t.quant


def tensor_of(node: Node, graph: Graph, i: int) -> Tensor | None:
    """Input i's tensor, None when omitted."""
    t = node.inputs[i] if i < len(node.inputs) else -1
    return graph.tensors[t] if t >= 0 else None


def required_tensor(node: Node, graph: Graph, i: int) -> Tensor:
    """Input i's tensor, where ``check`` has made the input required."""
    t = tensor_of(node, graph, i)
    if t is None:
        raise ModelError(f"{node}: input {i} is omitted, but {node.op} needs it")
    return t


def output_of(node: Node, graph: Graph) -> Tensor:
    if len(node.outputs) != 1:
        raise ModelError(f"{node}: expects 1 output, has {len(node.outputs)}")
    return graph.tensors[node.outputs[0]]


def need_rank(node: Node, t: Tensor, rank: int, what: str) -> None:
    if len(t.shape) != rank:
        raise ModelError(f"{node}: {what} must have rank {rank}, has shape {list(t.shape)}")


def is_quantized(t: Tensor) -> bool:
    """An 8- or 16-bit integer tensor carrying a scale: its values stand for scale * (q - zero_point)."""
    return t.quant is not None and is_quantized_int(t.dtype)


def same_grid(a: Tensor, b: Tensor) -> bool:
    """Whether two per-tensor quantized tensors of one integer type stand for the same values by the same codes
    (scales equal as float32, zero points equal)."""
    if not (is_quantized(a) and is_quantized(b)) or a.dtype != b.dtype or a.quant is None or b.quant is None or \
            a.quant.per_channel or b.quant.per_channel:
        return False
    (sa, za), (sb, zb) = a.quant.scalar(), b.quant.scalar()
    return bool(np.float32(sa) == np.float32(sb)) and za == zb


def moves_grid_values(node: Node, graph: Graph, data: Sequence[int] = (0,)) -> bool:
    """Op.gpu_keeps_grid of an op whose kernel only moves or picks values of its inputs ``data`` (a slice, a
    transpose, a gather, a maximum): whether each of them is on the output's grid, so that what it stores is too."""
    out = graph.tensors[node.outputs[0]]
    return bool(data) and all(node.inputs[i] >= 0 and same_grid(graph.tensors[node.inputs[i]], out) for i in data)


def per_tensor(node: Node, t: Tensor) -> tuple[float, int]:
    """(scale, zero_point) of a per-tensor quantized tensor; a ModelError for anything else."""
    if t.quant is None:
        raise ModelError(f"{node}: tensor {t.index} ({t.name!r}) is {t.dtype} without quantization parameters")
    if t.quant.per_channel:
        raise ModelError(f"{node}: tensor {t.index} ({t.name!r}) is quantized per channel; {node.op} needs "
                         "one scale and zero point")
    scale, zp = t.quant.scalar()
    if not scale > 0:
        raise ModelError(f"{node}: tensor {t.index} ({t.name!r}) has quantization scale {scale}, not > 0")
    lo, hi = np.iinfo(t.dtype).min, np.iinfo(t.dtype).max
    if not lo <= zp <= hi:
        raise ModelError(f"{node}: tensor {t.index} ({t.name!r}) has zero point {zp} outside {t.dtype}")
    return scale, zp


def scalar_quant(node: Node, t: Tensor, what: str) -> tuple[float, int]:
    if t.quant is None:
        raise ModelError(f"{node}: quantized {what} tensor {t.name!r} has no quantization parameters")
    if t.quant.per_channel:
        raise ModelError(f"{node}: {what} tensor {t.name!r} must be quantized per tensor")
    return t.quant.scalar()


def type_kinds(*, ints: bool = False, quantized: bool = True, floats: bool = True, bools: bool = False) -> str:
    """What ``check_type`` with these flags accepts, in words (the op table's types column)."""
    kinds = [("float16/32/64", floats), ("int8/uint8/int16 quantized", quantized), ("integers", ints),
             ("bool", bools)]
    return ", ".join(k for k, ok in kinds if ok)


def type_names(dtypes: Iterable[DTypeLike]) -> str:
    """numpy types as the op table lists them: "bool, float32, int8"."""
    kinds = "bfiuc"
    unique = {np.dtype(t) for t in dtypes}
    return ", ".join(t.name for t in sorted(unique, key=lambda t: (kinds.find(t.kind), t.itemsize)))


def check_type(node: Node, t: Tensor, *, ints: bool = False, quantized: bool = True, floats: bool = True,
               bools: bool = False) -> None:
    """Raise a ModelError unless ``t`` is of a kind the op computes: float, quantized 8/16-bit (checked
    per tensor), plain integers, bool."""
    dt = t.dtype
    if t.type_name in _UNCOMPUTABLE:
        ok = False
    elif dt.kind == "f":
        ok = floats
    elif dt.kind == "b":
        ok = bools
    elif is_quantized(t):
        ok = quantized
        if ok:
            per_tensor(node, t)
    else:
        ok = ints and dt.kind in "iu"
    if not ok:
        kind = t.type_name or str(dt)
        raise ModelError(f"{node}: tensor {t.index} ({t.name!r}) is {kind}{' (quantized)' if is_quantized(t) else ''},"
                         f" which {node.op} does not support")


def data_dependent(node: Node) -> NoReturn:
    """What a shape rule does when an output's shape depends on the values of an input not known before invoke:
    the output becomes a dynamic tensor (its shape is set when the node runs)."""
    raise DataDependentShape(f"{node}: an output's shape depends on the values of its inputs")


def check_run_shapes(infer: Callable[[Node, Graph, list[tuple[int, ...] | None]], object], node: Node, graph: Graph,
                     shapes: list[tuple[int, ...] | None]) -> None:
    """Run a shape rule at invoke for the checks it makes on the input shapes; outputs whose shapes depend on data
    are the kernel's to size, so that case passes."""
    try:
        infer(node, graph, shapes)
    except DataDependentShape:
        pass
