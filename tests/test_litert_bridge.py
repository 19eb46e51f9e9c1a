"""SimpleDelegates (GpuDelegate included) inside LiteRT's own Interpreter, through gpu_delegate/litert.py,
compared with LiteRT alone."""

from __future__ import annotations

import gc
import importlib.util
import re
import weakref
from ctypes import addressof, c_int, c_void_p, sizeof
from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate import litert as bridge
from gpu_delegate.gpu import GpuKernel
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, assert_matches, need_models, random_inputs, run

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "add_sub_delegate.py"


def _example():
    spec = importlib.util.spec_from_file_location("add_sub_delegate", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ex = _example()


def _taken(delegate) -> list[int]:
    """The nodes the delegate took in the latest LiteRT interpreter it was given to."""
    return sorted(i for p in bridge.bridge_of(delegate).last_partitions for i in p)


def _ours_taken(content: bytes, delegate) -> list[int]:
    """The nodes gpu_delegate.Interpreter hands the same delegate (planning only, nothing runs)."""
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate])
    return [d["index"] for d in it.get_ops_details() if d["backend"] != "cpu"]


def _add_sub_model(batch_signature: bool = False) -> bytes:
    """ADD/SUB nodes the example takes, around a MUL and a broadcasting SUB it leaves to LiteRT. With a
    batch-resizable input, the constant the first ADD reads is computed (x * x) instead, so that it keeps
    x's shape: a [1, 4, 5] constant would broadcast once the batch grows."""
    sig = [-1, 4, 5] if batch_signature else None
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 5], shape_signature=sig)
    t = {k: mb.tensor(k, [1, 4, 5], shape_signature=sig) for k in ("c", "h", "h2", "m", "y1", "y2", "y3")}
    if batch_signature:
        mb.op("MUL", [x, x], [t["c"]])
        c = t["c"]
    else:
        c = mb.const("k", np.linspace(-3, 3, 20, dtype=np.float32).reshape(1, 4, 5))
    row = mb.const("row", np.arange(5, dtype=np.float32))
    mb.op("ADD", [x, c], [t["h"]])
    mb.op("SUB", [t["h"], x], [t["h2"]], fused_activation_function="RELU6")
    mb.op("MUL", [t["h2"], t["h"]], [t["m"]])
    mb.op("ADD", [t["m"], x], [t["y1"]])
    mb.op("SUB", [t["y1"], row], [t["y2"]])
    mb.op("ADD", [t["y1"], t["y1"]], [t["y3"]], fused_activation_function="RELU_N1_TO_1")
    mb.output(t["y1"], t["y2"], t["y3"])
    return mb.build()


ADD_SUB = _add_sub_model()


class _Recording(ex.AddSubDelegate):
    """The example delegate, remembering its kernels (weakly), the nodes each was created for and the input
    shapes each one was prepared for."""

    def __init__(self, max_partitions: int = 0):
        self.max_partitions = max_partitions
        self.kernels: list[weakref.ref] = []
        self.partitions: list[list[int]] = []
        self.prepared: list[tuple] = []

    def create_kernel(self):
        owner = self

        class Kernel(ex.AddSubKernel):
            def init(self, graph, node_indices, input_ids, output_ids):
                owner.partitions.append(list(node_indices))
                super().init(graph, node_indices, input_ids, output_ids)

            def prepare(self, tensors):
                owner.prepared.append(tuple(sorted((t, a.shape) for t, a in tensors.items())))

        k = Kernel()
        self.kernels.append(weakref.ref(k))
        return k


# -- the numpy example ---------------------------------------------------------------------------------------

def test_example_add_sub_delegate_inside_litert_matches_litert_alone():
    x = [np.random.default_rng(1).standard_normal((1, 4, 5)).astype(np.float32) * 3]
    delegate = _Recording()
    ours = run(litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[delegate]), x)
    ref = run(litert.Interpreter(model_content=ADD_SUB), x)
    # our policy's partitions, and the kernels LiteRT actually created after re-partitioning them
    assert bridge.bridge_of(delegate).last_partitions == delegate.partitions == [[0, 1], [3, 5]]
    assert _taken(delegate) == _ours_taken(ADD_SUB, ex.AddSubDelegate()) == [0, 1, 3, 5]
    reasons = bridge.bridge_of(delegate).last_reasons
    assert "MUL is neither ADD nor SUB" in reasons[2] and "differ in shape" in reasons[4]
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert_float_close(o, r, what=f"output {k}")
    # the same delegate in gpu_delegate's interpreter
    assert_matches(run(gd.Interpreter(model_content=ADD_SUB, experimental_delegates=[ex.AddSubDelegate()]), x), ref)


def test_partition_limit_follows_our_policy():
    """max_partitions keeps the partitions partition_weight finds heaviest, in both interpreters."""
    class Weighted(_Recording):
        def partition_weight(self, nodes, graph):
            return float(sum(n.op == "ADD" for n in nodes))

    delegate = Weighted(max_partitions=1)
    litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[delegate])
    assert delegate.partitions == [[3, 5]]
    assert _ours_taken(ADD_SUB, Weighted(max_partitions=1)) == [3, 5]


def test_example_script_runs(capsys):
    ex.main()
    out = capsys.readouterr().out
    assert "[[0, 1], [3]]" in out and "difference| between LiteRT alone and LiteRT + AddSubDelegate: 0\n" in out


# -- errors become RuntimeError, never a crash -----------------------------------------------------------------

class _Failing(ex.AddSubDelegate):
    def __init__(self, where: str):
        self.where = where

    def is_node_supported(self, node, graph):
        if self.where == "is_node_supported":
            raise KeyError("no verdict")
        return super().is_node_supported(node, graph)

    def create_kernel(self):
        where = self.where

        class Kernel(ex.AddSubKernel):
            def init(self, *args):
                if where == "init":
                    raise ValueError("cannot init 100%")
                super().init(*args)

            def prepare(self, tensors):
                if where == "prepare":
                    raise MemoryError("out of device memory")

            def invoke(self, tensors):
                if where == "invoke":
                    raise ZeroDivisionError("kernel bug %s %d")
                super().invoke(tensors)

        return Kernel()


@pytest.mark.parametrize("where, message", [("is_node_supported", "KeyError: 'no verdict'"),
                                            ("init", "ValueError: cannot init 100%"),
                                            ("prepare", "MemoryError: out of device memory")])
def test_exception_while_delegating_becomes_runtime_error(where, message):
    with pytest.raises(RuntimeError, match="AddSubDelegate") as e:
        litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[_Failing(where)])
    assert message in str(e.value)


def test_exception_in_invoke_becomes_runtime_error():
    it = litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[_Failing("invoke")])
    it.allocate_tensors()
    with pytest.raises(RuntimeError, match=r"AddSubDelegate invoke: ZeroDivisionError: kernel bug %s %d"):
        it.invoke()


@pytest.mark.parametrize("write, error", [("float64", None), ("shape", "wrote shape [20] to output tensor"),
                                          ("nothing", "did not write output tensor"),
                                          ("skipped", "did not write output tensor")])
def test_kernel_outputs_are_checked(write, error):
    """Outputs are copied into LiteRT's buffers: cast within their kind, never reshaped, never left unset."""
    class Odd(ex.AddSubDelegate):
        def create_kernel(self):
            class Kernel(ex.AddSubKernel):
                def invoke(self, tensors):
                    if write == "skipped":  # computes nothing: LiteRT's buffers must not pass for a result
                        return
                    super().invoke(tensors)
                    for t in self.outputs:
                        if write == "float64":
                            tensors[t] = tensors[t].astype(np.float64)
                        elif write == "shape":
                            tensors[t] = tensors[t].reshape(-1)
                        else:
                            del tensors[t]

            return Kernel()

    x = [np.full((1, 4, 5), 0.5, np.float32)]
    it = litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[Odd()])
    if error is None:
        for o, r in zip(run(it, x), run(litert.Interpreter(model_content=ADD_SUB), x)):
            assert_float_close(o, r)
    else:
        with pytest.raises(RuntimeError, match=re.escape(error)):
            run(it, x)


# -- resize, lifetime ------------------------------------------------------------------------------------------

def test_resize_reprepares_and_matches_litert():
    content = _add_sub_model(batch_signature=True)
    delegate = _Recording()
    it = litert.Interpreter(model_content=content, experimental_delegates=[delegate])
    b = bridge.bridge_of(delegate)
    rng = np.random.default_rng(2)
    for batch in (1, 3, 2):
        x = [rng.standard_normal((batch, 4, 5)).astype(np.float32)]
        ours = run(it, x)
        assert delegate.prepared[-1][0][1] == (batch, 4, 5)
        assert b.live_kernels == len(b.last_partitions) == 2  # the kernels of the previous shape were freed
        for o, r in zip(ours, run(litert.Interpreter(model_content=content), x)):
            assert_float_close(o, r)


def test_deleting_the_interpreter_frees_the_kernels():
    delegate = _Recording()
    it = litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[delegate])
    run(it, [np.ones((1, 4, 5), np.float32)])
    assert bridge.bridge_of(delegate).live_kernels == 2 and any(k() is not None for k in delegate.kernels)
    del it
    gc.collect()
    assert bridge.bridge_of(delegate).live_kernels == 0
    assert all(k() is None for k in delegate.kernels)


def test_a_delegate_dropped_before_its_interpreter_stays_alive_while_needed():
    """The caller empties the list it passed and drops the delegate: LiteRT still holds pointers into it, so it must
    live until that interpreter goes (which frees its kernels through the delegate's callbacks), then be
    released. Run in a child process: the failure this guards against is a segfault."""
    code = """
import gc, weakref, numpy as np
from ai_edge_litert.interpreter import Interpreter
from tests.reference import run
from tests.test_litert_bridge import ADD_SUB, ex
delegates = [ex.AddSubDelegate()]  # two partitions: two kernels LiteRT frees one after the other
it = Interpreter(model_content=ADD_SUB, experimental_delegates=delegates)
alive = weakref.ref(delegates[0])
delegates.clear(); gc.collect()
x = np.random.default_rng(0).standard_normal((1, 4, 5)).astype(np.float32)
for o, r in zip(run(it, [x]), run(Interpreter(model_content=ADD_SUB), [x])):
    assert np.allclose(o, r, atol=1e-6)
del it; gc.collect()
assert alive() is None, "still alive after its interpreter went"
print("ok")
"""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


# -- the ABI guard --------------------------------------------------------------------------------------------

def test_abi_guard_refuses_an_unknown_litert_version(monkeypatch):
    delegates = (ex.AddSubDelegate(), _used_delegate())
    monkeypatch.setattr(bridge, "interpreter_version", lambda distribution="ai-edge-litert": "9.9.9")
    for delegate in delegates:
        with pytest.raises(bridge.LiteRtAbiError, match=r"ai-edge-litert 9\.9\.9.*2\.3\.0"):
            litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[delegate])


def test_abi_guard_refuses_the_release_that_overwrites_tflite(monkeypatch):
    """ai-edge-litert 2.1.2 ships an empty top-level 'tflite' package over the schema package models are read with."""
    monkeypatch.setattr(bridge, "interpreter_version", lambda distribution="ai-edge-litert": "2.1.2")
    with pytest.raises(bridge.LiteRtAbiError, match=r"refuses ai-edge-litert 2\.1\.2: .*'tflite'"):
        litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[ex.AddSubDelegate()])


def test_abi_guard_refuses_other_tflite_interpreters():
    """TensorFlow's and tflite-runtime's interpreters embed other TFLite versions: the bridge names them."""
    delegate = ex.AddSubDelegate()
    for module in ("tensorflow.lite.python.interpreter", "tflite_runtime.interpreter"):
        caller = {"__name__": module, "delegate": delegate}
        with pytest.raises(bridge.LiteRtAbiError, match=module.split(".")[0].replace("_", "-")):
            exec("delegate._get_native_delegate_pointer()", caller)


def _used_delegate():
    d = ex.AddSubDelegate()
    litert.Interpreter(model_content=ADD_SUB, experimental_delegates=[d])
    return d


@pytest.mark.parametrize("field, value, what", [("type", 4242, "type code 4242"),
                                                ("allocation_type", -3, "allocation type -3"),
                                                ("bytes", 7, "7 bytes for dims [2, 3]")])
def test_context_check_rejects_a_tensor_of_another_layout(field, value, what):
    dims = (c_int * 3)(2, 2, 3)
    t = bridge.TensorC(type=1, dims=addressof(dims), bytes=24, allocation_type=2)
    bridge._check_tensor(5, t, "ai-edge-litert 2.3.0")  # a plausible float32 [2, 3] tensor passes
    setattr(t, field, value)
    with pytest.raises(bridge.LiteRtAbiError, match=rf"ai-edge-litert 2\.3\.0: tensor 5 .*{re.escape(what)}"):
        bridge._check_tensor(5, t, "ai-edge-litert 2.3.0")
    if sizeof(c_void_p) == 8:  # the sizes TFLite 2.22's structs have on 64-bit platforms
        assert sizeof(bridge.TensorC) == 112 and sizeof(bridge.RegistrationC) == 88


# -- op parameters read from builtin_data ---------------------------------------------------------------------

class _Recorder(gd.SimpleDelegate):
    name = "Recorder"

    def is_node_supported(self, node, graph):
        self.attrs = getattr(self, "attrs", {})
        self.attrs[node.index] = (node.op, dict(node.attrs))
        return False


def _options_model() -> tuple[bytes, list[tuple[str, dict]]]:
    """Ops with non-default options, and the attrs (schema numbering) those options must read back as."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 9, 9, 4])
    expect: list[tuple[str, dict]] = []

    def op(name, inputs, shape, options, attrs, dtype=np.float32):
        y = mb.tensor(f"t{len(expect)}", shape, dtype)
        mb.op(name, inputs, [y], **options)
        expect.append((name, attrs))
        return y

    w = mb.const("w", np.ones((6, 3, 3, 4), np.float32))
    a = op("CONV_2D", [x, w, mb.const("wb", np.zeros(6, np.float32))], [1, 4, 3, 6],
           dict(padding="VALID", stride_w=3, stride_h=2, fused_activation_function="RELU6", dilation_w_factor=1,
                dilation_h_factor=1),
           dict(padding=1, stride_w=3, stride_h=2, fused_activation_function=3, dilation_w_factor=1,
                dilation_h_factor=1))
    dw = mb.const("dw", np.ones((1, 3, 3, 12), np.float32))
    b = op("DEPTHWISE_CONV_2D", [a, dw, mb.const("dwb", np.zeros(12, np.float32))], [1, 4, 3, 12],
           dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=2, fused_activation_function="RELU",
                dilation_w_factor=2, dilation_h_factor=1),
           dict(padding=0, stride_w=1, stride_h=1, depth_multiplier=2, fused_activation_function=1,
                dilation_w_factor=2, dilation_h_factor=1))
    c = op("AVERAGE_POOL_2D", [b], [1, 2, 3, 12],
           dict(padding="VALID", stride_w=1, stride_h=2, filter_width=1, filter_height=2,
                fused_activation_function="RELU_N1_TO_1"),
           dict(padding=1, stride_w=1, stride_h=2, filter_width=1, filter_height=2, fused_activation_function=2))
    d = op("ADD", [c, c], [1, 2, 3, 12], dict(fused_activation_function="RELU"),
           dict(fused_activation_function=1, pot_scale_int16=True))
    e = op("CONCATENATION", [c, d], [1, 2, 3, 24], dict(axis=-1, fused_activation_function="NONE"),
           dict(axis=-1, fused_activation_function=0))
    shape = mb.const("shape", np.array([6, 24], np.int32))
    f = op("RESHAPE", [e, shape], [6, 24], dict(new_shape=[6, 24]), dict(new_shape=[6, 24]))
    g = op("SOFTMAX", [f], [6, 24], dict(beta=0.5), dict(beta=0.5))
    fw = mb.const("fw", np.ones((5, 24), np.float32))
    h = op("FULLY_CONNECTED", [g, fw, -1], [6, 5], dict(fused_activation_function="RELU", keep_num_dims=True),
           dict(fused_activation_function=1, weights_format=0, keep_num_dims=True, asymmetric_quantize_inputs=False))
    axes = mb.const("axes", np.array([1], np.int32))
    op("MEAN", [h, axes], [6, 1], dict(keep_dims=True), dict(keep_dims=True))
    size = mb.const("size", np.array([5, 7], np.int32))
    r = op("RESIZE_BILINEAR", [x, size], [1, 5, 7, 4], dict(align_corners=False, half_pixel_centers=True),
           dict(align_corners=False, half_pixel_centers=True))
    begin, end, strides = (mb.const(n, np.array(v, np.int32)) for n, v in
                           (("begin", [0, 1, 0, 0]), ("end", [1, 4, 7, 4]), ("strides", [1, 1, 2, 1])))
    s = op("STRIDED_SLICE", [r, begin, end, strides], [3, 4, 4],
           dict(begin_mask=12, end_mask=4, shrink_axis_mask=1), dict(begin_mask=12, end_mask=4, ellipsis_mask=0,
                                                                      new_axis_mask=0, shrink_axis_mask=1,
                                                                      offset=False))
    op("LEAKY_RELU", [s], [3, 4, 4], dict(alpha=0.25), dict(alpha=0.25))
    sq_in = op("SPACE_TO_DEPTH", [x], [1, 3, 3, 36], dict(block_size=3), dict(block_size=3))
    op("GELU", [sq_in], [1, 3, 3, 36], dict(approximate=True), dict(approximate=True))
    pads = mb.const("pads", np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32))
    op("MIRROR_PAD", [x, pads], [1, 12, 12, 4], dict(mode="SYMMETRIC"), dict(mode=1))
    op("PACK", [x, x], [2, 1, 9, 9, 4], dict(values_count=2, axis=0), dict(values_count=2, axis=0))
    one = mb.tensor("one", [1, 9, 1, 4])
    mb.op("MEAN", [x, mb.const("ax2", np.array([2], np.int32))], [one], keep_dims=True)
    expect.append(("MEAN", dict(keep_dims=True)))
    op("SQUEEZE", [one], [9, 4], dict(squeeze_dims=[0, 2]), dict(squeeze_dims=[0, 2]))
    op("CAST", [x], [1, 9, 9, 4], dict(in_data_type=0, out_data_type=2), dict(in_data_type=0, out_data_type=2),
       dtype=np.int32)
    op("ARG_MAX", [x, mb.const("am", np.array(3, np.int32))], [1, 9, 9], dict(output_type=4),
       dict(output_type=4), dtype=np.int64)
    mb.output(*[i for i in range(len(mb.tensors)) if mb.tensors[i]["name"].startswith("t")])
    return mb.build(), expect


def test_op_parameters_read_from_builtin_data_match_the_options_written():
    content, expect = _options_model()
    rec = _Recorder()
    litert.Interpreter(model_content=content, experimental_delegates=[rec])
    got = [rec.attrs[i] for i in sorted(rec.attrs)]
    assert [op for op, _ in got] == [op for op, _ in expect]
    for i, ((op, attrs), (_, want)) in enumerate(zip(got, expect)):
        assert attrs == want, f"node {i} ({op})"
    assert bridge.bridge_of(rec).last_reasons.keys() == set(range(len(expect)))


def test_an_op_without_a_parameter_layout_is_not_handed_over(monkeypatch):
    mb = ModelBuilder()
    x = mb.input("x", [2, 3])
    y = mb.tensor("y", [2, 3])
    mb.op("HARD_SWISH", [x], [y])
    z = mb.tensor("z", [2, 3])
    mb.op("L2_NORMALIZATION", [y], [z])
    mb.output(z)

    class Greedy(gd.SimpleDelegate):
        def is_node_supported(self, node, graph):
            return True

        def create_kernel(self):
            return gd.DelegateKernel()

    monkeypatch.delitem(bridge.OP_PARAMS, "HARD_SWISH")
    d = Greedy()
    litert.Interpreter(model_content=mb.build(), experimental_delegates=[d])
    assert bridge.bridge_of(d).last_partitions == [[1]]
    assert bridge.bridge_of(d).last_reasons == {0: "the LiteRT bridge has no parameter layout for HARD_SWISH"}


def test_custom_options_and_sparse_constants_are_read_from_the_context():
    flexbuffers = pytest.importorskip("flatbuffers.flexbuffers")
    options = flexbuffers.Dumps({"window_size": 4, "stride": 2, "magnitude_squared": False})
    sparsity = {"traversal_order": [0, 1], "block_map": [],
                "dim_metadata": [{"format": 0, "dense_size": 2}, {"format": 1, "segments": [0, 1, 3],
                                                                  "indices": [1, 0, 2]}]}
    mb = ModelBuilder()
    x = mb.input("x", [16, 1])
    y = mb.tensor("y", [1, 7, 3])
    mb.op("AudioSpectrogram", [x], [y], custom_options=options)  # a custom op LiteRT's resolver has
    w = mb.tensor("w", [2, 3], data=np.array([1, 2, 3], np.float32), sparsity=sparsity)
    wd = mb.tensor("wd", [2, 3])
    mb.op("DENSIFY", [w], [wd])
    mb.output(y, wd)
    seen = {}

    class Look(gd.SimpleDelegate):
        def is_node_supported(self, node, graph):
            t = graph.tensors[node.inputs[0]]
            seen[node.op] = (node.custom, node.custom_options, t.sparsity, None if t.data is None else t.data.copy())
            return False

    litert.Interpreter(model_content=mb.build(), experimental_delegates=[Look()])
    assert seen["AudioSpectrogram"][:2] == (True, options)
    custom, _, sp, data = seen["DENSIFY"]
    assert not custom and sp["traversal_order"] == [0, 1] and sp["block_map"] == []
    assert [d["format"] for d in sp["dim_metadata"]] == [0, 1] and sp["dim_metadata"][0]["dense_size"] == 2
    np.testing.assert_array_equal(sp["dim_metadata"][1]["segments"], [0, 1, 3])
    np.testing.assert_array_equal(sp["dim_metadata"][1]["indices"], [1, 0, 2])
    np.testing.assert_array_equal(data, [1, 2, 3])


# -- GpuDelegate inside LiteRT --------------------------------------------------------------------------------
#
# Which nodes LiteRT hands GpuDelegate is checked on every shared model and both backends, with kernels that
# compile nothing (cheap). The GPU kernels then run through LiteRT on small built models (float and int8) and
# on real models whose results say something: the MobileNets carry random weights, their float activations
# decay to ~1e-18 and every softmax output is 0.001 (see test_models_cpu.py), so a few intermediate tensors
# ("probes") are made model outputs as well and compared relative to their own magnitude. Compiling is what
# takes the time, cold (0.2-0.6 s per distinct kernel), so each real model runs on one backend: the bridge
# does the same on both (bench/litert_bridge.py --models runs every model on both), and GPU numerics on every
# model are test_gpu_models.py's subject, whose kernels (same models, same options) the drivers' program
# caches then already hold.

SHARED = ["mobilenet/mobilenet_v1_224_fp32.tflite", "mobilenet/mobilenet_v1_224_fp16.tflite",
          "mobilenet/mobilenet_v1_224_dynrange.tflite", "mobilenet/mobilenet_v1_224_int8.tflite",
          "mobilenet/mobilenet_v2_224_fp32.tflite", "mobilenet/mobilenet_v2_224_fp16.tflite",
          "mobilenet/mobilenet_v2_224_dynrange.tflite", "mobilenet/mobilenet_v2_224_int8.tflite",
          "real/face_detection_short_range.tflite", "real/iris_landmark.tflite", "real/sine_float.tflite"]
END_TO_END = [("mobilenet/mobilenet_v2_224_fp32.tflite", "cl"), ("real/face_detection_short_range.tflite", "cl"),
              ("real/iris_landmark.tflite", "gl"), ("real/sine_float.tflite", "cl"), ("real/sine_float.tflite", "gl")]
FLOAT_REL, FP16_REL = 1e-4, 2e-2


@pytest.fixture(scope="module", params=["cl", "gl"])
def gpu(request):
    """One GpuDelegate per backend for the whole module: its backend keeps every program it compiled."""
    try:
        return gd.GpuDelegate(backend=request.param)
    except gd.DelegateError as e:
        pytest.skip(f"no {request.param} backend here: {e}")


def _shared(name: str) -> bytes:
    path = need_models() / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path.read_bytes()


def with_probes(content: bytes) -> tuple[bytes, list[int]]:
    """The model with intermediate float tensors made outputs too: the outputs of the nodes a quarter, half
    and three quarters of the way through, and the input of the last node. Returns it and those tensors.
    Nodes that dequantize constants are passed over: LiteRT alone never computes their outputs (XNNPACK
    reads the weights they dequantize itself)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(content, 0)
    sg = model.subgraphs[0]
    folded = (schema.BuiltinOperator.DEQUANTIZE, schema.BuiltinOperator.DENSIFY)
    ops = [op for op in sg.operators
           if max(model.operatorCodes[op.opcodeIndex].builtinCode,
                  model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode) not in folded]
    n = len(ops)
    candidates = [ops[n // 4].outputs[0], ops[n // 2].outputs[0], ops[3 * n // 4].outputs[0], ops[-1].inputs[0]]
    probes = [t for t in dict.fromkeys(candidates) if t not in list(sg.outputs)
              and sg.tensors[t].type == schema.TensorType.FLOAT32]
    sg.outputs = [*sg.outputs, *probes]
    b = flatbuffers.Builder(len(content) + 4096)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output()), probes


class _PlanOnly(gd.SimpleDelegate):
    """GpuDelegate's choice of nodes and partitions, with kernels that compile and run nothing."""

    def __init__(self, gpu: gd.GpuDelegate):
        self.gpu = gpu
        self.name = gpu.name
        self.max_partitions = gpu.max_partitions
        self.created: list[list[int]] = []

    def is_node_supported(self, node, graph):
        return self.gpu.is_node_supported(node, graph)

    def partition_weight(self, nodes, graph):
        return self.gpu.partition_weight(nodes, graph)

    def create_kernel(self):
        owner = self

        class Kernel(gd.DelegateKernel):
            def init(self, graph, node_indices, input_ids, output_ids):
                owner.created.append(list(node_indices))

        return Kernel()


@pytest.mark.parametrize("name", SHARED)
def test_litert_hands_gpu_delegate_the_nodes_our_interpreter_does(name, gpu):
    content = _shared(name)
    want = _ours_taken(content, gpu)
    plan = _PlanOnly(gpu)
    litert.Interpreter(model_content=content, experimental_delegates=[plan])
    assert plan.created == bridge.bridge_of(plan).last_partitions  # LiteRT kept our partitions
    assert _taken(plan) == want
    assert len(want) > 0 or name == "real/sine_float.tflite", f"GpuDelegate takes no node of {name}"


def _gpu_model() -> bytes:
    """A chain of ops, some of which the GPU path takes today (others are being added)."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 6, 5, 3])
    pads = mb.const("pads", np.array([[0, 0], [1, 1], [0, 2], [0, 0]], np.int32))
    p = mb.tensor("p", [1, 8, 7, 3])
    mb.op("PAD", [x, pads], [p])
    r = mb.tensor("r", [1, 16, 14, 3])
    mb.op("RESIZE_BILINEAR", [p, mb.const("size", np.array([16, 14], np.int32))], [r], half_pixel_centers=True)
    w = mb.const("w", np.random.default_rng(3).standard_normal((7, 3, 3, 3)).astype(np.float32))
    bias = mb.const("b", np.linspace(-1, 1, 7, dtype=np.float32))
    c = mb.tensor("c", [1, 8, 7, 7])
    mb.op("CONV_2D", [r, w, bias], [c], padding="SAME", stride_w=2, stride_h=2, fused_activation_function="RELU6")
    s = mb.tensor("s", [1, 4, 4, 7])
    mb.op("SLICE", [c, mb.const("begin", np.array([0, 2, 1, 0], np.int32)),
                    mb.const("sz", np.array([1, 4, 4, 7], np.int32))], [s])
    d = mb.tensor("d", [1, 2, 2, 28])
    mb.op("SPACE_TO_DEPTH", [s], [d], block_size=2)
    t = mb.tensor("t", [1, 28, 2, 2])
    mb.op("TRANSPOSE", [d, mb.const("perm", np.array([0, 3, 1, 2], np.int32))], [t])
    y = mb.tensor("y", [1, 112])
    mb.op("RESHAPE", [t, mb.const("shape", np.array([1, 112], np.int32))], [y])
    mb.output(y)
    return mb.build()


def _check_gpu(content: bytes, delegate: gd.GpuDelegate, n_probes: int = 0, seed: int = 0) -> int:
    """LiteRT + GpuDelegate against LiteRT alone: the delegate takes the nodes gpu_delegate's interpreter
    gives it, its outputs match (the last ``n_probes`` relative to their own magnitude), and deleting the
    interpreter frees its GPU buffers. Returns how many nodes it took."""
    want = _ours_taken(content, delegate)
    kernels: list[weakref.ref] = []
    created: list[list[int]] = []
    buffers: list = []

    class Tracked(GpuKernel):
        def init(self, graph, node_indices, input_ids, output_ids):
            created.append(list(node_indices))
            super().init(graph, node_indices, input_ids, output_ids)

        def prepare(self, tensors):
            super().prepare(tensors)
            buffers.extend([*self.runner.buffers, *self.runner.const_buffers.values()])

    def create_kernel():
        k = Tracked(delegate)
        kernels.append(weakref.ref(k))
        return k

    xs = random_inputs(content, seed)
    delegate.create_kernel = create_kernel
    try:
        it = litert.Interpreter(model_content=content, experimental_delegates=[delegate])
        ours = run(it, xs)
    finally:
        del delegate.create_kernel
    assert _taken(delegate) == want
    assert created == bridge.bridge_of(delegate).last_partitions  # LiteRT kept our partitions
    ref = run(litert.Interpreter(model_content=content), xs)
    rel = FP16_REL if delegate.precision_loss_allowed else FLOAT_REL
    n_out = len(ref) - n_probes
    assert_matches(ours[:n_out], ref[:n_out], rel=rel)
    for k, (o, r) in enumerate(zip(ours[n_out:], ref[n_out:])):
        scale = float(np.max(np.abs(r))) or 1.0
        assert_float_close(o / scale, r / scale, rel, what=f"probe {k} (max|ref| {scale:.3g})")
    del it
    gc.collect()
    assert all(k() is None for k in kernels), "deleting the interpreter must drop the GPU kernels"
    assert all(b.handle is None for b in buffers), "deleting the interpreter must free the GPU buffers"
    return len(want)


def _int8_model() -> bytes:
    """int8 in, per-channel int8 convolution with RELU, average pool, int8 out."""
    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 8, 5], np.int8, scale=0.05, zero_point=-3)
    ws = rng.uniform(0.005, 0.02, 6).astype(np.float32)
    zeros = np.zeros(6, np.int64)
    w = mb.const("w", rng.integers(-127, 128, (6, 3, 3, 5)).astype(np.int8), scale=ws, zero_point=zeros, axis=0)
    b = mb.const("b", rng.integers(-500, 500, 6).astype(np.int32), scale=ws * 0.05, zero_point=zeros, axis=0)
    c = mb.tensor("c", [1, 8, 8, 6], np.int8, scale=0.08, zero_point=-128)
    mb.op("CONV_2D", [x, w, b], [c], padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU",
          version=3)
    p = mb.tensor("p", [1, 4, 4, 6], np.int8, scale=0.08, zero_point=-128)
    mb.op("AVERAGE_POOL_2D", [c], [p], padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2,
          version=2)
    mb.output(p)
    return mb.build()


@pytest.mark.parametrize("model", [_gpu_model, _int8_model], ids=["float", "int8"])
def test_gpu_delegate_inside_litert_on_a_built_model(model, gpu):
    content = model()
    graph = gd.Interpreter(model_content=content).graph
    if not any(gpu.is_node_supported(n, graph) is True for n in graph.nodes):
        pytest.skip("no op of this model runs on the GPU yet")
    assert _check_gpu(content, gpu) > 0


def test_gpu_delegate_serialization_inside_litert(tmp_path, gpu):
    """A second interpreter loads the plan and programs the first one stored (the cache works through the
    bridge as in gpu_delegate.Interpreter), and computes the same."""
    content = _gpu_model()
    xs = random_inputs(content)
    outs, caches = [], []
    for _ in range(2):
        d = gd.GpuDelegate(backend=gpu.backend_name, serialization_dir=tmp_path, model_token="bridge")
        outs.append(run(litert.Interpreter(model_content=content, experimental_delegates=[d]), xs))
        caches.append(d.cache)
    if not bridge.bridge_of(d).last_partitions:
        pytest.skip("no op of this model runs on the GPU yet")
    assert caches[0].hits == 0 and caches[1].hits >= 1 and caches[1].misses == 0
    assert len(list(tmp_path.glob("bridge_*.bin"))) >= 1
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, backend", END_TO_END, ids=[f"{b}-{n}" for n, b in END_TO_END])
def test_gpu_delegate_inside_litert_end_to_end(name, backend):
    try:
        delegate = gd.GpuDelegate(backend=backend)
    except gd.DelegateError as e:
        pytest.skip(f"no {backend} backend here: {e}")
    content, probes = with_probes(_shared(name))
    assert _check_gpu(content, delegate, len(probes)) > 0


def test_gpu_delegate_fp16_storage_inside_litert():
    try:
        delegate = gd.GpuDelegate(backend="cl", precision_loss_allowed=True)
    except gd.DelegateError as e:
        pytest.skip(f"no cl backend here: {e}")
    content, probes = with_probes(_shared("real/sine_float.tflite"))
    assert _check_gpu(content, delegate, len(probes)) == 3


@pytest.mark.parametrize("name", ["bilstm_tf_keras_b1_fp16", "bilstm_tf_keras_b1_dynrange"])
def test_gpu_delegate_inside_litert_on_a_converter_loop_model(name):
    """TensorFlow's converter leaves a WHILE's unread outputs as tensor -1: the bridge reads such a node (it once
    refused it as out of range), and the partitioner skips the missing tensor (it once looked up a "producer" of -1:
    KeyError). The loops and the fused LSTMs stay with LiteRT; the answers are LiteRT's own."""
    content = (Path(__file__).parent / "models" / "converter" / f"{name}.tflite").read_bytes()
    try:
        delegate = gd.GpuDelegate(backend="cl")
    except gd.DelegateError as e:
        pytest.skip(f"no cl backend here: {e}")
    ref_it = litert.Interpreter(model_content=content)
    x = [np.random.default_rng(3).integers(0, 50, d["shape"]).astype(d["dtype"]) for d in ref_it.get_input_details()]
    ours = run(litert.Interpreter(model_content=content, experimental_delegates=[delegate]), x)
    assert bridge.bridge_of(delegate).last_partitions, "nothing was delegated"
    assert_matches(ours, run(ref_it, x))
