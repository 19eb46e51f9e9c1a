"""How a model runs: one `SubgraphRun` per subgraph, and the `ModelRun` that holds them and the model's state.

A subgraph is resolved for its input shapes (shapes.resolve: real shapes, shape arithmetic folded, dynamic
tensors marked), the delegates take their partitions of the resolved graph, and the rest runs node by node on the
CPU kernels. Control-flow ops (WHILE, IF, CALL_ONCE) run other subgraphs through the ModelRun, which is the
`ops.base.Runtime` they see; each of those subgraphs is partitioned and delegated like the main one. Resource
variables and hash tables live in the ModelRun, shared by every subgraph, as in LiteRT.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np

from .delegate import DelegateKernel, SimpleDelegate
from .dtypes import zeros
from .errors import KERNEL_FAULTS, MODEL_FAULTS, ModelError
from .graph import Graph, Model
from .loop_program import LoopDeclined, LoopProgram, build_loop
from .ops.base import CpuStep, LookupTable, Shape, get_op, kernel_fault, run_node
from .partition import Partition, schedule, select_partitions
from .shapes import check_run_shape, check_total_size, resolve

log = logging.getLogger("gpu_delegate")
# a loop that does not make a program (and the fault that the calls of its subgraphs then report)
LOOP_DECLINES: tuple[type[Exception], ...] = (LoopDeclined, *MODEL_FAULTS)

# A WHILE's condition and body whose tensors all hold at most this many values run on the CPU, delegates or not:
# a delegated partition there is a round trip to the device every iteration, and the CPU's prepared steps
# (Op.cpu_step) cost a few microseconds a node (tf_keras' GRU of 64 units, per iteration on PoCL: the body's
# partition ~180 us, the CPU ~90). Its list of per-step outputs ([steps, batch, units]) is among the tensors.
LOOP_ON_CPU_VALUES = 1 << 14
LOOP_ON_CPU = f"a loop's condition or body of tensors of at most {LOOP_ON_CPU_VALUES} values runs on the CPU: " \
    "each iteration on the device would be a round trip to it"
# Subgraphs calling subgraphs (WHILE in WHILE) may nest this deep: a model whose subgraphs call each other in a
# cycle fails with a ModelError instead of exhausting the stack.
MAX_CALL_DEPTH = 64


@dataclass(frozen=True)
class ProfileEvent:
    """One step of an invoke, as the profiler set with `Interpreter.set_profiler` receives it: a node run on the
    CPU kernels, or a partition run by a delegate."""

    nodes: tuple[int, ...]
    op: str  # the node's op; "DELEGATE" for a partition
    backend: str  # "cpu", or the delegate's backend ("cl", "gl", or its name)
    seconds: float
    subgraph: int = 0


class Delegated:
    """A partition handed to a delegate, as one step of a subgraph's execution plan."""

    def __init__(self, delegate: SimpleDelegate, partition: Partition, graph: Graph):
        self.delegate = delegate
        self.partition = partition
        self.backend = str(getattr(delegate, "backend_name", delegate.name))
        self.kernel: DelegateKernel = delegate.create_kernel()
        self.kernel.init(graph, list(partition.nodes), list(partition.inputs), list(partition.outputs))


class TensorView(MutableMapping[int, np.ndarray]):
    """A subgraph's tensor values as the mapping a DelegateKernel reads and writes."""

    __slots__ = ("_values",)

    def __init__(self, values: list[np.ndarray | None]):
        self._values = values

    def __getitem__(self, t: int) -> np.ndarray:
        value = self._values[t]
        if value is None:
            raise KeyError(t)
        return value

    def __setitem__(self, t: int, value: np.ndarray) -> None:
        self._values[t] = value

    def __delitem__(self, t: int) -> None:
        self._values[t] = None

    def __contains__(self, t: object) -> bool:
        return isinstance(t, int) and 0 <= t < len(self._values) and self._values[t] is not None

    def __iter__(self) -> Iterator[int]:
        return (t for t, v in enumerate(self._values) if v is not None)

    def __len__(self) -> int:
        return sum(v is not None for v in self._values)


class SubgraphRun:
    """One subgraph as it runs: its plan for the current input shapes and its tensors' values."""

    def __init__(self, model: ModelRun, graph: Graph):
        # a proxy: the ModelRun holds its SubgraphRuns, and a cycle would keep the delegates and their device
        # buffers alive until the garbage collector happens to run
        self.model: ModelRun = weakref.proxy(model)
        self.graph = graph
        self.input_shapes: dict[int, Shape] = {t: graph.tensors[t].shape for t in graph.inputs}
        self.input_dtypes = [graph.tensors[t].dtype for t in graph.inputs]
        self.resolved = graph
        self.steps: list[int | Delegated] = []
        self.prepared: dict[int, CpuStep] = {}  # CPU nodes run by their op's cpu_step
        # every step in order, where each is prepared (a loop's condition and body, mostly): run without the
        # per-step dispatch of _run_steps (a loop of ~26 small nodes spent ~15 us a call there)
        self.only_prepared: list[tuple[int, CpuStep]] | None = None
        self.values: list[np.ndarray | None] = [t.data for t in graph.tensors]
        self.backend_of: dict[int, str] = {}
        self.why_cpu: dict[int, str] = {}
        self.planned_for: tuple[tuple[int, Shape], ...] | None = None
        self.allocated = False

    # -- planning ------------------------------------------------------------------------------------------
    def plan(self) -> None:
        """Resolve the subgraph for its input shapes and split it among the delegates, unless that is done."""
        key = tuple(sorted(self.input_shapes.items()))
        if key == self.planned_for:
            return
        self.free()
        resolved = resolve(self.graph, self.input_shapes, self.model, self.model.source)
        taken: set[int] = set()
        delegated: list[Delegated] = []
        why_not: dict[int, str] = {}
        delegates = self.model.delegates
        if delegates and self.graph.index in self.model.loop_subgraphs and _small_tensors(resolved):
            delegates = []
            why_not = {n.index: LOOP_ON_CPU for n in resolved.live_nodes}
        for delegate in delegates:
            partitions, reasons = select_partitions(delegate, resolved, taken)
            for i, reason in reasons.items():
                why_not.setdefault(i, reason)
            for p in partitions:
                delegated.append(Delegated(delegate, p, resolved))
                taken.update(p.nodes)
        self.backend_of = {i: "folded" for i in resolved.folded}
        self.backend_of.update({i: d.backend for d in delegated for i in d.partition.nodes})
        self.why_cpu = {i: r for i, r in why_not.items() if i not in taken}
        for node in resolved.live_nodes:
            if node.index not in taken:
                self._check_cpu_node(resolved, node.index, why_not.get(node.index))
        by_partition = {id(d.partition): d for d in delegated}
        self.steps = [by_partition[id(s)] if isinstance(s, Partition) else s
                      for s in schedule(resolved, [d.partition for d in delegated])]
        self.prepared = _prepared_steps(resolved, self.steps)
        self.only_prepared = [(step, self.prepared[step]) for step in self.steps if isinstance(step, int)] \
            if all(isinstance(step, int) and step in self.prepared for step in self.steps) else None
        old = self.values
        self.values = [t.data for t in resolved.tensors]
        for t in self.graph.inputs:  # inputs already set keep their values while their shapes stand
            value = old[t]
            if value is not None and value.shape == resolved.tensors[t].shape:
                self.values[t] = value
        self.resolved = resolved
        self.planned_for = key
        self.allocated = False

    def _check_cpu_node(self, graph: Graph, n: int, why_not: str | None) -> None:
        """A node left to the CPU needs a kernel (shapes.resolve has checked the node itself)."""
        node = graph.nodes[n]
        if get_op(node.op) is None:
            raise ModelError(f"{self.model.source}: {node} uses op {node.op}, which no kernel implements"
                             + (f" and no delegate took ({why_not})" if why_not else ""))

    # -- allocation ----------------------------------------------------------------------------------------
    def allocate(self) -> None:
        """Plan if the input shapes changed, give every input and variable tensor an array, prepare the
        delegated partitions."""
        was_allocated = self.allocated and self.planned_for == tuple(sorted(self.input_shapes.items()))
        self.plan()
        graph = self.resolved
        check_total_size(graph, self.model.source)
        for t in graph.inputs:
            if self.values[t] is None:
                self.values[t] = zeros(graph.tensors[t].shape, graph.tensors[t].dtype)
        if not was_allocated:  # like TFLite: RNN state restarts when tensors are (re)allocated
            self.reset_variables(allocating=True)
        for step in self.steps:
            if isinstance(step, Delegated):
                for t in step.partition.inputs:  # read by prepare for their shapes; CPU nodes have not run
                    tensor, value = graph.tensors[t], self.values[t]
                    if value is None or value.shape != tensor.shape:
                        self.values[t] = np.zeros(tensor.shape, tensor.dtype)
                step.kernel.prepare(TensorView(self.values))
                self._note_fallback(step)
        self.allocated = True

    def _note_fallback(self, step: Delegated) -> None:
        """A kernel that fell back to the CPU at prepare: its nodes report the CPU, and why."""
        why = getattr(step.kernel, "cpu_fallback", None)
        for i in step.partition.nodes:
            if why:
                self.backend_of[i] = "cpu"
                self.why_cpu[i] = why
            else:
                self.backend_of[i] = step.backend
                self.why_cpu.pop(i, None)

    def reset_variables(self, allocating: bool = False) -> None:
        """Every variable tensor (RNN state) back to zero (a quantized one: its zero point). At allocation, one
        that a DEQUANTIZE of a constant writes gets that value instead (shapes.resolve): as in LiteRT, which
        dequantizes it once then, and whose reset_all_variables zeroes it."""
        for t in self.resolved.tensors:
            if allocating and t.index in self.resolved.variable_init:
                self.values[t.index] = np.array(self.resolved.variable_init[t.index], t.dtype, copy=True)
            elif t.is_variable:
                zero = t.quant.scalar()[1] if t.quant is not None and t.dtype.kind in "iu" else 0
                self.values[t.index] = np.full(t.shape, zero, t.dtype)

    def shape_of(self, t: int) -> Shape:
        """Tensor ``t``'s current shape: a dynamic tensor's once the node writing it has run."""
        tensor = self.resolved.tensors[t]
        value = self.values[t]
        return tuple(value.shape) if tensor.dynamic and value is not None else tensor.shape

    # -- running -------------------------------------------------------------------------------------------
    def call(self, inputs: list[np.ndarray], profiler: Callable[[ProfileEvent], None] | None) -> list[np.ndarray]:
        """Run as a subgraph another node calls (ModelRun.call): its inputs set, copies of its outputs returned."""
        graph, model = self.graph, self.model
        if len(inputs) != len(graph.inputs):
            raise ModelError(f"{model.source}: subgraph {graph.index} takes {len(graph.inputs)} inputs, "
                             f"is called with {len(inputs)}")
        changed = False
        shapes = self.input_shapes
        for t, dtype, x in zip(graph.inputs, self.input_dtypes, inputs):
            if x.dtype != dtype:
                raise ModelError(f"{model.source}: subgraph {graph.index} input {t} is {dtype}, is called with "
                                 f"{x.dtype}")
            if shapes[t] != x.shape:
                shapes[t] = tuple(x.shape)
                changed = True
        # the plan stands while no input changed its shape, nothing freed it and the interpreter kept it (a
        # loop calls its condition and body every iteration: no sorted key of the shapes each time)
        if changed or not self.allocated or self.planned_for is None:
            self.allocate()
        values = self.values
        for t, x in zip(graph.inputs, inputs):
            values[t] = x
        self.invoke(profiler)
        outs = []
        for t in graph.outputs:
            value = values[t]
            if value is None:
                raise ModelError(f"{model.source}: subgraph {graph.index} output {t} was never written")
            outs.append(np.array(value, copy=True))
        return outs

    def invoke(self, profiler: Callable[[ProfileEvent], None] | None = None) -> None:
        model = self.model
        if not self.prepared or model.errors_ignored:
            self._run_steps(profiler)
            return
        # once, not in each prepared step (nor in each call of a loop's body): inf and nan as TFLite gives them
        model.errors_ignored = True
        try:
            with np.errstate(all="ignore"):
                self._run_steps(profiler)
        finally:
            model.errors_ignored = False

    def _run_steps(self, profiler: Callable[[ProfileEvent], None] | None) -> None:
        values = self.values
        graph = self.resolved
        where = self.model.source
        if self.only_prepared is not None and profiler is None:
            at = -1
            try:
                for at, run_step in self.only_prepared:  # noqa: B007 (the handler names the node)
                    run_step(values)
            except ModelError:
                raise
            except KERNEL_FAULTS as e:
                raise kernel_fault(graph.nodes[at], where, e) from None
            return
        for step in self.steps:
            start = time.perf_counter() if profiler else 0.0
            if isinstance(step, Delegated):
                step.kernel.invoke(TensorView(values))
                if profiler:
                    backend = self.backend_of.get(step.partition.nodes[0], step.backend)
                    profiler(ProfileEvent(tuple(step.partition.nodes), "DELEGATE", backend,
                                          time.perf_counter() - start, graph.index))
                continue
            prepared = self.prepared.get(step)
            if prepared is not None:
                try:
                    prepared(values)
                except ModelError:
                    raise
                except KERNEL_FAULTS as e:
                    raise kernel_fault(graph.nodes[step], where, e) from None
                if profiler:
                    profiler(ProfileEvent((step,), graph.nodes[step].op, "cpu", time.perf_counter() - start,
                                          graph.index))
                continue
            node = graph.nodes[step]
            ins = [values[t] if t >= 0 else None for t in node.inputs]
            for t, v in zip(node.inputs, ins):
                if t >= 0 and v is None:
                    raise ModelError(f"{where}: {node} reads tensor {t} ({graph.tensors[t].name!r}) which nothing "
                                     "has written")
            for t, v in zip(node.outputs, run_node(node, graph, ins, where, self.model)):
                check_run_shape(v, graph.tensors[t], node, where)
                values[t] = v
            if profiler:
                profiler(ProfileEvent((node.index,), node.op, "cpu", time.perf_counter() - start, graph.index))

    def free(self) -> None:
        """Release the delegate kernels of the current plan (device buffers go back now, not at collection)."""
        free_kernels([s.kernel for s in self.steps if isinstance(s, Delegated)])
        self.steps = []
        self.only_prepared = None
        self.planned_for = None


def _small_tensors(graph: Graph) -> bool:
    """Whether every tensor of ``graph`` but its constants holds at most LOOP_ON_CPU_VALUES values (one known only
    at run time counts as small: a slice of a loop's list)."""
    return all(t.data is not None or t.dynamic or min(t.shape, default=0) < 0
               or math.prod(t.shape) <= LOOP_ON_CPU_VALUES for t in graph.tensors)


def _prepared_steps(graph: Graph, steps: list[int | Delegated]) -> dict[int, CpuStep]:
    """The CPU nodes of ``steps`` that their op's cpu_step runs, each reading only tensors that hold a value by
    then (constants, inputs, variables, what an earlier step wrote): the executor's checks are not needed there."""
    written = {t.index for t in graph.tensors if t.data is not None or t.is_variable} | set(graph.inputs)
    prepared: dict[int, CpuStep] = {}
    for step in steps:
        if isinstance(step, Delegated):
            written.update(step.partition.outputs)
            continue
        node = graph.nodes[step]
        op = get_op(node.op)
        if op is not None and not op.needs_runtime and all(t < 0 or t in written for t in node.inputs):
            try:
                fast = op.cpu_step(node, graph)
            except MODEL_FAULTS:
                fast = None  # run_cpu says what is wrong when the node runs, as without prepared steps
            if fast is not None:
                prepared[step] = fast
        written.update(node.outputs)
    return prepared


class _Nested:
    """ModelRun._nested: subgraph ``index`` entered one level deeper, refused past MAX_CALL_DEPTH (a class, not a
    generator: a loop enters its condition and body every iteration)."""

    __slots__ = ("run", "index")

    def __init__(self, run: ModelRun, index: int) -> None:
        self.run, self.index = run, index

    def __enter__(self) -> SubgraphRun:
        return self.run._enter(self.index)

    def __exit__(self, *exc: object) -> None:
        self.run._depth -= 1


class ModelRun:
    """A model's subgraphs and state, and the `ops.base.Runtime` its control-flow and variable ops use."""

    def __init__(self, model: Model, delegates: Sequence[SimpleDelegate], source: str):
        self.model = model
        self.delegates = list(delegates)
        self.source = source
        self.subgraphs = [SubgraphRun(self, g) for g in model.subgraphs]
        # the subgraphs a WHILE runs as its condition and body
        self.loop_subgraphs = {int(n.attrs[a]) for g in model.subgraphs for n in g.nodes if n.op == "WHILE"
                               for a in ("cond_subgraph_index", "body_subgraph_index") if a in n.attrs}
        self.profiler: Callable[[ProfileEvent], None] | None = None
        self._handles: dict[tuple[str, str], int] = {}
        self._variables: dict[int, np.ndarray] = {}
        self._tables: dict[int, LookupTable] = {}
        self._done: set[tuple[str, int]] = set()
        self._depth = 0
        self.errors_ignored = False  # inside a subgraph's invoke that ignores floating-point errors
        self._shape_cache: dict[tuple[int, tuple[Shape, ...]], list[Shape | None]] = {}
        # loops run as one program (loop_program.py), by condition, body and the variables' shapes and types;
        # None where they do not make one, and why in loop_reasons
        self._loops: dict[tuple[int, int, tuple[tuple[Shape, str], ...]], LoopProgram | None] = {}
        self.loop_reasons: dict[tuple[int, int], str] = {}

    def subgraph(self, index: int) -> SubgraphRun:
        if not 0 <= index < len(self.subgraphs):
            raise ModelError(f"{self.source}: subgraph {index} does not exist (the model has {len(self.subgraphs)})")
        return self.subgraphs[index]

    def _nested(self, index: int) -> _Nested:
        return _Nested(self, index)

    # -- ops.base.Runtime ----------------------------------------------------------------------------------
    def graph(self, subgraph: int) -> Graph:
        return self.subgraph(subgraph).graph

    def call(self, subgraph: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
        # no _Nested object: a loop calls its condition and body every iteration
        sub = self._enter(subgraph)
        try:
            return sub.call(inputs, self.profiler)
        finally:
            self._depth -= 1

    def run_loop(self, cond: int, body: int, values: list[np.ndarray]) -> list[np.ndarray] | None:
        if self.profiler is not None:  # the profiler reports every node of every iteration
            return None
        key = (cond, body, tuple((tuple(v.shape), v.dtype.str) for v in values))
        if key not in self._loops:
            self._loops[key] = self._loop_program(cond, body, values)
        program = self._loops[key]
        return None if program is None else program.run(values)

    def _loop_program(self, cond: int, body: int, values: list[np.ndarray]) -> LoopProgram | None:
        """The program of the loop, both subgraphs planned for ``values``; None (the reason kept) where the loop is
        not of small CPU tensors or a node has no translation. What is wrong with the subgraphs or the values
        themselves is left to the calls, which report it."""
        planned: list[SubgraphRun] = []
        try:
            for index in (cond, body):
                sub = self.subgraph(index)
                inputs = sub.graph.inputs
                if len(values) != len(inputs) or any(v.dtype != d for v, d in zip(values, sub.input_dtypes)):
                    return None
                for t, v in zip(inputs, values):
                    sub.input_shapes[t] = tuple(v.shape)
                sub.allocate()
                if any(isinstance(step, Delegated) for step in sub.steps) or not _small_tensors(sub.resolved):
                    raise LoopDeclined(f"subgraph {index} has nodes on a delegate, or large tensors")
                planned.append(sub)
            (c, b) = planned
            return build_loop(c.resolved, [s for s in c.steps if isinstance(s, int)], b.resolved,
                              [s for s in b.steps if isinstance(s, int)])
        except LOOP_DECLINES as e:
            self.loop_reasons[(cond, body)] = str(e)
            log.debug("the loop of condition %d and body %d runs subgraph by subgraph: %s", cond, body, e)
            return None

    def _enter(self, index: int) -> SubgraphRun:
        """Subgraph ``index``, entered one level deeper (the caller steps back out), refused past MAX_CALL_DEPTH."""
        if self._depth >= MAX_CALL_DEPTH:
            raise ModelError(f"{self.source}: subgraphs call each other more than {MAX_CALL_DEPTH} deep "
                             f"(at subgraph {index}): a cycle?")
        sub = self.subgraph(index)
        self._depth += 1
        return sub

    def output_shapes(self, subgraph: int, input_shapes: list[Shape]) -> list[Shape | None]:
        key = (subgraph, tuple(input_shapes))
        if key not in self._shape_cache:
            with self._nested(subgraph) as sub:
                graph = sub.graph
                if len(input_shapes) != len(graph.inputs):
                    raise ModelError(f"{self.source}: subgraph {subgraph} takes {len(graph.inputs)} inputs, "
                                     f"is given {len(input_shapes)}")
                resolved = resolve(graph, dict(zip(graph.inputs, input_shapes)), self, self.source)
                self._shape_cache[key] = [None if resolved.tensors[t].dynamic else resolved.tensors[t].shape
                                          for t in graph.outputs]
        return self._shape_cache[key]

    def resource(self, container: str, shared_name: str) -> int:
        return self._handles.setdefault((container, shared_name), len(self._handles))

    def variable(self, handle: int) -> np.ndarray | None:
        return self._variables.get(handle)

    def assign(self, handle: int, value: np.ndarray) -> None:
        self._variables[handle] = np.array(value, copy=True)

    def first_time(self, key: tuple[str, int]) -> bool:
        if key in self._done:
            return False
        self._done.add(key)
        return True

    def table(self, table_id: int, new: LookupTable | None = None) -> LookupTable | None:
        if new is not None:
            return self._tables.setdefault(table_id, new)
        return self._tables.get(table_id)

    def free(self) -> None:
        for sub in self.subgraphs:
            sub.free()


def free_kernels(kernels: Sequence[DelegateKernel]) -> None:
    for kernel in kernels:
        try:
            kernel.free()
        except Exception as e:  # noqa: BLE001  (a finalizer must not raise; say so and go on)
            log.warning("freeing a delegate kernel failed: %s: %s", type(e).__name__, e)
