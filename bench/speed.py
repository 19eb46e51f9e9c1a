"""How fast the GPU delegate runs models against LiteRT's CPU path (XNNPACK, num_threads=2).

Per model (by default MobileNet V1 and V2, fp32 and int8, from ../shared/models/mobilenet; with --models DIR, every
.tflite there, e.g. bench/converter_models.py's output, --only picking by substrings), in one process, on the same
inputs, in interleaved rounds (every interpreter in turn, round after round, so that load from other
processes hits all alike), the median latency of:
  LiteRT            ai_edge_litert's Interpreter, num_threads=2 (XNNPACK)
  cl, gl            gpu_delegate.Interpreter + GpuDelegate(backend=...); --fp16: with fp16 storage
  cl tuned          the same with inference_preference="sustained_speed" (work-group sizes tuned at start)
Reported: ratio to LiteRT, achieved GFLOP/s (2 x the model's MACs per invoke), GL against CL, and the
per-invoke overhead outside the kernels: the median over invokes of (invoke - the plan's kernels alone) / invoke,
where "kernels alone" is the same bound dispatches enqueued back to back and waited for, timed right after each
invoke (pairs, so that a noisy host's slow and fast moments do not land on one side only), and the same median in
microseconds: the fixed cost of an invoke (uploads, conversions at the boundary, downloads, the interpreter).
An int8 model (flavours int8, int8io, uint8io) is also set against its float twin in the same folder (the same
name with fp32, else fp16), on the same backend: "int8 / float".

With --baseline PACKAGE (another copy of the package importable under that name, say the fork point's
gpu_delegate renamed gpu_delegate_old on PYTHONPATH), each backend also runs on that package, "cl (old)", in the
same rounds: a change measured A/B in one process. Each interpreter's turn starts with an untimed invoke (PoCL's
loaded kernels are shared by the process's plans). Against a copy of the same tree the package built later ran up to
1.12x faster (the text transformer int8, 7 rounds of 10; README): --baseline_first builds the baseline's
interpreters first, so that a change can be measured both ways.

    python bench/speed.py [--models DIR] [--rounds 7] [--runs 5] [--backends cl,cl-tuned,gl] [--only v1_224_fp32,...]
                          [--baseline gpu_delegate_old [--baseline_first]] [--fp16] [--output_json F]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ROOT.parent / "shared" / "models" / "mobilenet"
MODELS = ("mobilenet_v1_224_fp32", "mobilenet_v2_224_fp32", "mobilenet_v1_224_int8", "mobilenet_v2_224_int8")
INT8_FLAVOURS = ("_int8io", "_uint8io", "_int8")  # the longer suffix first
FLOAT_TWINS = ("_fp32", "_fp16")


def make_interpreters(path: Path, backends: list[str], baseline: str = "", fp16: bool = False,
                      baseline_first: bool = False) -> dict:
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    its = {"LiteRT": LiteRT(model_path=str(path), num_threads=2)}
    packages = ["gpu_delegate", *([baseline] if baseline else [])]
    for package in reversed(packages) if baseline_first else packages:
        gd = importlib.import_module(package)
        for b in backends:
            api, _, tuned = b.partition("-")
            d = gd.GpuDelegate(backend=api, inference_preference="sustained_speed" if tuned else "fast_single_answer",
                               precision_loss_allowed=fp16)
            name = b.replace("-", " ") + (" (old)" if package != "gpu_delegate" else "")
            its[name] = gd.Interpreter(model_path=str(path), experimental_delegates=[d])
    return its


def runner_of(interpreter):
    runners = [s.kernel.runner for s in getattr(interpreter, "_steps", []) if getattr(getattr(s, "kernel", None),
                                                                                     "runner", None)]
    return runners[0] if len(runners) == 1 else None


def record_feeds(runner) -> dict:
    """From now on, the inputs of the runner's last run: ``{"feeds": ..., "codes": ...}``."""
    last: dict = {}
    run = runner.run

    def recording(feeds, codes=None, progress=None):
        last.update(feeds=feeds, codes=codes or {})
        return run(feeds, codes, progress)

    runner.run = recording
    return last


def kernels_alone(runner, last: dict) -> float:
    """Seconds for the plan's dispatches alone (no upload, conversion, download or interpreter), on the last
    invoke's inputs, written again untimed: the memory plan lends an input's buffer to later tensors, whose values
    (8-bit codes read as floats are denormals) made an image model's first kernel 4-7x slower than on its input."""
    if last:
        runner.write_inputs(last["feeds"], last["codes"])
    t0 = time.perf_counter()
    runner.backend.dispatch_bound(runner.bound)
    runner.backend.finish()
    return time.perf_counter() - t0


def bench_model(path: Path, backends: list[str], rounds: int, runs: int, baseline: str = "",
                fp16: bool = False, baseline_first: bool = False) -> list[dict]:
    import gpu_delegate as gd
    from gpu_delegate import tools

    its = make_interpreters(path, backends, baseline, fp16, baseline_first)
    graph = gd.Interpreter(model_path=str(path)).graph
    macs = gd.GpuDelegate(backend="cl").partition_weight(graph.nodes, graph)
    rng = np.random.default_rng(0)
    inputs = [tools.benchmark_input(d["shape"], d["dtype"], rng) for d in its["LiteRT"].get_input_details()]
    for it in its.values():
        it.allocate_tensors()
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        it.invoke()
    times: dict[str, list[float]] = {name: [] for name in its}
    shares: dict[str, list[float]] = {name: [] for name in its}  # per invoke: (invoke - kernels alone) / invoke
    fixed: dict[str, list[float]] = {name: [] for name in its}  # per invoke: invoke - kernels alone, seconds
    names = list(its)
    lasts = {name: record_feeds(runner) for name in names if (runner := runner_of(its[name])) is not None}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            it = its[name]
            runner = runner_of(it)
            # untimed: on PoCL all plans of the process share its 128 loaded kernels (a baseline's plan and ours
            # evict each other), and a turn's first invoke reloads what the other plan evicted: EfficientNetV2B0
            # int8 timed 9.8 ms that way against 7.1-7.6 alone in a process
            it.invoke()
            for _ in range(runs):
                t0 = time.perf_counter()
                it.invoke()
                t = time.perf_counter() - t0
                times[name].append(t)
                if runner is not None:  # paired with the invoke just before: the same state of a noisy host
                    alone = kernels_alone(runner, lasts[name])
                    shares[name].append((t - alone) / t)
                    fixed[name].append(t - alone)
    ref = [its["LiteRT"].get_tensor(d["index"]) for d in its["LiteRT"].get_output_details()]
    base = float(np.median(times["LiteRT"]))
    rows = []
    for name, it in its.items():
        ms = float(np.median(times[name]))
        outs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        err = max(float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))) for o, r in zip(outs, ref))
        overhead = float(np.median(shares[name])) if shares[name] else None
        nodes = [o["backend"] for o in it.get_ops_details()] if hasattr(it, "get_ops_details") and name != "LiteRT" \
            else []
        rows.append({"model": path.stem, "backend": name, "median_ms": ms * 1e3, "ratio_to_litert": ms / base,
                     "gflops": 2 * macs / ms / 1e9, "max_abs_err": err, "overhead": overhead,
                     "fixed_us": float(np.median(fixed[name])) * 1e6 if fixed[name] else None,
                     "gpu_nodes": f"{sum(n != 'cpu' for n in nodes)}/{len(nodes)}" if nodes else ""})
    for r in rows:  # against cl of the same package
        suffix = " (old)" if r["backend"].endswith(" (old)") else ""
        cl = next((c for c in rows if c["backend"] == "cl" + suffix), None)
        r["ratio_to_cl"] = r["median_ms"] / cl["median_ms"] if cl else None
    return rows


def float_twin(model: str, names: set[str]) -> str | None:
    """The float model of the same network and batch as int8 ``model`` among ``names``; None if none is there."""
    for suffix in INT8_FLAVOURS:
        if model.endswith(suffix):
            stem = model.removesuffix(suffix)
            return next((stem + f for f in FLOAT_TWINS if stem + f in names), None)
    return None


def add_twin_ratios(rows: list[dict]) -> None:
    """``ratio_to_twin``: an int8 model's latency over its float twin's on the same backend."""
    by = {(r["model"], r["backend"]): r for r in rows}
    names = {r["model"] for r in rows}
    for r in rows:
        twin = float_twin(r["model"], names)
        r["twin"] = twin
        r["ratio_to_twin"] = r["median_ms"] / by[(twin, r["backend"])]["median_ms"] if twin else None


def model_paths(folder: Path, only: str) -> list[Path]:
    """The MobileNets of MODELS in the default folder, every model in another one; ``only``: substrings, any."""
    wanted = [s for s in only.split(",") if s]
    named = [folder / f"{m}.tflite" for m in MODELS if (folder / f"{m}.tflite").is_file()]
    if folder.resolve() == DEFAULT_MODELS.resolve() and named:
        return [p for p in named if not wanted or p.stem.removeprefix("mobilenet_") in wanted]
    return [p for p in sorted(folder.glob("*.tflite")) if not wanted or any(w in p.stem for w in wanted)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="folder of .tflite files (default: MobileNets)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds per model")
    p.add_argument("--runs", type=int, default=5, help="timed invokes per round and interpreter")
    p.add_argument("--backends", default="cl,cl-tuned,gl", help="cl, gl, and either with -tuned, comma-separated")
    p.add_argument("--only", default="", help="MobileNets without 'mobilenet_' (v1_224_fp32,...), else substrings")
    p.add_argument("--baseline", default="", help="another package to run alongside (interleaved), e.g. the old one")
    p.add_argument("--baseline_first", action="store_true", help="build the baseline's interpreters before ours")
    p.add_argument("--fp16", action="store_true", help="fp16 storage on the GPU (precision_loss_allowed)")
    p.add_argument("--output_json", type=Path)
    args = p.parse_args(argv)
    paths = model_paths(args.models, args.only)
    if not paths:
        print(f"no model{' matching ' + args.only if args.only else ''} in {args.models}", file=sys.stderr)
        return 1
    backends = [b for b in args.backends.split(",") if b]
    print(f"{args.rounds} interleaved rounds x {args.runs} invokes per model and interpreter; medians\n")
    rows = []
    for path in paths:
        rows += bench_model(path, backends, args.rounds, args.runs, args.baseline, args.fp16, args.baseline_first)
        print(f"{path.stem}: " + ", ".join(f"{r['backend']} {r['median_ms']:.2f} ms" for r in rows
                                           if r["model"] == path.stem), file=sys.stderr, flush=True)
    add_twin_ratios(rows)
    print("| model | backend | GPU nodes | median ms | ratio to LiteRT | GFLOP/s | ratio to cl | overhead | fixed µs | "
          "int8 / float | max abs err |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        to_cl = f"{r['ratio_to_cl']:.2f}" if r["ratio_to_cl"] is not None and r["backend"] != "LiteRT" else ""
        overhead = f"{r['overhead']:.1%}" if r["overhead"] is not None else ""
        fixed = f"{r['fixed_us']:.0f}" if r["fixed_us"] is not None else ""
        twin = f"{r['ratio_to_twin']:.2f}" if r["ratio_to_twin"] is not None else ""
        print(f"| {r['model'].removeprefix('mobilenet_')} | {r['backend']} | {r['gpu_nodes']} | {r['median_ms']:.2f} | "
              f"{r['ratio_to_litert']:.2f} | {r['gflops']:.1f} | {to_cl} | {overhead} | {fixed} | {twin} | "
              f"{r['max_abs_err']:.3g} |")
    if args.output_json:
        args.output_json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
