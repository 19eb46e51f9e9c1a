"""A WHILE's condition and body translated into one program of cpu/loop_vm.py, run as one numba call.

``build_loop`` takes the two subgraphs as planned for the loop's variables (every node on the CPU, every shape
static, the body giving its variables back with their shapes and types) and asks each node's op for its
instructions (``Op.loop_code``, which calls the ``LoopAssembler`` methods here). Every tensor of both subgraphs
gets a place in one float64 workspace, a constant's filled once; the condition's inputs share the body's (the loop
variables). A node that has no translation, or a tensor that is not float32, int32 or bool, declines the whole
loop, which then runs subgraph by subgraph as before (the executor keeps the reason: ``ModelRun.loop_reasons``).

``LoopProgram.run`` writes the variables in, runs the loop and reads them out; where an index lies outside its tensor
(a GATHER's, a SLICE's begin) or a run-time value is not what a translation assumed (a list written elsewhere than at
the counter), it gives None and the caller runs the loop subgraph by subgraph, whose nodes report what is wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cpu import loop_vm as vm
from .cpu.loop_vm import strides_of
from .graph import Graph, Node
from .ops.base import Shape, get_op

_TYPES = {np.dtype(np.float32): vm.F32, np.dtype(np.int32): vm.I32, np.dtype(np.bool_): vm.BOOL}


class LoopDeclined(Exception):
    """A node or tensor the loop program cannot hold (the message says which, and why)."""


def _fold(counts: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]] | None:
    """The box with dimensions of count 1 dropped and neighbours that every operand walks as one merged, padded in
    front to 4 dimensions; None where more than 4 remain."""
    dims = [(c, [s[i] for s in strides]) for i, c in enumerate(counts) if c != 1]
    merged: list[tuple[int, list[int]]] = []
    for c, ss in dims:
        if merged and all(p == c * q for p, q in zip(merged[-1][1], ss)):
            pc, _ = merged[-1]
            merged[-1] = (pc * c, ss)
        else:
            merged.append((c, ss))
    if len(merged) > 4:
        return None
    merged = [(1, [0] * len(strides))] * (4 - len(merged)) + merged
    return [c for c, _ in merged], [[ss[j] for _, ss in merged] for j in range(len(strides))]


class LoopAssembler:
    """The workspace places and instructions of one loop program, built node by node."""

    def __init__(self) -> None:
        self.size = 0
        self.places: dict[tuple[int, int], int] = {}  # (subgraph, tensor) -> workspace place
        self.constants: list[tuple[int, np.ndarray]] = []
        self.programs: dict[int, tuple[list[np.ndarray], list[np.ndarray], list[Node]]] = {}
        self.graph: Graph | None = None
        self.node: Node | None = None
        # tensors whose shape the graph leaves to run time but a translation knows (a list after its item is set)
        self.static: dict[tuple[int, int], Shape] = {}
        # tensors that a translation found constant (a DEQUANTIZE of float16 weights), with their values
        self.folded: dict[tuple[int, int], np.ndarray] = {}

    def declined(self, why: str) -> LoopDeclined:
        """The exception an op's loop_code raises where it has no translation for the node."""
        return LoopDeclined(why)

    # -- places ---------------------------------------------------------------------------------------------
    def _graph(self) -> Graph:
        assert self.graph is not None
        return self.graph

    def shape(self, t: int) -> Shape:
        graph = self._graph()
        return self.static.get((graph.index, t), tuple(graph.tensors[t].shape))

    def type_of(self, t: int) -> int:
        tensor = self._graph().tensors[t]
        kind = _TYPES.get(np.dtype(tensor.dtype)) if tensor.quant is None else None
        if kind is None:
            raise LoopDeclined(f"{self.node}: tensor {t} ({tensor.name!r}) is {tensor.type_name or tensor.dtype}")
        return kind

    def place(self, t: int) -> int:
        """Tensor ``t``'s place (a constant's value written there once)."""
        graph = self._graph()
        key = (graph.index, t)
        if key not in self.places:
            tensor = graph.tensors[t]
            self.type_of(t)
            if key not in self.static and (tensor.dynamic or any(d < 0 for d in tensor.shape)):
                raise LoopDeclined(f"{self.node}: tensor {t} ({tensor.name!r}) has a shape known only at run time")
            if tensor.is_variable:
                raise LoopDeclined(f"{self.node}: tensor {t} ({tensor.name!r}) is a variable")
            self.places[key] = self._reserve(math.prod(self.shape(t)))
            if tensor.data is not None:
                self.constants.append((self.places[key], np.asarray(tensor.data)))
        return self.places[key]

    def value(self, t: int) -> np.ndarray | None:
        """Tensor ``t``'s constant value (the graph's, or one folded here); None where it is computed."""
        graph = self._graph()
        data = graph.tensors[t].data if t >= 0 else None
        return data if data is not None or t < 0 else self.folded.get((graph.index, t))

    def fold(self, t: int, value: np.ndarray) -> None:
        """Tensor ``t`` is the constant ``value`` (its node emits nothing)."""
        graph = self._graph()
        key = (graph.index, t)
        if key in self.places:
            raise LoopDeclined(f"{self.node}: tensor {t} is read before it is folded")
        self.folded[key] = np.asarray(value)
        self.places[key] = self._reserve(self.folded[key].size)
        self.constants.append((self.places[key], self.folded[key]))

    def share(self, t: int, place: int) -> None:
        """Tensor ``t`` of the current subgraph at ``place`` (the condition's inputs at the loop variables')."""
        self.places[(self._graph().index, t)] = place

    def constant(self, value: np.ndarray) -> int:
        """A place holding ``value`` (a node's own constant: a weight matrix laid out for DENSE)."""
        at = self._reserve(value.size)
        self.constants.append((at, value))
        return at

    def _reserve(self, n: int) -> int:
        at = self.size
        self.size += max(n, 1)
        return at

    # -- instructions ---------------------------------------------------------------------------------------
    def _emit(self, row: np.ndarray, lo: float = -np.inf, hi: float = np.inf) -> None:
        assert self.node is not None and self.graph is not None
        code, fparams, nodes = self.programs.setdefault(self.graph.index, ([], [], []))
        code.append(row)
        fparams.append(np.array([lo, hi]))
        nodes.append(self.node)

    def elementwise(self, fn: str, inputs: Sequence[int], y: int, lo: float = -np.inf, hi: float = np.inf) -> None:
        """y = fn(inputs) with numpy's broadcasting, then clamped to [lo, hi] (a fused activation)."""
        table = vm.UNARY_FNS if len(inputs) == 1 else vm.BINARY_FNS
        if fn not in table:
            raise LoopDeclined(f"{self.node}: {fn} has no loop form")
        for t in inputs:
            kind = self.type_of(t)
            if kind == vm.I32 and fn not in vm.INT_FNS or kind == vm.BOOL and fn not in vm.BOOL_FNS:
                raise LoopDeclined(f"{self.node}: {fn} of {'int32' if kind == vm.I32 else 'bool'} tensors")
        row = self._broadcast(vm.UNARY if len(inputs) == 1 else vm.BINARY, inputs, y)
        row[vm.F_FN] = table[fn]
        self._emit(row, lo, hi)

    def select(self, cond: int, x: int, y: int, out: int, rows: bool = False) -> None:
        """out = x where cond else y, with numpy's broadcasting (``rows``: cond a vector over the first
        dimension, SELECT's other form)."""
        kind = self.type_of(out)
        if self.type_of(cond) != vm.BOOL or self.type_of(x) != kind or self.type_of(y) != kind:
            raise LoopDeclined(f"{self.node}: operand types")
        shapes = None
        if rows:
            rank = len(self.shape(out))
            shapes = [self.shape(cond) + (1,) * (rank - 1), self.shape(x), self.shape(y)]
        self._emit(self._broadcast(vm.SELECT, [cond, x, y], out, shapes))

    def _broadcast(self, kind: int, inputs: Sequence[int], y: int, shapes: Sequence[Shape] | None = None
                   ) -> np.ndarray:
        """An instruction row of ``kind`` over y's elements, each input's strides broadcast against y's shape
        (``shapes``: the inputs' shapes, where they are read as other than their own)."""
        out_shape = self.shape(y)
        rank = len(out_shape)
        strides = [strides_of(out_shape)]
        for shape in shapes or [self.shape(t) for t in inputs]:
            if len(shape) > rank:
                raise LoopDeclined(f"{self.node}: an input of rank {len(shape)} for an output of rank {rank}")
            padded = (1,) * (rank - len(shape)) + tuple(shape)
            own = strides_of(padded)
            strides.append([0 if d == 1 else s for d, s in zip(padded, own)])
        folded = _fold(out_shape, *strides)
        if folded is None:
            raise LoopDeclined(f"{self.node}: more than 4 dimensions")
        counts, (out_s, *in_s) = folded
        row = np.zeros(vm.WIDTH, np.int64)
        row[vm.F_KIND] = kind
        row[vm.F_TYPE] = self.type_of(y)
        row[vm.F_N:vm.F_N + 4] = counts
        row[vm.F_OUT], row[vm.F_OUT + 1:vm.F_OUT + 5] = self.place(y), out_s
        for field, t, s in zip((vm.F_A, vm.F_B, vm.F_C), inputs, in_s):
            row[field], row[field + 1:field + 5] = self.place(t), s
        return row

    def copy(self, y: int, y_base: int, y_strides: Sequence[int], x: int, x_base: int, x_strides: Sequence[int],
             counts: Sequence[int], indices: Sequence[tuple[int, int, int, int]] = (),
             move_output: bool = False) -> None:
        """Elements of ``x`` into ``y``: over the box ``counts``, y's element at y_base + index . y_strides gets x's
        at x_base + index . x_strides, x_base (y_base where ``move_output``) moved by each run-time index (tensor,
        element, stride, largest index): that element of an int32 tensor times the stride, the element checked
        against 0 .. largest index."""
        if self.type_of(x) != self.type_of(y):
            raise LoopDeclined(f"{self.node}: copies between types")
        if len(indices) > 4:
            raise LoopDeclined(f"{self.node}: more than 4 run-time indices")
        folded = _fold(counts, y_strides, x_strides)
        if folded is None:
            raise LoopDeclined(f"{self.node}: more than 4 dimensions")
        counts4, (out_s, in_s) = folded
        if self._aliases(y, y_base, x, counts4, out_s, in_s, indices, move_output):
            self.share(y, self.place(x) + x_base)  # no instruction: y is a run of x's elements as they lie
            return
        row = np.zeros(vm.WIDTH, np.int64)
        row[vm.F_KIND] = vm.COPY
        row[vm.F_FN] = vm.MOVE_OUTPUT if move_output else vm.MOVE_SOURCE
        row[vm.F_N:vm.F_N + 4] = counts4
        row[vm.F_OUT], row[vm.F_OUT + 1:vm.F_OUT + 5] = self.place(y) + y_base, out_s
        row[vm.F_A], row[vm.F_A + 1:vm.F_A + 5] = self.place(x) + x_base, in_s
        row[vm.F_DYN:vm.F_DYN + 12] = [-1, 0, 0] * 4
        for j, (t, element, stride, largest) in enumerate(indices):
            if self.type_of(t) != vm.I32 or not 0 <= element < math.prod(self.shape(t)):
                raise LoopDeclined(f"{self.node}: a run-time index that is no int32 element")
            row[vm.F_DYN + 3 * j:vm.F_DYN + 3 * j + 3] = self.place(t) + element, stride, largest
        self._emit(row)

    def _aliases(self, y: int, y_base: int, x: int, counts: Sequence[int], out_s: Sequence[int],
                 in_s: Sequence[int], indices: Sequence[tuple[int, int, int, int]], move_output: bool) -> bool:
        """Whether the copy makes all of y from one run of x's elements in order, so that y can take that run's
        place: a RESHAPE, or a SPLIT / SLICE / STRIDED_SLICE / constant GATHER of whole rows. Safe because a place is
        written once an iteration, by its producer before any reader (a loop variable's by the carry, after every
        reader; a list written in place has no reader besides its write)."""
        run = [c for c in counts if c != 1]
        if indices or move_output or y_base or len(run) > 1 or (self._graph().index, y) in self.places:
            return False
        n = run[0] if run else 1
        return n == math.prod(self.shape(y)) and (n == 1 or (out_s[-1] == 1 and in_s[-1] == 1))

    def check(self, t: int, element: int, equals: tuple[int, int, int] | None = None,
              one_of: tuple[int, int] = (0, 0)) -> None:
        """Element ``element`` of int32 tensor ``t`` is, at run time, element e of tensor u plus delta where
        ``equals`` is (u, e, delta), else one of ``one_of``: what a translation assumed (the loop then runs
        subgraph by subgraph where it is not)."""
        row = np.zeros(vm.WIDTH, np.int64)
        row[vm.F_KIND] = vm.CHECK
        for u in (t, *([equals[0]] if equals else [])):
            if self.type_of(u) != vm.I32:
                raise LoopDeclined(f"{self.node}: a run-time value that is not int32")
        row[vm.F_A] = self.place(t) + element
        if equals is not None:
            row[vm.F_B], row[vm.F_N] = self.place(equals[0]) + equals[1], equals[2]
        else:
            row[vm.F_B], row[vm.F_N + 1], row[vm.F_N + 2] = -1, *one_of
        self._emit(row)

    def dense(self, x: int, w: np.ndarray, bias: np.ndarray | None, y: int, lo: float, hi: float) -> None:
        """y [M, O] = clamp(x [M, K] w [K, O] + bias), rounded to float32."""
        depth, width = w.shape
        if self.type_of(x) != vm.F32 or self.type_of(y) != vm.F32:
            raise LoopDeclined(f"{self.node}: not float32")
        rows = math.prod(self.shape(x)) // depth
        row = np.zeros(vm.WIDTH, np.int64)
        row[vm.F_KIND] = vm.DENSE
        row[vm.F_N:vm.F_N + 3] = rows, depth, width
        row[vm.F_OUT], row[vm.F_A] = self.place(y), self.place(x)
        row[vm.F_B] = self.constant(np.asarray(w, np.float64))
        row[vm.F_BIAS] = -1 if bias is None else self.constant(np.asarray(bias, np.float64))
        self._emit(row, lo, hi)

    def list_write(self, write: ListWrite, y: int) -> None:
        """y = x with its item i along the axis set to v (ListWrite), i read at run time, the slices' other bounds
        checked."""
        x_shape, axis = self.shape(write.x), write.axis
        self.static[(self._graph().index, y)] = x_shape
        for d in range(len(x_shape)):
            if d != axis:
                self.check(write.size, d, one_of=(-1, x_shape[d]))
                self.check(write.rest_begin, d, one_of=(0, 0))
        self.check(write.rest_begin, axis, equals=(write.size, axis, 1))
        n, x_strides, v_shape = math.prod(x_shape), strides_of(x_shape), self.shape(write.v)
        if write.in_place:  # (a loop variable's list: the carry back to its place is then no copy either)
            self.share(y, self.place(write.x))
        else:
            self.copy(y, 0, [1], write.x, 0, [1], [n])
        self.copy(y, 0, x_strides, write.v, 0, strides_of(v_shape), v_shape,
                  [(write.size, axis, x_strides[axis], x_shape[axis] - 1)], move_output=True)

    def translate(self, graph: Graph, steps: Sequence[int]) -> None:
        """Every node of ``steps`` (in that order) through its op's loop_code; a list's item set by two SLICEs and a
        CONCATENATION as one write (list_writes)."""
        self.graph = graph
        self.programs.setdefault(graph.index, ([], [], []))
        writes, taken = list_writes(graph, steps)
        for n in steps:
            node = graph.nodes[n]
            self.node = node
            if n in taken:
                continue
            if n in writes:
                self.list_write(writes[n], node.outputs[0])
                continue
            op = get_op(node.op)
            if op is None:
                raise LoopDeclined(f"{node}: no kernel")
            op.loop_code(node, graph, self)

    def arrays(self, index: int) -> tuple[np.ndarray, np.ndarray, list[Node]]:
        code, fparams, nodes = self.programs[index]
        return (np.array(code, np.int64).reshape(-1, vm.WIDTH), np.array(fparams, np.float64).reshape(-1, vm.FWIDTH),
                nodes)


@dataclass
class ListWrite:
    """CONCATENATION(SLICE(x, 0, size), v, SLICE(x, rest_begin, -1)) along ``axis``, where size is [i, -1, ...] and
    rest_begin [i + 1, 0, ...] at run time: x with its item i set to v, how TensorFlow's converter lowers a
    TensorList's SetItem in a loop (a Keras recurrent layer's output sequence)."""

    x: int
    v: int
    axis: int
    size: int  # the first SLICE's size tensor
    rest_begin: int  # the second SLICE's begin tensor
    in_place: bool  # nothing else reads x: the result takes x's place, only v is copied


def list_writes(graph: Graph, steps: Sequence[int]) -> tuple[dict[int, ListWrite], set[int]]:
    """The list writes among ``steps`` (by their CONCATENATION), and their SLICE nodes, which they replace."""
    producer = {t: n for n in steps for t in graph.nodes[n].outputs}
    readers = Counter(t for n in steps for t in graph.nodes[n].inputs)
    readers.update(graph.outputs)
    writes: dict[int, ListWrite] = {}
    taken: set[int] = set()
    for n in steps:
        node = graph.nodes[n]
        if node.op != "CONCATENATION" or len(node.inputs) != 3 or node.attrs.get("fused_activation_function", 0):
            continue
        first, v, rest = node.inputs
        if first not in producer or rest not in producer or readers[first] != 1 or readers[rest] != 1:
            continue
        head, tail = graph.nodes[producer[first]], graph.nodes[producer[rest]]
        if head.op != "SLICE" or tail.op != "SLICE" or head.inputs[0] != tail.inputs[0] or min(head.inputs) < 0 or \
                min(tail.inputs) < 0:
            continue
        x = head.inputs[0]
        x_shape, v_shape = graph.tensors[x].shape, graph.tensors[v].shape
        rank = len(x_shape)
        axis = int(node.attrs.get("axis", 0))
        axis = axis + rank if axis < 0 else axis
        begin, rest_size = graph.tensors[head.inputs[1]].data, graph.tensors[tail.inputs[2]].data
        if not 0 <= axis < rank or graph.tensors[node.outputs[0]].shape != x_shape or len(v_shape) != rank or \
                any(a != b for d, (a, b) in enumerate(zip(v_shape, x_shape)) if d != axis) or v_shape[axis] != 1 or \
                begin is None or np.any(begin != 0) or rest_size is None or rest_size.size != rank or \
                int(rest_size[axis]) != -1 or any(int(c) not in (-1, d) for c, d in zip(rest_size, x_shape)):
            continue
        writes[n] = ListWrite(x, v, axis, head.inputs[2], tail.inputs[1], readers[x] == 2)
        taken.update((producer[first], producer[rest]))
    return writes, taken


@dataclass
class LoopProgram:
    """A loop ready to run: its two programs, the workspace's constants, where its variables live."""

    cond: np.ndarray
    cond_f: np.ndarray
    cond_nodes: list[Node]
    body: np.ndarray
    body_f: np.ndarray
    body_nodes: list[Node]
    workspace: np.ndarray
    flag: int
    carry: np.ndarray
    variables: list[tuple[int, Shape, np.dtype]]  # place, shape, dtype of each loop variable
    failed: Node | None = None  # the node whose instruction stopped the last run

    def __post_init__(self) -> None:
        self.stage = np.empty(max(int(self.carry[:, 2].sum()), 1))  # run_loop's scratch for the carried values

    def run(self, values: Sequence[np.ndarray]) -> list[np.ndarray] | None:
        """The variables after the loop; None where a run-time index or value is not what the program assumed (an
        index outside its tensor, a list written elsewhere than at the counter): the caller then runs the loop
        subgraph by subgraph, which reports it as the nodes do (``failed`` says where it stopped)."""
        # the workspace itself, no copy (37 us for a bidirectional LSTM's 350 KB): the constants' places are never
        # written, and every other place is written (the variables' here) before an instruction reads it
        ws = self.workspace
        for (at, shape, _), v in zip(self.variables, values):
            ws[at:at + max(math.prod(shape), 1)] = np.asarray(v).reshape(-1)
        status, k = vm.run_loop(self.cond, self.cond_f, self.body, self.body_f, ws, self.flag, self.carry,
                                self.stage)
        if status:
            self.failed = (self.cond_nodes if status == 1 else self.body_nodes)[k]
            return None
        outs = []
        for at, shape, dtype in self.variables:
            region = ws[at:at + max(math.prod(shape), 1)]
            outs.append((region != 0 if dtype == np.bool_ else region.astype(dtype)).reshape(shape))
        return outs


def build_loop(cond: Graph, cond_steps: Sequence[int], body: Graph, body_steps: Sequence[int]) -> LoopProgram:
    """The program of a loop whose condition and body are planned (``*_steps``: their nodes in order, all on the
    CPU); raises LoopDeclined with the reason where it cannot be built."""
    if len(cond.outputs) != 1 or math.prod(cond.tensors[cond.outputs[0]].shape) != 1 or \
            np.dtype(cond.tensors[cond.outputs[0]].dtype) != np.bool_:
        raise LoopDeclined("the condition does not give one bool")
    if len(cond.inputs) != len(body.inputs) or len(body.outputs) != len(body.inputs):
        raise LoopDeclined("the condition or the body takes another number of values than the loop has")
    for t_in, t_out in zip(body.inputs, body.outputs):
        a, b = body.tensors[t_in], body.tensors[t_out]
        if a.shape != b.shape or np.dtype(a.dtype) != np.dtype(b.dtype):
            raise LoopDeclined(f"the body changes loop variable {a.name!r}: {list(a.shape)} {a.dtype} -> "
                               f"{list(b.shape)} {b.dtype}")
    asm = LoopAssembler()
    asm.graph = body
    variables = [(asm.place(t), body.tensors[t].shape, np.dtype(body.tensors[t].dtype)) for t in body.inputs]
    asm.graph = cond
    for t, (at, shape, dtype) in zip(cond.inputs, variables):
        tensor = cond.tensors[t]
        if tensor.shape != shape or np.dtype(tensor.dtype) != dtype:
            raise LoopDeclined(f"the condition's input {tensor.name!r} differs from the body's")
        asm.share(t, at)
    asm.translate(cond, cond_steps)
    flag = asm.place(cond.outputs[0])
    asm.translate(body, body_steps)
    asm.graph = body
    carry = [(asm.place(t_out), at, max(math.prod(shape), 1))
             for t_out, (at, shape, _) in zip(body.outputs, variables)]
    ws = np.zeros(asm.size)
    for at, value in asm.constants:
        ws[at:at + value.size] = np.asarray(value, np.float64).reshape(-1)
    cond_code, cond_f, cond_nodes = asm.arrays(cond.index)
    body_code, body_f, body_nodes = asm.arrays(body.index)
    return LoopProgram(cond_code, cond_f, cond_nodes, body_code, body_f, body_nodes, ws, flag,
                       np.array([c for c in carry if c[0] != c[1]], np.int64).reshape(-1, 3), variables)
