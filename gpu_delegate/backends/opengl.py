"""OpenGL ES 3.1 compute backend: GLSL ES 3.10 shaders from the shared dialect, on a headless EGL context.

moderngl creates the context and its buffers. Shaders, programs, dispatches, barriers, timer queries
and program binaries go through GL entry points taken from ``eglGetProcAddress`` with ctypes, because
moderngl exposes neither ``glGetProgramBinary`` nor a way to run a program it did not link.

A GL context belongs to the thread that made it current, so the process's one context lives on one
worker thread and every GL call of every GLBackend runs there: the backend may be used from any thread.

Kernels read their "in" and "const" buffers through buffer textures (``texelFetch`` on a
``samplerBuffer``, GL_EXT_texture_buffer) where the driver has them, and write their "out" buffers as
SSBOs. Each buffer gets its texture, a view of the same storage, when it is allocated. Measured on Mesa
22.3 llvmpipe: a 1x1 convolution runs 5-10x faster this way (14-31 GFLOP/s against 2.3-2.9), because
llvmpipe loads an SSBO element lane by lane behind a branch on the execution mask, while a texel fetch
is a vector gather.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import math
import os
import queue
import struct
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from ..errors import DelegateError
from . import codegen
from .base import Backend, Buffer, DeviceInfo, Program, ProgramCache, numbered
from .codegen import KernelSpec

T = TypeVar("T")

GL_COMPUTE_SHADER = 0x91B9
GL_COMPILE_STATUS = 0x8B81
GL_LINK_STATUS = 0x8B82
GL_INFO_LOG_LENGTH = 0x8B84
GL_PROGRAM_BINARY_RETRIEVABLE_HINT = 0x8257
GL_PROGRAM_BINARY_LENGTH = 0x8741
GL_NUM_PROGRAM_BINARY_FORMATS = 0x87FE
GL_COMPUTE_WORK_GROUP_SIZE = 0x8267
GL_SHADER_STORAGE_BUFFER = 0x90D2
GL_SHADER_STORAGE_BARRIER_BIT = 0x2000
GL_BUFFER_UPDATE_BARRIER_BIT = 0x200
GL_TEXTURE_FETCH_BARRIER_BIT = 0x8
GL_TIME_ELAPSED = 0x88BF
GL_QUERY_RESULT = 0x8866
GL_TEXTURE_BUFFER = 0x8C2A
GL_TEXTURE0 = 0x84C0
GL_RGBA32F = 0x8814
GL_RGBA16F = 0x881A
GL_MAX_COMPUTE_TEXTURE_IMAGE_UNITS = 0x91BC
GL_MAX_TEXTURE_BUFFER_SIZE = 0x8C2B
# buffer-texture format per storage precision: texelFetch widens fp16 to float32 (exactly)
_TEXTURE_FORMATS = {"fp32": GL_RGBA32F, "fp16": GL_RGBA16F}
# compiles where a "#version 310 es" compute shader may read buffer textures
_TEXTURE_PROBE = """#version 310 es
#extension GL_EXT_texture_buffer : require
layout(local_size_x = 1) in;
layout(binding = 0) uniform highp samplerBuffer probe_buf;
layout(std430, binding = 0) buffer probe_out { vec4 probe_v[]; };
void main() { probe_v[0] = texelFetch(probe_buf, 0); }
"""

_u, _i, _p = ctypes.c_uint, ctypes.c_int, ctypes.c_void_p
_ip = ctypes.POINTER(ctypes.c_int)
# name: (ctypes return type, ctypes argument types)
_SIGNATURES: dict[str, tuple[type[Any] | None, list[type[Any]]]] = {
    "glCreateShader": (_u, [_u]),
    "glShaderSource": (None, [_u, _i, ctypes.POINTER(ctypes.c_char_p), _ip]),
    "glCompileShader": (None, [_u]),
    "glGetShaderiv": (None, [_u, _u, _ip]),
    "glGetShaderInfoLog": (None, [_u, _i, _ip, ctypes.c_char_p]),
    "glDeleteShader": (None, [_u]),
    "glCreateProgram": (_u, []),
    "glProgramParameteri": (None, [_u, _u, _i]),
    "glAttachShader": (None, [_u, _u]),
    "glDetachShader": (None, [_u, _u]),
    "glLinkProgram": (None, [_u]),
    "glGetProgramiv": (None, [_u, _u, _ip]),
    "glGetProgramInfoLog": (None, [_u, _i, _ip, ctypes.c_char_p]),
    "glDeleteProgram": (None, [_u]),
    "glGetProgramBinary": (None, [_u, _i, _ip, ctypes.POINTER(ctypes.c_uint), _p]),
    "glProgramBinary": (None, [_u, _u, _p, _i]),
    "glGetIntegerv": (None, [_u, _ip]),
    "glUseProgram": (None, [_u]),
    "glBindBufferBase": (None, [_u, _u, _u]),
    "glDispatchCompute": (None, [_u, _u, _u]),
    "glMemoryBarrier": (None, [_u]),
    "glGenQueries": (None, [_i, ctypes.POINTER(ctypes.c_uint)]),
    "glDeleteQueries": (None, [_i, ctypes.POINTER(ctypes.c_uint)]),
    "glBeginQuery": (None, [_u, _u]),
    "glEndQuery": (None, [_u]),
    "glGetQueryObjectui64v": (None, [_u, _u, ctypes.POINTER(ctypes.c_uint64)]),
    "glGenTextures": (None, [_i, ctypes.POINTER(ctypes.c_uint)]),
    "glDeleteTextures": (None, [_i, ctypes.POINTER(ctypes.c_uint)]),
    "glActiveTexture": (None, [_u]),
    "glBindTexture": (None, [_u, _u]),
    "glTexBuffer": (None, [_u, _u, _u]),
}


# GL objects to delete: programs, buffers (moderngl), buffer name -> its buffer texture
_GLObjects = tuple[set[int], set[Any], dict[int, int]]


class _GLFunctions:
    """The raw GL entry points, resolved once the context is current: one attribute per _SIGNATURES entry,
    named without the "gl" prefix (ctypes function pointers)."""

    CreateShader: Callable[..., int]
    ShaderSource: Callable[..., None]
    CompileShader: Callable[..., None]
    GetShaderiv: Callable[..., None]
    GetShaderInfoLog: Callable[..., None]
    DeleteShader: Callable[..., None]
    CreateProgram: Callable[..., int]
    ProgramParameteri: Callable[..., None]
    AttachShader: Callable[..., None]
    DetachShader: Callable[..., None]
    LinkProgram: Callable[..., None]
    GetProgramiv: Callable[..., None]
    GetProgramInfoLog: Callable[..., None]
    DeleteProgram: Callable[..., None]
    GetProgramBinary: Callable[..., None]
    ProgramBinary: Callable[..., None]
    GetIntegerv: Callable[..., None]
    UseProgram: Callable[..., None]
    BindBufferBase: Callable[..., None]
    DispatchCompute: Callable[..., None]
    MemoryBarrier: Callable[..., None]
    GenQueries: Callable[..., None]
    DeleteQueries: Callable[..., None]
    BeginQuery: Callable[..., None]
    EndQuery: Callable[..., None]
    GetQueryObjectui64v: Callable[..., None]
    GenTextures: Callable[..., None]
    DeleteTextures: Callable[..., None]
    ActiveTexture: Callable[..., None]
    BindTexture: Callable[..., None]
    TexBuffer: Callable[..., None]

    def __init__(self) -> None:
        name = ctypes.util.find_library("EGL") or "libEGL.so.1"
        try:
            egl = ctypes.CDLL(name)
        except OSError as e:
            raise DelegateError(f"OpenGL: cannot load {name}: {e}") from e
        egl.eglGetProcAddress.restype = ctypes.c_void_p
        egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        for fn, (res, args) in _SIGNATURES.items():
            address = egl.eglGetProcAddress(fn.encode())
            if not address:
                raise DelegateError(f"OpenGL: the driver does not provide {fn}")
            setattr(self, fn[2:], ctypes.CFUNCTYPE(res, *args)(address))

    def get_int(self, pname: int) -> int:
        v = ctypes.c_int()
        self.GetIntegerv(pname, ctypes.byref(v))
        return v.value

    def program_int(self, program: int, pname: int, n: int = 1) -> list[int]:
        v = (ctypes.c_int * n)()
        self.GetProgramiv(program, pname, v)
        return list(v)

    def info_log(self, getter: Callable[..., None], obj: int, iv: Callable[..., None]) -> str:
        n = ctypes.c_int()
        iv(obj, GL_INFO_LOG_LENGTH, ctypes.byref(n))
        log = ctypes.create_string_buffer(max(n.value, 1))
        getter(obj, len(log), None, log)
        return log.value.decode(errors="replace").strip()


class _Runtime:
    """The process's GL context, the thread it lives on, and its entry points."""

    def __init__(self) -> None:
        # GL objects of collected backends, deleted on the GL thread at its next task. A queue because the
        # garbage collector may run a finalizer anywhere, even inside executor.submit holding its lock.
        self.pending: queue.SimpleQueue[_GLObjects] = queue.SimpleQueue()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu_delegate-gl")
        try:
            self.executor.submit(self._start).result()
        except BaseException:
            self.executor.shutdown(wait=False)
            raise

    def _start(self) -> None:
        self.thread = threading.current_thread()
        try:
            import moderngl
        except ImportError as e:
            raise DelegateError(f"OpenGL: moderngl is not installed ({e})") from e
        try:
            # moderngl-stubs type **settings as Dict[str, Any] (each value a dict); backend takes a name
            self.ctx = moderngl.create_context(standalone=True, backend="egl", require=430)  # type: ignore[arg-type]
        except Exception as e:
            raise DelegateError(f"OpenGL: EGL context creation failed (need GL 4.3 for compute shaders): {e}") from e
        if self.ctx.version_code < 430:
            raise DelegateError(f"OpenGL: GL {self.ctx.version_code} < 4.3, no compute shaders")
        if "GL_ARB_ES3_1_compatibility" not in self.ctx.extensions:
            raise DelegateError("OpenGL: the driver lacks GL_ARB_ES3_1_compatibility (#version 310 es shaders)")
        self.gl = _GLFunctions()
        self.info = dict(self.ctx.info)
        self.binary_formats = self.gl.get_int(GL_NUM_PROGRAM_BINARY_FORMATS)
        self.texture_units = self.gl.get_int(GL_MAX_COMPUTE_TEXTURE_IMAGE_UNITS) if self._has_buffer_textures() else 0

    def _has_buffer_textures(self) -> bool:
        """Whether ES shaders may read buffer textures, and every buffer fits in one (ES guarantees only
        65536 texels)."""
        max_texels = self.gl.get_int(GL_MAX_TEXTURE_BUFFER_SIZE)
        if max_texels * 16 < int(self.info["GL_MAX_SHADER_STORAGE_BLOCK_SIZE"]):
            return False
        gl = self.gl
        shader = gl.CreateShader(GL_COMPUTE_SHADER)
        gl.ShaderSource(shader, 1, (ctypes.c_char_p * 1)(_TEXTURE_PROBE.encode()), None)
        gl.CompileShader(shader)
        status = ctypes.c_int()
        gl.GetShaderiv(shader, GL_COMPILE_STATUS, ctypes.byref(status))
        gl.DeleteShader(shader)
        return status.value == 1

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        if threading.current_thread() is self.thread:
            self._drain()
            return fn(*args)
        return self.executor.submit(self._run, fn, *args).result()

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        self._drain()
        return fn(*args)

    def _drain(self) -> None:
        while True:
            try:
                objects = self.pending.get_nowait()
            except queue.Empty:
                return
            _delete(self, *objects)


_lock = threading.Lock()
_runtime: _Runtime | None = None
_runtime_error: DelegateError | None = None


class _GLProgram:
    """A linked program in the process's context, shared by every GLBackend that compiles its text
    (``PROGRAMS``), and deleted on the GL thread once nobody holds it."""

    def __init__(self, runtime: _Runtime, name: int, textures: frozenset[int]) -> None:
        self.name = name
        self.textures = textures  # the arguments its shader reads through buffer textures
        weakref.finalize(self, runtime.pending.put, ({name}, set(), {}))


# Linked programs, shared by every GLBackend: without a driver cache (MESA_SHADER_CACHE_DISABLE, a home that
# takes no files, a GPU driver that keeps none) each delegate compiled every shader again, as slow as a first
# start (face_detection_short_range on llvmpipe: 2.8 s a delegate); with Mesa's cache, a lookup per shader.
PROGRAMS: ProgramCache[_GLProgram] = ProgramCache()


def open_context() -> _Runtime:
    """The process's GL context (created once, on its own thread)."""
    global _runtime, _runtime_error
    with _lock:
        if _runtime_error is not None:
            raise _runtime_error
        if _runtime is None:
            try:
                _runtime = _Runtime()
            except DelegateError as e:
                _runtime_error = e
                raise
        return _runtime


def _delete(runtime: _Runtime, programs: set[int], buffers: set[Any], textures: dict[int, int]) -> None:
    """Delete GL objects; on the GL thread. A buffer's texture goes first: it holds the buffer's storage."""
    if textures:
        names = (ctypes.c_uint * len(textures))(*textures.values())
        runtime.gl.DeleteTextures(len(names), names)
    for p in programs:
        runtime.gl.DeleteProgram(p)
    for b in buffers:
        b.release()
    programs.clear()
    buffers.clear()
    textures.clear()


def _release(runtime: _Runtime, programs: set[int], buffers: set[Any], textures: dict[int, int]) -> None:
    runtime.pending.put((programs, buffers, textures))


class GLBackend(Backend):
    name = "gl"
    tuning_candidates = 3  # the work-group size is compiled into the shader: each one tried is a compile

    def __init__(self, profile: bool = False) -> None:
        super().__init__(profile)
        self.runtime = open_context()
        self.gl = self.runtime.gl
        self._gl_buffers: set[Any] = set()
        self._gl_textures: dict[int, int] = {}  # buffer name -> its buffer texture, made and deleted with it
        # GL objects must be deleted on the GL thread, whichever thread collects this backend (its programs
        # are shared: each deletes itself once nobody holds it)
        self._finalizer = weakref.finalize(self, _release, self.runtime, set(), self._gl_buffers, self._gl_textures)
        self._info = self._describe()

    def _on_device(self, fn: Callable[..., T], *args: Any) -> T:
        return self.runtime.call(fn, *args)

    def _describe(self) -> DeviceInfo:
        info = self.runtime.info
        renderer = info["GL_RENDERER"]
        cpu = any(s in renderer.lower() for s in ("llvmpipe", "softpipe", "swrast"))
        return {
            "api": "OpenGL", "api_version": info["GL_VERSION"], "name": renderer, "vendor": info["GL_VENDOR"],
            "driver_version": info["GL_VERSION"],
            "device_type": "cpu" if cpu else "gpu",
            # llvmpipe runs one work group per thread, LP_NUM_THREADS of them (default: one per core)
            "compute_units": int(os.environ.get("LP_NUM_THREADS") or os.cpu_count() or 1) if cpu else 1,
            "max_work_group_size": int(info["GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS"]),
            "max_work_group_dims": tuple(int(s) for s in info["GL_MAX_COMPUTE_WORK_GROUP_SIZE"]),
            # measured on llvmpipe: 64-wide groups run 3-10x faster than 1-4 wide ones
            "preferred_work_group_size": 64,
            "max_dispatch_groups": tuple(int(s) for s in info["GL_MAX_COMPUTE_WORK_GROUP_COUNT"]),
            "max_buffers": int(info["GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS"]),
            "max_buffer_bytes": int(info["GL_MAX_SHADER_STORAGE_BLOCK_SIZE"]),
            "has_fp16": False,
            "vector_width": 4,  # GLSL has no wider float vector than vec4
            "int8_dot": False,  # GLSL ES has no 8-bit storage to take them from
            "program_binary_formats": self.runtime.binary_formats,
        }

    def device_info(self) -> DeviceInfo:
        return self._info.copy()

    @property
    def first_launch_disk_cache(self) -> bool:  # type: ignore[override]
        # llvmpipe compiles a shader's machine code at its first dispatch, into Mesa's shader cache unless that
        # is off; a GPU driver compiles at the link
        disabled = any(os.environ.get(v, "").lower() in ("1", "true", "yes")
                       for v in ("MESA_SHADER_CACHE_DISABLE", "MESA_GLSL_CACHE_DISABLE"))
        return "llvmpipe" in self._info["name"].lower() and not disabled

    @property
    def live_buffers(self) -> int:
        # the GL objects themselves: close() deletes them all, freed or not
        return len(self._gl_buffers)

    def default_local_size(self, grid: tuple[int, int, int]) -> tuple[int, int, int]:
        """The base rule's work group, unless the grid is narrower than GL_SIMD_LANES along x: then a 1-D group
        over the grid's x and y, or x, y and z, flattened (codegen.flat_dims), at least twice the grid's x wide
        (which tells flat_dims it is flattened), halved while there are fewer groups than twice the threads."""
        local = super().default_local_size(grid)
        gx, gy, gz = grid
        if gx >= codegen.GL_SIMD_LANES:
            return local
        flat = gx * gy if gx * gy >= codegen.GL_SIMD_LANES else gx * gy * gz
        least = max(codegen.GL_SIMD_LANES, 1 << (2 * gx - 1).bit_length())
        size = min(1 << (flat - 1).bit_length(), self._info["preferred_work_group_size"],
                   self._info["max_work_group_dims"][0], self._info["max_work_group_size"])
        if size < least:  # a grid of fewer invocations than that: flattened, it would fill no more lanes
            return local
        while size > least and math.prod(codegen.gl_groups(grid, (size, 1, 1))) < 2 * self._info["compute_units"]:
            size //= 2
        return size, 1, 1

    def textures(self, spec: KernelSpec) -> frozenset[int]:
        """The arguments of ``spec`` that its shader reads through buffer textures: all that it does not
        write, where the driver has buffer textures and a unit for each."""
        reads = frozenset(i for i, a in enumerate(spec.args) if a.role != "out")
        return reads if reads and max(reads) < self.runtime.texture_units else frozenset()

    def source(self, spec: KernelSpec, local_size: tuple[int, int, int]) -> str:
        return codegen.glsl_source(spec, local_size, self.textures(spec))

    def _build(self, spec: KernelSpec, source: str, binary: bytes | None) -> Any:
        """Link ``source`` (or load ``binary``, which Backend._payload checked is the program of ``source``),
        unless this process linked it already (the text holds the work-group size and which arguments are
        textures, so it is all a program depends on in the one context)."""
        key = (self.runtime, hashlib.sha256(source.encode()).digest())
        return PROGRAMS.get(key, len(source), lambda: _GLProgram(self.runtime, self._link(spec, source, binary),
                                                                 self.textures(spec)))

    def _link(self, spec: KernelSpec, source: str, binary: bytes | None) -> int:
        gl = self.gl
        program = gl.CreateProgram()
        if binary is not None:
            ok = len(binary) > 4
            if ok:
                (fmt,) = struct.unpack_from("<I", binary)
                data = binary[4:]
                gl.ProgramBinary(program, fmt, data, len(data))
                ok = gl.program_int(program, GL_LINK_STATUS)[0] == 1
            if not ok or gl.program_int(program, GL_COMPUTE_WORK_GROUP_SIZE, 3) != list(self.local_size(spec)):
                gl.DeleteProgram(program)
                raise DelegateError(f"OpenGL: kernel {spec.name}: the driver rejected the program binary")
            return program
        shader = gl.CreateShader(GL_COMPUTE_SHADER)
        gl.ShaderSource(shader, 1, (ctypes.c_char_p * 1)(source.encode()), None)
        gl.CompileShader(shader)
        status = ctypes.c_int()
        gl.GetShaderiv(shader, GL_COMPILE_STATUS, ctypes.byref(status))
        if status.value != 1:
            log = gl.info_log(gl.GetShaderInfoLog, shader, gl.GetShaderiv)
            gl.DeleteShader(shader)
            gl.DeleteProgram(program)
            raise DelegateError(f"OpenGL: kernel {spec.name} failed to compile:\n{log}\n"
                                f"--- source ---\n{numbered(source)}")
        # without the hint some drivers keep no binary to hand back
        gl.ProgramParameteri(program, GL_PROGRAM_BINARY_RETRIEVABLE_HINT, 1)
        gl.AttachShader(program, shader)
        gl.LinkProgram(program)
        gl.DetachShader(program, shader)
        gl.DeleteShader(shader)
        if gl.program_int(program, GL_LINK_STATUS)[0] != 1:
            log = gl.info_log(gl.GetProgramInfoLog, program, gl.GetProgramiv)
            gl.DeleteProgram(program)
            raise DelegateError(f"OpenGL: kernel {spec.name} failed to link:\n{log}\n"
                                f"--- source ---\n{numbered(source)}")
        return program

    def _binary(self, program: Program) -> bytes:
        """glGetProgramBinary, as the format (uint32 little-endian) followed by the driver's bytes."""
        gl = self.gl
        (length,) = gl.program_int(program.handle.name, GL_PROGRAM_BINARY_LENGTH)
        if self.runtime.binary_formats == 0 or length <= 0:
            raise DelegateError(f"OpenGL: kernel {program.name}: the driver keeps no program binary "
                                "(Mesa needs its shader cache enabled)")
        data = ctypes.create_string_buffer(length)
        got, fmt = ctypes.c_int(), ctypes.c_uint()
        gl.GetProgramBinary(program.handle.name, length, ctypes.byref(got), ctypes.byref(fmt), data)
        return struct.pack("<I", fmt.value) + data.raw[:got.value]

    def _alloc(self, nbytes: int) -> Any:
        try:
            buf = self.runtime.ctx.buffer(reserve=nbytes)
        except Exception as e:
            raise DelegateError(f"OpenGL: cannot allocate {nbytes} bytes: {e}") from e
        buf.clear()
        self._gl_buffers.add(buf)
        return buf

    def alloc(self, n_vec4: int, precision: str = "fp32") -> Buffer:
        buf = super().alloc(n_vec4, precision)
        if self.runtime.texture_units:
            self._on_device(self._attach_texture, buf.handle, precision)
        return buf

    def _attach_texture(self, handle: Any, precision: str) -> None:
        """The buffer texture through which kernels read the buffer (a view: no copy, no sync)."""
        gl = self.gl
        name = ctypes.c_uint()
        gl.GenTextures(1, ctypes.byref(name))
        gl.BindTexture(GL_TEXTURE_BUFFER, name)
        gl.TexBuffer(GL_TEXTURE_BUFFER, _TEXTURE_FORMATS[precision], handle.glo)
        gl.BindTexture(GL_TEXTURE_BUFFER, 0)
        self._gl_textures[handle.glo] = name.value

    def _free(self, handle: Any) -> None:
        texture = self._gl_textures.pop(handle.glo, None)
        if texture is not None:
            self.gl.DeleteTextures(1, ctypes.byref(ctypes.c_uint(texture)))
        self._gl_buffers.discard(handle)
        handle.release()

    def _write(self, handle: Any, data: np.ndarray) -> None:
        if data.nbytes:
            handle.write(data)

    def _read(self, handle: Any, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            handle.read_into(out, size=nbytes)
        return out

    def _read_async(self, handle: Any, out: np.ndarray) -> None:
        if out.nbytes:  # GL reads wait for the dispatches before them: straight into the caller's array
            handle.read_into(out, size=out.nbytes)

    def _launch(self, program: Program, handles: list[Any]) -> Any:
        gl = self.gl
        gl.UseProgram(program.handle.name)
        textures = program.handle.textures
        for i, h in enumerate(handles):
            if i in textures:
                gl.ActiveTexture(GL_TEXTURE0 + i)
                gl.BindTexture(GL_TEXTURE_BUFFER, self._gl_textures[h.glo])
            else:
                gl.BindBufferBase(GL_SHADER_STORAGE_BUFFER, i, h.glo)
        groups = codegen.gl_groups(program.spec.grid, program.local_size)
        query = None
        if self.profile:
            query = ctypes.c_uint()
            gl.GenQueries(1, ctypes.byref(query))
            gl.BeginQuery(GL_TIME_ELAPSED, query)
        gl.DispatchCompute(*groups)
        if query is not None:
            gl.EndQuery(GL_TIME_ELAPSED)
        # make the writes visible to the next dispatch (as SSBO or texture) and to buffer reads
        gl.MemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT | GL_TEXTURE_FETCH_BARRIER_BIT | GL_BUFFER_UPDATE_BARRIER_BIT)
        return query

    def _elapsed_ns(self, token: Any) -> int:
        ns = ctypes.c_uint64()
        self.gl.GetQueryObjectui64v(token, GL_QUERY_RESULT, ctypes.byref(ns))
        self.gl.DeleteQueries(1, ctypes.byref(token))
        return int(ns.value)

    def _finish(self) -> None:
        self.runtime.ctx.finish()

    def close(self) -> None:
        """Free every buffer this instance made and let go of its programs (deleted once no other instance
        holds them, and PROGRAMS keeps them no longer); the context stays for other instances."""
        super().close()
        self._on_device(_delete, self.runtime, set(), self._gl_buffers, self._gl_textures)
