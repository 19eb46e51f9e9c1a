"""Reliability: a delegate runs inside somebody else's app, where a crash is worse than a slow answer.

Hostile models through the GPU paths (bench/fuzz.py, bounded), tensors too large for the device, long runs
and many interpreters without growing memory or device buffers, threads, faults in the middle of an invoke
or of a cache write, and devices that fail to start or to compile. References: numpy formulas of the small
test models (and LiteRT for one), never our own CPU path.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate import backends
from gpu_delegate.backends.base import live_backends, live_buffers
from gpu_delegate.ops.base import get_op
from gpu_delegate.tflite import ModelBuilder

from .reference import run_litert

BACKENDS = ("cl", "gl")
A = np.linspace(-1.5, 1.5, 5).astype(np.float32)
B = np.linspace(0.5, -0.5, 5).astype(np.float32)


# -- models and their numpy references ---------------------------------------------------------------------

def small_model(channels: int = 5, batch: int = 1, with_argmax: bool = False) -> bytes:
    """y = softmax(mean_hw(sigmoid(x * A + B))) [, argmax_c(sigmoid(...))]: elementwise, reduce, softmax."""
    mb = ModelBuilder()
    x = mb.input("x", [batch, 6, 7, channels], shape_signature=[-1, -1, -1, channels])
    m, a, s = (mb.tensor(n, [batch, 6, 7, channels]) for n in ("m", "a", "s"))
    mb.op("MUL", [x, mb.const("A", A[:channels])], [m])
    mb.op("ADD", [m, mb.const("B", B[:channels])], [a])
    mb.op("LOGISTIC", [a], [s])
    r = mb.tensor("r", [batch, 1, 1, channels])
    mb.op("MEAN", [s, mb.const("axes", np.array([1, 2], np.int32))], [r], keep_dims=True)
    y = mb.tensor("y", [batch, 1, 1, channels])
    mb.op("SOFTMAX", [r], [y], beta=1.0)
    mb.output(y)
    if with_argmax:  # no GPU kernel: a CPU node after the partition
        k = mb.tensor("k", [batch, 6, 7], np.int32)
        mb.op("ARG_MAX", [s, mb.const("dim", np.array([3], np.int32))], [k], output_type=2)
        mb.output(k)
    return mb.build()


def reference(x: np.ndarray) -> list[np.ndarray]:
    c = x.shape[-1]
    s = 1 / (1 + np.exp(-(x.astype(np.float64) * A[:c] + B[:c])))
    r = s.mean(axis=(1, 2), keepdims=True)
    e = np.exp(r - r.max(-1, keepdims=True))
    return [(e / e.sum(-1, keepdims=True)).astype(np.float32), s.argmax(-1).astype(np.int32)]


def check(outs: list[np.ndarray], x: np.ndarray, what: str = "") -> None:
    ref = reference(x)
    for k, o in enumerate(outs):
        assert o.shape == ref[k].shape, f"{what}: output {k} shape {o.shape} != {ref[k].shape}"
        if o.dtype.kind == "f":
            np.testing.assert_allclose(o, ref[k], rtol=0, atol=1e-5, err_msg=f"{what}: output {k}")
        else:
            # argmax of values equal to float rounding may pick either: allow ties only
            s = 1 / (1 + np.exp(-(x.astype(np.float64) * A[:x.shape[-1]] + B[:x.shape[-1]])))
            picked = np.take_along_axis(s, o[..., None].astype(np.int64), -1)[..., 0]
            assert np.all(picked >= s.max(-1) - 1e-6), f"{what}: argmax"


def make_input(seed: int, shape=(1, 6, 7, 5)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run(it: gd.Interpreter, x: np.ndarray) -> list[np.ndarray]:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def interpreter(content: bytes, delegate) -> gd.Interpreter:
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate] if delegate else None)
    it.allocate_tensors()
    return it


def on(it: gd.Interpreter) -> set[str]:
    return {d["backend"] for d in it.get_ops_details() if d["op_name"] != "ARG_MAX"}


def rss_kib() -> int:
    """Resident memory of this process (psutil is not a dependency)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    pytest.skip("no /proc/self/status here")


# -- hostile models through both GPU paths -----------------------------------------------------------------

def bench_fuzz() -> ModuleType:
    from bench import fuzz

    return fuzz


def test_fuzz_the_gpu_paths():
    """bench/fuzz.py, bounded: tests/test_fuzz.py covers the CPU path; here every case also goes through the
    partitioner, the lowering and both backends, in child processes (a crash or hang is a failure)."""
    fuzz = bench_fuzz()
    names = fuzz.seed_names("small")
    out = fuzz.fuzz(seed=7, seconds=30, names=names, paths=["cpu", "cl", "gl"], log=lambda _: None, max_cases=300)
    ran = [r for r in out["results"].values() if not r.get("skipped")]
    bad = {i: r for i, r in out["results"].items() if fuzz._bad(r)}
    assert not out["crashes"], f"crashes or hangs: {out['crashes']}"
    assert not bad, "\n".join(f"case 7:{i} ({r['model']}: {r['mutations']}): {r['outcomes']}"
                              for i, r in list(bad.items())[:10])
    # it must get past the reader: some mutated models have to run on each GPU
    for path in BACKENDS:
        on_gpu = sum("nodes on" in r["outcomes"].get(path, "") and " 0 nodes" not in r["outcomes"][path]
                     for r in ran)
        assert on_gpu >= 5, f"only {on_gpu} of {len(ran)} cases ran on {path}"


def test_the_fuzzer_sees_a_crash_and_carries_on(monkeypatch):
    fuzz = bench_fuzz()
    monkeypatch.setenv(fuzz.SELFTEST_CRASH, "1")
    out = fuzz.fuzz(seed=7, seconds=60, names=fuzz.seed_names("small"), paths=["cpu"], log=lambda _: None,
                    max_cases=3)
    assert list(out["crashes"]) == [1] and "Segmentation fault" in out["crashes"][1], out["crashes"]
    assert sorted(out["results"]) == [0, 2]


# -- resource limits ----------------------------------------------------------------------------------------

def big_add(shape) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.tensor("y", shape)
    mb.op("ADD", [x, mb.const("one", np.ones(shape[-1], np.float32))], [y])
    mb.output(y)
    return mb.build()


def test_a_tensor_larger_than_a_gl_buffer_runs_on_the_cpu():
    """llvmpipe's storage blocks hold 128 MiB: a [1, 1024, 1024, 36] float tensor (144 MiB in PHWC4) cannot be one.
    The node must stay on the CPU, with the reason, and run; not fail in the middle of preparing."""
    try:
        d = gd.GpuDelegate(backend="gl")
    except gd.DelegateError as e:
        pytest.skip(f"no GL: {e}")
    shape = (1, 1024, 1024, 36)
    limit = d.backend.device_info()["max_buffer_bytes"]
    if 1024 * 1024 * 9 * 16 <= limit:  # NVIDIA's GL: 2 GiB; a tensor beyond that is too costly for a test
        pytest.skip(f"this device's storage blocks hold {limit} bytes: the 144 MiB tensor fits")
    it = interpreter(big_add(shape), d)
    assert on(it) == {"cpu"}
    assert "too large for the device" in it.cpu_reasons()[0]
    x = np.full(shape, 2.0, np.float32)
    [y] = run(it, x)
    assert y.shape == shape and np.all(y == 3.0)


@pytest.mark.parametrize("requested", ["explicit", "auto"])
def test_a_resize_beyond_the_device_limit(requested, monkeypatch):
    """The declared shape fits, so the node is delegated; a resize then outgrows one buffer of the device
    (here OpenCL with its limit lowered to 1 MiB). The graph is partitioned again for the new shapes, whose
    support check sees the real sizes: the nodes run on the CPU and say why, with either backend choice, and
    nothing leaks; resized back, they return to the GPU."""
    try:
        d = gd.GpuDelegate(backend="cl" if requested == "explicit" else "auto")
    except gd.DelegateError as e:
        pytest.skip(f"no OpenCL: {e}")
    if d.backend_name != "cl":
        pytest.skip("auto did not pick OpenCL here")
    monkeypatch.setitem(d.backend._info, "max_buffer_bytes", 1 << 20)
    content = small_model()
    it = interpreter(content, d)
    assert on(it) == {"cl"}
    before = d.backend.live_buffers
    it.resize_tensor_input(0, [4, 128, 128, 5])  # 4*128*128*2 vec4 of float32: 2 MiB
    x = make_input(1, (4, 128, 128, 5))
    it.allocate_tensors()
    backends = [d["backend"] for d in it.get_ops_details()]
    assert backends[:4] == ["cpu"] * 4, backends  # MUL ADD LOGISTIC MEAN on the big tensors; SOFTMAX fits still
    assert "too large for the device" in it.cpu_reasons()[0], it.cpu_reasons()
    assert d.backend.live_buffers <= before, "the buffers of the old plan leaked"
    check(run(it, x), x, "after the resize")
    it.resize_tensor_input(0, [1, 6, 7, 5])  # back within the limit: the GPU again
    it.allocate_tensors()
    assert on(it) == {"cl"}
    x = make_input(2)
    check(run(it, x), x, "back on the GPU")


# -- long runs ------------------------------------------------------------------------------------------------

# Growth allowed over 300 invokes after a warm-up. Python objects are counted exactly (tracemalloc): 300
# invokes retain ~1 KiB here, and anything an invoke leaked (a numpy array alone is 112 bytes) would exceed
# 32 KiB. Native memory (driver, numba) is seen only through RSS, which malloc arenas move by a few hundred
# KiB either way: 2 MiB catches a native leak of ~7 KiB per invoke. Device buffers are counted exactly.
TRACED_TOLERANCE = 32 << 10
RSS_TOLERANCE_KIB = 2048


def test_many_invokes_keep_memory_and_device_buffers_flat(backend):
    d = gd.GpuDelegate(backend=backend)
    it = interpreter(small_model(), d)
    assert on(it) == {backend}
    x = make_input(3)
    for _ in range(50):  # warm-up: first-use allocations (staging buffers, numba dispatch, caches)
        run(it, x)
    gc.collect()
    rss0, bufs0 = rss_kib(), d.backend.live_buffers
    tracemalloc.start()
    try:
        traced0 = tracemalloc.get_traced_memory()[0]
        for _ in range(300):
            outs = run(it, x)
        del outs
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - traced0
    finally:
        tracemalloc.stop()
    growth = rss_kib() - rss0
    assert d.backend.live_buffers == bufs0
    assert traced < TRACED_TOLERANCE, f"300 invokes kept {traced} bytes of Python objects"
    assert growth < RSS_TOLERANCE_KIB, f"RSS grew {growth} KiB over 300 invokes"
    x = make_input(4)
    check(run(it, x), x, "after 350 invokes")


def test_interpreters_come_and_go_without_leaking(backend):
    """25 interpreters, each with its own GpuDelegate, then 25 sharing one delegate (some resized on the way):
    no backend instance (queue, programs), device buffer or memory is left behind. The garbage collector is
    off meanwhile: device resources must go when the last reference does, not when a collection happens to
    run (a reference cycle in a backend once kept up to 8 dropped ones alive, 100-200 KiB each on PoCL)."""
    content = small_model()
    x = make_input(4)

    def one(delegate) -> None:
        it = interpreter(content, delegate)
        assert on(it) == {backend}
        check(run(it, x), x, "fresh interpreter")

    def resized(it: gd.Interpreter, seed: int) -> None:
        it.resize_tensor_input(0, [2, 6, 7, 5])
        it.allocate_tensors()
        x2 = make_input(seed, (2, 6, 7, 5))
        check(run(it, x2), x2, "resized")

    # Warm-up of both shapes: kernel caches on disk, numba, the API context, and the driver's compiler (its first
    # build holds ~4 MiB on NVIDIA's OpenCL, once per process)
    for _ in range(3):
        one(gd.GpuDelegate(backend=backend))
    resized(interpreter(content, gd.GpuDelegate(backend=backend)), 0)
    gc.collect()
    backends0, bufs0, rss0 = live_backends(backend), live_buffers(backend), rss_kib()
    gc.disable()
    try:
        for _ in range(25):
            one(gd.GpuDelegate(backend=backend))
            assert live_backends(backend) == backends0, "a dropped delegate's backend is still alive"
            assert live_buffers(backend) == bufs0
        shared = gd.GpuDelegate(backend=backend)
        for k in range(25):
            it = interpreter(content, shared)
            if k % 5 == 0:  # a resize re-prepares the partition: the old plan's buffers must go
                resized(it, k)
            del it
            # staging only (on the delegate's backend or its small-work sibling, OpenCLBackend.for_work)
            assert live_buffers(backend) <= bufs0 + 2, "an interpreter's buffers outlived it"
        del shared
        assert live_backends(backend) == backends0
        assert live_buffers(backend) == bufs0
    finally:
        gc.enable()
    growth = rss_kib() - rss0
    # measured: +0.2-0.7 MiB for these 50 (driver caches, allocator); 25 backends kept alive would add 3-5 MiB
    assert growth < 8 * 1024, f"RSS grew {growth} KiB over 50 interpreters"


# -- threads ----------------------------------------------------------------------------------------------

def _in_threads(*fns) -> None:
    errors: list[BaseException] = []

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001  (reported in the main thread)
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("shared", [False, True], ids=["own-delegates", "shared-delegate"])
def test_two_interpreters_in_two_threads(backend, shared):
    content = small_model()
    d1 = gd.GpuDelegate(backend=backend)
    d2 = d1 if shared else gd.GpuDelegate(backend=backend)
    its = [interpreter(content, d1), interpreter(content, d2)]

    def worker(it, seed):
        def go():
            for k in range(25):
                x = make_input(seed * 100 + k)
                check(run(it, x), x, f"thread {seed} invoke {k}")
        return go

    _in_threads(worker(its[0], 1), worker(its[1], 2))
    assert on(its[0]) == on(its[1]) == {backend}


def test_one_interpreter_called_from_two_threads_is_serialized(backend):
    """invoke() holds the interpreter's lock: concurrent calls take turns and each sees a whole result."""
    it = interpreter(small_model(), gd.GpuDelegate(backend=backend))
    x = make_input(5)
    run(it, x)
    expected = reference(x)[0]
    seen = []

    def go():
        for _ in range(25):
            it.invoke()
            seen.append(it.get_tensor(it.get_output_details()[0]["index"]))

    _in_threads(go, go)
    assert len(seen) == 50
    for y in seen:
        np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5)


def test_two_threads_against_litert(backend):
    """The same, on a model LiteRT runs as the reference (its own kernels)."""
    content = small_model(channels=3, batch=2)
    xs = [make_input(s, (2, 6, 7, 3)) for s in (6, 7)]
    refs = [run_litert(content, [x])[0] for x in xs]
    its = [interpreter(content, gd.GpuDelegate(backend=backend)) for _ in xs]

    def go(k):
        def f():
            for _ in range(10):
                np.testing.assert_allclose(run(its[k], xs[k])[0], refs[k], rtol=0, atol=1e-5)
        return f

    _in_threads(go(0), go(1))


# -- faults in the middle ------------------------------------------------------------------------------------

def test_a_failed_invoke_leaves_the_interpreter_usable(backend, monkeypatch, one_device):
    d = gd.GpuDelegate(backend=backend)
    it = interpreter(small_model(with_argmax=True), d)
    assert on(it) == {backend}
    x = make_input(8)
    check(run(it, x), x, "first")
    # a wrong input is refused and changes nothing
    with pytest.raises(ValueError, match="dimension mismatch"):
        it.set_tensor(it.get_input_details()[0]["index"], np.zeros((1, 6, 7, 4), np.float32))
    with pytest.raises(ValueError, match="type"):
        it.set_tensor(it.get_input_details()[0]["index"], x.astype(np.float64))
    it.invoke()
    check([it.get_tensor(o["index"]) for o in it.get_output_details()], x, "after refused inputs")
    # a CPU kernel raising in the middle of an invoke
    op = get_op("ARG_MAX")
    real = op.run_cpu
    monkeypatch.setattr(op, "run_cpu", staticmethod(lambda *a: (_ for _ in ()).throw(MemoryError("boom"))))
    with pytest.raises(MemoryError):
        run(it, x)
    monkeypatch.setattr(op, "run_cpu", real)
    x = make_input(9)
    check(run(it, x), x, "after a CPU kernel raised")
    # the GPU failing in the middle of a dispatch: at the plan's second kernel
    be = d.backend
    real_launch = be._launch_bound
    calls = []

    def flaky(call):
        calls.append(be._bound_name(call))
        if len(calls) == 2:
            raise gd.DelegateError("device lost (simulated)")
        return real_launch(call)

    monkeypatch.setattr(be, "_launch_bound", flaky)
    with pytest.raises(gd.DelegateError, match="simulated"):
        run(it, x)
    x = make_input(10)
    check(run(it, x), x, "after a dispatch failed")
    assert len(calls) > 2


KILLED_WRITER = r"""
import os, signal, sys
import numpy as np
import gpu_delegate as gd
from gpu_delegate import cache

real_fdopen = os.fdopen

class Dying:
    # the cache file's handle: half of the data reaches the disk, then the process is killed
    def __init__(self, f): self.f = f
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def fileno(self): return self.f.fileno()
    def write(self, data):
        self.f.write(data[:len(data) // 2]); self.f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    def flush(self): pass

cache.os.fdopen = lambda fd, mode="r", *a, **k: Dying(real_fdopen(fd, mode, *a, **k)) if "w" in mode else \
    real_fdopen(fd, mode, *a, **k)
d = gd.GpuDelegate(backend=sys.argv[2], serialization_dir=sys.argv[1], model_token="m")
it = gd.Interpreter(model_content=open(sys.argv[3], "rb").read(), experimental_delegates=[d])
it.allocate_tensors()
print("not killed")
"""


def test_a_cache_write_killed_halfway_is_never_trusted(backend, tmp_path):
    model = tmp_path / "m.tflite"
    model.write_bytes(small_model())
    cache_dir = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(cache_dir), backend, str(model)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    left = os.listdir(cache_dir)
    assert len(left) == 1 and left[0].startswith(".tmp-"), left  # half a temp file, never renamed
    hour_ago = time.time() - 7200
    os.utime(cache_dir / left[0], (hour_ago, hour_ago))
    (cache_dir / ".tmp-inflight").write_bytes(b"a writer racing us right now")
    d = gd.GpuDelegate(backend=backend, serialization_dir=cache_dir, model_token="m")
    it = interpreter(model.read_bytes(), d)
    x = make_input(11)
    check(run(it, x), x, "after the killed write")
    assert d.cache.hits == 0 and d.cache.misses == 1
    # the next write sweeps the stale temp file away, and leaves a young one (a live writer's) alone
    assert sorted(p for p in os.listdir(cache_dir) if p.startswith(".tmp-")) == [".tmp-inflight"]
    written = [p for p in os.listdir(cache_dir) if p.endswith(".bin")]
    assert len(written) == 1
    # a file cut short at any point (say, power lost before the data reached the disk) fails its checksum
    path = cache_dir / written[0]
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 3, len(data) - 33, len(data) - 1):
        path.write_bytes(data[:cut])
        d = gd.GpuDelegate(backend=backend, serialization_dir=cache_dir, model_token="m")
        it = interpreter(model.read_bytes(), d)
        check(run(it, x), x, f"cache file cut to {cut} bytes")
        assert d.cache.hits == 0 and d.cache.rejected == 1, cut


# -- devices that say no ----------------------------------------------------------------------------------------

def test_no_backend_auto_falls_back_explicit_raises(monkeypatch):
    def refuse(kind="auto", profile=False):
        raise gd.DelegateError(f"{kind}: no device (simulated)")

    monkeypatch.setattr(backends, "create_backend", refuse)
    d = gd.GpuDelegate(backend="auto")
    assert d.backend is None
    it = interpreter(small_model(), d)
    assert on(it) == {"cpu"}
    assert all("no device (simulated)" in r for r in it.cpu_reasons().values())
    x = make_input(12)
    check(run(it, x), x, "auto without a device")
    for kind in BACKENDS:
        with pytest.raises(gd.DelegateError, match=f"{kind}: no device"):
            gd.GpuDelegate(backend=kind)


def refuse_compiles(monkeypatch, backend) -> None:
    """The backend's driver refuses every program: a kernel alone (``compile``) or a partition's bundle
    (``compile_all``), whatever programs the process built before."""
    def refuse(*args, **kwargs):
        raise gd.DelegateError(f"{backend.name}: a program failed to compile: (simulated)")

    monkeypatch.setattr(backend, "compile", refuse)
    monkeypatch.setattr(backend, "compile_all", refuse)


@pytest.mark.parametrize("failure", ["compile", "alloc"])
@pytest.mark.parametrize("requested", ["explicit", "auto"])
def test_a_device_that_fails_to_prepare(backend, requested, failure, monkeypatch, one_device):
    """A driver that refuses a program, or runs out of memory after the first buffer of a partition:
    backend="auto" runs that partition on the CPU (as TFLite falls back when a delegate fails to prepare) and
    says why; an explicit backend raises a DelegateError naming the backend and the nodes. Either way no
    device buffer is left behind."""
    if requested == "auto" and backend != "cl":  # auto tries OpenCL first: make it absent to get GL
        real = backends.create_backend

        def no_opencl(kind="auto", profile=False):
            if kind == "cl":
                raise gd.DelegateError("OpenCL: absent (simulated)")
            return real(kind, profile)

        monkeypatch.setattr(backends, "create_backend", no_opencl)
    d = gd.GpuDelegate(backend=backend if requested == "explicit" else "auto")
    assert d.backend_name == backend
    be = d.backend
    if failure == "compile":
        refuse_compiles(monkeypatch, be)
    else:
        real_alloc, made = be.alloc, []

        def refuse(n_vec4, precision="fp32"):
            if made:
                raise gd.DelegateError(f"{be.name}: cannot allocate {n_vec4 * 16} bytes: out of memory (simulated)")
            made.append(real_alloc(n_vec4, precision))
            return made[-1]

        monkeypatch.setattr(be, "alloc", refuse)
    bufs0 = be.live_buffers
    it = gd.Interpreter(model_content=small_model(with_argmax=True), experimental_delegates=[d])
    if requested == "explicit":
        with pytest.raises(gd.DelegateError, match=rf"backend='{backend}'\) cannot run nodes 0-4: .*simulated"):
            it.allocate_tensors()
    else:
        it.allocate_tensors()
        assert on(it) == {"cpu"}
        reasons = it.cpu_reasons()
        assert all(f"the {backend} backend failed" in reasons[i] and "simulated" in reasons[i]
                   for i in range(5)), reasons
        x = make_input(13)
        check(run(it, x), x, "fallen back to the CPU")
    assert be.live_buffers == bufs0
    monkeypatch.undo()
    it = interpreter(small_model(), d)  # the device works again: a new interpreter uses it
    assert on(it) == {backend}


def test_a_lowering_bug_under_auto_falls_back(monkeypatch):
    """Not only DelegateError: with backend="auto" any failure to build the plan leaves the app running."""
    d = gd.GpuDelegate(backend="auto")
    if d.backend is None:
        pytest.skip("no GPU backend")
    from gpu_delegate import runner

    def broken(*a, **k):
        raise KeyError("a lowering bug (simulated)")

    monkeypatch.setattr(runner, "build_plan", broken)
    it = interpreter(small_model(), d)
    assert on(it) == {"cpu"} and "lowering failed: KeyError" in it.cpu_reasons()[0]
    x = make_input(14)
    check(run(it, x), x, "lowering failed")
    with pytest.raises(KeyError):  # an explicit backend shows the bug
        interpreter(small_model(), gd.GpuDelegate(backend=d.backend_name))


def test_a_device_that_fails_inside_litert(monkeypatch, one_device):
    """The same delegate inside LiteRT's interpreter: "auto" keeps the app running on the delegate's CPU
    fallback; an explicit backend makes LiteRT refuse the delegate with our message."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    d = gd.GpuDelegate(backend="auto")
    if d.backend is None:
        pytest.skip("no GPU backend")

    refuse_compiles(monkeypatch, d.backend)
    it = litert.Interpreter(model_content=small_model(), experimental_delegates=[d])
    it.allocate_tensors()
    x = make_input(15)
    check(run(it, x), x, "LiteRT with a failing device")
    explicit = gd.GpuDelegate(backend=d.backend_name)
    refuse_compiles(monkeypatch, explicit.backend)
    with pytest.raises((RuntimeError, ValueError), match="cannot run nodes 0-4: .*simulated"):
        it = litert.Interpreter(model_content=small_model(), experimental_delegates=[explicit])
        it.allocate_tensors()


# -- what the fuzzer found, kept fixed ---------------------------------------------------------------------------

def test_a_node_of_constants_is_computed_right(backend):
    """LOGISTIC of a constant feeding an ADD: the GPU lowerings read a data input from a buffer nothing fills
    for a constant (they computed on zeros); such a node is computed once at allocation ("folded"), not on
    the GPU."""
    c = np.linspace(-2, 2, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    mb = ModelBuilder()
    x = mb.input("x", [1, 2, 3, 4])
    k, y = mb.tensor("k", [1, 2, 3, 4]), mb.tensor("y", [1, 2, 3, 4])
    mb.op("LOGISTIC", [mb.const("c", c)], [k])
    mb.op("ADD", [x, k], [y])
    mb.output(y)
    it = interpreter(mb.build(), gd.GpuDelegate(backend=backend))
    assert [d["backend"] for d in it.get_ops_details()] == ["folded", backend]
    x = make_input(16, (1, 2, 3, 4))
    [y] = run(it, x)
    np.testing.assert_allclose(y, x + 1 / (1 + np.exp(-c)), rtol=0, atol=1e-6)


def test_an_empty_tensor_runs_the_partition_on_the_cpu(backend):
    """A slice that comes out empty (begin past the end): the GPU holds no empty tensor, so the partition
    runs on the CPU kernels, whatever the backend choice, and says why."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 5, 3])
    s, y = mb.tensor("s", [1, 4, 1, 3]), mb.tensor("y", [1, 4, 3])
    i32 = np.int32
    mb.op("STRIDED_SLICE", [x, mb.const("b", np.array([0, 0, 5, 0], i32)), mb.const("e", np.array([1, 4, 5, 3], i32)),
                            mb.const("st", np.array([1, 1, 1, 1], i32))], [s])
    mb.op("SUM", [s, mb.const("ax", np.array([2], i32))], [y], keep_dims=False)
    mb.output(y)
    it = interpreter(mb.build(), gd.GpuDelegate(backend=backend))
    assert on(it) == {"cpu"} and "is empty" in it.cpu_reasons()[0], it.cpu_reasons()
    x = make_input(17, (1, 4, 5, 3))
    [y] = run(it, x)
    np.testing.assert_array_equal(y, x[:, :, 5:, :].sum(2))


def test_a_malformed_node_is_refused_not_lowered(backend):
    """A RESIZE_NEAREST_NEIGHBOR missing its size input: gpu_support indexed past the inputs (IndexError);
    now the op's own check runs first, and the model is refused with a ModelError naming the node."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3])
    y = mb.tensor("y", [1, 8, 8, 3])
    mb.op("RESIZE_NEAREST_NEIGHBOR", [x], [y])
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"node 0 \(RESIZE_NEAREST_NEIGHBOR\)"):
        gd.Interpreter(model_content=mb.build(), experimental_delegates=[gd.GpuDelegate(backend=backend)])


def test_fp16_weights_after_a_cpu_node(backend):
    """Found by the fuzzer on MobileNet fp16 / face detection: an op the GPU lacks (then CUMSUM, now ATAN2) before
    a conv whose fp16 weights go through DEQUANTIZE. The conv must run on the GPU with its weights folded."""
    rng = np.random.default_rng(18)
    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 8, 4])
    c = mb.tensor("c", [1, 8, 8, 4])
    mb.op("ATAN2", [x, mb.const("ones", np.ones([1, 8, 8, 4], np.float32))], [c])
    w = mb.tensor("w", [6, 3, 3, 4])
    mb.op("DEQUANTIZE", [mb.const("w16", rng.standard_normal((6, 3, 3, 4)).astype(np.float16))], [w])
    y = mb.tensor("y", [1, 8, 8, 6])
    mb.op("CONV_2D", [c, w, mb.const("b", np.zeros(6, np.float32))], [y], padding="SAME", stride_w=1, stride_h=1)
    mb.output(y)
    content = mb.build()
    x = make_input(18, (1, 8, 8, 4))
    it = interpreter(content, gd.GpuDelegate(backend=backend))
    assert [d["backend"] for d in it.get_ops_details()] == ["cpu", backend, backend]
    np.testing.assert_allclose(run(it, x)[0], run_litert(content, [x])[0], rtol=0, atol=1e-4)


def test_quantization_on_an_axes_tensor_is_ignored(backend):
    """A MEAN whose int32 axes tensor carries a quantization: TFLite reads axes raw; the GPU lowering
    dequantized them into float indices (TypeError)."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 5, 6])
    y = mb.tensor("y", [1, 1, 1, 6])
    mb.op("MEAN", [x, mb.const("axes", np.array([1, 2], np.int32), scale=0.1, zero_point=0)], [y], keep_dims=True)
    mb.output(y)
    it = interpreter(mb.build(), gd.GpuDelegate(backend=backend))
    assert on(it) == {backend}
    x = make_input(19, (1, 4, 5, 6))
    np.testing.assert_allclose(run(it, x)[0], x.mean(axis=(1, 2), keepdims=True), rtol=0, atol=1e-6)


def test_a_shape_deeper_than_declared_runs_on_the_cpu(backend):
    """A RESHAPE to rank 5 whose output tensor declares rank 4: the support check sees rank 4, the inputs
    give rank 5, which no PHWC4 tensor holds; the partition runs on the CPU instead of failing."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 2, 3, 4])
    r, y = mb.tensor("r", [1, 2, 3, 4]), mb.tensor("y", [1, 2, 3, 4])
    mb.op("RESHAPE", [x, mb.const("shape", np.array([1, 1, 2, 3, 4], np.int32))], [r])
    mb.op("RELU", [r], [y])
    mb.output(y)
    it = interpreter(mb.build(), gd.GpuDelegate(backend=backend))
    x = make_input(20, (1, 2, 3, 4))
    [y] = run(it, x)
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(1, 1, 2, 3, 4))


def test_an_absurd_dilation_stays_on_the_cpu(backend):
    """A depthwise conv with dilation 2^31 - 1: the GPU's int32 tap offsets overflowed (a wrong answer)."""
    w = np.random.default_rng(21).standard_normal((1, 3, 3, 4)).astype(np.float32)
    mb = ModelBuilder()
    x = mb.input("x", [1, 5, 6, 4])
    y = mb.tensor("y", [1, 5, 6, 4])
    mb.op("DEPTHWISE_CONV_2D", [x, mb.const("w", w), mb.const("b", np.zeros(4, np.float32))], [y], padding="SAME",
          stride_w=1, stride_h=1, depth_multiplier=1, dilation_w_factor=2**31 - 1, dilation_h_factor=1)
    mb.output(y)
    content = mb.build()
    it = interpreter(content, gd.GpuDelegate(backend=backend))
    assert [d["backend"] for d in it.get_ops_details()] == ["cpu"]
    assert "dilation" in it.cpu_reasons()[0]
    x = make_input(22, (1, 5, 6, 4))
    np.testing.assert_allclose(run(it, x)[0], run_litert(content, [x])[0], rtol=0, atol=1e-5)
