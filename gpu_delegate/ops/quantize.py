"""QUANTIZE, DEQUANTIZE and DENSIFY, and the quantization checks the other op families share.

Constants behind DEQUANTIZE and DENSIFY are converted once and memoized on the graph (``ops.base.prepared``
under the keys of ``cpu.quantize.dequantized`` / ``cpu.quantize.densified``), so the GPU lowering can pick
up the same arrays.

On the GPU, DEQUANTIZE and DENSIFY of constants are folded at preparation (lowering/fold_constants.py).
Non-constant 8-bit tensors are held there as their dequantized floats, so QUANTIZE and DEQUANTIZE are the
identity: the rounding of QUANTIZE's output to its grid is the fake-quant step the framework gives every
quantized output (lowering/fuse_elementwise.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..cpu.quant import quantize
from ..cpu.quantize import densified, dequantize_tensor, dequantized, requantize_q
from ..dtypes import is_quantized_int
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, lower_elementwise, register
from .checks import arity, is_quantized, per_tensor, quant_of, required

if TYPE_CHECKING:
    from ..loop_program import LoopAssembler

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


@register
class Quantize(Op):
    """float -> int8/uint8/int16 (per tensor or per channel), or 8/16-bit -> 8/16-bit requantization."""

    name = "QUANTIZE"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if not is_quantized_int(y.dtype) or y.quant is None:
            raise ModelError(f"{node}: output must be a quantized int8/uint8/int16 tensor, is "
                             f"{y.type_name or y.dtype}{'' if y.quant else ' without quantization'}")
        if x.dtype in _FLOATS:
            if y.quant.per_channel and not (0 <= y.quant.axis < len(y.shape)):
                raise ModelError(f"{node}: per-channel axis {y.quant.axis} is outside the output's rank")
            return
        if not is_quantized(x):
            raise ModelError(f"{node}: input must be float32/float16 or a quantized integer tensor, is "
                             f"{x.type_name or x.dtype}")
        per_tensor(node, x)
        per_tensor(node, y)

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = required(node, inputs, 0)
        tx, ty = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if x.dtype.kind == "f":
            q = quant_of(node, ty)
            axis = q.axis if q.per_channel else None
            return [quantize(x.astype(np.float32), q.scale, q.zero_point, ty.dtype, axis)]
        return [requantize_q(x, quant_of(node, tx).scalar(), quant_of(node, ty).scalar(), ty.dtype)]

    # the GpuDelegate has already refused what the GPU path cannot hold (16-bit, per-channel outputs)
    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        return "a"

    lower = staticmethod(lower_elementwise)


@register
class Dequantize(Op):
    """int8/uint8/int16 (per tensor or per channel) or float16 -> float32."""

    name = "DEQUANTIZE"
    # of constant weights: each path prepares those its own way (lowering/fold_constants.py, Graph.prepared)
    foldable = False

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if y.dtype != np.float32:
            raise ModelError(f"{node}: output must be float32, is {y.type_name or y.dtype}")
        if x.dtype == np.float16:
            return
        if not is_quantized_int(x.dtype) or x.quant is None:
            raise ModelError(f"{node}: input must be float16 or a quantized int8/uint8/int16 tensor, is "
                             f"{x.type_name or x.dtype}{'' if x.quant else ' without quantization'}")
        if x.quant.per_channel and not (0 <= x.quant.axis < len(x.shape)):
            raise ModelError(f"{node}: per-channel axis {x.quant.axis} is outside the input's rank")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return [required(node, shapes, 0)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        t = node.inputs[0]
        if graph.tensors[t].is_const:
            return [dequantized(graph, t)]
        return [dequantize_tensor(required(node, inputs, 0), graph.tensors[t])]

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        # of a constant (a recurrent layer's float16 weights): the loop's constant
        t = node.inputs[0]
        if not graph.tensors[t].is_const:
            raise asm.declined(f"{node}: DEQUANTIZE of a tensor computed in the loop")
        asm.fold(node.outputs[0], dequantized(graph, t))

    # a constant input is folded; any other input the GpuDelegate let through is already a float there
    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return True

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        return "a"

    lower = staticmethod(lower_elementwise)


@register
class Densify(Op):
    """A sparse constant (TFLite's sparsity format) -> its dense tensor."""

    name = "DENSIFY"
    foldable = False  # as DEQUANTIZE

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if not x.is_const or x.sparsity is None:
            raise ModelError(f"{node}: input {x.index} ({x.name!r}) must be a sparse constant tensor")
        if x.dtype != y.dtype:
            raise ModelError(f"{node}: input is {x.dtype}, output is {y.dtype}; they must match")
        densified(graph, x.index, str(node))  # validates the sparsity metadata once, at load

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        return [graph.tensors[node.inputs[0]].shape]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return [densified(graph, node.inputs[0], str(node))]
