"""A TFLite-compatible interpreter: the model's nodes run on numba CPU kernels unless a delegate takes them.

Its surface follows ``tf.lite.Interpreter`` / ``ai_edge_litert.interpreter.Interpreter``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from .delegate import SimpleDelegate
from .errors import KERNEL_FAULTS, ModelError
from .graph import Graph, Model, Tensor
from .ops.base import get_op, run_node
from .partition import Partition, schedule, select_partitions
from .tflite.reader import read_model

log = logging.getLogger("gpu_delegate")

# No single tensor may ask for more than this: a corrupt shape must fail cleanly, not exhaust memory.
MAX_TENSOR_BYTES = 4 << 30


@dataclass(frozen=True)
class ProfileEvent:
    """One step of an invoke, as the profiler set with `Interpreter.set_profiler` receives it: a node run on the
    CPU kernels, or a partition run by a delegate."""

    nodes: tuple[int, ...]
    op: str  # the node's op; "DELEGATE" for a partition
    backend: str  # "cpu", or the delegate's backend ("cl", "gl", or its name)
    seconds: float


class _Delegated:
    """A partition handed to a delegate, as one step of the execution plan."""

    def __init__(self, delegate: SimpleDelegate, partition: Partition, graph: Graph):
        self.delegate = delegate
        self.partition = partition
        self.kernel = delegate.create_kernel()
        self.kernel.init(graph, list(partition.nodes), list(partition.inputs), list(partition.outputs))


class Interpreter:
    def __init__(self, model_path: str | Path | None = None, model_content: bytes | None = None,
                 experimental_delegates: Sequence[SimpleDelegate] | None = None,
                 num_threads: int | None = None, experimental_preserve_all_tensors: bool = False,
                 **_ignored):
        if (model_path is None) == (model_content is None):
            raise ValueError("pass exactly one of model_path and model_content")
        if model_path is not None:
            path = Path(model_path)
            try:
                content = path.read_bytes()
            except OSError as e:
                raise ValueError(f"could not read model file {str(path)!r}: {e.strerror or e}") from None
            source = str(path)
        else:
            content, source = bytes(model_content), "model_content"
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < -1):
            raise ValueError(f"num_threads must be a positive int or -1, got {num_threads!r}")
        self._source = source
        self._content = content
        self._model: Model = read_model(content, source)
        self._graph: Graph = self._model.main
        self._num_threads = num_threads if num_threads and num_threads > 0 else None
        self._lock = threading.RLock()
        _validate_graph(self._graph, source)
        self._delegates = list(experimental_delegates or [])
        self._steps = self._plan()
        # device buffers go back when the interpreter goes, not when its (possibly shared) delegate does
        kernels = [s.kernel for s in self._steps if isinstance(s, _Delegated)]
        if kernels:
            weakref.finalize(self, _free_kernels, kernels).atexit = False
        self._shapes: list[tuple[int, ...]] = [t.shape for t in self._graph.tensors]
        self._values: list[np.ndarray | None] = [t.data for t in self._graph.tensors]
        self._allocated = False
        self._profiler: Callable[[ProfileEvent], None] | None = None

    # -- planning --------------------------------------------------------------------------------------
    def _plan(self) -> list:
        graph = self._graph
        taken: set[int] = set()
        delegated: list[_Delegated] = []
        why_not: dict[int, str] = {}
        for delegate in self._delegates:
            if not isinstance(delegate, SimpleDelegate) and not hasattr(delegate, "is_node_supported"):
                raise TypeError(f"experimental_delegates: {delegate!r} is not a gpu_delegate.SimpleDelegate")
            partitions, reasons = select_partitions(delegate, graph, taken)
            for i, reason in reasons.items():
                why_not.setdefault(i, reason)
            for p in partitions:
                delegated.append(_Delegated(delegate, p, graph))
                taken.update(p.nodes)
        self._backend_of = {}
        for d in delegated:
            for i in d.partition.nodes:
                self._backend_of[i] = getattr(d.delegate, "backend_name", d.delegate.name)
        self._why_cpu = {i: r for i, r in why_not.items() if i not in taken}
        for node in graph.nodes:
            if node.index in taken:
                continue
            op = get_op(node.op)
            if op is None:
                raise ModelError(f"{self._source}: {node} uses op {node.op}, which no kernel implements"
                                 + (f" and no delegate took ({why_not[node.index]})" if node.index in why_not else ""))
            try:
                op.check_version(node)
                op.check(node, graph)
            except ModelError:
                raise
            except KERNEL_FAULTS as e:
                # a check tripping over a malformed node (say an omitted required input): name the node
                raise ModelError(f"{self._source}: {node} is malformed: {type(e).__name__}: {e}") from None
        if self._delegates:
            n_gpu = len(taken)
            log.info("%d operations will run on the delegate, and the remaining %d operations will run on the CPU",
                     n_gpu, len(graph.nodes) - n_gpu)
        by_partition = {id(d.partition): d for d in delegated}
        return [by_partition[id(s)] if isinstance(s, Partition) else s
                for s in schedule(graph, [d.partition for d in delegated])]

    # -- tensors -----------------------------------------------------------------------------------------
    def _tensor(self, index: int, what: str = "tensor") -> Tensor:
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self._graph.tensors):
            raise ValueError(f"{what} index {index!r} is out of range: the model has "
                             f"{len(self._graph.tensors)} tensors")
        return self._graph.tensors[int(index)]

    def _details(self, index: int) -> dict:
        t = self._graph.tensors[index]
        q = t.quant
        scales = q.scale if q is not None else np.zeros(0, np.float32)
        zps = q.zero_point.astype(np.int32) if q is not None else np.zeros(0, np.int32)
        sig = t.shape_signature if t.shape_signature is not None else t.shape
        return {
            "name": t.name,
            "index": index,
            "shape": np.array(self._shapes[index], np.int32),
            "shape_signature": np.array(sig, np.int32),
            "dtype": t.dtype.type,
            "quantization": (float(scales[0]), int(zps[0])) if q is not None and scales.size == 1 else (0.0, 0),
            "quantization_parameters": {"scales": scales.copy(), "zero_points": zps.copy(),
                                        "quantized_dimension": q.axis if q is not None else 0,
                                        "block_size": 0},
            "sparsity_parameters": t.sparsity or {},
        }

    def get_input_details(self) -> list[dict]:
        return [self._details(i) for i in self._graph.inputs]

    def get_output_details(self) -> list[dict]:
        return [self._details(i) for i in self._graph.outputs]

    def get_tensor_details(self) -> list[dict]:
        return [self._details(t.index) for t in self._graph.tensors]

    def get_ops_details(self) -> list[dict]:
        return [{"index": n.index, "op_name": n.op, "inputs": np.array(n.inputs, np.int32),
                 "outputs": np.array(n.outputs, np.int32), "version": n.version,
                 "backend": self._backend_of.get(n.index, "cpu")} for n in self._graph.nodes]

    def cpu_reasons(self) -> dict[int, str]:
        """Node index -> why a delegate did not take it (for nodes that stayed on the CPU)."""
        return dict(self._why_cpu)

    # -- allocation -------------------------------------------------------------------------------------
    def resize_tensor_input(self, input_index: int, tensor_size, strict: bool = False) -> None:
        t = self._tensor(input_index, "input")
        if t.index not in self._graph.inputs:
            raise ValueError(f"tensor {t.index} ({t.name!r}) is not a model input")
        shape = tuple(int(d) for d in np.asarray(tensor_size).reshape(-1))
        if any(d < 0 for d in shape):
            raise ValueError(f"resize of input {t.name!r}: dimensions must be >= 0, got {list(shape)}")
        if strict:
            sig = t.shape_signature or t.shape
            if len(sig) != len(shape) or any(s != -1 and s != d for s, d in zip(sig, shape)):
                raise ValueError(f"resize of input {t.name!r} to {list(shape)} is not allowed by its "
                                 f"shape signature {list(sig)}")
        with self._lock:
            if self._shapes[t.index] != shape:  # same shape: a no-op, as in TFLite (RNN state is kept)
                self._shapes[t.index] = shape
                self._allocated = False

    def allocate_tensors(self) -> None:
        with self._lock:
            shapes = list(self._shapes)
            for node in self._graph.nodes:
                op = get_op(node.op)
                if op is None:
                    continue
                try:
                    out = op.infer(node, self._graph, [shapes[t] if t >= 0 else None for t in node.inputs])
                except NotImplementedError:
                    continue
                except ModelError:
                    raise
                except KERNEL_FAULTS as e:
                    raise ModelError(f"{self._source}: {node}: cannot infer output shapes "
                                     f"({type(e).__name__}: {e})") from None
                for t, s in zip(node.outputs, out):
                    shapes[t] = tuple(int(d) for d in s)
            for t, shape in enumerate(shapes):
                tensor = self._graph.tensors[t]
                nbytes = int(np.prod(shape, dtype=np.float64)) * tensor.dtype.itemsize
                if nbytes > MAX_TENSOR_BYTES:
                    raise ModelError(f"{self._source}: tensor {t} ({tensor.name!r}) of shape {list(shape)} would need "
                                     f"{nbytes / 2**30:.1f} GiB, more than the {MAX_TENSOR_BYTES >> 30} GiB allowed")
            self._shapes = shapes
            for i in self._graph.inputs:
                t = self._graph.tensors[i]
                cur = self._values[i]
                if cur is None or cur.shape != shapes[i]:
                    self._values[i] = np.zeros(shapes[i], t.dtype)
            if not self._allocated:  # like TFLite: RNN state restarts when tensors are (re)allocated
                self._reset_variables()
            for step in self._steps:
                if isinstance(step, _Delegated):
                    for t in step.partition.inputs:  # read by prepare for their shapes; CPU nodes have not run
                        if self._values[t] is None or self._values[t].shape != shapes[t]:
                            self._values[t] = np.zeros(shapes[t], self._graph.tensors[t].dtype)
                    step.kernel.prepare(_TensorView(self._values))
                    self._note_fallback(step)
            self._allocated = True

    def _note_fallback(self, step: _Delegated) -> None:
        """A kernel that fell back to the CPU at prepare: its nodes report the CPU, and why."""
        why = getattr(step.kernel, "cpu_fallback", None)
        for i in step.partition.nodes:
            if why:
                self._backend_of[i] = "cpu"
                self._why_cpu[i] = why
            else:
                self._backend_of[i] = getattr(step.delegate, "backend_name", step.delegate.name)
                self._why_cpu.pop(i, None)

    def reset_all_variables(self) -> None:
        """Set every variable tensor (RNN state) back to zero (a quantized one: its zero point)."""
        with self._lock:
            self._reset_variables()

    def _reset_variables(self) -> None:
        for t in self._graph.tensors:
            if t.is_variable:
                zero = t.quant.scalar()[1] if t.quant is not None and t.dtype.kind in "iu" else 0
                self._values[t.index] = np.full(self._shapes[t.index], zero, t.dtype)

    def set_tensor(self, tensor_index: int, value) -> None:
        t = self._tensor(tensor_index)
        if t.data is not None:
            raise ValueError(f"cannot set tensor {t.index} ({t.name!r}): it is a constant")
        value = np.asarray(value)
        if value.dtype != t.dtype:
            raise ValueError(f"Cannot set tensor: got value of type {value.dtype} but expected type "
                             f"{t.dtype} for tensor {t.index}, name: {t.name}")
        shape = self._shapes[t.index]
        if value.shape != tuple(shape):
            raise ValueError(f"Cannot set tensor: dimension mismatch, got shape {list(value.shape)} but "
                             f"expected {list(shape)} for tensor {t.index}, name: {t.name}")
        with self._lock:
            self._values[t.index] = np.array(value, copy=True)

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        t = self._tensor(tensor_index)
        v = self._values[t.index]
        if v is None:
            return np.zeros(self._shapes[t.index], t.dtype)
        return np.array(v, copy=True)

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        t = self._tensor(tensor_index)

        def view() -> np.ndarray:
            if self._values[t.index] is None:
                self._values[t.index] = np.zeros(self._shapes[t.index], t.dtype)
            return self._values[t.index]
        return view

    # -- running ----------------------------------------------------------------------------------------
    def set_profiler(self, profiler: Callable[[ProfileEvent], None] | None) -> None:
        """Call ``profiler`` with a ProfileEvent after every step of every invoke (None: stop). A delegated
        partition is one step, as in TFLite's profiler."""
        self._profiler = profiler

    def invoke(self) -> None:
        if not self._allocated:
            raise RuntimeError("Invoke called on model that is not ready: call allocate_tensors() first")
        with self._lock:
            if self._num_threads:
                numba.set_num_threads(min(self._num_threads, numba.config.NUMBA_NUM_THREADS))
            values = self._values
            graph = self._graph
            profiler = self._profiler
            for step in self._steps:
                start = time.perf_counter() if profiler else 0.0
                if isinstance(step, _Delegated):
                    step.kernel.invoke(_TensorView(values))
                    if profiler:
                        profiler(ProfileEvent(tuple(step.partition.nodes), "DELEGATE",
                                              self._backend_of.get(step.partition.nodes[0], "cpu"),
                                              time.perf_counter() - start))
                    continue
                node = graph.nodes[step]
                ins = [values[t] if t >= 0 else None for t in node.inputs]
                for t, v in zip(node.inputs, ins):
                    if t >= 0 and v is None:
                        raise ModelError(f"{self._source}: {node} reads tensor {t} "
                                         f"({graph.tensors[t].name!r}) which nothing has written")
                for t, v in zip(node.outputs, run_node(node, graph, ins, self._source)):
                    values[t] = v
                if profiler:
                    profiler(ProfileEvent((node.index,), node.op, "cpu", time.perf_counter() - start))

    # -- signatures -------------------------------------------------------------------------------------
    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        # Sorted, as LiteRT's (its C++ side keeps the names in a std::map).
        return {s.key: {"inputs": sorted(s.inputs), "outputs": sorted(s.outputs)}
                for s in self._model.signatures}

    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner:
        sigs = self._model.signatures
        if not sigs:
            raise ValueError("the model has no signatures")
        if signature_key is None:
            if len(sigs) > 1:
                raise ValueError(f"the model has {len(sigs)} signatures; name one of {[s.key for s in sigs]}")
            return SignatureRunner(self, sigs[0])
        for s in sigs:
            if s.key == signature_key:
                return SignatureRunner(self, s)
        raise ValueError(f"no signature {signature_key!r}; the model has {[s.key for s in sigs]}")

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def model(self) -> Model:
        return self._model


class SignatureRunner:
    def __init__(self, interpreter: Interpreter, signature):
        if signature.subgraph != 0:
            raise ModelError(f"signature {signature.key!r} runs subgraph {signature.subgraph}; "
                             "only the main subgraph is supported")
        self._it = interpreter
        self._sig = signature

    def get_input_details(self) -> dict[str, dict]:
        return {n: self._it._details(t) for n, t in self._sig.inputs.items()}

    def get_output_details(self) -> dict[str, dict]:
        return {n: self._it._details(t) for n, t in self._sig.outputs.items()}

    def __call__(self, **inputs) -> dict[str, np.ndarray]:
        missing = set(self._sig.inputs) - set(inputs)
        extra = set(inputs) - set(self._sig.inputs)
        if missing or extra:
            raise ValueError(f"signature {self._sig.key!r}: missing inputs {sorted(missing)}, "
                             f"unknown inputs {sorted(extra)}")
        it = self._it
        changed = False
        for name, value in inputs.items():
            t = self._sig.inputs[name]
            shape = np.shape(value)
            if tuple(shape) != tuple(it._shapes[t]):
                it.resize_tensor_input(t, shape)
                changed = True
        if changed or not it._allocated:
            it.allocate_tensors()
        for name, value in inputs.items():
            it.set_tensor(self._sig.inputs[name], np.asarray(value))
        it.invoke()
        return {n: it.get_tensor(t) for n, t in self._sig.outputs.items()}


class _TensorView:
    """The interpreter's tensor list as the mapping a DelegateKernel reads and writes."""

    __slots__ = ("_values",)

    def __init__(self, values: list):
        self._values = values

    def __getitem__(self, t: int) -> np.ndarray:
        return self._values[t]

    def __setitem__(self, t: int, value: np.ndarray) -> None:
        self._values[t] = value

    def __contains__(self, t: int) -> bool:
        return 0 <= t < len(self._values) and self._values[t] is not None


def _free_kernels(kernels: list) -> None:
    for kernel in kernels:
        try:
            kernel.free()
        except Exception as e:  # noqa: BLE001  (a finalizer must not raise; say so and go on)
            log.warning("freeing a delegate kernel failed: %s: %s", type(e).__name__, e)


def _validate_graph(graph: Graph, source: str) -> None:
    """Every input of a node must exist before it runs: graph inputs, constants, variables, or an
    earlier node's output. This also rules out cycles."""
    ready = set(graph.inputs) | {t.index for t in graph.tensors if t.data is not None or t.is_variable}
    written: set[int] = set()
    for node in graph.nodes:
        for t in node.inputs:
            if t >= 0 and t not in ready:
                raise ModelError(f"{source}: {node} reads tensor {t} ({graph.tensors[t].name!r}) before any "
                                 "node writes it (the graph is out of order or has a cycle)")
        for t in node.outputs:
            if t in written or t in graph.inputs or graph.tensors[t].data is not None:
                raise ModelError(f"{source}: {node} writes tensor {t} ({graph.tensors[t].name!r}), which is "
                                 "already a graph input, a constant or another node's output")
            written.add(t)
            ready.add(t)
    for t in graph.outputs:
        if t not in ready:
            raise ModelError(f"{source}: graph output tensor {t} ({graph.tensors[t].name!r}) is never written")
