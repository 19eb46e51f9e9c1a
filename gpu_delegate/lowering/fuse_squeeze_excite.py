"""Squeeze-and-excite's gate as one kernel: the MEAN of x over its pixels (a reduce kernel), a 1x1 convolution of
that vector down to a few channels, and one back up (two conv2d_1x1 kernels over a single pixel, the second with
the gate's LOGISTIC or hard sigmoid as post-ops) become kernels/dialect/squeeze_excite.dialect, whose one work group
keeps the pooled and hidden vectors in shared memory. Each of the three did less work than a launch costs:
MobileNetV3Small has 9 such gates (27 of its 65 kernels), EfficientNetB0 16.

This pass runs on the emitted kernels (after emit and fuse_channel_scale, before memory assigns buffers), and takes
float chains only: the convolutions' biases serve as they are, their weight rows are laid out again for the kernel
(_gate_rows), the first convolution's fused post-ops run inside the kernel (kernels/README.md, render_steps) and the
second's on the gate it stores. Declined: batches of more than one (a gate per batch), a pooled or hidden vector
anything else reads, post-ops of the hidden layer that read a buffer or a constant (an 8-bit chain's fake-quant
steps), a kernel that would bind more buffers than the device has, vectors too large for the shared memory every
device has, products of more than MAX_GATE_MACS multiply-adds (a classifier's head), and on GL on a CPU, hidden
layers of more than GL_CPU_MAX_HIDDEN channels.
"""

from __future__ import annotations

import functools

import numpy as np

from ..backends.codegen import render_steps, self_contained
from ..phwc4 import slices
from .context import LowerContext
from .plan import KernelCall
from .view import PartitionView, PassResult

# Work items of the one group: every OpenCL GPU and every GL ES 3.1 device runs groups of 64 (GL guarantees 128).
GROUP = 64
# Bytes of shared memory the kernel may take: GL ES 3.1 guarantees 16384, OpenCL GPUs have at least as much.
SHARED_BYTES = 16384
# Output slices a work item of opencl/squeeze_excite.cl (a CPU's OpenCL) computes: one float16
CPU_SLICES = 4
# On GL on a CPU (llvmpipe) the one work group's products ran slower than the three kernels' (whose groups share the
# cores) where the hidden layer had more channels than this: MobileNetV3Small's 240 -> 64, 288 -> 72 and 576 -> 144
# gates 1.05x, 1.3x and 2.2x the time, each dispatched alone and back to back; with 48 or fewer, EfficientNetB0's and
# MobileNetV3Small's others 0.74-0.94x, 1152 -> 48 the same. PoCL's float16 form ran faster at every size.
GL_CPU_MAX_HIDDEN = 48
# Multiply-adds of the two products past which they keep kernels of their own, whose groups share the device: a
# classifier's head (MEAN, then dense layers of 1000s of channels: MobileNetV3's 576 -> 1024 -> 1000 is 1.6 M) would
# otherwise stream megabytes of weights on one core. The largest gates measured fused: 576 -> 144 -> 576, 166 K.
MAX_GATE_MACS = 1 << 18


def _pooling(call: KernelCall, view: PartitionView) -> bool:
    """Whether ``call`` is a MEAN over H and W alone of a float tensor, with nothing fused into it."""
    d = call.defines
    return (call.kernel == "reduce" and view.graph.nodes[call.node].op == "MEAN" and not call.postops
            and (d.get("RED_B"), d.get("RED_H"), d.get("RED_W"), d.get("RED_C")) == (0, 1, 1, 0)
            and set(call.inputs) == {"src"} and set(call.outputs) == {"dst"} and not call.constants)


def _one_pixel_conv(call: KernelCall, src: int) -> bool:
    """Whether ``call`` is a 1x1 convolution of the one-pixel tensor ``src`` alone, unscaled."""
    d = call.defines
    return (call.kernel == "conv2d_1x1" and call.inputs == {"src": src} and set(call.outputs) == {"dst"}
            and d.get("PIX_BLOCKS") == 1 and not d.get("SRC_SCALE") and "w" in call.consts
            and set(call.consts) <= {"w", "bias"} and not call.constants)


def _gate_rows(rows: np.ndarray, src_slices: int, dst_slices: int, block_s: int, per_item: int) -> np.ndarray:
    """A 1x1 convolution's weight rows in its kernel's order ([block][input slice][c][j], ops/conv.py
    conv_weight_rows) as squeeze_excite reads them: with ``per_item`` 0 (the dialect's, a work item a slice)
    [input slice][c][output slice], consecutive output slices side by side; else (opencl/squeeze_excite.cl)
    [block of per_item output slices][input slice][c][j], zero past the last slice."""
    blocks = rows.shape[0] // (src_slices * 4 * block_s)
    r = rows.reshape(blocks, src_slices, 4, block_s, 4).transpose(1, 2, 0, 3, 4)
    by_slice = r.reshape(src_slices, 4, blocks * block_s, 4)[:, :, :dst_slices]  # [s][c][o][lane]
    if not per_item:
        return np.ascontiguousarray(by_slice).reshape(-1, 4)
    padded = np.zeros((src_slices, 4, -(-dst_slices // per_item) * per_item, 4), np.float32)
    padded[:, :, :dst_slices] = by_slice
    r = padded.reshape(src_slices, 4, -1, per_item, 4).transpose(2, 0, 1, 3, 4)
    return np.ascontiguousarray(r).reshape(-1, 4)


def run(view: PartitionView, ctx: LowerContext) -> PassResult:
    result = PassResult("fuse_squeeze_excite")
    kernels = ctx.kernels
    outputs = set(view.outputs) | set(ctx.dense)
    held = view.shared_buffers()
    limit = ctx.max_buffers if ctx.max_buffers is not None else float("inf")

    def readers(t: int) -> list[int]:
        return [k for k, c in enumerate(kernels) if c.reads(t)]

    def private(t: int) -> bool:  # a vector that only the next step of the gate reads
        return t not in outputs and t not in held and len(readers(t)) == 1

    fused: dict[int, KernelCall] = {}  # the second convolution's index -> the kernel that replaces the three
    gone: set[int] = set()
    replaced: set[str] = set()  # the convolutions' weight rows in their own order
    per_item = CPU_SLICES if ctx.cpu_opencl else 0
    for k, pool in enumerate(kernels):
        if not _pooling(pool, view):
            continue
        x, pooled = pool.inputs["src"], pool.outputs["dst"]
        first = readers(pooled)
        if not private(pooled) or not _one_pixel_conv(kernels[first[0]], pooled):
            continue
        squeeze = kernels[first[0]]
        hidden = squeeze.outputs["dst"]
        second = readers(hidden)
        if not private(hidden) or not _one_pixel_conv(kernels[second[0]], hidden):
            continue
        excite = kernels[second[0]]
        gate = excite.outputs["dst"]
        label = f"node {pool.node} (MEAN) and the convolutions {squeeze.node}, {excite.node}"
        b, h, w, c = ctx.tensors[x]
        mid, out = ctx.tensors[hidden][3], ctx.tensors[gate][3]
        if b != 1:
            result.declined.append(f"{label}: a gate per batch (batch {b})")
            continue
        if c * mid + mid * out > MAX_GATE_MACS:
            result.declined.append(f"{label}: {c * mid + mid * out} multiply-adds, more than one work group's share")
            continue
        if ctx.api == "OpenGL" and ctx.device_type == "cpu" and mid > GL_CPU_MAX_HIDDEN:
            result.declined.append(f"{label}: {mid} hidden channels, faster in three kernels on GL on a CPU")
            continue
        if not all(self_contained(p) for p in squeeze.postops):
            result.declined.append(f"{label}: the hidden layer's post-ops read a buffer or a constant")
            continue
        if gate in held or gate in ctx.dense:
            result.declined.append(f"{label}: the gate is stored as part of another tensor or dense")
            continue
        biases = {f"b{n}": conv.consts["bias"] for n, conv in ((1, squeeze), (2, excite)) if "bias" in conv.consts}
        if 4 + len(biases) + sum(p.source is not None for p in excite.postops) > limit:
            result.declined.append(f"{label}: more buffers than the device binds")
            continue
        if 16 * (GROUP + slices(c) + slices(mid)) > SHARED_BYTES:
            result.declined.append(f"{label}: {c} and {mid} channels overflow the shared memory")
            continue
        consts = dict(biases)
        for n, conv, s_in, s_out in ((1, squeeze, slices(c), slices(mid)), (2, excite, slices(mid), slices(out))):
            key = conv.consts["w"]
            rows = _gate_rows(ctx.consts[key], s_in, s_out, int(conv.defines["BLOCK_S"]), per_item)
            consts[f"w{n}"] = ctx.const(f"se{per_item}_{key}", functools.partial(np.asarray, rows))
            replaced.add(key)
        parts = 1
        while 2 * parts * slices(c) <= GROUP and 2 * parts <= h * w:
            parts *= 2
        defines: dict[str, int | float | str] = {
            "GROUP": GROUP, "PARTS": parts, "COUNT": float(h * w), "MID_S": slices(mid), "MID_C": mid,
            "HIDDEN_STEPS": int(bool(squeeze.postops))}
        for n, conv in ((1, squeeze), (2, excite)):
            d = conv.defines
            defines |= {f"HAS_BIAS{n}": int("bias" in conv.consts), f"ACT{n}": d.get("ACT", 0)}
            if d.get("ACT"):
                defines |= {f"ACT{n}_MIN": d["ACT_MIN"], f"ACT{n}_MAX": d["ACT_MAX"]}
        fused[second[0]] = KernelCall(
            "squeeze_excite", pool.node, {"src": x}, {"dst": gate}, consts, defines, (GROUP, 1, 1),
            postops=excite.postops, local_size=(GROUP, 1, 1),
            variants={"opencl": "squeeze_excite"} if ctx.cpu_opencl else {},
            helpers=render_steps("hidden_steps", squeeze.postops) if squeeze.postops else "",
            fused_nodes=(*pool.fused_nodes, *squeeze.nodes, *excite.fused_nodes, excite.node))
        gone |= {k, first[0]}
        del ctx.tensors[pooled], ctx.tensors[hidden]  # no kernel reads or writes them now
        result.applied.append(f"fused {label} into one squeeze-and-excite kernel ({c} -> {mid} -> {out} channels)")
    ctx.kernels[:] = [fused.get(k, c) for k, c in enumerate(kernels) if k not in gone]
    read = {key for c in ctx.kernels for key in (*c.consts.values(), *(p.source for p in c.postops))}
    for key in replaced - read:  # weights no other kernel reads in that order
        del ctx.consts[key]
    return result
