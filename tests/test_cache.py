"""The serialization cache: a warm start reuses the plan and program binaries, and no file is trusted blindly.

References: outputs are compared with LiteRT, and a warm start must be bit-identical to the cold one.
"""

import json
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
from gpu_delegate.lowering.plan import KernelCall, Plan, PostOp
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, run, run_litert

BACKENDS = ["cl", "gl"]


def model() -> bytes:
    """conv-free chain that every backend runs in one partition: ADD const, MUL tensor, RELU."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 6, 5, 7])
    y = mb.input("y", [1, 6, 5, 7])
    c = mb.const("c", np.linspace(-1, 1, 7, dtype=np.float32))
    a, m, r = (mb.tensor(n, [1, 6, 5, 7]) for n in "amr")
    mb.op("ADD", [x, c], [a])
    mb.op("MUL", [a, y], [m])
    mb.op("RELU", [m], [r])
    mb.output(r)
    return mb.build()


CONTENT = model()
INPUTS = [np.random.default_rng(0).standard_normal([1, 6, 5, 7]).astype(np.float32) for _ in range(2)]


def start(backend, directory, token="tok", **options):
    d = gd.GpuDelegate(backend=backend, serialization_dir=directory, model_token=token, **options)
    it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[d])
    out = run(it, INPUTS)
    assert {o["backend"] for o in it.get_ops_details()} == {backend}
    return d, out


def files(directory):
    return sorted(p for p in os.listdir(directory) if p.endswith(".bin"))


@pytest.fixture(scope="module")
def reference():
    return run_litert(CONTENT, INPUTS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_start_is_bit_identical_and_skips_compilation(backend, tmp_path, reference, fresh_programs):
    cold, out_cold = start(backend, tmp_path)
    assert cold.cache.misses == 1 and cold.cache.hits == 0
    (name,) = files(tmp_path)
    assert name.startswith("tok_")
    mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
    assert mode == 0o600
    fresh_programs()  # as a new process: the programs come from the file (or the driver's own cache)
    warm, out_warm = start(backend, tmp_path)
    assert warm.cache.hits == 1 and warm.cache.rejected == 0
    np.testing.assert_array_equal(out_warm[0], out_cold[0])
    assert_float_close(out_warm[0], reference[0])
    assert files(tmp_path) == [name]


def test_directory_is_created_private(tmp_path):
    target = tmp_path / "a" / "b"
    start("cl", target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


def test_model_token_defaults_to_a_digest_of_the_model(tmp_path):
    start("cl", tmp_path, token=None)
    (name,) = files(tmp_path)
    assert name.startswith("model-")


def _rewrite(path, mutate):
    data = path.read_bytes()
    header, payload = cache_mod._unpack(data)
    mutate(header)
    path.write_bytes(cache_mod._pack(header, payload))


@pytest.mark.parametrize("damage", ["flip", "truncate", "version", "build", "device", "garbage"])
def test_damaged_files_are_rebuilt(damage, tmp_path, reference, caplog):
    start("cl", tmp_path)
    (name,) = files(tmp_path)
    path = tmp_path / name
    if damage == "flip":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "version":
        _rewrite(path, lambda h: h.update(package="0.0.0-other"))
    elif damage == "build":  # the same version number, other code (a constant laid out otherwise)
        _rewrite(path, lambda h: h.update(package=f"{gd.__version__}+{'0' * 16}"))
    elif damage == "device":
        _rewrite(path, lambda h: h.update(device="another-device"))
    else:
        path.write_bytes(b"\x00" * 64)
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        d, out = start("cl", tmp_path)
    assert d.cache.rejected == 1 and d.cache.hits == 0
    assert any("ignoring cache file" in r.getMessage() for r in caplog.records)
    assert_float_close(out[0], reference[0])
    again, _ = start("cl", tmp_path)  # the rewritten file is good
    assert again.cache.hits == 1


def test_file_writable_by_others_is_refused(tmp_path, reference):
    start("cl", tmp_path)
    (name,) = files(tmp_path)
    os.chmod(tmp_path / name, 0o666)
    d, out = start("cl", tmp_path)
    assert d.cache.rejected == 1 and d.cache.hits == 0
    assert_float_close(out[0], reference[0])


def test_different_options_give_different_files(tmp_path):
    start("cl", tmp_path)
    start("cl", tmp_path, precision_loss_allowed=True)
    start("gl", tmp_path)
    assert len(files(tmp_path)) == 3


@pytest.mark.parametrize("token", ["../evil", "a/b", "a\\b", "", ".hidden"])
def test_bad_token_is_an_error(token, tmp_path):
    with pytest.raises(ValueError, match="model_token"):
        gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token=token)


def test_serialization_dir_that_is_a_file_is_an_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        gd.GpuDelegate(backend="cl", serialization_dir=f)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write a read-only directory")
def test_read_only_directory_is_a_warning(tmp_path, reference, caplog):
    os.chmod(tmp_path, 0o500)
    try:
        with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
            _, out = start("cl", tmp_path)
    finally:
        os.chmod(tmp_path, 0o700)
    assert_float_close(out[0], reference[0])
    assert any("cannot write" in r.getMessage() for r in caplog.records)


def test_read_only_directory_as_root_still_runs(tmp_path, reference):
    """Without write permission bits the delegate must still run (root may write anyway)."""
    os.chmod(tmp_path, 0o500)
    try:
        _, out = start("cl", tmp_path)
    finally:
        os.chmod(tmp_path, 0o700)
    assert_float_close(out[0], reference[0])


def test_processes_racing_on_one_empty_dir(tmp_path, reference):
    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        import gpu_delegate as gd
        from tests.test_cache import CONTENT, INPUTS
        from tests.reference import run
        d = gd.GpuDelegate(backend="cl", serialization_dir=sys.argv[1], model_token="race")
        it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[d])
        out = run(it, INPUTS)[0]
        print(json.dumps(out.ravel().tolist()))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1]) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        got = np.array(json.loads(out), np.float32).reshape(reference[0].shape)
        assert_float_close(got, reference[0])
    assert len(files(tmp_path)) == 1
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
    d, _ = start("cl", tmp_path, token="race")
    assert d.cache.hits == 1


def test_cache_command_lists_and_clears(tmp_path):
    start("cl", tmp_path)
    start("gl", tmp_path)
    cli = [sys.executable, "-m", "gpu_delegate", "cache"]
    ls = subprocess.run([*cli, "ls", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert ls.returncode == 0, ls.stderr
    rows = [line for line in ls.stdout.splitlines() if line.startswith("| tok_")]
    assert len(rows) == 2 and {"cl", "gl"} == {r.split("|")[4].strip() for r in rows}
    assert all(r.rstrip(" |").endswith("yes") for r in rows)
    clear = subprocess.run([*cli, "clear", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert clear.returncode == 0 and files(tmp_path) == []
    bad = subprocess.run([*cli, "ls", str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "not a directory" in bad.stderr and "Traceback" not in bad.stderr


def _small_plan() -> Plan:
    relu = PostOp("expr", "max(a, SPLAT(0.0f))")
    bias = PostOp("expr", "a + b", operand="channel", source="b")
    call = KernelCall("add", 0, {"a": 0, "b": 1}, {"dst": 2, "dst_dense": 3}, {}, {"N": 3, "S": 0.5}, (2, 3, 1),
                      postops=[relu, bias], local_size=(2, 1, 1))
    return Plan(tensors={0: (1, 3, 2, 5), 1: (1, 3, 2, 5), 2: (1, 3, 2, 5), 3: (1, 3, 2, 5)},
                consts={"b": np.arange(8, dtype=np.float32).reshape(2, 4)}, kernels=[call], inputs=[0, 1],
                outputs=[2], aliases={2: 0}, buffer_of={0: 0, 1: 1}, buffer_sizes=[12, 12], nodes=[0],
                notes=["fused RELU"], tuned=True, dense={1}, dense_copies={2: 3})


def test_store_then_load_gives_the_same_plan_and_binaries(tmp_path):
    cache = cache_mod.Cache.open(tmp_path, "tok")
    entry = cache.entry("f" * 24, "d" * 64)
    plan = _small_plan()
    assert cache.store(entry, "device-1", "cl", plan, {"abc": b"\x00\x01binary"})
    loaded = cache.load(entry, "device-1")
    assert loaded is not None and cache.hits == 1
    got, binaries = loaded
    assert binaries == {"abc": b"\x00\x01binary"}
    np.testing.assert_array_equal(got.consts["b"], plan.consts["b"])
    got.consts, plan.consts = {}, {}
    assert got == plan  # tuples stay tuples, tensor ids stay ints


def test_load_returns_none_for_a_missing_or_refused_file(tmp_path, caplog):
    cache = cache_mod.Cache.open(tmp_path, "tok")
    entry = cache.entry("f" * 24, "d" * 64)
    assert cache.load(entry, "device-1") is None and cache.misses == 1
    assert cache.store(entry, "device-1", "cl", _small_plan(), {})
    with caplog.at_level(logging.WARNING, logger="gpu_delegate"):
        assert cache.load(entry, "device-2") is None
        cache.path(entry).write_bytes(b"\x00" * 64)
        assert cache.load(entry, "device-1") is None
    assert cache.rejected == 2 and cache.hits == 0
    assert "was written for another device" in caplog.text and "is not a gpu_delegate cache file" in caplog.text
