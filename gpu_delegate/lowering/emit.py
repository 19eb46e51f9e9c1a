"""Turn the nodes left after the passes into kernel calls, through each op's ``lower``.

`LowerContext` is the whole interface an op's GPU side sees: shapes, constants (already dequantized),
explicit padding, and `kernel()` to emit a call to a source in kernels/.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import DelegateError
from ..graph import PADDING_SAME, Node
from ..ops import get_op
from .fuse_elementwise import channel_const, elementwise_postops
from .plan import KernelCall, PostOp, bhwc, slices
from .view import PartitionView


class LowerContext:
    def __init__(self, view: PartitionView, device_type: str = "gpu"):
        self.view = view
        self.graph = view.graph
        self.device_type = device_type  # "cpu" for CPU-hosted OpenCL/llvmpipe, "gpu" otherwise
        self.kernels: list[KernelCall] = []
        self.consts: dict[str, np.ndarray] = {}
        self.tensors: dict[int, tuple[int, int, int, int]] = {}
        self._node: Node | None = None

    # -- what an op reads ---------------------------------------------------------------------------------
    def input(self, node: Node, k: int) -> int:
        """The tensor input slot ``k`` reads (after PAD merging and reshape dropping)."""
        return self.view.node_inputs(node.index)[k] if k < len(node.inputs) else -1

    def output(self, node: Node, k: int = 0) -> int:
        return node.outputs[k]

    def shape(self, t: int) -> tuple[int, ...]:
        return tuple(self.view.shapes[t])

    def bhwc(self, t: int) -> tuple[int, int, int, int]:
        return bhwc(self.shape(t))

    def const_data(self, t: int) -> np.ndarray | None:
        return self.view.const(t)

    def const_ints(self, t: int) -> np.ndarray:
        """A constant index-like input (axes, paddings, gather indices) as stored, as int64: TFLite reads
        these raw, whatever quantization a file attaches to them (dequantized, they would be floats)."""
        data = self.view.graph.tensors[t].data if t >= 0 else None
        if data is None:
            raise DelegateError(f"input tensor {t} is not a constant in this GPU partition")
        return np.asarray(data).astype(np.int64)

    def is_const(self, t: int) -> bool:
        return self.view.is_const(t)

    def const(self, key: str, make: Callable[[], np.ndarray]) -> str:
        """Register a constant buffer (float32 rows of 4) once under ``key``; returns the key."""
        if key not in self.consts:
            rows = np.ascontiguousarray(make(), np.float32)
            if rows.ndim != 2 or rows.shape[1] != 4:
                rows = rows.reshape(-1, 4)
            self.consts[key] = rows
        return key

    def padding(self, node: Node, in_hw: tuple[int, int], kernel_hw: tuple[int, int],
                stride_hw: tuple[int, int], dilation_hw: tuple[int, int] = (1, 1)) -> tuple[int, int]:
        """(pad_top, pad_left) of a window op: SAME/VALID as TFLite computes it, plus any merged PAD."""
        top = left = 0
        if node.attrs.get("padding") == PADDING_SAME:
            pads = []
            for size, k, s, d in zip(in_hw, kernel_hw, stride_hw, dilation_hw):
                eff = (k - 1) * d + 1
                out = (size + s - 1) // s
                pads.append(max((out - 1) * s + eff - size, 0) // 2)
            top, left = pads
        extra = self.view.extra_padding.get(node.index)
        if extra is not None:
            top += extra[0]
            left += extra[2]
        return top, left

    # -- what an op emits ----------------------------------------------------------------------------------
    def kernel(self, name: str, inputs: dict[str, int], outputs: dict[str, int], consts: dict[str, str] | None = None,
               defines: dict | None = None, grid: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, int, int] | None = None, helpers: str = "") -> KernelCall:
        node = self._node
        view = self.view
        postops: list[PostOp] = []
        outs = {}
        for arg, t in outputs.items():
            final = view.final(t)
            if arg == "dst" and node is not None and t == node.outputs[0]:
                postops = list(view.postops.get(node.index, []))
            outs[arg] = final
            self.tensors[final] = bhwc(view.shapes[t])
        ins = {}
        for arg, t in inputs.items():
            ins[arg] = t
            self.tensors[t] = bhwc(view.shapes[t])
        for p in postops:
            if p.operand is not None and not isinstance(p.source, str):
                self.tensors[p.source] = bhwc(view.shapes[p.source])
        grid3 = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        call = KernelCall(name, node.index if node is not None else -1, ins, outs, dict(consts or {}),
                          dict(defines or {}), grid3, postops, local_size, helpers)
        self.kernels.append(call)
        return call

    def elementwise(self, node: Node) -> None:
        """Lower a standalone elementwise node: its expression as the first post-op of a copy kernel
        when the operand broadcasts simply, else the general broadcasting kernel."""
        ins = self.view.node_inputs(node.index)
        data = [k for k, t in enumerate(ins) if t >= 0 and not self.is_const(t)]
        flowing = data[0] if data else 0
        ops = elementwise_postops(self.view, node.index, flowing, self.operand_const)
        if ops is not None:
            self.view.postops[node.index] = ops + self.view.postops.get(node.index, [])
            self.kernel("copy", {"src": ins[flowing]}, {"dst": node.outputs[0]},
                        grid=self._grid_for(node.outputs[0]))
            return
        op = get_op(node.op)
        a, b = ins[0], ins[1]
        consts, inputs, geometry = {}, {}, ""
        for arg, t in (("a", a), ("b", b)):
            if self.is_const(t):
                shape = self.bhwc(t)
                consts[arg] = self.const(f"bcast:{t}", lambda t=t, shape=shape: _phwc4(self.const_data(t), shape))
                # a const arg has no generated geometry, and KernelSpec keeps its t_* names out of defines
                geometry += "".join(f"#define {arg}_{d} {v}\n" for d, v in zip("BHWCS", (*shape, slices(shape[3]))))
            else:
                inputs[arg] = t
        expr = geometry + f"#define EXPR(a, b) ({op.gpu_expr(node, self.graph)})\n"
        act = node.attrs.get("fused_activation_function", 0)
        if act:
            from .fuse_elementwise import activation_postop

            self.view.postops.setdefault(node.index, []).insert(0, activation_postop(act, node.index))
        self.kernel("broadcast_binary", inputs, {"dst": node.outputs[0]}, consts, {},
                    grid=self._grid_for(node.outputs[0]), helpers=expr)

    def operand_const(self, t: int, mode: str) -> str:
        return self.const(f"operand:{mode}:{t}", lambda: channel_const(self.view, t, mode))

    def _grid_for(self, t: int) -> tuple[int, int, int]:
        b, h, w, c = self.bhwc(t)
        return (w, h, b * slices(c))


def _phwc4(value: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """A BHWC array as PHWC4 rows: (b, s, y, x) order, zero padding channels."""
    return to_phwc4(np.asarray(value, np.float32).reshape(shape))


def to_phwc4(x: np.ndarray) -> np.ndarray:
    b, h, w, c = x.shape
    s = slices(c)
    padded = np.zeros((b, h, w, s * 4), np.float32)
    padded[..., :c] = x
    return np.ascontiguousarray(padded.reshape(b, h, w, s, 4).transpose(0, 3, 1, 2, 4)).reshape(-1, 4)


def emit(view: PartitionView, device_type: str, ctx: LowerContext | None = None) -> LowerContext:
    ctx = ctx or LowerContext(view, device_type)
    for n in view.nodes:
        node = view.graph.nodes[n]
        op = get_op(node.op)
        ctx._node = node
        lower = getattr(op, "lower", None)
        if lower is None:
            raise DelegateError(f"{node}: the op has no GPU lowering")
        lower(node, view.graph, ctx)
    ctx._node = None
    for t in view.outputs:
        if t in view.folded:  # a folded constant (DEQUANTIZE of weights) read outside the partition
            key = ctx.const(f"folded:{t}", lambda t=t: _phwc4(view.folded[t], bhwc(view.shapes[t])))
            ctx.kernel("copy", {}, {"dst": t}, consts={"src": key}, grid=ctx._grid_for(t))
    return ctx
