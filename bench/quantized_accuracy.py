"""The quantized and reduced-precision MobileNets on the GPU delegate against LiteRT: how many nodes the GPU
takes and how close the results come.

For MobileNet V1 and V2 in their int8, fp16 (float16 weights) and dynrange (int8 weights, float
activations) flavours, on each backend asked for:
  nodes on GPU      nodes the interpreter puts on the backend / all nodes (get_ops_details, key "backend")
  int8 outputs      % of output values identical to LiteRT's int8 output, largest difference in quantization steps
  float outputs     largest absolute error of the output against LiteRT's
  probes            a few intermediate tensors (the outputs of the first node and of the nodes 1/8, 1/4, 1/2 and 3/4 of
                    the way through, and the input of the last node), made extra outputs of the delegated partition and
                    read back through the delegate's kernel interface (init / prepare / invoke), as
                    tests/test_gpu_models.py does (the model's outputs come from that same run); each is compared with
                    the tensor LiteRT's BUILTIN kernels computed for the same model
                    (experimental_preserve_all_tensors=True), as max|ours - ref| / max|ref|. For dynrange models also
                    against LiteRT running the float32 model (mobilenet_vN_224_fp32), matching tensors by name (a pick
                    the fp32 model lacks gives way to the next node's output that both models have, and the report says
                    so), next to LiteRT's own dynrange result against the same. For int8 models the probes are
                    dequantized and compared the same way, and counted in identical values and steps, for information
                    only: one step of difference (rounding a float result against TFLite's fixed-point one) moves the
                    next layers' values across rounding boundaries, more with each layer, as it does between LiteRT's
                    own kernel sets; and in a tensor that spans a few steps, one step is a large relative error. To show
                    that drift, the int8 probes are also compared with our numba CPU path (no delegate, fixed-point),
                    and that path with LiteRT.

Why the probes: the shared MobileNets carry random weights, so by the last layers the float activations have
decayed to ~1e-18 and every softmax output is ~0.001: the final outputs would match almost anything. The
probes, each relative to its own magnitude, are where a real error would show. The int8 models are weaker
evidence still: their activations reach the zero point everywhere from about halfway on (V1 from node 14 of
31, V2 from node 49 of 65; the probe table's "max abs ref" shows 0 there), so their outputs are one constant
and only the early probes compare values that vary.

The reference outputs are LiteRT's default interpreter (its AUTO op resolver, XNNPACK where it applies: what a
user gets); the probes come from its BUILTIN kernels, which keep every tensor. Every model gets the same seeded
random inputs on both sides (normal floats; int8 inputs uniform over the whole range). Each model runs ONE invoke
per backend: llvmpipe compiles a GL program at its first dispatch and runs slowly, and the int8 models have one
program per layer (their fake-quant constants differ), so they compile the most. One GpuDelegate per backend
serves all models, so a program compiled for an earlier model is reused (the fp16 and dynrange models lower to the
same kernels: the dynrange ones, run after the fp16 ones, compile almost nothing). Wall time per model:
interpreter construction + partition preparation (planning, compiling) + that invoke; LiteRT's reference runs
and our CPU path's are not counted. The exit status is 2 when a row misses the requirement.

    python bench/quantized_accuracy.py [--models DIR] [--backends cl,gl] [--only NAME,...] [--seed 0]
                                       [--all_tensors] [--fresh_caches] [--output_json F]

--all_tensors probes the output of every node instead of a few: the dynrange models' worst tensors lie between
the default probes (measured: ours against LiteRT's dynrange up to 2.2% (V1) / 2.4% (V2) over all tensors,
1.6% / 1.8% over the default probes; LiteRT's own dynrange against its fp32 up to 3.0% / 2.9%). Each probe is
an output of the partition, so the plan fuses less than in normal use.

--fresh_caches points PoCL's, pyopencl's and Mesa's caches at an empty temp dir first, so the compile times are
those of a first start on a clean machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ROOT.parent / "shared" / "models"
FLAVOURS = ("fp16", "dynrange", "int8")  # fp16 and dynrange first: they share the fp32 kernels
VERSIONS = (1, 2)
# the requirement: int8 outputs >= 99% identical and at most 2 steps apart; float outputs within 2e-2
MIN_IDENTICAL = 0.99
MAX_STEPS = 2
FLOAT_TOL = 2e-2
# probes: the outputs of the nodes at these fractions of the partition, and the input of its last node
PROBE_AT = (0.0, 0.125, 0.25, 0.5, 0.75)


# -- inputs and LiteRT's references --------------------------------------------------------------------------------

def litert_run(content: bytes, inputs: list[np.ndarray], keep_all: bool) -> tuple[list[np.ndarray], dict]:
    """(outputs, {tensor name: (index, value)}) from LiteRT: keep_all runs its BUILTIN kernels with every tensor
    kept, otherwise its default interpreter (and the dict is empty)."""
    from ai_edge_litert import interpreter as litert

    if keep_all:
        with warnings.catch_warnings():  # "preserve_all_tensors is intended for debugging": so it is here
            warnings.simplefilter("ignore", UserWarning)
            it = litert.Interpreter(model_content=content, experimental_preserve_all_tensors=True,
                                    experimental_op_resolver_type=litert.OpResolverType.BUILTIN)
    else:
        it = litert.Interpreter(model_content=content)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    outputs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    tensors = {}
    if keep_all:
        for d in it.get_tensor_details():
            try:
                tensors[d["name"]] = (d["index"], it.get_tensor(d["index"]))
            except ValueError:  # a tensor LiteRT holds no data for
                pass
    return outputs, tensors


def cpu_tensors(content: bytes, inputs: list[np.ndarray]) -> dict:
    """{tensor name: (index, value)} of every tensor our numba CPU path (no delegate) computed: a second
    fixed-point implementation, to set the int8 probes' drift against. (LiteRT's reference kernels,
    BUILTIN_REF, would be the natural one, but LiteRT 2.3.0 aborts the process allocating them for these int8
    models.)"""
    import gpu_delegate as gd

    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return {t.name: (t.index, it.get_tensor(t.index)) for t in it.graph.tensors if t.data is None}


# -- comparing -------------------------------------------------------------------------------------------------------

def as_real(x: np.ndarray, tensor) -> np.ndarray:
    """A tensor's values as real numbers (float64): quantized ones dequantized with its scale and zero point."""
    if x.dtype.kind in "iu" and tensor.quant is not None:
        scale, zero = tensor.quant.scalar()
        return (x.astype(np.float64) - zero) * scale
    return x.astype(np.float64)


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max|ours - ref| / max|ref| (both real-valued); 0 when both are zero."""
    if ours.shape != ref.shape:
        raise ValueError(f"shape {ours.shape} vs reference {ref.shape}")
    if not ref.size:
        return 0.0
    err = float(np.max(np.abs(ours - ref)))
    scale = float(np.max(np.abs(ref)))
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def quant_match(ours: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """(fraction of values identical, largest difference in quantization steps)."""
    if ours.shape != ref.shape or ours.dtype != ref.dtype:
        raise ValueError(f"{ours.dtype}{ours.shape} vs reference {ref.dtype}{ref.shape}")
    diff = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
    return (float(np.mean(diff == 0)), int(diff.max())) if diff.size else (1.0, 0)


def max_abs_error(ours: np.ndarray, ref: np.ndarray) -> float:
    if ours.shape != ref.shape:
        raise ValueError(f"shape {ours.shape} vs reference {ref.shape}")
    return float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0


def probes(graph, nodes: list[int], outputs: list[int], usable=None,
           every: bool = False) -> tuple[list[int], list[str]]:
    """Tensors inside the partition to read back: the outputs of the first node and of the nodes an eighth, a
    quarter, half and three quarters of the way through, and the input of the last node (float32, or 8-bit
    quantized). The first two are there for the int8 models, whose activations are all at the zero point
    from about halfway on (random weights): only the early tensors hold values that a wrong result would change.

    usable(tensor) -> bool narrows the choice (a dynrange probe must exist in the fp32 model too): a pick that
    fails it gives way to the next node's output that passes. every: the output of every node instead.
    Returns (probes, names of the picks given up)."""
    def readable(t: int) -> bool:
        tensor = graph.tensors[t]
        return tensor.dtype == np.float32 or (tensor.dtype in (np.int8, np.uint8) and tensor.quant is not None
                                              and tensor.quant.scale.size == 1)

    def ok(t: int) -> bool:
        return t not in outputs and readable(t) and (usable is None or usable(graph.tensors[t]))

    computed = [n for n in nodes if any(graph.tensors[t].data is None for t in graph.nodes[n].inputs if t >= 0)]
    picks, given_up = [], []
    if every:
        for n in computed:
            t = graph.nodes[n].outputs[0]
            if ok(t):
                picks.append(t)
            elif t not in outputs:
                given_up.append(graph.tensors[t].name)
        return picks, given_up
    for f in PROBE_AT:
        start = int(len(computed) * f)
        first = graph.nodes[computed[start]].outputs[0]
        found = next((t for n in computed[start:] for t in graph.nodes[n].outputs[:1] if ok(t)), None)
        if found != first:
            given_up.append(graph.tensors[first].name)
        if found is not None:
            picks.append(found)
    for t in graph.nodes[computed[-1]].inputs:
        if t >= 0 and graph.tensors[t].data is None:
            if ok(t):
                picks.append(t)
            else:
                given_up.append(graph.tensors[t].name)
    return list(dict.fromkeys(picks)), given_up


def short_name(name: str) -> str:
    """'mobilenet_1.00_224_1/conv_pw_6_relu_1/Relu6;...' -> 'conv_pw_6_relu_1/Relu6'."""
    first = name.split(";")[0]
    return first.split("/", 1)[1] if "/" in first else first


# -- one model on one backend ---------------------------------------------------------------------------------------

def run_ours(content: bytes, delegate, backend: str, inputs: list[np.ndarray], usable=None,
             every: bool = False) -> dict:
    """Ours on one backend: nodes placed, outputs and probe values (chosen with usable and every: see probes),
    timings.
    Where the model is not one partition covering every node, the interpreter runs it as it is (outputs only, no
    probes)."""
    import gpu_delegate as gd

    t0 = time.perf_counter()
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate])
    ops = it.get_ops_details()
    placed = sum(op["backend"] == backend for op in ops)
    graph = it.graph
    partitions = [s.partition for s in it._steps if hasattr(s, "partition")]
    out_ids = [d["index"] for d in it.get_output_details()]
    in_ids = [d["index"] for d in it.get_input_details()]
    row = {"nodes_on_gpu": placed, "nodes": len(ops),
           "off_gpu": [f"{op['index']} {op['op_name']}" for op in ops if op["backend"] != backend],
           "cpu_reasons": {str(k): v for k, v in it.cpu_reasons().items()}}
    probe_ids: list[int] = []
    if len(partitions) == 1 and placed == len(ops):
        (partition,) = partitions
        probe_ids, row["probes_given_up"] = probes(graph, partition.nodes, partition.outputs, usable, every)
        kernel = delegate.create_kernel()
        kernel.init(graph, partition.nodes, partition.inputs, partition.outputs + probe_ids)
        values = dict(zip(in_ids, inputs))
        t1 = time.perf_counter()
        kernel.prepare(values)
        t2 = time.perf_counter()
        try:
            kernel.invoke(values)
            t3 = time.perf_counter()
            row["compile_s"] = kernel.runner.timings.get("compile_s")
        finally:
            if kernel.runner is not None:
                kernel.runner.close()
        outputs = [values[t] for t in out_ids]
        probe_values = {t: values[t] for t in probe_ids}
    else:
        it.allocate_tensors()
        for t, x in zip(in_ids, inputs):
            it.set_tensor(t, x)
        t1 = t2 = time.perf_counter()
        it.invoke()
        t3 = time.perf_counter()
        outputs = [it.get_tensor(t) for t in out_ids]
        probe_values = {}
    row.update(construct_s=t1 - t0, prepare_s=t2 - t1, invoke_s=t3 - t2, wall_s=t3 - t0)
    del it
    return {"row": row, "graph": graph, "outputs": outputs, "probes": probe_values}


def compare(name: str, flavour: str, backend: str, ours: dict, ref: dict, ref_fp32: dict | None) -> dict:
    """The row of the table for one model on one backend."""
    row = dict(ours["row"], model=name, backend=backend, flavour=flavour)
    graph = ours["graph"]
    outputs = []
    for k, (o, r, rb) in enumerate(zip(ours["outputs"], ref["outputs"], ref["builtin_outputs"], strict=True)):
        entry = {"output": k}
        if r.dtype.kind in "iu":
            entry["identical"], entry["max_steps"] = quant_match(o, r)
            entry["identical_vs_builtin"], entry["max_steps_vs_builtin"] = quant_match(o, rb)
        else:
            entry["max_abs_error"] = max_abs_error(o, r)
            entry["max_abs_error_vs_builtin"] = max_abs_error(o, rb)
            entry["ref_max_abs"] = float(np.max(np.abs(r))) if r.size else 0.0
            if ref_fp32 is not None:
                entry["max_abs_error_vs_fp32"] = max_abs_error(o, ref_fp32["outputs"][k])
        outputs.append(entry)
    row["outputs"] = outputs
    probe_rows = []
    for t, value in ours["probes"].items():
        tensor = graph.tensors[t]
        p = {"tensor": tensor.name, "short": short_name(tensor.name), "shape": list(value.shape),
             "dtype": str(value.dtype)}
        if tensor.name in ref["tensors"]:
            r = ref["tensors"][tensor.name][1]
            p["ref_max_abs"] = float(np.max(np.abs(as_real(r, tensor)))) if r.size else 0.0
            p["rel_error"] = relative_error(as_real(value, tensor), as_real(r, tensor))
            if value.dtype.kind in "iu":
                p["identical"], p["max_steps"] = quant_match(value, r)
                if tensor.name in ref.get("cpu_tensors", {}):  # calibration: two fixed-point implementations
                    rc = ref["cpu_tensors"][tensor.name][1]
                    p["identical_vs_cpu"], p["max_steps_vs_cpu"] = quant_match(value, rc)
                    p["cpu_vs_litert_identical"], p["cpu_vs_litert_max_steps"] = quant_match(rc, r)
        if ref_fp32 is not None:
            if tensor.name in ref_fp32["tensors"]:
                r32 = ref_fp32["tensors"][tensor.name][1]
                p["rel_error_vs_fp32"] = relative_error(as_real(value, tensor), r32.astype(np.float64))
                if tensor.name in ref["tensors"]:  # calibration: LiteRT's own hybrid kernels against fp32
                    p["litert_rel_error_vs_fp32"] = relative_error(
                        as_real(ref["tensors"][tensor.name][1], tensor), r32.astype(np.float64))
            else:
                p["absent_in_fp32"] = True
        probe_rows.append(p)
    row["probes"] = probe_rows
    return row


# -- report ----------------------------------------------------------------------------------------------------------

def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def worst(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def verdict(row: dict) -> str:
    """The requirement on this row: fully delegated, and int8 outputs >= 99% identical and <= 2 steps apart, or
    float outputs within 2e-2."""
    why = []
    if row["nodes_on_gpu"] != row["nodes"]:
        why.append("not fully delegated")
    for o in row["outputs"]:
        if "identical" in o:
            if o["identical"] < MIN_IDENTICAL:
                why.append(f"output {o['output']} {o['identical']:.2%} identical")
            if o["max_steps"] > MAX_STEPS:
                why.append(f"output {o['output']} {o['max_steps']} steps")
        elif o["max_abs_error"] > FLOAT_TOL:
            why.append(f"output {o['output']} off by {o['max_abs_error']:.3g}")
    return "FAIL: " + ", ".join(why) if why else "pass"


def quant_pair(p: dict, identical: str, steps: str) -> str:
    return f"{p[identical]:.2%} / {p[steps]}" if identical in p else "-"


def probe_steps(probe_rows: list[dict]) -> str:
    """'lowest % identical / most steps apart' over the int8 probes whose reference is not all zero point."""
    live = [p for p in probe_rows if "identical" in p and p.get("ref_max_abs")]
    if not live:
        return "-"
    return f"{min(p['identical'] for p in live):.2%} / {max(p['max_steps'] for p in live)} ({len(live)} live)"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def report(rows: list[dict]) -> str:
    main_rows, probe_rows, time_rows = [], [], []
    for r in rows:
        outs = r["outputs"]
        quant = [o for o in outs if "identical" in o]
        floats = [o for o in outs if "max_abs_error" in o]
        main_rows.append([
            r["model"], r["backend"], f"{r['nodes_on_gpu']}/{r['nodes']}",
            f"{min(o['identical'] for o in quant):.2%}" if quant else "-",
            str(max(o["max_steps"] for o in quant)) if quant else "-",
            fmt(worst([o["max_abs_error"] for o in floats])),
            fmt(worst([o.get("max_abs_error_vs_fp32") for o in floats])),
            fmt(worst([p.get("rel_error") for p in r["probes"]])) + (" (info)" if quant and r["probes"] else ""),
            fmt(worst([p.get("rel_error_vs_fp32") for p in r["probes"]])),
            probe_steps(r["probes"]), f"{r['wall_s']:.1f}", verdict(r)])
        for p in r["probes"]:
            probe_rows.append([r["model"], r["backend"], p["short"], "x".join(map(str, p["shape"])), p["dtype"],
                               fmt(p.get("ref_max_abs")), fmt(p.get("rel_error")),
                               quant_pair(p, "identical", "max_steps"),
                               quant_pair(p, "identical_vs_cpu", "max_steps_vs_cpu"),
                               quant_pair(p, "cpu_vs_litert_identical", "cpu_vs_litert_max_steps"),
                               "absent" if p.get("absent_in_fp32") else fmt(p.get("rel_error_vs_fp32")),
                               fmt(p.get("litert_rel_error_vs_fp32"))])
        time_rows.append([r["backend"], r["model"], f"{r['construct_s']:.2f}", f"{r['prepare_s']:.2f}",
                          fmt(r.get("compile_s")), f"{r['invoke_s']:.2f}", f"{r['wall_s']:.2f}"])
    by_backend: dict[str, float] = {}
    for r in rows:
        by_backend[r["backend"]] = by_backend.get(r["backend"], 0.0) + r["wall_s"]
    time_rows.sort(key=lambda x: x[0])
    text = [
        "Outputs against LiteRT's default interpreter, probes against its BUILTIN kernels on the same model (and, "
        "for dynrange, on the float32 model); probe errors are max|ours - ref| / max|ref|, the worst probe shown. "
        f"Requirement: fully delegated; int8 >= {MIN_IDENTICAL:.0%} identical and <= {MAX_STEPS} steps; float "
        f"outputs within {FLOAT_TOL:g}.", "",
        table(["model", "backend", "nodes on GPU", "int8 out identical", "int8 out max steps", "out max abs err",
               "out max abs err vs fp32", "probes max rel err vs LiteRT", "probes max rel err vs LiteRT fp32",
               "int8 probes min identical / max steps (info)", "wall s", "requirement (outputs)"], main_rows),
        "", "Each probe. int8: the rel err on dequantized values; identical / max steps on the int8 values, against "
        "LiteRT's BUILTIN kernels, against our numba CPU path (no delegate), and between those two, to show how "
        "far two fixed-point implementations drift apart. dynrange: the last column is LiteRT's own hybrid "
        "kernels against its fp32 model, for scale.", "",
        table(["model", "backend", "probe", "shape", "dtype", "max abs ref", "rel err vs LiteRT",
               "int8: identical / max steps vs LiteRT", "int8: same vs our CPU path",
               "int8: our CPU path vs LiteRT", "rel err vs LiteRT fp32", "LiteRT itself vs LiteRT fp32"],
              probe_rows),
        "", "Wall time per model, one invoke (s): construct = Interpreter + placement; prepare = plan + compile "
        "(compile = the runner's compile_s); invoke = the first invoke (drivers compile lazily there too).", "",
        table(["backend", "model", "construct s", "prepare s", "compile s", "invoke s", "total s"], time_rows),
        "", "Total per backend: " + ", ".join(f"{b} {s:.1f} s" for b, s in by_backend.items()),
    ]
    matched = [f"{r['model']} on {r['backend']} {sum('rel_error_vs_fp32' in p for p in r['probes'])}/"
               f"{len(r['probes'])}" + (f" (absent there, so not probed or replaced by a later node's output: "
                                        f"{', '.join(map(short_name, r['probes_given_up']))})"
                                        if r.get("probes_given_up") else "")
               for r in rows if r["flavour"] == "dynrange"]
    if matched:
        text[3:3] = ["", "dynrange probes found by name (same shape) in the fp32 model: " + ", ".join(matched)]
    return "\n".join(text)


# -- main ------------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="the shared models folder")
    ap.add_argument("--backends", default="cl,gl", help="GPU backends to run, comma-separated")
    ap.add_argument("--only", type=lambda s: set(s.split(",")), default=None,
                    help="comma-separated model names (file stems, e.g. mobilenet_v2_224_int8)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--fresh_caches", action="store_true",
                    help="empty PoCL, pyopencl and Mesa shader caches (a temp dir) for cold compile times")
    ap.add_argument("--all_tensors", action="store_true",
                    help="probe every node's output, not a few (the plan then fuses less; still one invoke)")
    ap.add_argument("--output_json", help="also write the results here")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    folder = args.models / "mobilenet" if (args.models / "mobilenet").is_dir() else args.models
    names = [f"mobilenet_v{v}_224_{f}" for f in FLAVOURS for v in VERSIONS]
    names = [n for n in names if not args.only or n in args.only]
    missing = [n for n in names if not (folder / f"{n}.tflite").is_file()]
    if missing:
        print(f"missing in {folder}: {', '.join(missing)} (the shared models live in ../shared/models)",
              file=sys.stderr)
        return 1
    tmp = None
    if args.fresh_caches:  # before anything loads PoCL or Mesa
        tmp = tempfile.TemporaryDirectory(prefix="quantized_accuracy_")
        os.environ.update(POCL_CACHE_DIR=f"{tmp.name}/pocl", MESA_SHADER_CACHE_DIR=f"{tmp.name}/mesa",
                          PYOPENCL_CACHE_DIR=f"{tmp.name}/pyopencl", XDG_CACHE_HOME=f"{tmp.name}/xdg")
    import gpu_delegate as gd
    from gpu_delegate import tools

    started = time.perf_counter()
    load = {"start": os.getloadavg()}
    delegates, devices = {}, {}
    for b in backends:
        delegates[b] = gd.GpuDelegate(backend=b)
        info = delegates[b].backend.device_info()
        devices[b] = f"{info.get('name', '?')} ({info.get('device_type', '?')}), {info.get('version', '')}"
        print(f"- {b}: {devices[b]}")
    print()
    rows = []
    fp32_refs: dict[int, dict] = {}
    for name in names:
        content = (folder / f"{name}.tflite").read_bytes()
        flavour = name.rsplit("_", 1)[1]
        version = int(name.split("_")[1][1:])
        rng = np.random.default_rng(args.seed)
        inputs = [tools.random_input(d["shape"], d["dtype"], rng)
                  for d in gd.Interpreter(model_content=content).get_input_details()]
        outputs, _ = litert_run(content, inputs, keep_all=False)
        builtin_outputs, tensors = litert_run(content, inputs, keep_all=True)
        ref = {"outputs": outputs, "builtin_outputs": builtin_outputs, "tensors": tensors}
        if flavour == "int8":
            ref["cpu_tensors"] = cpu_tensors(content, inputs)
        ref_fp32 = None
        if flavour == "dynrange":
            fp32_path = folder / f"mobilenet_v{version}_224_fp32.tflite"
            if fp32_path.is_file():
                if version not in fp32_refs:
                    fp32_outputs, fp32_tensors = litert_run(fp32_path.read_bytes(), inputs, keep_all=True)
                    fp32_refs[version] = {"outputs": fp32_outputs, "tensors": fp32_tensors}
                ref_fp32 = fp32_refs[version]
            else:
                print(f"{name}: {fp32_path} is absent, no float32 reference", file=sys.stderr)
        for b in backends:
            print(f"{name} on {b} ...", file=sys.stderr, flush=True)
            usable = None
            if ref_fp32 is not None:
                def usable(tensor, fp32=ref_fp32["tensors"]) -> bool:  # in the fp32 model, shaped the same
                    return tensor.name in fp32 and tuple(fp32[tensor.name][1].shape) == tuple(tensor.shape)
            ours = run_ours(content, delegates[b], b, inputs, usable, args.all_tensors)
            if ours["row"].get("probes_given_up"):
                print(f"{name}: probes absent (or shaped otherwise) in the fp32 model, the next usable tensors "
                      f"taken instead: {ours['row']['probes_given_up']}", file=sys.stderr)
            row = compare(name, flavour, b, ours, ref, ref_fp32)
            print(f"  {row['nodes_on_gpu']}/{row['nodes']} nodes on {b}, {row['wall_s']:.1f} s, {verdict(row)}",
                  file=sys.stderr, flush=True)
            rows.append(row)
    load["end"] = os.getloadavg()
    total = time.perf_counter() - started
    print(report(rows))
    print(f"\nWhole run {total:.1f} s (LiteRT references included); load average {load['start'][0]:.2f} at the "
          f"start, {load['end'][0]:.2f} at the end" + (" ; caches: fresh temp dir" if args.fresh_caches else ""))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps({"devices": devices, "seed": args.seed,
                                                      "fresh_caches": args.fresh_caches, "load_average": load,
                                                      "total_s": total, "results": rows}, indent=2) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 0 if all(verdict(r) == "pass" for r in rows) else 2


if __name__ == "__main__":
    sys.exit(main())
