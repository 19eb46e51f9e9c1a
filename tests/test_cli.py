"""The built-in demo model, and the `gpu-delegate` command run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite import ModelBuilder, read_model
from gpu_delegate.tflite.demo_model import make_divisible, mobilenet_v2_model

from .reference import assert_float_close, litert_interpreter, need_models, random_inputs

SMALL_DEMO = ["--demo_input_size=96", "--demo_width=0.35"]
SCRIPT = Path(sys.executable).with_name("gpu-delegate")


# -- the demo model ------------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:.*experimental_preserve_all_tensors")
def test_demo_model_runs_as_litert_runs_it():
    content = mobilenet_v2_model(96, 0.35, seed=3)
    x = random_inputs(content, seed=1)[0]
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    ref = litert.Interpreter(model_content=content, experimental_preserve_all_tensors=True, num_threads=1)
    ours = gd.Interpreter(model_content=content)
    for it in (ref, ours):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
    out = ours.get_output_details()[0]["index"]
    logits = next(t.index for t in ours.graph.tensors if t.name.endswith("predictions/BiasAdd"))
    assert_float_close(ours.get_tensor(out), ref.get_tensor(out), what="softmax output")
    assert_float_close(ours.get_tensor(logits), ref.get_tensor(logits), what="logits")
    # Sane activations: the logits neither vanish nor explode with random He-initialised weights.
    spread = float(np.std(ref.get_tensor(logits)))
    assert 0.1 < spread < 100, spread
    assert ours.get_signature_list() == {"serving_default": {"inputs": ["input"], "outputs": ["output_0"]}}


def test_demo_model_has_the_converted_mobilenet_v2_structure():
    """At 224 / width 1.0 the demo is node for node what the TFLite converter made of Keras' MobileNetV2."""
    real = read_model((need_models() / "mobilenet/mobilenet_v2_224_fp32.tflite").read_bytes()).main
    demo = read_model(mobilenet_v2_model()).main
    assert len(demo.nodes) == len(real.nodes)
    keys = ("padding", "stride_w", "stride_h", "fused_activation_function", "depth_multiplier", "keep_dims")
    for d, r in zip(demo.nodes, real.nodes):
        assert d.op == r.op, f"{d} vs {r}"
        assert [demo.tensors[t].shape for t in d.outputs] == [real.tensors[t].shape for t in r.outputs], \
            str(d)
        for k in range(2):
            if k < len(r.inputs):
                assert demo.tensors[d.inputs[k]].shape == real.tensors[r.inputs[k]].shape, f"{d} input {k}"
        shared = [k for k in keys if k in r.attrs]
        assert {k: d.attrs[k] for k in shared} == {k: r.attrs[k] for k in shared}, str(d)
    assert demo.tensors[demo.inputs[0]].shape == (1, 224, 224, 3)


def test_make_divisible_follows_keras():
    # keras.applications.MobileNetV2 channel counts at width 0.35 and 1.4
    widths = [make_divisible(int(c * 0.35)) for c in (16, 24, 32, 64, 96, 160, 320)]
    assert widths == [8, 8, 16, 24, 32, 56, 112]
    assert [make_divisible(c * 1.4) for c in (32, 1280)] == [48, 1792]


def test_demo_model_rejects_bad_arguments():
    with pytest.raises(ValueError, match="input size"):
        mobilenet_v2_model(4)
    with pytest.raises(ValueError, match="width"):
        mobilenet_v2_model(96, 0.0)


# -- the command ---------------------------------------------------------------------------------------------

def _cli(*args: str, script: bool = False, env: dict | None = None, timeout: float = 120):
    cmd = [str(SCRIPT)] if script else [sys.executable, "-m", "gpu_delegate"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_benchmark_builtin_model_through_the_installed_script(tmp_path):
    if not SCRIPT.exists():
        pytest.skip(f"the gpu-delegate console script is not installed next to {sys.executable}")
    report = tmp_path / "bench.json"
    out = _ok(_cli("benchmark", *SMALL_DEMO, "--num_runs=4", "--warmup_runs=2", "--num_threads=1",
                   "--enable_op_profiling=true", f"--output_json={report}", script=True))
    assert "built-in MobileNetV2 (input 96x96x3, width 0.35" in out
    for line in ("Initialized session in", "First inference:", "Inference timings in us: Init:",
                 "Peak memory footprint", "Summary by node type:", "Nodes: 65 (cpu: 65)"):
        assert line in out, line
    r = json.loads(report.read_text())
    assert r["nodes_by_backend"] == {"cpu": 65} and r["backend"] == "cpu" and r["num_threads"] == 1
    s = r["inference_ms"]
    assert s["count"] == len(r["runs_ms"]) == 4 and len(r["warmup_ms"]) == 2
    assert 0 < s["min"] <= s["median"] <= s["max"] and s["min"] <= s["avg"] <= s["max"]
    assert s["median"] == pytest.approx(float(np.median(r["runs_ms"])))
    assert r["peak_memory_mb"] > 50 and r["init_ms"] > 0 and r["first_inference_ms"] > 0
    profiled = sorted(row["node"] for row in r["op_profile"])
    assert profiled == list(range(65))
    assert sum(row["avg_ms"] for row in r["op_profile"]) <= s["avg"] * 1.5


def _small_convnet() -> bytes:
    """Few kernels to compile: the side-by-side run builds every program for cl and for gl."""
    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    x = mb.input("x", [1, 16, 16, 3])
    c = mb.tensor("c", [1, 8, 8, 8])
    mb.op("CONV_2D", [x, mb.const("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
                      mb.const("b", rng.standard_normal(8).astype(np.float32))], [c],
          padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU6")
    y = mb.tensor("y", [1, 8, 8, 8])
    mb.op("ADD", [c, c], [y])
    mb.output(y)
    return mb.build()


def test_benchmark_all_backends_side_by_side(tmp_path):
    model, report, chart = tmp_path / "small.tflite", tmp_path / "all.json", tmp_path / "all.png"
    model.write_bytes(_small_convnet())
    out = _ok(_cli("benchmark", f"--graph={model}", "--gpu_backend=all", "--num_runs=5", "--warmup_runs=1",
                   f"--output_json={report}", f"--plot={chart}"))
    assert "| backend | median ms | ratio to cpu | max abs error vs cpu |" in out
    rows = {row["backend"]: row for row in json.loads(report.read_text())["backends"]}
    assert set(rows) == {"cl", "gl", "cpu"}
    assert rows["cpu"]["ratio_to_cpu"] == 1.0 and rows["cpu"]["max_abs_error_vs_cpu"] == 0.0
    for name, row in rows.items():
        if "unavailable" not in row:
            assert row["inference_ms"]["count"] == 5, name
            assert row["max_abs_error_vs_cpu"] < 1e-4, name  # fp32 on every backend, outputs in [0, 12]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_benchmark_a_model_file_on_the_gpu_delegate(tmp_path):
    path = need_models() / "real/sine_float.tflite"
    out = _ok(_cli("benchmark", f"--graph={path}", "--use_gpu=1", "--gpu_backend=cl", "--num_runs=3",
                   f"--delegate_serialize_dir={tmp_path}", "--delegate_serialize_token=sine"))
    assert f"Graph: {path}" in out and "Delegate: GpuDelegate(" in out and "Nodes: 3 (" in out


def test_inspect_a_shared_model():
    path = need_models() / "mobilenet/mobilenet_v2_224_fp32.tflite"
    out = _ok(_cli("inspect", str(path)))
    ref = litert_interpreter(path.read_bytes()).get_input_details()[0]
    assert f"| {ref['index']} | {ref['name']} | {ref['shape'].tolist()} | float32 | - |" in out
    assert "Nodes (65):" in out and "| 64 | SOFTMAX | [1, 1000] | cpu |" in out
    total = float(out.split("Total: ")[1].split(" M MACs")[0])
    assert total == pytest.approx(300.8, rel=0.01)  # ../shared/models/README.md: 300.8 M MACs per image


def test_inspect_placement_on_a_gpu_backend():
    out = _ok(_cli("inspect", "--gpu_backend=cl", *SMALL_DEMO))
    assert "Placement: " in out and "delegated partition" in out


def test_diff_against_litert(tmp_path):
    path = need_models() / "real/sine_float.tflite"
    report = tmp_path / "diff.json"
    out = _ok(_cli("diff", str(path), "--num_runs=5", f"--output_json={report}"))
    assert "Reference: LiteRT" in out and "Num evaluation runs: 5" in out
    r = json.loads(report.read_text())
    assert r["num_runs"] == 5 and r["reference_latency_ms"]["count"] == 5 == r["test_latency_ms"]["count"]
    (o,) = r["outputs"]
    assert 0 <= o["avg_error"] <= o["max_abs_error"] < 1e-5


def _garbage(tmp_path: Path) -> Path:
    p = tmp_path / "garbage.tflite"
    p.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(range(256)) * 4)
    return p


ERRORS = {
    "missing file": (["benchmark", "--graph=/no/such/model.tflite"], "/no/such/model.tflite"),
    "garbage file": (["diff", "{garbage}", "--num_runs=1"], "garbage.tflite"),
    "text file": (["inspect", "{text}"], "not a TFLite model"),
    "bad boolean": (["benchmark", "--use_gpu=maybe"], "--use_gpu: expected true, false, 1 or 0, got 'maybe'"),
    "bad count": (["benchmark", "--num_runs=0"], "--num_runs: expected an integer >= 1, got 0"),
    "bad backend": (["benchmark", "--gpu_backend=vulkan"], "--gpu_backend: invalid choice: 'vulkan'"),
    "unknown flag": (["inspect", "--colour=blue"], "unrecognized arguments: --colour=blue"),
    "conflicting flags": (["benchmark", "--gpu_backend=all", "--use_gpu=false"], "--gpu_backend=all"),
    "no matplotlib": (["benchmark", "--plot=out.png"], "--plot needs matplotlib"),
}


def test_user_errors_print_one_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a model\n" * 3)
    no_matplotlib = tmp_path / "shadow"
    (no_matplotlib / "matplotlib").mkdir(parents=True)
    (no_matplotlib / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    fill = {"garbage": str(_garbage(tmp_path)), "text": str(text)}

    def run(case):
        args, _ = ERRORS[case]
        env = {"PYTHONPATH": os.pathsep.join([str(no_matplotlib), os.environ.get("PYTHONPATH", "")])} \
            if case == "no matplotlib" else None
        return _cli(*[a.format(**fill) for a in args], env=env, timeout=60)

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(ERRORS, pool.map(run, ERRORS)))
    for case, result in results.items():
        lines = [ln for ln in result.stderr.splitlines() if ln.strip() and not ln.startswith("INFO:")]
        assert result.returncode != 0, f"{case}: exit 0"
        assert len(lines) == 1 and "Traceback" not in result.stderr, f"{case}: stderr is\n{result.stderr}"
        assert lines[0].startswith("gpu-delegate: error: "), f"{case}: {lines[0]}"
        assert ERRORS[case][1] in lines[0], f"{case}: {lines[0]}"


def test_help_lists_the_benchmark_model_flags():
    out = _ok(_cli("benchmark", "--help"))
    for flag in ("--graph", "--use_gpu", "--gpu_backend", "--num_runs", "--warmup_runs", "--num_threads",
                 "--gpu_precision_loss_allowed", "--delegate_serialize_dir", "--delegate_serialize_token",
                 "--enable_op_profiling", "--output_json", "--plot", "--demo_input_size", "--demo_width"):
        assert flag in out, flag


class _NumpyRelu(gd.SimpleDelegate):
    """A delegate in plain numpy that takes the RELU nodes: enough to see partitions in a profile."""

    name = "numpy-relu"

    def is_node_supported(self, node, graph):
        return node.op == "RELU" or f"{node.op} is not RELU"

    def create_kernel(self):
        return _ReluKernel()


class _ReluKernel(gd.DelegateKernel):
    def init(self, graph, node_indices, input_ids, output_ids):
        self.nodes = [graph.nodes[i] for i in node_indices]

    def invoke(self, tensors):
        for node in self.nodes:
            tensors[node.outputs[0]] = np.maximum(tensors[node.inputs[0]], 0)


def test_op_profiler_times_cpu_nodes_and_delegated_partitions():
    """The interpreter's profiling hook reports each CPU node and each delegated partition as one step."""
    from gpu_delegate.tools import OpProfiler

    mb = ModelBuilder()
    x = mb.input("x", [1, 8])
    r = mb.tensor("r", [1, 8])
    mb.op("RELU", [x], [r])
    y = mb.tensor("y", [1, 8])
    mb.op("ADD", [r, x], [y])
    mb.output(y)
    delegate = _NumpyRelu()
    profiler = OpProfiler()
    it = gd.Interpreter(model_content=mb.build(), experimental_delegates=[delegate])
    it.allocate_tensors()
    it.set_tensor(x, np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8))
    profiler.attach(it)
    for _ in range(3):
        it.invoke()
    profiler.detach(it)
    it.invoke()  # detached: not counted
    text, rows = profiler.report(3)
    assert [(row["node"], row["op"], row["backend"]) for row in rows] == \
        [(0, "DELEGATE (1 nodes)", "numpy-relu"), (1, "ADD", "cpu")]
    assert all(len(ms) == 3 for ms in profiler.ms.values())
    assert "DELEGATE/numpy-relu" in text
    np.testing.assert_allclose(it.get_tensor(y), np.maximum(it.get_tensor(x), 0) + it.get_tensor(x))
