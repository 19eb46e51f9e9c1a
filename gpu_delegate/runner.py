"""Run a plan on a backend: compile its kernels, allocate its buffers, upload its constants once, and
then, every invoke, upload the inputs, dispatch the kernels in order and download the outputs."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .backends import compile_worker
from .backends.base import (
    Backend,
    Buffer,
    Codes,
    DeviceInfo,
    InputRoute,
    OutputRoute,
    Program,
    device_fingerprint,
    local_size_candidates,
)
from .backends.codegen import (
    API_LANGUAGE,
    CROWDED,
    Arg,
    KernelSpec,
    load_kernel,
    render_postops,
    runtime_channels,
    shared_arrays,
    value_steps,
)
from .backends.compile_worker import CompileWorker, Group, Launch
from .cache import fingerprint, partition_parts
from .cpu.quant import dequantize
from .dtypes import fp16_saturated
from .errors import DelegateError
from .graph import Graph
from .lowering.context import GpuOp
from .lowering.pipeline import build_plan
from .lowering.plan import KernelCall, Plan
from .ops import get_op
from .phwc4 import BHWC
from .progress import Progress
from .version import build_id

if TYPE_CHECKING:  # the delegate module creates runners; a runner only reads the delegate's options
    from .gpu import GpuDelegate

log = logging.getLogger("gpu_delegate")

# What a kernel argument binds: ("t", plan tensor id) or ("c", const key).
Bind = tuple[Literal["t"], int] | tuple[Literal["c"], str]

# A profiled invoke times kernels on the device's own counters unless they cover less than this fraction of the
# host-timed dispatches (Mesa llvmpipe's GL timer queries read ~0 for compute dispatches): then on the host.
MIN_DEVICE_CLOCK = 0.01

# Work-group tuning never blocks a start for long: it stops after this share of what compiling the partition
# took (the build and the first launches, where drivers compile too), at most TUNE_SECONDS; the kernels it did
# not reach keep the rule's size. PoCL builds a work-group function per size at its first launch (~100 ms),
# llvmpipe compiles a shader per size (0.1-1.5 s), a GPU driver neither.
TUNE_SHARE = 0.25
TUNE_SECONDS = 20.0
# Devices on which a serialization dir turns tuning on (sustained_speed turns it on everywhere). On the CPU
# stand-ins it buys no measurable speed for a slower first start: PoCL 0-2% (issue 17), within the noise of a
# loaded host in paired rounds; llvmpipe, whose timings are noisier, ran MobileNetV2 10% slower with its picks.
TUNE_FOR_CACHE = ("gpu",)
# A compile worker (backends/compile_worker.py) shares the compiles of a partition of at least WORKER_KERNELS
# distinct kernels: its start costs ~0.4 s (a Python process importing the package and opening the device), a
# kernel's first launch 0.05-0.2 s on PoCL and llvmpipe. The kernels then build as WORKER_PROGRAMS driver programs
# (GL: one per shader, as always), one built by each process, and the first launches are shared out one at a time:
# PoCL's build costs ~0.1 s a program more (CPU seconds of MobileNetV2's 34 kernels: 1.1 in 1 program, 1.2 in 2,
# 1.55 in 4, 1.7 in 6), and a start without a worker builds them too. In CPU seconds of MobileNetV2 cold on cl, this
# process's and all: 4.1-4.2 alone, 2.7 and 5.4 with 2 programs shared, 2.8-3.1 and 5.5-6.0 with 6. Shared a
# launch at a time instead of a program at a time, face_detection_short_range's cold start on cl took 3.47 s
# instead of 3.76 (bench/cold_warm.py, medians of 3, interleaved): the two processes finish together.
WORKER_KERNELS = 16
WORKER_PROGRAMS = 2


def kernel_spec(call: KernelCall, plan: Plan, precision: str,
                api: str | None = None) -> tuple[KernelSpec, list[Bind]]:
    """The KernelSpec of a call and, in argument order, what each argument binds: ("t", tensor) or
    ("c", const key). With ``api``, the call's own kernel for that API, if it has one, runs instead."""
    language = API_LANGUAGE.get(api) if api else None
    source_language, name = call.source(language)
    file_helpers, body = load_kernel(name, source_language)
    generic = runtime_channels(name, source_language)  # None, "" (always) or "crowded"
    shared = shared_arrays(name, source_language)
    helpers = call.helpers + file_helpers
    args: list[Arg] = []
    binds: list[Bind] = []
    def tensor_storage(t: int) -> str:
        return plan.tensor_precision(t, precision)

    def const_storage(key: str) -> str:
        return plan.const_precision(key, precision)

    for name, t in call.inputs.items():
        args.append(Arg(name, "in", plan.tensors[t], tensor_storage(t), plan.placement(t)))
        binds.append(("t", t))
    for name, t in call.outputs.items():
        if plan.stored_dense(t):  # a plain buffer of floats in the dense order (lowering/dense_outputs.py)
            args.append(Arg(name, "out", precision=tensor_storage(t)))
        else:
            args.append(Arg(name, "out", plan.tensors[t], tensor_storage(t), plan.placement(t)))
        binds.append(("t", t))
    for name, key in call.consts.items():
        args.append(Arg(name, "const", precision=const_storage(key)))
        binds.append(("c", key))
    for k, p in enumerate(call.postops):
        if isinstance(p.source, str):
            args.append(Arg(f"p{k}", "const", precision=const_storage(p.source)))
            binds.append(("c", p.source))
        elif p.source is not None:
            # an operand read as codes: in its tensor's geometry, from the buffer of its codes (PostOp.codes_of)
            shaped = p.codes_of if p.codes_of >= 0 else p.source
            args.append(Arg(f"p{k}", "in", plan.tensors[shaped], tensor_storage(p.source), plan.placement(shaped),
                            codes=p.codes_of >= 0))
            binds.append(("t", p.source))
    postop_arg, wide = None, False
    constants: dict[str, float | int] = {}
    if call.postops:
        # a one- or three-channel dense input's copy (kernels/opencl/copy.cl) steps 4 pixels' values 4 at a time,
        # unpadded
        values = call.defines.get("DENSE_C") in (1, 3) and language == "opencl" and value_steps(call.postops)
        text, wide, constants = render_postops(call.postops, plan.tensors[call.outputs["dst"]][3], language, values)
        helpers, postop_arg = helpers + text, "dst"
    spec = KernelSpec(call.kernel, body, args, call.grid, {**call.defines, **constants}, helpers=helpers,
                      precision=precision, local_size=call.local_size, postop_arg=postop_arg, wide_postop=wide,
                      runtime_channels=generic == "", generic_when_crowded=generic == CROWDED,
                      constants=(*constants, *call.constants), shared=shared)
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
        # per kernel call of the plan (compile): its program, what its arguments bind
        self.programs: list[Program] = []
        self.binds: list[list[Bind]] = []
        self.units: dict[str, Program] = {}  # a program of each driver program (Program.unit), for its binary
        self.boundary: list[KernelSpec] = []  # the conversions at the partition's boundary, compiled with it
        self.calls: list[tuple[Program, list[Buffer]]] = []
        self.bound: list[Any] = []  # Backend.bind of calls
        # how run() moves each input (per tensor, and codes where it comes as codes) and output
        self.input_routes: dict[tuple[int, Codes | None], InputRoute] = {}
        self.output_routes: list[OutputRoute] = []
        self.last_timings: list[KernelTiming] = []  # of the last invoke, when the backend profiles

    @classmethod
    def create(cls, delegate: GpuDelegate, graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int],
               shapes: dict[int, tuple[int, ...]],
               sample: tuple[dict[int, np.ndarray], dict[int, tuple[float, int]]] | None = None) -> PlanRunner:
        """Build (or load from the serialization cache), compile and allocate the plan of a partition. With
        ``sample`` (inputs and codes as ``run`` takes them), run it once, so that whatever drivers compile at
        a first launch is compiled here and the first invoke is as quick as the next."""
        assert delegate.backend is not None, "a delegate without a backend takes no partition"
        backend = delegate.backend.for_work(delegate.partition_weight([graph.nodes[n] for n in nodes], graph))
        precision = "fp16" if delegate.precision_loss_allowed else "fp32"
        quantized = delegate.enable_quantized_inference
        t0 = time.perf_counter()
        progress = Progress(backend.name, len(nodes))
        try:
            cache, cached = delegate.cache, None
            device = device_fingerprint(backend.device_info())
            if cache is not None:
                fp = fingerprint([build_id(), backend.name, device, precision, quantized,
                                  *partition_parts(graph, nodes, shapes)])
                entry = cache.entry(fp, graph.model_digest)
                cached = cache.load(entry, device)
                progress.stage(f"cache {'hit' if cached is not None else 'miss'}: {cache.path(entry)}")
            info = backend.device_info()
            device_type = info.get("device_type", "gpu")
            if cached is not None:
                plan, binaries = cached
            else:
                progress.stage(f"planning {len(nodes)} nodes")
                plan = build_plan(graph, nodes, inputs, outputs, shapes, _op_classes(graph, nodes),
                                  quantized=quantized, device_type=device_type, max_buffers=info["max_buffers"],
                                  api=info["api"], vector_width=info["vector_width"],
                                  int8_dot=info.get("int8_dot", False))
                binaries = {}
            runner = cls(backend, plan, precision)
            runner.timings["plan_s"] = time.perf_counter() - t0
            runner.boundary = runner.boundary_specs(sample[1] if sample is not None else {},
                                                    sample[0] if sample is not None else {})
            # first launches happen here only with a sample, and from a file's binaries the driver compiles less
            compiled = runner.compile(binaries, progress, worker=sample is not None and cached is None)
            tuned = False
            try:
                runner.allocate()
                if sample is not None:
                    runner.warm_up(*sample, progress=progress)
                if not plan.tuned and runner.tunes(delegate, device_type):
                    spent = runner.timings["compile_s"] + runner.timings.get("warm_up_s", 0.0)
                    runner.tune(min(TUNE_SHARE * spent, TUNE_SECONDS), progress, sample)
                    tuned = True
            except BaseException:
                runner.close()  # the buffers allocated before the one that failed
                raise
            # a start that compiled what the file holds no binary of adds it, unless the driver keeps programs
            # itself (then the file holds none, and each start would write it again for nothing)
            rebuilt = compiled > 0 and not backend.driver_caches_programs
            if cache is not None and (cached is None or tuned or rebuilt):
                progress.stage(f"storing {cache.path(entry)}")
                cache.store(entry, device, backend.name, plan, runner.binaries())
        finally:
            progress.close()
        return runner

    def tunes(self, delegate: GpuDelegate, device_type: str) -> bool:
        """Whether to tune this plan's work-group sizes: when the app asked for sustained speed, or once for
        a serialization dir that will keep the result, on a device where tuning pays (TUNE_FOR_CACHE). A
        directory that takes no file would have every start tune again."""
        if delegate.inference_preference == "sustained_speed":
            return True
        cache = delegate.cache
        return cache is not None and device_type in TUNE_FOR_CACHE and cache.takes_files()

    def boundary_specs(self, codes: dict[int, tuple[float, int]], feeds: dict[int, np.ndarray]) -> list[KernelSpec]:
        """The conversion kernels of the partition's boundary (Backend.boundary_specs): inputs given as codes
        where ``codes`` has them (of the dtype ``feeds`` has), the rest as float32."""
        plan = self.plan

        def storage(t: int) -> str:
            return "fp32" if plan.buffer_fp32[plan.buffer_of[plan.storage(t)]] else self.precision

        inputs: list[tuple[BHWC, str, Codes | None]] = [
            (plan.tensors[t], storage(t), (*codes[t], feeds[t].dtype) if t in codes else None) for t in plan.inputs
            if t not in plan.dense]
        return self.backend.boundary_specs(inputs, [(plan.tensors[t], storage(t)) for t in plan.outputs
                                                    if plan.dense_source(t) is None])

    def compile(self, binaries: dict[str, bytes], progress: Progress | None = None, worker: bool = False) -> int:
        """Compile every kernel and the boundary's conversions (``boundary``), in as few driver programs as
        the backend allows, loading each from ``binaries`` (Program.unit -> program binary) where one matches;
        how many were compiled from source. Where a compile worker could help (compile_worker.can_help,
        WORKER_KERNELS), the programs hold fewer kernels each; with ``worker``, where one is wanted now, a worker
        process compiles and first-launches some of them into the driver's disk cache while this process does the
        others."""
        t0 = time.perf_counter()
        info = self.backend.device_info()
        specs: list[KernelSpec] = []
        self.binds = []
        for call in self.plan.kernels:
            spec, binds = kernel_spec(call, self.plan, self.precision, self.backend.name)
            if call.local_size is not None and not spec.shared and not _fits(call.local_size, info):
                # a plan tuned on a device of the same name and driver but smaller limits
                log.info("%s: tuned work-group size %s exceeds this device's limits; using the rule's", call.label,
                         call.local_size)
                call.local_size = None
                spec = dataclasses.replace(spec, local_size=None)
            specs.append(spec)
            self.binds.append(binds)
        texts: dict[int, tuple[KernelSpec, str]] = {}  # id -> the spec (held: its id stays its own) and its text

        def text(spec: KernelSpec) -> str:
            if id(spec) not in texts:
                texts[id(spec)] = (spec, self.backend.source(spec, self.backend.local_size(spec)))
            return texts[id(spec)][1]

        specs = self._share_channels(specs, text) + self.boundary
        distinct = len({(s.name, text(s)) for s in specs})
        if progress is not None:
            progress.stage(f"compiling {distinct} kernels" if not binaries else f"loading {distinct} kernels",
                           distinct)
        advance = progress.advance if progress is not None else None
        bundle, compiled = None, 0
        if distinct >= WORKER_KERNELS and compile_worker.can_help(self.backend):
            # the programs a worker shares, whether one runs now or not: a start without one (busy cores, a plan
            # from the serialization dir) then asks the driver's cache for the programs the last start left there
            bundle = max(1, math.ceil(distinct / WORKER_PROGRAMS))
            if worker and not binaries and compile_worker.wanted(self.backend):
                groups = self.backend.program_groups(specs, bundle)
                sizes = {id(spec): self._launch_sizes(binds) for spec, binds in zip(specs, self.binds)}
                # a conversion's raw buffer holds at most as many vec4 as its PHWC4 tensor
                sizes |= {id(spec): [a.n_vec4 or max(b.n_vec4 for b in spec.args) for a in spec.args]
                          for spec in self.boundary}
                shared = [Group(group, [Launch(s, sizes[id(s)]) for s in group if id(s) in sizes])
                          for group in groups]
                with CompileWorker(self.backend.name, shared) as helper:
                    compiled = helper.share(self.backend, advance)
        programs, rest = self.backend.compile_all(specs, binaries, advance, bundle)
        compiled += rest
        self.programs = programs[:len(self.plan.kernels)]
        self.units = {p.unit: p for p in programs}
        loaded = len({(p.unit, p.entry, p.local_size) for p in programs})
        if self.backend.loaded_kernels is not None and loaded > self.backend.loaded_kernels:
            log.info("%s: %d distinct kernels, more than the %d the driver keeps loaded: every dispatch reloads one",
                     self.backend.name, loaded, self.backend.loaded_kernels)
        self.timings["compile_s"] = time.perf_counter() - t0
        if compiled:
            log.info("%s: compiled %d kernels in %d programs in %.2f s", self.backend.name, compiled,
                     len({p.unit for p in programs if p.unit not in binaries}), self.timings["compile_s"])
        return compiled

    def _share_channels(self, specs: list[KernelSpec], text: Callable[[KernelSpec], str]) -> list[KernelSpec]:
        """``specs``, those with ``runtime_channels`` baked again where their generic text would serve one layer
        size only: the channel counts as arguments cost a kernel a few percent, worth it only where layers of other
        channel counts then share its program. Where the plan still has more distinct kernels than the driver keeps
        loaded (``Backend.loaded_kernels``: past it every dispatch reloads one), the kernels generic when crowded
        (``// @runtime_channels crowded``: OpenCL's 1x1 convolutions, 2-3.5% slower so) share theirs too, and if
        that is not enough, every kernel takes its constants as arguments (``runtime_constants``: its post-ops'
        scales and bounds, an op's own quantization grid): an 8-bit model's layers of one shape differ in their
        grids alone, each a kernel of its own (NASNetMobile int8: 476 distinct kernels, 113 so). ``text`` gives
        a spec's source (compile's, which makes each once)."""
        def shared(specs: list[KernelSpec]) -> list[KernelSpec]:
            baked = {id(s): dataclasses.replace(s, runtime_channels=False, runtime_constants=False) for s in specs
                     if s.runtime_channels or s.runtime_constants}
            layers: dict[str, set[str]] = {}  # a generic text -> the texts of its layers with their constants
            for spec in specs:
                if id(spec) in baked:
                    layers.setdefault(text(spec), set()).add(text(baked[id(spec)]))
            return [baked[id(s)] if id(s) in baked and len(layers[text(s)]) == 1 else s for s in specs]

        def crowded(specs: list[KernelSpec]) -> bool:
            limit = self.backend.loaded_kernels
            kernels = len({(text(s), self.backend.local_size(s)) for s in specs}) + len(self.boundary)
            return limit is not None and kernels > limit

        kept = shared(specs)
        if not crowded(kept):
            return kept
        specs = [dataclasses.replace(s, runtime_channels=True) if s.generic_when_crowded else s for s in specs]
        kept = shared(specs)
        if not crowded(kept):
            return kept
        return shared([dataclasses.replace(s, runtime_constants=True) if s.constants else s for s in specs])

    def _launch_sizes(self, binds: list[Bind]) -> list[int]:
        """The vec4 count of what each argument of a kernel binds (before ``allocate``)."""
        plan = self.plan
        return [int(plan.consts[b[1]].shape[0]) if b[0] == "c" else
                plan.buffer_sizes[plan.buffer_of[plan.storage(b[1])]] for b in binds]

    def warm_up(self, feeds: dict[int, np.ndarray], codes: dict[int, tuple[float, int]] | None = None,
                progress: Progress | None = None) -> None:
        """One run on ``feeds``, results dropped: drivers compile at a kernel's first launch (PoCL a work-group
        function per kernel and size, llvmpipe its shader's machine code), and the conversions at the
        partition's boundary are built at their first use. No kernel writes a constant buffer, and every
        invoke recomputes all the others from the inputs, so this run changes no later answer."""
        t0 = time.perf_counter()
        if progress is not None:
            progress.stage(f"first launch of {len(self.plan.kernels)} kernels", len(self.plan.kernels))
        self.run(feeds, codes, progress=progress)
        self.timings["warm_up_s"] = time.perf_counter() - t0

    def tune(self, budget_s: float, progress: Progress | None = None,
             sample: tuple[dict[int, np.ndarray], dict[int, tuple[float, int]]] | None = None) -> None:
        """Time each distinct kernel at a few work-group sizes on its real buffers and keep the fastest in
        the plan (so the serialization cache keeps it too), for at most ``budget_s``; kernels not reached
        keep the rule's size. No kernel writes a constant buffer, and every invoke recomputes all the others
        from the inputs, so these extra launches change no answer.

        The kernels run in the plan's order, each at least once, from ``sample``'s inputs written again: so each
        one is timed on the values its producers compute. The memory plan lends an input's buffer to later
        tensors, and after a run it holds their values (8-bit codes read as floats are denormals, on which an
        image model's first kernel took 4-7x its time on PoCL)."""
        t0 = time.perf_counter()
        info = self.backend.device_info()
        chosen: dict[tuple[str, tuple[int | float, ...]], tuple[int, int, int]] = {}
        distinct = len({(p.source, p.values) for p in self.programs})
        if progress is not None:
            progress.stage(f"tuning work-group sizes of {distinct} kernels (at most {budget_s:.1f} s)", distinct)
        if sample is not None:
            self.write_inputs(*sample)
        stopped = False
        for call, program, (_, buffers), bound in zip(self.plan.kernels, self.programs, self.calls, self.bound):
            kernel = (program.source, program.values)  # one source may serve layers of several sizes
            if not stopped and kernel not in chosen and time.perf_counter() - t0 > budget_s:
                stopped = True
                log.info("work-group tuning stopped after %.1f s at %s", budget_s, call.label)
            spec = program.spec
            if kernel in chosen or stopped or spec.shared:
                # a kernel of one work group (shared arrays) runs at its grid's size
                call.local_size = chosen.setdefault(kernel, program.local_size)
                self.backend.dispatch_bound([bound])  # its outputs, for the next
                continue
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
            call.local_size = chosen[kernel] = best[1]
            if progress is not None:
                progress.advance()
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
        """Program.unit -> program binary, one per driver program (none where the driver keeps programs)."""
        out: dict[str, bytes] = {}
        if self.backend.driver_caches_programs:
            return out
        for unit, program in self.units.items():
            try:
                out[unit] = self.backend.program_binary(program)
            except (DelegateError, NotImplementedError) as e:
                log.debug("no program binary for %s: %s", program, e)
        return out

    def allocate(self) -> None:
        backend, plan = self.backend, self.plan
        for n, fp32 in zip(plan.buffer_sizes, plan.buffer_fp32):
            self.buffers.append(backend.alloc(n, "fp32" if fp32 else self.precision))
        for key, rows in plan.consts.items():
            precision = plan.const_precision(key, self.precision)
            buf = self.const_buffers[key] = backend.alloc(rows.shape[0], precision)
            backend.upload(buf, rows if precision == "fp32" else fp16_saturated(rows))
        self.bind()

    def bind(self) -> None:
        self.calls = []
        for program, binds in zip(self.programs, self.binds):
            self.calls.append((program, [self._bound_buffer(b) for b in binds]))
        self.bound = self.backend.bind(self.calls)
        self.input_routes = {}
        self.output_routes = [self._output_route(t) for t in self.plan.outputs]

    def _bound_buffer(self, bind: Bind) -> Buffer:
        if bind[0] == "c":
            return self.const_buffers[bind[1]]
        return self.tensor_buffer(bind[1])

    def tensor_buffer(self, t: int) -> Buffer:
        return self.buffers[self.plan.buffer_of[self.plan.storage(t)]]

    def run(self, feeds: dict[int, np.ndarray], codes: dict[int, tuple[float, int]] | None = None,
            progress: Progress | None = None) -> dict[int, np.ndarray]:
        """Outputs (float32) from inputs: float arrays, or int8/uint8 codes for the tensors ``codes`` gives
        (scale, zero_point) of. With ``progress``, one dispatch at a time, each counted when it has run."""
        plan, backend, codes = self.plan, self.backend, codes or {}
        if backend.profile:
            return self._run_profiled(feeds, codes)
        if progress is None:
            inputs = [(self._input_route(t, codes.get(t), feeds[t].dtype), feeds[t]) for t in plan.inputs]
            return dict(zip(plan.outputs, backend.invoke(inputs, self.bound, self.output_routes)))
        self.write_inputs(feeds, codes)
        for bound in self.bound:
            backend.dispatch_bound([bound])
            backend.finish()
            progress.advance()
        return {t: self._download(t) for t in plan.outputs}

    def write_inputs(self, feeds: dict[int, np.ndarray], codes: dict[int, tuple[float, int]]) -> None:
        """Every input into its buffer (``run``'s inputs and codes), and nothing else: before dispatches timed one
        by one, which must read the inputs' values, not what later tensors left in a buffer the memory plan lent."""
        for t in self.plan.inputs:
            self._upload(t, feeds[t], codes.get(t))

    def _upload(self, t: int, feed: np.ndarray, quant: tuple[float, int] | None) -> None:
        """Input ``t`` into its buffer: as it is where it is stored dense, else through a conversion into PHWC4."""
        if t not in self.plan.dense:
            self.backend.to_device(feed, self.tensor_buffer(t), self.plan.tensors[t], quant)
            return
        if feed.size != math.prod(self.plan.tensors[t]):
            raise ValueError(f"an array of shape {feed.shape} does not fill a tensor of shape {self.plan.tensors[t]}")
        self.backend.upload(self.tensor_buffer(t), feed if quant is None else dequantize(feed, *quant))

    def _output_route(self, t: int) -> OutputRoute:
        source = self.plan.dense_source(t)
        if source is None:
            return self.backend.output_route(self.tensor_buffer(t), self.plan.tensors[t])
        return OutputRoute.dense_floats(self.plan.tensors[t], self.tensor_buffer(source))

    def _download(self, t: int) -> np.ndarray:
        """Output ``t`` as a dense float32 BHWC array, from PHWC4 or from the dense order it is stored in."""
        source = self.plan.dense_source(t)
        if source is None:
            return self.backend.from_device(self.tensor_buffer(t), self.plan.tensors[t])
        shape = self.plan.tensors[t]
        n = math.prod(shape)
        return self.backend.download(self.tensor_buffer(source), math.ceil(n / 4))[:n].reshape(shape)

    def _input_route(self, t: int, quant: tuple[float, int] | None, dtype: np.dtype) -> InputRoute:
        codes: Codes | None = (*quant, dtype) if quant is not None else None
        route = self.input_routes.get((t, codes))
        if route is None:
            if codes is not None and dtype not in (np.int8, np.uint8):
                raise ValueError(f"quantized codes are int8 or uint8, not {dtype}")
            tensor, shape = self.tensor_buffer(t), self.plan.tensors[t]
            route = (InputRoute.dense_floats(tensor, shape, codes) if t in self.plan.dense
                     else self.backend.input_route(tensor, shape, codes))
            self.input_routes[(t, codes)] = route
        return route

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
            self._upload(t, feeds[t], codes.get(t))
            collect((), start)
        for call, bound in zip(plan.kernels, self.bound):
            start = time.perf_counter()
            backend.dispatch_bound([bound])
            collect(call.nodes, start)
        outputs = {}
        for t in plan.outputs:
            start = time.perf_counter()
            outputs[t] = self._download(t)
            collect((), start)
        device_ok = sum(r[2] for r in raw) >= MIN_DEVICE_CLOCK * sum(r[3] for r in raw)
        self.last_timings = [KernelTiming(name, nodes, device_ns, host_ns, "device" if device_ok else "host")
                             for name, nodes, device_ns, host_ns in raw]
        return outputs

    def close(self) -> None:
        for buf in [*self.buffers, *self.const_buffers.values()]:
            self.backend.free(buf)
        self.buffers, self.const_buffers, self.calls, self.bound = [], {}, [], []
        self.input_routes, self.output_routes = {}, []


def _fits(local: tuple[int, int, int], info: DeviceInfo) -> bool:
    return math.prod(local) <= info["max_work_group_size"] and all(
        n <= d for n, d in zip(local, info["max_work_group_dims"]))


def _op_classes(graph: Graph, nodes: list[int]) -> dict[int, GpuOp]:
    ops: dict[int, GpuOp] = {}
    for n in nodes:
        op = get_op(graph.nodes[n].op)
        assert op is not None, f"{graph.nodes[n]}: the delegate took a node whose op is not registered"
        ops[n] = op
    return ops
