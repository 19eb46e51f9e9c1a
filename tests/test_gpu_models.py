"""Every model in ../shared/models runs wholly on the GPU delegate, on OpenCL and on OpenGL ES, and matches
LiteRT.

The MobileNets carry random weights: by their last layers the float activations have decayed to ~1e-18 and
every softmax output is 0.001, so their final outputs would match almost anything. So besides the model's
outputs, a few intermediate tensors (probes: the input of the last node, and the outputs of nodes a
quarter, half and three quarters of the way through) are made outputs of the delegated partition too,
and each is compared with the tensor LiteRT's BUILTIN kernels computed, relative to that tensor's own
magnitude. The partition is run through the delegate's kernel interface (init / prepare / invoke), the
very calls the interpreter makes, once per model and backend; the interpreter itself is asked where every
node runs.

Tolerances: float models 1e-4 of max|ref| (outputs: 1e-4 * (1 + max|ref|)); fp16 storage
(precision_loss_allowed) 2e-2; dynamic-range models 5% (LiteRT quantizes their activations on the fly, the
GPU runs them in float: see test_models_cpu.py); int8 outputs >= 99% identical and at most 2 steps apart.
int8 probes are not compared: one step of difference (0.1-0.3% of an op's values, rounding a float result
against TFLite's fixed-point one) moves the values of the next layers across rounding boundaries, more
with each layer, as it does between LiteRT's own kernel sets.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import gpu_delegate as gd

from .reference import (
    MODELS,
    assert_float_close,
    assert_quant_close,
    need_models,
    random_inputs,
    run_litert,
    shared_delegate,
)

SMALL_PARTITIONS_ON_CPU = True  # real models: placement as users get it (tests/conftest.py)

FLOAT_REL = 1e-4
FP16_REL = 2e-2
# fp16 keeps 11 bits down to 6e-5 and flushes below 6e-8: a probe's error is taken relative to its max|ref|
# but to no less than this (the MobileNets' activations decay to ~1e-18, which fp16 stores as 0)
FP16_FLOOR = 1e-2
HYBRID_REL = 0.05

# Compiling is what takes the time, cold: ~0.6 s per distinct kernel on PoCL, 0.2-0.6 s on llvmpipe, and a
# model has 20-55 of them (the int8 ones one per layer: their fake-quant constants differ). The fp16 and
# dynamic-range MobileNets lower to the very kernels of the fp32 ones, compiled once per delegate.
# fp16 storage (precision_loss_allowed): models whose activations do not decay to nothing
FP16_MODELS = dict.fromkeys(("cl", "gl"), ("real/iris_landmark.tflite", "real/sine_float.tflite"))


def model_names() -> list[str]:
    if not MODELS.is_dir():
        return ["(models absent)"]
    return [str(p.relative_to(MODELS)) for d in ("mobilenet", "real") for p in sorted((MODELS / d).glob("*.tflite"))]


def cases() -> list:
    out = []
    for name in model_names():
        for backend in ("cl", "gl"):
            out.append(pytest.param(name, backend, False, id=f"{name}-{backend}"))
            if name in FP16_MODELS[backend]:
                out.append(pytest.param(name, backend, True, id=f"{name}-{backend}-fp16"))
    return out


@functools.lru_cache(maxsize=1)
def litert_reference(name: str) -> tuple[bytes, list[np.ndarray], dict[int, np.ndarray], list[np.ndarray]]:
    """(model, inputs, every tensor LiteRT's BUILTIN kernels computed, LiteRT's default outputs)."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    content = (need_models() / name).read_bytes()
    inputs = random_inputs(content)
    with warnings.catch_warnings():  # "preserve_all_tensors is intended for debugging": so it is here
        warnings.simplefilter("ignore", UserWarning)
        it = litert.Interpreter(model_content=content, experimental_preserve_all_tensors=True,
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    tensors = {d["index"]: it.get_tensor(d["index"]) for d in it.get_tensor_details()}
    return content, inputs, tensors, run_litert(content, inputs)


def probes(graph, nodes: list[int], outputs: list[int]) -> list[int]:
    """Float tensors inside the partition to read back: the input of the last node, and the outputs of the
    nodes a quarter, half and three quarters of the way through."""
    computed = [n for n in nodes if any(graph.tensors[t].data is None for t in graph.nodes[n].inputs if t >= 0)]
    picks = [graph.nodes[computed[len(computed) * k // 4]].outputs[0] for k in (1, 2, 3)]
    picks += [t for t in graph.nodes[computed[-1]].inputs if t >= 0 and graph.tensors[t].data is None]
    return [t for t in dict.fromkeys(picks) if t not in outputs and graph.tensors[t].dtype == np.float32]


def relative_error(ours: np.ndarray, ref: np.ndarray, floor: float = 0.0) -> float:
    """max|ours - ref| / max(max|ref|, floor); 0 when both are zero."""
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, f"{ours.dtype}{ours.shape} vs {ref.dtype}{ref.shape}"
    err = float(np.max(np.abs(ours.astype(np.float64) - ref))) if ref.size else 0.0
    scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, floor)
    return err / scale if scale > 0 else (0.0 if err == 0 else np.inf)


@functools.cache
def partition_run(name: str, backend: str, fp16: bool) -> tuple:
    """(graph, partition, probes, tensor -> value) of one run of the model's delegated partition, with the
    probes as extra outputs; fails if any node is not on ``backend``."""
    content, inputs, _, _ = litert_reference(name)
    d = shared_delegate(backend, fp16)
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    off = [(x["index"], x["op_name"]) for x in it.get_ops_details() if x["backend"] != backend]
    assert not off, f"{name}: nodes not on {backend}: {off}; why: {it.cpu_reasons()}"
    graph = it.graph
    (partition,) = [s.partition for s in it._steps if hasattr(s, "partition")]
    probe = probes(graph, partition.nodes, partition.outputs)
    kernel = d.create_kernel()
    kernel.init(graph, partition.nodes, partition.inputs, partition.outputs + probe)
    values = dict(zip([x["index"] for x in it.get_input_details()], inputs))
    kernel.prepare(values)
    try:
        kernel.invoke(values)
    finally:
        kernel.runner.close()
    outputs = [x["index"] for x in it.get_output_details()]
    return graph, partition, probe, {t: values[t] for t in outputs + probe}, outputs


@pytest.mark.parametrize("name,backend,fp16", cases())
def test_model_on_gpu(name: str, backend: str, fp16: bool):
    _, _, tensors, ref_outputs = litert_reference(name)
    graph, partition, probe, values, outputs = partition_run(name, backend, fp16)
    hybrid = "dynrange" in name
    rel = FP16_REL if fp16 else HYBRID_REL if hybrid else FLOAT_REL
    for k, (t, ref) in enumerate(zip(outputs, ref_outputs, strict=True)):
        ours = values[t]
        if ref.dtype.kind == "f":
            assert_float_close(ours, ref, rel, what=f"{name} output {k} on {backend}")
        else:
            assert_quant_close(ours, ref, what=f"{name} output {k} on {backend}")
    if any(graph.tensors[t].dtype != np.float32 for t in partition.inputs):
        return  # int8: see the module docstring
    for t in probe:
        err = relative_error(values[t], tensors[t], FP16_FLOOR if fp16 else 0.0)
        assert err <= rel, f"{name}: tensor {graph.tensors[t].name!r} on {backend} is off by {err:.3g} of its max"


@pytest.mark.parametrize("name", model_names())
def test_gl_and_cl_agree(name: str):
    """The two backends run the same kernel text: their outputs and probes agree to 1e-5 of each tensor's
    magnitude (OpenCL fuses FMA(), GLSL ES cannot), int8 outputs to the value but for a rare step. Each is
    checked against LiteRT by test_model_on_gpu; this is the GL-vs-CL consistency on top."""
    graph, _, _, cl_values, _ = partition_run(name, "cl", False)
    gl_values = partition_run(name, "gl", False)[3]
    for t, cl in cl_values.items():
        gl, what = gl_values[t], f"{name}: tensor {graph.tensors[t].name!r}"
        if cl.dtype.kind == "f":
            err = relative_error(gl, cl)
            assert err <= 1e-5, f"{what}: GL and CL differ by {err:.3g} of its max"
        else:
            assert_quant_close(gl, cl, min_equal=0.999, max_steps=1, what=what)
