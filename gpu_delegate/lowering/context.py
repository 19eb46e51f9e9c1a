"""The whole interface an op's GPU side sees: `LowerContext`, handed to ``Op.lower(node, graph, ctx)``.

It gives an op its tensors as the passes left them (after PAD merging and reshape dropping), their shapes,
constants already dequantized, explicit window padding, and `kernel()` to emit a call to a source in kernels/.
Op modules import this module; nothing in lowering/ imports an op module (the passes reach ops through
`PartitionView.op`), so there is no cycle between ops/ and lowering/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..errors import DelegateError
from ..graph import ACT_NONE, PADDING_SAME, Graph, Node
from ..phwc4 import BHWC, bhwc, grid, slices, to_rows
from .plan import CodeTable, KernelCall, OperandMode, PostOp, SoftmaxAfter
from .postops import activation_postop, elementwise_postops, operand_rows
from .view import PartitionView

# Post-ops one kernel applies at most; a longer fused chain continues in copy kernels. Mesa llvmpipe compiles a
# shader in time quadratic in its length (one TANH step: 2.8 ms each in a chain of 64, 13 ms each in a chain of
# 1000), and a chain of identical runs compiles once.
MAX_FUSED_STEPS = 64


class GpuOp(Protocol):
    """What the lowering needs of an op class (gpu_delegate.ops.base.Op declares all of it)."""

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None: ...

    @staticmethod
    def gpu_table(node: Node, graph: Graph) -> CodeTable | None: ...

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool: ...

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None: ...

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]: ...


class LowerContext:
    def __init__(self, view: PartitionView, device_type: str = "gpu", max_buffers: int | None = None,
                 api: str = "", vector_width: int = 4, int8_dot: bool = False, quantized: bool = True):
        self.view = view
        self.graph = view.graph
        self.device_type = device_type  # "cpu" for CPU-hosted OpenCL/llvmpipe, "gpu" otherwise
        self.api = api  # "OpenCL" or "OpenGL" (DeviceInfo.api): whose kernel variants the plan runs
        self.vector_width = vector_width  # floats in the device's native vector (DeviceInfo.vector_width)
        # 4-byte integer dot products (DeviceInfo.int8_dot): 8-bit convolutions sum their codes in int32
        self.int8_dot = int8_dot
        self.quantized = quantized  # 8-bit ops round their outputs to their grid (the delegate's default)
        # buffers one kernel may bind on the device (None: no limit); a fused chain longer than that is split
        self.max_buffers = max_buffers
        self.kernels: list[KernelCall] = []
        self.consts: dict[str, np.ndarray] = {}
        self.tensors: dict[int, BHWC] = {}
        self.node: Node | None = None  # the node being lowered: its output 0 carries the fused post-ops
        # stored as float32 whatever the delegate's precision: scratch tensors and constants holding int32 values
        self.fp32_tensors: set[int] = set()
        self.fp32_consts: set[str] = set()
        self._next_scratch = len(self.graph.tensors)
        # scratch tensors an op derived from another that later ops may read too, by what they hold: an 8-bit
        # convolution's input bytes, (kernel, tensor) -> scratch tensor
        self.derived: dict[tuple[str, int], int] = {}
        # variable tensor -> the plan tensor holding its value after an invoke (an LSTM's states)
        self.state_updates: dict[int, int] = {}
        # outputs stored in the dense BHWC order the host reads, float32 (lowering/dense_outputs.py)
        self.dense: set[int] = set()

    # -- what an op reads ---------------------------------------------------------------------------------
    def input(self, node: Node, k: int) -> int:
        """The tensor input slot ``k`` reads (after PAD merging and reshape dropping); -1 if omitted."""
        return self.view.node_inputs(node.index)[k] if k < len(node.inputs) else -1

    def output(self, node: Node, k: int = 0) -> int:
        return node.outputs[k]

    def input_transposed(self, node: Node, k: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(shape, perm) when input slot ``k`` is read as TRANSPOSE(RESHAPE(``input(node, k)``, shape), perm) (a
        RESHAPE that splits the channels in two and a TRANSPOSE, which a pass dropped), or None when it is read as
        it is."""
        return self.view.read_transposed.get((node.index, k))

    def output_transposed(self, node: Node) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
        """(tensor, shape, perm) when the node's output 0 is to be written as TRANSPOSE(output, perm), of ``shape``,
        reshaped into that tensor (a TRANSPOSE and a RESHAPE that merges the last two axes into the channels, which a
        pass dropped), else None. Emit the kernel's "dst" as output 0 all the same: the post-ops fused into the node
        go with it, and the call writes the tensor."""
        written = self.view.write_transposed.get(node.index)
        return None if written is None else (self.view.final(node.outputs[0]), *written)

    def softmax_after(self, node: Node) -> SoftmaxAfter | None:
        """The scale and beta (and 8-bit roundings) when the node's output 0 is to be written as
        SOFTMAX(output * scale, beta) into ``view.final`` of it (a MUL and a SOFTMAX that a pass dropped), else None."""
        return self.view.softmax_after.get(node.index)

    def input_affine(self, node: Node) -> tuple[np.ndarray, np.ndarray] | None:
        """(scale, shift) per input channel when the node (a CONV_2D) is to read scale * input + shift, the steps that
        computed it dropped (fuse_input_affine.py), else None."""
        return self.view.input_affine.get(node.index)

    def wraps_indices(self, node: Node) -> bool:
        """Whether the node (a GATHER) adds the gathered axis' size to a negative index, as the nodes a pass dropped
        did before it (fuse_index_wrap.py)."""
        return node.index in self.view.wrapped_indices

    def shape(self, t: int) -> tuple[int, ...]:
        return tuple(self.view.shapes[t])

    def bhwc(self, t: int) -> BHWC:
        return bhwc(self.shape(t))

    def grid(self, t: int) -> tuple[int, int, int]:
        """One work item per vec4 of tensor ``t``."""
        return grid(self.bhwc(t))

    @property
    def cpu_opencl(self) -> bool:
        """Whether this is OpenCL on a CPU device, which does not vectorize a work group across its work items: the
        kernels written with a float16 per work item run there instead of the dialect's (kernels/opencl: copy.cl,
        concat.cl, softmax.cl, layer_norm.cl take 4 pixels of a row; batch_matmul.cl, batch_matmul_softmax.cl 4
        rows). A GPU keeps the dialect's work item per pixel or vec4."""
        return self.api == "OpenCL" and self.device_type == "cpu"

    def copy_layout(self, t: int) -> tuple[tuple[int, int, int], dict[str, str]]:
        """The grid and variants of a copy kernel writing ``t``: dialect/copy.dialect, a work item per vec4, or on
        a CPU's OpenCL kernels/opencl/copy.cl, a work item per 4 pixels of a row (wide loads, stores and post-ops,
        where a CPU is bound by instructions; a GPU wants a work item per vec4)."""
        return self.quads_layout(t, "copy")

    def quads_layout(self, t: int, name: str) -> tuple[tuple[int, int, int], dict[str, str]]:
        """The grid and variants of kernel ``name`` writing ``t``: the dialect's work item per vec4, or on a CPU's
        OpenCL kernels/opencl/<name>.cl, a work item per 4 pixels of a row of one slice (quads_grid)."""
        if self.cpu_opencl:
            return self.quads_grid(t), {"opencl": name}
        return self.grid(t), {}

    def pixels_layout(self, t: int, name: str) -> tuple[tuple[int, int, int], dict[str, str]]:
        """The grid and variants of kernel ``name`` whose work item takes one pixel of ``t`` with all its channels
        (a reduction over them: softmax, layer_norm): the dialect's, (W, H, B), or on a CPU's OpenCL
        kernels/opencl/<name>.cl, a work item per 4 pixels of a row, (ceil(W / 4), H, B)."""
        b, h, w, _ = self.bhwc(t)
        if self.cpu_opencl:
            return (-(-w // 4), h, b), {"opencl": name}
        return (w, h, b), {}

    def quads_grid(self, t: int) -> tuple[int, int, int]:
        """A work item per 4 pixels of a row of one slice of tensor ``t``: (ceil(W / 4), H, B * S)."""
        b, h, w, c = self.bhwc(t)
        return -(-w // 4), h, b * -(-c // 4)

    def const_data(self, t: int) -> np.ndarray | None:
        """The float32 value of a constant tensor (dequantized once), or None if ``t`` is not constant."""
        return self.view.const(t)

    def const_value(self, node: Node, t: int) -> np.ndarray:
        """The float32 value of a constant input the op requires to be constant (gpu_support let only constants
        through; a DEQUANTIZE of weights left in another partition would make it a run-time tensor here)."""
        value = self.view.const(t)
        if value is None:
            raise DelegateError(f"{node}: input tensor {t} is not a constant in this GPU partition")
        return np.asarray(value, np.float32)

    def const_ints(self, t: int) -> np.ndarray:
        """A constant index-like input (axes, paddings, gather indices) as stored, as int64: TFLite reads
        these raw, whatever quantization a file attaches to them (dequantized, they would be floats)."""
        data = self.graph.tensors[t].data if t >= 0 else None
        if data is None:
            raise DelegateError(f"input tensor {t} is not a constant in this GPU partition")
        return np.asarray(data).astype(np.int64)

    def is_const(self, t: int) -> bool:
        return self.view.is_const(t)

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

    # -- constants ------------------------------------------------------------------------------------------
    def const(self, key: str, make: Callable[[], np.ndarray], fp32: bool = False) -> str:
        """Register a constant buffer (float32 rows of 4) once under ``key``; returns the key. ``fp32``: stored
        as float32 even where the delegate stores fp16 (integers beyond 2048)."""
        if key not in self.consts:
            rows = np.ascontiguousarray(make(), np.float32)
            if rows.ndim != 2 or rows.shape[1] != 4:
                rows = rows.reshape(-1, 4)
            self.consts[key] = rows
        if fp32:
            self.fp32_consts.add(key)
        return key

    def const_tensor(self, prefix: str, t: int) -> str:
        """Constant tensor ``t`` as a PHWC4 const buffer (a kernel reads it as it would a tensor)."""
        return self.const(f"{prefix}:{t}", lambda: to_rows(self.const_value(self._current(), t), self.bhwc(t)),
                          fp32=self.holds_ints(t))

    def operand_const(self, t: int, mode: OperandMode) -> str:
        """A constant post-op operand, read in ``mode`` (postops.operand_mode)."""
        return self.const(f"operand:{mode}:{t}", lambda: operand_rows(self.view, t, mode), fp32=self.holds_ints(t))

    def table_const(self, n: int, rows: np.ndarray) -> str:
        """Node ``n``'s lookup table (postops.table_rows), stored as float32: an fp16 store would move its values
        off the output's grid."""
        return self.const(f"lut:{n}", lambda: rows, fp32=True)

    def holds_ints(self, t: int) -> bool:
        """Whether graph tensor ``t`` holds int32 values (kept in float32 storage on the device)."""
        return 0 <= t < len(self.graph.tensors) and self.graph.tensors[t].dtype == np.int32

    def update_state(self, variable: int, t: int) -> None:
        """After each invoke, write plan tensor ``t`` into ``variable`` (an input of the node the graph updates in
        place, as TFLite's LSTM does its state): the partition reads the variable at its start, as any input."""
        self.state_updates[variable] = t

    def keep_fp32(self, t: int) -> None:
        """Store tensor ``t`` (as the node reads or writes it) in float32 whatever the delegate's precision: a
        few values that many others depend on (a transform matrix)."""
        self.fp32_tensors.add(self.view.final(t))

    def dense_output(self, t: int) -> None:
        """Output ``t`` is written in the dense row-major BHWC order, as float32, not in PHWC4: read as it is
        (lowering/dense_outputs.py)."""
        self.dense.add(t)
        self.keep_fp32(t)

    def scratch(self, shape: tuple[int, ...], fp32: bool = False) -> int:
        """A new plan tensor of ``shape`` that no graph tensor stands for: an intermediate result of an op
        lowered as several kernels. ``fp32``: stored as float32 whatever the delegate's precision."""
        t = self._next_scratch
        self._next_scratch += 1
        self.view.shapes[t] = tuple(int(d) for d in shape)
        self.tensors[t] = bhwc(self.view.shapes[t])
        if fp32:
            self.fp32_tensors.add(t)
        return t

    # -- what an op emits ----------------------------------------------------------------------------------
    def kernel(self, name: str, inputs: dict[str, int], outputs: dict[str, int], consts: dict[str, str] | None = None,
               defines: dict[str, int | float | str] | None = None, grid: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, int, int] | None = None, helpers: str = "",
               variants: dict[str, str] | None = None, constants: tuple[str, ...] = ()) -> KernelCall:
        """Emit a call of kernels/dialect/<name>.dialect (or of a variant of an API's own language where
        ``variants`` names one, e.g. {"opencl": name}). The post-ops fused into the node's output go with the
        "dst" argument that writes it. ``constants``: the defines that are constants of the arithmetic
        (KernelCall.constants)."""
        node = self.node
        view = self.view
        postops: list[PostOp] = []
        outs = {}
        for arg, t in outputs.items():
            final = view.final(t)
            if arg == "dst" and node is not None and t == node.outputs[0]:
                postops = list(view.postops.get(node.index, []))
            outs[arg] = final
            self.tensors[final] = bhwc(view.shapes[final])
        for t in inputs.values():
            self.tensors[t] = bhwc(view.shapes[t])
        for p in postops:
            if p.tensor_operand is not None:
                self.tensors[p.tensor_operand] = bhwc(view.shapes[p.tensor_operand])
        runs = self._postop_runs(len(inputs) + len(outs) + len(consts or {}), postops)
        chain_end = outs.get("dst")
        if len(runs) > 1:
            outs["dst"] = self._carrier(runs[0])
        grid3 = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        call = KernelCall(name, node.index if node is not None else -1, dict(inputs), outs, dict(consts or {}),
                          dict(defines or {}), (grid3[0], grid3[1], grid3[2]), runs[0], local_size, helpers,
                          dict(variants or {}), constants=constants)
        self.kernels.append(call)
        src = outs.get("dst")
        for k, run in enumerate(runs[1:], 2):
            assert src is not None and chain_end is not None  # only a "dst" argument carries post-ops
            dst = chain_end if k == len(runs) else self._carrier(run)
            copy_grid, variants = self.copy_layout(src)
            self.kernels.append(KernelCall("copy", run[0].node, {"src": src}, {"dst": dst}, {}, {}, copy_grid, run,
                                           variants=variants))
            src = dst
        return call

    def _postop_runs(self, own_buffers: int, postops: list[PostOp]) -> list[list[PostOp]]:
        """``postops`` cut, between the steps of one node and the next, into runs of at most MAX_FUSED_STEPS that
        each fit the device's buffer limit: the first goes with the kernel, which binds ``own_buffers`` of its own,
        each later one with a copy kernel (src and dst). A step with an operand binds one buffer more."""
        limit = self.max_buffers if self.max_buffers is not None else float("inf")
        if len(postops) <= MAX_FUSED_STEPS and own_buffers + sum(p.source is not None for p in postops) <= limit:
            return [postops]
        runs: list[list[PostOp]] = [[]]
        used = own_buffers
        k = 0
        while k < len(postops):
            end = k + 1
            while end < len(postops) and (postops[end].node == postops[k].node or _keeps_open(postops[k:end])):
                end += 1
            # one node's steps (its expression, its activation, its fake-quant step), or from a kept value to its use
            steps = postops[k:end]
            need = sum(p.source is not None for p in steps)
            if runs[-1] and (used + need > limit or len(runs[-1]) + len(steps) > MAX_FUSED_STEPS):
                runs.append([])
                used = 2
            runs[-1].extend(steps)
            used += need
            k = end
        return runs

    def _carrier(self, run: list[PostOp]) -> int:
        """The tensor that carries a split chain's value from one kernel to the next: the output of the last node
        whose steps ``run`` ends with (the same shape as the chain's, which is elementwise)."""
        t = self.graph.nodes[run[-1].node].outputs[0]
        self.tensors[t] = bhwc(self.view.shapes[t])
        return t

    def fuse_activation(self, node: Node) -> None:
        """Apply the node's fused activation as the first post-op of its output (for kernels that do not
        clamp it themselves)."""
        act = activation_postop(int(node.attrs.get("fused_activation_function", ACT_NONE)), node.index)
        if act is not None:
            self.view.postops.setdefault(node.index, []).insert(0, act)

    def elementwise(self, node: Node, expr: str) -> None:
        """Lower a standalone elementwise node computing ``expr`` (over FLT4 ``a``, ``b``): the expression as
        the first post-op of a copy kernel when the other operand can be read by index, else the general
        broadcasting kernel."""
        ins = self.view.node_inputs(node.index)
        data = [k for k, t in enumerate(ins) if t >= 0 and not self.is_const(t)]
        flowing = data[0] if data else 0
        ops = elementwise_postops(self.view, node.index, flowing, expr, self.operand_const, self.table_const)
        if ops is not None:
            self.view.postops[node.index] = ops + self.view.postops.get(node.index, [])
            copy_grid, variants = self.copy_layout(node.outputs[0])
            self.kernel("copy", {"src": ins[flowing]}, {"dst": node.outputs[0]}, grid=copy_grid, variants=variants)
            return
        consts, inputs, geometry = {}, {}, ""
        for arg, t in (("a", ins[0]), ("b", ins[1])):
            if self.is_const(t):
                shape = self.bhwc(t)
                consts[arg] = self.const_tensor("bcast", t)
                # a const arg has no generated geometry, and KernelSpec keeps its t_* names out of defines
                geometry += "".join(f"#define {arg}_{d} {v}\n" for d, v in zip("BHWCS", (*shape, slices(shape[3]))))
            else:
                inputs[arg] = t
        self.fuse_activation(node)
        self.kernel("broadcast_binary", inputs, {"dst": node.outputs[0]}, consts, {},
                    grid=self.grid(node.outputs[0]), helpers=geometry + f"#define EXPR(a, b) ({expr})\n")

    def _current(self) -> Node:
        if self.node is None:
            raise DelegateError("a constant was asked for outside any node's lowering")
        return self.node


def _keeps_open(steps: list[PostOp]) -> bool:
    """Whether ``steps`` keep a value (a "keep" post-op) that none of them reads yet: a kernel must not end there."""
    return bool({p.slot for p in steps if p.kind == "keep"} - {p.slot for p in steps if p.operand == "kept"})
