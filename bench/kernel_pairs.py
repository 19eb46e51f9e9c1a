"""Kernel by kernel, two plans side by side: an int8 model against its float twin, or one model on this package
against another copy of it (--baseline), on one backend, in one process.

Each kernel of each plan is dispatched and waited for, in the plan's order on the last invoke's inputs, written again
first, untimed (so that each kernel reads the values its producers wrote: the memory plan lends a buffer to later
tensors, whose values, 8-bit codes read as floats among them, are denormals that made an image model's first kernel
4-7x slower when it was dispatched alone after an invoke), round after round, the two plans interleaved so that load
from other processes hits both alike; per kernel, the fastest of the rounds. Kernels are paired by their order
among kernels of the same name (conv2d with conv2d, ...): the int8 plan's extra QUANTIZE copy at the input pairs
with nothing. Printed: per pair the two times, their ratio, and the kernel's grid, blocking and post-ops; then the
totals per kernel name.

Why not `gpu-delegate benchmark --enable_op_profiling`: it profiles one model at a time, and with TFLite's default
flags (`--gpu_precision_loss_allowed=true`: fp16 storage, which PoCL and llvmpipe emulate at 3-10x a kernel's fp32
time) it showed GL int8 ResNet50 level with its fp32 twin while the fp32-storage plans here were 1.6x apart
(conv2d.dialect's write loop, which Mesa stopped unrolling once a fake-quant was fused into it).

    python bench/kernel_pairs.py --backend gl A.tflite B.tflite [--rounds 3]
    PYTHONPATH=/tmp/old python bench/kernel_pairs.py --backend gl M.tflite M.tflite --baseline gpu_delegate_old
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections import defaultdict
from pathlib import Path

import numpy as np


def runner_for(path: Path, backend: str, package: str):
    """The single GPU partition's PlanRunner of ``path`` on ``backend`` (package ``package``), after two invokes,
    and the inputs (feeds, codes) it ran on."""
    gd = importlib.import_module(package)
    from gpu_delegate import tools

    it = gd.Interpreter(model_path=str(path), experimental_delegates=[gd.GpuDelegate(backend=backend)])
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in it.get_input_details():
        it.set_tensor(d["index"], tools.random_input(d["shape"], d["dtype"], rng))
    it.invoke()
    runners = [s.kernel.runner for s in it._steps if getattr(getattr(s, "kernel", None), "runner", None)]
    if len(runners) != 1:
        raise SystemExit(f"{path}: {len(runners)} GPU partitions on {backend}; this tool compares one")
    runner, last = runners[0], {}
    run = runner.run

    def recording(feeds, codes=None, progress=None):
        last.update(feeds=feeds, codes=codes or {})
        return run(feeds, codes, progress)

    runner.run = recording
    it.invoke()
    return it, runner, last


def dispatch_times(runner, last: dict) -> list[float]:
    """Seconds of each dispatch of the plan, in order, each waited for, after the last invoke's inputs are written
    again (untimed)."""
    runner.write_inputs(last["feeds"], last["codes"])
    times = []
    for bound in runner.bound:
        t0 = time.perf_counter()
        runner.backend.dispatch_bound([bound])
        runner.backend.finish()
        times.append(time.perf_counter() - t0)
    return times


def describe(call) -> str:
    blocking = " ".join(f"{key}={call.defines[key]}" for key in ("BLOCK_S", "BLOCK_X", "KH", "SH")
                        if key in call.defines)
    return f"{call.kernel} grid={call.grid} {blocking} post-ops={[p.kind for p in call.postops]}"


def pairs(calls_a: list, calls_b: list) -> list[tuple[int, int]]:
    """(index in a, index in b) of the kernels of the same name and the same rank among that name's kernels."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for j, c in enumerate(calls_b):
        by_name[c.kernel].append(j)
    seen: dict[str, int] = defaultdict(int)
    out = []
    for i, c in enumerate(calls_a):
        rank = seen[c.kernel]
        seen[c.kernel] += 1
        if rank < len(by_name[c.kernel]):
            out.append((i, by_name[c.kernel][rank]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--backend", default="gl", choices=["cl", "gl"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="", help="package that runs B (another copy of gpu_delegate)")
    args = ap.parse_args()
    it_a, ra, last_a = runner_for(args.a, args.backend, "gpu_delegate")  # the interpreters keep their runners open
    it_b, rb, last_b = runner_for(args.b, args.backend, args.baseline or "gpu_delegate")
    ta: list[list[float]] = [[] for _ in ra.bound]
    tb: list[list[float]] = [[] for _ in rb.bound]
    for _ in range(args.rounds):
        for k, t in enumerate(dispatch_times(ra, last_a)):
            ta[k].append(t)
        for k, t in enumerate(dispatch_times(rb, last_b)):
            tb[k].append(t)
    ma = [min(t) * 1e3 for t in ta]
    mb = [min(t) * 1e3 for t in tb]
    b_name = f"{args.b.name}{' (' + args.baseline + ')' if args.baseline else ''}"
    print(f"A = {args.a.name}, B = {b_name}, {args.backend}: {sum(ma):.2f} ms vs {sum(mb):.2f} ms, "
          f"A / B {sum(ma) / sum(mb):.2f} (kernels dispatched one at a time, fastest of {args.rounds} rounds)")
    print("| # | A ms | B ms | A / B | kernel (A) |\n|---:|---:|---:|---:|---|")
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i, j in pairs(ra.plan.kernels, rb.plan.kernels):
        call = ra.plan.kernels[i]
        print(f"| {i} | {ma[i]:.3f} | {mb[j]:.3f} | {ma[i] / mb[j]:.2f} | {describe(call)} |")
        totals[call.kernel][0] += ma[i]
        totals[call.kernel][1] += mb[j]
    print("\n| kernel | A ms | B ms | A / B |\n|---|---:|---:|---:|")
    for name, (a, b) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
    del it_a, it_b


if __name__ == "__main__":
    main()
