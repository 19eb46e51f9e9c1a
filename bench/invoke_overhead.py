"""Where an invoke's time goes, per model and backend: the invoke's median wall time, the kernels' own device time
(GpuDelegate(enable_op_profiling=True): OpenCL profiling events, GL timer queries where the driver has them), and
the host functions that take the most of it (cProfile, own time per invoke). For small models, whose kernels take
less than the invoke around them.

    python bench/invoke_overhead.py MODEL.tflite [...] [--backends cl,gl] [--invokes 200]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

import gpu_delegate as gd
from gpu_delegate import tools


def interpreter(path: str, backend: str, profiled: bool) -> tuple[gd.Interpreter, gd.GpuDelegate]:
    delegate = gd.GpuDelegate(backend=backend, enable_op_profiling=profiled)
    it = gd.Interpreter(model_path=path, experimental_delegates=[delegate])
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in it.get_input_details():
        it.set_tensor(d["index"], tools.random_input(d["shape"], d["dtype"], rng))
    for _ in range(20):
        it.invoke()
    return it, delegate


def median_us(it: gd.Interpreter, invokes: int) -> float:
    times = []
    for _ in range(invokes):
        start = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--backends", default="cl,gl")
    parser.add_argument("--invokes", type=int, default=200)
    args = parser.parse_args()
    print("| model | backend | invoke µs | kernels' device µs | kernels | host functions, own µs per invoke |")
    print("|---|---|---:|---:|---:|---|")
    for path in args.models:
        for backend in args.backends.split(","):
            it, _ = interpreter(path, backend, False)
            wall = median_us(it, args.invokes)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.invokes):
                it.invoke()
            profile.disable()
            stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
            top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:5]
            host = "; ".join(f"{f[2]} {v[2] / args.invokes * 1e6:.0f}" for f, v in top)
            it, delegate = interpreter(path, backend, True)
            it.invoke()
            timings = delegate.last_kernel_timings
            device = sum(k.device_ns for k in timings) / 1e3
            print(f"| {path.rsplit('/', 1)[-1]} | {backend} | {wall:.0f} | {device:.0f} | {len(timings)} | {host} |")


if __name__ == "__main__":
    main()
