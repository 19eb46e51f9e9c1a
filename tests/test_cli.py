"""The built-in demo model, and the `gpu-delegate` command run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tomllib

import gpu_delegate as gd
from gpu_delegate import tools
from gpu_delegate.cli import GPU_BACKENDS
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


# -- benchmark: benchmark_model's flags, lines and profile -----------------------------------------------------

STAT = re.compile(r"count=(\d+) first=(\d+) curr=(\d+) min=(\d+) max=(\d+) avg=([-+.e\d]+) std=(\d+)")
TIMINGS = re.compile(r"Inference timings in us: Init: (\d+), First inference: (\d+), Warmup \(avg\): ([-+.e\d]+), "
                     r"Inference \(avg\): ([-+.e\d]+)")


def _stat_of(us: list[int]) -> tuple:
    """benchmark_model's Stat<int64> of microseconds, computed here with numpy: population std, truncated."""
    a = np.array(us, dtype=np.float64)
    return (len(us), us[0], us[-1], min(us), max(us), a.mean(), int(np.sqrt(int(np.mean(a * a) - a.mean() ** 2))))


def _profile_rows(text: str, section: str) -> list[list[str]]:
    """The Run Order rows of one profile section, split as scripts written for benchmark_model split them."""
    start = text.index(section)
    block = text[start:].split("============================== Run Order ==============================")[1]
    block = block.split("============================== Top by Computation Time")[0]
    return [line.split("\t")[1:] for line in block.strip().splitlines()[1:]]


def _litert_ops(content: bytes) -> list[str]:
    """The model's op names as LiteRT reads them (its reference kernels: no XNNPACK node appended)."""
    it = litert_interpreter(content, reference_kernels=True)
    it.allocate_tensors()
    return [d["op_name"] for d in it._get_ops_details()]


def test_benchmark_builtin_model_through_the_installed_script(tmp_path):
    if not SCRIPT.exists():
        pytest.skip(f"the gpu-delegate console script is not installed next to {sys.executable}")
    report, csv = tmp_path / "bench.json", tmp_path / "profile.csv"
    out = _ok(_cli("benchmark", *SMALL_DEMO, "--num_runs=4", "--min_secs=0", "--warmup_runs=2",
                   "--warmup_min_secs=0", "--num_threads=1", "--enable_op_profiling=true",
                   f"--output_json={report}", script=True))
    r = json.loads(report.read_text())
    stats = [tuple(float(v) for v in m.groups()) for m in STAT.finditer(out)]
    assert len(stats) == 3  # warm-up, regular runs, the profile's run totals
    assert stats[1] == pytest.approx(_stat_of(r["inference_us"]), rel=1e-5)
    assert stats[0] == pytest.approx(_stat_of(r["warmup_us"]), rel=1e-5)
    init, first, warm, avg = (float(v) for v in TIMINGS.search(out).groups())
    assert (init, first) == (r["init_us"], r["warmup_us"][0])
    assert warm == pytest.approx(np.mean(r["warmup_us"]), rel=1e-5)
    assert avg == pytest.approx(np.mean(r["inference_us"]), rel=1e-5)
    assert "INFO: Initialized session in " in out and "Memory footprint delta from the start of the tool (MB)" in out
    # the graph's Run Order lists every node once, typed as LiteRT names its ops
    rows = _profile_rows(out, "Operator-wise Profiling Info for Regular Benchmark Runs:")
    assert [row[0].strip() for row in rows] == _litert_ops(mobilenet_v2_model(96, 0.35))
    assert all(row[-1].endswith(f"]:{k}") for k, row in enumerate(rows))
    assert out.index("Inference timings in us") < out.index("Operator-wise Profiling Info")
    assert "nan" not in out.lower().replace("nanoseconds", "")
    assert not csv.exists()


def test_a_benchmark_model_script_runs_unchanged(tmp_path):
    """benchmark_model's flags as a script passes them; its summary lines read as such a script reads them."""
    model, csv, cache = tmp_path / "small.tflite", tmp_path / "ops.csv", tmp_path / "cache"
    model.write_bytes(_small_convnet())
    values = tmp_path / "x.bin"
    x = np.random.default_rng(1).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)
    values.write_bytes(x.tobytes())
    out = _ok(_cli("benchmark", f"--graph={model}", "--num_threads=1", "--warmup_runs=1", "--num_runs=3",
                   "--min_secs=0", "--max_secs=150", "--run_delay=-1", "--use_gpu=true", "--gpu_backend=cl",
                   "--gpu_precision_loss_allowed=false", "--gpu_experimental_enable_quant=true",
                   "--gpu_inference_for_sustained_speed=false", "--max_delegated_partitions=1",
                   "--input_layer=x", "--input_layer_shape=1,16,16,3", f"--input_layer_value_files=x:{values}",
                   "--report_peak_memory_footprint=true", "--memory_footprint_check_interval_ms=20",
                   "--enable_op_profiling=true", f"--profiling_output_csv_file={csv}", "--verbose=true",
                   f"--delegate_serialize_dir={cache}", "--delegate_serialize_token=small", "--use_xnnpack=false"))
    for line in ("INFO: Num threads: [1]", f"INFO: Graph: [{model}]", "INFO: Use gpu: [1]",
                 "INFO: Allow lower precision in gpu: [0]", "INFO: Input shapes: [1,16,16,3]",
                 "completely executed by the delegate", "Overall peak memory footprint (MB) via periodic monitoring:",
                 "- VmRSS              :"):
        assert line in out, line
    assert STAT.search(out.split("at least 3 iterations")[1]).group(1) == "3"
    assert TIMINGS.search(out)
    text = csv.read_text()
    assert text.startswith("Profiling Info for Benchmark Initialization:\n")
    delegate = text.split("Delegate internal: \n")[1].split("\n\n")[0].splitlines()[2:]
    # the input's layout conversion at the boundary, or on OpenCL the convolution reading it as the host wrote it
    assert delegate[0].startswith(("CONVERT_TO_PHWC4, ", "CONV_2D, ")), delegate[0]
    ops = _litert_ops(model.read_bytes())
    covered = []
    for row in delegate:
        kind, name = row.split(", ")[0], row.split(", ")[-1]
        if kind.startswith("CONVERT_"):
            continue
        nodes = [int(n) for n in name.rsplit(":", 1)[1].split("+")]
        assert kind == ops[nodes[0]] and name.split()[1] == "+".join(ops[n] for n in nodes), name
        covered += nodes
    assert sorted(covered) == list(range(len(ops)))
    assert any(cache.iterdir())


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_op_profile_lists_every_kernel_of_a_mobilenet_v2(backend, tmp_path):
    """Delegate internal: every kernel, named by its nodes and typed by their ops (LiteRT's names), timed."""
    report = tmp_path / "p.json"
    out = _ok(_cli("benchmark", *SMALL_DEMO, "--use_gpu=true", f"--gpu_backend={backend}", "--num_runs=2",
                   "--min_secs=0", "--warmup_min_secs=0", "--enable_op_profiling=true",
                   "--gpu_precision_loss_allowed=false", f"--output_json={report}", timeout=300))
    ops = _litert_ops(mobilenet_v2_model(96, 0.35))
    kernels = json.loads(report.read_text())["op_profile"]["delegate_internal"]
    covered = sorted(n for k in kernels for n in k["nodes"])
    assert covered == list(range(len(ops)))  # each node in exactly one kernel (ADDs fused into convolutions)
    for k in kernels:
        if k["nodes"]:
            assert k["type"] == ops[k["nodes"][0]] and k["name"].split()[1] == "+".join(ops[n] for n in k["nodes"])
    # OpenCL's profiling events work everywhere; llvmpipe's GL timer queries read ~0, a real GPU's do not
    clocks = {k["clock"] for k in kernels}
    assert clocks == {"device"} if backend == "cl" else len(clocks) == 1, clocks
    graph = json.loads(report.read_text())["op_profile"]["graph"]
    assert [g["type"] for g in graph] == [f"DELEGATE/{backend}"]
    # the kernels ran inside the partition: their time is part of its time
    assert 0 < sum(k["avg_ms"] for k in kernels) <= graph[0]["avg_ms"] * 1.05
    assert "Delegate internal: " in out and f"gpu_delegate: {backend} kernels (Delegate internal) timed by" in out


def test_benchmark_all_backends_side_by_side(tmp_path):
    model, report, chart = tmp_path / "small.tflite", tmp_path / "all.json", tmp_path / "all.png"
    model.write_bytes(_small_convnet())
    out = _ok(_cli("benchmark", f"--graph={model}", "--gpu_backend=all", "--num_runs=5", "--warmup_runs=1",
                   "--gpu_precision_loss_allowed=false", f"--output_json={report}", f"--plot={chart}",
                   timeout=300))
    r = json.loads(report.read_text())
    assert r["graph"] == str(model) and r["reference"] == "litert" and r["num_runs"] == 5
    rows = {row["backend"]: row for row in r["backends"]}
    assert set(rows) == {"litert", "cl", "gl", "cpu"}
    ref = litert_interpreter(model.read_bytes())
    assert rows["litert"]["ratio_to_reference"] == 1.0 and rows["litert"]["max_abs_error_vs_reference"] == 0.0
    for name, row in rows.items():
        assert row["init_ms"] > 0 and row["inference_ms"]["count"] == 5, name
        assert row["q1_ms"] <= row["median_ms"] <= row["q3_ms"], name
        assert row["median_ms"] == pytest.approx(float(np.median(row["runs_ms"]))), name
        assert row["max_abs_error_vs_reference"] < 1e-4, name  # fp32 on every backend, outputs in [0, 24]
    assert ref is not None
    for backend in GPU_BACKENDS:
        assert set(r["op_type_ms"][backend]) >= {"CONV_2D"}, r["op_type_ms"]
    assert "| op type | cl | gl | gl/cl |" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_benchmark_a_model_file_on_the_gpu_delegate(tmp_path):
    path = need_models() / "real/sine_float.tflite"
    out = _ok(_cli("benchmark", f"--graph={path}", "--use_gpu=1", "--gpu_backend=cl", "--num_runs=3",
                   "--min_secs=0", f"--delegate_serialize_dir={tmp_path}", "--delegate_serialize_token=sine"))
    assert f"INFO: Graph: [{path}]" in out and "gpu_delegate: nodes: 3 (" in out
    assert "gpu_delegate: backend: cl, device: " in out


def test_no_warm_up_prints_no_nan():
    out = _ok(_cli("benchmark", "--demo_input_size=32", "--demo_width=0.35", "--warmup_runs=0",
                   "--warmup_min_secs=0", "--num_runs=2", "--min_secs=0"))
    assert "nan" not in out.lower()
    assert "Warmup (avg): 0, " in out and "INFO: count=0\n" in out


def test_stat_line_follows_tflite_stat():
    rng = np.random.default_rng(3)
    for us in (rng.integers(1, 10**6, 37).tolist(), [5, 9], [123456789, 1, 2]):
        m = STAT.fullmatch(tools.stat_line(us))
        got = tuple(float(v) for v in m.groups())
        assert got == pytest.approx(_stat_of(us), rel=1e-5)
        assert m.group(6) == f"{np.mean(us):g}"  # C++'s default double output: 6 significant digits
    assert tools.stat_line([7, 7, 7]) == "count=3 curr=7(all same)"
    assert tools.stat_line([7]) == "count=1 curr=7"
    assert tools.stat_line([]) == "count=0"


def test_profile_tables_have_tflite_columns_and_cdf():
    stats = tools.ProfileStats()
    for run in range(2):
        for k, us in enumerate([300, 100, 600]):
            stats.add(f"[t{k}]:{k}", ["CONV_2D", "ADD", "CONV_2D"][k], us + run)
        stats.end_run(1000 + 3 * run)
    text = stats.output()
    run_order = text.split("Run Order ==============================\n")[1].split("\n\n")[0].splitlines()
    assert run_order[0] == ("\t             [node type]\t  [first]\t [avg ms]\t     [%]\t  [cdf%]\t  [mem KB]"
                            "\t[times called]\t[Name]")
    first = run_order[1].split("\t")
    pct = 601 * 100 / 2003
    assert first == ["", "CONV_2D".rjust(24), "0.300".rjust(9), f"{300.5 / 1e3:9.3f}", f"{pct:7.3f}%", f"{pct:7.3f}%",
                     "0.000".rjust(10), "1".rjust(9), "[t0]:0"]
    top = text.split("Top by Computation Time ==============================\n")[1].splitlines()
    assert [row.split("\t")[-1] for row in top[1:4]] == ["[t2]:2", "[t0]:0", "[t1]:1"]
    cdf = [float(row.split("\t")[5].rstrip("%")) for row in top[1:4]]
    assert cdf == pytest.approx(np.cumsum([601 + 600, 301 + 300, 101 + 100]) * 100 / 2003, abs=1e-3)
    by_type = text.split("Summary by node type ==============================\n")[1].splitlines()
    assert by_type[1].split("\t")[1:4] == ["                 CONV_2D", "        2", "     0.900"]
    assert "Timings (microseconds): count=2 first=1000 curr=1003 min=1000 max=1003 avg=1001.5 std=1" in text
    csv = stats.output(csv=True)
    assert f"\nCONV_2D, 0.3, 0.3005, {pct:g}%, {pct:g}%, 0, 1, [t0]:0\n" in csv


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


# -- diff: inference_diff's flags, lines and metrics proto -------------------------------------------------------

OUTPUT_DIFF = re.compile(r"INFO: OutputDiff\[(\d+)\]: avg_error=([-+.e\d]+), std_dev=([-+.e\d]+)")


def _metrics_class():
    """tflite.evaluation.EvaluationStageMetrics built from evaluation_stages.proto's field numbers with
    Google's protobuf runtime (an independent parser of what --output_file_path writes)."""
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    from google.protobuf import descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="evaluation_test.proto", package="tflite.evaluation",
                                            syntax="proto2")

    def message(name, fields):
        m = fd.message_type.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            m.field.add(name=field_name, number=number, type=kind, type_name=type_name,
                        label=f.LABEL_REPEATED if repeated else f.LABEL_OPTIONAL)

    message("LatencyMetrics", [("last_us", 1, f.TYPE_INT64, None, False), ("max_us", 2, f.TYPE_INT64, None, False),
                               ("min_us", 3, f.TYPE_INT64, None, False), ("sum_us", 4, f.TYPE_INT64, None, False),
                               ("avg_us", 5, f.TYPE_DOUBLE, None, False),
                               ("std_deviation_us", 6, f.TYPE_INT64, None, False)])
    message("AccuracyMetrics", [("max_value", 1, f.TYPE_FLOAT, None, False),
                                ("min_value", 2, f.TYPE_FLOAT, None, False),
                                ("avg_value", 3, f.TYPE_DOUBLE, None, False),
                                ("std_deviation", 4, f.TYPE_FLOAT, None, False)])
    message("InferenceProfilerMetrics", [
        ("reference_latency", 1, f.TYPE_MESSAGE, ".tflite.evaluation.LatencyMetrics", False),
        ("test_latency", 2, f.TYPE_MESSAGE, ".tflite.evaluation.LatencyMetrics", False),
        ("output_errors", 3, f.TYPE_MESSAGE, ".tflite.evaluation.AccuracyMetrics", True)])
    message("ProcessMetrics", [
        ("total_latency", 1, f.TYPE_MESSAGE, ".tflite.evaluation.LatencyMetrics", False),
        ("inference_profiler_metrics", 5, f.TYPE_MESSAGE, ".tflite.evaluation.InferenceProfilerMetrics", False)])
    message("EvaluationStageMetrics", [
        ("num_runs", 1, f.TYPE_INT32, None, False),
        ("process_metrics", 2, f.TYPE_MESSAGE, ".tflite.evaluation.ProcessMetrics", False)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tflite.evaluation.EvaluationStageMetrics"))


def test_diff_speaks_inference_diff(tmp_path):
    path = need_models() / "real/sine_float.tflite"
    proto, report = tmp_path / "inference_diff.txt", tmp_path / "diff.json"
    out = _ok(_cli("diff", f"--model_file={path}", "--delegate=gpu", "--gpu_backend=cl", "--num_runs=5",
                   "--gpu_precision_loss_allowed=false",
                   "--num_interpreter_threads=1", f"--output_file_path={proto}", f"--output_json={report}"))
    assert "INFO: Num evaluation runs: 5" in out and "gpu_delegate: reference: LiteRT" in out
    assert re.search(r"INFO: Reference run latency: avg=[-+.e\d]+\(us\), std_dev=\d+\(us\)", out)
    assert re.search(r"INFO: Test run latency: avg=[-+.e\d]+\(us\), std_dev=\d+\(us\)", out)
    (m,) = OUTPUT_DIFF.findall(out)
    r = json.loads(report.read_text())
    (o,) = r["outputs"]
    assert float(m[1]) == pytest.approx(o["avg_error"], rel=1e-5) and float(m[2]) == pytest.approx(o["std_dev"],
                                                                                                   rel=1e-5, abs=1e-12)
    assert 0 <= o["avg_error"] <= o["max_abs_error"] < 1e-5
    metrics = _metrics_class()()
    metrics.ParseFromString(proto.read_bytes())
    assert metrics.num_runs == 5
    p = metrics.process_metrics.inference_profiler_metrics
    assert len(p.output_errors) == 1 and p.output_errors[0].avg_value == pytest.approx(o["avg_error"], rel=1e-6)
    assert p.test_latency.avg_us == pytest.approx(r["test_latency_ms"]["avg"] * 1e3, rel=1e-6)
    assert p.reference_latency.min_us <= p.reference_latency.avg_us <= p.reference_latency.max_us
    assert p.test_latency.sum_us == pytest.approx(p.test_latency.avg_us * 5, abs=5)


def test_diff_keeps_the_positional_model():
    path = need_models() / "real/sine_float.tflite"
    out = _ok(_cli("diff", str(path), "--num_runs=2"))
    assert OUTPUT_DIFF.search(out) and "gpu_delegate: test: gpu_delegate CPU path" in out


# -- usage errors, versions, help ----------------------------------------------------------------------------

def _garbage(tmp_path: Path) -> Path:
    p = tmp_path / "garbage.tflite"
    p.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(range(256)) * 4)
    return p


USAGE, FAILURE = 2, 1
ERRORS = {
    "missing file": (["benchmark", "--graph=/no/such/model.tflite"], "/no/such/model.tflite", USAGE),
    "garbage file": (["diff", "--model_file={garbage}", "--num_runs=1"], "truncated or corrupt .tflite", FAILURE),
    "truncated file": (["benchmark", "--graph={truncated}"], "truncated or corrupt .tflite", FAILURE),
    "text file": (["inspect", "{text}"], "not a TFLite model", FAILURE),
    "bad boolean": (["benchmark", "--use_gpu=maybe"], "--use_gpu: expected true, false, 1 or 0, got 'maybe'", USAGE),
    "bad count": (["diff", "--num_runs=0"], "--num_runs: expected an integer >= 1, got 0", USAGE),
    "bad backend": (["benchmark", "--gpu_backend=vulkan"], "--gpu_backend: invalid choice: 'vulkan'", USAGE),
    "unknown flag": (["inspect", "--colour=blue"], "unrecognized arguments: --colour=blue", USAGE),
    "conflicting flags": (["benchmark", "--gpu_backend=all", "--use_gpu=false"], "--gpu_backend=all", USAGE),
    "no matplotlib": (["benchmark", "--plot=out.png"], "--plot needs matplotlib", USAGE),
    "json folder missing": (["benchmark", "--output_json=/no/such/dir/r.json"], "does not exist", USAGE),
    "plot is a folder": (["benchmark", "--gpu_backend=all", "--plot={tmp}"], "is a directory", USAGE),
    "csv without profiling": (["benchmark", "--profiling_output_csv_file={tmp}/p.csv"], "--enable_op_profiling",
                              USAGE),
    "diff without model": (["diff"], "--model_file is required", USAGE),
    "other delegate": (["diff", "--model_file={garbage}", "--delegate=nnapi"], "only its GPU delegate", USAGE),
    "input shapes": (["benchmark", "--graph={garbage}", "--input_layer=a,b", "--input_layer_shape=1,2"],
                     "must match the number of items in --input_layer", USAGE),
}


def test_user_errors_print_one_line_before_running(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a model\n" * 3)
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(mobilenet_v2_model(32, 0.35)[:5000])
    no_matplotlib = tmp_path / "shadow"
    (no_matplotlib / "matplotlib").mkdir(parents=True)
    (no_matplotlib / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    fill = {"garbage": str(_garbage(tmp_path)), "text": str(text), "truncated": str(truncated), "tmp": str(tmp_path)}

    def run(case):
        args, _, _ = ERRORS[case]
        env = {"PYTHONPATH": os.pathsep.join([str(no_matplotlib), os.environ.get("PYTHONPATH", "")])} \
            if case == "no matplotlib" else None
        return _cli(*[a.format(**fill) for a in args], env=env, timeout=60)

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(ERRORS, pool.map(run, ERRORS)))
    for case, result in results.items():
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert result.returncode == ERRORS[case][2], f"{case}: exit {result.returncode}\n{result.stderr}"
        assert len(lines) == 1 and "Traceback" not in result.stderr, f"{case}: stderr is\n{result.stderr}"
        assert lines[0].startswith("gpu-delegate: error: "), f"{case}: {lines[0]}"
        assert ERRORS[case][1] in lines[0], f"{case}: {lines[0]}"
        if ERRORS[case][2] == USAGE:
            assert "Running benchmark" not in result.stdout, case  # refused before anything ran


def test_version_and_help_with_defaults():
    from gpu_delegate.version import __version__

    assert _ok(_cli("--version")).strip() == f"gpu-delegate {__version__}"
    out = _ok(_cli("benchmark", "--help"))
    blocks = {m.group(1): " ".join(m.group(2).split())
              for m in re.finditer(r"^  (--\w+)(.*?)(?=^  -|^\S|\Z)", out, re.M | re.S)}
    for flag, default in (("--num_runs", "50"), ("--warmup_runs", "1"), ("--max_secs", "150.0"),
                          ("--min_secs", "1.0"), ("--gpu_precision_loss_allowed", "True"), ("--use_gpu", "False"),
                          ("--num_threads", "-1"), ("--max_delegated_partitions", "0"),
                          ("--gpu_experimental_enable_quant", "True"), ("--warmup_min_secs", "0.5")):
        assert blocks[flag].endswith(f"(default: {default})"), (flag, blocks[flag])
    for flag in ("--input_layer", "--input_layer_shape", "--input_layer_value_range", "--report_peak_memory_footprint",
                 "--profiling_output_csv_file", "--verbose", "--gpu_inference_for_sustained_speed", "--plot",
                 "--output_json", "--delegate_serialize_dir", "--enable_op_profiling"):
        assert flag in out, flag
    diff = _ok(_cli("diff", "--help"))
    for flag in ("--model_file", "--delegate", "--num_interpreter_threads", "--output_file_path"):
        assert flag in diff, flag


def test_lowest_declared_versions_are_what_bench_installs():
    """bench/lowest_versions.py installs, for each requirement, a version its specifier admits."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    from bench.lowest_versions import lowest_pins

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    declared = {Requirement(r).name: Requirement(r) for r in
                [*project["dependencies"], *project["optional-dependencies"]["litert"],
                 *project["optional-dependencies"]["plot"]]}
    pins = {Requirement(p).name: p for p in lowest_pins()}
    assert set(pins) == set(declared)
    for name, pin in pins.items():
        version = pin.split("==")[1].rstrip(".*").rstrip(".")
        assert Version(version) in declared[name].specifier, pin
    assert Version("2.1.2") not in declared["ai-edge-litert"].specifier  # refused: see gpu_delegate/litert.py


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
    mb = ModelBuilder()
    x = mb.input("x", [1, 8])
    r = mb.tensor("r", [1, 8])
    mb.op("RELU", [x], [r])
    y = mb.tensor("y", [1, 8])
    mb.op("ADD", [r, x], [y])
    mb.output(y)
    delegate = _NumpyRelu()
    profiler = tools.OpProfiler([delegate])
    it = gd.Interpreter(model_content=mb.build(), experimental_delegates=[delegate])
    it.allocate_tensors()
    it.set_tensor(x, np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8))
    profiler.attach(it)
    for _ in range(3):
        it.invoke()
        profiler.end_run()
    profiler.detach(it)
    it.invoke()  # detached: not counted
    rows = profiler.graph.rows()
    assert [(row["type"], row["name"], row["times_called"]) for row in rows] == \
        [("DELEGATE/numpy-relu", "[r]:0", 1), ("ADD", "[y]:1", 1)]
    assert all(len(d.us) == 3 for d in profiler.graph.details.values()) and len(profiler.graph.run_totals) == 3
    assert profiler.kernels.details == {}  # a delegate without kernel timings: no Delegate internal table
    text = profiler.report()
    assert "Operator-wise Profiling Info for Regular Benchmark Runs:" in text and "Delegate internal" not in text
    np.testing.assert_allclose(it.get_tensor(y), np.maximum(it.get_tensor(x), 0) + it.get_tensor(x))
