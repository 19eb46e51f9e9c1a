"""What the OpenCL and OpenGL backends share: buffers, programs, the work-group rule, program-binary
envelopes, BHWC <-> PHWC4 conversion on the device, and the public methods built on a handful of
per-API primitives (``_build``, ``_alloc``, ``_write``, ``_read``, ``_launch``, ...)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import threading
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar

import numpy as np

from .. import phwc4
from ..cpu.quant import dequantize
from ..errors import DelegateError
from ..phwc4 import BHWC, from_rows, vec4_count
from . import codegen
from .codegen import Arg, KernelSpec

T = TypeVar("T")
H = TypeVar("H")
log = logging.getLogger("gpu_delegate")
# to_device, from_device and the invoke's routes (Backend.input_route, output_route) reorder tensors of at most this
# many vec4 on the host instead of in a conversion kernel
HOST_REORDER_VEC4 = 4096
_STORAGE: dict[str, np.dtype] = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16)}
# quantized codes as to_device takes them: scale, zero point, int8 or uint8
Codes = tuple[float, int, np.dtype]
# program_binary() output: magic, sha256 of (source, build options, device fingerprint), sha256 of the
# payload, payload. A driver never sees a payload that fails either check.
_BINARY_MAGIC = b"GDPB\x01"


class _ApiDeviceInfo(TypedDict, total=False):
    platform: str  # OpenCL: the platform's name and version
    program_binary_formats: int  # OpenGL: GL_NUM_PROGRAM_BINARY_FORMATS (0: no program binaries)


class DeviceInfo(_ApiDeviceInfo):
    """What ``Backend.device_info()`` says about the device: JSON-serializable, it feeds cache fingerprints."""

    api: str  # "OpenCL" or "OpenGL"
    api_version: str
    name: str
    vendor: str
    driver_version: str
    device_type: str  # "cpu", "gpu" or "other"
    compute_units: int
    max_work_group_size: int
    max_work_group_dims: tuple[int, ...]  # per dimension, x y z
    preferred_work_group_size: int
    max_dispatch_groups: tuple[int, ...]  # work groups per dispatch, per dimension
    max_buffers: int  # buffers one kernel may bind
    max_buffer_bytes: int
    has_fp16: bool  # native half arithmetic (fp16 *storage* works everywhere)
    vector_width: int  # floats in one of the device's native vectors (16 on AVX-512 PoCL, 8 on AVX2); 4: unknown
    int8_dot: bool  # integer dot products its compiler emits (x86 VNNI or AVX2 under PoCL): conv2d_int8.cl pays


@dataclass(eq=False)
class Buffer:
    """A device buffer of ``n_vec4`` 4-float vectors stored as float32 or float16."""

    handle: Any
    n_vec4: int
    precision: str

    @property
    def nbytes(self) -> int:
        return self.n_vec4 * 4 * _STORAGE[self.precision].itemsize


@dataclass(eq=False)
class InputRoute:
    """How ``Backend.invoke`` writes one input (Backend.input_route)."""

    tensor: Buffer
    shape: BHWC
    codes: Codes | None  # the input comes as these int8/uint8 codes
    rows: np.ndarray | None  # host PHWC4 rows of the tensor's storage type, written straight into it
    raw: Buffer | None  # else the staging buffer that ``convert`` reads
    convert: list[Any]  # Backend.bind of the conversion into ``tensor``
    raw_codes: bool = False  # ``convert`` dequantizes the codes, which go up as they are
    lanes: np.ndarray | None = None  # ``rows`` as (pixel, channel) where its pixels are in the input's order

    @classmethod
    def dense_floats(cls, tensor: Buffer, shape: BHWC, codes: Codes | None = None) -> InputRoute:
        """The route of an input the plan stores as float32 in the dense BHWC order (lowering/dense_inputs.py): the
        array is written as it is (codes dequantized on the host first)."""
        return cls(tensor, shape, codes, None, None, [])

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(eq=False)
class OutputRoute:
    """How ``Backend.invoke`` reads one output (Backend.output_route)."""

    shape: BHWC
    source: Buffer  # what is read: the PHWC4 tensor itself, or the staging buffer ``convert`` writes
    count: int  # values read from it
    dtype: np.dtype
    convert: list[Any]  # Backend.bind of the conversion out of the tensor; none when the host reorders
    pixels: tuple[int, int] | None = None  # pixels_in_order of the shape, where the host reorders
    dense: bool = False  # ``source`` holds the values in the dense order already (no conversion)

    @classmethod
    def dense_floats(cls, shape: BHWC, tensor: Buffer) -> OutputRoute:
        """The route of an output the plan stores as float32 in the dense BHWC order (lowering/dense_outputs.py)."""
        return cls(shape, tensor, math.prod(shape), _STORAGE["fp32"], [], dense=True)

    def finish(self, values: np.ndarray) -> np.ndarray:
        """The dense float32 BHWC array from the values read."""
        if self.convert or self.dense:
            return values.reshape(self.shape)
        if self.pixels is not None:  # the padding channels dropped: no copy where there are none
            rows, per_row = self.pixels
            lanes = values.reshape(rows, -1)[:, :self.shape[3] * per_row]
            return np.ascontiguousarray(lanes, np.float32).reshape(self.shape)
        return np.ascontiguousarray(from_rows(values, self.shape), np.float32)


class Program:
    """A compiled kernel. ``program(buffers)`` dispatches it over its spec's grid, buffer i bound to
    ``spec.args[i]``."""

    def __init__(self, backend: Backend, spec: KernelSpec, source: str, local_size: tuple[int, int, int],
                 handle: Any, key: bytes, entry: str | None = None, values: tuple[int | float, ...] = ()) -> None:
        # weak: the backend holds its programs, and a cycle would keep a dropped backend's queue, programs
        # and buffers alive until the garbage collector happens to run
        self._backend = weakref.ref(backend)
        self.spec = spec
        self.name = spec.name
        self.source = source
        self.local_size = local_size
        self.handle = handle
        # the driver program this kernel lives in, which may hold other kernels too (Backend.compile_all):
        # its binary's identity, and the kernel's function name inside it
        self.key = key
        self.entry = entry or spec.name
        # the scalar arguments that follow the buffers at each launch (Backend.launch_values): a generic kernel's
        # sizes or post-op constants, where one driver program serves several layers
        self.values = values

    @property
    def unit(self) -> str:
        """The name of the driver program holding this kernel (hex): programs of one unit share one binary."""
        return self.key.hex()

    @property
    def backend(self) -> Backend:
        backend = self._backend()
        if backend is None:
            raise DelegateError(f"program {self.name}: its backend is gone")
        return backend

    def __call__(self, buffers: list[Buffer]) -> None:
        self.backend.dispatch_all([(self, buffers)])

    def __repr__(self) -> str:
        backend = self._backend()
        return f"<{backend.name if backend else '?'} program {self.name} grid={self.spec.grid} local={self.local_size}>"


def choose_local_size(grid: tuple[int, int, int], info: DeviceInfo) -> tuple[int, int, int]:
    """The work-group size for ``grid`` on a device described by ``info`` (Backend.device_info()).

    Powers of two filled x first (consecutive x share weights and vectorize: PoCL turns a work group's
    x loop into SIMD lanes, GPUs coalesce it), then y, then z, up to the device's preferred group size,
    without exceeding a dimension of the grid by more than its next power of two. Then, while there are
    fewer groups than twice the compute units, groups are halved (z, y, then x) so every core gets work.
    """
    budget = min(info["preferred_work_group_size"], info["max_work_group_size"])
    dims = info["max_work_group_dims"]
    local = [1, 1, 1]
    for d in range(3):
        size = 1
        while size * 2 <= budget and size < grid[d] and size * 2 <= dims[d]:
            size *= 2
        local[d] = size
        budget //= size
    min_groups = 2 * info.get("compute_units", 1)

    def groups() -> int:
        return math.prod(math.ceil(g / lsz) for g, lsz in zip(grid, local))

    for d in (2, 1, 0):
        while local[d] > 1 and groups() < min_groups:
            local[d] //= 2
    return local[0], local[1], local[2]


TUNING_SHAPES = ((1, 1, 1), (4, 1, 1), (16, 1, 1), (64, 1, 1), (8, 8, 1), (4, 4, 4))


def local_size_candidates(grid: tuple[int, int, int], info: DeviceInfo, limit: int | None = None
                          ) -> list[tuple[int, int, int]]:
    """At most ``limit`` work-group sizes worth timing for ``grid`` (the rule's choice first): a few 1-D,
    2-D and 3-D shapes within the device's limits and no wider than twice the grid along any dimension."""
    out = [choose_local_size(grid, info)]
    dims = info["max_work_group_dims"]
    for shape in TUNING_SHAPES:
        if math.prod(shape) > info["max_work_group_size"] or shape in out:
            continue
        if any(n > d or (n > 1 and n >= 2 * g) for n, d, g in zip(shape, dims, grid)):
            continue
        out.append(shape)
    return out[:limit]


def numbered(source: str) -> str:
    """Program text with line numbers, for compiler logs that cite them."""
    return "\n".join(f"{i:4d}  {line}" for i, line in enumerate(source.splitlines(), 1))


# What identifies a device and its compiler: the facts a program binary and a plan depend on, and that stay put
# for as long as the device and driver do. Limits are left out: they follow from these, and some drift (PoCL
# derives max_mem_alloc_size from the memory free when the process starts), so keying them made one model on
# one device write a new cache file, each a cold start, whenever free memory moved.
STABLE_FACTS = ("api", "api_version", "name", "vendor", "driver_version", "platform", "device_type", "has_fp16",
                "program_binary_formats", "vector_width", "int8_dot")


def device_fingerprint(info: DeviceInfo) -> str:
    """A hash of the stable facts of a device description (``STABLE_FACTS``): changes with the device, its
    driver and API version, never with a limit read at run time."""
    facts = {k: info[k] for k in STABLE_FACTS if k in info}  # type: ignore[literal-required]
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


# Characters of program text whose programs a ProgramCache keeps when no backend instance holds them any more.
# Measured on PoCL 3.0: a program kept costs ~25 bytes of memory per character of its text (MobileNetV2's
# 276k-character program: 7 MB), and each rebuild of one leaks ~9 (LLVM never frees the metadata of a module it
# parses: 2.5 MB for MobileNetV2, 300 KB for a 49k-character one). One bundle's worth (bundle_chars) covers an
# app or a test suite that drops an interpreter and makes another of the same model, the churn that leaked,
# without holding every program a long-lived process ever built.
KEPT_PROGRAM_CHARS = 1 << 20


class ProgramCache(Generic[H]):
    """Driver programs built in this process, shared by every backend instance: a second delegate (or a
    delegate made again) asks the driver for nothing it built before. A key must name everything the program
    depends on: the context and device it was built for (the objects, not a fingerprint: two identical GPUs
    are two devices), its text and its build options.

    A program stays while anyone holds it (weakly referenced here), and the most recently used ones stay
    for up to ``kept_chars`` characters of text after that (the newest always). Thread safe: a program asked
    for by several threads at once is built by one of them while the others wait; a build that fails is
    not remembered (each caller that asks again builds it, and gets the driver's own error)."""

    def __init__(self, kept_chars: int = KEPT_PROGRAM_CHARS) -> None:
        self.kept_chars = kept_chars
        self._lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()
        self._kept: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()  # key -> (program, characters)
        self._chars = 0
        self._building: dict[Hashable, threading.Event] = {}

    def get(self, key: Hashable, chars: int, build: Callable[[], H]) -> H:
        """The program of ``key``, from ``build()`` (of ``chars`` characters of text) unless it is here."""
        while True:
            with self._lock:
                program = self._live.get(key)
                if program is not None:
                    self._keep(key, program, chars)
                    return program
                pending = self._building.get(key)
                if pending is None:
                    done = self._building[key] = threading.Event()
                    break
            pending.wait()  # then the program is here, or the build failed and this caller tries it
        try:
            program = build()
        except BaseException:
            with self._lock:
                del self._building[key]
            done.set()
            raise
        with self._lock:
            self._live[key] = program
            self._keep(key, program, chars)
            del self._building[key]
        done.set()
        return program

    def _keep(self, key: Hashable, program: Any, chars: int) -> None:
        """Mark ``key`` used last (under the lock), dropping the least recently used beyond ``kept_chars``."""
        old = self._kept.pop(key, None)
        if old is not None:
            self._chars -= old[1]
        self._kept[key] = (program, chars)
        self._chars += chars
        while self._chars > self.kept_chars and len(self._kept) > 1:
            _, (_, dropped) = self._kept.popitem(last=False)
            self._chars -= dropped


_instances: weakref.WeakSet[Backend] = weakref.WeakSet()


def live_backends(name: str | None = None) -> int:
    """Backend instances (each with its queue, programs and buffers) alive in this process."""
    return sum(1 for b in list(_instances) if name is None or b.name == name)


def live_buffers(name: str | None = None) -> int:
    """Device buffers allocated and not yet freed, over every live backend instance (of ``name``):
    what leak checks count."""
    return sum(b.live_buffers for b in list(_instances) if name is None or b.name == name)


class Backend(ABC):
    """One GPU API on one device. Programs, buffers and conversion kernels belong to the instance;
    the API context underneath is shared by every instance in the process."""

    name: str = ""
    # work-group sizes tried per kernel when tuning (None: every candidate); an API that compiles the size
    # into the program pays a compile for each
    tuning_candidates: int | None = None
    # kernels one driver program may hold (compile_all), and how much text: an API whose programs hold one
    # kernel each (a GL program links one compute shader) keeps 1
    bundle_kernels: int = 1
    bundle_chars: int = 0

    def __init__(self, profile: bool = False) -> None:
        self.profile = profile
        self._live = 0
        _instances.add(self)
        self._timings: list[tuple[str, Any]] = []
        # (source digest, kernel name, work-group size) -> program
        self._programs: dict[tuple[bytes, str, tuple[int, int, int], tuple[int | float, ...]], Program] = {}
        # source digest -> the driver's compiled kernel, the key of the driver program holding it, its entry
        # name there: another work-group size of the same source needs no build where the size is a launch
        # parameter (OpenCL)
        self._handles: dict[bytes, tuple[Any, bytes, str]] = {}
        # (conversion kernel, shape, precisions and what else its source depends on) -> program
        self._convert: dict[tuple[object, ...], Program] = {}
        self._staging: dict[tuple[int, str], Buffer] = {}

    # -- per-API primitives ------------------------------------------------------------------------------

    @abstractmethod
    def device_info(self) -> DeviceInfo:
        """The device, its driver and its limits (a new dict each call)."""

    @abstractmethod
    def source(self, spec: KernelSpec, local_size: tuple[int, int, int]) -> str:
        """The program text this backend compiles for ``spec``."""

    @abstractmethod
    def _build(self, spec: KernelSpec, source: str, binary: bytes | None) -> Any:
        """Compile ``source`` (or load ``binary``, its payload from ``_binary``); raise DelegateError."""

    def _bundle_source(self, kernels: list[tuple[KernelSpec, str]]) -> str | None:
        """One program text holding every (spec, entry name) of ``kernels``, or None where they cannot
        share one; only for an API whose ``bundle_kernels`` exceeds 1."""
        raise NotImplementedError(f"{self.name}: a program holds one kernel")

    def _build_bundle(self, source: str, entries: list[str], binary: bytes | None) -> list[Any]:
        """Compile ``source`` (or load ``binary``) once: one handle per entry; raise DelegateError."""
        raise NotImplementedError(f"{self.name}: a program holds one kernel")

    @abstractmethod
    def _binary(self, program: Program) -> bytes:
        """The driver's binary for a compiled program."""

    @abstractmethod
    def _alloc(self, nbytes: int) -> Any: ...

    @abstractmethod
    def _free(self, handle: Any) -> None: ...

    @abstractmethod
    def _write(self, handle: Any, data: np.ndarray) -> None:
        """Copy a contiguous array to the buffer's start; the array may be reused once this returns."""

    @abstractmethod
    def _read(self, handle: Any, nbytes: int) -> np.ndarray:
        """A new uint8 array with the buffer's first ``nbytes``, after every dispatch enqueued before."""

    @abstractmethod
    def _launch(self, program: Program, handles: list[Any]) -> Any:
        """Enqueue one dispatch; with profiling on, return what ``_elapsed_ns`` turns into nanoseconds."""

    @abstractmethod
    def _elapsed_ns(self, token: Any) -> int: ...

    @abstractmethod
    def _finish(self) -> None: ...

    def _on_device(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` where the API may be called (GL: its own thread). Every public method goes through it."""
        return fn(*args)

    # -- public API --------------------------------------------------------------------------------------

    @property
    def build_options(self) -> str:
        """Compiler options (part of a binary's identity); empty where the API has none."""
        return ""

    def default_local_size(self, grid: tuple[int, int, int]) -> tuple[int, int, int]:
        """The work-group size of a kernel over ``grid`` that names none (choose_local_size, unless the API's
        dispatch does better otherwise)."""
        return choose_local_size(grid, self.device_info())

    def local_size(self, spec: KernelSpec) -> tuple[int, int, int]:
        info = self.device_info()
        if spec.local_size is None:
            return self.default_local_size(spec.grid)
        dims = info["max_work_group_dims"]
        if math.prod(spec.local_size) > info["max_work_group_size"] or any(
                lsz > d for lsz, d in zip(spec.local_size, dims)):
            raise DelegateError(f"{self.name}: kernel {spec.name}: local size {spec.local_size} exceeds the "
                                f"device limits ({info['max_work_group_size']} items, {tuple(dims)})")
        return spec.local_size

    def _key(self, source: str) -> bytes:
        text = "\0".join((source, self.build_options, device_fingerprint(self.device_info())))
        return hashlib.sha256(text.encode()).digest()

    def _prepare(self, spec: KernelSpec) -> tuple[tuple[int, int, int], str, bytes]:
        """The work-group size, program text and key of ``spec``, after checking it against the device."""
        local = self.local_size(spec)
        info = self.device_info()
        if len(spec.args) > info["max_buffers"]:
            raise DelegateError(f"{self.name}: kernel {spec.name} takes {len(spec.args)} buffers; the device "
                                f"binds at most {info['max_buffers']}")
        limit = info["max_dispatch_groups"]
        groups = [math.ceil(g / lsz) for g, lsz in zip(spec.grid, local)]
        if any(g > m for g, m in zip(groups, limit)):
            raise DelegateError(f"{self.name}: kernel {spec.name}: grid {spec.grid} needs {tuple(groups)} "
                                f"work groups of {local}; the device allows at most {tuple(limit)}")
        source = self.source(spec, local)
        return local, source, self._key(source)

    def _known(self, spec: KernelSpec, local: tuple[int, int, int], source: str, key: bytes) -> Program | None:
        """The program of ``spec`` at ``local`` if its source was compiled before (models repeat layers: an
        identical kernel is compiled once per backend instance); the work-group size is a launch parameter
        in OpenCL, not part of the source, so it is part of the program's identity."""
        values = self.launch_values(spec)
        program = self._programs.get((key, spec.name, local, values))
        if program is None and key in self._handles:
            handle, unit, entry = self._handles[key]
            program = self._programs[key, spec.name, local, values] = Program(self, spec, source, local, handle, unit,
                                                                              entry, values)
        return program

    def launch_values(self, spec: KernelSpec) -> tuple[int | float, ...]:
        """The scalar arguments a launch of ``spec`` passes after its buffers: none where the API's text holds
        every size and constant (the default); an API that takes a generic kernel's sizes (or its post-ops'
        constants) at run time returns them."""
        return ()

    def _payload(self, binary: bytes, key: bytes, what: str) -> bytes:
        """The driver's bytes inside ``binary`` (what ``program_binary`` returned), checked against ``key``."""
        head = len(_BINARY_MAGIC)
        if binary[:head] != _BINARY_MAGIC or binary[head:head + 32] != key:
            raise DelegateError(f"{self.name}: {what}: the program binary was made for another source, build "
                                "options, device or driver")
        payload = binary[head + 64:]
        if hashlib.sha256(payload).digest() != binary[head + 32:head + 64]:
            raise DelegateError(f"{self.name}: {what}: the program binary is corrupt")
        return payload

    def compile(self, spec: KernelSpec, binary: bytes | None = None) -> Program:
        """Compile ``spec``, or load it from ``binary`` (what ``program_binary`` returned for the same
        spec on the same device and driver). A binary that does not match raises DelegateError: the
        caller then compiles from source."""
        local, source, key = self._prepare(spec)
        program = self._known(spec, local, source, key)
        if program is not None:
            return program
        payload = None if binary is None else self._payload(binary, key, f"kernel {spec.name}")
        self._handles[key] = (self._on_device(self._build, spec, source, payload), key, spec.name)
        program = self._known(spec, local, source, key)
        assert program is not None
        return program

    def compile_all(self, specs: list[KernelSpec], binaries: Mapping[str, bytes] | None = None,
                    progress: Callable[[int], None] | None = None, bundle_kernels: int | None = None
                    ) -> tuple[list[Program], int]:
        """The programs of ``specs``, in order, in as few driver programs as the API allows
        (``bundle_kernels``, or fewer kernels a program where the argument says so): one build for a whole
        partition instead of one per kernel. A driver program whose binary ``binaries`` holds (``Program.unit``
        -> ``program_binary``) is loaded instead; one that does not load is compiled (with a warning).
        ``progress(n)`` follows each driver program with the number of kernels it held. Returns the programs
        and how many kernels were compiled from source."""
        binaries = binaries or {}
        prepared, programs, todo = self._pending(specs)
        compiled = 0
        for group in self._bundles(list(todo.items()), bundle_kernels):
            compiled += self._compile_group(group, binaries)
            if progress is not None:
                progress(len(group))
        for i, (spec, (local, source, key)) in enumerate(zip(specs, prepared)):
            programs[i] = programs[i] or self._known(spec, local, source, key)
        return [p for p in programs if p is not None], compiled

    def program_groups(self, specs: list[KernelSpec], bundle_kernels: int | None = None) -> list[list[KernelSpec]]:
        """The driver programs ``compile_all(specs, bundle_kernels=bundle_kernels)`` would build, each as the
        specs it holds (one per distinct source and work-group size, in order: drivers compile a kernel per size
        at its first launch; none that this instance compiled before): ``compile_all`` of one such group builds
        the same program text as ``compile_all`` of them all."""
        prepared, _, todo = self._pending(specs)
        bundles = self._bundles(list(todo.items()), bundle_kernels)
        group_of = {key: i for i, bundle in enumerate(bundles) for key, _ in bundle}
        groups: list[list[KernelSpec]] = [[] for _ in bundles]
        seen: set[tuple[bytes, tuple[int, int, int]]] = set()
        for spec, (local, _, key) in zip(specs, prepared):
            if key in group_of and (key, local) not in seen:
                seen.add((key, local))
                groups[group_of[key]].append(spec)
        return groups

    def _pending(self, specs: list[KernelSpec]) -> tuple[list[tuple[tuple[int, int, int], str, bytes]],
                                                          list[Program | None], dict[bytes, tuple[KernelSpec, str]]]:
        """Each spec's work-group size, text and key (``_prepare``); the program this instance already has for
        it, or None; and the sources still to build, in order (source key -> a spec of that source, its text)."""
        prepared = [self._prepare(spec) for spec in specs]
        programs = [self._known(spec, *p) for spec, p in zip(specs, prepared)]
        todo: dict[bytes, tuple[KernelSpec, str]] = {}
        for spec, (_, source, key), program in zip(specs, prepared, programs):
            if program is None:
                todo.setdefault(key, (spec, source))
        return prepared, programs, todo

    def _bundles(self, items: list[tuple[bytes, tuple[KernelSpec, str]]], bundle_kernels: int | None = None
                 ) -> list[list[tuple[bytes, tuple[KernelSpec, str]]]]:
        """``items`` (source key, (spec, text)) in order, cut into driver programs of at most ``bundle_kernels``
        kernels (the backend's own where None, and never more) and ``bundle_chars`` characters of text."""
        limit = min(bundle_kernels or self.bundle_kernels, self.bundle_kernels)
        groups: list[list[tuple[bytes, tuple[KernelSpec, str]]]] = []
        chars = 0
        for item in items:
            size = len(item[1][1])
            if not groups or len(groups[-1]) >= limit or (
                    self.bundle_chars and chars + size > self.bundle_chars):
                groups.append([])
                chars = 0
            groups[-1].append(item)
            chars += size
        return groups

    def _compile_group(self, group: list[tuple[bytes, tuple[KernelSpec, str]]], binaries: Mapping[str, bytes]) -> int:
        """Compile (or load) the kernels of ``group`` as one driver program; how many were compiled."""
        if len(group) == 1:
            key, (spec, _) = group[0]
            binary = binaries.get(key.hex())
            if binary is not None:
                try:
                    self.compile(spec, binary)
                    return 0
                except DelegateError as e:
                    log.warning("%s: the cached program of kernel %s is not usable (%s); compiling it", self.name,
                                spec.name, e)
            self.compile(spec)
            return 1
        entries = [f"k{j}_{spec.name}" for j, (_, (spec, _)) in enumerate(group)]
        text = self._bundle_source([(spec, entry) for (_, (spec, _)), entry in zip(group, entries)])
        if text is None:
            return sum(self._compile_group([item], binaries) for item in group)
        unit = self._key(text)
        handles = None
        binary = binaries.get(unit.hex())
        if binary is not None:
            try:
                handles = self._on_device(self._build_bundle, text, entries,
                                          self._payload(binary, unit, f"a program of {len(group)} kernels"))
            except DelegateError as e:
                log.warning("%s: a cached program of %d kernels is not usable (%s); compiling it", self.name,
                            len(group), e)
        compiled = 0
        if handles is None:
            try:
                handles = self._on_device(self._build_bundle, text, entries, None)
                compiled = len(group)
            except DelegateError as e:
                # built one by one, a kernel that does not compile fails with its own log and source
                log.warning("%s: %d kernels failed to build as one program; building them one by one (%s)",
                            self.name, len(group), str(e).splitlines()[0])
                return sum(self._compile_group([item], {}) for item in group)
        for (key, _), handle, entry in zip(group, handles, entries):
            self._handles[key] = (handle, unit, entry)
        return compiled

    def program_binary(self, program: Program) -> bytes:
        """Bytes that ``compile(program.spec, binary=...)`` loads without compiling, on this device and
        driver only (checked)."""
        payload = self._on_device(self._binary, program)
        return _BINARY_MAGIC + program.key + hashlib.sha256(payload).digest() + payload

    def alloc(self, n_vec4: int, precision: str = "fp32") -> Buffer:
        """A zero-filled buffer of ``n_vec4`` 4-float vectors stored as ``precision``."""
        if precision not in _STORAGE:
            raise ValueError(f"precision {precision!r} is not one of {tuple(_STORAGE)}")
        buf = Buffer(None, max(int(n_vec4), 1), precision)
        limit = self.device_info()["max_buffer_bytes"]
        if buf.nbytes > limit:
            raise DelegateError(f"{self.name}: a buffer of {buf.nbytes} bytes exceeds the device limit of {limit}")
        buf.handle = self._on_device(self._alloc, buf.nbytes)
        self._live += 1
        return buf

    def free(self, buffer: Buffer) -> None:
        if buffer.handle is not None:
            self._on_device(self._free, buffer.handle)
            buffer.handle = None
            self._live -= 1

    @property
    def live_buffers(self) -> int:
        """Buffers this instance allocated and has not freed."""
        return self._live

    def upload(self, buffer: Buffer, array: np.ndarray) -> None:
        """Write ``array`` (any shape; converted to the buffer's storage type) at the buffer's start."""
        data = np.ascontiguousarray(array, dtype=_STORAGE[buffer.precision]).reshape(-1)
        if data.nbytes > buffer.nbytes:
            raise ValueError(f"{data.size} values do not fit in a buffer of {buffer.n_vec4} vec4")
        self._on_device(self._write, buffer.handle, data)

    def download(self, buffer: Buffer, n_vec4: int | None = None) -> np.ndarray:
        """The first ``n_vec4`` vectors (default: all) as a flat array of the buffer's storage type."""
        n = buffer.n_vec4 if n_vec4 is None else n_vec4
        if not 0 <= n <= buffer.n_vec4:
            raise ValueError(f"cannot read {n} vec4 from a buffer of {buffer.n_vec4}")
        dtype = _STORAGE[buffer.precision]
        return self._on_device(self._read, buffer.handle, n * 4 * dtype.itemsize).view(dtype)

    def finish(self) -> None:
        self._on_device(self._finish)

    def dispatch_all(self, calls: list[tuple[Program, list[Buffer]]]) -> None:
        """Enqueue programs in order (one trip to the device thread for all of them)."""
        for program, buffers in calls:
            self._check_call(program, buffers)
        self._on_device(self._dispatch_all, calls)

    def _dispatch_all(self, calls: list[tuple[Program, list[Buffer]]]) -> None:
        for program, buffers in calls:
            token = self._launch(program, [b.handle for b in buffers])
            if self.profile:
                self._timings.append((program.name, token))

    def bind(self, calls: list[tuple[Program, list[Buffer]]]) -> list[Any]:
        """Check calls once and make them ready to enqueue (``dispatch_bound``) every invoke without the
        per-call checks and argument set-up of ``dispatch_all``: the per-invoke cost of a plan stays the
        driver's own. What this returns is only valid while every one of those buffers is alive."""
        for program, buffers in calls:
            self._check_call(program, buffers)
        return self._on_device(lambda: [self._bind(p, [b.handle for b in bufs]) for p, bufs in calls])

    def dispatch_bound(self, bound: list[Any]) -> None:
        self._on_device(self._dispatch_bound, bound)

    def _dispatch_bound(self, bound: list[Any]) -> None:
        if not self.profile:
            for call in bound:
                self._launch_bound(call)
            return
        for call in bound:
            self._timings.append((self._bound_name(call), self._launch_bound(call)))

    # an API that can set a dispatch up ahead of time overrides these three
    def _bind(self, program: Program, handles: list[Any]) -> Any:
        return program, handles

    def _launch_bound(self, call: Any) -> Any:
        return self._launch(*call)

    def _bound_name(self, call: Any) -> str:
        return call[0].name

    def _check_call(self, program: Program, buffers: list[Buffer]) -> None:
        spec = program.spec
        if program.backend is not self:
            raise DelegateError(f"{self.name}: kernel {spec.name} was compiled by another backend instance")
        if len(buffers) != len(spec.args):
            raise DelegateError(f"{self.name}: kernel {spec.name} takes {len(spec.args)} buffers, got {len(buffers)}")
        for arg, buf in zip(spec.args, buffers):
            if buf.handle is None:
                raise DelegateError(f"{self.name}: kernel {spec.name}: buffer for {arg.name!r} was freed")
            if buf.precision != spec.arg_precision(arg) or buf.n_vec4 < arg.n_vec4:
                raise DelegateError(
                    f"{self.name}: kernel {spec.name}: argument {arg.name!r} needs {arg.n_vec4} vec4 of "
                    f"{spec.arg_precision(arg)}, got a buffer of {buf.n_vec4} vec4 of {buf.precision}")

    def take_timings(self) -> list[tuple[str, int]]:
        """(kernel name, device nanoseconds) of every dispatch since the last call, in order; empty
        unless the backend was created with ``profile=True``. Waits for the dispatches to finish."""
        return self._on_device(self._take_timings)

    def _take_timings(self) -> list[tuple[str, int]]:
        self._finish()
        out = [(name, self._elapsed_ns(token)) for name, token in self._timings]
        self._timings = []
        return out

    # -- BHWC <-> PHWC4 at partition boundaries, on the device ---------------------------------------------

    def to_device(self, array: np.ndarray, tensor: Buffer, shape: tuple[int, int, int, int],
                  quant: tuple[float, int] | None = None) -> None:
        """Store a dense BHWC array (float32, or float16 kept as such on the way) into the PHWC4
        ``tensor`` of that ``shape``: upload into a raw staging buffer and convert on the device.
        With ``quant`` = (scale, zero_point), ``array`` holds int8 or uint8 codes of the values
        scale * (q - zero_point): dequantized on the device where the backend can (a quarter of the
        bytes to upload, no pass over them on the host), else on the host first."""
        shape = _bhwc(shape)
        array = np.asarray(array)
        if array.size != math.prod(shape):
            raise ValueError(f"an array of shape {array.shape} does not fill a tensor of shape {shape}")
        if quant is not None:
            if array.dtype not in (np.int8, np.uint8):
                raise ValueError(f"quantized codes are int8 or uint8, not {array.dtype}")
            self._on_device(self._convert_in_codes, array, tensor, shape, float(quant[0]), int(quant[1]))
            return
        raw_precision = "fp16" if array.dtype == np.float16 else "fp32"
        self._on_device(self._convert_in, array, tensor, shape, raw_precision)

    def from_device(self, tensor: Buffer, shape: tuple[int, int, int, int],
                    dtype: np.dtype | type = np.float32) -> np.ndarray:
        """The PHWC4 ``tensor`` of ``shape`` as a dense BHWC array of ``dtype`` (float32 or float16),
        converted on the device into a raw staging buffer, then read back."""
        shape = _bhwc(shape)
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float16):
            raise ValueError(f"from_device gives float32 or float16, not {dtype}")
        n_vec4 = vec4_count(shape)
        if n_vec4 <= HOST_REORDER_VEC4:
            # a small output (a classifier's scores): reading the PHWC4 tensor and reordering it here costs less
            # than a conversion kernel's launch and wait
            return np.ascontiguousarray(from_rows(self.download(tensor, n_vec4), shape), dtype)
        raw_precision = "fp16" if dtype == np.float16 else "fp32"
        return self._on_device(self._convert_out, tensor, shape, raw_precision)

    # -- one invoke in one trip to the device: inputs up, the plan's kernels, outputs down, a single wait ----------

    def input_route(self, tensor: Buffer, shape: tuple[int, int, int, int], codes: Codes | None = None
                    ) -> InputRoute:
        """How an input reaches the PHWC4 ``tensor`` of ``shape`` every ``invoke``, set up once. Written straight
        into the tensor, no conversion kernel: a small one (at most HOST_REORDER_VEC4), reordered on the host
        into PHWC4 rows kept for it (zero padding written once), and one of any size that PHWC4 stores as it
        is (``pixels_in_order``, a whole number of slices: the array itself goes up). Any other is written
        into a staging buffer and converted by a kernel bound here. ``codes``: the input comes as int8/uint8
        codes, dequantized on the host on the first way, by the conversion on the second where the backend can."""
        shape = _bhwc(shape)
        pixels = pixels_in_order(shape)
        if vec4_count(shape) <= HOST_REORDER_VEC4 or pixels is not None and pixels[0] == 1:
            if pixels is not None and shape[3] % 4 == 0:
                return InputRoute(tensor, shape, codes, None, None, [])
            rows = np.zeros(vec4_count(shape) * 4, _STORAGE[tensor.precision])
            lanes = rows.reshape(pixels[0], -1)[:, :shape[3] * pixels[1]] if pixels is not None else None
            return InputRoute(tensor, shape, codes, rows, None, [], lanes=lanes)
        if codes is not None and self._codes_on_device:
            program = self._codes_conversion(shape, tensor.precision, *codes)
            raw = self._staging_buffer(math.ceil(math.prod(shape) / 16), "fp32")  # the codes as raw bytes
        else:
            program = self._conversion("convert_to_phwc4", shape, tensor.precision, "fp32")
            raw = self._staging_buffer(math.ceil(math.prod(shape) / 4), "fp32")
        return InputRoute(tensor, shape, codes, None, raw, self.bind([(program, [raw, tensor])]),
                          raw_codes=codes is not None and self._codes_on_device)

    # whether _codes_conversion has a kernel that takes int8/uint8 codes as raw bytes; else they are
    # dequantized on the host
    _codes_on_device = False

    def _codes_conversion(self, shape: BHWC, precision: str, scale: float, zero_point: int,
                          dtype: np.dtype) -> Program:
        raise NotImplementedError

    def output_route(self, tensor: Buffer, shape: tuple[int, int, int, int]) -> OutputRoute:
        """How ``invoke`` reads the PHWC4 ``tensor`` of ``shape`` back as a dense float32 BHWC array: a small
        one, or one that PHWC4 stores as it is but for padding channels (``pixels_in_order``), as it is,
        reordered on the host; any other converted by a kernel bound here into a staging buffer, read from
        there."""
        shape = _bhwc(shape)
        n_vec4 = vec4_count(shape)
        pixels = pixels_in_order(shape)
        if n_vec4 <= HOST_REORDER_VEC4 or pixels is not None and pixels[0] == 1:
            return OutputRoute(shape, tensor, n_vec4 * 4, _STORAGE[tensor.precision], [], pixels)
        program = self._conversion("convert_from_phwc4", shape, tensor.precision, "fp32")
        raw = self._staging_buffer(math.ceil(math.prod(shape) / 4), "fp32")
        return OutputRoute(shape, raw, math.prod(shape), _STORAGE["fp32"], self.bind([(program, [tensor, raw])]))

    def invoke(self, inputs: list[tuple[InputRoute, np.ndarray]], bound: list[Any],
               outputs: list[OutputRoute]) -> list[np.ndarray]:
        """Write each input through its route, enqueue ``bound`` (Backend.bind), read each output through its
        route: one trip to the device thread, every transfer enqueued without waiting, one wait at the end."""
        for route, array in inputs:
            if array.size != route.size:
                raise ValueError(f"an array of shape {array.shape} does not fill a tensor of shape {route.shape}")
            if route.codes is not None and array.dtype != route.codes[2]:
                raise ValueError(f"this input takes {route.codes[2]} codes, not {array.dtype}")
        return self._on_device(self._invoke, inputs, bound, outputs)

    def _invoke(self, inputs: list[tuple[InputRoute, np.ndarray]], bound: list[Any],
                outputs: list[OutputRoute]) -> list[np.ndarray]:
        reads = []
        try:
            for into, array in inputs:
                self._put(into, array)
            self._dispatch_bound(bound)
            for k, route in enumerate(outputs):
                self._dispatch_bound(route.convert)
                out = np.empty(route.count, route.dtype)
                if k < len(outputs) - 1:
                    self._read_async(route.source.handle, out)
                else:
                    self._read_last(route.source.handle, out)
                reads.append(out)
            if not outputs:
                self._settle()
        except BaseException:
            # no transfer outlives a failed invoke: the caller may change its arrays once this returns
            with contextlib.suppress(Exception):
                self._settle()
            raise
        return [route.finish(out) for route, out in zip(outputs, reads)]

    def _put(self, route: InputRoute, array: np.ndarray) -> None:
        if route.codes is not None and not route.raw_codes:
            array = dequantize(array, route.codes[0], route.codes[1])
        if route.raw is not None:
            data = np.ascontiguousarray(array) if route.raw_codes else np.ascontiguousarray(array, np.float32)
            self._write_async(route.raw.handle, data.reshape(-1))
            self._dispatch_bound(route.convert)
            return
        if route.rows is None:  # PHWC4 is the array's own layout, or the tensor is stored dense
            self._write_async(route.tensor.handle,
                              np.ascontiguousarray(array, _STORAGE[route.tensor.precision]).reshape(-1))
            return
        if route.lanes is not None:
            route.lanes[...] = np.asarray(array).reshape(route.lanes.shape)
            self._write_async(route.tensor.handle, route.rows)
            return
        b, h, w, c = route.shape
        s = phwc4.slices(c)
        rows = route.rows.reshape(b, s, h, w, 4).transpose(0, 2, 3, 1, 4)  # a view: (b, y, x, slice, lane)
        dense = np.asarray(array).reshape(b, h, w, c)
        full = c // 4
        if full:
            rows[:, :, :, :full] = dense[..., :4 * full].reshape(b, h, w, full, 4)
        if c % 4:
            rows[:, :, :, full, :c % 4] = dense[..., 4 * full:]
        self._write_async(route.tensor.handle, route.rows)

    # an API whose transfers can be enqueued without waiting overrides these four; the data of a write must
    # stay unchanged, and a read's array unused, until _settle or _read_last
    def _write_async(self, handle: Any, data: np.ndarray) -> None:
        self._write(handle, data)

    def _read_async(self, handle: Any, out: np.ndarray) -> None:
        out.view(np.uint8)[...] = self._read(handle, out.nbytes)

    def _settle(self) -> None:
        """Wait for the transfers enqueued by _write_async and _read_async (here they waited already)."""
        return None

    def _read_last(self, handle: Any, out: np.ndarray) -> None:
        """The invoke's last read, which returns once it and everything before it are done."""
        self._read_async(handle, out)
        self._settle()

    # whether the driver keeps compiled programs across processes by itself (PoCL's kernel cache): program
    # binaries then add nothing to a warm start, and asking for them can cost a compile of its own
    driver_caches_programs: bool = False
    # whether what the driver compiles at a kernel's build and first launch lands in a per-user disk cache that
    # another process's build and launch of the same text read (compile_worker.py)
    first_launch_disk_cache: bool = False
    # how many kernels (per work-group size) the driver keeps ready to dispatch; a plan of more dispatched in turn
    # reloads one at every dispatch. None: no such limit known
    loaded_kernels: int | None = None
    # whether a compile worker (compile_worker.py, which opens the API's default device) builds what this instance
    # would read
    shares_worker_builds: bool = True

    def for_work(self, macs: float) -> Backend:
        """The backend a partition of ``macs`` multiply-adds runs on: this one, or an API's sibling on another
        device of the same machine that runs little work faster (OpenCLBackend: PoCL's single-threaded device).
        It lives as long as this one."""
        return self

    def backends_in_use(self) -> list[Backend]:
        """The backends ``for_work`` has handed plans to (this one where it has handed none): what reports name as
        the device."""
        return [self]

    def boundary_specs(self, inputs: list[tuple[BHWC, str, Codes | None]], outputs: list[tuple[BHWC, str]]
                       ) -> list[KernelSpec]:
        """The conversion kernels that ``to_device`` (of float32 arrays, or of codes where their (scale,
        zero_point, dtype) is given) and ``from_device`` (to float32) compile for tensors of these (shape,
        storage precision): a partition compiles them with its own kernels instead of at its first invoke."""
        specs = [self._codes_spec(shape, precision, *codes) if codes is not None else
                 conversion_spec("convert_to_phwc4", shape, precision, "fp32") for shape, precision, codes in inputs]
        specs += [self._conversion_spec("convert_from_phwc4", shape, precision, "fp32") for shape, precision in outputs
                  if vec4_count(shape) > HOST_REORDER_VEC4]
        return specs

    def _codes_spec(self, shape: BHWC, precision: str, scale: float, zero_point: int, dtype: np.dtype) -> KernelSpec:
        """The conversion kernel ``to_device`` of codes runs (here: they are dequantized on the host first)."""
        return conversion_spec("convert_to_phwc4", shape, precision, "fp32")

    def _convert_in(self, array: np.ndarray, tensor: Buffer, shape: BHWC, raw_precision: str) -> None:
        program = self._conversion("convert_to_phwc4", shape, tensor.precision, raw_precision)
        raw = self._staging_buffer(math.ceil(math.prod(shape) / 4), raw_precision)
        self.upload(raw, array)
        self.dispatch_all([(program, [raw, tensor])])

    def _convert_in_codes(self, codes: np.ndarray, tensor: Buffer, shape: BHWC, scale: float,
                          zero_point: int) -> None:
        """to_device of quantized codes; a backend with a kernel for it overrides this."""
        self._convert_in(dequantize(codes, scale, zero_point), tensor, shape, "fp32")

    def _convert_out(self, tensor: Buffer, shape: BHWC, raw_precision: str) -> np.ndarray:
        program = self._conversion("convert_from_phwc4", shape, tensor.precision, raw_precision)
        n = math.prod(shape)
        raw = self._staging_buffer(math.ceil(n / 4), raw_precision)
        self.dispatch_all([(program, [tensor, raw])])
        return self.download(raw, math.ceil(n / 4))[:n].reshape(shape)

    def _staging_buffer(self, n_vec4: int, precision: str) -> Buffer:
        # reusing one buffer per size is safe: both APIs order a write after the dispatches before it
        key = (n_vec4, precision)
        if key not in self._staging:
            self._staging[key] = self.alloc(n_vec4, precision)
        return self._staging[key]

    def _conversion(self, kernel: str, shape: BHWC, precision: str, raw_precision: str) -> Program:
        key = (kernel, shape, precision, raw_precision)
        if key not in self._convert:
            self._convert[key] = self.compile(self._conversion_spec(kernel, shape, precision, raw_precision))
        return self._convert[key]

    def _conversion_spec(self, kernel: str, shape: BHWC, precision: str, raw_precision: str) -> KernelSpec:
        """The spec of a conversion kernel (conversion_spec); a backend with its own version overrides this."""
        return conversion_spec(kernel, shape, precision, raw_precision)

    def close(self) -> None:
        """Free the staging buffers and forget the programs; the API context stays for other instances."""
        for buf in self._staging.values():
            self.free(buf)
        self._staging.clear()
        self._convert.clear()
        self._programs.clear()
        self._handles.clear()


def _bhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4 or min(shape) < 1:
        raise ValueError(f"{shape} is not a BHWC shape of positive sizes")
    return shape


def pixels_in_order(shape: BHWC) -> tuple[int, int] | None:
    """Where PHWC4 keeps the pixels of a BHWC ``shape`` in their dense order with their channels together (one
    pixel per batch, or one slice): PHWC4 is then the dense array as ``rows`` rows of ``per_row`` pixels, each
    row padded to whole slices; (rows, per_row), a single row wherever no padding sits between pixels. None
    where PHWC4 interleaves slices of different pixels."""
    b, h, w, c = shape
    if h * w == 1:
        return (1, b) if c % 4 == 0 else (b, 1)
    if c <= 4:
        return (1, b * h * w) if c == 4 else (b * h * w, 1)
    return None


def conversion_spec(kernel: str, shape: tuple[int, int, int, int], precision: str, raw_precision: str) -> KernelSpec:
    """The spec of kernels/dialect/convert_to_phwc4.dialect (raw ``src`` -> PHWC4 ``dst``) or
    convert_from_phwc4.dialect (PHWC4 ``src`` -> raw ``dst``) for a BHWC ``shape``."""
    b, h, w, c = shape
    helpers, body = codegen.load_kernel(kernel)
    n4 = math.ceil(b * h * w * c / 4)
    if kernel == "convert_to_phwc4":
        args = [Arg("src", "in", precision=raw_precision), Arg("dst", "out", shape)]
        grid = phwc4.grid(shape)
        defines: dict[str, int | float | str] = {}
    else:
        args = [Arg("src", "in", shape), Arg("dst", "out", precision=raw_precision)]
        # one work item per vec4 of the dense output, on a 2-D grid so no dimension outgrows the GL limit
        row = min(n4, 1024)
        grid = (row, math.ceil(n4 / row), 1)
        defines = {"DST_N4": n4}
    return KernelSpec(kernel, body, args, grid, defines, helpers=helpers, precision=precision)


__all__ = ["Backend", "Buffer", "Codes", "DeviceInfo", "InputRoute", "OutputRoute", "Program", "ProgramCache",
           "choose_local_size", "conversion_spec", "device_fingerprint", "local_size_candidates", "live_backends",
           "live_buffers"]
