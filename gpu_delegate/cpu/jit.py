"""numba, imported when the first CPU kernel runs rather than with the package.

Importing numba was 0.14 s of the package's 0.49 s (medians of fresh processes, numba's files in the page
cache; more when they are not), and a model whose every node runs on the GPU never calls a CPU kernel. The
kernel modules decorate with ``njit`` from here: it keeps the function and numba's options, and the first call
of any kernel (or a look at a numba attribute of one) imports numba and makes every kernel's dispatcher at once.
Kernels call one another inside numba code by their module-level names, so those names are then rebound to the
dispatchers (numba has to see a dispatcher there when it compiles the caller); ``prange`` likewise becomes
numba's own.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

_lock = threading.RLock()
_numba: ModuleType | None = None
_kernels: list[LazyKernel] = []
_threads: int | None = None  # the last set_num_threads before numba was imported


class LazyKernel:
    """A numba kernel whose dispatcher is made at its first use (with every other kernel's)."""

    def __init__(self, function: Callable[..., Any], options: dict[str, Any]) -> None:
        self.py_func = function
        self.options = options
        self.dispatcher: Any = None
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__
        self.__qualname__ = function.__qualname__
        self.__module__ = function.__module__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (self.dispatcher or _dispatcher_of(self))(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # numba's public attributes (signatures, inspect_types, ...); not its protocol names (_numba_type_):
        # inside numba code a kernel is seen through the name rebound to its dispatcher, never through this
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dispatcher or _dispatcher_of(self), name)

    def __repr__(self) -> str:
        state = "imported" if self.dispatcher is not None else "not yet imported"
        return f"<numba kernel {self.__module__}.{self.__qualname__}, numba {state}>"


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(**options)``, applied when numba is first needed: a LazyKernel, or numba's dispatcher
    where numba is imported already (a kernel module imported late)."""

    def decorate(function: Callable[..., Any]) -> Any:
        kernel = LazyKernel(function, options)
        with _lock:
            _kernels.append(kernel)
            if _numba is not None:
                _make_dispatchers()
                return kernel.dispatcher
        return kernel

    return decorate


def prange(*args: int) -> range:
    """``numba.prange``: the kernels' module-level name is rebound to numba's when numba is imported."""
    return range(*args)


def numba() -> ModuleType:
    """The numba module, imported (and every kernel's dispatcher made) on the first call."""
    global _numba
    with _lock:
        if _numba is None:
            module = importlib.import_module("numba")
            _numba = module
            if _threads is not None:
                module.set_num_threads(min(_threads, module.config.NUMBA_NUM_THREADS))
            _make_dispatchers()
        return _numba


def get_num_threads() -> int:
    return int(numba().get_num_threads())


def set_num_threads(n: int) -> None:
    """numba's thread count for this thread, capped at numba's maximum; before numba is imported, kept and set
    when it is (the interpreter sets it on its invoking thread, where a kernel's first call imports numba)."""
    global _threads
    with _lock:
        if _numba is None:
            _threads = n
            return
    _numba.set_num_threads(min(n, _numba.config.NUMBA_NUM_THREADS))


def _dispatcher_of(kernel: LazyKernel) -> Any:
    numba()
    return kernel.dispatcher


def _make_dispatchers() -> None:
    assert _numba is not None
    for kernel in _kernels:
        if kernel.dispatcher is None:
            kernel.dispatcher = _numba.njit(**kernel.options)(kernel.py_func)
    namespaces = {id(k.py_func.__globals__): k.py_func.__globals__ for k in _kernels}
    for namespace in namespaces.values():
        for name, value in list(namespace.items()):
            if isinstance(value, LazyKernel):
                namespace[name] = value.dispatcher
            elif value is prange:
                namespace[name] = _numba.prange
