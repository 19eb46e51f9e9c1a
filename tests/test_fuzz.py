"""Hostile .tflite files: every mutated model either works or fails with a clean error.

A few hundred mutations (byte flips, 32-bit pokes, huge vector lengths, odd tensor dimensions, swapped or
omitted operands, splices, insertions, truncations) of small writer-built models and of the shared real
models, plus a sweep that omits every operand and zeroes every dimension of the small models one at a time,
are each loaded and, when that works, allocated and invoked with zeros. They run in a child process, so a
segfault or a hang is seen as a failure of the case that caused it (the child is restarted after it).
Acceptable outcomes: success, gpu_delegate.ModelError anywhere, ValueError from set_tensor.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import selectors
import subprocess
import sys
import time
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import tflite

from gpu_delegate.tflite import ModelBuilder

from .reference import MODELS

SEED = 20240611
CASE_TIMEOUT_S = 20.0  # one case; the slowest legitimate one (a mutated MobileNet) takes well under a second
MEMORY_LIMIT = 4 << 30  # the child's address space: a mutated shape must fail, not exhaust the machine
MAX_ELEMENTS = 1 << 24  # larger tensors after allocation: legal, but not worth the time of invoking
REAL = {  # shared model -> number of mutations (the big ones cost more per invoke)
    "real/sine_float.tflite": 50,
    "real/face_detection_short_range.tflite": 50,
    "real/iris_landmark.tflite": 15,
    "mobilenet/mobilenet_v2_224_int8.tflite": 12,
    "mobilenet/mobilenet_v1_224_fp16.tflite": 8,
}
SMALL_CASES = 60  # per writer-built model


# -- the models ----------------------------------------------------------------------------------------------

def _convnet() -> bytes:
    rng = np.random.default_rng(0)
    f32 = np.float32
    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 8, 3])
    c = mb.tensor("c", [1, 4, 4, 8])
    mb.op("CONV_2D", [x, mb.const("cw", rng.standard_normal((8, 3, 3, 3)).astype(f32)),
                      mb.const("cb", rng.standard_normal(8).astype(f32))], [c],
          padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU6")
    d = mb.tensor("d", [1, 4, 4, 8])
    mb.op("DEPTHWISE_CONV_2D", [c, mb.const("dw", rng.standard_normal((1, 3, 3, 8)).astype(f32)),
                                mb.const("db", np.zeros(8, f32))], [d],
          padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1, dilation_w_factor=1,
          dilation_h_factor=1)
    a = mb.tensor("a", [1, 4, 4, 8])
    mb.op("ADD", [c, d], [a], fused_activation_function="RELU")
    p = mb.tensor("p", [1, 2, 2, 8])
    mb.op("AVERAGE_POOL_2D", [a], [p], padding="VALID", stride_w=2, stride_h=2, filter_width=2,
          filter_height=2)
    m = mb.tensor("m", [1, 8])
    mb.op("MEAN", [p, mb.const("axes", np.array([1, 2], np.int32))], [m], keep_dims=False)
    fc = mb.tensor("fc", [1, 5])
    mb.op("FULLY_CONNECTED", [m, mb.const("fw", rng.standard_normal((5, 8)).astype(f32)), -1], [fc])
    y = mb.tensor("y", [1, 5])
    mb.op("SOFTMAX", [fc], [y], beta=1.0)
    mb.output(y)
    mb.add_signature("serving_default", {"x": x}, {"y": y})
    return mb.build()


def _shapes() -> bytes:
    """Ops whose output shapes come from constant inputs: mutated constants must not reach numpy unchecked."""
    i32 = np.int32
    mb = ModelBuilder()
    x = mb.input("x", [2, 3, 4])
    t = mb.tensor("t", [4, 3, 2])
    mb.op("TRANSPOSE", [x, mb.const("perm", np.array([2, 1, 0], i32))], [t])
    r = mb.tensor("r", [4, 6])
    mb.op("RESHAPE", [t, mb.const("shape", np.array([4, 6], i32))], [r], new_shape=[4, 6])
    p = mb.tensor("p", [6, 7])
    mb.op("PAD", [r, mb.const("pads", np.array([[1, 1], [0, 1]], i32))], [p])
    s = mb.tensor("s", [3, 5])
    begin, end = mb.const("begin", np.array([0, 1], i32)), mb.const("end", np.array([6, 6], i32))
    mb.op("STRIDED_SLICE", [p, begin, end, mb.const("strides", np.array([2, 1], i32))], [s])
    cat = mb.tensor("cat", [3, 7])
    mb.op("CONCATENATION", [s, mb.const("extra", np.ones((3, 2), np.float32))], [cat], axis=1)
    g = mb.tensor("g", [3, 2])
    mb.op("GATHER", [cat, mb.const("idx", np.array([6, 0], i32))], [g], axis=1)
    y = mb.tensor("y", [3])
    mb.op("SUM", [g, mb.const("axis", np.array([1], i32))], [y], keep_dims=False)
    mb.output(y)
    return mb.build()


def _int8() -> bytes:
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    x = mb.input("x", [1, 6, 6, 2])
    q = mb.tensor("q", [1, 6, 6, 2], np.int8, scale=0.05, zero_point=3)
    mb.op("QUANTIZE", [x], [q])
    w_scales = np.array([0.01, 0.02, 0.03], np.float32)
    w = mb.const("w", rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8), scale=w_scales, zero_point=0,
                 axis=0)
    b = mb.const("b", rng.integers(-500, 500, 3).astype(np.int32), scale=0.05 * w_scales, zero_point=0)
    c = mb.tensor("c", [1, 6, 6, 3], np.int8, scale=0.1, zero_point=-5)
    mb.op("CONV_2D", [q, w, b], [c], padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU",
          version=3)
    mp = mb.tensor("mp", [1, 3, 3, 3], np.int8, scale=0.1, zero_point=-5)
    mb.op("MAX_POOL_2D", [c], [mp], padding="VALID", stride_w=2, stride_h=2, filter_width=2,
          filter_height=2, version=2)
    r = mb.tensor("r", [1, 27], np.int8, scale=0.1, zero_point=-5)
    mb.op("RESHAPE", [mp, mb.const("shape", np.array([1, 27], np.int32))], [r], version=2)
    y = mb.tensor("y", [1, 27])
    mb.op("DEQUANTIZE", [r], [y], version=2)
    mb.output(y)
    return mb.build()


SMALL = {"convnet": _convnet, "shapes": _shapes, "int8": _int8}


@cache
def source(name: str) -> bytes:
    return SMALL[name]() if name in SMALL else (MODELS / name).read_bytes()


# -- where the structure is ----------------------------------------------------------------------------------

@cache
def _vector_fields(cls) -> dict[str, int]:
    """Vector field name -> vtable offset, for a generated flatbuffer class (read from its accessors)."""
    return {name[:-len("Length")]: int(re.search(r"Offset\((\d+)\)", inspect.getsource(fn)).group(1))
            for name, fn in vars(cls).items() if name.endswith("Length") and callable(fn)}


def _length_positions(obj) -> list[int]:
    """Byte positions of the length words of a table's vectors."""
    tab = obj._tab
    return [tab.Vector(o) - 4 for vt in _vector_fields(type(obj)).values() if (o := tab.Offset(vt))]


def _elements(obj, field: str) -> range:
    """Byte positions of the int32 elements of one vector field of a table."""
    n = getattr(obj, f"{field}Length")()
    if not n:
        return range(0)
    start = obj._tab.Vector(obj._tab.Offset(_vector_fields(type(obj))[field]))
    return range(start, start + 4 * n, 4)


def structure(content: bytes) -> tuple[dict[str, list[int]], list[tuple[int, int]]]:
    """Where the interesting fields of a well-formed model lie: byte positions of vector lengths, tensor
    dimensions and node operands (tensor indices), and the byte ranges of buffer data."""
    m = tflite.Model.GetRootAs(content, 0)
    at: dict[str, list[int]] = {"length": _length_positions(m), "dim": [], "operand": []}
    data = []
    for i in range(m.BuffersLength()):
        buf = m.Buffers(i)
        at["length"] += _length_positions(buf)
        if buf.DataLength():
            start = buf._tab.Vector(buf._tab.Offset(4))
            data.append((start, start + buf.DataLength()))
    for s in range(m.SubgraphsLength()):
        sg = m.Subgraphs(s)
        at["length"] += _length_positions(sg)
        for i in range(min(sg.TensorsLength(), 40)):
            t = sg.Tensors(i)
            at["length"] += _length_positions(t)
            at["dim"] += _elements(t, "Shape")
            if t.Quantization() is not None:
                at["length"] += _length_positions(t.Quantization())
        for i in range(min(sg.OperatorsLength(), 40)):
            op = sg.Operators(i)
            at["length"] += _length_positions(op)
            at["operand"] += [*_elements(op, "Inputs"), *_elements(op, "Outputs")]
    for i in range(m.SignatureDefsLength()):
        at["length"] += _length_positions(m.SignatureDefs(i))
    return at, data


# -- mutations -----------------------------------------------------------------------------------------------

INTERESTING_U32 = [0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                   0xFFFFFFFE]
HUGE_LENGTHS = [0x7FFFFFFF, 0xFFFFFFFF, 0x40000000, 0x10000000, 0x01000000]
ODD_DIMS = [0, 2, 3, 1000, 1 << 16, 1 << 20, 0x7FFFFFFF, -1, -2]
KINDS = ["flip", "flip", "poke", "poke", "length", "dim", "operand", "splice", "insert", "truncate"]


def make_cases(rng: random.Random, name: str, count: int) -> list[dict]:
    content = source(name)
    at, data = structure(content)
    n = len(content)
    big = sum(b - a for a, b in data) > n // 2

    def position() -> int:
        # In a model that is mostly weights, aim most mutations at the tables around them.
        while True:
            p = rng.randrange(n)
            if not big or rng.random() < 0.1 or not any(a <= p < b for a, b in data):
                return p

    def set32(p: int, value: int) -> list:
        return ["set", p, list((value & 0xFFFFFFFF).to_bytes(4, "little"))]

    cases = []
    for k in range(count):
        kind = KINDS[k % len(KINDS)]
        edits: list = []
        if kind == "flip":
            for _ in range(rng.choice([1, 1, 2, 4, 8])):
                p = position()
                edits.append(["set", p, [content[p] ^ (1 << rng.randrange(8)) if rng.random() < 0.5
                                         else rng.randrange(256)]])
        elif kind == "poke":
            p = position() & ~3
            edits.append(set32(p, rng.choice(INTERESTING_U32 + [n, n - p, rng.randrange(1 << 32)])))
        elif kind == "length":
            p = rng.choice(at["length"])
            current = int.from_bytes(content[p:p + 4], "little")
            edits.append(set32(p, rng.choice(HUGE_LENGTHS + [current + rng.choice([1, 2, 7])])))
        elif kind == "dim":
            edits.append(set32(rng.choice(at["dim"]), rng.choice(ODD_DIMS)))
        elif kind == "operand":  # another tensor, an omitted (-1) one, or one out of range
            edits.append(set32(rng.choice(at["operand"]), rng.choice([-1, -1, -2, 0, 1, 2, 3, 5, 1 << 20])))
        elif kind == "splice":
            size = rng.choice([4, 8, 16, 64, 256])
            edits.append(["splice", position(), rng.randrange(max(n - size, 1)), size])
        elif kind == "insert":
            size = rng.choice([1, 3, 4, 16])
            edits.append(["insert", position(), [rng.randrange(256) for _ in range(size)]])
        else:
            edits.append(["truncate", rng.choice([0, 4, 7, 8, 16, 64, n // 3, n // 2, n - 1,
                                                  rng.randrange(n)])])
        cases.append({"source": name, "kind": kind, "edits": edits})
    return cases


def sweep_cases(name: str) -> list[dict]:
    """Every operand of every node omitted (-1), and every tensor dimension zeroed, one at a time."""
    at, _ = structure(source(name))
    return [{"source": name, "kind": kind, "edits": [["set", p, list(value.to_bytes(4, "little"))]]}
            for kind, value in (("operand", 0xFFFFFFFF), ("dim", 0)) for p in at[kind]]


def apply(content: bytes, edits: list) -> bytes:
    out = bytearray(content)
    for edit in edits:
        if edit[0] == "set":
            _, p, values = edit
            out[p:p + len(values)] = bytes(values)
            del out[len(content):]  # a poke near the end must not grow the file
        elif edit[0] == "splice":
            _, dst, src, size = edit
            chunk = content[src:src + size]
            out[dst:dst + len(chunk)] = chunk
            del out[len(content):]
        elif edit[0] == "insert":
            _, p, values = edit
            out[p:p] = bytes(values)
        else:
            del out[edit[1]:]
    return bytes(out)


# -- the child -----------------------------------------------------------------------------------------------

def _run_case(case: dict) -> str:
    import gpu_delegate as gd

    if case.get("crash"):  # the harness's own test: a segfault, as a bug in a kernel would cause
        import ctypes

        ctypes.string_at(0)
    content = apply(source(case["source"]), case["edits"])
    try:
        it = gd.Interpreter(model_content=content)
    except gd.ModelError:
        return "ok: refused at load"
    try:
        it.allocate_tensors()
    except gd.ModelError:
        return "ok: refused at allocate"
    sizes = [int(np.prod(d["shape"], dtype=np.int64)) for d in it.get_tensor_details()]
    if max(sizes, default=0) > MAX_ELEMENTS:
        return "ok: loaded (too large to invoke)"
    try:
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    except ValueError:
        return "ok: set_tensor refused"
    try:
        it.invoke()
    except gd.ModelError:
        return "ok: refused at invoke"
    for d in it.get_output_details():
        it.get_tensor(d["index"])
    return "ok: ran"


def worker(cases_file: str, first: int) -> None:
    """Run cases from ``first`` on, reporting each before and after, so the parent knows which one crashed."""
    import resource
    import traceback

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    cases = json.loads(Path(cases_file).read_text())
    for i in range(first, len(cases)):
        print(json.dumps({"start": i}), flush=True)
        try:
            outcome = _run_case(cases[i])
        except Exception as e:  # noqa: BLE001  (any other exception is the finding)
            frames = traceback.extract_tb(e.__traceback__)
            ours = [f for f in frames if f"{os.sep}gpu_delegate{os.sep}" in f.filename]
            frame = (ours or frames)[-1]  # the package's line, not numpy's
            outcome = (f"FAIL: {type(e).__name__}: {str(e)[:300]} "
                       f"(at {Path(frame.filename).name}:{frame.lineno} in {frame.name})")
        print(json.dumps({"done": i, "outcome": outcome}), flush=True)


def _run_all(cases: list[dict], workdir: Path) -> dict[int, str]:
    """Outcome of every case, run in child processes; a child that dies or hangs fails the case it was on
    and a new child carries on after it."""
    cases_file = workdir / "cases.json"
    cases_file.write_text(json.dumps(cases))
    code = "import sys; from tests import test_fuzz; test_fuzz.worker(sys.argv[1], int(sys.argv[2]))"
    outcomes: dict[int, str] = {}
    first = 0
    while first < len(cases):
        log = workdir / f"stderr_{first}.txt"
        with open(log, "w") as err:  # a file, not a pipe: a chatty child must not block on a full pipe
            proc = subprocess.Popen([sys.executable, "-c", code, str(cases_file), str(first)],
                                    stdout=subprocess.PIPE, stderr=err, text=True, cwd=Path(__file__).parents[1],
                                    env=dict(os.environ, PYTHONFAULTHANDLER="1"))
        current, started = None, False
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 60  # the first case also pays for the imports
            while True:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    proc.kill()
                    outcomes[current if current is not None else first] = \
                        f"FAIL: no result within {CASE_TIMEOUT_S} s"
                    break
                line = proc.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                if "start" in msg:
                    current, started, deadline = msg["start"], True, time.monotonic() + CASE_TIMEOUT_S
                else:
                    outcomes[msg["done"]], current = msg["outcome"], None
        proc.wait()
        proc.stdout.close()
        tail = _crash_summary(log.read_text())
        assert started or first in outcomes, f"the fuzz child failed before its first case: {tail}"
        if current is not None and current not in outcomes:
            outcomes[current] = f"FAIL: child died (exit {proc.returncode}): {tail}"
        first = max(outcomes, default=first) + 1
    return outcomes


def _crash_summary(stderr: str) -> str:
    """faulthandler's verdict and the innermost frames (it lists the most recent call first)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith("Fatal Python error")][:1]
    frames = [ln for ln in lines if ln.startswith("File ")][:3]
    return " | ".join(fatal + frames) or " | ".join(lines[-3:])


def _describe(case: dict) -> str:
    edits = "; ".join(" ".join(str(v if not isinstance(v, list) or len(v) <= 8 else f"{v[:8]}...")
                               for v in e) for e in case["edits"])
    return f"{case['source']} {case['kind']} [{edits}]"


def test_mutated_models_fail_cleanly(tmp_path):
    rng = random.Random(SEED)
    cases = []
    for name in SMALL:
        cases += make_cases(rng, name, SMALL_CASES) + sweep_cases(name)
    if MODELS.is_dir():
        for name, count in REAL.items():
            cases += make_cases(rng, name, count)
    t0 = time.monotonic()
    outcomes = _run_all(cases, tmp_path)
    elapsed = time.monotonic() - t0
    failures = [f"case {i}: {_describe(cases[i])}: {outcomes.get(i, 'FAIL: no outcome')}"
                for i in range(len(cases)) if not outcomes.get(i, "FAIL").startswith("ok")]
    summary = Counter(o if o.startswith("ok") else "FAIL" for o in outcomes.values())
    print(f"{len(cases)} cases in {elapsed:.1f} s: {dict(summary)}")
    assert not failures, (f"{len(failures)} of {len(cases)} mutated models failed badly:\n"
                          + "\n".join(failures[:25]))
    # The mix must exercise every stage, or the test would pass by refusing everything at load.
    assert summary["ok: ran"] >= 20 and summary["ok: refused at load"] >= 20, summary
    if not MODELS.is_dir():
        print(f"(the shared models folder {MODELS} is absent: only writer-built models were mutated)")


def test_the_unmutated_models_run():
    """The mutation test means something only if the models it starts from load and run."""
    names = list(SMALL) + ([n for n in REAL if n.startswith("real/")] if MODELS.is_dir() else [])
    for name in names:
        assert _run_case({"source": name, "edits": []}) == "ok: ran", name


def test_a_crash_fails_its_case_and_the_rest_still_run(tmp_path):
    cases = [{"source": "shapes", "edits": []}, {"source": "shapes", "edits": [], "crash": True},
             {"source": "shapes", "edits": []}]
    outcomes = _run_all(cases, tmp_path)
    assert outcomes[0] == outcomes[2] == "ok: ran"
    assert outcomes[1].startswith("FAIL: child died (exit -11): Fatal Python error: Segmentation fault | "
                                  'File "'), outcomes[1]
    assert "in _run_case" in outcomes[1], outcomes[1]
