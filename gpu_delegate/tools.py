"""What the command line and the benchmarks in bench/ share: the built-in demo model, interpreters and inputs,
timing, comparison, tables, and an op profiler built on the interpreter's public profiling hook."""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .delegate import SimpleDelegate
from .interpreter import Interpreter, ProfileEvent
from .tflite.demo_model import mobilenet_v2_model


def demo_model(input_size: int = 224, width: float = 1.0) -> tuple[bytes, str]:
    """The built-in MobileNetV2-shaped model (random weights) and a one-line description of it."""
    return mobilenet_v2_model(input_size, width), \
        f"built-in MobileNetV2 (input {input_size}x{input_size}x3, width {width:g}, random weights)"


def make_interpreter(content: bytes, delegates: Sequence[SimpleDelegate] = (), num_threads: int | None = None,
                     path: str | None = None) -> Interpreter:
    """Our interpreter; given the file's ``path``, its errors name the file rather than "model_content"."""
    if path:
        return Interpreter(model_path=path, experimental_delegates=list(delegates), num_threads=num_threads)
    return Interpreter(model_content=content, experimental_delegates=list(delegates), num_threads=num_threads)


def random_input(shape: Sequence[int], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Gaussian floats; integers spanning an 8-bit range (the full range of int8/uint8)."""
    dt = np.dtype(dtype)
    size = tuple(int(s) for s in shape)
    if dt.kind in "fc":
        return rng.standard_normal(size).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size).astype(bool)
    info = np.iinfo(dt)
    high = min(int(info.max), 255 if info.min == 0 else 127)
    return rng.integers(max(int(info.min), -128), high + 1, size).astype(dt)


def random_inputs(it: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """One random_input per input of interpreter ``it`` (ours or LiteRT's)."""
    return [random_input(d["shape"], d["dtype"], rng) for d in it.get_input_details()]


def set_inputs(it: Any, inputs: Sequence[np.ndarray]) -> None:
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)


def get_outputs(it: Any) -> list[np.ndarray]:
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def timed_invoke(it: Any) -> float:
    """One invoke, in milliseconds."""
    t = time.perf_counter()
    it.invoke()
    return (time.perf_counter() - t) * 1e3


def latency_stats(ms: Sequence[float]) -> dict[str, float]:
    return {"count": len(ms), "avg": statistics.fmean(ms), "std": statistics.pstdev(ms),
            "min": min(ms), "median": statistics.median(ms), "max": max(ms)}


def backend_counts(it: Interpreter) -> dict[str, int]:
    """How many nodes run where: {"cl": 64, "cpu": 1}."""
    return dict(Counter(d["backend"] for d in it.get_ops_details()))


def max_abs_error(outs: Sequence[np.ndarray], refs: Sequence[np.ndarray]) -> float:
    err = 0.0
    for o, r in zip(outs, refs):
        if o.size:
            err = max(err, float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))))
    return err


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (no display here); ImportError without matplotlib."""
    import matplotlib  # optional (the "plot" extra): imported only when a chart is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class OpProfiler:
    """Collects the interpreter's profile events (each CPU node, each delegated partition) while attached.

        profiler = OpProfiler()
        profiler.attach(it); run(); profiler.detach(it)
        text, rows = profiler.report(runs)
    """

    ms: dict[tuple[tuple[int, ...], str, str], list[float]] = field(default_factory=lambda: defaultdict(list))

    def record(self, event: ProfileEvent) -> None:
        self.ms[(event.nodes, event.op, event.backend)].append(event.seconds * 1e3)

    def attach(self, it: Interpreter) -> None:
        it.set_profiler(self.record)

    def detach(self, it: Interpreter) -> None:
        it.set_profiler(None)

    def report(self, runs: int) -> tuple[str, list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        for (nodes, op, backend), ms in self.ms.items():
            avg = sum(ms) / max(runs, 1)
            if backend == "cpu" and len(nodes) == 1:
                rows.append({"node": nodes[0], "op": op, "backend": "cpu", "avg_ms": avg})
            else:
                rows.append({"node": min(nodes), "op": f"DELEGATE ({len(nodes)} nodes)", "backend": backend,
                             "nodes": list(nodes), "avg_ms": avg})
        rows.sort(key=lambda r: r["node"])
        total = sum(r["avg_ms"] for r in rows) or 1.0
        by_type: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for r in rows:
            kind = r["op"] if r["backend"] == "cpu" else f"DELEGATE/{r['backend']}"
            by_type[kind][0] += 1
            by_type[kind][1] += r["avg_ms"]
        order = markdown_table(["node", "op", "runs on", "avg ms", "%"],
                               [[r["node"], r["op"], r["backend"], f"{r['avg_ms']:.3f}",
                                 f"{100 * r['avg_ms'] / total:.1f}"] for r in rows])
        summary = markdown_table(["node type", "count", "avg ms", "%"],
                                 [[k, int(n), f"{t:.3f}", f"{100 * t / total:.1f}"]
                                  for k, (n, t) in sorted(by_type.items(), key=lambda kv: -kv[1][1])])
        return f"Operator-wise profile (run order):\n{order}\n\nSummary by node type:\n{summary}", rows
