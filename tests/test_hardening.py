"""Hardening (issue 18): the serialization cache as a target (files swapped or replaced, directories other users
can write, FIFOs, foreign files, odd tokens), fused chains longer than the device binds, preparation time that
grows with the graph, and native memory over many interpreters.

References: LiteRT for what a model computes, numpy formulas for the long chains; never our own CPU path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate import cache as cache_mod
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, on_cpu_opencl, run, run_litert, runner_of

ROOT = Path(__file__).resolve().parents[1]
SHAPE = [1, 6, 5, 7]
X = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)


def affine_model(scale: float, shift: float) -> bytes:
    """y = relu(x * scale + shift): models A and B differ only in their constants, so one's plan runs the other."""
    mb = ModelBuilder()
    x = mb.input("x", SHAPE)
    m, a, y = (mb.tensor(n, SHAPE) for n in "may")
    mb.op("MUL", [x, mb.const("scale", np.full(7, scale, np.float32))], [m])
    mb.op("ADD", [m, mb.const("shift", np.full(7, shift, np.float32))], [a])
    mb.op("RELU", [a], [y])
    mb.output(y)
    return mb.build()


MODEL_A, MODEL_B = affine_model(2.0, 0.5), affine_model(-3.0, 1.0)


def start(content: bytes, directory, token: str | None, backend: str = "cl"):
    d = gd.GpuDelegate(backend=backend, serialization_dir=directory, model_token=token)
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    (out,) = run(it, [X])
    assert {o["backend"] for o in it.get_ops_details()} == {backend}
    return d, out


def bins(directory) -> list[str]:
    return sorted(p for p in os.listdir(directory) if p.endswith(".bin"))


@pytest.fixture(scope="module")
def reference() -> dict[bytes, np.ndarray]:
    return {m: run_litert(m, [X])[0] for m in (MODEL_A, MODEL_B)}


def warnings_of(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


# -- item 1: a cache file's content is tied to its name; an untrusted directory is not used ------------------------

@pytest.mark.parametrize("how", ["swap-tokens", "copy-same-token"])
def test_a_cache_file_renamed_onto_another_is_refused(how, tmp_path, reference, caplog):
    """Model B's cache file put under model A's name must not make A compute B (a cache hit, no warning, wrong
    answers): the header names the token, fingerprint and model digest, and they are checked."""
    token_b = "a" if how == "copy-same-token" else "b"
    start(MODEL_A, tmp_path / "a", "a")
    start(MODEL_B, tmp_path / "b", token_b)
    (name_a,), (name_b,) = bins(tmp_path / "a"), bins(tmp_path / "b")
    assert name_a != name_b  # the constants are in the fingerprint
    os.replace(tmp_path / "b" / name_b, tmp_path / "a" / name_a)
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        d, out = start(MODEL_A, tmp_path / "a", "a")
    assert d.cache.hits == 0 and d.cache.rejected == 1
    assert "not the" in warnings_of(caplog) and "this start expects" in warnings_of(caplog)
    assert_float_close(out, reference[MODEL_A])
    again, out = start(MODEL_A, tmp_path / "a", "a")  # rewritten with A's own plan
    assert again.cache.hits == 1
    assert_float_close(out, reference[MODEL_A])


def test_the_header_names_what_the_file_is_for(tmp_path):
    d, _ = start(MODEL_A, tmp_path, "tok")
    (name,) = bins(tmp_path)
    header, _ = cache_mod._unpack((tmp_path / name).read_bytes())
    assert name == f"{header['token']}_{header['fingerprint']}.bin" and header["token"] == "tok"
    assert header["model"] == gd.Interpreter(model_content=MODEL_A).graph.model_digest
    assert len(header["model"]) == 64 and header["device"]


@pytest.mark.parametrize("field", ["token", "fingerprint", "model"])
def test_a_header_naming_another_token_fingerprint_or_model_is_refused(field, tmp_path, reference, caplog):
    start(MODEL_A, tmp_path, "tok")
    (name,) = bins(tmp_path)
    path = tmp_path / name
    header, payload = cache_mod._unpack(path.read_bytes())
    header[field] = "something-else"
    path.write_bytes(cache_mod._pack(header, payload))  # a valid checksum: only the name check can refuse it
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        d, out = start(MODEL_A, tmp_path, "tok")
    assert d.cache.rejected == 1 and d.cache.hits == 0
    assert f"names {field} 'something-else'" in warnings_of(caplog)
    assert_float_close(out, reference[MODEL_A])


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o722])
def test_a_directory_others_can_write_is_not_used(mode, tmp_path, reference, caplog):
    """A pre-created world- or group-writable dir (a /tmp path another user made first, say) is refused with a
    warning, as ssh refuses such a ~/.ssh; the run goes on without a cache, and nothing is read or written there."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    start(MODEL_B, tmp_path / "b", "tok")  # a file another user could have planted under the name A will look for
    for name in bins(tmp_path / "b"):
        os.replace(tmp_path / "b" / name, shared / name)
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        d = gd.GpuDelegate(backend="cl", serialization_dir=shared, model_token="tok")
    assert d.cache is None
    assert "is not trusted: it is writable by" in warnings_of(caplog) and "chmod go-w" in warnings_of(caplog)
    it = gd.Interpreter(model_content=MODEL_A, experimental_delegates=[d])
    assert_float_close(run(it, [X])[0], reference[MODEL_A])
    assert len(bins(shared)) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
def test_a_directory_another_user_owns_is_not_used(tmp_path, reference, caplog):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        d = gd.GpuDelegate(backend="cl", serialization_dir=theirs, model_token="tok")
    assert d.cache is None and "is owned by user 65534" in warnings_of(caplog)
    it = gd.Interpreter(model_content=MODEL_A, experimental_delegates=[d])
    assert_float_close(run(it, [X])[0], reference[MODEL_A])
    assert bins(theirs) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_another_user_owns_is_refused(tmp_path, reference):
    start(MODEL_A, tmp_path, "tok")
    (name,) = bins(tmp_path)
    os.chown(tmp_path / name, 65534, 65534)
    d, out = start(MODEL_A, tmp_path, "tok")
    assert d.cache.rejected == 1 and d.cache.hits == 0
    assert_float_close(out, reference[MODEL_A])


def test_a_directory_made_writable_after_the_start_is_refused_then(tmp_path, reference):
    d = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path / "c", model_token="tok")
    assert d.cache is not None
    os.chmod(tmp_path / "c", 0o777)
    it = gd.Interpreter(model_content=MODEL_A, experimental_delegates=[d])
    assert_float_close(run(it, [X])[0], reference[MODEL_A])
    assert d.cache.hits == 0 and d.cache.rejected == 1 and bins(tmp_path / "c") == []


# -- item 2: what sits under a cache file's name is opened without blocking and must be a regular file ----------

HOSTILE_START = textwrap.dedent("""
    import sys
    import gpu_delegate as gd
    from tests.reference import run
    from tests.test_hardening import MODEL_A, X
    d = gd.GpuDelegate(backend=sys.argv[2], serialization_dir=sys.argv[1], model_token="tok")
    it = gd.Interpreter(model_content=MODEL_A, experimental_delegates=[d])
    out = run(it, [X])[0]
    print(d.cache.hits, d.cache.misses, d.cache.rejected)
    import numpy as np
    np.save(sys.argv[3], out)
""")


def _replace_with(path: Path, kind: str, elsewhere: Path) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir(mode=0o700)
        (path / "inside").write_bytes(b"x")
    elif kind == "symlink":  # to a good cache file: a link is refused whatever it points at
        path.symlink_to(elsewhere)
    elif kind == "socket":
        import socket

        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))


@pytest.mark.parametrize("backend", ["cl", "gl"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink", "socket"])
def test_a_fifo_or_directory_under_the_cache_name_is_refused_not_waited_on(kind, backend, tmp_path, reference):
    """A FIFO there once hung the start forever (open waits for a writer); a directory raised IsADirectoryError.
    In a child process, so a hang fails the test instead of stopping the suite."""
    start(MODEL_A, tmp_path / "good", "tok", backend)
    start(MODEL_A, tmp_path / "c", "tok", backend)
    (name,) = bins(tmp_path / "c")
    _replace_with(tmp_path / "c" / name, kind, tmp_path / "good" / name)
    out = tmp_path / "out.npy"
    try:
        proc = subprocess.run([sys.executable, "-c", HOSTILE_START, str(tmp_path / "c"), backend, str(out)],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the start hangs on a {kind} under the cache file's name")
    assert proc.returncode == 0, proc.stderr[-3000:]
    hits, misses, rejected = (int(v) for v in proc.stdout.split())
    assert (hits, rejected) == (0, 1), proc.stdout
    assert "ignoring cache file" in proc.stderr and "it will be rebuilt" in proc.stderr
    assert_float_close(np.load(out), reference[MODEL_A])
    if kind != "directory":  # the rename of the rebuilt file replaced it
        assert stat.S_ISREG(os.lstat(tmp_path / "c" / name).st_mode)


def test_cache_ls_and_clear_do_not_block_on_a_fifo(tmp_path):
    start(MODEL_A, tmp_path, "tok")
    os.mkfifo(tmp_path / "pipe.bin", 0o600)
    (tmp_path / "dir.bin").mkdir()
    (tmp_path / "link.bin").symlink_to(tmp_path / bins(tmp_path)[-1])
    cli = [sys.executable, "-m", "gpu_delegate", "cache"]
    try:
        ls = subprocess.run([*cli, "ls", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
        clear = subprocess.run([*cli, "clear", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("`gpu-delegate cache` hangs on a FIFO")
    assert ls.returncode == 0, ls.stderr
    rows = {line.split("|")[1].strip(): line for line in ls.stdout.splitlines() if ".bin |" in line}
    assert "is a FIFO, not a regular file" in rows["pipe.bin"]
    assert "is a directory, not a regular file" in rows["dir.bin"]
    assert "is a symbolic link" in rows["link.bin"]
    assert clear.returncode == 0, clear.stderr
    assert "removed 1 cache file(s)" in clear.stdout
    assert sorted(os.listdir(tmp_path)) == ["dir.bin", "link.bin", "pipe.bin"]


# -- item 8: `cache clear` removes only files whose header is ours -----------------------------------------------

def test_cache_clear_removes_only_our_files(tmp_path):
    start(MODEL_A, tmp_path, "tok")
    start(MODEL_B, tmp_path, "other")
    ours = bins(tmp_path)
    damaged = tmp_path / "damaged.bin"  # ours, its checksum cut short: its header still says so
    damaged.write_bytes((tmp_path / ours[0]).read_bytes()[:-16])
    _, payload = cache_mod._unpack((tmp_path / ours[0]).read_bytes())
    head = b'{"package":"0.0.1","token":"old"}'
    body = cache_mod._HEAD.pack(1, len(head)) + head + payload
    (tmp_path / "older.bin").write_bytes(cache_mod.MAGIC + body + hashlib.sha256(body).digest())  # format 1
    os.chmod(tmp_path / ours[1], 0o664)  # ours, but not to be trusted: listed as such, cleared all the same
    (tmp_path / "photo.bin").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    (tmp_path / "firmware.bin").write_bytes(os.urandom(4096))
    (tmp_path / "notes.txt").write_text("not a .bin")
    cli = [sys.executable, "-m", "gpu_delegate", "cache"]
    ls = subprocess.run([*cli, "ls", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    rows = {line.split("|")[1].strip(): line for line in ls.stdout.splitlines() if ".bin |" in line}
    assert "no: foreign: it is not a gpu_delegate cache file" in rows["photo.bin"]
    assert "no: it fails its checksum" in rows["damaged.bin"] and "foreign" not in rows["damaged.bin"]
    assert "no: it has format version 1, this reader knows 2" in rows["older.bin"]
    assert rows[ours[0]].rstrip(" |").endswith("yes")
    assert "no: it is writable by its group (mode 664)" in rows[ours[1]]
    clear = subprocess.run([*cli, "clear", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert clear.returncode == 0, clear.stderr
    assert "removed 4 cache file(s)" in clear.stdout
    assert "kept firmware.bin: it is not a gpu_delegate cache file" in clear.stdout
    assert sorted(os.listdir(tmp_path)) == ["firmware.bin", "notes.txt", "photo.bin"]
    assert (tmp_path / "photo.bin").read_bytes().startswith(b"\x89PNG")


# -- item 10: tokens counted in bytes, names that cannot be files, an empty directory option ------------------------

def test_a_token_of_128_bytes_caches_and_one_of_more_is_refused(tmp_path):
    token = "é" * 63 + "ab"  # 128 bytes in UTF-8
    start(MODEL_A, tmp_path, token)
    d, _ = start(MODEL_A, tmp_path, token)
    assert d.cache.hits == 1 and bins(tmp_path)[0].startswith(token)
    with pytest.raises(ValueError, match=r"model_token is 256 bytes long in UTF-8 \(128 characters\); at most 128"):
        gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="é" * 128)


@pytest.mark.parametrize("token, match", [("\ud800", "not printable"), ("a\udcff", "not printable"),
                                          ("a\nb", "not printable"), ("tab\there", "not printable"),
                                          (b"bytes", "must be a non-empty string"),
                                          (7, "must be a non-empty string")])
def test_a_token_that_cannot_be_a_file_name_is_a_value_error(token, match, tmp_path):
    with pytest.raises(ValueError, match=f"model_token=.*{match}"):
        gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token=token)


@pytest.mark.parametrize("directory, error, match", [
    ("", ValueError, "serialization_dir='' is empty"),
    ("a\0b", ValueError, "contains a NUL character"),
    (42, TypeError, "serialization_dir must be a str or os.PathLike, not int"),
    (b"/tmp/x", TypeError, "serialization_dir must be a str or os.PathLike, not bytes")])
def test_a_serialization_dir_that_names_no_directory_is_an_error(directory, error, match, tmp_path,
                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=match):
        gd.GpuDelegate(backend="cl", serialization_dir=directory, model_token="tok")
    assert os.listdir(tmp_path) == []  # nothing cached in the current directory


# -- item 6: a fused chain longer than the device binds is split, not refused ------------------------------------

def affine_chain(n: int, shape: list[int], producer: str = "input") -> tuple[bytes, list[np.ndarray]]:
    """n nodes alternating ADD and MUL with a tensor constant of the full shape (each binds a buffer when fused),
    after the input or after a 1x1 CONV_2D; returns the model and the weights [w, b, c0, c1, ...]."""
    rng = np.random.default_rng(n)
    mb = ModelBuilder()
    cur = mb.input("x", shape)
    weights = []
    if producer == "conv":
        w = rng.standard_normal((shape[3], 1, 1, shape[3])).astype(np.float32) * 0.5
        b = rng.standard_normal(shape[3]).astype(np.float32)
        out = mb.tensor("conv", shape)
        mb.op("CONV_2D", [cur, mb.const("w", w), mb.const("b", b)], [out], padding="VALID", stride_w=1, stride_h=1)
        weights += [w, b]
        cur = out
    for k in range(n):
        c = (rng.uniform(0.9, 1.1, shape) if k % 2 else rng.uniform(-0.1, 0.1, shape)).astype(np.float32)
        out = mb.tensor(f"t{k}", shape)
        mb.op("MUL" if k % 2 else "ADD", [cur, mb.const(f"c{k}", c)], [out])
        weights.append(c)
        cur = out
    mb.output(cur)
    return mb.build(), weights


def affine_chain_reference(x: np.ndarray, n: int, weights: list[np.ndarray]) -> np.ndarray:
    y = x.astype(np.float64)
    for k, c in enumerate(weights[-n:]):
        y = y * c if k % 2 else y + c
    return y.astype(np.float32)


def plan_of(it) -> object:
    runner = runner_of(it)
    return runner


def buffers_bound(call) -> int:
    return len(call.inputs) + len(call.outputs) + len(call.consts) + sum(p.source is not None for p in call.postops)


@pytest.mark.parametrize("backend", ["cl", "gl"])
def test_a_fused_chain_longer_than_the_buffer_limit_is_split(backend):
    """15 fused ADD/MUL with tensor constants need 17 buffers in one kernel; GL binds 16 here (CL 128): the chain
    continues in copy kernels, each within the limit, instead of failing with DelegateError."""
    d = gd.GpuDelegate(backend=backend)
    limit = d.backend.device_info()["max_buffers"]
    n = limit - 1  # with the input and the output: limit + 1 buffers if fused into one kernel
    content, weights = affine_chain(n, [1, 3, 4, 6])
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    x = np.random.default_rng(1).standard_normal([1, 3, 4, 6]).astype(np.float32)
    (got,) = run(it, [x])
    assert {o["backend"] for o in it.get_ops_details()} == {backend}
    assert_float_close(got, affine_chain_reference(x, n, weights), rel=1e-5)
    kernels = plan_of(it).plan.kernels
    assert len(kernels) >= 2 and max(buffers_bound(k) for k in kernels) <= limit
    assert sum(len(k.postops) for k in kernels) == n  # still fused: no node got a kernel of its own


def test_a_chain_fused_into_a_convolution_is_split_at_the_limit():
    """The producer's own buffers count too: a convolution binds 4 (input, weights, bias, output)."""
    d = gd.GpuDelegate(backend="gl")
    limit = d.backend.device_info()["max_buffers"]
    content, weights = affine_chain(limit, [1, 5, 5, 8], producer="conv")
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    x = np.random.default_rng(2).standard_normal([1, 5, 5, 8]).astype(np.float32)
    (got,) = run(it, [x])
    assert {o["backend"] for o in it.get_ops_details()} == {"gl"}
    assert_float_close(got, run_litert(content, [x])[0])
    assert max(buffers_bound(k) for k in plan_of(it).plan.kernels) <= limit


# -- item 7: preparation grows linearly with the graph ---------------------------------------------------------------

def chain(n: int, kind: str) -> bytes:
    """A chain of n nodes: "copies" (ADD(t, t): a kernel each, nothing fused), "fused" (ADD/MUL with tensor
    constants: fused, then split at the limits), "interleaved" (every third node an ATAN2 the GPU path does not
    take: a partition per two nodes), "pads" (PAD merged into the VALID 1x1 convolution that reads it)."""
    shape = [1, 4, 4, 8]
    mb = ModelBuilder()
    cur = mb.input("x", shape)
    for k in range(n):
        out = mb.tensor(f"t{k}", shape)
        if kind == "copies" or (kind == "interleaved" and k % 3 != 2):
            mb.op("ADD", [cur, cur], [out])
        elif kind == "interleaved":
            mb.op("ATAN2", [cur, mb.const(f"c{k}", np.full(shape, 0.5, np.float32))], [out])
        elif kind == "fused":
            mb.op("MUL" if k % 2 else "ADD", [cur, mb.const(f"c{k}", np.full(shape, 0.5, np.float32))], [out])
        else:
            padded = mb.tensor(f"p{k}", [1, 6, 6, 8])
            mb.op("PAD", [cur, mb.const(f"pads{k}", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [padded])
            mb.op("CONV_2D", [padded, mb.const(f"w{k}", np.full((8, 3, 3, 8), 0.01, np.float32)),
                              mb.const(f"b{k}", np.zeros(8, np.float32))], [out], padding="VALID", stride_w=1,
                  stride_h=1)
        cur = out
    mb.output(cur)
    return mb.build()


def calls_to_prepare(content: bytes, backend: str) -> int:
    """Python function calls made constructing an interpreter and allocating its tensors: a count, not a time,
    so it says how the work grows however busy the machine is."""
    import cProfile
    import pstats

    d = gd.GpuDelegate(backend=backend, max_delegated_partitions=10**6)
    profile = cProfile.Profile()
    profile.enable()
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    it.allocate_tensors()
    profile.disable()
    assert "cpu" not in {o["backend"] for o in it.get_ops_details() if o["op_name"] != "ATAN2"}
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["copies", "fused", "interleaved", "pads"])
def test_preparing_a_chain_grows_linearly(kind):
    """A 10,000-node chain took 131 s to prepare on cl (1.1 s on the CPU path): the fusion pass asked every node
    whether it read each tensor, the memory plan compared each tensor with every lifetime in a buffer, and each
    partition's boundary walked the whole graph. Four times the nodes must cost about four times the calls."""
    calls_to_prepare(chain(20, kind), "cl")  # first-time work (kernel sources read, programs built) out of the way
    small, large = (calls_to_prepare(chain(n, kind), "cl") for n in (200, 800))
    assert large / small < 4.6, f"{kind}: {small} calls for 200 nodes, {large} for 800 ({large / small:.2f}x)"


def test_the_memory_plan_of_a_long_chain_grows_linearly():
    """Each buffer of a chain's memory plan holds thousands of lifetimes; placing a tensor must not compare it with
    each of them."""
    import cProfile
    import pstats

    from gpu_delegate.lowering import memory
    from gpu_delegate.lowering.plan import KernelCall, Plan

    def calls(n: int) -> int:
        kernels = [KernelCall("copy", k, {"src": k}, {"dst": k + 1}, {}, {}, (1, 1, 1)) for k in range(n)]
        plan = Plan({t: (1, 1, 1, 4) for t in range(n + 1)}, {}, kernels, [0], [n])
        profile = cProfile.Profile()
        profile.enable()
        memory.run(plan)
        profile.disable()
        assert len(plan.buffer_sizes) == 2  # a chain needs two buffers, used in turn
        return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]

    small, large = calls(2000), calls(8000)
    assert large / small < 4.6, f"{small} calls for 2000 kernels, {large} for 8000 ({large / small:.2f}x)"


@pytest.mark.parametrize("backend", ["cl", "gl"])
def test_a_long_fused_chain_compiles_as_a_few_short_programs(backend):
    """llvmpipe compiles a shader in time quadratic in its length (fused TANH steps: 2.8 ms each in a chain of 64,
    13 ms each in a chain of 1000; 4000 took 337 s): a fused chain is cut into runs of at most 64 post-ops, and
    identical runs are one program."""
    n = 265
    mb = ModelBuilder()
    cur = mb.input("x", [1, 3, 3, 4])
    for k in range(n):
        out = mb.tensor(f"t{k}", [1, 3, 3, 4])
        mb.op("TANH", [cur], [out])
        cur = out
    mb.output(cur)
    it = gd.Interpreter(model_content=mb.build(), experimental_delegates=[gd.GpuDelegate(backend=backend)])
    x = np.linspace(-3, 3, 36, dtype=np.float32).reshape(1, 3, 3, 4)
    (got,) = run(it, [x])
    want = x.astype(np.float64)
    for _ in range(n):
        want = np.tanh(want)
    assert_float_close(got, want.astype(np.float32), rel=1e-5)
    runner = plan_of(it)
    assert max(len(k.postops) for k in runner.plan.kernels) <= 64
    assert sum(len(k.postops) for k in runner.plan.kernels) == n
    # the full runs are one source, a last, shorter run another; on a CPU's OpenCL the first run reads the input as
    # the host wrote it (lowering/dense_inputs.py): a third
    assert len({p.source for p in runner.programs}) <= (3 if on_cpu_opencl(backend) else 2)


# -- bench/fuzz.py's hostile seeds and cache attacks ---------------------------------------------------------------

FUZZ_HOSTILE = textwrap.dedent("""
    import json
    from bench import fuzz
    out = {}
    for model in ("fused_past_the_limit", "long_chain", "memory_bomb"):
        for path in ("cpu", "cl", "gl"):
            out[f"{model} {path}"] = fuzz.run_path(fuzz.seed_bytes(model), path)[0]
    for attack in fuzz.CACHE_ATTACKS:
        for path in ("cl", "gl"):
            out[f"{attack} {path}"] = fuzz.run_path(fuzz.seed_bytes("fused_past_the_limit"), path, attack)[0]
    print(json.dumps(out))
""")


def test_the_fuzzers_hostile_seeds_and_cache_attacks():
    """The seeds for items 4, 6 and 7 run (or are refused as they must be) on every path, and every cache attack of
    item 2 leaves a start that answers as the cold one did. In a child process: a hang must fail, not stall."""
    import json

    try:
        proc = subprocess.run([sys.executable, "-c", FUZZ_HOSTILE], capture_output=True, text=True, timeout=600,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("a hostile seed or a cache attack hangs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    for path in ("cl", "gl"):
        assert out[f"fused_past_the_limit {path}"] == f"ok: ran (191 nodes on {path})"
        assert out[f"long_chain {path}"] == f"ok: ran (1000 nodes on {path})"
    assert out["long_chain cpu"] == out["fused_past_the_limit cpu"] == "ok: ran"
    assert {out[f"memory_bomb {p}"] for p in ("cpu", "cl", "gl")} == {"ok: refused at allocate"}
    attacked = {k: v for k, v in out.items() if k.split()[0] not in ("fused_past_the_limit", "long_chain",
                                                                     "memory_bomb")}
    assert len(attacked) == 16 and all("answered as the cold start" in v for v in attacked.values()), attacked
