"""Reading a node's operands, for the op families whose parameters arrive as tensors (FILL's dims, RANGE's
bounds, SPACE_TO_BATCH_ND's paddings, ...) and whose element types are checked against a fixed list.

A parameter tensor is read from the run-time arrays when the node runs, and from the model's constant data
when shapes are inferred; an op whose output shape depends on a tensor that is not a constant declares the
shape the model gives at load and computes the real one when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import ModelError
from ..graph import MAX_TENSOR_BYTES, Graph, Node, Tensor

Shape = tuple[int, ...]
Inputs = list[np.ndarray | None]


def operand(node: Node, graph: Graph, inputs: Inputs | None, i: int) -> np.ndarray | None:
    """Input ``i``'s contents: the run-time array when running (``inputs`` given), the constant data when
    inferring; None for an omitted input or a non-constant one at inference."""
    if i >= len(node.inputs) or node.inputs[i] < 0:
        return None
    if inputs is not None:
        return inputs[i]
    return graph.tensors[node.inputs[i]].data


def arrays(node: Node, inputs: Inputs) -> list[np.ndarray]:
    """The run-time arrays of a node none of whose inputs may be omitted."""
    present = []
    for i, v in enumerate(inputs):
        if v is None:
            raise ModelError(f"{node}: input {i} is omitted, but {node.op} needs it")
        present.append(v)
    return present


def known(node: Node, shapes: list[Shape | None]) -> list[Shape]:
    """The input shapes of a node none of whose inputs may be omitted."""
    present = []
    for i, shape in enumerate(shapes):
        if shape is None:
            raise ModelError(f"{node}: input {i} is omitted, but {node.op} needs it")
        present.append(shape)
    return present


def int_list(node: Node, v: np.ndarray, what: str) -> list[int]:
    if v.dtype.kind not in "iu":
        raise ModelError(f"{node}: {what} must be an integer tensor, got {v.dtype}")
    return [int(x) for x in np.asarray(v).reshape(-1)]


def scalar_of(node: Node, v: np.ndarray, what: str) -> np.ndarray:
    """The one element of a tensor that must hold exactly one, as a 0-d array of its type."""
    if v.size != 1:
        raise ModelError(f"{node}: {what} must hold one value, has shape {list(v.shape)}")
    return np.asarray(v).reshape(())


def outputs(node: Node, n: int) -> None:
    if len(node.outputs) != n:
        raise ModelError(f"{node}: expects {n} output{'s' if n > 1 else ''}, has {len(node.outputs)}")


def tensor_in(node: Node, graph: Graph, i: int) -> Tensor:
    return graph.tensors[node.inputs[i]]


def tensor_out(node: Node, graph: Graph, i: int = 0) -> Tensor:
    return graph.tensors[node.outputs[i]]


def kind(t: Tensor) -> str:
    return t.type_name or str(t.dtype)


def require_type(node: Node, t: Tensor, allowed: Iterable[type], what: str) -> None:
    """A ModelError unless ``t``'s element type is one of ``allowed`` (numpy scalar types). Tensors numpy
    cannot hold (STRING, RESOURCE, BFLOAT16, ...) are refused whatever their stand-in dtype."""
    dtypes = tuple(np.dtype(a) for a in allowed)
    if t.type_name in ("STRING", "RESOURCE", "VARIANT", "BFLOAT16") or t.dtype not in dtypes:
        names = ", ".join(sorted(str(a) for a in dtypes))
        raise ModelError(f"{node}: {what} (tensor {t.index}, {t.name!r}) is {kind(t)}; {node.op} takes {names}")


def same_type(node: Node, a: Tensor, b: Tensor) -> None:
    if a.dtype != b.dtype or a.type_name != b.type_name:
        raise ModelError(f"{node}: tensors {a.index} ({a.name!r}) and {b.index} ({b.name!r}) must have the same "
                         f"type, are {kind(a)} and {kind(b)}")


def same_quantization(node: Node, a: Tensor, b: Tensor) -> None:
    """Ops that move quantized codes without rescaling need one scale and zero point on both sides."""
    qa = a.quant.scalar() if a.quant is not None and not a.quant.per_channel else None
    qb = b.quant.scalar() if b.quant is not None and not b.quant.per_channel else None
    if (a.quant is None) != (b.quant is None) or (qa is not None and qb is not None
                                                  and (np.float32(qa[0]) != np.float32(qb[0]) or qa[1] != qb[1])):
        raise ModelError(f"{node}: tensors {a.index} ({a.name!r}) and {b.index} ({b.name!r}) must share one "
                         f"quantization, have {qa} and {qb}")


def shape_vector(node: Node, v: np.ndarray, what: str) -> Shape:
    """A 1-D integer tensor holding a shape (non-negative dimensions)."""
    if v.ndim != 1:
        raise ModelError(f"{node}: {what} must be a 1-D tensor, has shape {list(v.shape)}")
    dims = tuple(int_list(node, v, what))
    if any(d < 0 for d in dims):
        raise ModelError(f"{node}: {what} {list(dims)} has a negative dimension")
    return dims


def bounded(node: Node, shape: Shape, dtype: np.dtype) -> Shape:
    """A shape computed from tensor values at run time, refused when its tensor would exceed the size the
    interpreter allows any tensor (a FILL of dims [10^5, 10^5, 10^5] is a ModelError, not a MemoryError)."""
    nbytes = int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelError(f"{node}: an output of shape {list(shape)} would need {nbytes / 2**30:.1f} GiB, more than "
                         f"the {MAX_TENSOR_BYTES >> 30} GiB allowed")
    return shape
