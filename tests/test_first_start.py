"""First start (issue 17): a partition's OpenCL kernels build as one program, every compile happens at
preparation (the first invoke builds and first-launches nothing), the device fingerprint holds stable facts only,
each stage of preparation is reported, and PoCL's programs are left to its own kernel cache. A process builds a
program once, whichever delegates ask for it (issue 18, item 11).

References: outputs against LiteRT; what is compiled and launched when, by spying on the backend's primitives
or on the driver's entry points.
"""

import gc
import json
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import gpu_delegate as gd
from gpu_delegate import cache as cache_mod
from gpu_delegate import progress as progress_mod
from gpu_delegate import runner as runner_mod
from gpu_delegate.backends import Arg, KernelSpec, codegen, compile_worker, create_backend, opencl, opengl
from gpu_delegate.backends.base import ProgramCache, device_fingerprint
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, run, run_litert


def block_model(depthwise_first: bool = False) -> bytes:
    """Kernels of one file at several shapes and with different fused post-ops (RELU6, a residual ADD), and of
    other files: the program of the partition must keep each kernel's defines and helpers its own.
    ``depthwise_first``: the input goes through a depthwise convolution (a kernel that reads it from PHWC4: a
    conversion at the boundary) before the first convolution, which would otherwise read it as the host wrote it
    (lowering/dense_inputs.py)."""
    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    x = mb.input("x", [1, 12, 10, 6])
    if depthwise_first:
        dw = mb.tensor("dw0", [1, 12, 10, 6])
        mb.op("DEPTHWISE_CONV_2D", [x, mb.const("dw0_w", rng.standard_normal((1, 3, 3, 6)).astype(np.float32)),
                                    mb.const("dw0_b", rng.standard_normal(6).astype(np.float32))], [dw],
              padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
        x = dw

    def conv(name, src, cin, cout, k, stride, act, out_hw):
        out = mb.tensor(name, [1, *out_hw, cout])
        mb.op("CONV_2D", [src, mb.const(name + "_w", rng.standard_normal((cout, k, k, cin)).astype(np.float32) * .3),
                          mb.const(name + "_b", rng.standard_normal(cout).astype(np.float32))], [out],
              padding="SAME", stride_w=stride, stride_h=stride, fused_activation_function=act)
        return out

    a = conv("a", x, 6, 8, 3, 2, "RELU6", (6, 5))
    b = conv("b", a, 8, 8, 1, 1, "NONE", (6, 5))
    s = mb.tensor("s", [1, 6, 5, 8])
    mb.op("ADD", [a, b], [s])
    d = mb.tensor("d", [1, 6, 5, 8])
    mb.op("DEPTHWISE_CONV_2D", [s, mb.const("dw", rng.standard_normal((1, 3, 3, 8)).astype(np.float32)),
                                mb.const("db", rng.standard_normal(8).astype(np.float32))], [d],
          padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function="RELU")
    c = conv("c", d, 8, 5, 1, 1, "RELU6", (6, 5))
    y = mb.tensor("y", [1, 1, 1, 5])
    mb.op("MEAN", [c, mb.const("axes", np.array([1, 2], np.int32))], [y], keep_dims=True)
    mb.output(y, c)
    return mb.build()


def codes_model() -> bytes:
    """int8 codes in (dequantized on the device by a conversion kernel of their own), int8 codes out."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 6, 5], np.int8, scale=[0.05], zero_point=[3])
    y = mb.tensor("y", [1, 4, 3, 5], np.int8, scale=[0.05], zero_point=[3])
    mb.op("AVERAGE_POOL_2D", [x], [y], padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    mb.output(y)
    return mb.build()


BLOCK = block_model()
BLOCK_INPUTS = [np.random.default_rng(8).standard_normal((1, 12, 10, 6)).astype(np.float32)]
CODES = codes_model()
CODES_INPUTS = [np.random.default_rng(9).integers(-128, 128, (1, 8, 6, 5)).astype(np.int8)]


def runner_of(it):
    (kernel,) = [s.kernel for s in it._steps if hasattr(s, "kernel")]
    return kernel.runner


def test_one_program_per_partition_on_opencl(one_device):
    content = block_model(depthwise_first=True)
    d = gd.GpuDelegate(backend="cl")
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    out = run(it, BLOCK_INPUTS)
    assert {o["backend"] for o in it.get_ops_details()} == {"cl"}
    r = runner_of(it)
    assert len({p.source for p in r.programs}) >= 4  # distinct kernels...
    assert len({p.unit for p in r.programs}) == 1  # ...in one driver program
    conversions = list(d.backend._convert.values())  # the boundary's, built with the kernels
    assert conversions and {p.unit for p in conversions} == {r.programs[0].unit}
    for ours, ref in zip(out, run_litert(content, BLOCK_INPUTS)):
        assert_float_close(ours, ref, 1e-4, what="kernels of one program")


def test_a_program_that_fails_to_build_is_built_kernel_by_kernel(monkeypatch, caplog):
    """A bundle the driver refuses costs a warning and one build per kernel, never a wrong answer."""
    bundle = codegen.opencl_bundle
    monkeypatch.setattr(codegen, "opencl_bundle", lambda kernels: bundle(kernels) + "#error refused\n")
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        it = gd.Interpreter(model_content=BLOCK, experimental_delegates=[gd.GpuDelegate(backend="cl")])
        out = run(it, BLOCK_INPUTS)
    assert any("building them one by one" in r.getMessage() for r in caplog.records)
    r = runner_of(it)
    assert len({p.unit for p in r.programs}) == len({p.source for p in r.programs}) > 1
    for ours, ref in zip(out, run_litert(BLOCK, BLOCK_INPUTS)):
        assert_float_close(ours, ref, 1e-4, what="kernels built one by one")


def test_program_bundles_respect_their_bounds(monkeypatch):
    """At most bundle_kernels kernels per driver program: a partition of more builds as several."""
    from gpu_delegate.backends.opencl import OpenCLBackend

    monkeypatch.setattr(OpenCLBackend, "bundle_kernels", 2)
    it = gd.Interpreter(model_content=BLOCK, experimental_delegates=[gd.GpuDelegate(backend="cl")])
    out = run(it, BLOCK_INPUTS)
    r = runner_of(it)
    per_unit: dict[str, set[str]] = {}
    for p in r.programs:
        per_unit.setdefault(p.unit, set()).add(p.source)
    assert len(per_unit) > 1 and max(len(s) for s in per_unit.values()) <= 2
    for ours, ref in zip(out, run_litert(BLOCK, BLOCK_INPUTS)):
        assert_float_close(ours, ref, 1e-4, what="two kernels per program")


def test_file_scope_names():
    text = """
    #define twice(x) (2 * (x))
    typedef struct { float16 even, odd; } PAIR;
    FLT4 dst_finish(FLT4 v, int i BUFS_DECL);  // a prototype
    /* float commented(int x) { } */
    __attribute__((always_inline)) inline float16 dst_finish16(float16 v, int4 i) { return v; }
    float4 * pick(int k) { if (k) { return helper(k); } return 0; }
    __kernel void conv(__global float4* restrict src_buf) { int j = twice(get_global_id(0)); }
    """
    assert codegen.file_scope_names(text) == ["PAIR", "dst_finish", "dst_finish16", "pick", "conv"]


@pytest.mark.parametrize("content, inputs", [(BLOCK, BLOCK_INPUTS), (CODES, CODES_INPUTS)], ids=["float", "codes"])
def test_the_first_invoke_compiles_and_first_launches_nothing(backend, monkeypatch, content, inputs):
    """Drivers compile at a kernel's first launch too (PoCL per work-group size, llvmpipe its machine code):
    preparation runs every program once, and builds the boundary's conversions, so the first invoke is as
    quick as the next."""
    builds: list[str] = []
    launched: set[int] = set()
    cls = type(create_backend(backend))
    for name in ("_build", "_build_bundle"):
        primitive = getattr(cls, name)

        def spy_build(self, *args, _primitive=primitive, _name=name):
            builds.append(_name)
            return _primitive(self, *args)

        monkeypatch.setattr(cls, name, spy_build)
    launch_bound = cls._launch_bound

    def spy_launch(self, call):
        launched.add(id(call))
        return launch_bound(self, call)

    monkeypatch.setattr(cls, "_launch_bound", spy_launch)
    it = gd.Interpreter(model_content=content, experimental_delegates=[gd.GpuDelegate(backend=backend)])
    it.allocate_tensors()
    r = runner_of(it)
    assert builds, "preparation compiled nothing"
    assert {id(call) for call in r.bound} <= launched, "a kernel was first launched by the first invoke"
    builds.clear()
    out = run(it, inputs)
    assert builds == [], f"the first invoke compiled {builds}"
    for ours, ref in zip(out, run_litert(content, inputs)):
        if ours.dtype.kind == "f":
            assert_float_close(ours, ref, 1e-4, what=f"first invoke on {backend}")
        else:
            assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1


def test_device_fingerprint_holds_stable_facts_only(backend):
    info = create_backend(backend).device_info()
    drifted = dict(info, max_buffer_bytes=info["max_buffer_bytes"] - 4096, compute_units=info["compute_units"] + 1,
                   max_work_group_size=info["max_work_group_size"] // 2)
    assert device_fingerprint(drifted) == device_fingerprint(info)  # type: ignore[arg-type]
    for fact in ("name", "driver_version", "api_version"):
        assert device_fingerprint(dict(info, **{fact: info[fact] + "x"})) != device_fingerprint(info)  # type: ignore


def test_a_drifting_limit_keeps_the_cache_file(tmp_path):
    """PoCL's max_mem_alloc_size follows free memory: a start that reads another value must find the file
    the last start wrote, not make a new one (each a cold start)."""
    cold = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="drift")
    run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[cold]), BLOCK_INPUTS)
    warm = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="drift")
    warm.backend._info["max_buffer_bytes"] -= 1 << 20
    out = run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[warm]), BLOCK_INPUTS)
    assert warm.cache.hits == 1 and warm.cache.misses == 0
    assert len(list(tmp_path.glob("*.bin"))) == 1
    assert_float_close(out[0], run_litert(BLOCK, BLOCK_INPUTS)[0], 1e-4, what="warm start after a drift")


def test_each_stage_is_logged(backend, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="gpu_delegate.progress"):
        d = gd.GpuDelegate(backend=backend, serialization_dir=tmp_path, model_token="log")
        run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[d]), BLOCK_INPUTS)
    cold = [r.getMessage() for r in caplog.records if r.name == "gpu_delegate.progress"]
    for stage in ("cache miss", "planning", "compiling", "first launch", "storing"):
        assert any(m.startswith(f"{backend}: {stage}") for m in cold), (stage, cold)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gpu_delegate.progress"):
        d = gd.GpuDelegate(backend=backend, serialization_dir=tmp_path, model_token="log")
        run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[d]), BLOCK_INPUTS)
    warm = [r.getMessage() for r in caplog.records if r.name == "gpu_delegate.progress"]
    assert any(m.startswith(f"{backend}: cache hit") for m in warm), warm
    assert not any("planning" in m for m in warm), warm


@pytest.mark.parametrize("terminal", [True, False])
def test_a_bar_on_a_terminal_only(monkeypatch, capsys, terminal):
    monkeypatch.setattr(progress_mod, "stderr_is_terminal", lambda: terminal)
    monkeypatch.setattr(progress_mod, "BAR_DELAY_S", 0.0)
    p = progress_mod.Progress("cl", 65)
    p.stage("compiling 34 kernels", 34)
    p.advance(34)
    p.close()
    err = capsys.readouterr().err
    assert ("gpu_delegate cl: compiling 34 kernels" in err) == terminal, err


def test_no_bar_for_a_quick_preparation(monkeypatch, capsys):
    """A preparation done within BAR_DELAY_S (a warm start) shows nothing, even on a terminal."""
    monkeypatch.setattr(progress_mod, "stderr_is_terminal", lambda: True)
    monkeypatch.setattr(progress_mod, "BAR_DELAY_S", 60.0)
    p = progress_mod.Progress("cl", 65)
    p.stage("cache hit: x.bin")
    p.stage("loading 34 kernels", 34)
    p.advance(34)
    p.close()
    assert capsys.readouterr().err == ""


def test_the_cli_shows_preparation(tmp_path):
    path = tmp_path / "block.tflite"
    path.write_bytes(BLOCK)
    result = subprocess.run([sys.executable, "-m", "gpu_delegate", "benchmark", f"--graph={path}", "--use_gpu=true",
                             "--gpu_backend=cl", "--num_runs=1", "--warmup_runs=0"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "gpu_delegate cl: compiling" in result.stderr, result.stderr
    assert "gpu_delegate cl: first launch" in result.stderr, result.stderr


def program_binaries(path) -> list[str]:
    """The program binaries a cache file holds, by name (its checksum checked)."""
    header, _ = cache_mod._unpack(path.read_bytes())
    return [name for name, _, _ in header["blobs"] if name.startswith("bin:")]


def test_pocl_programs_are_left_to_its_kernel_cache(tmp_path, monkeypatch):
    """Asking PoCL for program binaries compiles every kernel a second time: the cache file holds none while
    PoCL's own kernel cache is on, and a warm start (which rebuilds from source, a lookup there) does not
    rewrite the file. With PoCL's cache off, the binaries are stored."""
    backend = create_backend("cl")
    if not backend.driver_caches_programs:
        pytest.skip("this OpenCL driver keeps no kernel cache of its own")
    d = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="pocl")
    run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[d]), BLOCK_INPUTS)
    (path,) = tmp_path.glob("*.bin")
    assert program_binaries(path) == []
    written = os.stat(path).st_mtime_ns
    warm = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="pocl")
    out = run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[warm]), BLOCK_INPUTS)
    assert warm.cache.hits == 1 and os.stat(path).st_mtime_ns == written
    assert_float_close(out[0], run_litert(BLOCK, BLOCK_INPUTS)[0], 1e-4, what="warm start on PoCL")

    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    off = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path / "off", model_token="pocl")
    run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[off]), BLOCK_INPUTS)
    (path,) = (tmp_path / "off").glob("*.bin")
    assert len(program_binaries(path)) == 1  # the partition's one program


# -- one build per program and process (issue 18, item 11) ------------------------------------------------------

def driver_builds(backend: str, monkeypatch, delay_s: float = 0.0) -> list[str]:
    """What the driver is asked to build or load from now on, spied at the API: the build of pyopencl's driver
    program object on OpenCL (backends/opencl.py builds through it; Program.build where pyopencl has none),
    glCompileShader and glProgramBinary on GL; each waits ``delay_s`` first."""
    builds: list[str] = []

    def spy(name, real):
        def call(*args, **kwargs):
            builds.append(name)
            time.sleep(delay_s)
            return real(*args, **kwargs)
        return call

    if backend == "cl":
        program = getattr(getattr(cl, "_cl", None), "_Program", cl.Program)
        monkeypatch.setattr(program, "build", spy("clBuildProgram", program.build))
    else:
        gl = opengl.open_context().gl
        for name in ("CompileShader", "ProgramBinary"):
            monkeypatch.setattr(gl, name, spy(f"gl{name}", getattr(gl, name)))
    return builds


def start_block(backend: str) -> list[np.ndarray]:
    """A delegate and an interpreter of BLOCK, run once and dropped."""
    return run(gd.Interpreter(model_content=BLOCK, experimental_delegates=[gd.GpuDelegate(backend=backend)]),
               BLOCK_INPUTS)


def test_a_delegate_made_again_builds_no_program(backend, monkeypatch, fresh_programs):
    """Each new GpuDelegate built all of its programs again: a start as slow as the first where the driver keeps
    no cache, and on PoCL ~100 KB leaked per delegate (LLVM keeps the metadata of every module it parses). A
    second delegate of the same model, made after the first is gone or while it lives, builds nothing."""
    builds = driver_builds(backend, monkeypatch)
    reference = run_litert(BLOCK, BLOCK_INPUTS)
    out = start_block(backend)
    first = len(builds)
    assert first > 0, "the first delegate built nothing"
    gc.collect()  # the first delegate, its interpreter and its programs' users are gone
    again = start_block(backend)
    alive = gd.GpuDelegate(backend=backend)
    it = gd.Interpreter(model_content=BLOCK, experimental_delegates=[alive])
    alongside = [start_block(backend), run(it, BLOCK_INPUTS)]
    assert builds[first:] == [], f"later delegates built {builds[first:]}"
    for outputs in (out, again, *alongside):
        for ours, ref in zip(outputs, reference):
            assert_float_close(ours, ref, 1e-4, what=f"a delegate sharing programs on {backend}")


def test_delegates_made_on_several_threads_build_each_program_once(backend, monkeypatch, fresh_programs):
    """Interpreters created on four threads at once: one builds each program while the others wait for it."""
    builds = driver_builds(backend, monkeypatch, delay_s=0.2)  # the others arrive while a build runs
    start_block(backend)
    alone = len(builds)
    fresh_programs()
    builds.clear()
    ready = threading.Barrier(4)

    def start(_: int) -> list[np.ndarray]:
        ready.wait()
        return start_block(backend)

    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(start, range(4)))
    assert len(builds) == alone, builds
    reference = run_litert(BLOCK, BLOCK_INPUTS)
    for out in outputs:
        for ours, ref in zip(out, reference):
            assert_float_close(ours, ref, 1e-4, what=f"a delegate made on a thread on {backend}")


def test_a_program_is_shared_within_its_context_only(monkeypatch, fresh_programs):
    """A program belongs to the context and device it was built for: a backend on another context builds its
    own (a program of another context fails to launch there, or on another device, runs the wrong code)."""
    square = KernelSpec("square", "y_write(GID_X, x_read(GID_X) * x_read(GID_X));", [Arg("x", "in"), Arg("y", "out")],
                        (3, 1, 1))
    first = create_backend("cl")
    context, device = opencl.open_device()
    monkeypatch.setattr(opencl, "open_device", lambda: (cl.Context([device]), device))
    other = create_backend("cl")
    assert other.context != context
    builds = driver_builds("cl", monkeypatch)
    mine, theirs = first.compile(square), other.compile(square)
    assert len(builds) == 2 and mine.handle[0] is not theirs.handle[0]
    x = np.arange(12, dtype=np.float32) - 4
    for be, program in ((first, mine), (other, theirs)):
        xb, yb = be.alloc(3), be.alloc(3)
        be.upload(xb, x)
        program([xb, yb])
        np.testing.assert_array_equal(be.download(yb), x * x)
        be.close()


def test_programs_nobody_holds_are_kept_within_a_bound():
    """What no backend holds stays for the next one up to kept_chars characters of program text, the least
    recently used going first (the newest always stays); what a backend holds is shared however many there are."""

    class Built:
        pass

    built: list[str] = []

    def build(name: str):
        def make() -> Built:
            built.append(name)
            return Built()
        return make

    cache: ProgramCache[Built] = ProgramCache(kept_chars=100)
    held = cache.get("a", 60, build("a"))
    cache.get("b", 60, build("b"))  # 120 characters: a is no longer kept, but its user holds it
    assert cache.get("a", 60, build("a")) is held  # used last now: b is dropped, and nobody holds it
    del held
    gc.collect()
    cache.get("a", 60, build("a"))  # kept
    cache.get("b", 60, build("b"))  # built again
    cache.get("huge", 500, build("huge"))  # more than the bound alone: kept while it is the newest
    cache.get("huge", 500, build("huge"))
    assert built == ["a", "b", "b", "huge"]


# -- numba compiles what the CPU path runs, and nothing else ------------------------------------------------------

def depthwise_3x3_model() -> bytes:
    rng = np.random.default_rng(11)
    mb = ModelBuilder()
    x = mb.input("x", [1, 9, 8, 6])
    y = mb.tensor("y", [1, 5, 4, 6])
    mb.op("DEPTHWISE_CONV_2D", [x, mb.const("w", rng.standard_normal((1, 3, 3, 6)).astype(np.float32)),
                                mb.const("b", rng.standard_normal(6).astype(np.float32))], [y],
          padding="SAME", stride_w=2, stride_h=2, depth_multiplier=1, fused_activation_function="RELU6")
    mb.output(y)
    return mb.build()


def depthwise_files(tmp_path, seed: int) -> tuple[bytes, Path, np.ndarray]:
    """The 3x3 depthwise model written to dw.tflite and an input saved as x.npy, for a fresh process to read."""
    content = depthwise_3x3_model()
    path = tmp_path / "dw.tflite"
    path.write_bytes(content)
    x = np.random.default_rng(seed).standard_normal((1, 9, 8, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return content, path, x


def test_a_3x3_depthwise_compiles_only_its_kernel(tmp_path):
    """A first start on the CPU path after install compiles every numba kernel it reaches: the depthwise kernel
    for any filter size was compiled with the 3x3 one that MobileNets use (2.1 s together), and the border
    helper twice (a literal argument). A fresh process running 3x3 filters compiles neither extra."""
    content, path, x = depthwise_files(tmp_path, seed=12)
    script = f"""
import json, numpy as np, gpu_delegate as gd
from gpu_delegate.cpu import conv
it = gd.Interpreter(model_path={str(path)!r})
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.load({str(tmp_path / "x.npy")!r}))
it.invoke()
np.save({str(tmp_path / "y.npy")!r}, it.get_tensor(it.get_output_details()[0]["index"]))
print(json.dumps({{f.py_func.__name__: len(f.signatures) for f in
                  (conv._depthwise_3x3, conv._depthwise_rows, conv._depthwise_pixels, conv._clamp_rows)}}))
"""
    # an empty numba cache, as after install: the callees a kernel is compiled with show in their signatures
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    compiled = json.loads(result.stdout.splitlines()[-1])
    assert compiled == {"_depthwise_3x3": 1, "_depthwise_rows": 0, "_depthwise_pixels": 1, "_clamp_rows": 1}
    assert_float_close(np.load(tmp_path / "y.npy"), run_litert(content, [x])[0], 1e-5, what="3x3 depthwise on the CPU")


# -- numba is imported when a CPU kernel first runs, not with the package ----------------------------------------

def python(script: str, **env: str) -> str:
    """``script``'s last line of output, run in a fresh process."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, **env))
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[-1]


def test_importing_the_package_imports_neither_numba_nor_a_driver():
    """numba is most of the import time, and a model wholly on the GPU never needs it; the drivers' modules are
    imported by the backend that uses them."""
    script = "import sys, gpu_delegate; print([m for m in ('numba', 'pyopencl', 'moderngl') if m in sys.modules])"
    assert python(script) == "[]"


def test_a_model_wholly_on_the_gpu_never_imports_numba(backend, tmp_path):
    path = tmp_path / "block.tflite"
    path.write_bytes(BLOCK)
    np.save(tmp_path / "x.npy", BLOCK_INPUTS[0])
    script = f"""
import sys, numpy as np, gpu_delegate as gd
it = gd.Interpreter(model_path={str(path)!r}, experimental_delegates=[gd.GpuDelegate(backend={backend!r})])
it.allocate_tensors()
assert all(op["backend"] == {backend!r} for op in it.get_ops_details()), it.get_ops_details()
it.set_tensor(it.get_input_details()[0]["index"], np.load({str(tmp_path / "x.npy")!r}))
it.invoke()
np.save({str(tmp_path / "y.npy")!r}, it.get_tensor(it.get_output_details()[0]["index"]))
print("numba" in sys.modules)
"""
    assert python(script) == "False"
    assert_float_close(np.load(tmp_path / "y.npy"), run_litert(BLOCK, BLOCK_INPUTS)[0], 1e-4, what="block on the GPU")


def test_the_first_cpu_kernel_imports_numba_with_the_thread_count_asked_for(tmp_path):
    """The interpreter's num_threads, set before numba was imported, holds once the first kernel imports it; the
    kernels calling other modules' kernels inside numba (the depthwise's border and clamp helpers) compile."""
    content, path, x = depthwise_files(tmp_path, seed=13)
    script = f"""
import sys, numpy as np, gpu_delegate as gd
it = gd.Interpreter(model_path={str(path)!r}, num_threads=1)
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.load({str(tmp_path / "x.npy")!r}))
before = "numba" in sys.modules
it.invoke()
np.save({str(tmp_path / "y.npy")!r}, it.get_tensor(it.get_output_details()[0]["index"]))
import numba
print(before, numba.get_num_threads())
"""
    # numba's cache empty: a kernel loaded from it is not typed again, and its callees would not be looked at
    assert python(script, NUMBA_NUM_THREADS="2", NUMBA_CACHE_DIR=str(tmp_path / "numba")) == "False 1"
    assert_float_close(np.load(tmp_path / "y.npy"), run_litert(content, [x])[0], 1e-5, what="3x3 depthwise on the CPU")


# -- a compile worker on two cores (issue 17) --------------------------------------------------------------------

def need_first_launch_cache(kind: str) -> None:
    """Skip where the driver keeps no disk cache of first launches (a GPU driver compiles at the link): no compile
    worker starts there, and none could help."""
    if not create_backend(kind).first_launch_disk_cache:
        pytest.skip(f"this {kind} driver keeps no disk cache of its first launches: a compile worker never starts")


@pytest.fixture
def workers(monkeypatch):
    """A compile worker for BLOCK (whose partition is under WORKER_KERNELS), its kernels in programs of 2; the
    odd first launches left to the worker (this process never claims them, so it waits for the worker's); every
    worker collected once closed."""
    monkeypatch.delenv(compile_worker.SWITCH, raising=False)  # conftest's "0"
    monkeypatch.setenv(opencl.SMALL_DEVICE_SWITCH, "0")  # a worker builds for the main device only
    monkeypatch.setattr(runner_mod, "WORKER_KERNELS", 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # whatever else this host runs
    monkeypatch.setattr(runner_mod, "WORKER_PROGRAMS", 4)
    claim = compile_worker._claim
    monkeypatch.setattr(compile_worker, "_claim",
                        lambda claims, name: (not isinstance(name, int) or name % 2 == 0) and claim(claims, name))
    closed: list[compile_worker.CompileWorker] = []
    close = compile_worker.CompileWorker.close

    def spy_close(self):
        close(self)
        closed.append(self)

    monkeypatch.setattr(compile_worker.CompileWorker, "close", spy_close)
    return closed


def worker_processes() -> list[int]:
    """Processes running this package's compile worker, this process's children or not."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and compile_worker.__name__.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def test_a_compile_worker_shares_the_first_start(backend, workers, fresh_programs, tmp_path, monkeypatch):
    """The worker builds programs and does the odd first launches into the driver's disk cache, then exits; this
    process builds the same program texts: the results are those of a start without a worker, and LiteRT's."""
    need_first_launch_cache(backend)
    # the worker's own driver cache (this process's drivers read their variables once, long before)
    monkeypatch.setenv("POCL_CACHE_DIR" if backend == "cl" else "MESA_SHADER_CACHE_DIR", str(tmp_path))
    out = start_block(backend)
    # PoCL's work-group functions, a shared object per kernel and size, exist only once a kernel was launched
    assert list(tmp_path.rglob("*.so" if backend == "cl" else "*")), "the worker filled no cache"
    (worker,) = workers
    # ended: on its own, or killed once it had finished what it claimed
    assert worker.process is not None and worker.process.returncode in (0, -9)
    # every odd launch is the worker's (this process never claims one); an even one too where it claimed it first
    # (it starts from the last)
    odd = set(range(1, len(compile_worker.tasks(worker.groups)), 2))
    assert odd and odd <= worker.done_there, f"the worker did {sorted(worker.done_there)}, not every odd launch"
    assert not worker.claims.exists() and len(worker.groups) >= 3
    assert worker.process.pid not in worker_processes(), "the worker outlived the start"
    fresh_programs()
    monkeypatch.setenv(compile_worker.SWITCH, "0")
    alone = start_block(backend)
    assert len(workers) == 1, "a worker despite the switch"
    for ours, single, ref in zip(out, alone, run_litert(BLOCK, BLOCK_INPUTS)):
        np.testing.assert_array_equal(ours, single)
        assert_float_close(ours, ref, 1e-4, what=f"a start shared with a compile worker on {backend}")


def test_a_worker_that_fails_changes_nothing_but_the_time(workers, monkeypatch, fresh_programs):
    need_first_launch_cache("cl")
    monkeypatch.setattr(compile_worker, "WORKER", "import sys; sys.exit(3)")
    out = start_block("cl")
    (worker,) = workers
    assert worker.process is not None and worker.process.returncode == 3 and not worker.done_there
    for ours, ref in zip(out, run_litert(BLOCK, BLOCK_INPUTS)):
        assert_float_close(ours, ref, 1e-4, what="a start whose compile worker failed")


@pytest.mark.parametrize("claimed", ["1", "build0"])
def test_a_stuck_worker_is_killed(workers, monkeypatch, fresh_programs, caplog, claimed):
    """A worker that claimed a first launch (or the build of a program) and never finishes it is waited for a
    while, then killed; this process compiles that launch (that program) itself."""
    need_first_launch_cache("gl")
    monkeypatch.setattr(compile_worker, "WAIT_MIN_S", 0.5)
    monkeypatch.setattr(compile_worker, "WORKER", "import pathlib, sys, time; "
                        f"(pathlib.Path(sys.argv[2]).parent / {claimed!r}).touch(); time.sleep(600)")
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        out = start_block("gl")
    assert time.perf_counter() - t0 < 60
    (worker,) = workers
    assert worker.process is not None and worker.process.returncode == -9
    assert worker.process.pid not in worker_processes()
    assert any("did not finish" in r.getMessage() for r in caplog.records)
    for ours, ref in zip(out, run_litert(BLOCK, BLOCK_INPUTS)):
        assert_float_close(ours, ref, 1e-4, what="a start whose compile worker hung")


def test_no_worker_where_it_cannot_help(backend, monkeypatch):
    """One core, busy cores, the switch off, the driver's disk cache off, or no Python interpreter to start: no
    worker; nor with a driver that keeps no disk cache of its first launches (a GPU's)."""
    monkeypatch.delenv(compile_worker.SWITCH, raising=False)  # conftest's "0"
    monkeypatch.setenv(opencl.SMALL_DEVICE_SWITCH, "0")  # a worker builds for the main device only
    b = create_backend(backend)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 0.0, 0.0))
    if not b.first_launch_disk_cache:
        monkeypatch.setenv(compile_worker.SWITCH, "1")
        assert not compile_worker.wanted(b), "a worker for a driver whose compiles it cannot share"
        return
    assert compile_worker.wanted(b), "two cores, one of them idle, and the driver's cache on: a worker would help"
    with monkeypatch.context() as m:
        m.setattr(os, "sched_getaffinity", lambda pid: {0})
        assert not compile_worker.wanted(b)
    with monkeypatch.context() as m:
        m.setattr(os, "getloadavg", lambda: (1.7, 0.0, 0.0))
        m.setattr(compile_worker, "_idle_cores_now", lambda: 0.3)  # busy now too
        assert not compile_worker.wanted(b)
        m.setattr(compile_worker, "_idle_cores_now", lambda: None)  # no /proc/stat: the average decides
        assert not compile_worker.wanted(b)
        m.setattr(compile_worker, "_idle_cores_now", lambda: 0.95)  # the average is of processes gone by now
        assert compile_worker.wanted(b)
        m.setattr(compile_worker, "_idle_cores_now", lambda: 0.3)
        m.setenv(compile_worker.SWITCH, "1")  # asked for: busy cores or not
        assert compile_worker.wanted(b)
    with monkeypatch.context() as m:
        m.setenv(compile_worker.SWITCH, "0")
        assert not compile_worker.wanted(b)
    with monkeypatch.context() as m:
        m.setenv("POCL_KERNEL_CACHE" if backend == "cl" else "MESA_SHADER_CACHE_DISABLE",
                 "0" if backend == "cl" else "true")
        assert not compile_worker.wanted(b)
    with monkeypatch.context() as m:
        m.setattr(sys, "executable", "/usr/bin/some-app")
        assert not compile_worker.wanted(b)


def test_a_program_group_builds_the_text_of_the_whole(fresh_programs):
    """compile_all of each of program_groups' groups builds the very programs (same units, same text) that
    compile_all of them all builds: what the worker builds is what this process then looks up."""
    it = gd.Interpreter(model_content=BLOCK, experimental_delegates=[gd.GpuDelegate(backend="cl")])
    it.allocate_tensors()
    specs = [p.spec for p in runner_of(it).programs]
    whole = create_backend("cl")
    groups = whole.program_groups(specs, 2)
    assert len(groups) >= 3 and all(len(g) <= 2 for g in groups)
    programs, _ = whole.compile_all(specs, bundle_kernels=2)
    parts = create_backend("cl")
    pieces = [p for g in groups for p in parts.compile_all(g, bundle_kernels=len(g))[0]]
    assert {p.unit for p in pieces} == {p.unit for p in programs}
    assert len({p.unit for p in programs}) == len(groups)


def test_every_start_builds_the_programs_a_worker_shares(workers, monkeypatch, fresh_programs, tmp_path):
    """A start without a worker (a plan from the serialization dir, busy cores) builds the very programs a start
    with one built: their texts are what the driver's disk cache was filled with (a start of other programs missed
    it wholly: face_detection_short_range's first warm start on PoCL took 4.9 s instead of 0.15)."""
    need_first_launch_cache("cl")

    def units(serialization_dir=None) -> set[str]:
        d = gd.GpuDelegate(backend="cl", serialization_dir=serialization_dir, model_token="shared")
        it = gd.Interpreter(model_content=BLOCK, experimental_delegates=[d])
        it.allocate_tensors()
        return {p.unit for p in runner_of(it).programs}

    shared = units(tmp_path)
    assert len(workers) == 1 and len(shared) >= 3
    fresh_programs()
    assert units(tmp_path) == shared  # the plan from the dir
    fresh_programs()
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(compile_worker, "_idle_cores_now", lambda: 0.0)
    assert units() == shared  # busy cores
    assert len(workers) == 1, "a worker for a cached plan or on busy cores"


def test_more_kernels_than_the_driver_keeps_loaded_are_reported(monkeypatch, caplog):
    """A plan of more distinct kernels than the driver keeps loaded (PoCL: 128) reloads one at every dispatch:
    the start says so in the log, and a plan within the limit says nothing."""
    from gpu_delegate.backends.opencl import OpenCLBackend

    for limit, said in ((2, True), (1000, False)):
        monkeypatch.setattr(OpenCLBackend, "loaded_kernels", limit)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="gpu_delegate"):
            start_block("cl")
        assert any("the driver keeps loaded" in r.getMessage() for r in caplog.records) == said


def chain_model(channels: list[int]) -> bytes:
    """1x1 convolutions one after another, of these channel counts, on 5x4 pixels: one kernel file, one shape but
    for the channels."""
    rng = np.random.default_rng(11)
    mb = ModelBuilder()
    t = mb.input("x", [1, 5, 4, channels[0]])
    for k, (cin, cout) in enumerate(zip(channels, channels[1:])):
        out = mb.tensor(f"t{k}", [1, 5, 4, cout])
        mb.op("CONV_2D", [t, mb.const(f"w{k}", rng.standard_normal((cout, 1, 1, cin)).astype(np.float32) * .3),
                          mb.const(f"b{k}", rng.standard_normal(cout).astype(np.float32))], [out],
              padding="VALID", stride_w=1, stride_h=1, fused_activation_function="RELU")
        t = out
    mb.output(t)
    return mb.build()


def test_a_crowded_plan_shares_its_1x1_convolutions(monkeypatch):
    """Past the kernels the driver keeps loaded, the 1x1 convolutions take their channel counts at run time and
    share programs (// @runtime_channels crowded); within it they keep their constants. LiteRT's results either way."""
    from gpu_delegate.backends.opencl import OpenCLBackend

    content = chain_model([4, 8, 12, 16, 20, 24])
    x = np.random.default_rng(12).standard_normal((1, 5, 4, 4)).astype(np.float32)
    want = run_litert(content, [x])[0]
    for limit, generic in ((1000, False), (1, True)):
        monkeypatch.setattr(OpenCLBackend, "loaded_kernels", limit)
        it = gd.Interpreter(model_content=content, experimental_delegates=[gd.GpuDelegate(backend="cl")])
        got = run(it, [x])[0]
        convs = [p for p in runner_of(it).programs if p.name == "conv2d_1x1"]
        assert len(convs) == 5 and any(p.spec.runtime_channels for p in convs) == generic
        if generic:
            assert len({p.source for p in convs}) < 5
        assert_float_close(got, want, 1e-4, what=f"1x1 chain, loaded-kernel limit {limit}")
