"""GpuDelegate: the SimpleDelegate that runs supported partitions on an OpenCL or OpenGL ES 3.1 backend."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from .cpu.quant import dequantize, quantize
from .delegate import DelegateKernel, SimpleDelegate
from .errors import DelegateError
from .graph import Graph, Node
from .ops import get_op

log = logging.getLogger("gpu_delegate")

BACKENDS = ("auto", "cl", "gl")
FOLDED_ON_CONSTANTS = {"DEQUANTIZE", "DENSIFY"}
MAX_RANK = 4


class GpuDelegate(SimpleDelegate):
    name = "GpuDelegate"

    def __init__(self, backend: str = "auto", precision_loss_allowed: bool = False,
                 enable_quantized_inference: bool = True, max_delegated_partitions: int = 1,
                 serialization_dir: str | Path | None = None, model_token: str | None = None,
                 inference_preference: str = "fast_single_answer", enable_op_profiling: bool = False):
        if backend not in BACKENDS:
            raise ValueError(f"GpuDelegate option backend={backend!r} is not one of {', '.join(BACKENDS)}")
        for opt, value in (("precision_loss_allowed", precision_loss_allowed),
                           ("enable_quantized_inference", enable_quantized_inference)):
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"GpuDelegate option {opt}={value!r} must be True or False")
        if isinstance(max_delegated_partitions, bool) or not isinstance(max_delegated_partitions, int) \
                or max_delegated_partitions < 1:
            raise ValueError(f"GpuDelegate option max_delegated_partitions={max_delegated_partitions!r} must be "
                             "an int >= 1")
        if inference_preference not in ("fast_single_answer", "sustained_speed"):
            raise ValueError(f"GpuDelegate option inference_preference={inference_preference!r} is not one of "
                             "fast_single_answer, sustained_speed")
        from .cache import Cache

        self.cache = Cache.open(serialization_dir, model_token)  # validates both options
        self.precision_loss_allowed = bool(precision_loss_allowed)
        self.enable_quantized_inference = bool(enable_quantized_inference)
        self.max_partitions = max_delegated_partitions
        self.inference_preference = inference_preference
        self.requested_backend = backend
        self.backend, self.unavailable = _create_backend(backend, bool(enable_op_profiling))
        self.backend_name = self.backend.name if self.backend is not None else "cpu"
        self.lock = threading.RLock()

    def __repr__(self) -> str:
        return (f"GpuDelegate(backend={self.backend_name!r}, precision_loss_allowed={self.precision_loss_allowed}, "
                f"max_delegated_partitions={self.max_partitions})")

    # -- SimpleDelegate ----------------------------------------------------------------------------------
    def is_node_supported(self, node: Node, graph: Graph) -> bool | str:
        if self.backend is None:
            return f"no GPU backend ({self.unavailable})"
        op = get_op(node.op)
        if op is None or getattr(op, "lower", None) is None:
            if node.op in FOLDED_ON_CONSTANTS and all(t < 0 or graph.tensors[t].data is not None
                                                      for t in node.inputs):
                return True
            return f"op {node.op} has no GPU kernel"
        if node.op in FOLDED_ON_CONSTANTS and all(t < 0 or graph.tensors[t].data is not None for t in node.inputs):
            return True
        for t in [*node.inputs, *node.outputs]:
            if t < 0:
                continue
            tensor = graph.tensors[t]
            if tensor.data is not None:
                continue
            if len(tensor.shape) > MAX_RANK:
                return f"tensor {tensor.name!r} has rank {len(tensor.shape)}, the GPU path takes at most {MAX_RANK}"
            if tensor.dtype.kind in "iu" and tensor.quant is not None and tensor.dtype.itemsize == 1:
                if not self.enable_quantized_inference:
                    return "quantized inference is disabled (enable_quantized_inference=False)"
                if tensor.quant.per_channel:
                    return f"tensor {tensor.name!r} has per-channel quantized activations"
            elif tensor.dtype not in (np.float32, np.float16):
                return f"tensor {tensor.name!r} is {tensor.dtype}; the GPU path computes in float"
        verdict = op.gpu_support(node, graph)
        return verdict if verdict is True or isinstance(verdict, str) else "not supported"

    def partition_weight(self, nodes: list[Node], graph: Graph) -> float:
        total = 0
        for node in nodes:
            op = get_op(node.op)
            total += op.macs(node, graph) if op is not None else 0
        return float(total)

    def create_kernel(self) -> GpuKernel:
        return GpuKernel(self)


def _create_backend(requested: str, profile: bool):
    from .backends import create_backend

    names = ["cl", "gl"] if requested == "auto" else [requested]
    reasons = []
    for name in names:
        try:
            return create_backend(name, profile=profile), ""
        except DelegateError as e:
            if requested != "auto":
                raise
            reasons.append(f"{name}: {e}")
    reason = "; ".join(reasons)
    log.warning("GpuDelegate(backend='auto'): no GPU backend could be created (%s); every node stays on the CPU",
                reason)
    return None, reason


class GpuKernel(DelegateKernel):
    """One delegated partition: its plan, compiled programs and device buffers."""

    def __init__(self, delegate: GpuDelegate):
        self.delegate = delegate
        self.runner = None
        self.prepared_shapes: dict[int, tuple[int, ...]] | None = None

    def init(self, graph: Graph, node_indices: list[int], input_ids: list[int], output_ids: list[int]) -> None:
        self.graph = graph
        self.nodes = list(node_indices)
        self.inputs = list(input_ids)
        self.outputs = list(output_ids)

    def prepare(self, tensors) -> None:
        shapes = self.infer_shapes({t: tuple(tensors[t].shape) for t in self.inputs})
        if shapes == self.prepared_shapes and self.runner is not None:
            return
        from .runner import PlanRunner

        with self.delegate.lock:
            self.runner = PlanRunner.create(self.delegate, self.graph, self.nodes, self.inputs, self.outputs, shapes)
        self.prepared_shapes = shapes

    def free(self) -> None:
        if self.runner is not None:
            with self.delegate.lock:
                self.runner.close()
            self.runner = None
            self.prepared_shapes = None

    def infer_shapes(self, input_shapes: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
        shapes = {t.index: t.shape for t in self.graph.tensors if t.data is not None}
        shapes.update(input_shapes)
        for n in self.nodes:
            node = self.graph.nodes[n]
            op = get_op(node.op)
            out = op.infer(node, self.graph, [shapes.get(t) if t >= 0 else None for t in node.inputs])
            for t, s in zip(node.outputs, out):
                shapes[t] = tuple(int(d) for d in s)
        return shapes

    def invoke(self, tensors) -> None:
        if self.runner is None:
            raise DelegateError("GpuKernel.invoke before prepare")
        graph = self.graph
        feeds = {}
        for t in self.inputs:
            x = tensors[t]
            tensor = graph.tensors[t]
            if tensor.quant is not None and x.dtype.kind in "iu":
                x = dequantize(x, tensor.quant.scale, tensor.quant.zero_point)
            feeds[t] = np.asarray(x, np.float32)
        with self.delegate.lock:
            results = self.runner.run(feeds)
        for t in self.outputs:
            tensor = graph.tensors[t]
            y = results[t]
            if tensor.quant is not None and tensor.dtype.kind in "iu":
                s, z = tensor.quant.scalar()
                y = quantize(y, s, z, tensor.dtype)
            tensors[t] = y.astype(tensor.dtype, copy=False).reshape(self.prepared_shapes[t])
