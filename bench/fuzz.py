"""Structure-aware mutation fuzzer for hostile .tflite files, through the CPU path and both GPU backends.

Each case reads a seed model (small writer-built models, and the real ones in ../shared/models) into the
graph IR, applies one to three mutations that know the structure (a tensor dimension made huge, zero,
negative or the rank changed; an option out of range; an axis/shape/pad/index constant out of range;
quantization scales of the wrong count, axis out of range, non-finite or zero scales; a constant buffer too
small or too large; an operand pointed at another, a missing or an out-of-range tensor; a back edge making a
cycle; nodes swapped, dropped or duplicated; a tensor's type changed; graph inputs/outputs changed; an op
swapped for another; every dimension of a tensor made large, so sizes overflow int64), writes it back with the
ModelBuilder, and sometimes flips bytes or truncates the result. The mutated bytes then go through the reader,
the partitioner, the lowering and the kernels of the CPU path, GpuDelegate(backend="cl") and
GpuDelegate(backend="gl"): load, allocate, set zeros, invoke twice.

The "hostile" seeds stress the limits rather than the format: a fused chain that binds more buffers than a GL
kernel may (issue 18, item 6), a chain of 1500 nodes that must prepare in linear time (item 7: a quadratic pass
shows up as a hang), and a kilobyte of model asking for gigabytes of tensors (item 4). A "cache" mutation (item 2)
runs each GPU path twice over one serialization dir and, between the two starts, puts something hostile under
the cache file's name (a FIFO, a directory, a symbolic link to /dev/zero, another model's cache file, a cut or
flipped file) or makes the directory writable by others: the second start must neither hang nor fail, and must
answer exactly as the first.

Every case runs in a child process (a crash or a hang is a finding, and the child is restarted after the
case that killed it). Acceptable outcomes: it runs; gpu_delegate.ModelError at any step; ValueError from
set_tensor; on a GPU path, a DelegateError that says what the device cannot do (a limit), not a compile
error. Where the CPU path and a GPU path both run, their outputs are compared (a "mismatch", reported apart:
a wrong answer, not a crash).

    python bench/fuzz.py --seconds 180 [--seed 1] [--paths cpu,cl,gl] [--models small,real,hostile] [--json out.json]
    python bench/fuzz.py --replay SEED:CASE      # one case in this process, with the full traceback
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"
# real model -> weight in the draw; MobileNets cost seconds per GPU case (compiles, llvmpipe invokes)
REAL = {"real/sine_float.tflite": 4, "real/iris_landmark.tflite": 2, "real/face_detection_short_range.tflite": 2,
        "mobilenet/mobilenet_v2_224_int8.tflite": 1, "mobilenet/mobilenet_v1_224_fp16.tflite": 1}
SMALL_WEIGHT = 6  # per writer-built model
CASE_TIMEOUT_S = 120.0  # a cold mutated MobileNet compiles ~60 kernels on two backends
# the child's data (RLIMIT_DATA: private writable mappings). Not its address space: CUDA's OpenCL reserves far more
# than any limit worth setting (on an H200 RLIMIT_AS kept every case off cl), and PoCL and llvmpipe reserve a lot.
MEMORY_LIMIT = 12 << 30
MAX_ELEMENTS = 1 << 24  # larger tensors after allocation: legal, but not worth the time of invoking
PATHS = ("cpu", "cl", "gl")
SELFTEST_CRASH = "GPU_DELEGATE_FUZZ_SELFTEST_CRASH"  # case index at which the child segfaults on purpose

# -- seed models -------------------------------------------------------------------------------------------


def _convnet() -> bytes:
    from gpu_delegate.tflite import ModelBuilder

    rng = np.random.default_rng(0)
    f32 = np.float32
    mb = ModelBuilder()
    x = mb.input("x", [1, 9, 9, 3])
    c = mb.tensor("c", [1, 5, 5, 6])
    mb.op("CONV_2D", [x, mb.const("cw", rng.standard_normal((6, 3, 3, 3)).astype(f32)),
                      mb.const("cb", rng.standard_normal(6).astype(f32))], [c],
          padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU6")
    d = mb.tensor("d", [1, 5, 5, 6])
    mb.op("DEPTHWISE_CONV_2D", [c, mb.const("dw", rng.standard_normal((1, 3, 3, 6)).astype(f32)),
                                mb.const("db", np.zeros(6, f32))], [d],
          padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1, dilation_w_factor=1, dilation_h_factor=1)
    a = mb.tensor("a", [1, 5, 5, 6])
    mb.op("ADD", [c, d], [a], fused_activation_function="RELU")
    p = mb.tensor("p", [1, 2, 2, 6])
    mb.op("MAX_POOL_2D", [a], [p], padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    m = mb.tensor("m", [1, 6])
    mb.op("MEAN", [p, mb.const("axes", np.array([1, 2], np.int32))], [m], keep_dims=False)
    fc = mb.tensor("fc", [1, 5])
    mb.op("FULLY_CONNECTED", [m, mb.const("fw", rng.standard_normal((5, 6)).astype(f32)),
                              mb.const("fb", rng.standard_normal(5).astype(f32))], [fc])
    y = mb.tensor("y", [1, 5])
    mb.op("SOFTMAX", [fc], [y], beta=1.0)
    mb.output(y)
    mb.add_signature("serving_default", {"x": x}, {"y": y})
    return mb.build()


def _layout() -> bytes:
    from gpu_delegate.tflite import ModelBuilder

    i32, f32 = np.int32, np.float32
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 6, 5])
    t = mb.tensor("t", [1, 6, 4, 5])
    mb.op("TRANSPOSE", [x, mb.const("perm", np.array([0, 2, 1, 3], i32))], [t])
    p = mb.tensor("p", [1, 8, 5, 5])
    mb.op("PAD", [t, mb.const("pads", np.array([[0, 0], [1, 1], [0, 1], [0, 0]], i32))], [p])
    s = mb.tensor("s", [1, 4, 5, 3])
    mb.op("STRIDED_SLICE", [p, mb.const("begin", np.array([0, 0, 0, 1], i32)),
                            mb.const("end", np.array([1, 8, 5, 4], i32)),
                            mb.const("strides", np.array([1, 2, 1, 1], i32))], [s])
    r = mb.tensor("r", [1, 8, 10, 3])
    mb.op("RESIZE_BILINEAR", [s, mb.const("size", np.array([8, 10], i32))], [r], align_corners=False,
          half_pixel_centers=True)
    cat = mb.tensor("cat", [1, 8, 10, 5])
    mb.op("CONCATENATION", [r, mb.const("extra", np.ones((1, 8, 10, 2), f32))], [cat], axis=3)
    g = mb.tensor("g", [1, 8, 10, 2])
    mb.op("GATHER", [cat, mb.const("idx", np.array([4, 0], i32))], [g], axis=3)
    h = mb.tensor("h", [1, 4, 5, 8])
    mb.op("SPACE_TO_DEPTH", [g], [h], block_size=2)
    q = mb.tensor("q", [20, 8])
    mb.op("RESHAPE", [h, mb.const("shape", np.array([20, 8], i32))], [q], new_shape=[20, 8])
    y = mb.tensor("y", [20])
    mb.op("SUM", [q, mb.const("axis", np.array([1], i32))], [y], keep_dims=False)
    mb.output(y)
    return mb.build()


def _elementwise() -> bytes:
    from gpu_delegate.tflite import ModelBuilder

    rng = np.random.default_rng(2)
    f32 = np.float32
    mb = ModelBuilder()
    x = mb.input("x", [2, 3, 4, 7])
    z = mb.input("z", [1, 1, 4, 7])
    m = mb.tensor("m", [2, 3, 4, 7])
    mb.op("MUL", [x, z], [m], fused_activation_function="NONE")
    s = mb.tensor("s", [2, 3, 4, 7])
    mb.op("SUB", [m, mb.const("k", rng.standard_normal(7).astype(f32))], [s], fused_activation_function="RELU")
    g = mb.tensor("g", [2, 3, 4, 7])
    mb.op("LOGISTIC", [s], [g])
    a, b = mb.tensor("a", [2, 3, 4, 3]), mb.tensor("b", [2, 3, 4, 4])
    mb.op("SPLIT_V", [g, mb.const("sizes", np.array([3, 4], np.int32)), mb.const("dim", np.array(3, np.int32))],
          [a, b], num_splits=2)
    mx = mb.tensor("mx", [2, 3, 4, 3])
    mb.op("MAXIMUM", [a, mb.const("floor", np.full((1, 1, 1, 3), 0.6, f32))], [mx])
    sd = mb.tensor("sd", [2, 3, 4, 3])
    mb.op("SQUARED_DIFFERENCE", [mx, a], [sd])
    th = mb.tensor("th", [2, 3, 4, 4])
    mb.op("TANH", [b], [th])
    pk = mb.tensor("pk", [2, 2, 3, 4, 3])
    mb.op("PACK", [sd, sd], [pk], values_count=2, axis=1)
    rm = mb.tensor("rm", [2, 4])
    mb.op("REDUCE_MAX", [th, mb.const("ax", np.array([1, 3], np.int32))], [rm], keep_dims=False)
    mb.output(rm, pk)
    return mb.build()


def _int8() -> bytes:
    from gpu_delegate.tflite import ModelBuilder

    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    x = mb.input("x", [1, 6, 6, 2])
    q = mb.tensor("q", [1, 6, 6, 2], np.int8, scale=0.05, zero_point=3)
    mb.op("QUANTIZE", [x], [q])
    w_scales = np.array([0.01, 0.02, 0.03], np.float32)
    w = mb.const("w", rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8), scale=w_scales, zero_point=0, axis=0)
    b = mb.const("b", rng.integers(-500, 500, 3).astype(np.int32), scale=0.05 * w_scales, zero_point=0)
    c = mb.tensor("c", [1, 6, 6, 3], np.int8, scale=0.1, zero_point=-5)
    mb.op("CONV_2D", [q, w, b], [c], padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU",
          version=3)
    ap = mb.tensor("ap", [1, 3, 3, 3], np.int8, scale=0.1, zero_point=-5)
    mb.op("AVERAGE_POOL_2D", [c], [ap], padding="VALID", stride_w=2, stride_h=2, filter_width=2,
          filter_height=2, version=2)
    ad = mb.tensor("ad", [1, 3, 3, 3], np.int8, scale=0.15, zero_point=1)
    mb.op("ADD", [ap, ap], [ad], version=2)
    r = mb.tensor("r", [1, 27], np.int8, scale=0.15, zero_point=1)
    mb.op("RESHAPE", [ad, mb.const("shape", np.array([1, 27], np.int32))], [r], version=2)
    y = mb.tensor("y", [1, 27])
    mb.op("DEQUANTIZE", [r], [y], version=2)
    mb.output(y)
    return mb.build()


def _fused_past_the_limit() -> bytes:
    """A 1x1 convolution and 40 ADD/MUL with tensor constants fused into it: 44 buffers for one kernel where GL
    binds 16; then 150 TANH, longer than one kernel's post-op chain may be."""
    from gpu_delegate.tflite import ModelBuilder

    rng = np.random.default_rng(3)
    f32 = np.float32
    shape = [1, 4, 5, 6]
    mb = ModelBuilder()
    x = mb.input("x", shape)
    cur = mb.tensor("conv", shape)
    mb.op("CONV_2D", [x, mb.const("w", rng.standard_normal((6, 1, 1, 6)).astype(f32) * 0.4),
                      mb.const("b", rng.standard_normal(6).astype(f32))], [cur], padding="VALID", stride_w=1,
          stride_h=1)
    for k in range(190):
        out = mb.tensor(f"t{k}", shape)
        if k < 40:
            c = rng.uniform(0.9, 1.1, shape) if k % 2 else rng.uniform(-0.1, 0.1, shape)
            mb.op("MUL" if k % 2 else "ADD", [cur, mb.const(f"c{k}", c.astype(f32))], [out])
        else:
            mb.op("TANH", [cur], [out])
        cur = out
    mb.output(cur)
    return mb.build()


def _long_chain() -> bytes:
    """1500 nodes: ADD(t, t) (a kernel each), every fifth an ADD of a tensor constant (fused), and at node 1000 an
    ATAN2 the GPU path does not take: a partition of 1000 nodes to prepare, then one of 499."""
    from gpu_delegate.tflite import ModelBuilder

    shape = [1, 2, 3, 4]
    half = np.full(shape, 0.5, np.float32)
    mb = ModelBuilder()
    cur = mb.input("x", shape)
    for k in range(1500):
        out = mb.tensor(f"t{k}", shape)
        if k == 1000:
            mb.op("ATAN2", [cur, mb.const(f"a{k}", half)], [out])
        elif k % 5 == 4:
            mb.op("ADD", [cur, mb.const(f"c{k}", -half)], [out])
        else:
            mb.op("ADD", [cur, cur], [out])
        cur = out
    mb.output(cur)
    return mb.build()


def _memory_bomb() -> bytes:
    """A kilobyte asking for 8 tensors of 10^9 values, each within the per-tensor limit: allocation must refuse
    it with a ModelError, not let the process be killed for its memory."""
    from gpu_delegate.tflite import ModelBuilder

    mb = ModelBuilder()
    x = mb.input("x", [1])
    outs = []
    for k in range(8):
        y = mb.tensor(f"y{k}", [10**9])
        mb.op("BROADCAST_TO", [x, mb.const(f"s{k}", np.array([10**9], np.int32))], [y], version=2)
        outs.append(y)
    mb.output(*outs)
    return mb.build()


SMALL = {"convnet": _convnet, "layout": _layout, "elementwise": _elementwise, "int8": _int8}
HOSTILE = {"fused_past_the_limit": _fused_past_the_limit, "long_chain": _long_chain, "memory_bomb": _memory_bomb}
HOSTILE_WEIGHT = 2  # per hostile model: the long chain costs seconds per path


@cache
def seed_bytes(name: str) -> bytes:
    built = {**SMALL, **HOSTILE}
    return built[name]() if name in built else (MODELS / name).read_bytes()


def seed_names(models: str) -> list[tuple[str, int]]:
    out = []
    if "small" in models:
        out += [(n, SMALL_WEIGHT) for n in SMALL]
    if "hostile" in models:
        out += [(n, HOSTILE_WEIGHT) for n in HOSTILE]
    if "real" in models and MODELS.is_dir():
        out += [(n, w) for n, w in REAL.items() if (MODELS / n).exists()]
    return out


# -- the graph IR back to bytes ----------------------------------------------------------------------------

def to_bytes(model) -> bytes:
    """Serialize a (mutated) gpu_delegate Model's main graph with the ModelBuilder."""
    from gpu_delegate.tflite import ModelBuilder

    g = model.main
    mb = ModelBuilder("fuzz")
    for t in g.tensors:
        q = t.quant
        mb.tensor(t.name, t.shape, t.dtype, data=t.data, shape_signature=t.shape_signature,
                  scale=None if q is None else q.scale, zero_point=None if q is None else q.zero_point,
                  axis=0 if q is None else q.axis, sparsity=t.sparsity, is_variable=t.is_variable)
    mb.inputs, mb.outputs = list(g.inputs), list(g.outputs)
    for n in g.nodes:
        mb.op(n.op, n.inputs, n.outputs, version=n.version, custom_options=n.custom_options or None, **n.attrs)
    for s in model.signatures[:1]:
        mb.add_signature(s.key, dict(s.inputs), dict(s.outputs))
    return mb.build()


# -- mutations ---------------------------------------------------------------------------------------------

ODD_DIMS = [0, 0, 1, 2, 3, 5, 7, 1000, 1 << 16, 1 << 20, 1 << 28, 2**31 - 1, -1, -7]
ODD_INTS = [0, -1, -2, 1, 2, 3, 4, 5, 7, 16, 100, 1 << 20, 2**31 - 1, -(2**31)]
ODD_FLOATS = [0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"), -float("inf")]
ODD_DTYPES = ["float16", "float32", "int8", "uint8", "int16", "int32", "int64", "bool"]
# weighted towards the mutations that get past the reader and the graph checks into the GPU paths
KINDS = ["dim", "dim", "dim", "rank", "attr", "attr", "attr", "const", "const", "const", "quant", "quant", "buffer",
         "operand", "operand", "cycle", "order", "drop", "dtype", "io", "opcode", "opcode", "qlen", "flip", "truncate",
         "huge", "cache", "cache"]
POST_WRITE = ("qlen", "flip", "truncate", "cache")  # edits of the serialized bytes, or of what surrounds a run
# what a "cache" mutation does to the serialization dir between the two starts of a GPU path
CACHE_ATTACKS = ("fifo", "directory", "symlink", "foreign", "truncate", "flip", "empty", "open-dir")


class Unbuildable(Exception):
    """The mutation produced something the writer cannot encode (not a finding)."""


def _pick(rng: random.Random, items: list):
    if not items:
        raise Unbuildable("nothing to mutate")
    return rng.choice(items)


def mutate(model, rng: random.Random, kind: str) -> str:
    """Apply one mutation of ``kind`` to ``model`` in place; returns a description."""
    from gpu_delegate.graph import Quantization

    g = model.main
    nt = len(g.tensors)
    consts = [t for t in g.tensors if t.data is not None]
    acts = [t for t in g.tensors if t.data is None]
    if kind == "dim":
        t = _pick(rng, [t for t in (acts if rng.random() < 0.8 else g.tensors) if t.shape])
        k, v = rng.randrange(len(t.shape)), rng.choice(ODD_DIMS)
        t.shape = t.shape[:k] + (v,) + t.shape[k + 1:]
        return f"tensor {t.index} dim {k} = {v}"
    if kind == "huge":  # each dimension within int32, their product beyond int64
        t = _pick(rng, acts)
        t.shape = tuple(rng.choice([2**31 - 1, 1 << 30, 1 << 20]) for _ in range(max(len(t.shape), 4)))
        return f"tensor {t.index} shape -> {list(t.shape)}"
    if kind == "rank":
        t = _pick(rng, acts)
        choice = rng.randrange(3)
        t.shape = t.shape[1:] if choice == 0 and t.shape else (1,) + t.shape if choice == 1 else t.shape + (1,) * 4
        return f"tensor {t.index} shape -> {list(t.shape)}"
    if kind == "attr":
        n = _pick(rng, [n for n in g.nodes if n.attrs])
        key = rng.choice(sorted(n.attrs))
        old = n.attrs[key]
        if isinstance(old, bool):
            new = not old
        elif isinstance(old, float):
            new = rng.choice(ODD_FLOATS)
        elif isinstance(old, list):
            new = [rng.choice(ODD_INTS) for _ in range(rng.choice([0, 1, len(old), len(old) + 2]))]
        else:
            new = rng.choice(ODD_INTS + [6, 9, 255])
        n.attrs[key] = new
        return f"{n} {key} = {new}"
    if kind == "const":
        t = _pick(rng, [t for t in consts if t.dtype.kind in "iu" and t.size < 64] or consts)
        data = np.array(t.data)
        if rng.random() < 0.5 and data.size:  # one element out of range
            flat = data.reshape(-1)
            k = rng.randrange(flat.size)
            if data.dtype.kind == "f":
                flat[k] = rng.choice(ODD_FLOATS)
            elif data.dtype.kind in "iu":
                lo, hi = _range(data.dtype)
                flat[k] = min(max(rng.choice(ODD_INTS), lo), hi)
            else:
                flat[k] = not flat[k]
            t.data = data
        else:  # another length
            n = rng.choice([0, 1, 2, 5, max(data.size - 1, 0), data.size + 1])
            values = np.array([rng.choice(ODD_INTS[:9]) for _ in range(n)]).astype(t.dtype)
            t.data, t.shape = values, (n,)
        return f"constant tensor {t.index} ({t.name}) -> {t.data.reshape(-1)[:8].tolist()}"
    if kind == "quant":
        t = _pick(rng, [t for t in g.tensors if t.quant is not None] or g.tensors)
        q = t.quant
        what = rng.randrange(6)
        if q is None or what == 0:
            t.quant = Quantization(np.array([rng.choice([0.1, 0.0, -1.0, 1e-30])], np.float32),
                                   np.array([rng.choice([0, 5, -300])], np.int64))
            return f"tensor {t.index} gets quantization {t.quant.scale[0]}, {t.quant.zero_point[0]}"
        if what == 1:
            q.scale = np.full(q.scale.shape, rng.choice([0.0, -1.0, 1e-30, 1e30]), np.float32)
        elif what == 2:
            q.zero_point = np.full(q.zero_point.shape, rng.choice([-1000, 300, 2**40, -129, 128]), np.int64)
        elif what == 3:  # per-channel of the wrong count
            n = rng.choice([2, 3, 5, 1000])
            q.scale, q.zero_point = np.full(n, 0.05, np.float32), np.zeros(n, np.int64)
        elif what == 4:
            q.axis = rng.choice([-1, 1, 3, 7, 100])
        else:
            t.quant = None
        return f"tensor {t.index} quantization scale {q.scale[:4].tolist()} zp {q.zero_point[:4].tolist()} " \
               f"axis {q.axis}"
    if kind == "buffer":
        t = _pick(rng, consts)
        flat = np.asarray(t.data).reshape(-1)
        n = rng.choice([0, 1, flat.size // 2, max(flat.size - 1, 0), flat.size + 1, flat.size * 2])
        t.data = np.resize(flat, n) if n else None  # the shape stays: the buffer lies (or is absent)
        return f"constant tensor {t.index} has {n} elements for shape {list(t.shape)}"
    if kind == "operand":
        n = _pick(rng, g.nodes)
        side = "inputs" if rng.random() < 0.8 or not n.outputs else "outputs"
        ids = getattr(n, side)
        if not ids:
            raise Unbuildable("no operand")
        k = rng.randrange(len(ids))
        v = rng.choice([-1, -1, rng.randrange(nt), rng.randrange(nt), nt, nt + 5, 1 << 20, -2,
                        n.outputs[0] if n.outputs else 0])
        ids[k] = v
        return f"{n} {side}[{k}] = {v}"
    if kind == "cycle":  # a back edge: an early node reads a later node's output
        if len(g.nodes) < 2:
            raise Unbuildable("one node")
        i, j = sorted(rng.sample(range(len(g.nodes)), 2))
        a, b = g.nodes[i], g.nodes[j]
        if not a.inputs or not b.outputs:
            raise Unbuildable("no operand")
        k = rng.randrange(len(a.inputs))
        a.inputs[k] = b.outputs[0]
        return f"{a} input {k} = output of {b} (a cycle)"
    if kind == "order":
        if len(g.nodes) < 2:
            raise Unbuildable("one node")
        i, j = rng.sample(range(len(g.nodes)), 2)
        g.nodes[i], g.nodes[j] = g.nodes[j], g.nodes[i]
        return f"nodes {i} and {j} swapped"
    if kind == "drop":
        i = rng.randrange(len(g.nodes))
        if rng.random() < 0.5:
            del g.nodes[i]
            return f"node {i} dropped"
        g.nodes.insert(i, g.nodes[i])
        return f"node {i} duplicated"
    if kind == "dtype":
        t = _pick(rng, g.tensors)
        new = np.dtype(rng.choice(ODD_DTYPES))
        if t.data is not None:
            t.data = np.asarray(t.data).astype(new)
        t.dtype = new
        return f"tensor {t.index} dtype -> {new}"
    if kind == "io":
        side = rng.choice(["inputs", "outputs"])
        ids = getattr(g, side)
        what = rng.randrange(4)
        if what == 0 and ids:
            ids.pop(rng.randrange(len(ids)))
        elif what == 1:
            ids.append(rng.randrange(nt))
        elif what == 2 and consts:
            ids.append(rng.choice(consts).index)
        else:
            ids.append(rng.choice([nt, nt + 3, 1 << 20]))
        return f"graph {side} -> {ids}"
    if kind == "opcode":
        from gpu_delegate.ops.base import REGISTRY

        n = _pick(rng, g.nodes)
        old = n.op
        n.op = rng.choice(sorted(REGISTRY))
        from gpu_delegate.tflite.schema import options_fields, options_type_for_op

        type_name = options_type_for_op(n.op) if n.op in _builtin_codes() else None
        fields = {f[0] for f in options_fields(type_name)} if type_name else set()
        n.attrs = {k: v for k, v in n.attrs.items() if k in fields}
        n.custom = n.op not in _builtin_codes()
        return f"{old} node {n.index} -> {n.op}"
    raise ValueError(kind)


@cache
def _builtin_codes() -> frozenset[str]:
    from gpu_delegate.tflite.schema import BUILTIN_CODES

    return frozenset(BUILTIN_CODES)


def shorten_quant_vector(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Make a quantized tensor's scale or zero-point vector shorter than the other (the writer keeps them
    equal): rewrite the vector's length word in the flatbuffer."""
    import tflite

    sg = tflite.Model.GetRootAs(data, 0).Subgraphs(0)
    found = []
    for i in range(sg.TensorsLength()):
        q = sg.Tensors(i).Quantization()
        if q is not None and q.ScaleLength():
            for field, vt in (("scale", 8), ("zero_point", 10)):
                o = q._tab.Offset(vt)
                if o:
                    found.append((i, field, q._tab.Vector(o) - 4, q._tab.VectorLen(o)))
    if not found:
        return data, "no quantized tensor"
    i, field, pos, n = rng.choice(found)
    new = rng.choice([0, max(n - 1, 0), n + 1, 1 << 30])
    out = bytearray(data)
    out[pos:pos + 4] = new.to_bytes(4, "little")
    return bytes(out), f"tensor {i} {field} length {n} -> {new}"


def _range(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def make_case(seed: int, index: int, names: list[tuple[str, int]]) -> tuple[str, bytes, list[str]]:
    """Case ``index`` of run ``seed``: (seed model, mutated bytes, what was done). Deterministic."""
    from gpu_delegate.tflite.reader import read_model

    rng = random.Random(seed * 1_000_003 + index)
    name = rng.choices([n for n, _ in names], [w for _, w in names])[0]
    content = seed_bytes(name)
    done = []
    for _ in range(20):  # a mutation the writer cannot encode is drawn again
        model = read_model(content, name)
        done = []
        kinds = [rng.choice(KINDS) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        try:
            for kind in kinds:
                if kind not in POST_WRITE:
                    done.append(f"{kind}: {mutate(model, rng, kind)}")
            data = to_bytes(model) if len(done) else content
        except (Unbuildable, KeyError, ValueError, TypeError, OverflowError, IndexError, AttributeError):
            continue  # the writer cannot encode this one (say, a value beyond int32): draw another
        if "qlen" in kinds:
            data, what = shorten_quant_vector(data, rng)
            done.append(f"qlen: {what}")
        if "flip" in kinds:
            out = bytearray(data)
            for _ in range(rng.choice([1, 2, 4, 16])):
                p = rng.randrange(len(out))
                out[p] ^= 1 << rng.randrange(8)
            data = bytes(out)
            done.append("flip: bytes flipped")
        if "truncate" in kinds:
            cut = rng.choice([8, 16, 64, len(data) // 2, len(data) - 1, rng.randrange(len(data))])
            data = data[:cut]
            done.append(f"truncate: to {cut} bytes")
        if "cache" in kinds:
            done.append(f"cache: {rng.choice(CACHE_ATTACKS)}")
        return name, data, done
    raise Unbuildable(f"no buildable mutation of {name} in 20 draws")


# -- running a case (in the child) -------------------------------------------------------------------------

_DELEGATES: dict[str, object] = {}


def _delegate(path: str):
    import gpu_delegate as gd

    if path not in _DELEGATES:
        try:
            _DELEGATES[path] = gd.GpuDelegate(backend=path)
        except gd.DelegateError as e:
            _DELEGATES[path] = e
    return _DELEGATES[path]


def run_path(content: bytes, path: str, cache_attack: str | None = None) -> tuple[str, list[np.ndarray] | None]:
    """Outcome of one path ("ok: ..." or "FAIL: ...", raising on a finding) and its outputs if it ran; on a GPU
    path with ``cache_attack``, of the second of two starts over one serialization dir (run_attacked)."""
    delegates = None
    if path != "cpu":
        d = _delegate(path)
        if isinstance(d, Exception):
            return f"ok: backend unavailable ({d})", None
        if cache_attack is not None:
            return run_attacked(content, path, cache_attack)
        delegates = [d]
    return _run(content, path, delegates)


def run_attacked(content: bytes, path: str, attack: str) -> tuple[str, list[np.ndarray] | None]:
    """A cold start that writes the serialization cache, ``attack`` on what it wrote, then a warm start, which must
    not hang or fail (a finding raises) and must answer exactly as the cold one did."""
    import gpu_delegate as gd

    def start(directory: Path) -> tuple[str, list[np.ndarray] | None]:
        return _run(content, path, [gd.GpuDelegate(backend=path, serialization_dir=directory, model_token="fuzz")])

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "cache"
        cold, cold_outs = start(directory)
        files = sorted(directory.glob("*.bin")) if directory.is_dir() else []
        if cold_outs is None or not files:
            return cold, cold_outs
        if attack == "foreign":  # another model's cache file under this one's name
            other = Path(tmp) / "other"
            _run(seed_bytes("convnet"), path, [gd.GpuDelegate(backend=path, serialization_dir=other,
                                                              model_token="fuzz")])
            foreign = sorted(other.glob("*.bin"))[0].read_bytes()
        for f in files:
            if attack == "open-dir":
                os.chmod(directory, 0o777)
                break
            data = f.read_bytes()
            f.unlink()
            if attack == "fifo":
                os.mkfifo(f, 0o600)
            elif attack == "directory":
                f.mkdir()
            elif attack == "symlink":
                f.symlink_to("/dev/zero")
            elif attack == "foreign":
                f.write_bytes(foreign)
            elif attack == "truncate":
                f.write_bytes(data[:len(data) // 2])
            elif attack == "flip":
                f.write_bytes(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 1]) + data[len(data) // 2 + 1:])
            else:
                f.write_bytes(b"")
        warm, warm_outs = start(directory)
        if warm_outs is None:
            raise AssertionError(f"the start after '{attack}' in the cache dir did not run: {warm}")
        for k, ((a, _), (b, _)) in enumerate(zip(cold_outs, warm_outs)):
            if a.shape != b.shape or a.tobytes() != b.tobytes():
                raise AssertionError(f"after '{attack}' in the cache dir, output {k} differs from the cold start's")
        return f"{warm} (cache: {attack}, answered as the cold start)", warm_outs


def _run(content: bytes, path: str, delegates: list | None) -> tuple[str, list[np.ndarray] | None]:
    import gpu_delegate as gd

    try:
        it = gd.Interpreter(model_content=content, experimental_delegates=delegates)
    except gd.ModelError:
        return "ok: refused at load", None
    stage = "allocate"
    try:
        it.allocate_tensors()
        if max((int(np.prod(d["shape"], dtype=np.int64)) for d in it.get_tensor_details()), default=0) > MAX_ELEMENTS:
            return "ok: allocated (too large to invoke)", None
        stage = "set_tensor"
        try:
            for d in it.get_input_details():
                it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        except gd.ModelError:
            raise
        except ValueError:
            return "ok: set_tensor refused", None
        stage = "invoke"
        it.invoke()
        it.invoke()  # a second invoke reuses every buffer
        outs = [(it.get_tensor(d["index"]), _step(it.graph, d["index"])) for d in it.get_output_details()]
    except gd.ModelError:
        return f"ok: refused at {stage}", None
    except gd.DelegateError as e:
        if "failed to compile" in str(e) or "failed to link" in str(e):
            raise
        return f"ok: device refused at {stage} ({str(e).splitlines()[0][:200]})", None
    on_gpu = sum(d["backend"] == path for d in it.get_ops_details())
    return ("ok: ran" + (f" ({on_gpu} nodes on {path})" if path != "cpu" else "")), outs


def _step(graph, t: int) -> float:
    """The quantization step behind a float output that a DEQUANTIZE wrote (0 for any other output): the
    GPU computes quantized models in float, so its int8 results may be a step or two from the CPU's."""
    for node in graph.nodes:
        if t in node.outputs and node.op == "DEQUANTIZE" and node.inputs and node.inputs[0] >= 0:
            q = graph.tensors[node.inputs[0]].quant
            return float(np.max(np.abs(q.scale))) if q is not None else 0.0
    return 0.0


def compare(cpu: list[tuple[np.ndarray, float]], gpu: list[tuple[np.ndarray, float]]) -> str | None:
    """Why the GPU outputs differ from the CPU's, or None."""
    if len(cpu) != len(gpu):
        return f"{len(gpu)} outputs, the CPU gave {len(cpu)}"
    for k, ((a, step), (b, _)) in enumerate(zip(cpu, gpu)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {b.dtype}{list(b.shape)} vs CPU {a.dtype}{list(a.shape)}"
        if a.dtype.kind in "iu":
            if a.size and np.abs(a.astype(np.int64) - b.astype(np.int64)).max() > 2:
                return f"output {k}: more than 2 quantization steps from the CPU's"
        elif a.dtype.kind == "f":
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            finite = np.isfinite(a64)
            if not np.array_equal(finite, np.isfinite(b64)):
                return f"output {k}: non-finite values differ from the CPU's"
            if finite.any():
                err = np.abs(a64[finite] - b64[finite]).max()
                if err > 1e-3 * (1 + np.abs(a64[finite]).max()) + 2 * step:
                    return f"output {k}: max abs error {err:.3g} against the CPU"
    return None


def run_case(seed: int, index: int, names: list[tuple[str, int]], paths: list[str]) -> dict:
    try:
        name, content, done = make_case(seed, index, names)
    except Unbuildable as e:
        return {"model": "?", "mutations": [str(e)], "outcomes": {}, "skipped": True}
    attack = next((m.split(": ", 1)[1] for m in done if m.startswith("cache: ")), None)
    outcomes, outputs = {}, {}
    for path in paths:
        try:
            outcomes[path], outputs[path] = run_path(content, path, attack)
        except Exception as e:  # noqa: BLE001  (anything else is the finding)
            frames = traceback.extract_tb(e.__traceback__)
            ours = [f for f in frames if f"{os.sep}gpu_delegate{os.sep}" in f.filename]
            f = (ours or frames)[-1]  # the package's line, not numpy's
            outcomes[path] = (f"FAIL: {type(e).__name__}: {str(e)[:300]} "
                              f"(at {Path(f.filename).name}:{f.lineno} in {f.name})")
            outputs[path] = None
    mismatch = {}
    if outputs.get("cpu") is not None:
        for path in paths:
            if path != "cpu" and outputs.get(path) is not None:
                why = compare(outputs["cpu"], outputs[path])
                if why:
                    mismatch[path] = why
    return {"model": name, "mutations": done, "outcomes": outcomes, "mismatch": mismatch}


def worker(seed: int, first: int, names_json: str, paths: str) -> None:
    """Run cases from ``first`` on, reporting each before and after, so the parent knows which one crashed."""
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT, MEMORY_LIMIT))
    names = [tuple(x) for x in json.loads(names_json)]
    crash_at = int(os.environ.get(SELFTEST_CRASH, -1))
    for i in range(first, 1 << 62):
        print(json.dumps({"start": i}), flush=True)
        if i == crash_at:  # the harness's own test: a segfault, as a bug in a driver or kernel would cause
            import ctypes

            ctypes.string_at(0)
        result = run_case(seed, i, names, paths.split(","))
        print(json.dumps({"done": i, "result": result}), flush=True)


# -- the parent --------------------------------------------------------------------------------------------

def fuzz(seed: int, seconds: float, names: list[tuple[str, int]], paths: list[str], log=print,
         max_cases: int | None = None) -> dict:
    """Run cases 0, 1, 2, ... until ``seconds`` have passed (or ``max_cases`` are done); a case in flight at
    the deadline is finished."""
    deadline = time.monotonic() + seconds

    def enough() -> bool:
        return time.monotonic() > deadline or (max_cases is not None and len(results) + len(crashes) >= max_cases)

    results: dict[int, dict] = {}
    crashes: dict[int, str] = {}
    first = 0
    code = ("import sys; from bench import fuzz; "
            "fuzz.worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])")
    with tempfile.TemporaryDirectory() as tmp:
        while not enough():
            log_path = Path(tmp) / f"stderr_{first}.txt"
            with open(log_path, "w") as err:  # a file, not a pipe: a chatty child must not block on a full pipe
                proc = subprocess.Popen([sys.executable, "-c", code, str(seed), str(first), json.dumps(names),
                                         ",".join(paths)], stdout=subprocess.PIPE, stderr=err, text=True,
                                        env=dict(os.environ, PYTHONFAULTHANDLER="1"), cwd=Path(__file__).parents[1])
            current, started = None, False
            case_deadline = time.monotonic() + CASE_TIMEOUT_S + 60  # the first case also pays for the imports
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                while True:
                    if not sel.select(timeout=max(0.0, case_deadline - time.monotonic())):
                        if current is not None:
                            crashes[current] = f"hang: no result within {CASE_TIMEOUT_S:.0f} s"
                        break
                    line = proc.stdout.readline()
                    if not line:
                        break
                    msg = json.loads(line)
                    if "start" in msg:
                        current, started, case_deadline = msg["start"], True, time.monotonic() + CASE_TIMEOUT_S
                        continue
                    results[msg["done"]] = msg["result"]
                    current = None
                    if len(results) % 25 == 0:
                        log(f"  {len(results)} cases, {len(crashes)} crashes, "
                            f"{sum(_bad(r) for r in results.values())} with failures")
                    if enough():
                        break
            proc.kill()
            proc.wait()
            proc.stdout.close()
            if not started:
                raise RuntimeError(f"the fuzz child failed before its first case: "
                                   f"{_crash_summary(log_path.read_text())}")
            if current is not None and current not in crashes:
                crashes[current] = f"child died (exit {proc.returncode}): {_crash_summary(log_path.read_text())}"
            first = max([*results, *crashes], default=first - 1) + 1
    return {"results": results, "crashes": crashes}


def _bad(r: dict) -> bool:
    return any(o.startswith("FAIL") for o in r.get("outcomes", {}).values())


def _crash_summary(stderr: str) -> str:
    """faulthandler's verdict and the innermost frames (it lists the most recent call first)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith("Fatal Python error")][:1]
    frames = [ln for ln in lines if ln.startswith("File ")][:3]
    return " | ".join(fatal + frames) or " | ".join(lines[-3:])


def report(seed: int, out: dict, elapsed: float) -> dict:
    results, crashes = out["results"], out["crashes"]
    ran = {k: r for k, r in results.items() if not r.get("skipped")}
    outcome_counts: dict[str, Counter] = {}
    findings: dict[str, list[int]] = {}
    for i, r in sorted(ran.items()):
        for path, o in r["outcomes"].items():
            label = o.split(" (")[0] if o.startswith("ok") else "FAIL"
            outcome_counts.setdefault(path, Counter())[label] += 1
            if o.startswith("FAIL"):
                findings.setdefault(f"{path}: {o[6:]}", []).append(i)
    refusals: dict[str, list[int]] = {}
    for i, r in sorted(ran.items()):
        for path, o in r["outcomes"].items():
            if o.startswith("ok: device refused"):
                refusals.setdefault(f"{path}: {o[4:]}", []).append(i)
    mismatches: dict[str, list[int]] = {}
    for i, r in sorted(ran.items()):
        for path, why in r.get("mismatch", {}).items():
            mismatches.setdefault(f"{path}: {r['model']}: {why}", []).append(i)
    print(f"\nseed {seed}: {len(ran)} cases in {elapsed:.0f} s ({len(results) - len(ran)} unbuildable draws), "
          f"{len(crashes)} crashes/hangs, {len(findings)} distinct failures, {len(mismatches)} kinds of mismatch")
    for path, c in outcome_counts.items():
        gpu = sum(" nodes on " in r["outcomes"].get(path, "") and "(0 nodes" not in r["outcomes"][path]
                  for r in ran.values())
        print(f"  {path}: {dict(c)}" + (f"; {gpu} ran with nodes on {path}" if path != "cpu" else ""))
    by_model = Counter(r["model"] for r in ran.values())
    print(f"  seed models: {dict(by_model)}")
    for i, why in sorted(crashes.items()):
        print(f"CRASH case {seed}:{i}: {why}")
    for what, cases in sorted(findings.items(), key=lambda kv: -len(kv[1])):
        r = ran[cases[0]]
        print(f"FAIL x{len(cases)} (e.g. case {seed}:{cases[0]}, {r['model']}: {'; '.join(r['mutations'])[:200]}):"
              f"\n    {what}")
    for what, cases in sorted(refusals.items(), key=lambda kv: -len(kv[1])):
        print(f"DEVICE REFUSED x{len(cases)} (e.g. case {seed}:{cases[0]}): {what}")
    for what, cases in sorted(mismatches.items(), key=lambda kv: -len(kv[1])):
        r = ran[cases[0]]
        print(f"MISMATCH x{len(cases)} (e.g. case {seed}:{cases[0]}: {'; '.join(r['mutations'])[:200]}):\n"
              f"    {what}")
    return {"seed": seed, "cases": len(ran), "seconds": elapsed, "crashes": crashes,
            "findings": findings, "mismatches": mismatches, "device_refusals": refusals,
            "outcomes": {p: dict(c) for p, c in outcome_counts.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--paths", default=",".join(PATHS), help="of cpu, cl, gl")
    ap.add_argument("--models", default="small,real,hostile", help="of small, real, hostile")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--replay", help="SEED:CASE: run one case here and show tracebacks")
    args = ap.parse_args()
    names = seed_names(args.models)
    paths = [p for p in args.paths.split(",") if p]
    if not set(paths) <= set(PATHS):
        sys.exit(f"--paths: choose from {', '.join(PATHS)}")
    if args.replay:
        seed, index = (int(v) for v in args.replay.split(":"))
        name, content, done = make_case(seed, index, names)
        print(f"case {seed}:{index} of {name}: {done}")
        import gpu_delegate as gd

        attack = next((m.split(": ", 1)[1] for m in done if m.startswith("cache: ")), None)
        for path in paths:
            if attack is not None and path != "cpu":
                print(f"{path}: {run_path(content, path, attack)[0]}")  # a finding raises, with its traceback
                continue
            delegates = None if path == "cpu" else [gd.GpuDelegate(backend=path)]
            try:
                it = gd.Interpreter(model_content=content, experimental_delegates=delegates)
                it.allocate_tensors()
                for d in it.get_input_details():
                    it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
                it.invoke()
                print(f"{path}: ran; {[it.get_tensor(d['index']).shape for d in it.get_output_details()]}")
            except Exception:  # noqa: BLE001  (shown, not handled)
                print(f"{path}:")
                traceback.print_exc()
        return
    print(f"fuzzing for {args.seconds:.0f} s, seed {args.seed}, paths {paths}, "
          f"{len(names)} seed models{'' if MODELS.is_dir() else f' ({MODELS} is absent)'}")
    t0 = time.monotonic()
    out = fuzz(args.seed, args.seconds, names, paths)
    summary = report(args.seed, out, time.monotonic() - t0)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    sys.exit(1 if summary["crashes"] or summary["findings"] else 0)


if __name__ == "__main__":
    main()
