"""GPU backends: OpenCL (pyopencl) and OpenGL ES 3.1 compute (moderngl + EGL), one kernel dialect for both."""

from __future__ import annotations

from ..errors import DelegateError
from .base import Backend, Buffer, DeviceInfo, Program, choose_local_size, device_fingerprint
from .codegen import Arg, KernelSpec, load_kernel

BACKENDS = ("cl", "gl")


def create_backend(kind: str = "auto", profile: bool = False) -> Backend:
    """A backend by name: "cl", "gl", or "auto" (OpenCL, else OpenGL, as TFLite's GPU delegate does).
    Raises DelegateError saying why when the device is missing."""
    if kind == "cl":
        try:
            from .opencl import OpenCLBackend
        except ImportError as e:
            raise DelegateError(f"OpenCL: pyopencl is not usable ({e})") from e
        return OpenCLBackend(profile)
    if kind == "gl":
        from .opengl import GLBackend  # moderngl is imported on the GL thread, where its absence is reported

        return GLBackend(profile)
    if kind != "auto":
        raise ValueError(f"unknown GPU backend {kind!r}: use 'auto', 'cl' or 'gl'")
    reasons: list[str] = []
    for k in BACKENDS:
        try:
            return create_backend(k, profile)
        except DelegateError as e:
            reasons.append(str(e))
    raise DelegateError("no GPU backend is available: " + "; ".join(reasons))


__all__ = [
    "BACKENDS",
    "Arg",
    "Backend",
    "Buffer",
    "DeviceInfo",
    "KernelSpec",
    "Program",
    "choose_local_size",
    "create_backend",
    "device_fingerprint",
    "load_kernel",
]
