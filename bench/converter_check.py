"""Run converter-made models (bench/converter_models.py) on our CPU path, cl and gl, and compare with LiteRT.

    python bench/converter_check.py DIR [--backends cpu,cl,gl] [--only SUBSTRING ...] [--json OUT]

For each model it prints a row of the table issue 15 asks for: model | ops | cpu | cl | gl | GPU share | what
stayed on the CPU and why. A path's cell is the largest error against LiteRT's default kernels, judged by the
model's kind:

- float outputs of float32 / float16-weight models: max|ours - LiteRT| <= 1e-4 * (1 + max|LiteRT|);
- float outputs of dynamic-range and int8 networks: <= 2e-2 * (1 + max|LiteRT|) (LiteRT quantizes activations on
  the fly, we stay in float; int8 steps one apart move float outputs by a step's worth);
- int8/uint8 outputs: within 3 steps of LiteRT's default kernels, and on the CPU path bit-exact with LiteRT's
  reference kernels (BUILTIN_REF) where those run and compute the model's ops as TFLite means them (their int8 SUM
  reads the codes as uint8: a model with one is judged against LiteRT's builtin kernels, as where BUILTIN_REF
  refuses a model).

A model with an open batch is also run at batch 2 (our CPU path against LiteRT at batch 2), and its GPU share is
compared with its batch-1 twin's. Exit status 1 when any cell fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import gpu_delegate as gd

FLOAT_REL = 1e-4
QUANT_FLOAT_REL = 2e-2
QUANT_STEPS = 3


@dataclass
class Verdict:
    ok: bool
    error: float  # relative float error, or steps for integer outputs
    text: str


@dataclass
class ModelResult:
    name: str
    ops: int
    cells: dict[str, Verdict] = field(default_factory=dict)
    gpu_share: dict[str, float] = field(default_factory=dict)
    on_cpu: dict[str, str] = field(default_factory=dict)  # backend -> "OP: reason; ..."
    seconds: dict[str, float] = field(default_factory=dict)
    flatness: float = 1.0
    reference: str = "LiteRT"

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.cells.values())


def model_inputs(content: bytes, batch: int | None = None, seed: int = 0, value_range: list[float] | None = None
                 ) -> list[np.ndarray]:
    """Inputs as a user feeds them: float pixels in ``value_range`` where the model expects them (normal floats
    otherwise), token ids for int32 inputs, full-range codes for int8/uint8."""
    rng = np.random.default_rng(seed)
    out = []
    for d in gd.Interpreter(model_content=content).get_input_details():
        shape = list(d["shape"])
        if batch is not None and shape and d["shape_signature"][0] == -1:
            shape[0] = batch
        dt = np.dtype(d["dtype"])
        if dt.kind == "f" and value_range is not None:
            out.append(rng.uniform(*value_range, shape).astype(dt))
        elif dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt == np.int32 or dt == np.int64:
            out.append(rng.integers(0, 50, shape).astype(dt))  # token ids below every vocabulary's size
        elif dt == np.bool_:
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max + 1, shape).astype(dt))
    return out


def run_interpreter(it: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    for d, x in zip(it.get_input_details(), inputs):
        if tuple(d["shape"]) != x.shape:
            it.resize_tensor_input(d["index"], x.shape)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def litert_interpreter(content: bytes, kernels: str = "default", preserve_all_tensors: bool = False) -> Any:
    """LiteRT with its "default" kernels (XNNPACK first), its optimized "builtin" ones, or its "reference" ones."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = {"default": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            "reference": OpResolverType.BUILTIN_REF}[kernels]
    with warnings.catch_warnings():  # "preserve_all_tensors is intended for debugging": so it is here
        warnings.simplefilter("ignore")
        return Interpreter(model_content=content, experimental_op_resolver_type=kind,
                           experimental_preserve_all_tensors=preserve_all_tensors)


def litert_outputs(content: bytes, inputs: list[np.ndarray], reference_kernels: bool = False) -> list[np.ndarray]:
    return run_interpreter(litert_interpreter(content, "reference" if reference_kernels else "default"), inputs)


def distances(ours: list[np.ndarray], ref: list[np.ndarray]) -> list[float]:
    """Per output: max|ours - ref| / (1 + max|ref|) for floats, the largest step for integers, 0/inf for others.
    A shape or dtype mismatch is inf."""
    if len(ours) != len(ref):
        return [np.inf] * max(len(ours), len(ref))
    out = []
    for o, r in zip(ours, ref):
        if o.shape != r.shape or o.dtype != r.dtype:
            out.append(np.inf)
        elif not r.size:
            out.append(0.0)
        elif r.dtype.kind == "f":
            r64 = r.astype(np.float64)
            err = float(np.max(np.abs(o - r64))) / (1.0 + float(np.max(np.abs(r64))))
            out.append(err if np.isfinite(err) else np.inf)
        elif r.dtype.kind in "iu":
            out.append(float(np.max(np.abs(o.astype(np.int64) - r.astype(np.int64)))))
        else:
            out.append(0.0 if np.array_equal(o, r) else np.inf)
    return out


def fmt(ds: list[float], ref: list[np.ndarray]) -> str:
    return " / ".join(f"{d:.0f} steps" if r.dtype.kind in "iu" else f"{d:.1e}" for d, r in zip(ds, ref))


class References:
    """LiteRT's answers for one model and input: its default kernels (XNNPACK), its reference kernels
    (BUILTIN_REF, computed when needed; None where they refuse or crash), and for a dynamic-range model its
    default answer on the float32 twin (same architecture, batch and weights, from the same generator run)."""

    def __init__(self, path: Path, content: bytes, inputs: list[np.ndarray]) -> None:
        self.path, self.content, self.inputs = path, content, inputs
        self.default = litert_outputs(content, inputs)
        self._reference: list[np.ndarray] | None | bool = False
        self._twin: list[np.ndarray] | None | bool = False
        self._dequantized_twin: list[np.ndarray] | None | bool = False
        self._builtin: list[np.ndarray] | None = None

    @property
    def reference(self) -> list[np.ndarray] | None:
        if self._reference is False and reference_kernel_bug(self.content):
            self._reference = None
        if self._reference is False:
            try:
                self._reference = litert_outputs(self.content, self.inputs, reference_kernels=True)
            except (RuntimeError, ValueError):
                self._reference = None
        return self._reference  # type: ignore[return-value]

    @property
    def second(self) -> tuple[list[np.ndarray], str]:
        """LiteRT's second opinion: its reference kernels, or where those cannot run the model (BUILTIN_REF lacks
        newer op versions, TILE v3 say) its optimized builtin kernels."""
        if self.reference is not None:
            return self.reference, "reference"
        if self._builtin is None:
            self._builtin = run_interpreter(litert_interpreter(self.content, "builtin"), self.inputs)
        return self._builtin, "builtin"

    @property
    def twin_path(self) -> Path:
        """The float32 model of the same architecture, batch and weights as this dynamic-range one."""
        return self.path.with_name(self.path.name.replace("_dynrange", "_fp32"))

    @property
    def float_twin(self) -> list[np.ndarray] | None:
        if self._twin is False:
            twin = self.twin_path
            self._twin = litert_outputs(twin.read_bytes(), self.inputs) if twin.exists() else None
        return self._twin  # type: ignore[return-value]

    @property
    def dequantized_twin(self) -> list[np.ndarray] | None:
        """For a dynamic-range model, LiteRT's float kernels on its float32 twin whose weights are replaced by this
        model's int8 weights dequantized: the computation the dynamic-range model means without LiteRT's on-the-fly
        activation quantization (what TFLite's GPU delegate and we compute). None without a twin."""
        if self._dequantized_twin is False:
            twin = self.twin_path
            patched = dequantized_weights_in(twin.read_bytes(), self.content) if twin.exists() else None
            self._dequantized_twin = litert_outputs(patched, self.inputs) if patched is not None else None
        return self._dequantized_twin  # type: ignore[return-value]


def reference_kernel_bug(content: bytes) -> str | None:
    """Why LiteRT's reference kernels (BUILTIN_REF) are no judge of this model, or None. Their int8 SUM reads the
    codes as uint8 (tests/test_ops_reduce.py::test_sum_uint8_and_int8), 149 steps off on a masked mean; such a
    model is judged against LiteRT's optimized builtin kernels instead, as where BUILTIN_REF refuses a model."""
    from gpu_delegate.tflite.reader import read_model

    for graph in read_model(content).subgraphs:
        for node in graph.nodes:
            if node.op == "SUM" and graph.tensors[node.inputs[0]].dtype == np.int8:
                return f"{node}: LiteRT's reference int8 SUM reads the codes as uint8"
    return None


def dequantized_weights_in(float_model: bytes, dynamic_range_model: bytes) -> bytes | None:
    """``float_model`` with every float32 constant that the dynamic-range model holds as int8 (same tensor name,
    same size) overwritten by the int8 values times their scales (per channel or per tensor); the same file
    otherwise. None when no tensor matches."""
    import tflite

    out = bytearray(float_model)
    quantized, floating = tflite.Model.GetRootAsModel(dynamic_range_model, 0), tflite.Model.GetRootAsModel(out, 0)

    def by_name(model: Any) -> dict[str, Any]:
        g = model.Subgraphs(0)
        return {g.Tensors(i).Name().decode(): g.Tensors(i) for i in range(g.TensorsLength())}

    floats = by_name(floating)
    patched = 0
    for name, t in by_name(quantized).items():
        target = floats.get(name)
        data = quantized.Buffers(t.Buffer()).DataAsNumpy()
        if t.Type() != tflite.TensorType.INT8 or target is None or target.Type() != tflite.TensorType.FLOAT32 \
                or isinstance(data, int):
            continue
        values = data.view(np.int8).reshape(t.ShapeAsNumpy()).astype(np.float32)
        q = t.Quantization()
        scale = q.ScaleAsNumpy().astype(np.float32)
        if scale.size > 1:
            axes = [1] * values.ndim
            axes[q.QuantizedDimension()] = -1
            scale = scale.reshape(axes)
        weights = floating.Buffers(target.Buffer()).DataAsNumpy()
        if isinstance(weights, int) or weights.size != 4 * values.size:
            continue
        weights.view(np.float32)[:] = (values * scale).ravel()  # a view into ``out``
        patched += 1
    return bytes(out) if patched else None


def judge(kind: str, on_cpu: bool, ours: list[np.ndarray], refs: References) -> Verdict:
    """Our outputs against LiteRT's, by the model's kind ("float", "dynrange" or "int8"); see the module doc."""
    default = refs.default
    d_default = distances(ours, default)
    if kind == "float":
        if max(d_default, default=0.0) <= FLOAT_REL:
            return Verdict(True, max(d_default, default=0.0), fmt(d_default, default))
        # A deep float net can be so ill-conditioned that LiteRT's own kernel sets disagree by more than the bound
        # (pose_landmark_full: XNNPACK is 2.4e-4 from the reference kernels, bench/drift.py): then we pass when we
        # are no further than LiteRT's default path from its reference kernels.
        ref = refs.reference
        if ref is None:
            return Verdict(False, max(d_default), fmt(d_default, default))
        gap, d_ref = distances(default, ref), distances(ours, ref)
        ok = all(d <= max(FLOAT_REL, g) for d, g in zip(d_ref, gap))
        return Verdict(ok, max(d_ref), f"{fmt(d_ref, ref)} from LiteRT's reference kernels, where its default "
                                       f"kernels are {fmt(gap, ref)} from them")
    bounds = [QUANT_STEPS if r.dtype.kind in "iu" else QUANT_FLOAT_REL for r in default]
    if kind == "dynrange":
        if all(d <= b for d, b in zip(d_default, bounds)):
            return Verdict(True, max(d_default, default=0.0), fmt(d_default, default))
        # LiteRT's hybrid kernels quantize activations on the fly; we (like TFLite's GPU delegate) dequantize the
        # weights once and stay in float. Where the two part by more than the bound, we pass when we match LiteRT's
        # float kernels on the float32 twin carrying these dequantized weights (what we mean to compute), or else
        # when we are at least as close as LiteRT to the float32 model the weights were quantized from.
        exact = refs.dequantized_twin
        if exact is not None:
            d_exact = distances(ours, exact)
            if max(d_exact, default=0.0) <= FLOAT_REL:
                return Verdict(True, max(d_exact), f"{fmt(d_default, default)} from LiteRT's hybrid kernels; "
                                                   f"{fmt(d_exact, exact)} from LiteRT on the fp32 model with "
                                                   f"these weights dequantized")
        twin = refs.float_twin
        if twin is None:
            return Verdict(False, max(d_default), fmt(d_default, default))
        ours_off, litert_off = distances(ours, twin), distances(default, twin)
        ok = all(o <= lt * 1.05 + 1e-6 for o, lt in zip(ours_off, litert_off))
        return Verdict(ok, max(d_default), f"{fmt(d_default, default)} from LiteRT; from the fp32 model: ours "
                                           f"{fmt(ours_off, twin)}, LiteRT's {fmt(litert_off, twin)}")
    ref = refs.reference
    if on_cpu and ref is not None:  # our CPU path follows TFLite's reference kernels bit for bit
        same = all(np.array_equal(o, r) for o, r in zip(ours, ref)) and len(ours) == len(ref)
        return Verdict(same, max(d_default, default=0.0),
                       ("=ref" if same else f"{fmt(distances(ours, ref), ref)} from the reference kernels")
                       + f"; {fmt(d_default, default)} from LiteRT's default kernels")
    if all(d <= b for d, b in zip(d_default, bounds)):
        return Verdict(True, max(d_default, default=0.0), fmt(d_default, default))
    # LiteRT's kernel sets round differently and on deep int8 nets part by many steps; we pass when we are within
    # the bound of either, or no further from the nearer one than they are from each other.
    other, label = refs.second
    gap, d_other = distances(default, other), distances(ours, other)
    nearest = [min(a, b) for a, b in zip(d_default, d_other)]
    ok = all(n <= max(b, g) for n, b, g in zip(nearest, bounds, gap))
    text = (f"{fmt(d_default, default)} from LiteRT's default kernels, {fmt(d_other, other)} from its {label} "
            f"kernels, which are {fmt(gap, other)} apart")
    return Verdict(ok, max(nearest), text)


def node_errors(content: bytes, inputs: list[np.ndarray], it: gd.Interpreter, kernels: str) -> tuple[int, float]:
    """Each node of our CPU path fed the inputs LiteRT's ``kernels`` gave it: the largest step between its integer
    outputs and LiteRT's, and the largest relative error (max|ours - ref| / max|ref|) of its float32 ones. The
    op-level check of a network that end to end is chaotic (int8 rounding, or float error amplified by depth)."""
    from gpu_delegate.ops import get_op

    ref_it = litert_interpreter(content, kernels, preserve_all_tensors=True)
    run_interpreter(ref_it, inputs)
    graph = it.graph
    mine = {t.index: t.data for t in graph.tensors if t.data is not None}
    worst, worst_float = 0, 0.0
    for node in graph.nodes:
        op = get_op(node.op)
        if op is None or node.op in ("WHILE", "IF", "CALL_ONCE"):
            continue
        try:
            ins = [None if t < 0 else mine[t] if t in mine else ref_it.get_tensor(t) for t in node.inputs]
            refs = [ref_it.get_tensor(t) for t in node.outputs]
        except ValueError:  # a tensor LiteRT folded away
            continue
        for out, ref in zip(op.run_cpu(node, graph, ins), refs):
            out = np.asarray(out)
            if ref is None or out.shape != ref.shape or not ref.size:
                continue
            if ref.dtype.kind in "iu":
                worst = max(worst, int(np.max(np.abs(out.astype(np.int64) - ref.astype(np.int64)))))
            elif ref.dtype == np.float32 and np.max(np.abs(ref)) > 0:
                error = float(np.max(np.abs(out.astype(np.float64) - ref))) / float(np.max(np.abs(ref)))
                worst_float = max(worst_float, error)
    return worst, worst_float


def flatness(ref: list[np.ndarray]) -> float:
    """The smallest spread (std / max|x|) of LiteRT's float outputs: near 0 means an output that random weights
    have flattened to a constant, which would match almost anything, so the probes carry the comparison."""
    spreads = [float(np.std(r)) / float(np.max(np.abs(r))) for r in ref
               if r.dtype.kind == "f" and r.size > 1 and np.max(np.abs(r)) > 0]
    return min(spreads, default=1.0)


def probe_error(content: bytes, inputs: list[np.ndarray], it: gd.Interpreter) -> float:
    """Largest relative error (max|ours - ref| / max|ref|) over every float tensor of the main graph that both
    our CPU path and LiteRT's builtin kernels computed (LiteRT keeps them all when asked to)."""
    ref_it = litert_interpreter(content, "builtin", preserve_all_tensors=True)
    run_interpreter(ref_it, inputs)
    known = {t.index for t in it.graph.tensors if t.data is not None}
    read = {t for node in it.graph.nodes for t in node.inputs} | set(it.graph.outputs)
    worst = 0.0
    for node in it.graph.nodes:
        if all(t < 0 or t in known for t in node.inputs):  # computed from constants: LiteRT folds these away
            known.update(node.outputs)
            continue
        for t in node.outputs:
            if t not in read:  # a WHILE's pass-through loop variables nobody reads: LiteRT need not write them
                continue
            try:
                ref = ref_it.get_tensor(t)
                ours = it.get_tensor(t)
            except ValueError:  # a tensor LiteRT folded away or never allocated
                continue
            if ref is None or ref.dtype != np.float32 or ours.shape != ref.shape or not ref.size:
                continue
            scale = float(np.max(np.abs(ref)))
            if scale > 0:
                worst = max(worst, float(np.max(np.abs(ours.astype(np.float64) - ref))) / scale)
    return worst


def cpu_nodes(it: gd.Interpreter) -> str:
    reasons = it.cpu_reasons()
    seen: Counter[str] = Counter()
    why: dict[str, str] = {}
    for d in it.get_ops_details():
        if d["backend"] == "cpu":
            seen[d["op_name"]] += 1
            why.setdefault(d["op_name"], reasons.get(d["index"], "supported; its partition is past the limit"))
    return "; ".join(f"{op} x{n}: {why[op]}" if n > 1 else f"{op}: {why[op]}" for op, n in seen.items())


def gpu_share(it: gd.Interpreter) -> float:
    ran = [d for d in it.get_ops_details() if d["backend"] != "folded"]
    return sum(d["backend"] in ("cl", "gl") for d in ran) / max(1, len(ran))


def manifest_entry(path: Path) -> dict[str, Any]:
    manifest = path.parent / "manifest.json"
    entry: dict[str, Any] = json.loads(manifest.read_text()).get(path.stem, {}) if manifest.exists() else {}
    return entry


def model_kind(name: str) -> str:
    return "dynrange" if "_dynrange" in name else "int8" if "int8" in name else "float"


def check_model(path: Path, backends: list[str], delegates: dict[str, gd.SimpleDelegate] | None = None
                ) -> ModelResult:
    """``path`` on each backend ("cpu", "cl", "gl") against LiteRT; ``delegates`` may hand in a GPU delegate per
    backend (one shared delegate reuses the programs it compiled), else each backend gets a new one."""
    content = path.read_bytes()
    value_range = manifest_entry(path).get("input_range")
    kind = model_kind(path.stem)
    result = ModelResult(path.stem, len(gd.Interpreter(model_content=content).get_ops_details()))
    inputs = model_inputs(content, value_range=value_range)
    try:
        refs = References(path, content, inputs)
    except (RuntimeError, ValueError) as e:  # custom ops LiteRT's wheel lacks (MediaPipe's): our CPU path it is
        print(f"{path.stem}: LiteRT cannot run it ({str(e).splitlines()[0][:120]}); compared with our CPU path",
              file=sys.stderr)
        refs = References.__new__(References)
        refs.path, refs.content, refs.inputs = path, content, inputs
        refs.default = run_interpreter(gd.Interpreter(model_content=content), inputs)
        refs._reference = refs._twin = refs._dequantized_twin = None
        result.reference = "our CPU path"
    result.flatness = flatness(refs.default)
    for backend in backends:
        t0 = time.perf_counter()
        try:
            chosen = [] if backend == "cpu" else [(delegates or {}).get(backend) or gd.GpuDelegate(backend=backend)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                it = gd.Interpreter(model_content=content, experimental_delegates=chosen)
                outs = run_interpreter(it, inputs)
            result.cells[backend] = judge(kind, backend == "cpu", outs, refs)
            if backend == "cpu" and kind == "float" and result.reference == "LiteRT":
                err = probe_error(content, inputs, it)
                result.cells["cpu probes"] = Verdict(err <= FLOAT_REL, err, f"{err:.1e}")
                if err > FLOAT_REL:  # a deep net amplifies rounding differences: judge each node on LiteRT's inputs
                    node_err = node_errors(content, inputs, it, "builtin")[1]
                    result.cells["cpu probes"] = Verdict(node_err <= FLOAT_REL, err,
                                                         f"{err:.1e} end to end, {node_err:.1e} node by node")
            if backend == "cpu" and kind == "int8" and result.reference == "LiteRT":
                # node by node: bit-exact with the reference kernels, or within a step of the optimized ones
                kernels = "reference" if refs.reference is not None else "builtin"
                steps = node_errors(content, inputs, it, kernels)[0]
                result.cells["cpu nodes"] = Verdict(steps <= (kernels == "builtin"), steps,
                                                    f"{steps} steps from LiteRT's {kernels} kernels")
            if backend != "cpu":
                result.gpu_share[backend] = gpu_share(it)
                result.on_cpu[backend] = cpu_nodes(it)
        except Exception as e:
            result.cells[backend] = Verdict(False, np.inf, f"{type(e).__name__}: {str(e)[:200]}")
            traceback.print_exc(limit=3, file=sys.stderr)
        result.seconds[backend] = time.perf_counter() - t0
    if "bopen" in path.stem and "cpu" in backends and result.reference == "LiteRT":  # the open batch is open
        try:
            inputs2 = model_inputs(content, batch=2, seed=1, value_range=value_range)
            ours2 = run_interpreter(gd.Interpreter(model_content=content), inputs2)
            result.cells["cpu batch 2"] = judge(kind, True, ours2, References(path, content, inputs2))
        except Exception as e:
            result.cells["cpu batch 2"] = Verdict(False, np.inf, f"{type(e).__name__}: {str(e)[:200]}")
    return result


def table_cell(r: ModelResult, backend: str) -> str:
    """A backend's verdict; the CPU path's cell adds its node-by-node, probe and batch-2 checks."""
    parts = [(k, v) for k, v in r.cells.items() if k == backend or (backend == "cpu" and k.startswith("cpu "))]
    return "; ".join((f"{k[4:]}: " if k != backend else "") + ("ok " if v.ok else "**FAIL** ") + v.text
                     for k, v in parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--backends", default="cpu,cl,gl")
    ap.add_argument("--only", nargs="*", default=None, help="substrings of model names to keep")
    ap.add_argument("--json", type=Path, default=None, help="write every result here")
    args = ap.parse_args(argv)
    logging.getLogger("gpu_delegate").setLevel(logging.ERROR)  # the per-model CPU fallback lines: the table says it
    backends = args.backends.split(",")
    paths = sorted(args.directory.glob("*.tflite"))
    if args.only:
        paths = [p for p in paths if any(s in p.stem for s in args.only)]
    results = []
    for path in paths:
        try:
            r = check_model(path, backends)
        except Exception as e:  # a model that does not even load is a failure of every path, not of the run
            traceback.print_exc(limit=3, file=sys.stderr)
            r = ModelResult(path.stem, 0)
            r.cells = {b: Verdict(False, np.inf, f"{type(e).__name__}: {str(e)[:200]}") for b in backends}
        results.append(r)
        cells = " | ".join(f"{b}: {'ok' if v.ok else 'FAIL'} {v.text}" for b, v in r.cells.items())
        flat = f" | flat outputs ({r.flatness:.1e})" if r.flatness < 1e-3 else ""
        print(f"{r.name} ({r.ops} ops) | {cells} | share {r.gpu_share}{flat}", flush=True)
        for b, v in r.cells.items():
            if not v.ok:
                print(f"    {b}: {v.text}", flush=True)
    twins = {r.name: r for r in results}
    print("\n| model | ops | " + " | ".join(backends) + " | GPU share | what stayed on the CPU and why |")
    print("|---|---|" + "---|" * len(backends) + "---|---|")
    for r in results:
        share = " / ".join(f"{b} {100 * s:.0f}%" for b, s in r.gpu_share.items())
        twin = twins.get(r.name.replace("_bopen_", "_b1_"))
        if twin is not None and twin is not r and twin.gpu_share != r.gpu_share:
            share += f" (batch-1 twin: {' / '.join(f'{100 * s:.0f}%' for s in twin.gpu_share.values())})"
        cpu_text = next((t for t in r.on_cpu.values() if t), "")
        cells = " | ".join(table_cell(r, b) for b in backends)
        print(f"| {r.name} | {r.ops} | {cells} | {share} | {cpu_text} |")
    failed = [r.name for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)} of {len(results)} models pass" + (f"; failing: {failed}" if failed else ""))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1, default=float))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
