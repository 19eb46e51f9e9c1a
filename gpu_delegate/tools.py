"""What the command line and the benchmarks in bench/ share: the built-in demo model, interpreters and inputs,
timing, comparison, tables, and an op profiler built on the interpreter's public profiling hook."""

from __future__ import annotations

import math
import os
import re
import resource
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .delegate import SimpleDelegate
from .interpreter import Interpreter, ProfileEvent
from .runner import KernelTiming
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



# -- benchmark_model's numbers and inputs ----------------------------------------------------------------------

def micros(seconds: float) -> int:
    """Whole microseconds, as TFLite's tools count time (profiling::time::NowMicros differences)."""
    return int(seconds * 1e6)


def cpp_number(x: float) -> str:
    """A double as C++'s ``ostream <<`` prints it by default (6 significant digits, like printf's %g): how
    TFLite's tools print averages ("79760.9", "1.23457e+06")."""
    return format(x, "g")


def stat_line(us: Sequence[int]) -> str:
    """TFLite's ``Stat<int64_t>`` of microsecond samples, printed as benchmark_model prints it
    (tsl/util/stats_calculator.h): ``count=50 first=79449 curr=81350 min=77385 max=88213 avg=79732 std=1929``.
    The standard deviation is the population one, truncated to an integer as the int64 Stat does."""
    if not us:
        return "count=0"
    n, first, newest = len(us), us[0], us[-1]
    if min(us) == max(us):
        return f"count={n} curr={newest}" + ("(all same)" if n > 1 else "")
    avg = sum(us) / n
    variance = int(sum(float(u) * u for u in us) / n - avg * avg)
    return (f"count={n} first={first} curr={newest} min={min(us)} max={max(us)} avg={cpp_number(avg)} "
            f"std={int(math.sqrt(max(variance, 0)))}")


def benchmark_input(shape: Sequence[int], dtype: Any, rng: np.random.Generator,
                    value_range: tuple[int, int] | None = None) -> np.ndarray:
    """Random input data as benchmark_model makes it: floats uniform in [-0.5, 0.5), integers in 0..99 (uint8
    0..254, int8 -127..127), bools 0 or 1; ``value_range`` (low, high, both inclusive) overrides an integer
    input's range, as --input_layer_value_range does."""
    dt = np.dtype(dtype)
    size = tuple(int(s) for s in shape)
    if dt.kind in "fc":
        return rng.uniform(-0.5, 0.5, size).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size).astype(bool)
    low, high = {np.dtype(np.uint8): (0, 254), np.dtype(np.int8): (-127, 127)}.get(dt, (0, 99))
    if value_range is not None:
        low, high = value_range
    return rng.integers(low, high + 1, size).astype(dt)


def maxrss_mb() -> float:
    """The process's peak resident set size so far (getrusage; KiB on Linux), in MB of 1024 KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> tuple[float, float]:
    """(resident, resident file-backed or shared) memory now, in MB, from /proc/self/statm; zeros elsewhere."""
    try:
        fields = open("/proc/self/statm").read().split()  # noqa: SIM115  (read at once, closed by refcount)
    except OSError:
        return 0.0, 0.0
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page / 2**20, int(fields[2]) * page / 2**20


class PeakMemoryMonitor:
    """benchmark_model's --report_peak_memory_footprint: a thread that samples the resident set size every
    ``interval_ms`` while it runs (so, as there, the sampling itself may disturb the timings)."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_s = interval_ms / 1e3
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, rss_mb()[0])
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, rss_mb()[0])
        return self.peak_mb


def device_label(info: dict[str, Any]) -> str:
    """A short name for a backend's device and driver: "PoCL 3.0-rc2 (pthread-AMD EPYC, LLVM 14.0.6)",
    "llvmpipe (LLVM 15.0.6, 256 bits), Mesa 22.3.6"."""
    name = str(info.get("name", "?"))
    if info.get("api") == "OpenCL":
        platform = str(info.get("platform", ""))
        pocl = re.search(r"PoCL [\w.\-]+", platform)
        llvm = re.search(r"LLVM [\d.]+", platform)
        driver = pocl.group(0) if pocl else f"OpenCL driver {info.get('driver_version', '?')}"
        return f"{driver} ({name}{', ' + llvm.group(0) if llvm else ''})"
    mesa = re.search(r"Mesa [\w.\-]+", str(info.get("driver_version", "")))
    return f"{name}, {mesa.group(0) if mesa else info.get('driver_version', '?')}"


# -- op profiling, reported as TFLite's profile summarizer reports it --------------------------------------------

@dataclass
class ProfileDetail:
    """One row of a profile: a node, a delegated partition or one kernel inside it."""

    type: str  # the node type column: "CONV_2D", "DELEGATE/cl", ...
    name: str  # the name column, unique within its table: "[output tensor names]:node index"
    run_order: int
    us: list[int] = field(default_factory=list)  # per call
    info: dict[str, Any] = field(default_factory=dict)  # for the JSON: nodes, backend, clock


def _field(value: Any, width: int) -> str:
    """One column as TFLite's InitField makes it: a tab, then right-aligned, floats with 3 decimals."""
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    return "\t" + text.rjust(width)


class ProfileStats:
    """TFLite's StatsCalculator for one table set (a graph's nodes, or a delegate's internal kernels): the
    "Run Order", "Top by Computation Time" and "Summary by node type" tables and the short summary."""

    TOP = 10  # rows of "Top by Computation Time" (StatSummarizerOptions.time_limit)

    def __init__(self) -> None:
        self.details: dict[str, ProfileDetail] = {}
        self.run_totals: list[int] = []

    def add(self, name: str, type_: str, us: int, **info: Any) -> None:
        detail = self.details.get(name)
        if detail is None:
            detail = self.details[name] = ProfileDetail(type_, name, len(self.details), info=info)
        detail.us.append(us)

    def end_run(self, total_us: int) -> None:
        self.run_totals.append(total_us)

    @property
    def runs(self) -> int:
        return max(len(self.run_totals), 1)

    def _row(self, d: ProfileDetail, cumulative_us: int, csv: bool) -> str:
        total = sum(self.run_totals) or 1
        first, avg = d.us[0] / 1e3, sum(d.us) / len(d.us) / 1e3
        pct, cdf = sum(d.us) * 100.0 / total, cumulative_us * 100.0 / total
        called = len(d.us) // self.runs
        if csv:
            name = d.name.replace(",", "\t")
            return (f"{d.type}, {cpp_number(first)}, {cpp_number(avg)}, {cpp_number(pct)}%, {cpp_number(cdf)}%, "
                    f"0, {called}, {name}")
        return (_field(d.type, 24) + _field(first, 9) + _field(avg, 9) + _field(pct, 7) + "%" + _field(cdf, 7)
                + "%" + _field(0.0, 10) + _field(called, 9) + "\t" + d.name)

    def _table(self, title: str, details: list[ProfileDetail], csv: bool) -> str:
        lines = [f"============================== {title} =============================="]
        if csv:
            lines.append("node type, first, avg_ms, %, cdf%, mem KB, times called, name")
        else:
            lines.append(_field("[node type]", 24) + _field("[first]", 9) + _field("[avg ms]", 9)
                         + _field("[%]", 8) + _field("[cdf%]", 8) + _field("[mem KB]", 10)
                         + _field("[times called]", 9) + "\t[Name]")
        cumulative = 0
        for d in details:
            cumulative += sum(d.us)
            lines.append(self._row(d, cumulative, csv))
        return "\n".join(lines) + "\n\n"

    def by_type(self) -> list[tuple[str, int, int, int]]:
        """(node type, nodes, microseconds per run, calls per run), slowest first (integer microseconds per
        node and run, as TFLite sums them)."""
        count: Counter[str] = Counter()
        time_us: Counter[str] = Counter()
        called: Counter[str] = Counter()
        for d in self.details.values():
            count[d.type] += 1
            time_us[d.type] += int(sum(d.us) / self.runs)
            called[d.type] += len(d.us) // self.runs
        order = sorted(time_us, key=lambda t: (-time_us[t], t))
        return [(t, count[t], time_us[t], called[t]) for t in order]

    def _summary_by_type(self, csv: bool) -> str:
        rows = self.by_type()
        accumulated = sum(r[2] for r in rows) or 1
        lines = [f"Number of nodes executed: {len(self.details)}",
                 "============================== Summary by node type =============================="]
        if csv:
            lines.append("node type, count, avg_ms, avg %, cdf %, mem KB, times called")
        else:
            lines.append(_field("[Node type]", 24) + _field("[count]", 9) + _field("[avg ms]", 10)
                         + _field("[avg %]", 11) + _field("[cdf %]", 11) + _field("[mem KB]", 10)
                         + _field("[times called]", 10))
        cdf = 0.0
        for node_type, n, us, called in rows:
            pct = us * 100.0 / accumulated
            cdf += pct
            if csv:
                lines.append(f"{node_type}, {n}, {cpp_number(us / 1e3)}, {cpp_number(pct)}%, {cpp_number(cdf)}%, "
                             f"0, {called}")
            else:
                lines.append(_field(node_type, 24) + _field(n, 9) + _field(us / 1e3, 10) + _field(pct, 10) + "%"
                             + _field(cdf, 10) + "%" + _field(0.0, 10) + _field(called, 9))
        return "\n".join(lines) + "\n\n"

    def short_summary(self) -> str:
        return (f"Timings (microseconds): {stat_line(self.run_totals)}\nMemory (bytes): count=0\n"
                f"{len(self.details)} nodes observed\n")

    def output(self, csv: bool = False) -> str:
        """GetOutputString and GetShortSummary, as TFLite's default (or CSV) profile summary formatter."""
        in_order = sorted(self.details.values(), key=lambda d: d.run_order)
        by_time = sorted(in_order, key=lambda d: -sum(d.us) / len(d.us))[:self.TOP]
        return (self._table("Run Order", in_order, csv) + self._table("Top by Computation Time", by_time, csv)
                + self._summary_by_type(csv) + self.short_summary())

    def rows(self) -> list[dict[str, Any]]:
        total = sum(self.run_totals) or 1
        return [{"type": d.type, "name": d.name, "first_ms": d.us[0] / 1e3, "avg_ms": sum(d.us) / len(d.us) / 1e3,
                 "percent": sum(d.us) * 100.0 / total, "times_called": len(d.us) // self.runs, **d.info}
                for d in sorted(self.details.values(), key=lambda d: d.run_order)]


def _names(graph: Any, tensors: Sequence[int]) -> str:
    return "[" + ", ".join(graph.tensors[t].name for t in tensors) + "]"


class OpProfiler:
    """Per-node and per-kernel timings of an interpreter's invokes, reported as TFLite's benchmark_model
    reports them with --enable_op_profiling: CPU nodes and delegated partitions in the graph's tables, and
    under "Delegate internal" every kernel a GpuDelegate created with ``enable_op_profiling=True`` ran inside
    its partitions (its node names and op types; device time where the API's counters work, else host time of
    that kernel dispatched alone).

        profiler = OpProfiler(delegates)
        profiler.attach(it)
        for _ in range(runs):
            it.invoke(); profiler.end_run()
        profiler.detach(it)
        print(profiler.report())
    """

    def __init__(self, delegates: Sequence[SimpleDelegate] = ()) -> None:
        self.delegates = list(delegates)
        self.init = ProfileStats()
        self.graph = ProfileStats()
        self.kernels = ProfileStats()
        self.clocks: dict[str, set[str]] = defaultdict(set)  # backend -> "device" / "host"
        self._graph: Any = None
        self._run = [0, 0]  # this run's graph and kernel microseconds
        self._open = False
        self._partition_names: dict[tuple[int, ...], str] = {}

    def add_init(self, tag: str, seconds: float) -> None:
        """An initialization step ("ModifyGraphWithDelegate", "AllocateTensors") for the init profile."""
        us = micros(seconds)
        self.init.add(f"{tag}/0", tag, us)
        self.init.run_totals = [sum(self.init.run_totals) + us]

    def attach(self, it: Interpreter) -> None:
        self._graph = it.graph
        it.set_profiler(self.record)

    def detach(self, it: Interpreter) -> None:
        it.set_profiler(None)
        self.end_run()

    def end_run(self) -> None:
        """Close one invoke's totals (benchmark_model's OnSingleRunEnd)."""
        if self._open:
            self.graph.end_run(self._run[0])
            if self._run[1]:
                self.kernels.end_run(self._run[1])
        self._run, self._open = [0, 0], False

    def record(self, event: ProfileEvent) -> None:
        graph, us = self._graph, micros(event.seconds)
        self._open = True
        self._run[0] += us
        if event.op != "DELEGATE":
            node = graph.nodes[event.nodes[0]]
            self.graph.add(f"{_names(graph, node.outputs)}:{node.index}", event.op, us, nodes=list(event.nodes),
                           backend=event.backend)
            return
        self.graph.add(self._partition_name(event.nodes), f"DELEGATE/{event.backend}", us,
                       nodes=list(event.nodes), backend=event.backend)
        for k, timing in enumerate(self._kernel_timings(event.nodes)):
            self._run[1] += micros(timing.ns / 1e9)
            self.clocks[event.backend].add(timing.clock)
            self.kernels.add(*self._kernel_row(timing, k, event.nodes), micros(timing.ns / 1e9),
                             kernel=timing.kernel, nodes=list(timing.nodes), backend=event.backend,
                             clock=timing.clock)

    def _partition_name(self, nodes: tuple[int, ...]) -> str:
        """"[its output tensors]:first node": the tensors the partition writes that anything outside reads."""
        if nodes not in self._partition_names:
            graph, inside = self._graph, set(nodes)
            written = [t for n in nodes for t in graph.nodes[n].outputs]
            read_outside = {t for node in graph.nodes if node.index not in inside for t in node.inputs}
            outputs = [t for t in written if t in read_outside or t in graph.outputs]
            self._partition_names[nodes] = f"{_names(graph, outputs)}:{min(nodes)}"
        return self._partition_names[nodes]

    def _kernel_timings(self, nodes: tuple[int, ...]) -> list[KernelTiming]:
        inside = set(nodes)
        for d in self.delegates:
            timings: list[KernelTiming] = getattr(d, "last_kernel_timings", [])
            if any(t.nodes for t in timings) and all(set(t.nodes) <= inside for t in timings):
                return timings
        return []

    def _kernel_row(self, t: KernelTiming, k: int, partition: tuple[int, ...]) -> tuple[str, str]:
        """(name, type) of a kernel: "conv2d_1x1 CONV_2D+ADD [block_2_add]:17+18", typed by its first op."""
        graph = self._graph
        if not t.nodes:
            return f"{t.kernel} [partition {min(partition)} boundary]:{k}", t.kernel.upper()
        ops = "+".join(graph.nodes[n].op for n in t.nodes)
        outputs = _names(graph, graph.nodes[t.nodes[-1]].outputs)
        return f"{t.kernel} {ops} {outputs}:{'+'.join(map(str, t.nodes))}", graph.nodes[t.nodes[0]].op

    def report(self, csv: bool = False) -> str:
        """What benchmark_model prints at the end (or writes to --profiling_output_csv_file), without the log
        prefix: the initialization profile, then the graph's profile and the delegates' internal one."""
        self.end_run()
        parts = []
        if self.init.details:
            parts.append("Profiling Info for Benchmark Initialization:\n" + self.init.output(csv) + "\n")
        if self.graph.details:
            text = self.graph.output(csv) + "\n"
            if self.kernels.details:
                text += "Delegate internal: \n" + self.kernels.output(csv) + "\n"
            parts.append("Operator-wise Profiling Info for Regular Benchmark Runs:\n" + text)
        return "\n".join(parts)

    def json(self) -> dict[str, Any]:
        return {"init": self.init.rows(), "graph": self.graph.rows(), "delegate_internal": self.kernels.rows(),
                "clocks": {b: sorted(c) for b, c in self.clocks.items()}}
