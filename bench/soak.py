"""Long runs: does anything grow? Resident memory (VmRSS), live device buffers and live backend instances.

1. Invokes: one interpreter with a GpuDelegate per backend runs MobileNetV2 (the shared fp32 model, else the
   built-in demo model) N times after a warm-up; RSS and live buffers are sampled along the way and the
   answer is checked to stay bit-identical. Reported: growth over the run and the slope over its second
   half (KiB per 1000 invokes), which separates a leak from warm-up.
2. Churn: M interpreters created, invoked once and deleted, each with its own GpuDelegate (a backend
   instance: queue, programs, buffers), then M sharing one delegate; live backends and buffers must return
   to where they were, and RSS growth per interpreter is reported.

    python bench/soak.py [--invokes 10000] [--max-seconds 600] [--backends cl,gl] [--model mobilenet|demo]
                         [--interpreters 200] [--churn-model M.tflite] [--json out.json]

GL on llvmpipe runs MobileNetV2 at ~0.8 s per invoke: cap it with --max-seconds (the N reached is reported).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

import gpu_delegate as gd
from gpu_delegate.backends.base import live_backends, live_buffers
from gpu_delegate.tflite import ModelBuilder

MOBILENET = Path(__file__).resolve().parents[2] / "shared" / "models" / "mobilenet" / "mobilenet_v2_224_fp32.tflite"
WARMUP = 20


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def settled_rss() -> int:
    gc.collect()
    return rss_kib()


def slope_per_1000(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (invokes, KiB) over the second half of the samples, in KiB per 1000 invokes."""
    half = points[len(points) // 2:]
    if len(half) < 2:
        return float("nan")
    x = np.array([p[0] for p in half], np.float64)
    y = np.array([p[1] for p in half], np.float64)
    return float(np.polyfit(x, y, 1)[0] * 1000) if np.ptp(x) else float("nan")


def churn_model() -> bytes:
    """A small model that lowers to a few kernels: creating many interpreters costs compiles, not invokes."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 6, 7, 5])
    m, a, s = (mb.tensor(n, [1, 6, 7, 5]) for n in ("m", "a", "s"))
    mb.op("MUL", [x, mb.const("A", np.linspace(-1.5, 1.5, 5).astype(np.float32))], [m])
    mb.op("ADD", [m, mb.const("B", np.linspace(0.5, -0.5, 5).astype(np.float32))], [a])
    mb.op("LOGISTIC", [a], [s])
    r = mb.tensor("r", [1, 1, 1, 5])
    mb.op("MEAN", [s, mb.const("axes", np.array([1, 2], np.int32))], [r], keep_dims=True)
    y = mb.tensor("y", [1, 1, 1, 5])
    mb.op("SOFTMAX", [r], [y], beta=1.0)
    mb.output(y)
    return mb.build()


def soak_invokes(content: bytes, backend: str, n: int, max_seconds: float) -> dict:
    d = gd.GpuDelegate(backend=backend)
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    it.allocate_tensors()
    on_gpu = sum(o["backend"] == backend for o in it.get_ops_details())
    inp = it.get_input_details()[0]
    x = np.random.default_rng(0).standard_normal(inp["shape"]).astype(inp["dtype"])
    out = it.get_output_details()[0]["index"]
    it.set_tensor(inp["index"], x)
    for _ in range(WARMUP):
        it.invoke()
    first = it.get_tensor(out)
    rss0, bufs0 = settled_rss(), live_buffers(backend)
    samples = [(0, 0)]
    every = max(n // 20, 1)
    t0 = time.perf_counter()
    done = 0
    changed = 0
    while done < n and time.perf_counter() - t0 < max_seconds:
        it.set_tensor(inp["index"], x)
        it.invoke()
        done += 1
        if done % every == 0:
            changed += not np.array_equal(it.get_tensor(out), first)
            samples.append((done, settled_rss() - rss0))
            print(f"  {backend}: {done} invokes, RSS {samples[-1][1]:+d} KiB, live buffers "
                  f"{live_buffers(backend)}", flush=True)
    elapsed = time.perf_counter() - t0
    changed += not np.array_equal(it.get_tensor(out), first)
    samples.append((done, settled_rss() - rss0))
    return {"backend": backend, "nodes": len(it.get_ops_details()), "nodes_on_gpu": on_gpu, "invokes": done,
            "ms_per_invoke": 1000 * elapsed / max(done, 1), "rss_growth_kib": samples[-1][1],
            "rss_slope_kib_per_1000": slope_per_1000(samples), "live_buffers_before": bufs0,
            "live_buffers_after": live_buffers(backend), "answers_changed": changed, "samples": samples}


def soak_churn(backend: str, m: int, content: bytes) -> dict:
    inp = gd.Interpreter(model_content=content).get_input_details()[0]
    x = np.random.default_rng(1).standard_normal(inp["shape"]).astype(inp["dtype"])
    reference = None

    def one(delegate) -> None:
        nonlocal reference
        it = gd.Interpreter(model_content=content, experimental_delegates=[delegate])
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        y = it.get_tensor(it.get_output_details()[0]["index"])
        if reference is None:
            reference = y
        elif not np.array_equal(y, reference):
            raise AssertionError(f"{backend}: a fresh interpreter's answer changed")

    for _ in range(3):
        one(gd.GpuDelegate(backend=backend))
    result = {"backend": backend, "interpreters": m}
    for mode in ("own", "shared"):
        gc.collect()
        backends0, bufs0, rss0 = live_backends(backend), live_buffers(backend), settled_rss()
        shared = gd.GpuDelegate(backend=backend) if mode == "shared" else None
        t0 = time.perf_counter()
        samples = [(0, 0)]
        peak_backends = 0
        for k in range(m):
            one(shared or gd.GpuDelegate(backend=backend))
            peak_backends = max(peak_backends, live_backends(backend))
            if (k + 1) % max(m // 10, 1) == 0:
                samples.append((k + 1, settled_rss() - rss0))
        elapsed = time.perf_counter() - t0
        del shared
        rss = settled_rss() - rss0
        result[mode] = {"s_per_interpreter": elapsed / m, "rss_growth_kib": rss,
                        "rss_kib_per_interpreter_second_half": slope_per_1000(samples) / 1000,
                        "live_backends": [backends0, live_backends(backend)], "peak_live_backends": peak_backends,
                        "live_buffers": [bufs0, live_buffers(backend)], "samples": samples}
        print(f"  {backend} churn, {mode} delegate: {m} interpreters, {elapsed / m * 1000:.0f} ms each, RSS {rss:+d} "
              f"KiB, backends {backends0}->{live_backends(backend)} (peak {peak_backends}), buffers "
              f"{bufs0}->{live_buffers(backend)}", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--invokes", type=int, default=10_000)
    ap.add_argument("--max-seconds", type=float, default=float("inf"), help="cap on the invoke soak, per backend")
    ap.add_argument("--backends", default="cl,gl")
    ap.add_argument("--model", choices=["mobilenet", "demo"], default="mobilenet")
    ap.add_argument("--interpreters", type=int, default=200)
    ap.add_argument("--churn-model", help="the churn's model (default: a small built-in one); each interpreter with "
                    "its own delegate compiles all of its programs again")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.model == "mobilenet" and MOBILENET.exists():
        content, model = MOBILENET.read_bytes(), MOBILENET.name
    else:
        from gpu_delegate.tflite.demo_model import mobilenet_v2_model

        content, model = mobilenet_v2_model(), "built-in demo MobileNetV2"
    report: dict = {"model": model, "invokes": [], "churn": []}
    for backend in args.backends.split(","):
        try:
            gd.GpuDelegate(backend=backend)
        except gd.DelegateError as e:
            print(f"{backend}: not available ({e})")
            continue
        if args.invokes:
            print(f"{backend}: {args.invokes} invokes of {model}", flush=True)
            r = soak_invokes(content, backend, args.invokes, args.max_seconds)
            report["invokes"].append(r)
            print(f"{backend}: {r['invokes']} invokes ({r['nodes_on_gpu']}/{r['nodes']} nodes on the GPU) at "
                  f"{r['ms_per_invoke']:.1f} ms: RSS {r['rss_growth_kib']:+d} KiB "
                  f"(second-half slope {r['rss_slope_kib_per_1000']:+.1f} KiB per 1000 invokes), live buffers "
                  f"{r['live_buffers_before']} -> {r['live_buffers_after']}, answer changed "
                  f"{r['answers_changed']} times")
        if args.interpreters:
            churn = Path(args.churn_model).read_bytes() if args.churn_model else churn_model()
            report["churn"].append(soak_churn(backend, args.interpreters, churn))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    bad = [r for r in report["invokes"] if r["live_buffers_after"] != r["live_buffers_before"] or r["answers_changed"]]
    bad += [r for r in report["churn"] for mode in ("own", "shared")
            if r[mode]["live_backends"][0] != r[mode]["live_backends"][1]
            or r[mode]["live_buffers"][0] != r[mode]["live_buffers"][1]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
