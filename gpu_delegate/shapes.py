"""Shapes as LiteRT computes them: a subgraph resolved for the input shapes of one allocation.

The converter keeps shape arithmetic in a graph whose batch is open (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE,
TRANSPOSE_CONV's output_shape, FILL, BROADCAST_TO). Once the input shapes are known, that part of the graph has
a value: `resolve` walks the nodes in order, computes each node whose inputs are all known (constants, or
computed here) and whose outputs are small, and propagates every other node's output shapes with its op's shape
rule. The result is a copy of the graph in which

- every tensor has its real shape, 0-d tensors included;
- the computed nodes are ``Graph.folded`` and their outputs constants, so they split no delegate's partition;
- a tensor whose shape depends on data known only at invoke (a RESHAPE to a computed shape, NMS, WHERE, a
  variable read) is ``Tensor.dynamic``, as are those computed from it: allocated when the node that writes it
  runs, never given to a GPU partition.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from .errors import KERNEL_FAULTS, DataDependentShape, ModelError, ShapeError
from .graph import MAX_TENSOR_BYTES, Graph, Node, Tensor
from .ops.base import Runtime, Shape, get_op, run_node

# The tensors one subgraph computes may need at most this much memory together, unless the environment says
# otherwise (GPU_DELEGATE_MAX_TENSOR_GIB).
MAX_TOTAL_BYTES = 4 << 30
# A node is computed at allocation only if its outputs hold at most this many elements: shape arithmetic, not
# the dequantization of weights (which the delegates prepare their own way).
FOLD_MAX_ELEMENTS = 4096


def resolve(graph: Graph, input_shapes: Mapping[int, Shape], runtime: Runtime | None = None,
            where: str = "") -> Graph:
    """``graph`` for inputs of ``input_shapes`` (graph input index -> shape; inputs not given keep theirs).
    ``where`` names the model in errors, which are ShapeErrors."""
    return _resolve(graph, input_shapes, runtime, where)


def _resolve(graph: Graph, input_shapes: Mapping[int, Shape], runtime: Runtime | None, where: str) -> Graph:
    tensors = [dataclasses.replace(t, dynamic=False) for t in graph.tensors]
    for t, shape in input_shapes.items():
        tensors[t].shape = tuple(int(d) for d in shape)
    resolved = Graph(tensors, graph.nodes, list(graph.inputs), list(graph.outputs), graph.name, graph.model_digest,
                     graph.index)
    known = {t.index for t in tensors if t.data is not None and not t.is_variable}
    folded: set[int] = set()
    prefix = f"{where}: " if where else ""
    for node in graph.nodes:
        op = get_op(node.op)
        outs = [tensors[t] for t in node.outputs if t >= 0]
        if op is None:
            continue  # a delegate may take it; if none does, planning refuses the model naming the op
        try:  # the node itself must be well formed (a ModelError at load); its shapes may not fit (a ShapeError)
            op.check_version(node)
            op.check_strings(node, resolved)
            op.check(node, resolved)
        except ModelError:
            raise
        except KERNEL_FAULTS as e:  # a check tripping over a malformed node (an omitted required input, say)
            raise ModelError(f"{prefix}{node} is malformed: {type(e).__name__}: {e}") from None
        ins = [t for t in node.inputs if t >= 0]
        if any(tensors[t].dynamic for t in ins):
            _make_dynamic(outs)
            continue
        shapes: list[Shape | None] = [tensors[t].shape if t >= 0 else None for t in node.inputs]
        try:
            out_shapes = op.infer_in(node, resolved, shapes, runtime) if op.needs_runtime and runtime is not None \
                else op.infer(node, resolved, shapes)
        except DataDependentShape:
            _make_dynamic(outs)
            continue
        except NotImplementedError:
            continue  # no shape rule: the declared shapes stand
        except ShapeError:
            raise
        except ModelError as e:
            raise ShapeError(str(e) if str(e).startswith(prefix) else prefix + str(e)) from None
        except KERNEL_FAULTS as e:
            raise ShapeError(f"{prefix}{node}: cannot infer output shapes ({type(e).__name__}: {e})") from None
        for t, s in zip(node.outputs, out_shapes):
            if t >= 0:
                tensors[t].shape = tuple(int(d) for d in s)
                try:
                    check_tensor_size(tensors[t], node, where)
                except ModelError as e:
                    raise ShapeError(str(e)) from None
        if _initialises_a_variable(node, tensors, known):
            value = run_node(node, resolved, [tensors[t].data for t in node.inputs], where)[0]
            check_run_shape(value, tensors[node.outputs[0]], node, where)
            resolved.variable_init[node.outputs[0]] = value
            folded.add(node.index)
        elif _foldable(op, node, tensors, known):
            values = [None if t < 0 else tensors[t].data if t in known
                      else np.broadcast_to(np.zeros((), tensors[t].dtype), tensors[t].shape) for t in node.inputs]
            for t, v in zip(node.outputs, run_node(node, resolved, values, where)):
                check_run_shape(v, tensors[t], node, where)
                tensors[t].data = v
                known.add(t)
            folded.add(node.index)
    resolved.folded = frozenset(folded)
    return resolved


def _foldable(op: type, node: Node, tensors: list[Tensor], known: set[int]) -> bool:
    if not getattr(op, "foldable", True) or getattr(op, "needs_runtime", False) or not node.outputs:
        return False
    shapes_only = getattr(op, "reads_shapes_only", False)
    if not all(t < 0 or t in known or shapes_only for t in node.inputs):
        return False
    return all(t >= 0 and not tensors[t].is_variable and tensors[t].size <= FOLD_MAX_ELEMENTS for t in node.outputs)


def _initialises_a_variable(node: Node, tensors: list[Tensor], known: set[int]) -> bool:
    """A DEQUANTIZE of a constant into a variable tensor (the converter's fp16 RNN states): LiteRT computes it
    once, and the RNN op then updates the variable in place, so it is the variable's initial value, not a node
    that resets the state at every invoke."""
    return node.op == "DEQUANTIZE" and len(node.outputs) == 1 and node.outputs[0] >= 0 and \
        tensors[node.outputs[0]].is_variable and all(t >= 0 and t in known for t in node.inputs)


def _make_dynamic(outs: list[Tensor]) -> None:
    for t in outs:
        t.dynamic = True


def check_tensor_size(tensor: Tensor, node: Node | None = None, where: str = "") -> None:
    """A ModelError naming the tensor (and the node that writes it) when its shape is negative or would need more
    memory than any tensor may have."""
    prefix = f"{where}: " if where else ""
    by = f"{node}: " if node is not None else ""
    if any(d < 0 for d in tensor.shape):
        raise ModelError(f"{prefix}{by}tensor {tensor.index} ({tensor.name!r}) would have shape {list(tensor.shape)}")
    nbytes = int(np.prod(tensor.shape, dtype=np.float64)) * tensor.dtype.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelError(f"{prefix}{by}tensor {tensor.index} ({tensor.name!r}) of shape {list(tensor.shape)} would "
                         f"need {nbytes / 2**30:.1f} GiB, more than the {MAX_TENSOR_BYTES >> 30} GiB allowed")


def check_total_size(graph: Graph, where: str = "") -> None:
    """A ShapeError when the tensors a resolved graph computes would need more memory than allowed: the machine's
    free memory, and at most MAX_TOTAL_BYTES (the environment variable GPU_DELEGATE_MAX_TENSOR_GIB raises it). A
    file of a kilobyte may ask for many huge tensors, each within MAX_TENSOR_BYTES."""
    total = sum(t.size * t.dtype.itemsize for t in graph.tensors if t.data is None and not t.dynamic)
    limit, why = max_total_bytes()
    available = available_memory()
    if available < limit:
        limit, why = available, "of memory available"
    if total > limit:
        raise ShapeError(f"{where + ': ' if where else ''}its tensors would need {total / 2**30:.1f} GiB, more than "
                         f"the {limit / 2**30:.1f} GiB {why}")


def max_total_bytes() -> tuple[int, str]:
    """The documented cap on the memory of a subgraph's tensors, and how to say where it comes from."""
    value = os.environ.get("GPU_DELEGATE_MAX_TENSOR_GIB")
    if value:
        try:
            return int(float(value) * 2**30), "that GPU_DELEGATE_MAX_TENSOR_GIB allows"
        except ValueError:
            raise ShapeError(f"GPU_DELEGATE_MAX_TENSOR_GIB={value!r} is not a number of GiB") from None
    return MAX_TOTAL_BYTES, "allowed (set GPU_DELEGATE_MAX_TENSOR_GIB to allow more)"


def available_memory() -> int:
    """Bytes of memory free for new allocations (Linux's MemAvailable; elsewhere the physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: the per-tensor limit still holds


def check_run_shape(value: np.ndarray, tensor: Tensor, node: Node, where: str = "") -> None:
    """The array a kernel wrote must have the shape the shape rule gave its tensor (a dynamic tensor's is set by
    the kernel)."""
    if not tensor.dynamic and value.shape != tensor.shape:
        raise ModelError(f"{where + ': ' if where else ''}{node}: wrote tensor {tensor.index} ({tensor.name!r}) "
                         f"with shape {list(value.shape)}, its shape is {list(tensor.shape)}")
