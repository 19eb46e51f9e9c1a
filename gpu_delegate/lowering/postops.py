"""Post-ops: elementwise steps applied to a kernel's result before it is stored, so that an activation, an
ADD/MUL with a constant or another tensor, or a fake-quant step costs no kernel and no intermediate tensor.

This module makes them (structured `PostOp`s, see plan.py); the backends' codegen renders them as dialect
text. It knows nothing of particular ops: a caller hands in the op's dialect expression.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..graph import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, Tensor
from ..phwc4 import BHWC, bhwc, slices, to_rows
from .plan import CodeTable, OperandMode, PostOp
from .view import PartitionView

# TFLite's fused activations as dialect expressions over FLT4 ``a``.
ACTIVATION_EXPR = {
    ACT_RELU: "max(a, SPLAT(0.0f))",
    ACT_RELU6: "clamp(a, SPLAT(0.0f), SPLAT(6.0f))",
    ACT_RELU_N1_TO_1: "clamp(a, SPLAT(-1.0f), SPLAT(1.0f))",
    ACT_TANH: "tanh(a)",
}

# registers a constant operand (tensor, mode) as a const buffer of the plan and returns its key
ConstKey = Callable[[int, OperandMode], str]
# registers node n's lookup table (its values) as a const buffer of the plan and returns its key
TableKey = Callable[[int, np.ndarray], str]


def activation_postop(code: int, node: int) -> PostOp | None:
    """The post-op of a fused activation code; None for ACT_NONE. ValueError for a code with no GPU form."""
    if code == ACT_NONE:
        return None
    if code not in ACTIVATION_EXPR:
        raise ValueError(f"fused activation {code} has no GPU form")
    return PostOp("expr", expr=ACTIVATION_EXPR[code], node=node)


# ops whose result is a sum of products (then a fused activation): their fake-quant step may multiply by the
# reciprocal of the scale (PostOp.exact)
SUMS_OF_PRODUCTS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "CONV_3D",
                              "BATCH_MATMUL"})


def quant_grid(tensor: Tensor) -> tuple[float, float, float] | None:
    """A per-tensor quantized integer tensor's grid as a fake-quant step reads it: (scale, lowest code - zero point,
    highest code - zero point); None for any other tensor."""
    q = tensor.quant
    if q is None or tensor.dtype.kind not in "iu" or q.per_channel:
        return None
    info = np.iinfo(tensor.dtype)
    scale, zp = q.scalar()
    return float(scale), float(info.min - zp), float(info.max - zp)


def grid_defines(name: str, grid: tuple[float, float, float]) -> dict[str, float]:
    """A fake-quant step's grid (quant_grid) as a kernel's defines ``<name>_S``, ``<name>_LO``, ``<name>_HI``, the
    scale rounded to float32 as the kernel reads it."""
    scale, lo, hi = grid
    return {f"{name}_S": float(np.float32(scale)), f"{name}_LO": lo, f"{name}_HI": hi}


def fake_quant_postop(view: PartitionView, t: int, node: int) -> PostOp | None:
    """Quantize-dequantize onto tensor ``t`` (node ``node``'s output)'s integer grid, if it is per-tensor
    quantized (so the float graph follows the fixed-point one); None otherwise."""
    grid = quant_grid(view.graph.tensors[t])
    if grid is None:
        return None
    scale, qmin, qmax = grid
    return PostOp("fake_quant", scale=scale, qmin=qmin, qmax=qmax, node=node,
                  exact=view.graph.nodes[node].op not in SUMS_OF_PRODUCTS)


def lookup_grid(table: CodeTable) -> tuple[tuple[float, float, float], int]:
    """Where a value's code on ``table``'s input grid is looked up: that grid as quant_grid gives one (scale, lowest
    and highest code less the zero point), and the table's row of code 0."""
    lo = table.code_min - table.zero_point
    return (table.scale, float(lo), float(lo + table.values.size - 1)), -lo


def lut_postop(table: CodeTable, key: str, node: int, exact: bool = True) -> PostOp:
    """The post-op looking up each value's code on ``table``'s input grid in const ``key`` (the table's values);
    ``exact`` as for the fake-quant step whose rounding the code is (PostOp)."""
    (scale, qmin, qmax), offset = lookup_grid(table)
    return PostOp("lut", operand="table", source=key, scale=scale, qmin=qmin, qmax=qmax, offset=offset, node=node,
                  exact=exact)


def table_rows(table: CodeTable) -> np.ndarray:
    """A table's values as the vec4 rows of a const buffer (zero-filled to a whole row)."""
    rows = np.zeros(slices(table.values.size) * 4, np.float32)
    rows[: table.values.size] = table.values
    return rows.reshape(-1, 4)


def operand_mode(view: PartitionView, u: int, out: BHWC) -> OperandMode | None:
    """How a post-op reads its other operand ``u`` for an output of BHWC ``out``: "scalar" (a constant of one
    element), "tensor" (same shape: same index), "channel" (one value per channel); None if it can't."""
    shape = bhwc(view.shapes[u])
    if view.is_const(u) and int(np.prod(shape)) == 1:
        return "scalar"
    if shape == out:
        return "tensor"
    if shape[:3] == (1, 1, 1) and shape[3] == out[3]:
        return "channel"
    return None


def operand_rows(view: PartitionView, u: int, mode: OperandMode) -> np.ndarray:
    """A constant operand as the vec4 rows a post-op reads: one row (scalar), one per slice (channel), or
    the whole tensor in PHWC4 (tensor)."""
    value = np.asarray(view.const(u), np.float32)
    if mode == "tensor":
        return to_rows(value, view.shapes[u])
    flat = value.reshape(-1)
    if mode == "scalar":
        return np.full((1, 4), flat[0], np.float32)
    rows = np.zeros(slices(flat.size) * 4, np.float32)
    rows[: flat.size] = flat
    return rows.reshape(-1, 4)


def elementwise_postops(view: PartitionView, n: int, flowing: int, expr: str,
                        const_key: ConstKey, table_key: TableKey) -> list[PostOp] | None:
    """The post-ops that compute elementwise node ``n`` (dialect expression ``expr`` over ``a`` = input 0 and
    ``b`` = input 1, or the op's lookup table: Op.gpu_table) from its input slot ``flowing``, followed by its
    fused activation; None if the other operand cannot be read by index (it broadcasts in a way post-ops do not)."""
    node = view.graph.nodes[n]
    ins = view.node_inputs(n)
    out_shape = bhwc(view.shapes[node.outputs[0]])
    if bhwc(view.shapes[ins[flowing]]) != out_shape:
        return None
    others = [k for k, t in enumerate(ins) if t >= 0 and k != flowing]
    if len(others) > 1:
        return None
    ops: list[PostOp] = []
    table = view.op(n).gpu_table(node, view.graph) if not others else None
    if table is not None:
        ops.append(lut_postop(table, table_key(n, table_rows(table)), n))
    elif not others:
        ops.append(PostOp("expr", expr=expr, node=n))
    else:
        k = others[0]
        u = ins[k]
        shape = bhwc(view.shapes[u])
        mode = operand_mode(view, u, out_shape) if (n, k) not in view.zero_extended else \
            "zero_extended" if shape[:3] == out_shape[:3] and shape[3] <= out_shape[3] else None
        if mode is None:
            return None
        source: int | str = const_key(u, mode) if view.is_const(u) else u
        ops.append(PostOp("expr", expr=expr, operand=mode, source=source, operand_first=k < flowing, node=n))
    act = activation_postop(int(node.attrs.get("fused_activation_function", ACT_NONE)), n)
    if act is not None:
        ops.append(act)
    return ops
