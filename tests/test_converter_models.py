"""Models as TensorFlow's converter makes them with its defaults (bench/converter_models.py --size small: the
keras.applications architectures at reduced width and input size, so their graphs have the full models' ops and
patterns, and small hand-written nets), on our CPU path, cl and gl, against LiteRT.

Judged as bench/converter_check.py judges the full-size models (its docstring has the rules): float models within
1e-4 * (1 + max|LiteRT|); dynamic-range and int8 networks within 2e-2 or 3 steps of LiteRT's default kernels, our
CPU path bit-exact with LiteRT's reference kernels on int8 networks, and where LiteRT's own kernel sets part by
more than those bounds, no further from the nearer of them than they are from each other. Open-batch models are
also run at batch 2 on the CPU path, and delegate the same share of nodes as their batch-1 twins.

The files in tests/models/converter are the generator's output (``manifest.json`` says what each one is); to
make them again: ``python bench/converter_models.py --size small --out tests/models/converter --only ...``
with TensorFlow in a throwaway venv (see the generator's docstring).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from bench.converter_check import ModelResult, check_model
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import shared_delegate

SMALL_PARTITIONS_ON_CPU = True  # real models: placement as users get it (tests/conftest.py)

FOLDER = Path(__file__).parent / "models" / "converter"
MANIFEST = json.loads((FOLDER / "manifest.json").read_text())
NAMES = sorted(p.stem for p in FOLDER.glob("*.tflite"))
BACKENDS = ["cpu", "cl", "gl"]
# Recurrent nets keep their loops (WHILE, the fused LSTM), REVERSE_V2 and int32 loop counters on the CPU, with the
# loop bodies on the GPU; everything else runs wholly on the GPU.
RECURRENT = {"bilstm_keras3", "bilstm_tf_keras"}
# Ops with no GPU kernel: RFFT2D and COMPLEX_ABS (complex tensors) in tf.signal.stft; WHERE, GATHER_ND and the SUM
# of a data-dependent shape, and GREATER between int8 tensors of different scales, in gather_where.
PARTLY_ON_CPU = {"spectrogram", "gather_where"}


@functools.cache
def result(name: str) -> ModelResult:
    pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    delegates = {b: shared_delegate(b) for b in BACKENDS if b != "cpu"}
    return check_model(FOLDER / f"{name}.tflite", BACKENDS, delegates)


def test_the_folder_holds_what_the_manifest_says():
    assert NAMES, f"no models in {FOLDER}"
    for name in NAMES:
        assert name in MANIFEST and "refused" not in MANIFEST[name], name


@pytest.mark.parametrize("name", NAMES)
def test_matches_litert(name: str):
    r = result(name)
    failures = {where: v.text for where, v in r.cells.items() if not v.ok}
    assert not failures, f"{name}: {failures}"
    assert set(r.cells) >= set(BACKENDS)


@pytest.mark.parametrize("name", [n for n in NAMES if MANIFEST[n]["architecture"] not in RECURRENT | PARTLY_ON_CPU])
def test_runs_wholly_on_the_gpu(name: str):
    r = result(name)
    for backend, share in r.gpu_share.items():
        assert share == 1.0, f"{name} on {backend}: {r.on_cpu[backend]}"


@pytest.mark.parametrize("name", [n for n in NAMES if "_bopen_" in n and n.replace("_bopen_", "_b1_") in NAMES])
def test_open_batch_delegates_as_much_as_batch_one(name: str):
    open_batch, batch_one = result(name), result(name.replace("_bopen_", "_b1_"))
    assert open_batch.gpu_share == batch_one.gpu_share


def test_int8_sum_is_judged_against_litert_builtin_kernels(tmp_path: Path):
    """LiteRT's reference int8 SUM reads the codes as uint8 (test_ops_reduce.py::test_sum_uint8_and_int8); the
    checker once held our CPU path bit-exact to it and failed every int8 text transformer (a masked mean)."""
    pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    mb = ModelBuilder()
    x = mb.input("x", [1, 12, 16], np.int8, scale=0.02, zero_point=-20)
    y = mb.tensor("y", [1, 16], np.int8, scale=0.1, zero_point=-100)
    mb.op("SUM", [x, mb.const("axis", np.array([1], np.int32))], [y], keep_dims=False)
    mb.output(y)
    path = tmp_path / "sum_b1_int8io.tflite"
    path.write_bytes(mb.build())
    r = check_model(path, ["cpu"])
    failures = {where: v.text for where, v in r.cells.items() if not v.ok}
    assert not failures and "builtin" in r.cells["cpu nodes"].text, failures
