"""OpenCL backend (pyopencl): OpenCL C 1.2 kernels from the shared dialect, one in-order queue.

Here the device is PoCL on the CPU. What makes PoCL fast is the work-group size (base.choose_local_size:
PoCL vectorizes the x loop of a work group and runs one group per thread) and explicit FMA() in hot
loops; no math-relaxing flag is used, so results match the GL backend and the numpy references.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyopencl as cl

from ..errors import DelegateError
from ..phwc4 import BHWC, DENSE_RUN, dense_store_grid
from . import codegen
from .base import Backend, Buffer, DeviceInfo, Program, ProgramCache, conversion_spec, log, numbered
from .codegen import KernelSpec

T = TypeVar("T")

# -cl-fast-relaxed-math / -cl-mad-enable / -cl-denorms-are-zero are left out on purpose: they change
# results. Unsuffixed literals must still be written as 1.0f (PoCL has fp64, 1.0 would be a double).
# -w: PoCL's clang prints "N warnings generated." to the process's stderr for every program passing a
# float16 to FMA() ("changes the ABI" without AVX-512, harmless: it is inlined); errors still come back.
BUILD_OPTIONS = "-cl-std=CL1.2 -w"
# The fake-quant step of 8-bit tensors divides by the scale and rounds: OpenCL allows a float division 2.5 ulp
# off unless this is asked for (NVIDIA's is; PoCL's is exact anyway), which moved values at rounding ties by a
# step (int8 CONCATENATION across scales on an H100: 2.4% of the values).
EXACT_DIVISION = "-cl-fp32-correctly-rounded-divide-sqrt"
# fp16 storage's scalar loads through the prelude's own conversion, inlined (kernels/opencl/prelude.inc.cl): PoCL calls
# its library for each vload_half; a GPU's compiler turns that builtin into one instruction and keeps it
INLINE_HALF = "-DGD_INLINE_HALF=1"

_lock = threading.Lock()
_context: tuple[cl.Context, cl.Device] | None = None
_context_error: DelegateError | None = None
# PoCL's single-threaded "basic" CPU device, beside its threaded "pthread" one (POCL_DEVICES, set before the
# platform loads unless the process chose its devices itself): basic runs a kernel in the thread that waits for
# it, pthread hands each to its worker threads and wakes the waiter when they are done, some 5-10 us a kernel on
# a 2-core host. A plan of little work runs faster there (OpenCLBackend.for_work).
POCL_DEVICES = "pthread basic"
_small: tuple[cl.Context, cl.Device] | None = None
# Measured on a 2-core AVX2 host (bench/driver_settings.py POCL_DEVICES=basic, interleaved): basic took 0.46-0.55x
# pthread's time for models of 1-3 M multiply-adds (10-12 kernels), 0.84x for a ViT block (5.8 M, 20 kernels),
# the same for 27-43 M (MobileNetV3Small, a text transformer, 40-60 kernels), 1.24x for 200 M and 1.43x for
# MobileNetV2 (154 M). Where pthread's P threads save (1 - 1/P) of the work's time for a fixed cost per kernel, the
# two break even at work proportional to P / (P - 1): from this threshold at 2 cores down to half of it at many;
# a single core gains nothing from pthread.
SMALL_WORK_MACS_2_CORES = 16e6
# "0": every plan on the device open_device() picks; "1": every plan on the small device where there is one
SMALL_DEVICE_SWITCH = "GPU_DELEGATE_SMALL_DEVICE"
# Built programs, shared by every OpenCLBackend (each makes its own kernel objects: a kernel's arguments are
# set per call). Each build parses the program into PoCL's LLVM context, whose metadata LLVM never frees: a
# delegate made again for the same model leaked ~100 KB and spent most of its start building programs the
# process had already built (issue 18, item 11).
PROGRAMS: ProgramCache[cl.Program] = ProgramCache()
# pyopencl's typed transfer calls under enqueue_copy
_enqueue_write_buffer: Callable[..., Any] = cl._cl._enqueue_write_buffer
_enqueue_read_buffer: Callable[..., Any] = cl._cl._enqueue_read_buffer
_COMPLETE = cl.command_execution_status.COMPLETE
# An invoke's last read on a CPU device polls its event for up to this long before it blocks, where the last
# wait for the same output was this short: PoCL wakes a thread blocked on an event 30-80 us after the event
# (this host), the larger part of a small model's invoke (bench/speed.py: conv1d_audio int8 0.28 -> 0.24 ms,
# the 2-in/3-out net 0.20 -> 0.17, the ViT block 0.43 -> 0.41). Polling through a longer wait would take a core
# from PoCL's threads on a host of few cores (MobileNetV3Small polling throughout: 1.10x the time).
SPIN_WAIT_S = 300e-6


def _scalars(values: tuple[int | float, ...]) -> list[np.int32 | np.float32]:
    """A launch's scalar arguments as OpenCL ints and floats (pyopencl sets a scalar argument from a sized numpy
    value)."""
    return [np.float32(v) if isinstance(v, float) else np.int32(v) for v in values]


def _host_has_int8_dot() -> bool:
    """Whether this x86 host has integer dot products that PoCL, compiling for the host's CPU, emits from
    conv2d_int8.cl's builtins: 4-byte ones (AVX512-VNNI, AVX-VNNI: vpdpbusd) or AVX2's pairs of 16-bit products
    (vpmaddwd). Elsewhere its portable sum of shifted bytes runs, no faster than the float convolutions."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return bool({"avx512_vnni", "avx_vnni", "avx2"} & set(flags))


def open_device() -> tuple[cl.Context, cl.Device]:
    """The process's OpenCL context and device, created once: a GPU if there is one, else the first device that
    is not PoCL's basic one."""
    global _context, _context_error
    with _lock:
        if _context_error is not None:
            raise _context_error
        if _context is None:
            try:
                _context = _make_context()
            except DelegateError as e:
                _context_error = e
                raise
        return _context


def open_small_device() -> tuple[cl.Context, cl.Device] | None:
    """A context on PoCL's basic device, where open_device() chose PoCL's pthread one (else None), created once."""
    global _small
    _, device = open_device()
    if not _is_pocl_cpu(device) or _is_basic(device):
        return None
    with _lock:
        if _small is None:
            basic = next((d for d in device.platform.get_devices() if _is_basic(d)), None)
            if basic is None:
                return None
            try:
                _small = cl.Context([basic]), basic
            except cl.Error:
                return None
        return _small


def _is_pocl_cpu(device: cl.Device) -> bool:
    return device.platform.name == "Portable Computing Language" and bool(device.type & cl.device_type.CPU)


def _is_basic(device: cl.Device) -> bool:
    return device.name.startswith("basic")


def _make_context() -> tuple[cl.Context, cl.Device]:
    # read by PoCL when the ICD loader first loads it; without effect where something in the process already asked
    # for platforms, or on other drivers
    os.environ.setdefault("POCL_DEVICES", POCL_DEVICES)
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        raise DelegateError(f"OpenCL: no OpenCL platform ({e})") from e
    devices = []
    for p in platforms:
        try:
            devices += p.get_devices()
        except cl.Error:
            continue  # a platform without devices answers with an error
    if not devices:
        raise DelegateError("OpenCL: no OpenCL platform with a device" if platforms else "OpenCL: no OpenCL platform")
    devices.sort(key=lambda d: (not d.type & cl.device_type.GPU, _is_basic(d) and _is_pocl_cpu(d)))
    device = devices[0]
    try:
        return cl.Context([device]), device
    except cl.Error as e:
        raise DelegateError(f"OpenCL: cannot create a context on {device.name.strip()}: {e}") from e


class OpenCLBackend(Backend):
    name = "cl"
    # a partition's kernels build as one program (codegen.opencl_bundle): measured on PoCL 3.0, MobileNetV2's
    # 33 kernels take 6.4 s as 33 builds and 1.5 s as one. The bounds keep a program well inside what vendor
    # compilers are used to (TFLite's own programs are one kernel each, some of them 50 kB).
    bundle_kernels = 64
    bundle_chars = 1 << 20

    @property
    def driver_caches_programs(self) -> bool:  # type: ignore[override]
        # PoCL keeps every program it builds, and each kernel's code per work-group size, in its kernel cache
        # (on unless POCL_KERNEL_CACHE=0): a second build of the same text is a lookup. Its program binaries
        # are costly instead: asking for them compiles every kernel again for a generic work-group size
        # (5 s for MobileNetV2, as long as the first launches), doubling a first start.
        return self.device.platform.name == "Portable Computing Language" and \
            os.environ.get("POCL_KERNEL_CACHE", "1") != "0"

    @property
    def first_launch_disk_cache(self) -> bool:  # type: ignore[override]
        # PoCL compiles a work-group function per kernel and size at its first launch, into the kernel cache
        return self.driver_caches_programs

    @property
    def loaded_kernels(self) -> int | None:  # type: ignore[override]
        # PoCL keeps the machine code of 128 kernels (per work-group size) loaded: 129 dispatched in turn took
        # ~90 us more each than 128 (it loads one from its kernel cache every time); DenseNet121's 190 did
        return 128 if self.device.platform.name == "Portable Computing Language" else None

    def __init__(self, profile: bool = False, device: tuple[cl.Context, cl.Device] | None = None) -> None:
        super().__init__(profile)
        self.context, self.device = device or open_device()
        self._small: OpenCLBackend | None = None  # for_work's, made at its first use
        self._handed_a_plan = False  # by for_work (a flag, not a list: the backend holding itself would be a cycle)
        props = cl.command_queue_properties.PROFILING_ENABLE if profile else 0
        # pyopencl's stub types the properties as its enum, whose members are plain ints at run time (no zero)
        self.queue = cl.CommandQueue(self.context, self.device, properties=props)  # type: ignore[arg-type]
        # pyopencl sets a kernel's arguments and enqueues it in two calls: one thread at a time
        self._mutex = threading.RLock()
        self._transfers: list[cl.Event] = []  # of _write_async and _read_async, until the invoke's wait
        self._last_wait: dict[int, float] = {}  # output buffer -> seconds the last invoke waited for it
        self._info = self._describe()
        exact = bool(self.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)
        self._options = f"{BUILD_OPTIONS} {EXACT_DIVISION}" if exact else BUILD_OPTIONS
        if self._info["device_type"] == "cpu":
            self._options += f" {INLINE_HALF}"

    def for_work(self, macs: float) -> Backend:
        chosen = self._choose(macs)
        chosen._handed_a_plan = True
        return chosen

    def backends_in_use(self) -> list[Backend]:
        return [b for b in (self, self._small) if b is not None and b._handed_a_plan] or [self]

    def _choose(self, macs: float) -> OpenCLBackend:
        if self.device is not open_device()[1] or os.environ.get(SMALL_DEVICE_SWITCH) == "0":
            return self
        cores = self._info["compute_units"]
        threshold = SMALL_WORK_MACS_2_CORES * cores / (2 * (cores - 1)) if cores > 1 else math.inf
        if macs > threshold and os.environ.get(SMALL_DEVICE_SWITCH) != "1":
            return self
        with self._mutex:  # one sibling, whichever threads prepare plans at once
            if self._small is None:
                small = open_small_device()
                if small is None:
                    return self
                self._small = OpenCLBackend(self.profile, small)
            return self._small

    def close(self) -> None:
        if self._small is not None:
            self._small.close()
        super().close()

    @property
    def shares_worker_builds(self) -> bool:  # type: ignore[override]
        # a compile worker opens the main device (compile_worker.py), whose kernel cache the small one does not read
        return self.device is open_device()[1]

    def _on_device(self, fn: Callable[..., T], *args: Any) -> T:
        with self._mutex:
            return fn(*args)

    def _describe(self) -> DeviceInfo:
        d = self.device
        cpu = bool(d.type & cl.device_type.CPU)
        return {
            "api": "OpenCL", "api_version": d.version, "name": d.name.strip(), "vendor": d.vendor.strip(),
            "driver_version": d.driver_version, "platform": f"{d.platform.name} {d.platform.version}",
            "device_type": "cpu" if cpu else "gpu" if d.type & cl.device_type.GPU else "other",
            "compute_units": int(d.max_compute_units),
            "max_work_group_size": int(d.max_work_group_size),
            "max_work_group_dims": tuple(int(s) for s in d.max_work_item_sizes[:3]),
            # measured on PoCL: 32-wide groups run elementwise kernels 4x faster than 1-wide ones
            "preferred_work_group_size": 32 if cpu else 64,
            "max_dispatch_groups": (2**31 - 1,) * 3,
            "max_buffers": int(d.max_parameter_size) // 8,
            "max_buffer_bytes": int(d.max_mem_alloc_size),
            "has_fp16": "cl_khr_fp16" in d.extensions.split(),
            "vector_width": int(d.native_vector_width_float),
            "int8_dot": cpu and "Portable Computing Language" in d.platform.name and _host_has_int8_dot(),
        }

    def device_info(self) -> DeviceInfo:
        return self._info.copy()

    @property
    def build_options(self) -> str:
        return self._options

    def source(self, spec: KernelSpec, local_size: tuple[int, int, int]) -> str:
        return codegen.opencl_source(spec)

    def launch_values(self, spec: KernelSpec) -> tuple[int | float, ...]:
        # a shape-generic kernel's grid and sizes are int arguments (codegen.runtime_values): layers of other
        # sizes share its program, and PoCL compiles it once per work-group size instead of once per layer (so
        # do the post-ops' constants of a crowded plan's kernels, floats)
        return tuple(v for _, v in codegen.runtime_values(spec))

    def _build(self, spec: KernelSpec, source: str, binary: bytes | None) -> Any:
        (handle,) = self._build_program(source, [spec.name], binary, f"kernel {spec.name}")
        return handle

    def _bundle_source(self, kernels: list[tuple[KernelSpec, str]]) -> str | None:
        return codegen.opencl_bundle(kernels)

    def _build_bundle(self, source: str, entries: list[str], binary: bytes | None) -> list[Any]:
        return self._build_program(source, entries, binary, f"a program of {len(entries)} kernels")

    def _build_program(self, source: str, entries: list[str], binary: bytes | None, what: str) -> list[Any]:
        """Build ``source`` (or load ``binary``, which Backend._payload checked is the program of ``source``),
        unless this process built it for this context and device already: (program, kernel) per entry."""
        key = (self.context, self.device, hashlib.sha256(source.encode()).digest(), self._options)
        program = PROGRAMS.get(key, len(source), lambda: self._build_driver_program(source, binary, what))
        try:
            return [(program, cl.Kernel(program, entry)) for entry in entries]
        except cl.Error as e:
            raise DelegateError(f"OpenCL: {what}: {e}") from e

    def _build_driver_program(self, source: str, binary: bytes | None, what: str) -> cl.Program:
        # pyopencl's Program.build adds "-I <its headers' folder>" to every build, a path inside the virtual
        # environment, and PoCL keys its kernel cache on the options: every new environment compiled every kernel
        # again (a fresh clone's tests/test_backends.py: 61 s; 7.5 s in another new one, building as here). The
        # driver's program object builds with our options alone; pyopencl's public path where it has none.
        # pyopencl warns (CompilerWarning) whenever a build log is not empty: NVIDIA's compiler (580, H200) wrote one
        # for every program of a clean build under -w, a warning at each first start. The log goes to the debug log.
        driver_program = getattr(getattr(cl, "_cl", None), "_Program", None)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                if driver_program is None:
                    built = (cl.Program(self.context, source) if binary is None else
                             cl.Program(self.context, [self.device], [binary])).build(self._options)
                else:
                    built = driver_program(self.context, source) if binary is None else \
                        driver_program(self.context, [self.device], [binary])
                    built.build(self._options.encode(), [self.device])
            build_log = str(built.get_build_info(self.device, cl.program_build_info.LOG) or "").strip()
            if build_log:
                log.debug("OpenCL: %s: the compiler's log:\n%s", what, build_log)
        except cl.Error as e:
            if binary is not None:
                raise DelegateError(f"OpenCL: {what}: the program binary does not load: {e}") from e
            raise DelegateError(f"OpenCL: {what} failed to compile:\n{e}\n"  # the error holds the build log
                                f"--- source ---\n{numbered(source)}") from e
        return built if driver_program is None else cl.Program(built)

    def _binary(self, program: Program) -> bytes:
        return bytes(program.handle[0].binaries[0])

    def _alloc(self, nbytes: int) -> Any:
        try:
            buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
            cl.enqueue_fill_buffer(self.queue, buf, np.zeros(1, np.uint8), 0, nbytes)
        except cl.Error as e:
            raise DelegateError(f"OpenCL: cannot allocate {nbytes} bytes: {e}") from e
        return buf

    def _free(self, handle: Any) -> None:
        handle.release()

    def _write(self, handle: Any, data: np.ndarray) -> None:
        if data.nbytes:
            cl.enqueue_copy(self.queue, handle, data, is_blocking=True)

    def _read(self, handle: Any, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            cl.enqueue_copy(self.queue, out, handle, is_blocking=True)
        return out

    @staticmethod
    def _global_size(program: Program) -> tuple[int, ...]:
        # OpenCL 1.2 wants the global size to be a multiple of the local size; the body's bounds check
        # skips the extra items
        return tuple(-(-g // lsz) * lsz for g, lsz in zip(program.spec.grid, program.local_size))

    def _launch(self, program: Program, handles: list[Any]) -> Any:
        return program.handle[1](self.queue, self._global_size(program), program.local_size, *handles,
                                 *_scalars(program.values))

    def _bind(self, program: Program, handles: list[Any]) -> Any:
        # a kernel object of its own per call, its arguments set once: an enqueue is then one driver call
        kernel = cl.Kernel(program.handle[0], program.entry)
        kernel.set_args(*handles, *_scalars(program.values))
        return program.name, kernel, self._global_size(program), program.local_size

    def _launch_bound(self, call: Any) -> Any:
        _, kernel, size, local = call
        return cl.enqueue_nd_range_kernel(self.queue, kernel, size, local)

    def _bound_name(self, call: Any) -> str:
        return call[0]

    def _conversion_spec(self, kernel: str, shape: BHWC, precision: str, raw_precision: str) -> KernelSpec:
        spec = conversion_spec(kernel, shape, precision, raw_precision)
        if kernel != "convert_from_phwc4" or raw_precision != "fp32" or self._info["device_type"] != "cpu":
            return spec
        # kernels/opencl/convert_from_phwc4.cl: a run of pixels a work item, no lane found at run time (a (6000, 25)
        # output 177 -> 42 us); whole slices too (interleaved, basic / pthread: (40, 40, 72) 156 -> 84 / 187 -> 108
        # us, (112, 112, 32) 402 -> 278 / 348 -> 248, (7, 7, 1280) 84 -> 49 / 108 -> 95)
        helpers, body = codegen.load_kernel("convert_from_phwc4", "opencl")
        return dataclasses.replace(spec, body=body, helpers=helpers, grid=dense_store_grid(shape),
                                   defines={"RUN": DENSE_RUN})

    def _codes_spec(self, shape: BHWC, precision: str, scale: float, zero_point: int, dtype: np.dtype) -> KernelSpec:
        # kernels/opencl/convert_codes_to_phwc4.cl: the codes as chars, dequantized on the device
        spec = conversion_spec("convert_to_phwc4", shape, precision, "fp32")
        return dataclasses.replace(spec, name="convert_codes_to_phwc4",
                                   body=codegen.load_kernel("convert_codes_to_phwc4", "opencl")[1],
                                   defines={"SCALE": scale, "ZERO_POINT": zero_point,
                                            "CODE": "char" if dtype == np.int8 else "uchar"})

    def _convert_in_codes(self, codes: np.ndarray, tensor: Buffer, shape: BHWC, scale: float,
                          zero_point: int) -> None:
        # the codes go up as raw bytes (a float4 staging buffer of a quarter of the vec4s) and
        # kernels/opencl/convert_codes_to_phwc4.cl reads them as chars
        n = codes.size
        raw = self._staging_buffer(math.ceil(n / 16), "fp32")
        self._write(raw.handle, np.ascontiguousarray(codes).reshape(-1))
        program = self._codes_conversion(shape, tensor.precision, scale, zero_point, codes.dtype)
        self.dispatch_all([(program, [raw, tensor])])

    _codes_on_device = True

    def _codes_conversion(self, shape: BHWC, precision: str, scale: float, zero_point: int,
                          dtype: np.dtype) -> Program:
        key = ("convert_codes_to_phwc4", shape, precision, np.dtype(dtype).str, scale, zero_point)
        if key not in self._convert:
            self._convert[key] = self.compile(self._codes_spec(shape, precision, scale, zero_point, dtype))
        return self._convert[key]

    # Backend.invoke's transfers: enqueued without waiting (PoCL spends ~10 us on each blocking one), the
    # queue drained once at the end. pyopencl's enqueue_copy dispatches on its arguments' types in Python
    # first (~5 us a call); these are the calls it ends in. Their events are kept until the wait: pyopencl's
    # event of a transfer from or to host memory waits for the transfer when it is collected, which would
    # make each call a blocking one.
    def _write_async(self, handle: Any, data: np.ndarray) -> None:
        if data.nbytes:
            self._transfers.append(_enqueue_write_buffer(self.queue, handle, data, is_blocking=False))

    def _read_async(self, handle: Any, out: np.ndarray) -> None:
        if out.nbytes:
            self._transfers.append(_enqueue_read_buffer(self.queue, handle, out, is_blocking=False))

    def _settle(self) -> None:
        self.queue.finish()
        self._transfers.clear()

    def _read_last(self, handle: Any, out: np.ndarray) -> None:
        # a blocking read instead of a non-blocking one and a finish: the same on PoCL; on NVIDIA's OpenCL
        # (H100) the finish after a non-blocking read into host memory cost MobileNetV2 2-4% (A/B, one process)
        if not out.nbytes:
            self._settle()
            return
        key, start = handle.int_ptr, time.perf_counter()
        if self._info["device_type"] == "cpu" and self._last_wait.get(key, 0.0) < SPIN_WAIT_S:  # poll: SPIN_WAIT_S
            event = _enqueue_read_buffer(self.queue, handle, out, is_blocking=False)
            self.queue.flush()
            deadline = start + SPIN_WAIT_S
            while event.command_execution_status != _COMPLETE and time.perf_counter() < deadline:
                pass
            event.wait()
        else:
            _enqueue_read_buffer(self.queue, handle, out, is_blocking=True)
        self._last_wait[key] = time.perf_counter() - start
        self._transfers.clear()

    def _elapsed_ns(self, token: Any) -> int:
        return int(token.profile.end - token.profile.start)

    def _finish(self) -> None:
        self.queue.finish()
