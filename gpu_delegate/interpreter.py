"""A TFLite-compatible interpreter: the model's nodes run on numba CPU kernels unless a delegate takes them.

Its surface follows ``tf.lite.Interpreter`` / ``ai_edge_litert.interpreter.Interpreter``. How the model runs
(shapes resolved per allocation, partitions, subgraphs, variables) is executor.py's; this is the API over it.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .cpu import jit
from .delegate import SimpleDelegate
from .dtypes import STRING, as_strings, public_type, zeros
from .errors import ModelError, ShapeError
from .executor import Delegated, ModelRun, ProfileEvent, SubgraphRun
from .graph import Graph, Model, Signature, Tensor
from .summary import cpu_fallback_summary
from .tflite.reader import read_model

__all__ = ["Interpreter", "ProfileEvent", "SignatureRunner"]

log = logging.getLogger("gpu_delegate")


class Interpreter:
    def __init__(self, model_path: str | Path | None = None, model_content: bytes | None = None,
                 experimental_delegates: Sequence[SimpleDelegate] | None = None,
                 num_threads: int | None = None, experimental_preserve_all_tensors: bool = False,
                 **_ignored: Any):
        if (model_path is None) == (model_content is None):
            raise ValueError("pass exactly one of model_path and model_content")
        if model_path is not None and not isinstance(model_path, (str, os.PathLike)):
            raise TypeError(f"model_path must be a str or os.PathLike, not {type(model_path).__name__}")
        if model_content is not None and not isinstance(model_content, (bytes, bytearray, memoryview)):
            raise TypeError(f"model_content must be bytes, not {type(model_content).__name__}")
        if experimental_delegates is not None and (
                not isinstance(experimental_delegates, (list, tuple)) or isinstance(experimental_delegates, str)):
            raise TypeError("experimental_delegates must be a list of delegates, not "
                            f"{type(experimental_delegates).__name__} (write [delegate])")
        if model_path is not None:
            path = Path(model_path)
            try:
                content = path.read_bytes()
            except OSError as e:
                raise ValueError(f"could not read model file {str(path)!r}: {e.strerror or e}") from None
            source = str(path)
        else:
            content, source = bytes(model_content or b""), "model_content"
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < -1):
            raise ValueError(f"num_threads must be a positive int or -1, got {num_threads!r}")
        delegates = list(experimental_delegates or [])
        for delegate in delegates:
            if not isinstance(delegate, SimpleDelegate) and not hasattr(delegate, "is_node_supported"):
                raise TypeError(f"experimental_delegates: {delegate!r} is not a gpu_delegate.SimpleDelegate")
        self._source = source
        self._content = content
        self._model: Model = read_model(content, source)
        for g in self._model.subgraphs:
            _validate_graph(g, source if g.index == 0 else f"{source}, subgraph {g.index}")
        self._num_threads = num_threads if num_threads and num_threads > 0 else None
        self._lock = threading.RLock()
        self._run = ModelRun(self._model, delegates, source)
        # device buffers go back when the interpreter goes, not when its (possibly shared) delegate does
        weakref.finalize(self, self._run.free).atexit = False
        for sub in self._run.subgraphs:  # every subgraph is partitioned now, so that unknown ops fail here
            try:
                sub.plan()
            except ShapeError:
                continue  # shapes that do not fit are allocate_tensors' to report, as in LiteRT (it plans again)
            if delegates:  # once per model, as TFLite's GPU delegate says it: what stays on the CPU, and why
                summary = cpu_fallback_summary(sub.graph, sub.backend_of, sub.why_cpu)
                if summary:
                    where = "" if sub.graph.index == 0 else f" (subgraph {sub.graph.index})"
                    log.warning("%s%s:\n%s", source, where, summary)

    @property
    def _main(self) -> SubgraphRun:
        return self._run.subgraphs[0]

    @property
    def _steps(self) -> list[int | Delegated]:
        """The main subgraph's execution plan (tests and benchmarks reach the delegated kernels through it)."""
        return self._main.steps

    # -- tensors -----------------------------------------------------------------------------------------
    def _sub(self, subgraph_index: int) -> SubgraphRun:
        if not isinstance(subgraph_index, (int, np.integer)) or not 0 <= subgraph_index < len(self._run.subgraphs):
            raise ValueError(f"subgraph_index {subgraph_index!r} is out of range: the model has "
                             f"{len(self._run.subgraphs)} subgraphs")
        return self._run.subgraphs[int(subgraph_index)]

    def _tensor(self, index: int, what: str = "tensor", subgraph_index: int = 0) -> Tensor:
        graph = self._sub(subgraph_index).graph
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(graph.tensors):
            raise ValueError(f"{what} index {index!r} is out of range: the model has {len(graph.tensors)} tensors"
                             + (f" in subgraph {subgraph_index}" if subgraph_index else ""))
        return graph.tensors[int(index)]

    def _shape(self, sub: SubgraphRun, t: int) -> tuple[int, ...]:
        return sub.input_shapes[t] if t in sub.input_shapes else sub.shape_of(t)

    def _details(self, index: int, subgraph_index: int = 0) -> dict[str, Any]:
        sub = self._sub(subgraph_index)
        t = sub.graph.tensors[index]
        q = t.quant
        scales = q.scale if q is not None else np.zeros(0, np.float32)
        zps = q.zero_point.astype(np.int32) if q is not None else np.zeros(0, np.int32)
        sig = t.shape_signature if t.shape_signature is not None else t.shape
        return {
            "name": t.name,
            "index": index,
            "shape": np.array(self._shape(sub, index), np.int32),
            "shape_signature": np.array(sig, np.int32),
            "dtype": public_type(t.dtype),
            "quantization": (float(scales[0]), int(zps[0])) if q is not None and scales.size == 1 else (0.0, 0),
            "quantization_parameters": {"scales": scales.copy(), "zero_points": zps.copy(),
                                        "quantized_dimension": q.axis if q is not None else 0,
                                        "block_size": 0},
            "sparsity_parameters": t.sparsity or {},
        }

    def get_input_details(self) -> list[dict[str, Any]]:
        return [self._details(i) for i in self._main.graph.inputs]

    def get_output_details(self) -> list[dict[str, Any]]:
        return [self._details(i) for i in self._main.graph.outputs]

    def get_tensor_details(self, subgraph_index: int = 0) -> list[dict[str, Any]]:
        sub = self._sub(subgraph_index)
        return [self._details(t.index, subgraph_index) for t in sub.graph.tensors]

    def get_ops_details(self) -> list[dict[str, Any]]:
        """Every node of the main subgraph; "backend" says where it runs: a delegate's backend ("cl", "gl"),
        "cpu", or "folded" (shape arithmetic computed once at allocation, which no longer runs at invoke)."""
        main = self._main
        return [{"index": n.index, "op_name": n.op, "inputs": np.array(n.inputs, np.int32),
                 "outputs": np.array(n.outputs, np.int32), "version": n.version,
                 "backend": main.backend_of.get(n.index, "cpu")} for n in main.graph.nodes]

    def cpu_reasons(self) -> dict[int, str]:
        """Node index -> why a delegate did not take it (for nodes of the main subgraph left on the CPU)."""
        return dict(self._main.why_cpu)

    def num_subgraphs(self) -> int:
        return len(self._run.subgraphs)

    # -- allocation -------------------------------------------------------------------------------------
    def resize_tensor_input(self, input_index: int, tensor_size: Any, strict: bool = False) -> None:
        self._resize(self._main, input_index, tensor_size, strict)

    def _resize(self, sub: SubgraphRun, input_index: int, tensor_size: Any, strict: bool) -> None:
        t = self._tensor(input_index, "input", sub.graph.index)
        if t.index not in sub.graph.inputs:
            raise ValueError(f"tensor {t.index} ({t.name!r}) is not a model input")
        shape = _int_dims(tensor_size)
        if shape is None:
            raise ValueError(f"resize of input {t.name!r}: tensor_size must be a list of ints, got {tensor_size!r}")
        if any(not 0 <= d < 2**31 for d in shape):
            raise ValueError(f"resize of input {t.name!r}: dimensions must be in [0, 2**31), got {list(shape)}")
        if strict:
            sig = t.shape_signature or t.shape
            if len(sig) != len(shape) or any(s != -1 and s != d for s, d in zip(sig, shape)):
                raise ValueError(f"resize of input {t.name!r} to {list(shape)} is not allowed by its "
                                 f"shape signature {list(sig)}")
        with self._lock:
            if sub.input_shapes[t.index] != shape:  # same shape: a no-op, as in TFLite (RNN state is kept)
                sub.input_shapes[t.index] = shape
                sub.allocated = False

    def allocate_tensors(self) -> None:
        with self._lock:
            self._main.allocate()

    def reset_all_variables(self) -> None:
        """Set every variable tensor (RNN state) back to zero (a quantized one: its zero point)."""
        with self._lock:
            for sub in self._run.subgraphs:
                sub.reset_variables()

    def set_tensor(self, tensor_index: int, value: Any) -> None:
        self._set(self._main, tensor_index, value)

    def _set(self, sub: SubgraphRun, tensor_index: int, value: Any) -> None:
        t = self._tensor(tensor_index, subgraph_index=sub.graph.index)
        if t.data is not None:
            raise ValueError(f"cannot set tensor {t.index} ({t.name!r}): it is a constant")
        value = np.asarray(value)
        if t.dtype == STRING:
            value = as_strings(value, f"tensor {t.index}, name: {t.name}")
        if value.dtype != t.dtype:
            raise ValueError(f"Cannot set tensor: got value of type {value.dtype} but expected type "
                             f"{t.dtype} for tensor {t.index}, name: {t.name}")
        shape = self._shape(sub, t.index)
        if value.shape != tuple(shape):
            raise ValueError(f"Cannot set tensor: dimension mismatch, got shape {list(value.shape)} but "
                             f"expected {list(shape)} for tensor {t.index}, name: {t.name}")
        with self._lock:
            sub.values[t.index] = np.array(value, copy=True)

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        sub = self._sub(subgraph_index)
        t = self._tensor(tensor_index, subgraph_index=subgraph_index)
        v = sub.values[t.index]
        if v is None:
            return zeros(self._shape(sub, t.index), t.dtype)
        return np.array(v, copy=True)

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        t = self._tensor(tensor_index)
        main = self._main

        def view() -> np.ndarray:
            value = main.values[t.index]
            if value is None:
                value = main.values[t.index] = zeros(self._shape(main, t.index), t.dtype)
            return value
        return view

    # -- running ----------------------------------------------------------------------------------------
    def set_profiler(self, profiler: Callable[[ProfileEvent], None] | None) -> None:
        """Call ``profiler`` with a ProfileEvent after every step of every invoke (None: stop). A delegated
        partition is one step, as in TFLite's profiler; steps of subgraphs that control flow runs are reported
        too (their ``subgraph`` says which)."""
        self._run.profiler = profiler

    def invoke(self) -> None:
        self._invoke(self._main)

    def _invoke(self, sub: SubgraphRun) -> None:
        if not sub.allocated:
            raise RuntimeError("Invoke called on model that is not ready: call allocate_tensors() first")
        with self._lock:
            if self._num_threads:
                jit.set_num_threads(self._num_threads)
            sub.invoke(self._run.profiler)

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
        """The main subgraph as read from the file."""
        return self._main.graph

    @property
    def resolved_graph(self) -> Graph:
        """The main subgraph as the last allocation resolved it: real shapes, folded shape arithmetic, dynamic
        tensors marked."""
        return self._main.resolved

    @property
    def model(self) -> Model:
        return self._model


class SignatureRunner:
    """Runs one signature's subgraph, as LiteRT's: inputs by name, resized as given, outputs by name."""

    def __init__(self, interpreter: Interpreter, signature: Signature):
        self._it = interpreter
        self._sig = signature
        self._sub = interpreter._sub(signature.subgraph)

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        return {n: self._it._details(t, self._sig.subgraph) for n, t in self._sig.inputs.items()}

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        return {n: self._it._details(t, self._sig.subgraph) for n, t in self._sig.outputs.items()}

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        missing = set(self._sig.inputs) - set(inputs)
        extra = set(inputs) - set(self._sig.inputs)
        if missing or extra:
            raise ValueError(f"signature {self._sig.key!r}: missing inputs {sorted(missing)}, "
                             f"unknown inputs {sorted(extra)}")
        it, sub = self._it, self._sub
        for name, value in inputs.items():
            it._resize(sub, self._sig.inputs[name], np.shape(value), False)
        if not sub.allocated:
            with it._lock:
                sub.allocate()
        for name, value in inputs.items():
            it._set(sub, self._sig.inputs[name], np.asarray(value))
        it._invoke(sub)
        return {n: it.get_tensor(t, self._sig.subgraph) for n, t in self._sig.outputs.items()}


def _int_dims(size: Any) -> tuple[int, ...] | None:
    """``size`` as a shape if it is a sequence (or array) of whole numbers, else None."""
    try:
        values = np.asarray(size, dtype=object).reshape(-1)
    except (TypeError, ValueError):
        return None
    dims = []
    for d in values:
        if isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)):
            dims.append(int(d))
        elif isinstance(d, (float, np.floating)) and float(d).is_integer():
            dims.append(int(d))
        else:
            return None
    return tuple(dims)


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
