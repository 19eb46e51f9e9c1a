"""GpuDelegate: the SimpleDelegate that runs supported partitions on an OpenCL or OpenGL ES 3.1 backend."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path

import numpy as np

from . import backends
from .cache import Cache
from .cpu.quant import dequantize, quantize
from .delegate import DelegateKernel, SimpleDelegate
from .dtypes import GPU_EXACT_INT, GPU_HELD_AS_FLOAT, GPU_INT_OFFSET
from .errors import MODEL_FAULTS, DelegateError, ModelError
from .graph import FOLDED_ON_CONSTANTS, Graph, Node
from .ops import get_op
from .ops.base import run_node, shape_arithmetic
from .phwc4 import bhwc, collapse, slices, vec4_count
from .runner import KernelTiming, PlanRunner

log = logging.getLogger("gpu_delegate")

BACKENDS = ("auto", "cl", "gl")
MAX_RANK = 4
# A partition this small that reads from or feeds nodes outside it stays on the CPU (GpuDelegate._small_beside_cpu):
# its tensors' values in all, and its multiply-adds
SMALL_PARTITION_VALUES = 4096
SMALL_PARTITION_MACS = 65536


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
        self.cache = Cache.open(serialization_dir, model_token)  # validates both options
        self.precision_loss_allowed = bool(precision_loss_allowed)
        self.enable_quantized_inference = bool(enable_quantized_inference)
        self.max_partitions = max_delegated_partitions
        # work-group tuning costs start-up time: for a long-running app, or once where the result is kept
        # (runner.PlanRunner.tunes)
        self.inference_preference = inference_preference
        self.requested_backend = backend
        self.backend, self.unavailable = _create_backend(backend, bool(enable_op_profiling))
        self.backend_name = self.backend.name if self.backend is not None else "cpu"
        self.lock = threading.RLock()
        # With enable_op_profiling: every kernel of the partition invoked last, timed (a profiler set with
        # Interpreter.set_profiler reads it when that partition's ProfileEvent arrives).
        self.last_kernel_timings: list[KernelTiming] = []

    def __repr__(self) -> str:
        return (f"GpuDelegate(backend={self.backend_name!r}, precision_loss_allowed={self.precision_loss_allowed}, "
                f"max_delegated_partitions={self.max_partitions})")

    # -- SimpleDelegate ----------------------------------------------------------------------------------
    def is_node_supported(self, node: Node, graph: Graph) -> bool | str:
        if self.backend is None:
            return f"no GPU backend ({self.unavailable})"
        op = get_op(node.op)
        if op is not None:
            # gpu_support and lower assume a well-formed node; a malformed one stays on the CPU path,
            # whose own check then refuses the model with a ModelError naming the node
            try:
                op.check_version(node)
                op.check(node, graph)
            except MODEL_FAULTS as e:
                return f"malformed node ({type(e).__name__}: {e})"
        if graph.folds_to_constant(node):
            return True  # computed once at preparation (lowering/fold_constants.py)
        if op is None or not op.has_gpu_kernel():
            return f"op {node.op} has no GPU kernel"
        dynamic = next((graph.tensors[t] for t in (*node.inputs, *node.outputs) if t >= 0 and graph.tensors[t].dynamic),
                       None)
        if dynamic is not None:
            return f"tensor {dynamic.name!r} has a shape that depends on data (known only at invoke)"
        if node.op not in FOLDED_ON_CONSTANTS and all(t < 0 or graph.constant_like(t) for t in node.inputs):
            # lowerings read their data input from a device buffer, which nothing fills for a constant
            # (the fuzzer found LOGISTIC, FULLY_CONNECTED, CONV_2D of constants computing on zeros); the
            # folded DEQUANTIZE/DENSIFY chains are computed once at preparation instead
            return "every input is a constant"
        for t in [*node.inputs, *node.outputs]:
            if t < 0:
                continue
            tensor = graph.tensors[t]
            q = tensor.quant
            if q is not None and not (np.all(np.isfinite(q.scale)) and np.all(q.scale > 0)):
                # scale 0 makes dequantized constants (say, gather indices) all zero on the GPU path
                return f"tensor {tensor.name!r} has a degenerate quantization scale {q.scale[:4].tolist()}"
            too_big = self._exceeds_device(tensor.shape, grid=not graph.constant_like(t))
            if too_big:
                return f"tensor {tensor.name!r} is too large for the device: {too_big}"
            if tensor.data is not None:
                continue
            if len(collapse(tensor.shape)) > MAX_RANK or (len(tensor.shape) > MAX_RANK and not op.gpu_rank5):
                return f"tensor {tensor.name!r} has rank {len(tensor.shape)}, the GPU path takes at most {MAX_RANK}"
            if tensor.dtype.kind in "iu" and tensor.quant is not None and tensor.dtype.itemsize == 1:
                if not self.enable_quantized_inference:
                    return "quantized inference is disabled (enable_quantized_inference=False)"
                if tensor.quant.per_channel:
                    return f"tensor {tensor.name!r} has per-channel quantized activations"
                zero = tensor.quant.scalar()[1]
                info = np.iinfo(tensor.dtype)
                if not info.min <= zero <= info.max:
                    return f"tensor {tensor.name!r} has a zero point {zero} outside {tensor.dtype}"
            elif tensor.dtype not in (np.float32, np.float16) and not (
                    op.gpu_takes_ints(node, graph) and tensor.dtype in GPU_HELD_AS_FLOAT and tensor.quant is None):
                held = f"; {node.op} takes none on the GPU" if tensor.dtype in GPU_HELD_AS_FLOAT else ""
                return f"tensor {tensor.name!r} is {tensor.dtype}; the GPU path computes in float{held}"
            elif tensor.dtype in GPU_HELD_AS_FLOAT and shape_arithmetic(graph, t):
                return f"tensor {tensor.name!r} is computed from tensor shapes, which stays on the CPU"
        try:
            verdict = op.gpu_support(node, graph)
        except MODEL_FAULTS as e:
            log.warning("GpuDelegate: %s: gpu_support failed (%s: %s); the node stays on the CPU", node,
                        type(e).__name__, e)
            return f"gpu_support failed ({type(e).__name__}: {e})"
        return verdict if verdict is True or isinstance(verdict, str) else "not supported"

    def _exceeds_device(self, shape: tuple[int, ...], grid: bool = True) -> str:
        """Why a tensor of ``shape`` cannot be a buffer of this device ('' if it can): more bytes than one
        buffer may hold, or a dispatch grid (W, H, B * slices, one work item per vec4 in the worst case)
        beyond the device's limit. Checked before anything is allocated, so such a node runs on the CPU
        instead of failing in the middle of preparing the GPU partition."""
        shape = collapse(shape)
        if len(shape) > MAX_RANK or any(d < 0 for d in shape):
            return ""
        info = self.backend.device_info()
        b, h, w, c = bhwc(shape)
        nbytes = vec4_count((b, h, w, c)) * 4 * (2 if self.precision_loss_allowed else 4)
        if nbytes > info["max_buffer_bytes"]:
            return f"{nbytes / 2**20:.0f} MiB, one buffer may hold {info['max_buffer_bytes'] / 2**20:.0f} MiB"
        if not grid:  # weights are read by index, never dispatched over
            return ""
        work, limit = (w, h, b * slices(c)), info["max_dispatch_groups"]
        if any(g > m for g, m in zip(work, limit)):
            return f"a dispatch grid of {work} exceeds the device's {tuple(limit)}"
        return ""

    def partition_weight(self, nodes: list[Node], graph: Graph) -> float:
        total = 0
        for node in nodes:
            op = get_op(node.op)
            total += op.macs(node, graph) if op is not None else 0
        return float(total)

    def partition_declined(self, nodes: list[Node], graph: Graph) -> str:
        # each non-constant tensor's count of values; -1 where a dimension is open (not known here)
        tensors = {t for node in nodes for t in (*node.inputs, *node.outputs)
                   if t >= 0 and graph.tensors[t].data is None}
        sizes = [math.prod(shape) if min(shape, default=0) >= 0 else -1
                 for shape in (graph.tensors[t].shape for t in tensors)]
        # A loop's condition (LESS, LOGICAL_AND of its counters) or counter arithmetic alone: each invoke would be a
        # round trip to the device for a few scalars, and a WHILE makes one every iteration (Keras 3's LSTM of 50
        # steps: 50 of them for its condition alone)
        if sizes and all(0 <= size <= 1 for size in sizes):
            return "the partition holds scalars only (a loop's counters or condition): the CPU computes them " \
                   "without a round trip to the device"
        return self._small_beside_cpu(nodes, graph, sizes)

    def _small_beside_cpu(self, nodes: list[Node], graph: Graph, sizes: list[int]) -> str:
        """Why a partition of little work (``sizes``: its tensors' counts of values) that exchanges tensors with nodes
        outside it stays on the CPU, or "". Its values cross to the device and back every invoke, a round trip of
        ~50-100 us on PoCL (a real GPU's queue and synchronisation cost as much) for work the CPU kernels do in a
        few: a text model's embedding and mask before a CPU loop, a Dense after a fused LSTM (masked LSTM 0.61 ->
        0.55 ms, an LSTM + Dense 0.066 -> 0.043 ms). A partition that is the whole model between its inputs and
        outputs stays delegated."""
        values = sum(sizes)
        if min(sizes, default=0) < 0 or values > SMALL_PARTITION_VALUES:
            return ""
        macs = int(self.partition_weight(nodes, graph))
        if macs > SMALL_PARTITION_MACS:
            return ""
        produced = {t for n in nodes for t in n.outputs}
        graph_inputs = set(graph.inputs)
        reads_outside = any(t >= 0 and t not in produced and graph.tensors[t].data is None and t not in graph_inputs
                            for n in nodes for t in n.inputs)
        if not reads_outside:  # the whole graph's walk only for a partition fed by the graph's inputs alone
            inside = {n.index for n in nodes}
            consumers = graph.consumers()
            if not any(c not in inside for t in produced for c in consumers.get(t, [])):
                return ""
        return (f"a partition of {values} values and {macs} multiply-adds beside CPU nodes: the round trip to the "
                "device costs more than its work")

    def create_kernel(self) -> GpuKernel:
        return GpuKernel(self)


def _create_backend(requested: str, profile: bool):
    names = ["cl", "gl"] if requested == "auto" else [requested]
    reasons = []
    for name in names:
        try:
            return backends.create_backend(name, profile=profile), ""
        except DelegateError as e:
            if requested != "auto":
                raise
            reasons.append(f"{name}: {e}")
    reason = "; ".join(reasons)
    log.warning("GpuDelegate(backend='auto'): no GPU backend could be created (%s); every node stays on the CPU",
                reason)
    return None, reason


class GpuKernel(DelegateKernel):
    """One delegated partition: its plan, compiled programs and device buffers.

    When the GPU cannot run the partition as prepared (a tensor with no elements; with backend="auto", also
    a backend failing to compile or allocate), the partition runs on the CPU kernels instead, as TFLite
    falls back to its CPU path when a delegate fails to prepare; ``cpu_fallback`` then says why."""

    def __init__(self, delegate: GpuDelegate):
        self.delegate = delegate
        self.runner: PlanRunner | None = None
        self.prepared_shapes: dict[int, tuple[int, ...]] | None = None
        self.cpu_fallback: str | None = None

    def init(self, graph: Graph, node_indices: list[int], input_ids: list[int], output_ids: list[int]) -> None:
        self.graph = graph
        self.nodes = list(node_indices)
        self.inputs = list(input_ids)
        self.outputs = list(output_ids)
        # int32 inputs a node adds a constant to on the GPU (ops/elementwise.py Add.gpu_takes_ints): held to a
        # smaller bound, so that the sum stays exact in float lanes
        self.int_limits = {t: GPU_EXACT_INT - GPU_INT_OFFSET for n in self.nodes for t in graph.nodes[n].inputs
                           if graph.nodes[n].op in ("ADD", "SUB") and t in self.inputs
                           and graph.tensors[t].dtype == np.int32}

    def prepare(self, tensors) -> None:
        shapes = self.partition_shapes()
        for t in self.inputs:
            if t in tensors and tuple(tensors[t].shape) != shapes[t]:
                raise DelegateError(f"GpuDelegate: input tensor {t} has shape {list(tensors[t].shape)} at prepare, "
                                    f"its graph says {list(shapes[t])}")
        if shapes == self.prepared_shapes and (self.runner is not None or self.cpu_fallback):
            return
        self.free()  # the old plan's buffers go before the new ones are allocated
        computed = [t for t in shapes if self.graph.tensors[t].data is None]
        empty = [t for t in computed if 0 in shapes[t]]
        deep = [t for t in computed if len(collapse(shapes[t])) > MAX_RANK]
        if empty:
            self._fall_back(f"tensor {empty[0]} has no elements (shape {list(shapes[empty[0]])})")
        elif deep:
            self._fall_back(f"tensor {deep[0]} has rank {len(shapes[deep[0]])} (shape {list(shapes[deep[0]])}); "
                            f"the GPU path takes at most {MAX_RANK}")
        else:
            try:
                with self.delegate.lock:
                    self.runner = PlanRunner.create(self.delegate, self.graph, self.nodes, self.inputs,
                                                    self.outputs, shapes, sample=self._zero_sample(shapes))
            except ModelError:
                raise
            except DelegateError as e:
                if self.delegate.requested_backend != "auto":
                    raise DelegateError(f"GpuDelegate(backend={self.delegate.requested_backend!r}) cannot run "
                                        f"nodes {_span(self.nodes)}: {e}") from e
                self._fall_back(f"the {self.delegate.backend_name} backend failed: {e}")
            except Exception as e:  # noqa: BLE001  (auto: a lowering bug must not take the app down)
                if self.delegate.requested_backend != "auto":
                    raise
                self._fall_back(f"lowering failed: {type(e).__name__}: {e}")
        self.prepared_shapes = shapes

    def _zero_sample(self, shapes: dict[int, tuple[int, ...]]
                     ) -> tuple[dict[int, np.ndarray], dict[int, tuple[float, int]]]:
        """Zero inputs as ``invoke`` hands inputs to the runner (float32, or int8/uint8 codes with their
        scale and zero point): the runner runs them once at preparation."""
        feeds: dict[int, np.ndarray] = {}
        codes: dict[int, tuple[float, int]] = {}
        for t in self.inputs:
            tensor = self.graph.tensors[t]
            if tensor.quant is not None and tensor.dtype in (np.int8, np.uint8) and not tensor.quant.per_channel:
                codes[t] = tensor.quant.scalar()
                feeds[t] = np.zeros(shapes[t], tensor.dtype)
            else:
                feeds[t] = np.zeros(shapes[t], np.float32)
        return feeds, codes

    def _fall_back(self, why: str) -> None:
        self.cpu_fallback = why.splitlines()[0]
        log.warning("GpuDelegate: nodes %s run on the CPU: %s", _span(self.nodes), self.cpu_fallback)

    def free(self) -> None:
        # No delegate lock here: free also runs from the interpreter's finalizer, which the garbage collector
        # may call on any thread (the GL thread too) while another thread holds that lock waiting for the
        # device. Nothing else uses this runner by then, and each backend serializes its own calls.
        if self.runner is not None:
            self.runner.close()
            self.runner = None
        self.prepared_shapes = None
        self.cpu_fallback = None

    def partition_shapes(self) -> dict[int, tuple[int, ...]]:
        """Every tensor the partition touches, with its graph's shape. Those are final when a kernel is prepared:
        our interpreter resolves a graph for each allocation (shapes.resolve), and LiteRT propagates every shape
        before it delegates (and delegates again after a resize)."""
        touched = set(self.inputs) | {t for n in self.nodes for t in (*self.graph.nodes[n].inputs,
                                                                       *self.graph.nodes[n].outputs) if t >= 0}
        return {t: self.graph.tensors[t].shape for t in sorted(touched)}

    def invoke(self, tensors) -> None:
        if self.cpu_fallback:
            self._invoke_cpu(tensors)
            return
        if self.runner is None:
            raise DelegateError("GpuKernel.invoke before prepare")
        graph = self.graph
        feeds, codes = {}, {}
        for t in self.inputs:
            x = tensors[t]
            tensor = graph.tensors[t]
            limit = self.int_limits.get(t, GPU_EXACT_INT)
            if x.dtype == np.int32 and x.size and (abs(x.item()) > limit if x.size == 1 else  # a loop's counter
                                                   x.min() < -limit or x.max() > limit):
                # int32 lanes are float32 on the device: exact to 2**24 only, so this invoke runs on the CPU
                log.warning("GpuDelegate: tensor %r holds int32 values beyond %d; nodes %s run on the CPU this "
                            "invoke", tensor.name, limit, _span(self.nodes))
                self._invoke_cpu(tensors)
                return
            if tensor.quant is not None and x.dtype.kind in "iu":
                if x.dtype in (np.int8, np.uint8) and not tensor.quant.per_channel:
                    codes[t] = tensor.quant.scalar()  # dequantized on the device
                    feeds[t] = x
                    continue
                x = dequantize(x, tensor.quant.scale, tensor.quant.zero_point)
            feeds[t] = np.asarray(x, np.float32)
        with self.delegate.lock:
            results = self.runner.run(feeds, codes)
            if self.delegate.backend is not None and self.delegate.backend.profile:
                self.delegate.last_kernel_timings = self.runner.last_timings
        for t in self.outputs:
            tensor = graph.tensors[t]
            y = results[t]
            if tensor.quant is not None and tensor.dtype.kind in "iu":
                s, z = tensor.quant.scalar()
                y = quantize(y, s, z, tensor.dtype)
            elif tensor.dtype == np.bool_:
                y = y != 0
            elif tensor.dtype == np.int32:
                y = np.rint(y)
            tensors[t] = y.astype(tensor.dtype, copy=False).reshape(tensor.shape)
        for var, t in self.runner.plan.state_updates.items():  # state the nodes update in place (LSTM)
            state = tensors[var]
            if state.flags.writeable:
                np.copyto(state, results[t].reshape(state.shape), casting="unsafe")
            else:
                tensors[var] = results[t].astype(state.dtype).reshape(state.shape)

    def _invoke_cpu(self, tensors) -> None:
        """The partition's nodes on the CPU kernels, in order (the fallback)."""
        self.delegate.last_kernel_timings = []
        graph = self.graph
        values: dict[int, np.ndarray] = {}
        for n in self.nodes:
            node = graph.nodes[n]
            ins = [None if t < 0 else values[t] if t in values else graph.tensors[t].data
                   if graph.tensors[t].data is not None else tensors[t] for t in node.inputs]
            for t, v in zip(node.outputs, run_node(node, graph, ins)):
                values[t] = v
        for t in self.outputs:
            tensors[t] = values[t]


def _span(nodes: list[int]) -> str:
    if len(nodes) > 1 and nodes == list(range(nodes[0], nodes[-1] + 1)):
        return f"{nodes[0]}-{nodes[-1]}"
    return ", ".join(map(str, nodes[:8])) + (", ..." if len(nodes) > 8 else "")
