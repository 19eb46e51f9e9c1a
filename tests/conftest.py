import os
from collections.abc import Callable

import pytest

# no compile worker process beside the tests' own starts (CPU the other tests share, and starts that would depend
# on the host's load): tests/test_first_start.py's worker tests ask for one
os.environ.setdefault("GPU_DELEGATE_COMPILE_WORKER", "0")

from .reference import shared_delegate


@pytest.fixture(scope="module", params=["cl", "gl"])
def backend(request: pytest.FixtureRequest) -> str:
    """Both GPU backends; a test module may define its own `backend` to narrow this."""
    shared_delegate(request.param)
    return str(request.param)


@pytest.fixture
def fresh_programs(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Empty process-wide program caches, as in a new process, so that what a test builds or loads reaches the
    driver; call the fixture's value to empty them again (say, between a cold and a warm start)."""
    from gpu_delegate.backends import opencl, opengl
    from gpu_delegate.backends.base import ProgramCache

    def empty() -> None:
        monkeypatch.setattr(opencl, "PROGRAMS", ProgramCache())
        monkeypatch.setattr(opengl, "PROGRAMS", ProgramCache())

    empty()
    return empty


@pytest.fixture
def one_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plan on its delegate's own backend, for tests that reach into ``delegate.backend`` (patch it, count
    its buffers or programs): on PoCL, a small plan would otherwise run on a sibling backend on the single-threaded
    device (OpenCLBackend.for_work)."""
    from gpu_delegate.backends import opencl

    monkeypatch.setenv(opencl.SMALL_DEVICE_SWITCH, "0")


@pytest.fixture(autouse=True)
def _progress_log_restored():
    """cli.main() gives the progress logger a stderr handler for the rest of its process (the CLI's); a test that
    calls it must not leave that handler to the tests after it (test_first_start's non-terminal case failed when
    run after test_gpu_fallback_summary.py)."""
    from gpu_delegate.progress import log

    handlers, level = list(log.handlers), log.level
    yield
    log.handlers[:] = handlers
    log.setLevel(level)


@pytest.fixture(autouse=True)
def _small_partitions_delegated(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """GpuDelegate keeps a partition of a few thousand values beside CPU nodes on the CPU (_small_beside_cpu). The
    tests of kernels, lowering passes and the interpreter build graphs that small around CPU ops to reach the GPU
    path they test, so the rule is off for them; a module testing placement as users get it (real models, the rule
    itself) says so with ``SMALL_PARTITIONS_ON_CPU = True``."""
    if not getattr(request.module, "SMALL_PARTITIONS_ON_CPU", False):
        from gpu_delegate import gpu

        monkeypatch.setattr(gpu, "SMALL_PARTITION_VALUES", -1)
