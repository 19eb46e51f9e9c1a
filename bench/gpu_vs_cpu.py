"""The GPU delegate on OpenCL and on OpenGL ES against LiteRT's CPU kernels (num_threads=2) and our numba
CPU path (num_threads=2), on MobileNet V1 and V2 fp32.

Same process, same inputs, interleaved rounds (each interpreter in turn, round after round) so that load
from other processes hits all alike; the figure per model and backend is the median over every timed
invoke. The error is the largest absolute difference of the outputs from LiteRT's (with the shared
models' random weights every MobileNet output is a softmax of near-zero logits, 0.001 everywhere, so this
only catches gross faults: tests/test_gpu_models.py compares intermediate tensors). Also reports what the
memory plan saves: the bytes of the partition's intermediate tensors held each in its own buffer (naive)
against the buffers they share (planned).

    python bench/gpu_vs_cpu.py [--models DIR] [--rounds 5] [--runs 5] [--backends cl,gl]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ROOT.parent / "shared" / "models" / "mobilenet"
MODELS = ("mobilenet_v1_224_fp32.tflite", "mobilenet_v2_224_fp32.tflite")


def timed_invokes(interpreter, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - t0)
    return times


def plans(interpreter) -> list:
    """The memory plans of the interpreter's delegated partitions (prepared by allocate_tensors)."""
    return [s.kernel.runner.plan for s in interpreter._steps if getattr(getattr(s, "kernel", None), "runner", None)]


def bench_model(path: Path, backends: list[str], rounds: int, runs: int, warmup: int) -> tuple[dict, dict]:
    """({backend: (median ms, max abs error vs LiteRT)}, {GPU backend: (naive bytes, planned bytes)})."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    import gpu_delegate as gd

    interpreters = {"LiteRT": LiteRT(model_path=str(path), num_threads=2),
                    "numba CPU": gd.Interpreter(model_path=str(path), num_threads=2)}
    for b in backends:
        interpreters[b] = gd.Interpreter(model_path=str(path), experimental_delegates=[gd.GpuDelegate(backend=b)])
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(tuple(d["shape"])).astype(d["dtype"])
              for d in interpreters["LiteRT"].get_input_details()]
    for it in interpreters.values():
        it.allocate_tensors()
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        timed_invokes(it, warmup)
    times: dict[str, list[float]] = {name: [] for name in interpreters}
    for _ in range(rounds):
        for name, it in interpreters.items():
            times[name] += timed_invokes(it, runs)
    ref = [interpreters["LiteRT"].get_tensor(d["index"]) for d in interpreters["LiteRT"].get_output_details()]
    results = {}
    for name, it in interpreters.items():
        outs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        err = max(float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))) for o, r in zip(outs, ref))
        results[name] = (float(np.median(times[name])) * 1e3, err)
    memory = {}
    for b in backends:
        ps = plans(interpreters[b])
        memory[b] = (sum(p.naive_bytes for p in ps), sum(p.planned_bytes for p in ps))
    return results, memory


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="folder holding the MobileNet .tflite files")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per model")
    p.add_argument("--runs", type=int, default=5, help="timed invokes per round and interpreter")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backends", default="cl,gl", help="GPU backends to run, comma-separated")
    args = p.parse_args(argv)
    paths = [args.models / m for m in MODELS if (args.models / m).is_file()]
    if not paths:
        print(f"none of {', '.join(MODELS)} in {args.models}", file=sys.stderr)
        return 1
    backends = [b for b in args.backends.split(",") if b]
    import gpu_delegate as gd

    for b in backends:
        info = gd.GpuDelegate(backend=b).backend.device_info()
        print(f"- {b}: {info.get('name', '?')} ({info.get('device_type', '?')}), {info.get('version', '')}")
    print(f"\n{args.rounds} interleaved rounds x {args.runs} invokes per model and backend, median latency\n")
    rows, mem_rows = [], []
    for path in paths:
        results, memory = bench_model(path, backends, args.rounds, args.runs, args.warmup)
        base = results["LiteRT"][0]
        for name, (ms, err) in results.items():
            rows.append(f"| {name} | {path.stem} | {ms:.1f} | {ms / base:.2f} | {err:.3g} |")
        for b, (naive, planned) in memory.items():
            mem_rows.append(f"| {b} | {path.stem} | {naive / 2**20:.1f} | {planned / 2**20:.1f} | "
                            f"{1 - planned / naive:.0%} |")
    print("| backend | model | median ms | ratio to LiteRT | max abs err |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))
    print("\nmemory plan: intermediate tensors in their own buffers (naive) vs shared buffers (planned)\n")
    print("| backend | model | naive MiB | planned MiB | saved |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(mem_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
