"""Run a plan on a backend: compile its kernels, allocate its buffers, upload its constants once, and
then, every invoke, upload the inputs, dispatch the kernels in order and download the outputs."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .backends.base import Backend, Buffer, Program, device_fingerprint, local_size_candidates
from .backends.codegen import API_LANGUAGE, Arg, KernelSpec, load_kernel, render_postops
from .cache import fingerprint, partition_parts
from .errors import DelegateError
from .graph import Graph
from .lowering.context import GpuOp
from .lowering.pipeline import build_plan
from .lowering.plan import KernelCall, Plan
from .ops import get_op
from .version import __version__

if TYPE_CHECKING:  # the delegate module creates runners; a runner only reads the delegate's options
    from .gpu import GpuDelegate

log = logging.getLogger("gpu_delegate")

# What a kernel argument binds: ("t", plan tensor id) or ("c", const key).
Bind = tuple[Literal["t"], int] | tuple[Literal["c"], str]

# A profiled invoke times kernels on the device's own counters unless they cover less than this fraction of the
# host-timed dispatches (Mesa llvmpipe's GL timer queries read ~0 for compute dispatches): then on the host.
MIN_DEVICE_CLOCK = 0.01

# Work-group tuning stops after this long per partition (PoCL builds a work-group function per size at its
# first launch, ~30 ms; llvmpipe compiles a shader per size, 0.2-1.5 s); the kernels it did not reach keep
# the rule's size.
TUNE_SECONDS = 20.0


def kernel_spec(call: KernelCall, plan: Plan, precision: str,
                api: str | None = None) -> tuple[KernelSpec, list[Bind]]:
    """The KernelSpec of a call and, in argument order, what each argument binds: ("t", tensor) or
    ("c", const key). With ``api``, the call's own kernel for that API, if it has one, runs instead."""
    language = API_LANGUAGE.get(api) if api else None
    source_language, name = call.source(language)
    file_helpers, body = load_kernel(name, source_language)
    helpers = call.helpers + file_helpers
    args: list[Arg] = []
    binds: list[Bind] = []
    def tensor_storage(t: int) -> str:
        return plan.tensor_precision(t, precision)

    def const_storage(key: str) -> str:
        return "fp32" if key in plan.fp32_consts else precision

    for name, t in call.inputs.items():
        args.append(Arg(name, "in", plan.tensors[t], tensor_storage(t)))
        binds.append(("t", t))
    for name, t in call.outputs.items():
        args.append(Arg(name, "out", plan.tensors[t], tensor_storage(t)))
        binds.append(("t", t))
    for name, key in call.consts.items():
        args.append(Arg(name, "const", precision=const_storage(key)))
        binds.append(("c", key))
    for k, p in enumerate(call.postops):
        if isinstance(p.source, str):
            args.append(Arg(f"p{k}", "const", precision=const_storage(p.source)))
            binds.append(("c", p.source))
        elif p.source is not None:
            args.append(Arg(f"p{k}", "in", plan.tensors[p.source], tensor_storage(p.source)))
            binds.append(("t", p.source))
    postop_arg, wide = None, False
    if call.postops:
        text, wide = render_postops(call.postops, plan.tensors[call.outputs["dst"]][3], language)
        helpers, postop_arg = helpers + text, "dst"
    spec = KernelSpec(call.kernel, body, args, call.grid, dict(call.defines), helpers=helpers,
                      precision=precision, local_size=call.local_size, postop_arg=postop_arg, wide_postop=wide)
    return spec, binds


@dataclasses.dataclass(frozen=True)
class KernelTiming:
    """One dispatch of a profiled invoke (a backend created with ``profile=True``, as by
    ``GpuDelegate(enable_op_profiling=True)``): each kernel is dispatched alone and waited for."""

    kernel: str  # the program's kernel name: "conv2d", or "convert_to_phwc4" / "convert_from_phwc4" at the boundary
    nodes: tuple[int, ...]  # graph nodes it computes, its fused post-ops' included; () for a boundary conversion
    device_ns: int  # the API's own counter (OpenCL profiling event, GL timer query)
    host_ns: int  # from enqueue until the device has finished it
    clock: Literal["device", "host"]  # which of the two this invoke's counters make trustworthy

    @property
    def ns(self) -> int:
        return self.device_ns if self.clock == "device" else self.host_ns


class PlanRunner:
    def __init__(self, backend: Backend, plan: Plan, precision: str) -> None:
        self.backend = backend
        self.plan = plan
        self.precision = precision
        self.timings: dict[str, float] = {}
        self.buffers: list[Buffer] = []  # per memory-plan slot
        self.const_buffers: dict[str, Buffer] = {}
        # per kernel call of the plan (compile): its program, what its arguments bind, its source digest
        self.programs: list[Program] = []
        self.binds: list[list[Bind]] = []
        self.digests: list[str] = []
        self.by_digest: dict[str, Program] = {}
        self.calls: list[tuple[Program, list[Buffer]]] = []
        self.bound: list[Any] = []  # Backend.bind of calls
        self.last_timings: list[KernelTiming] = []  # of the last invoke, when the backend profiles

    @classmethod
    def create(cls, delegate: GpuDelegate, graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int],
               shapes: dict[int, tuple[int, ...]]) -> PlanRunner:
        """Build (or load from the serialization cache), compile and allocate the plan of a partition."""
        backend = delegate.backend
        assert backend is not None, "a delegate without a backend takes no partition"
        precision = "fp16" if delegate.precision_loss_allowed else "fp32"
        quantized = delegate.enable_quantized_inference
        t0 = time.perf_counter()
        cache, cached = delegate.cache, None
        device = device_fingerprint(backend.device_info())
        if cache is not None:
            fp = fingerprint([__version__, backend.name, device, precision, quantized,
                              *partition_parts(graph, nodes, shapes)])
            entry = cache.entry(fp, graph.model_digest)
            cached = cache.load(entry, device)
        if cached is not None:
            plan, binaries = cached
        else:
            info = backend.device_info()
            plan = build_plan(graph, nodes, inputs, outputs, shapes, _op_classes(graph, nodes), quantized=quantized,
                              device_type=info.get("device_type", "gpu"), max_buffers=info["max_buffers"])
            binaries = {}
        runner = cls(backend, plan, precision)
        runner.timings["plan_s"] = time.perf_counter() - t0
        compiled_any = runner.compile(binaries)
        try:
            runner.allocate()
            if delegate.tune_work_groups and not plan.tuned:
                runner.tune(TUNE_SECONDS)
                compiled_any = True
        except BaseException:
            runner.close()  # the buffers allocated before the one that failed
            raise
        if cache is not None and (cached is None or compiled_any):
            cache.store(entry, device, backend.name, plan, runner.binaries())
        return runner

    def compile(self, binaries: dict[str, bytes]) -> bool:
        """Compile every kernel, loading from ``binaries`` (source digest -> program binary) where one
        matches; True if anything had to be compiled from source."""
        t0 = time.perf_counter()
        self.programs = []
        self.binds = []
        self.digests = []
        self.by_digest = {}
        compiled_any = False
        for call in self.plan.kernels:
            spec, binds = kernel_spec(call, self.plan, self.precision, self.backend.name)
            digest = hashlib.sha256(self.backend.source(spec, self.backend.local_size(spec)).encode()).hexdigest()
            program = self.by_digest.get(digest)
            if program is None:
                if digest in binaries:
                    try:
                        program = self.backend.compile(spec, binary=binaries[digest])
                    except DelegateError as e:
                        log.warning("cached program for %s not usable (%s); compiling it", call.label, e)
                if program is None:
                    program = self.backend.compile(spec)
                    compiled_any = True
                self.by_digest[digest] = program
            self.programs.append(program)
            self.binds.append(binds)
            self.digests.append(digest)
        self.timings["compile_s"] = time.perf_counter() - t0
        return compiled_any

    def tune(self, budget_s: float) -> None:
        """Time each distinct kernel at a few work-group sizes on its real buffers and keep the fastest in
        the plan (so the serialization cache keeps it too). No kernel writes a constant buffer, and every
        invoke recomputes all the others from the inputs, so these extra launches change no answer."""
        t0 = time.perf_counter()
        info = self.backend.device_info()
        chosen: dict[str, tuple[int, int, int]] = {}
        for call, program, (_, buffers), digest in zip(self.plan.kernels, self.programs, self.calls, self.digests):
            if digest in chosen:
                call.local_size = chosen[digest]
                continue
            if time.perf_counter() - t0 > budget_s:
                log.info("work-group tuning stopped after %.1f s at %s", budget_s, call.label)
                break
            spec, _ = kernel_spec(call, self.plan, self.precision, self.backend.name)
            best = (self._time(program, buffers), program.local_size)
            for local in local_size_candidates(spec.grid, info, self.backend.tuning_candidates):
                if local == program.local_size:
                    continue
                try:
                    candidate = self.backend.compile(dataclasses.replace(spec, local_size=local))
                except DelegateError as e:  # a size the driver refuses for this kernel
                    log.debug("%s: work-group size %s refused: %s", call.label, local, e)
                    continue
                best = min(best, (self._time(candidate, buffers), local))
            call.local_size = chosen[digest] = best[1]
        self.plan.tuned = True
        self.compile({})  # every program is in the backend's own cache by now: nothing is built again
        self.bind()
        self.timings["tune_s"] = time.perf_counter() - t0

    def _time(self, program: Program, buffers: list[Buffer], repeats: int = 3) -> float:
        """The fastest of ``repeats`` launches, after one that warms the driver up."""
        bound = self.backend.bind([(program, buffers)])
        self.backend.dispatch_bound(bound)
        self.backend.finish()
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            self.backend.dispatch_bound(bound)
            self.backend.finish()
            best = min(best, time.perf_counter() - t)
        return best

    def binaries(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for digest, program in self.by_digest.items():
            try:
                out[digest] = self.backend.program_binary(program)
            except (DelegateError, NotImplementedError) as e:
                log.debug("no program binary for %s: %s", program, e)
        return out

    def allocate(self) -> None:
        backend, plan = self.backend, self.plan
        for n, fp32 in zip(plan.buffer_sizes, plan.buffer_fp32):
            self.buffers.append(backend.alloc(n, "fp32" if fp32 else self.precision))
        for key, rows in plan.consts.items():
            buf = self.const_buffers[key] = backend.alloc(rows.shape[0],
                                                          "fp32" if key in plan.fp32_consts else self.precision)
            backend.upload(buf, rows)
        self.bind()

    def bind(self) -> None:
        self.calls = []
        for program, binds in zip(self.programs, self.binds):
            self.calls.append((program, [self._bound_buffer(b) for b in binds]))
        self.bound = self.backend.bind(self.calls)

    def _bound_buffer(self, bind: Bind) -> Buffer:
        if bind[0] == "c":
            return self.const_buffers[bind[1]]
        return self.tensor_buffer(bind[1])

    def tensor_buffer(self, t: int) -> Buffer:
        return self.buffers[self.plan.buffer_of[self.plan.storage(t)]]

    def run(self, feeds: dict[int, np.ndarray], codes: dict[int, tuple[float, int]] | None = None
            ) -> dict[int, np.ndarray]:
        """Outputs (float32) from inputs: float arrays, or int8/uint8 codes for the tensors ``codes`` gives
        (scale, zero_point) of."""
        plan, backend, codes = self.plan, self.backend, codes or {}
        if backend.profile:
            return self._run_profiled(feeds, codes)
        for t in plan.inputs:
            backend.to_device(feeds[t], self.tensor_buffer(t), plan.tensors[t], codes.get(t))
        backend.dispatch_bound(self.bound)
        return {t: backend.from_device(self.tensor_buffer(t), plan.tensors[t]) for t in plan.outputs}

    def _run_profiled(self, feeds: dict[int, np.ndarray], codes: dict[int, tuple[float, int]]
                      ) -> dict[int, np.ndarray]:
        """``run``, one dispatch at a time, each timed on the device and on the host (``last_timings``)."""
        plan, backend = self.plan, self.backend
        backend.take_timings()  # what earlier dispatches (tuning, another runner) left uncollected
        raw: list[tuple[str, tuple[int, ...], int, int]] = []

        def collect(nodes: tuple[int, ...], start: float) -> None:
            timings = backend.take_timings()  # waits for the device
            host_ns = int((time.perf_counter() - start) * 1e9)
            for name, ns in timings:  # a boundary conversion may dispatch nothing, or share the host time
                raw.append((name, nodes, ns, host_ns // len(timings)))

        for t in plan.inputs:
            start = time.perf_counter()
            backend.to_device(feeds[t], self.tensor_buffer(t), plan.tensors[t], codes.get(t))
            collect((), start)
        for call, bound in zip(plan.kernels, self.bound):
            start = time.perf_counter()
            backend.dispatch_bound([bound])
            collect((call.node, *(p.node for p in call.postops if p.node >= 0 and p.node != call.node)), start)
        outputs = {}
        for t in plan.outputs:
            start = time.perf_counter()
            outputs[t] = backend.from_device(self.tensor_buffer(t), plan.tensors[t])
            collect((), start)
        device_ok = sum(r[2] for r in raw) >= MIN_DEVICE_CLOCK * sum(r[3] for r in raw)
        self.last_timings = [KernelTiming(name, nodes, device_ns, host_ns, "device" if device_ok else "host")
                             for name, nodes, device_ns, host_ns in raw]
        return outputs

    def close(self) -> None:
        for buf in [*self.buffers, *self.const_buffers.values()]:
            self.backend.free(buf)
        self.buffers, self.const_buffers, self.calls, self.bound = [], {}, [], []


def _op_classes(graph: Graph, nodes: list[int]) -> dict[int, GpuOp]:
    ops: dict[int, GpuOp] = {}
    for n in nodes:
        op = get_op(graph.nodes[n].op)
        assert op is not None, f"{graph.nodes[n]}: the delegate took a node whose op is not registered"
        ops[n] = op
    return ops
