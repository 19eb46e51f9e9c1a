"""Where a partition of little work beside CPU nodes runs (GpuDelegate._small_beside_cpu): on the CPU, with its reason,
while the same nodes on large tensors, and a small model wholly supported, stay on the GPU. The answers are LiteRT's.

(tests/conftest.py turns the rule off for the other test modules, whose graphs of a few hundred values test kernels;
this module keeps it, as users get it.)"""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate import gpu
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_matches, run, run_litert, shared_delegate

SMALL_PARTITIONS_ON_CPU = True  # read by conftest's _small_partitions_delegated


def topk_then_tail(shape: tuple[int, ...], k: int) -> bytes:
    """TOPK_V2 (no GPU kernel) over the last axis, then TANH and ADD of its values: the tail is one partition that
    reads a CPU node's output."""
    mb = ModelBuilder()
    x = mb.input("x", shape)
    out_shape = (*shape[:-1], k)
    values, order = mb.tensor("values", out_shape), mb.tensor("order", out_shape, np.int32)
    mb.op("TOPK_V2", [x, mb.const("k", np.array(k, np.int32))], [values, order])
    t, y = mb.tensor("t", out_shape), mb.tensor("y", out_shape)
    mb.op("TANH", [values], [t])
    mb.op("ADD", [t, mb.const("bias", np.linspace(-1, 1, k).astype(np.float32))], [y])
    mb.output(y, order)
    return mb.build()


def tail_only(shape: tuple[int, ...]) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", shape)
    t, y = mb.tensor("t", shape), mb.tensor("y", shape)
    mb.op("TANH", [x], [t])
    mb.op("ADD", [t, mb.const("bias", np.linspace(-1, 1, shape[-1]).astype(np.float32))], [y])
    mb.output(y)
    return mb.build()


def placed(content: bytes, backend: str, x: np.ndarray) -> tuple[dict[str, str], dict[int, str]]:
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    assert_matches(run(it, [x]), run_litert(content, [x]))
    return {d["op_name"]: d["backend"] for d in it.get_ops_details()}, it.cpu_reasons()


def test_a_small_tail_after_a_cpu_node_stays_on_the_cpu(backend):
    shape = (1, 6, 10, 16)
    content = topk_then_tail(shape, 4)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    where, reasons = placed(content, backend, x)
    assert where == {"TOPK_V2": "cpu", "TANH": "cpu", "ADD": "cpu"}, where
    assert reasons[1] == reasons[2] and "round trip" in reasons[1] and "beside CPU nodes" in reasons[1], reasons


def test_the_same_tail_on_large_tensors_runs_on_the_gpu(backend):
    shape = (1, 32, 32, 16)  # 32 x 32 x 8 values out of TOPK: over SMALL_PARTITION_VALUES
    assert 32 * 32 * 8 > gpu.SMALL_PARTITION_VALUES
    content = topk_then_tail(shape, 8)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    where, _ = placed(content, backend, x)
    assert where == {"TOPK_V2": "cpu", "TANH": backend, "ADD": backend}, where


@pytest.mark.parametrize("shape", [(1, 4), (1, 6, 10, 4)])
def test_a_small_model_wholly_supported_stays_on_the_gpu(backend, shape):
    """Nothing outside the partition to stay beside: the user asked for the GPU and gets it."""
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    where, _ = placed(tail_only(shape), backend, x)
    assert where == {"TANH": backend, "ADD": backend}, where
