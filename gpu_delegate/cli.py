"""The `gpu-delegate` command: benchmark | diff | inspect, with flags named as TFLite's tools name them.

    gpu-delegate benchmark [--graph=M.tflite] [--use_gpu=true] [--gpu_backend=cl|gl|all] [--num_runs=50] ...
    gpu-delegate diff M.tflite [--num_runs=50] [--gpu_backend=cl|gl]
    gpu-delegate inspect [M.tflite] [--gpu_backend=cl|gl]

`benchmark` reports what TFLite's benchmark_model reports (init, first inference, warm-up and steady-state
latency, peak memory) plus where each node ran; `diff` is TFLite's inference diff (the delegate against a
single-threaded CPU reference on random inputs); `inspect` lists a model's tensors, nodes, placement and work.
A user error (missing file, bad flag value, a model that cannot load) prints one line and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np

from . import tools
from .cache import Cache
from .errors import DelegateError, ModelError
from .gpu import GpuDelegate
from .graph import Quantization, Tensor
from .interpreter import Interpreter
from .ops.base import get_op
from .tflite.reader import read_model

T = TypeVar("T")

PROG = "gpu-delegate"
GPU_BACKENDS = ("cl", "gl")


class UserError(Exception):
    """Something the user can fix: printed as one line, never with a traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse prints the whole usage; one line is clearer
        raise UserError(f"{message} ('{self.prog} --help' lists the flags)")


# -- flag types ----------------------------------------------------------------------------------------------

def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true, false, 1 or 0, got {text!r}")


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, allow_abbrev=False,
                     description="Benchmark, check and inspect TFLite models on the gpu_delegate GPU "
                                 "delegate.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("benchmark", allow_abbrev=False,
                       help="latency and memory, like TFLite's benchmark_model",
                       description="Latency and memory of one model, reported like TFLite's benchmark_model. "
                                   "Without --graph it runs the built-in MobileNetV2.")
    b.add_argument("--graph", metavar="M.tflite", help="model file (default: the built-in MobileNetV2)")
    b.add_argument("--use_gpu", type=_bool, metavar="true|false",
                   help="run on the GPU delegate (default: true when --gpu_backend is given)")
    b.add_argument("--gpu_backend", choices=("cl", "gl", "all", "auto"),
                   help="GPU API; 'all' runs cl, gl and the CPU path side by side and prints a table")
    b.add_argument("--num_runs", type=_int_at_least(1), default=50, metavar="N")
    b.add_argument("--warmup_runs", type=_int_at_least(0), default=1, metavar="N")
    b.add_argument("--num_threads", type=_int_at_least(1), metavar="N", help="threads of the CPU kernels")
    b.add_argument("--gpu_precision_loss_allowed", type=_bool, default=False, metavar="true|false",
                   help="allow fp16 storage on the GPU")
    b.add_argument("--delegate_serialize_dir", metavar="D", help="cache compiled kernels in this folder")
    b.add_argument("--delegate_serialize_token", metavar="T", help="model token naming the cache entry")
    b.add_argument("--enable_op_profiling", type=_bool, default=False, metavar="true|false",
                   help="time every node (a delegated partition counts as one)")
    b.add_argument("--output_json", metavar="F", help="also write the results to this JSON file")
    b.add_argument("--plot", metavar="out.png", help="write a PNG bar chart (needs matplotlib)")
    b.add_argument("--demo_input_size", type=_int_at_least(8), default=224, metavar="N",
                   help="built-in model: input height and width (default 224)")
    b.add_argument("--demo_width", type=_positive_float, default=1.0, metavar="W",
                   help="built-in model: width multiplier (default 1.0)")
    b.add_argument("--seed", type=_int_at_least(0), default=0, metavar="N", help="random input seed")

    d = sub.add_parser("diff", allow_abbrev=False, help="inference diff against the CPU reference",
                       description="TFLite's inference diff: random inputs, the delegate against a "
                                   "single-threaded CPU reference (LiteRT when installed, else our CPU "
                                   "path).")
    d.add_argument("model", metavar="MODEL", help=".tflite file")
    d.add_argument("--num_runs", type=_int_at_least(1), default=50, metavar="N")
    d.add_argument("--use_gpu", type=_bool, metavar="true|false",
                   help="test the GPU delegate (default: when it is available; else our CPU path)")
    d.add_argument("--gpu_backend", choices=("cl", "gl", "auto"), help="GPU API of the tested delegate")
    d.add_argument("--gpu_precision_loss_allowed", type=_bool, default=False, metavar="true|false")
    d.add_argument("--seed", type=_int_at_least(0), default=0, metavar="N", help="random input seed")
    d.add_argument("--output_json", metavar="F", help="also write the results to this JSON file")

    i = sub.add_parser("inspect", allow_abbrev=False, help="tensors, nodes, placement and work of a model",
                       description="Inputs, outputs, every node with where it runs, partitions and MACs.")
    i.add_argument("model", metavar="MODEL", nargs="?",
                   help=".tflite file (default: the built-in MobileNetV2)")
    i.add_argument("--gpu_backend", choices=("cl", "gl", "auto"),
                   help="show placement on this GPU backend (default: everything on the CPU)")
    i.add_argument("--demo_input_size", type=_int_at_least(8), default=224, metavar="N")
    i.add_argument("--demo_width", type=_positive_float, default=1.0, metavar="W")

    c = sub.add_parser("cache", allow_abbrev=False, help="list or clear a serialization directory",
                       description="See (file, size, token, backend, date) or remove the delegate's cache files.")
    c.add_argument("action", choices=("ls", "clear"))
    c.add_argument("directory", metavar="DIR", help="the delegate's serialization_dir")
    return parser


# -- shared pieces -------------------------------------------------------------------------------------------

def _read_model(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except IsADirectoryError:
        raise UserError(f"model file {path!r} is a directory") from None
    except OSError as e:
        raise UserError(f"cannot read model file {path!r}: {e.strerror or e}") from None


def make_delegate(backend: str, precision_loss_allowed: bool = False, serialization_dir: str | None = None,
                  model_token: str | None = None) -> GpuDelegate:
    return GpuDelegate(backend=backend, precision_loss_allowed=precision_loss_allowed,
                       serialization_dir=serialization_dir, model_token=model_token)


def _fell_back(delegate: GpuDelegate, backend: str) -> bool:
    """Whether a GpuDelegate asked for ``backend`` found no GPU API and passes every node to the CPU."""
    name = getattr(delegate, "backend_name", backend)
    return name == "cpu" or (backend != "auto" and name != backend)


def _progress(iterable: Iterable[T], total: int, desc: str) -> Iterator[T]:
    from tqdm import tqdm

    # Shown only when the loop outlasts `delay`: short runs stay quiet, long ones show they are alive.
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, delay=1.5, leave=False, unit="run")


def _peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _write_json(path: str | None, data: dict[str, Any]) -> None:
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    except OSError as e:
        raise UserError(f"cannot write --output_json file {path!r}: {e.strerror or e}") from None
    print(f"Results written to {path}")


def _need_matplotlib() -> Any:
    try:
        return tools.pyplot()
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'gpu_delegate[plot]'") from None


def _bar_chart(plt: Any, path: str, labels: list[str], values: list[float], errors: list[float] | None,
               title: str, ylabel: str) -> None:
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(labels) + 2), 4))
    bars = ax.bar(labels, values, yerr=errors, capsize=4, color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f", padding=2)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise UserError(f"cannot write --plot file {path!r}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    print(f"Chart written to {path}")


# -- op profiling --------------------------------------------------------------------------------------------


# -- benchmark -----------------------------------------------------------------------------------------------

def cmd_benchmark(args: argparse.Namespace) -> int:
    use_gpu = args.use_gpu if args.use_gpu is not None else args.gpu_backend is not None
    if args.gpu_backend == "all" and not use_gpu:
        raise UserError("--gpu_backend=all compares the GPU backends; it cannot be combined with "
                        "--use_gpu=false")
    if args.gpu_backend == "all" and args.enable_op_profiling:
        raise UserError("--enable_op_profiling profiles one backend; it cannot be combined with "
                        "--gpu_backend=all")
    if not use_gpu and (args.delegate_serialize_dir or args.delegate_serialize_token):
        raise UserError("--delegate_serialize_dir and --delegate_serialize_token apply only with "
                        "--use_gpu=true")
    plt = _need_matplotlib() if args.plot else None
    if args.graph:
        content, label = _read_model(args.graph), args.graph
    else:
        content, label = tools.demo_model(args.demo_input_size, args.demo_width)
    print(f"Graph: {label}")
    print(f"Num runs: {args.num_runs}, warm-up runs: {args.warmup_runs}, "
          f"threads: {args.num_threads if args.num_threads else 'default'}")
    rng = np.random.default_rng(args.seed)
    if args.gpu_backend == "all":
        return _benchmark_all(args, content, rng, plt)
    backend = args.gpu_backend or "auto"
    delegates = [make_delegate(backend, args.gpu_precision_loss_allowed, args.delegate_serialize_dir,
                               args.delegate_serialize_token)] if use_gpu else []
    profiler = tools.OpProfiler() if args.enable_op_profiling else None
    print(f"Delegate: {delegates[0]!r}" if delegates else "Delegate: none (numba CPU kernels)")
    if delegates and _fell_back(delegates[0], backend):
        why = getattr(delegates[0], "unavailable", "") or "unavailable"
        print(f"Note: no {backend} GPU backend ({why}): every node runs on the CPU")

    t0 = time.perf_counter()
    it = tools.make_interpreter(content, delegates, args.num_threads, args.graph)
    it.allocate_tensors()
    init_ms = (time.perf_counter() - t0) * 1e3
    print(f"Initialized session in {init_ms:.3f} ms.")
    counts = tools.backend_counts(it)
    print(f"Nodes: {sum(counts.values())} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})")
    tools.set_inputs(it, [tools.random_input(d["shape"], d["dtype"], rng) for d in it.get_input_details()])

    first_ms = tools.timed_invoke(it)
    warmup = [tools.timed_invoke(it) for _ in _progress(range(args.warmup_runs), args.warmup_runs, "warm-up")]
    if profiler:
        profiler.attach(it)
    runs = [tools.timed_invoke(it) for _ in _progress(range(args.num_runs), args.num_runs, "benchmark")]
    if profiler:
        profiler.detach(it)
    s = tools.latency_stats(runs)
    warm_avg = statistics.fmean(warmup) if warmup else float("nan")
    peak = _peak_memory_mb()
    print(f"First inference: {first_ms:.3f} ms")
    print(f"Warm-up: {len(warmup)} runs, avg {warm_avg:.3f} ms" if warmup else "Warm-up: none")
    print(f"Inference (ms): count={s['count']} avg={s['avg']:.3f} std={s['std']:.3f} min={s['min']:.3f} "
          f"median={s['median']:.3f} max={s['max']:.3f}")
    print(f"Inference timings in us: Init: {init_ms * 1e3:.0f}, First inference: {first_ms * 1e3:.0f}, "
          f"Warmup (avg): {warm_avg * 1e3:.1f}, Inference (avg): {s['avg'] * 1e3:.1f}")
    print(f"Peak memory footprint (maxrss): {peak:.1f} MB")
    result: dict[str, Any] = {"graph": label, "backend": backend if use_gpu else "cpu", "num_threads": args.num_threads,
              "nodes_by_backend": counts, "init_ms": init_ms, "first_inference_ms": first_ms,
              "warmup_ms": warmup, "warmup_avg_ms": warm_avg if warmup else None, "inference_ms": s,
              "runs_ms": runs, "peak_memory_mb": peak}
    if profiler:
        text, rows = profiler.report(args.num_runs)
        print(text)
        result["op_profile"] = rows
    _write_json(args.output_json, result)
    if plt is not None:
        names = ["min", "median", "avg", "max"] + (["warm-up avg"] if warmup else [])
        values = [s["min"], s["median"], s["avg"], s["max"]] + ([warm_avg] if warmup else [])
        title = (f"{Path(label).name if args.graph else 'built-in MobileNetV2'} on {result['backend']}, "
                 f"{args.num_runs} runs (first inference {first_ms:.1f} ms)")
        _bar_chart(plt, args.plot, names, values, None, title, "latency (ms)")
    return 0


def _benchmark_all(args: argparse.Namespace, content: bytes, rng: np.random.Generator, plt: Any) -> int:
    """cl, gl and our CPU path on the same inputs, timed in interleaved rounds so drift hits all alike."""
    entries: list[tuple[str, Interpreter]] = []
    unavailable: dict[str, str] = {}
    for backend in (*GPU_BACKENDS, "cpu"):
        try:
            delegates: list[GpuDelegate] = [] if backend == "cpu" else [
                make_delegate(backend, args.gpu_precision_loss_allowed, args.delegate_serialize_dir,
                              args.delegate_serialize_token)]
            if delegates and _fell_back(delegates[0], backend):
                raise DelegateError(getattr(delegates[0], "unavailable", "") or "no such backend here")
            t0 = time.perf_counter()
            it = tools.make_interpreter(content, delegates, args.num_threads, args.graph)
            it.allocate_tensors()
            print(f"{backend}: initialized in {(time.perf_counter() - t0) * 1e3:.1f} ms, nodes "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(tools.backend_counts(it).items())))
            entries.append((backend, it))
        except DelegateError as e:
            if backend == "cpu":
                raise
            unavailable[backend] = str(e).splitlines()[0]
            print(f"{backend}: unavailable ({unavailable[backend]})")
    inputs = [tools.random_input(d["shape"], d["dtype"], rng) for d in entries[0][1].get_input_details()]
    first: dict[str, float] = {}
    for name, it in entries:
        tools.set_inputs(it, inputs)
        first[name] = tools.timed_invoke(it)
        for _ in range(args.warmup_runs):
            it.invoke()
    times: dict[str, list[float]] = {name: [] for name, _ in entries}
    for r in _progress(range(args.num_runs), args.num_runs, "rounds"):
        k = r % len(entries)
        for name, it in entries[k:] + entries[:k]:  # rotate who goes first each round
            times[name].append(tools.timed_invoke(it))
    ref = tools.get_outputs(dict(entries)["cpu"])
    cpu_median = statistics.median(times["cpu"])
    rows, result_rows = [], []
    for name, it in entries:
        med = statistics.median(times[name])
        err = tools.max_abs_error(tools.get_outputs(it), ref)
        rows.append([name, f"{med:.3f}", f"{med / cpu_median:.2f}", f"{err:.3g}"])
        result_rows.append({"backend": name, "median_ms": med, "ratio_to_cpu": med / cpu_median,
                            "max_abs_error_vs_cpu": err, "first_inference_ms": first[name],
                            "inference_ms": tools.latency_stats(times[name])})
    for name, why in unavailable.items():
        rows.append([name, "unavailable", "-", "-"])
        result_rows.append({"backend": name, "unavailable": why})
    print(tools.markdown_table(["backend", "median ms", "ratio to cpu", "max abs error vs cpu"], rows))
    print(f"Peak memory footprint (maxrss): {_peak_memory_mb():.1f} MB")
    _write_json(args.output_json, {"num_runs": args.num_runs, "backends": result_rows,
                                   "peak_memory_mb": _peak_memory_mb()})
    if plt is not None:
        names = [n for n, _ in entries]
        _bar_chart(plt, args.plot, names, [statistics.median(times[n]) for n in names],
                   [statistics.pstdev(times[n]) for n in names],
                   "median latency per backend (error bars: std)", "latency (ms)")
    return 0


# -- diff ----------------------------------------------------------------------------------------------------

def _reference(content: bytes, path: str) -> tuple[Any, str]:
    """(interpreter, description): LiteRT's single-threaded CPU kernels, or ours when LiteRT is absent."""
    try:
        from ai_edge_litert import __version__ as litert_version
        from ai_edge_litert.interpreter import Interpreter as LiteRT
    except ImportError:
        it = tools.make_interpreter(content, [], 1, path)
        it.allocate_tensors()
        return it, "gpu_delegate CPU path, 1 thread (LiteRT is not installed)"
    try:
        it = LiteRT(model_content=content, num_threads=1)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise UserError(f"LiteRT cannot load the model: {str(e).strip().splitlines()[-1]}") from None
    return it, f"LiteRT {litert_version} CPU, 1 thread"


def cmd_diff(args: argparse.Namespace) -> int:
    content = _read_model(args.model)
    use_gpu = args.use_gpu
    if use_gpu is None:
        use_gpu = True
    if use_gpu:
        backend = args.gpu_backend or "auto"
        delegates = [make_delegate(backend, args.gpu_precision_loss_allowed)]
        test_name = repr(delegates[0])
    else:
        delegates, test_name = [], "gpu_delegate CPU path (numba kernels)"
    test = tools.make_interpreter(content, delegates, path=args.model)
    test.allocate_tensors()
    ref, ref_name = _reference(content, args.model)
    print(f"Model: {args.model}")
    print(f"Reference: {ref_name}")
    print(f"Test: {test_name}")
    if use_gpu:
        counts = tools.backend_counts(test)
        print(f"Test nodes: {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}")
    rng = np.random.default_rng(args.seed)
    details = test.get_input_details()
    out_details = test.get_output_details()
    errors: list[list[np.ndarray]] = [[] for _ in out_details]  # per output, per run: |test - ref|
    ref_ms, test_ms = [], []
    ref.invoke()  # untimed: the first invoke compiles kernels (numba, GPU programs)
    test.invoke()
    for _ in _progress(range(args.num_runs), args.num_runs, "diff"):
        inputs = [tools.random_input(d["shape"], d["dtype"], rng) for d in details]
        tools.set_inputs(ref, inputs)
        tools.set_inputs(test, inputs)
        ref_ms.append(tools.timed_invoke(ref))
        test_ms.append(tools.timed_invoke(test))
        for k, (o, r) in enumerate(zip(tools.get_outputs(test), tools.get_outputs(ref))):
            if o.shape != r.shape:
                raise UserError(f"output {k} has shape {list(o.shape)} on the test side and {list(r.shape)} "
                                "on the reference")
            errors[k].append(np.abs(o.astype(np.float64) - r.astype(np.float64)))
    rs, ts = tools.latency_stats(ref_ms), tools.latency_stats(test_ms)
    print(f"Num evaluation runs: {args.num_runs}")
    print(f"Reference run latency: avg={rs['avg']:.3f} ms, std={rs['std']:.3f} ms")
    print(f"Test run latency: avg={ts['avg']:.3f} ms, std={ts['std']:.3f} ms")
    rows, result_outputs = [], []
    for k, d in enumerate(out_details):
        per_run = [float(e.mean()) if e.size else 0.0 for e in errors[k]]
        avg, std = statistics.fmean(per_run), statistics.pstdev(per_run)
        mx = max((float(e.max()) for e in errors[k] if e.size), default=0.0)
        rows.append([k, d["name"], list(map(int, d["shape"])), f"{avg:.3g}", f"{std:.3g}", f"{mx:.3g}"])
        result_outputs.append({"index": k, "name": d["name"], "avg_error": avg, "std_dev": std,
                               "max_abs_error": mx})
    print(tools.markdown_table(["output", "name", "shape", "avg abs error", "std over runs", "max abs error"], rows))
    _write_json(args.output_json, {"model": args.model, "reference": ref_name, "test": test_name,
                                   "num_runs": args.num_runs, "reference_latency_ms": rs,
                                   "test_latency_ms": ts, "outputs": result_outputs})
    return 0


# -- inspect -------------------------------------------------------------------------------------------------

def _quant_text(q: Quantization | None) -> str:
    if q is None:
        return "-"
    if q.per_channel:
        return f"per-channel, {q.scale.size} scales on axis {q.axis}"
    s, z = q.scalar()
    return f"scale={s:.6g} zero_point={z}"


def _shape_text(t: Tensor) -> str:
    sig = t.shape_signature
    if sig is not None and tuple(sig) != tuple(t.shape):
        return f"{list(t.shape)} (signature {list(sig)})"
    return str(list(t.shape))


def _mmacs(n: int) -> str:
    return f"{n / 1e6:.3f} M"


def cmd_inspect(args: argparse.Namespace) -> int:

    if args.model:
        content, label = _read_model(args.model), args.model
    else:
        content, label = tools.demo_model(args.demo_input_size, args.demo_width)
    model = read_model(content, label)
    graph = model.main
    print(f"Model: {label} ({len(content)} bytes, schema version {model.version}, {len(model.subgraphs)} "
          f"subgraph{'s' if len(model.subgraphs) > 1 else ''})")
    if model.description:
        print(f"Description: {model.description}")
    for s in model.signatures:
        print(f"Signature {s.key!r}: inputs {list(s.inputs)} -> outputs {list(s.outputs)}")
    for title, ids in (("Inputs", graph.inputs), ("Outputs", graph.outputs)):
        print(f"\n{title}:")
        print(tools.markdown_table(["index", "name", "shape", "dtype", "quantization"],
                     [[i, graph.tensors[i].name, _shape_text(graph.tensors[i]),
                       graph.tensors[i].type_name.lower() or graph.tensors[i].dtype.name,
                       _quant_text(graph.tensors[i].quant)] for i in ids]))

    placement: dict[int, str] = {}
    reasons: dict[int, str] = {}
    partitions: list[list[int]] = []
    if args.gpu_backend:
        it = tools.make_interpreter(content, [make_delegate(args.gpu_backend)], path=args.model)
        placement = {d["index"]: d["backend"] for d in it.get_ops_details()}
        reasons = it.cpu_reasons()
        partitions = _partitions(it)
    rows = []
    macs_by_op: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for node in graph.nodes:
        op = get_op(node.op)
        macs = op.macs(node, graph) if op is not None else 0
        macs_by_op[node.op][0] += 1
        macs_by_op[node.op][1] += macs
        where = placement.get(node.index, "cpu" if op is not None else "none")
        note = reasons.get(node.index, "") if where == "cpu" else ""
        if op is None and where == "none":
            note = "no kernel implements this op"
        outs = ", ".join(str(list(graph.tensors[t].shape)) for t in node.outputs)
        rows.append([node.index, node.op + (" (custom)" if node.custom else ""), outs, where,
                     _mmacs(macs), note])
    print(f"\nNodes ({len(graph.nodes)}):")
    print(tools.markdown_table(["#", "op", "output shape", "runs on", "MACs", "why on the CPU"], rows))
    if args.gpu_backend:
        counts = Counter(placement.values())
        print(f"\nPlacement: {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}; "
              f"{len(partitions)} delegated partition{'' if len(partitions) == 1 else 's'}")
        for k, nodes in enumerate(partitions):
            print(f"  partition {k}: {len(nodes)} nodes ({_ranges(nodes)})")
    total = sum(m for _, m in macs_by_op.values())
    print("\nWork by op type:")
    print(tools.markdown_table(["op", "nodes", "MACs", "%"],
                 [[name, n, _mmacs(m), f"{100 * m / total:.1f}" if total else "-"]
                  for name, (n, m) in sorted(macs_by_op.items(), key=lambda kv: -kv[1][1])]))
    print(f"Total: {_mmacs(total)} MACs per inference")
    return 0


def _partitions(it: Interpreter) -> list[list[int]]:
    # The interpreter's execution plan holds each delegated partition as one step with a `.partition`.
    return [list(step.partition.nodes) for step in it._steps if hasattr(step, "partition")]


def _ranges(nodes: list[int]) -> str:
    """The nodes as sorted ranges: [0, 1, 2, 3, 7, 9, 10] -> "0-3, 7, 9-10"."""
    nodes = sorted(nodes)
    spans: list[str] = []
    start = nodes[0]
    for a, b in zip(nodes, [*nodes[1:], None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}-{a}")
            if b is not None:
                start = b
    return ", ".join(spans)


def cmd_cache(args: argparse.Namespace) -> int:

    directory = Path(args.directory)
    if not directory.is_dir():
        raise UserError(f"{args.directory}: not a directory")
    entries = Cache.entries(directory)
    if args.action == "clear":
        for e in entries:
            (directory / e["file"]).unlink()
        for tmp in directory.glob(".tmp-*"):
            tmp.unlink()
        print(f"removed {len(entries)} cache file(s) from {directory}")
        return 0
    print("| file | size | token | backend | created | valid |")
    print("|---|---:|---|---|---|---|")
    for e in entries:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["created"])) if e.get("created") else "-"
        print(f"| {e['file']} | {e['size']} | {e.get('token') or '-'} | {e.get('backend') or '-'} | {created} | "
              f"{'yes' if e['valid'] else 'no: ' + e.get('error', '')} |")
    print(f"{len(entries)} file(s), {sum(e['size'] for e in entries)} bytes")
    return 0


# -- entry point ---------------------------------------------------------------------------------------------

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "benchmark": cmd_benchmark, "diff": cmd_diff, "inspect": cmd_inspect, "cache": cmd_cache}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `gpu-delegate inspect M | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail
        return 141
    except (UserError, ModelError, DelegateError, ValueError, OSError) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
