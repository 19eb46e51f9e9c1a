"""gd.load_delegate: a GpuDelegate from a library name and string options, as tf.lite.experimental.load_delegate
takes them; used in our interpreter and in LiteRT's, against LiteRT alone."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, run, run_litert


def model() -> tuple[bytes, list[np.ndarray]]:
    mb = ModelBuilder()
    x = mb.input("x", [1, 4, 4, 3])
    y = mb.tensor("y", [1, 4, 4, 3])
    mb.op("ADD", [x, mb.const("c", np.arange(3, dtype=np.float32))], [y], fused_activation_function="RELU")
    mb.output(y)
    return mb.build(), [np.random.default_rng(0).standard_normal((1, 4, 4, 3)).astype(np.float32)]


@pytest.mark.parametrize("library", ["gpu", "libtensorflowlite_gpu_delegate.so", "/opt/lib/gpu_delegate.so"])
def test_string_options_make_the_delegate_they_say(library, backend, tmp_path):
    d = gd.load_delegate(library, {"backend": backend, "precision_loss_allowed": "false",
                                   "enable_quantized_inference": "0", "max_delegated_partitions": "2",
                                   "inference_preference": "1", "serialization_dir": str(tmp_path / "c"),
                                   "model_token": "m"})
    assert isinstance(d, gd.GpuDelegate) and d.backend_name == backend
    assert (d.precision_loss_allowed, d.enable_quantized_inference, d.max_partitions) == (False, False, 2)
    assert d.inference_preference == "sustained_speed" and d.cache is not None and d.cache.token == "m"
    content, inputs = model()
    want = run_litert(content, inputs)
    it = gd.Interpreter(model_content=content, experimental_delegates=[d])
    assert_float_close(run(it, inputs)[0], want[0])
    assert {o["backend"] for o in it.get_ops_details()} == {backend}


def test_tflite_option_names_and_python_values():
    d = gd.load_delegate("gpu", {"is_precision_loss_allowed": True, "enable_quant": False, "backend": "opencl"})
    assert d.precision_loss_allowed and not d.enable_quantized_inference and d.requested_backend == "cl"


def test_inside_litert():
    content, inputs = model()
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    it = litert.Interpreter(model_content=content, experimental_delegates=[gd.load_delegate("gpu", {"backend": "cl"})])
    assert_float_close(run(it, inputs)[0], run_litert(content, inputs)[0])


@pytest.mark.parametrize("library,options,error,match", [
    ("libhexagon_delegate.so", None, ValueError, "'libhexagon_delegate.so' is not a delegate this package provides"),
    (3, None, TypeError, "library=3 must be a string"),
    ("gpu", {"precision": "true"}, ValueError, "unknown option 'precision'"),
    ("gpu", {"precision_loss_allowed": "maybe"}, ValueError, "precision_loss_allowed='maybe' is not a boolean"),
    ("gpu", {"max_delegated_partitions": "two"}, ValueError, "max_delegated_partitions='two' is not an integer"),
    ("gpu", {"max_delegated_partitions": "0"}, ValueError, "max_delegated_partitions=0 must be an int >= 1"),
    ("gpu", {"backend": "vulkan"}, ValueError, "backend='vulkan' is not one of auto, cl, gl"),
    ("gpu", {"inference_preference": "2"}, ValueError, "inference_preference='2' is not fast_single_answer"),
    ("gpu", {"precision_loss_allowed": "1", "is_precision_loss_allowed": "0"}, ValueError, "a second time"),
    ("gpu", {"model_token": 7}, TypeError, "model_token=7 must be a string"),
    ("gpu", ["backend", "cl"], TypeError, "options must be a dict"),
])
def test_bad_arguments_name_what_is_wrong(library, options, error, match):
    with pytest.raises(error, match=match):
        gd.load_delegate(library, options)
