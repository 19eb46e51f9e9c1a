"""OpenCL against OpenGL ES: the same delegate, the same kernels (one source, two dialects), two APIs.

Per model (the shared test models when ../shared/models is there, and the built-in MobileNetV2):
  steady-state latency  median of invokes timed in interleaved rounds (cl and gl in turn, the order rotating
                        each round, so load from other processes hits both alike)
  first start           GpuDelegate + Interpreter construction, allocate_tensors and the first invoke, in a
                        fresh process whose PoCL, pyopencl, Mesa shader and XDG caches are empty temp dirs
  compile               the runner's own "compile_s" timing in that cold process, and the first invoke's
                        time: PoCL builds each program when asked but generates its work-group code at the
                        kernel's first launch, llvmpipe compiles a GL program at its first dispatch, so on both
                        a good part of the compiling lands in the first invoke
  max abs error         of the outputs against LiteRT's CPU kernels on the same inputs
  slowest kernels       the five slowest kernels of each backend, timed by the device's own counters
                        (GpuDelegate(enable_op_profiling=True), backend.take_timings()) mapped back to the plan's
                        kernel calls; where a driver's counters read ~0 (Mesa llvmpipe's GL timer queries do not
                        cover compute dispatches), each kernel is dispatched alone and timed on the host until
                        the device has finished

Prints markdown tables and writes a bar chart (matplotlib).

    python bench/gl_vs_cl.py [--models DIR] [--rounds 5] [--runs 2] [--demo_input_size 224] [--demo_width 1.0]
                             [--only NAME,...] [--no_first_start] [--plot bench/out/gl_vs_cl.png] [--output_json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpu_delegate import tools
from gpu_delegate.cli import GPU_BACKENDS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ROOT.parent / "shared" / "models"
SHARED = ("mobilenet/mobilenet_v1_224_fp32", "mobilenet/mobilenet_v2_224_fp32", "real/face_detection_short_range",
          "real/iris_landmark", "real/sine_float")
DEMO = "builtin_mobilenet_v2"
CONVERSIONS = ("convert_to_phwc4", "convert_from_phwc4")  # partition boundary kernels, not the plan's
# a backend whose kernels total less than this fraction of the invoke's wall time has counters that do not work
MIN_COUNTED = 0.01


# -- models ----------------------------------------------------------------------------------------------------

def load_models(args) -> list[tuple[str, bytes]]:
    models = []
    for rel in SHARED:
        name = rel.split("/")[-1]
        path = Path(args.models) / f"{rel}.tflite"
        if args.only and name not in args.only:
            continue
        if not path.is_file():
            print(f"skipping {name}: {path} is absent (the shared models live in ../shared/models)", file=sys.stderr)
            continue
        models.append((name, path.read_bytes()))
    if not args.only or DEMO in args.only:
        models.append((DEMO, demo_content(args.demo_input_size, args.demo_width)))
    return models


def demo_content(size: int, width: float) -> bytes:
    content, _ = tools.demo_model(size, width)
    return content


# -- one backend on one model ------------------------------------------------------------------------------------

def make_interpreter(content: bytes, backend: str, profile: bool = False):
    import gpu_delegate as gd

    delegate = gd.GpuDelegate(backend=backend, enable_op_profiling=profile)
    it = tools.make_interpreter(content, [delegate])
    it.allocate_tensors()
    return it, delegate


def delegated_steps(it) -> list:
    """The interpreter's delegated partitions that run on the GPU, in execution order."""
    return [s for s in it._steps if hasattr(s, "partition") and getattr(s.kernel, "runner", None) is not None]


def device_kernel_times(it, delegate, runs: int) -> dict[str, float] | None:
    """{kernel label: ms per invoke} from the device's counters (boundary conversions included), or None
    where they read ~0."""
    backend = delegate.backend
    it.invoke()
    backend.take_timings()  # drop what earlier invokes left
    t0 = time.perf_counter()
    for _ in range(runs):
        it.invoke()
    wall_ns = (time.perf_counter() - t0) * 1e9 / runs
    timings = backend.take_timings()
    labels = []
    for step in delegated_steps(it):
        runner = step.kernel.runner
        labels += [None] * len(runner.plan.inputs)
        labels += [f"{call.label} {it.graph.nodes[call.node].op}" for call in runner.plan.kernels]
        labels += [None] * len(runner.plan.outputs)
    per_invoke = len(timings) // max(runs, 1)
    if per_invoke != len(labels):
        raise RuntimeError(f"{len(timings)} timings for {runs} invokes of {len(labels)} dispatches each")
    out: dict[str, float] = {}
    for k, (name, ns) in enumerate(timings):
        label = labels[k % per_invoke]
        if label is None:
            if name not in CONVERSIONS:
                raise RuntimeError(f"expected a boundary conversion at dispatch {k}, got {name}")
            label = f"{name} (boundary)"
        elif not label.startswith(f"{name}@"):
            raise RuntimeError(f"dispatch {k} is {name}, the plan says {label}")
        out[label] = out.get(label, 0.0) + ns / 1e6 / runs
    return out if sum(out.values()) * 1e6 >= MIN_COUNTED * wall_ns else None


def host_kernel_times(it, backend, runs: int) -> dict[str, float]:
    """Each plan kernel dispatched alone, timed from enqueue until the device has finished it."""
    out: dict[str, float] = {}
    for step in delegated_steps(it):
        runner = step.kernel.runner
        for call, (program, buffers) in zip(runner.plan.kernels, runner.calls, strict=True):
            label = f"{call.label} {it.graph.nodes[call.node].op}"
            ms = []
            for _ in range(runs):
                t0 = time.perf_counter()
                backend.dispatch_all([(program, buffers)])
                backend.finish()
                ms.append((time.perf_counter() - t0) * 1e3)
            out[label] = statistics.median(ms)
    return out


# -- first start, in a fresh process with empty caches -----------------------------------------------------------

def first_start(spec: str, backend: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="gl_vs_cl_") as tmp:
        env = dict(os.environ)
        env.update(POCL_CACHE_DIR=f"{tmp}/pocl", MESA_SHADER_CACHE_DIR=f"{tmp}/mesa",
                   PYOPENCL_CACHE_DIR=f"{tmp}/pyopencl", XDG_CACHE_HOME=f"{tmp}/xdg")
        out = subprocess.run([sys.executable, __file__, "--child", spec, backend], env=env, capture_output=True,
                             text=True)
    if out.returncode != 0:
        raise RuntimeError(f"first start of {spec} on {backend} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child(spec: str, backend: str) -> None:
    """Runs in the fresh process: time one cold start and print it as JSON."""
    t0 = time.perf_counter()
    import gpu_delegate as gd

    t1 = time.perf_counter()
    if spec.startswith("demo:"):
        _, size, width = spec.split(":")
        content = demo_content(int(size), float(width))
    else:
        content = Path(spec).read_bytes()
    t2 = time.perf_counter()
    delegate = gd.GpuDelegate(backend=backend)
    it = tools.make_interpreter(content, [delegate])
    t3 = time.perf_counter()
    it.allocate_tensors()
    t4 = time.perf_counter()
    tools.set_inputs(it, [tools.random_input(d["shape"], d["dtype"], np.random.default_rng(0))
                         for d in it.get_input_details()])
    it.invoke()
    t5 = time.perf_counter()
    timings = [s.kernel.runner.timings for s in delegated_steps(it)]
    print(json.dumps({"import_s": t1 - t0, "construct_s": t3 - t2, "allocate_s": t4 - t3, "first_invoke_s": t5 - t4,
                      "first_start_s": t5 - t2, "plan_s": sum(t["plan_s"] for t in timings),
                      "compile_s": sum(t["compile_s"] for t in timings)}))


# -- the comparison ---------------------------------------------------------------------------------------------

def litert_outputs(content: bytes, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    it = Interpreter(model_content=content)
    it.allocate_tensors()
    tools.set_inputs(it, inputs)
    it.invoke()
    return tools.get_outputs(it)


def bench_model(name: str, content: bytes, spec: str, args) -> dict:
    print(f"{name}: preparing", file=sys.stderr)
    entries = {}
    for backend in GPU_BACKENDS:
        t0 = time.perf_counter()
        it, _ = make_interpreter(content, backend)
        entries[backend] = it
        print(f"  {backend}: ready in {time.perf_counter() - t0:.1f} s, nodes "
              f"{tools.backend_counts(it)}", file=sys.stderr)
    rng = np.random.default_rng(0)
    inputs = [tools.random_input(d["shape"], d["dtype"], rng) for d in entries["cl"].get_input_details()]
    for it in entries.values():
        tools.set_inputs(it, inputs)
        it.invoke()  # the first invoke compiles what the driver compiles lazily
    times: dict[str, list[float]] = {b: [] for b in entries}
    order = list(entries)
    for r in range(args.rounds):
        for backend in order[r % 2:] + order[:r % 2]:
            times[backend] += [tools.timed_invoke(entries[backend]) for _ in range(args.runs)]
    ref = litert_outputs(content, inputs)
    result = {"model": name, "backends": {}}
    for backend, it in entries.items():
        row = {"median_ms": statistics.median(times[backend]), "latency_ms": tools.latency_stats(times[backend]),
               "nodes": tools.backend_counts(it),
               "max_abs_error_vs_litert": tools.max_abs_error(tools.get_outputs(it), ref) if ref else None}
        result["backends"][backend] = row
    del entries
    for backend in GPU_BACKENDS:
        it, delegate = make_interpreter(content, backend, profile=True)
        tools.set_inputs(it, inputs)
        result["backends"][backend].update(kernels_device_ms=device_kernel_times(it, delegate, args.kernel_runs),
                                           kernels_host_ms=host_kernel_times(it, delegate.backend, args.kernel_runs))
        if not args.no_first_start:
            print(f"  {backend}: first start in a fresh process", file=sys.stderr)
            result["backends"][backend]["first_start"] = first_start(spec, backend)
    return result


# -- report --------------------------------------------------------------------------------------------------------

def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def report(results: list[dict], top: int) -> str:
    rows = []
    for r in results:
        cl_, gl = r["backends"]["cl"], r["backends"]["gl"]
        fs = {b: r["backends"][b].get("first_start") for b in GPU_BACKENDS}
        rows.append([r["model"], f"{cl_['nodes'].get('cl', 0)}/{sum(cl_['nodes'].values())}",
                     f"{gl['nodes'].get('gl', 0)}/{sum(gl['nodes'].values())}",
                     f"{cl_['median_ms']:.2f}", f"{gl['median_ms']:.2f}", f"{gl['median_ms'] / cl_['median_ms']:.2f}",
                     *(fmt(fs[b] and fs[b]["first_start_s"]) for b in GPU_BACKENDS),
                     fmt(fs["cl"] and fs["gl"] and fs["gl"]["first_start_s"] / fs["cl"]["first_start_s"]),
                     *(fmt(fs[b] and fs[b]["compile_s"]) for b in GPU_BACKENDS),
                     *(fmt(fs[b] and fs[b]["first_invoke_s"]) for b in GPU_BACKENDS),
                     fmt(cl_["max_abs_error_vs_litert"]), fmt(gl["max_abs_error_vs_litert"])])
    text = ["Steady state: median ms per invoke; first start: construction + allocate + first invoke in a fresh "
            "process with empty caches (s); compile: the runner's compile_s in that process (s).", "",
            tools.markdown_table(["model", "nodes on cl", "nodes on gl", "cl ms", "gl ms", "GL/CL", "cl first start s",
                        "gl first start s", "GL/CL first", "cl compile s", "gl compile s", "cl 1st invoke s",
                        "gl 1st invoke s", "cl max err", "gl max err"], rows)]
    for r in results:
        dev = {b: r["backends"][b]["kernels_device_ms"] for b in GPU_BACKENDS}
        host = {b: r["backends"][b]["kernels_host_ms"] for b in GPU_BACKENDS}
        labels = []
        for b in GPU_BACKENDS:
            rank = dev[b] or host[b]  # the device's own counters where they work
            labels += sorted(rank, key=lambda lab, rank=rank: -rank[lab])[:top]
        labels = list(dict.fromkeys(labels))
        columns = [(f"{b} {kind} ms", src) for b in GPU_BACKENDS
                   for kind, src in (("device", dev[b]), ("host", host[b])) if src is not None]
        totals = ", ".join(f"{name} {sum(src.values()):.2f}" for name, src in columns)
        broken = [b for b in GPU_BACKENDS if dev[b] is None]
        text += ["", f"{r['model']}: the {top} slowest kernels of each backend, ms per invoke. device: the API's "
                 "timer (profiling events, timer queries); host: the kernel dispatched alone, timed until the "
                 f"device finished (includes the dispatch overhead). Totals: {totals}."
                 + (f" No device column for {', '.join(broken)}: its counters read ~0." if broken else ""), "",
                 tools.markdown_table(["kernel", *(name for name, _ in columns), "GL/CL (host)"],
                            [[lab, *(fmt(src.get(lab)) for _, src in columns),
                              fmt(host["gl"][lab] / host["cl"][lab] if lab in host["cl"] and lab in host["gl"]
                                  else None)] for lab in labels])]
    return "\n".join(text)


def plot(results: list[dict], path: str) -> None:
    plt = tools.pyplot()
    names = [r["model"] for r in results]
    panels = [("steady-state latency (median ms, log)", "median_ms", True),
              ("first start, cold caches (s)", "first_start_s", False),
              ("compile (s; GL compiles at first dispatch)", "compile_s", False),
              ("first invoke, cold (s)", "first_invoke_s", False)]
    have_first = all(r["backends"]["cl"].get("first_start") for r in results)
    panels = panels if have_first else panels[:1]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(6.0, 1.6 * len(names) + 2), 3.2 * len(panels)),
                             squeeze=False)
    x = np.arange(len(names))
    for ax, (title, key, log) in zip(axes[:, 0], panels):
        for j, (backend, color) in enumerate(zip(GPU_BACKENDS, ("#4c72b0", "#dd8452"))):
            vals = [r["backends"][backend][key] if key == "median_ms" else r["backends"][backend]["first_start"][key]
                    for r in results]
            bars = ax.bar(x + (j - 0.5) * 0.38, vals, 0.38, label=backend, color=color)
            ax.bar_label(bars, fmt="%.3g", padding=2, fontsize=7)
        ax.set_title(title)
        ax.set_xticks(x, names, fontsize=8)
        if log:
            ax.set_yscale("log")
            ax.set_ylim(top=ax.get_ylim()[1] * 4)  # room for the labels above the bars
        else:
            ax.margins(y=0.15)
        ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"Chart written to {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=str(DEFAULT_MODELS), help="the shared models folder")
    ap.add_argument("--only", type=lambda s: set(s.split(",")), default=None,
                    help=f"comma-separated model names (file stems, or {DEMO})")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--runs", type=int, default=2, help="timed invokes per backend per round")
    ap.add_argument("--kernel_runs", type=int, default=3, help="invokes for the per-kernel timings")
    ap.add_argument("--top", type=int, default=5, help="slowest kernels listed per backend")
    ap.add_argument("--demo_input_size", type=int, default=224, help="built-in model: input height and width")
    ap.add_argument("--demo_width", type=float, default=1.0, help="built-in model: width multiplier")
    ap.add_argument("--no_first_start", action="store_true", help="skip the cold-start subprocesses")
    ap.add_argument("--plot", default=str(ROOT / "bench" / "out" / "gl_vs_cl.png"), help="PNG bar chart")
    ap.add_argument("--output_json", help="also write the results here")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    results = []
    for name, content in load_models(args):
        spec = f"demo:{args.demo_input_size}:{args.demo_width}" if name == DEMO else \
            str(next(Path(args.models).glob(f"*/{name}.tflite")))
        results.append(bench_model(name, content, spec, args))
    if not results:
        print("no models to run", file=sys.stderr)
        return 1
    print(report(results, args.top))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2) + "\n")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
