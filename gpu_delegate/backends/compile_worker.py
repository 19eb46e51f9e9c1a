"""A first start on two cores: a second process does half of a partition's compiles into the driver's disk cache.

Drivers that compile on the CPU (PoCL, llvmpipe) compile each kernel at its first launch, one at a time: PoCL
holds one compiler lock per process, llvmpipe compiles on the thread that dispatches. Both keep what they compile
in a per-user disk cache (PoCL's kernel cache, Mesa's shader cache) that any process of the user reads. So a
worker process builds the same driver programs from the same text and launches their kernels once on scratch
buffers, sharing the work with this process through claim files: the launches one at a time, this process from
the first, the worker from the last, so that the two finish together however long each compile takes; a
program is built by the process that claims it first (this one the first program, the worker the last), and
by the other, once that one has marked it built, as a lookup in the driver's cache. The launches the worker
did are then cache lookups here too.

The worker only ever warms a cache: this process then builds and launches every program itself (a lookup where
the worker got there first, a compile where it did not), so a worker that fails, hangs (killed after a while)
or never starts changes nothing but the time.

CompileWorker starts the worker (``WORKER``): the backend's name and a file of the programs in argv.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DelegateError
from .codegen import KernelSpec

if TYPE_CHECKING:
    from .base import Backend, Program

log = logging.getLogger("gpu_delegate")

# what the worker process runs (not ``-m`` of this module, which the package has imported by then), with the
# folder holding this package first on its path: the same package, whatever its name and however it was found
WORKER = f"from {__name__} import main; main()"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# GPU_DELEGATE_COMPILE_WORKER=0 turns the worker off, =1 on wherever it can work (busy cores or not)
SWITCH = "GPU_DELEGATE_COMPILE_WORKER"
# The worker starts only where the cores of the process, less the load average (of the last minute), leave this
# many free: it costs CPU time (~0.9 s for MobileNetV2 on PoCL: its start and programs built twice), which on a
# host whose cores are busy comes out of the start it should shorten (2 cores at load 7.5-8.5: MobileNetV2 cold
# on cl 13.8 against 14.4 s without, on gl 9.3 against 5.5 s, bench/cold_warm.py, medians of 3).
IDLE_CORES = 0.5
# Where the last minute's load leaves no idle core, the cores idle over IDLE_WINDOW_S now (this process busy on one
# of them) decide: a core idle but for IDLE_NOW of the time. (100 ticks a second: 0.1 s is 10 a core.)
IDLE_NOW = 0.8
IDLE_WINDOW_S = 0.1
# A worker that has not finished a launch it claimed this long after this process ran out of its own (and at
# least WAIT_FACTOR times the slowest launch this process did) is killed, and its launches compiled here; a process
# that needs a program the other one claimed to build waits this long for it, then builds it itself.
WAIT_MIN_S = 10.0
WAIT_FACTOR = 3.0


@dataclass
class Launch:
    """One first launch: a kernel and the vec4 count of each of its arguments' scratch buffers (at least what
    the kernel reads and writes: the sizes of the buffers the plan binds to it)."""

    spec: KernelSpec
    sizes: list[int]


@dataclass
class Group:
    """One driver program: the specs ``Backend.program_groups`` put in it, and the launches that compile them."""

    specs: list[KernelSpec]
    launches: list[Launch]


class Filler:
    """One process's side of the sharing: builds a group's driver program once (waiting for the other process's
    build where that one claimed it, then a lookup in the driver's cache), and launches a kernel once on zeroed
    scratch buffers (every input zero, so no kernel indexes by data it did not write), waiting for it: what the
    driver compiles at a build and at a first launch is then in its caches."""

    def __init__(self, backend: Backend, groups: list[Group], claims: Path, other_alive: Callable[[], bool],
                 progress: Callable[[int], None] | None = None) -> None:
        self.backend = backend
        self.groups = groups
        self.claims = claims
        self.other_alive = other_alive
        self.progress = progress  # compile_all's, for each build
        self.built: dict[int, dict[int, Program]] = {}  # per group: id(spec) -> its program
        self.compiled = 0  # kernels compiled from source by the builds

    def build(self, index: int) -> dict[int, Program]:
        if index not in self.built:
            mark = _built(self.claims, index)
            if not _claim(self.claims, f"build{index}") and not _wait_for(mark.exists, self.other_alive, WAIT_MIN_S):
                log.info("%s: program %d, claimed by the other process, is not built; building it here",
                         self.backend.name, index)
            specs = self.groups[index].specs
            programs, compiled = self.backend.compile_all(specs, progress=self.progress, bundle_kernels=len(specs))
            mark.touch()
            self.compiled += compiled
            self.built[index] = {id(spec): program for spec, program in zip(specs, programs)}
        return self.built[index]

    def launch(self, task: tuple[int, int]) -> None:
        """Launch ``task`` (group, launch) once, building its group first if this process has not."""
        index, which = task
        programs = self.build(index)
        backend = self.backend
        launch = self.groups[index].launches[which]
        program = programs.get(id(launch.spec)) or backend.compile(launch.spec)
        buffers = [backend.alloc(n, launch.spec.arg_precision(arg)) for arg, n in zip(launch.spec.args, launch.sizes)]
        try:
            backend.dispatch_all([(program, buffers)])
            backend.finish()
        finally:
            for buffer in buffers:
                backend.free(buffer)


def tasks(groups: list[Group]) -> list[tuple[int, int]]:
    """The first launches the two processes share out, one at a time: (group, launch) of every group."""
    return [(index, which) for index, group in enumerate(groups) for which in range(len(group.launches))]


def _claim(claims: Path, name: int | str) -> bool:
    """Whether this process is the first to claim ``name`` (a launch's number, or "build<group>")."""
    try:
        os.close(os.open(claims / str(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def _wait_for(done: Callable[[], bool], alive: Callable[[], bool], timeout: float) -> bool:
    """Whether ``done`` came to hold, polled until it does, ``alive`` stops holding or ``timeout`` seconds pass."""
    deadline = time.perf_counter() + timeout
    while not done():
        if not alive() or time.perf_counter() > deadline:
            return done()
        time.sleep(0.005)
    return True


def _done(claims: Path, index: int) -> Path:
    """The file that marks launch ``index`` finished by the worker."""
    return claims / f"{index}.done"


def _built(claims: Path, index: int) -> Path:
    """The file that marks program ``index`` built (in the driver's cache for the other process)."""
    return claims / f"{index}.built"


def can_help(backend: Backend) -> bool:
    """Whether a worker could help this backend, by facts that hold from one start to the next: its driver
    compiles at first launches into a disk cache that other processes read, the process may run on more than one
    core, a Python interpreter can start the worker, and the switch is not off. Where it could, every start builds
    a partition's kernels as the programs a worker would share (PlanRunner.compile), whether one runs or not, so
    that the driver's cache holds the programs the next start asks for."""
    if os.environ.get(SWITCH, "") == "0" or not backend.first_launch_disk_cache or not backend.shares_worker_builds:
        return False
    # the worker is ``sys.executable -c``: a Python interpreter, not an app embedding one (or a frozen app)
    if getattr(sys, "frozen", False) or not Path(sys.executable or "-").name.startswith("python"):
        return False
    return _cores() >= 2


def wanted(backend: Backend) -> bool:
    """Whether to start a worker now: it could help (``can_help``), and one of the cores is idle (IDLE_CORES by the
    last minute's load average, else IDLE_NOW over a moment now) unless the switch is on."""
    if not can_help(backend):
        return False
    if os.environ.get(SWITCH, "") == "1":
        return True
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average on this system: assume the other cores are free
        busy = 0.0
    if _cores() - busy >= IDLE_CORES:
        return True
    # the last minute's average also counts processes that have ended (a script starting models one after
    # another keeps it up by itself): ask what is idle now
    idle = _idle_cores_now()
    return idle is not None and idle >= IDLE_NOW


def _idle_cores_now(window_s: float = IDLE_WINDOW_S) -> float | None:
    """How many of the machine's cores were idle over the next ``window_s`` (Linux's /proc/stat), or None where
    that cannot be read."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
        return ticks[3] + ticks[4], sum(ticks)  # idle and iowait, all

    try:
        idle0, total0 = sample()
        time.sleep(window_s)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (os.cpu_count() or 1) * (idle1 - idle0) / (total1 - total0)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CompileWorker:
    """The worker process, handed ``groups`` (in a file: a pipe would hold this process up until the worker has
    started and reads): ``share`` does this process's part meanwhile; ``close`` ends it."""

    def __init__(self, backend: str, groups: list[Group]) -> None:
        self.backend = backend
        self.groups = groups
        self.claims = Path(tempfile.mkdtemp(prefix="gpu_delegate-compile-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.done_there: set[int] = set()  # the launches the worker finished (share), numbered as by tasks
        try:
            job = self.claims / "job"
            job.write_bytes(pickle.dumps(groups))
            path = os.pathsep.join([str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
            self.process = subprocess.Popen([sys.executable, "-c", WORKER, backend, str(job)],
                                            env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, pickle.PicklingError) as e:
            log.info("%s: no compile worker (%s)", backend, e)

    def share(self, backend: Backend, progress: Callable[[int], None] | None = None) -> int:
        """Do the first launches (``tasks``) here from the first, the worker from the last, each building a
        program where it needs one; then wait until the worker has finished the launches it took (or give up on
        it). Returns how many kernels the builds here compiled from source."""
        here = Filler(backend, self.groups, self.claims, self._alive, progress)
        todo = tasks(self.groups)
        mine: set[int] = set()
        slowest = 0.0
        for number, task in enumerate(todo):
            if not _claim(self.claims, number):
                continue
            mine.add(number)
            t0 = time.perf_counter()
            here.launch(task)
            slowest = max(slowest, time.perf_counter() - t0)
        theirs = [i for i in range(len(todo)) if i not in mine]
        t0 = time.perf_counter()
        self._wait(theirs, max(WAIT_MIN_S, WAIT_FACTOR * slowest))
        self.done_there = {i for i in theirs if _done(self.claims, i).exists()}
        log.info("%s: %d of %d first launches done here, %d by the compile worker (waited %.2f s for it)",
                 self.backend, len(mine), len(todo), len(self.done_there), time.perf_counter() - t0)
        return here.compiled

    def _alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _wait(self, theirs: list[int], timeout: float) -> None:
        """Until the worker has marked ``theirs`` done or exited, at most ``timeout`` seconds."""
        if not _wait_for(lambda: all(_done(self.claims, i).exists() for i in theirs), self._alive, timeout) \
                and self._alive():
            log.warning("%s: the compile worker did not finish in %.0f s; compiling its kernels here",
                        self.backend, timeout)

    def close(self) -> None:
        """End the worker (by now it holds no claim it has not finished, or it is stuck) and remove its files."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            if self.process.returncode not in (0, -signal.SIGKILL):
                log.info("%s: the compile worker exited with %s", self.backend, self.process.returncode)
        shutil.rmtree(self.claims, ignore_errors=True)

    def __enter__(self) -> CompileWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(backend_name: str, job: Path) -> None:
    """The worker's side: open the device, then take the launches of the job from the last, skipping those
    claimed already."""
    from . import create_backend

    backend = create_backend(backend_name)
    groups: list[Group] = pickle.loads(job.read_bytes())  # noqa: S301  (written by the process that started this one)
    claims = job.parent
    todo = tasks(groups)
    there = Filler(backend, groups, claims, lambda: True)
    for number in reversed(range(len(todo))):
        if not _claim(claims, number):
            continue
        there.launch(todo[number])
        _done(claims, number).touch()


def main() -> None:
    """The worker process (``WORKER``): the backend's name and the job's file in argv."""
    try:
        serve(sys.argv[1], Path(sys.argv[2]))
    except (DelegateError, OSError, pickle.UnpicklingError) as e:
        sys.exit(f"gpu_delegate compile worker: {e}")
