"""What every op module provides, and the registry that finds an op by its name.

An op is one class, registered under its TFLite name, that holds everything about it:

    @register
    class Conv2D(Op):
        name = "CONV_2D"
        max_version = 8
        def check(node, graph): ...                # validate at load: ModelError naming what is wrong
        def infer(node, graph, shapes): ...        # output shapes from input shapes (and constants)
        def run_cpu(node, graph, inputs): ...      # the CPU kernel (numba, in gpu_delegate/cpu/)
        def cpu_step(node, graph): ...             # optional: run_cpu prepared once for the executor
        def loop_code(node, graph, asm): ...       # optional: its instructions in a loop's program (loop_program.py)
        def gpu_support(node, graph): ...          # True, or why the GPU path cannot take this node
        def lower(node, graph, ctx): ...           # the GPU kernel calls (kernels/), via lowering.context
        def gpu_expr(node, graph): ...             # elementwise ops: the result as a dialect expression

All methods are static: an op has no state. Attributes come from ``node.attrs`` (see graph.py). Class attributes
say the rest: ``max_version``, ``types`` and ``strings`` (the types its CPU kernel takes; ops/table.py makes the
README's op table of them), ``needs_runtime`` (it calls subgraphs or holds state: run_in / infer_in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

import numpy as np

from ..dtypes import STRING
from ..errors import KERNEL_FAULTS, DelegateError, ModelError
from ..graph import Graph, Node
from ..lowering.context import LowerContext
from ..lowering.plan import CodeTable

if TYPE_CHECKING:
    from ..loop_program import LoopAssembler

T = TypeVar("T")
REGISTRY: dict[str, type[Op]] = {}

# a kernel's compile-time #defines, as LowerContext.kernel takes them
Defines = dict[str, int | float | str]
Shape = tuple[int, ...]


@dataclass
class LookupTable:
    """A hash table resource (HASHTABLE): keys and values of fixed types, filled once (HASHTABLE_IMPORT)."""

    key_type: np.dtype
    value_type: np.dtype
    entries: dict[object, object] = field(default_factory=dict)
    imported: bool = False


class Runtime(Protocol):
    """What the interpreter offers the ops that need more than their inputs (``Op.needs_runtime``): the model's
    other subgraphs (control flow) and its state (resource variables and hash tables, run-once initialization)."""

    def graph(self, subgraph: int) -> Graph:
        """Subgraph ``subgraph`` as read (a reduction body is read for the one op it holds)."""
        ...

    def call(self, subgraph: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run subgraph ``subgraph`` on ``inputs``; its outputs."""
        ...

    def run_loop(self, cond: int, body: int, values: list[np.ndarray]) -> list[np.ndarray] | None:
        """The loop's variables after ``while cond(values): values = body(values)`` run as one program
        (loop_program.py); None where the two subgraphs do not make one, for the caller to call them in turn."""
        ...

    def output_shapes(self, subgraph: int, input_shapes: list[Shape]) -> list[Shape | None]:
        """The output shapes subgraph ``subgraph`` would have for inputs of these shapes (None: dynamic)."""
        ...

    def resource(self, container: str, shared_name: str) -> int:
        """The handle of the resource named so (the same name gives the same handle, across subgraphs)."""
        ...

    def variable(self, handle: int) -> np.ndarray | None:
        """The value of resource variable ``handle``; None before anything is assigned to it."""
        ...

    def assign(self, handle: int, value: np.ndarray) -> None:
        ...

    def first_time(self, key: tuple[str, int]) -> bool:
        """True the first time ``key`` is asked in this interpreter's life, False after."""
        ...

    def table(self, table_id: int, new: LookupTable | None = None) -> LookupTable | None:
        """The hash table with id ``table_id`` (shared by every subgraph); ``new`` becomes it when there is none
        yet. None: no table has that id."""
        ...


# Op.cpu_step's result: called with a subgraph's tensor values (by tensor index), it writes the node's outputs there
CpuStep = Callable[[list[np.ndarray | None]], None]


class Op:
    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    # The newest op version (operator_codes[].version) this class implements, as TFLite's op resolver
    # registers it; None: not yet audited, every version is accepted.
    max_version: ClassVar[int | None] = None
    # Whether shapes.resolve may compute the node once at allocation when its inputs are known then (constants,
    # or computed that way): shape arithmetic. False for ops with state (random generators).
    foldable: ClassVar[bool] = True
    # The op reads only its inputs' shapes, not their values (SHAPE, RANK): it folds once they are static.
    reads_shapes_only: ClassVar[bool] = False
    # The op needs the interpreter (other subgraphs, resource variables): it runs through run_in / infer_in.
    needs_runtime: ClassVar[bool] = False
    # the GPU form is exact on bool and int32 tensors held as float lanes (dtypes.GPU_HELD_AS_FLOAT): comparisons,
    # logic, selection and data movement; arithmetic whose integer meaning differs from float (DIV) is not
    gpu_ints: ClassVar[bool] = False
    # the lowering takes tensors of rank above 4 whose leading dimensions are 1 (phwc4.collapse): it reads every
    # shape as the partition's collapsed rank-4 one and shifts rank-relative parameters (axes) to match
    gpu_rank5: ClassVar[bool] = False
    # The op takes STRING tensors, as LiteRT's kernel does; a node of any other op with one is refused.
    strings: ClassVar[bool] = False
    # The element types the CPU kernel takes, in a few words, for the op table (README.md, ops/table.py)
    types: ClassVar[str] = ""

    @classmethod
    def check_version(cls, node: Node) -> None:
        """Refuse a node whose op version is newer than what this class implements."""
        if cls.max_version is not None and node.version > cls.max_version:
            raise ModelError(f"{node}: op version {node.version} is not supported (this kernel implements "
                             f"versions 1 to {cls.max_version})")

    @classmethod
    def type_summary(cls) -> str:
        """The types the CPU kernel takes, for the op table: ``types``, and STRING where the op takes strings."""
        return ", ".join(t for t in (cls.types, "string" if cls.strings and "string" not in cls.types else "") if t)

    @classmethod
    def check_strings(cls, node: Node, graph: Graph) -> None:
        """Refuse a node with a STRING tensor unless this op takes them."""
        if cls.strings:
            return
        for t in (*node.inputs, *node.outputs):
            if t >= 0 and graph.tensors[t].dtype == STRING:
                raise ModelError(f"{node}: tensor {t} ({graph.tensors[t].name!r}) is STRING, which {node.op} does "
                                 "not take (nor does LiteRT's kernel)")

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        """Validate the node when the model is loaded: raise ModelError naming what is wrong."""

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[tuple[int, ...] | None]) -> list[tuple[int, ...]]:
        """Output shapes, given the input shapes (None for an omitted optional input)."""
        raise NotImplementedError

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError

    @classmethod
    def cpu_step(cls, node: Node, graph: Graph) -> CpuStep | None:
        """``run_cpu`` prepared once, for the executor to call at every run instead: its attributes, constants and
        checks resolved now, it reads the node's inputs from a subgraph's list of values and writes its outputs
        there in their tensors' dtypes (the executor checks nothing around it). For ops whose work on small tensors
        costs less than the care the executor takes around run_cpu, run again and again by a loop's body; None
        (the default, and where a node needs what only run_cpu does): the executor calls run_cpu."""
        return None

    @staticmethod
    def loop_code(node: Node, graph: Graph, asm: LoopAssembler) -> None:
        """The node's instructions in the program of a loop of small tensors (loop_program.py), through ``asm``'s
        methods, which raise LoopDeclined where the program cannot hold a tensor; the default, for ops without a
        translation, declines."""
        raise asm.declined(f"{node}: {node.op} has no loop form")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        """``infer`` for an op that needs the runtime (needs_runtime)."""
        raise NotImplementedError

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        """``run_cpu`` for an op that needs the runtime (needs_runtime)."""
        raise NotImplementedError

    @staticmethod
    def macs(node: Node, graph: Graph) -> int:
        """Estimated multiply-accumulates (work), used to choose which partitions to delegate."""
        return sum(graph.tensors[t].size for t in node.outputs if t >= 0)

    @staticmethod
    def gpu_support(node: Node, graph: Graph) -> bool | str:
        return "no GPU kernel for this op"

    @staticmethod
    def gpu_expr(node: Node, graph: Graph) -> str | None:
        """Elementwise ops only: the result as a dialect expression over FLT4 ``a`` (input 0) and ``b``
        (input 1), e.g. ``"a + b"``. Such an op can be fused into the kernel that produces its input."""
        return None

    @staticmethod
    def gpu_table(node: Node, graph: Graph) -> CodeTable | None:
        """Elementwise unary ops on 8-bit quantized tensors: the output of each input code, which the GPU looks up
        (exactly TFLite's integer kernel) instead of computing ``gpu_expr`` in float; None for other operands."""
        return None

    @staticmethod
    def gpu_keeps_grid(node: Node, graph: Graph) -> bool:
        """8-bit quantized ops whose GPU kernel stores values of its input's grid only (moved, selected, or TFLite's
        integer average computed on it): where that is the output's grid too, the result takes no fake-quant step."""
        return False

    @staticmethod
    def lower(node: Node, graph: Graph, ctx: LowerContext) -> None:
        """Emit the node's GPU kernel calls through ``ctx``. Ops with a GPU kernel override this; gpu_support
        has said yes before it is called."""
        raise NotImplementedError(f"{node}: no GPU lowering")

    @classmethod
    def has_gpu_kernel(cls) -> bool:
        return cls.lower is not Op.lower

    @classmethod
    def gpu_takes_ints(cls, node: Node, graph: Graph) -> bool:
        """Whether this node's GPU form is exact on its bool and int32 tensors held as float lanes: ``gpu_ints``,
        unless an op knows better for some nodes."""
        return cls.gpu_ints


def run_node(node: Node, graph: Graph, inputs: list[np.ndarray | None], where: str = "",
             runtime: Runtime | None = None) -> list[np.ndarray]:
    """Run one node on its CPU kernel: outputs in the dtypes of the node's output tensors. A fault of the kernel
    on shapes or values the loader could not rule out becomes a ModelError naming the node (and ``where``, the
    model's source)."""
    op = get_op(node.op)
    if op is None:
        raise ModelError(f"{where + ': ' if where else ''}{node} uses op {node.op}, which no kernel implements")
    try:
        if op.needs_runtime:
            if runtime is None:
                raise ModelError(f"{node} runs only inside an interpreter (it calls subgraphs or holds state)")
            outs = op.run_in(node, graph, inputs, runtime)
        else:
            outs = op.run_cpu(node, graph, inputs)
    except ModelError:
        raise
    except KERNEL_FAULTS as e:
        raise kernel_fault(node, where, e) from None
    return [np.asarray(v, graph.tensors[t].dtype) for t, v in zip(node.outputs, outs)]


def kernel_fault(node: Node, where: str, e: Exception) -> ModelError:
    """The ModelError naming ``node`` (and ``where``, the model's source) for a fault of its CPU kernel."""
    return ModelError(f"{where + ': ' if where else ''}{node} cannot run: {type(e).__name__}: {e}")


def lower_elementwise(node: Node, graph: Graph, ctx: LowerContext) -> None:
    """``Op.lower`` of an op defined on the GPU by its ``gpu_expr`` alone, when no producer took it as a post-op."""
    expr = REGISTRY[node.op].gpu_expr(node, graph)
    if expr is None:
        raise DelegateError(f"{node}: no GPU expression for these operands")
    ctx.elementwise(node, expr)


def register(cls: type[Op]) -> type[Op]:
    for name in (cls.name, *cls.aliases):
        REGISTRY[name] = cls
    return cls


def get_op(name: str) -> type[Op] | None:
    op = REGISTRY.get(name)  # found without the import statement: the CPU executor asks once a node
    if op is None:
        from . import _load_all  # noqa: F401  (importing the package registers every op module)

        op = REGISTRY.get(name)
    return op


# -- helpers op modules share (validation helpers: checks.py) -------------------------------------------------


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], node: Node) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ModelError(f"{node}: shapes {list(a)} and {list(b)} do not broadcast") from None


def shape_arithmetic(graph: Graph, t: int) -> bool:
    """Whether tensor ``t`` is computed from tensor shapes and constants alone (SHAPE, then slicing, packing,
    arithmetic on its int32 result): values the interpreter works out on the CPU, which the GPU path leaves
    there, so they neither split a partition nor wait on a device round trip."""
    known: dict[int, bool] = graph.__dict__.setdefault("_shape_arithmetic", {})
    producers = graph.producers()
    pending = [t]
    while pending:
        u = pending[-1]
        if u in known:
            pending.pop()
            continue
        if u < 0 or graph.tensors[u].data is not None:
            known[u] = True
        elif u not in producers:
            known[u] = False  # a graph input or a variable
        else:
            node = graph.nodes[producers[u]]
            if node.op == "SHAPE":
                known[u] = True
            else:
                todo = [v for v in node.inputs if v not in known]
                if todo:
                    pending.extend(todo)
                    continue
                known[u] = all(known[v] for v in node.inputs)
        pending.pop()
    return known[t]


def with_const(node: Node, graph: Graph, i: int, tag: str, make: Callable[[], T]) -> T:
    """make(), memoized on the graph when input i does not change between invokes (weights, nearly always)."""
    if graph.constant_like(node.inputs[i] if i < len(node.inputs) else -1):
        return graph.prepared((tag, node.index), make)
    return make()


def as_f32(x: np.ndarray) -> np.ndarray:
    """A C-contiguous, writable float32 array: what the numba kernels are compiled for."""
    return np.require(x, np.float32, ("C", "W"))
