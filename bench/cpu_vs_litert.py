"""Our CPU path (gd.Interpreter, no delegate) against LiteRT's CPU kernels, both with num_threads=2.

Same process, same inputs, interleaved rounds (ours, LiteRT, ours, ...) so that load from other processes
hits both alike; the figure per model is the median over every timed invoke. Also measures cold start
(a fresh process with an empty numba cache: every kernel compiles) against warm start (the same cache).

    python bench/cpu_vs_litert.py [--models DIR] [--rounds 5] [--runs 10] [--cold MODEL | --no-cold]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ROOT.parent / "shared" / "models" / "mobilenet"


def make_input(detail: dict, rng: np.random.Generator) -> np.ndarray:
    dtype, shape = np.dtype(detail["dtype"]), tuple(detail["shape"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def timed_invokes(interpreter, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - t0)
    return times


def bench_model(path: Path, rounds: int, runs: int, warmup: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    import gpu_delegate as gd

    ours = gd.Interpreter(model_path=str(path), num_threads=2)
    ref = LiteRT(model_path=str(path), num_threads=2)
    rng = np.random.default_rng(0)
    inputs = [make_input(d, rng) for d in ref.get_input_details()]
    for it in (ours, ref):
        it.allocate_tensors()
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        timed_invokes(it, warmup)
    times: dict[str, list[float]] = {"ours": [], "litert": []}
    for _ in range(rounds):
        times["ours"] += timed_invokes(ours, runs)
        times["litert"] += timed_invokes(ref, runs)
    err = 0.0
    for d_ours, d_ref in zip(ours.get_output_details(), ref.get_output_details()):
        a, b = ours.get_tensor(d_ours["index"]), ref.get_tensor(d_ref["index"])
        err = max(err, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return {"ours": float(np.median(times["ours"])) * 1e3, "litert": float(np.median(times["litert"])) * 1e3,
            "err": err}


START_CODE = """
import time
t0 = time.perf_counter()
import numpy as np
import gpu_delegate as gd
t1 = time.perf_counter()
it = gd.Interpreter(model_path={path!r}, num_threads=2)
it.allocate_tensors()
d = it.get_input_details()[0]
it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
it.invoke()
t2 = time.perf_counter()
it.invoke()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def start_times(path: Path, cache_dir: str) -> tuple[float, float, float]:
    """(import s, load + first invoke s, second invoke s) in a fresh process using ``cache_dir``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", START_CODE.format(path=str(path))], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="folder of .tflite files")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per model")
    p.add_argument("--runs", type=int, default=10, help="timed invokes per round and interpreter")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cold", default="mobilenet_v2_224_fp32.tflite", help="model of the cold/warm start test")
    p.add_argument("--no-cold", action="store_true", help="skip the cold/warm start test")
    args = p.parse_args(argv)
    models = sorted(args.models.glob("*.tflite"))
    if not models:
        print(f"no .tflite files in {args.models}", file=sys.stderr)
        return 1
    print(f"{args.rounds} interleaved rounds x {args.runs} invokes per model, num_threads=2, median "
          "latency\n")
    print("| model | ours ms | LiteRT ms | ratio | max abs error |")
    print("|---|---:|---:|---:|---:|")
    for path in models:
        r = bench_model(path, args.rounds, args.runs, args.warmup)
        print(f"| {path.stem} | {r['ours']:.1f} | {r['litert']:.1f} | {r['ours'] / r['litert']:.2f} | "
              f"{r['err']:.3g} |", flush=True)
    if not args.no_cold:
        path = args.models / args.cold
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            cold = start_times(path, cache)
            warm = start_times(path, cache)
        print(f"\nstart-up, {path.stem} (fresh process; numba cache empty = cold, then filled = warm)\n")
        print("| start | import s | load + first invoke s | second invoke ms |")
        print("|---|---:|---:|---:|")
        for name, (imp, first, second) in (("cold", cold), ("warm", warm)):
            print(f"| {name} | {imp:.2f} | {first:.2f} | {second * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
