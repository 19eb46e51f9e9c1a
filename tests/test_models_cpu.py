"""Every model in ../shared/models runs on the CPU path and matches LiteRT.

The MobileNets carry random weights: by their last layers the float activations have decayed to ~1e-18,
the int8 ones to a constant, and every softmax output is 0.001. Their final outputs would match almost
anything, so besides the outputs each node's output is compared with LiteRT's (its BUILTIN kernels, no
XNNPACK, which keep every intermediate tensor), relative to that tensor's own magnitude:

- end to end: our interpreter's tensors against LiteRT's. Float only: in the int8 models LiteRT's optimized
  kernels round 0.05-0.2% of values one step differently from TFLite's reference ones (which we follow
  exactly), and with random weights those steps grow layer by layer, between LiteRT's own kernel sets too.
- node by node: each node fed LiteRT's inputs, so an op's error shows where it happens.

Measured (this machine, LiteRT 2.3.0), largest error over all nodes, relative to max|tensor|:
float / fp16 models 1.5e-6 in both checks; int8 nodes >= 99.79% identical, 1 step at most.
Dynamic-range models (int8 weights, float activations): LiteRT's hybrid kernels quantize the activations
to int8 on the fly, we dequantize the weights once and stay in float. Node by node we differ from LiteRT by
at most 1.0% (V1 0.98%, V2 0.88%); end to end by 2.2% (V1) and 2.4% (V2), while our result is 2.2% / 1.8%
from the fp32 model with the same (unrounded) weights, and LiteRT's own dynamic-range result 3.0% / 2.9%.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.ops import get_op

from .reference import MODELS, assert_matches, assert_quant_close, need_models, random_inputs, run_litert

FLOAT_REL = 1e-4
HYBRID_NODE_REL = 0.03  # measured <= 1.0%
HYBRID_END_TO_END_REL = 0.05  # measured <= 2.4%


def model_names() -> list[str]:
    if not MODELS.is_dir():
        return ["(models absent)"]
    return [str(p.relative_to(MODELS)) for d in ("mobilenet", "real")
            for p in sorted((MODELS / d).glob("*.tflite"))]


@functools.lru_cache(maxsize=2)
def litert_tensors(name: str) -> tuple[bytes, list[np.ndarray], dict[int, np.ndarray], list[np.ndarray]]:
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


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max|ours - ref| / max|ref|; 0 when both are zero."""
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, \
        f"{ours.dtype}{ours.shape} vs {ref.dtype}{ref.shape}"
    err = float(np.max(np.abs(ours.astype(np.float64) - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return err / scale if scale > 0 else (0.0 if err == 0 else np.inf)


def computed_from_constants(graph) -> set[int]:
    """Nodes whose inputs are all constants (DEQUANTIZE of fp16 weights): LiteRT folds them away and does
    not keep their outputs, so they are computed here but not compared."""
    known = {t.index for t in graph.tensors if t.data is not None}
    nodes = set()
    for n in graph.nodes:
        if all(t < 0 or t in known for t in n.inputs):
            nodes.add(n.index)
            known.update(n.outputs)
    return nodes


@pytest.mark.parametrize("name", model_names())
def test_model_end_to_end(name: str):
    content, inputs, tensors, ref_outputs = litert_tensors(name)
    it = gd.Interpreter(model_content=content, num_threads=2)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    ours = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    hybrid = "dynrange" in name
    assert_matches(ours, ref_outputs, HYBRID_END_TO_END_REL if hybrid else FLOAT_REL)
    skip = computed_from_constants(it.graph)
    for node in it.graph.nodes:
        for t in node.outputs:
            if node.index in skip or tensors[t].dtype != np.float32:
                continue
            err = relative_error(it.get_tensor(t), tensors[t])
            bound = HYBRID_END_TO_END_REL if hybrid else FLOAT_REL
            assert err <= bound, f"{name}: {node} output is off by {err:.3g}"


@pytest.mark.parametrize("name", model_names())
def test_model_node_by_node(name: str):
    content, _, tensors, _ = litert_tensors(name)
    graph = gd.Interpreter(model_content=content).graph
    mine = {t.index: t.data for t in graph.tensors if t.data is not None}
    skip = computed_from_constants(graph)
    hybrid = "dynrange" in name
    for node in graph.nodes:
        ins = [None if t < 0 else mine[t] if t in mine else tensors[t] for t in node.inputs]
        outs = get_op(node.op).run_cpu(node, graph, ins)
        for t, out in zip(node.outputs, outs):
            out = np.asarray(out, graph.tensors[t].dtype)
            if node.index in skip:
                mine[t] = out
            elif out.dtype == np.float32:
                err = relative_error(out, tensors[t])
                bound = HYBRID_NODE_REL if hybrid else FLOAT_REL
                assert err <= bound, f"{name}: {node} is off by {err:.3g}"
            else:
                assert_quant_close(out, tensors[t], what=f"{name}: {node}")


def test_models_listed():
    """The folder is what the README describes (a renamed file would silently drop out of the tests)."""
    root = Path(need_models())
    names = set(model_names())
    assert {f"mobilenet/mobilenet_v{v}_224_{f}.tflite" for v in (1, 2)
            for f in ("fp32", "fp16", "dynrange", "int8")} <= names
    real = ("face_detection_short_range", "iris_landmark", "sine_float")
    assert {f"real/{m}.tflite" for m in real} <= names
    assert root.is_dir()
