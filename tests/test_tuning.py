"""Work-group size tuning: with inference_preference="sustained_speed" every distinct kernel is timed at a few
work-group sizes and the fastest is kept, in the plan and in the cache; a serialization dir turns it on only on
devices where it pays (runner.TUNE_FOR_CACHE: GPUs, not PoCL or llvmpipe), and only when the dir keeps files.
Tuning stops at a budget proportional to what compiling took.

References: outputs against LiteRT; the choice itself against a stand-in clock whose winner is known.
"""

import math

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate import cache as cache_mod
from gpu_delegate import runner as runner_mod
from gpu_delegate.backends.base import choose_local_size, local_size_candidates
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, run, run_litert


def model() -> bytes:
    """A 3x3 conv (relu), a depthwise conv and a mean: three different kernels, channels not a multiple of 4."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = mb.input("x", [1, 10, 9, 5])
    c, d = mb.tensor("c", [1, 10, 9, 6]), mb.tensor("d", [1, 10, 9, 6])
    mb.op("CONV_2D", [x, mb.const("w", rng.standard_normal((6, 3, 3, 5)).astype(np.float32)),
                      mb.const("b", rng.standard_normal(6).astype(np.float32))], [c],
          padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
    mb.op("DEPTHWISE_CONV_2D", [c, mb.const("dw", rng.standard_normal((1, 3, 3, 6)).astype(np.float32)),
                                mb.const("db", np.zeros(6, np.float32))], [d],
          padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
    y = mb.tensor("y", [1, 1, 1, 6])
    mb.op("MEAN", [d, mb.const("axes", np.array([1, 2], np.int32))], [y], keep_dims=True)
    mb.output(y)
    return mb.build()


CONTENT = model()
INPUTS = [np.random.default_rng(4).standard_normal((1, 10, 9, 5)).astype(np.float32)]


def runner_of(it):
    (kernel,) = [s.kernel for s in it._steps if hasattr(s, "kernel")]
    return kernel.runner


def test_candidates_respect_the_device_and_the_grid():
    info = {"max_work_group_size": 64, "max_work_group_dims": (64, 64, 1), "preferred_work_group_size": 32,
            "compute_units": 2}
    sizes = local_size_candidates((7, 300, 1), info)
    assert sizes[0] == choose_local_size((7, 300, 1), info)  # the rule's own choice comes first
    assert len(set(sizes)) == len(sizes)
    for s in sizes:
        assert math.prod(s) <= 64 and s[2] == 1, s  # the device's limits
        assert s[0] < 14, s  # never twice as wide as the grid
    assert len(local_size_candidates((7, 300, 1), info, limit=2)) == 2


def test_tuned_plan_runs_right(backend):
    d = gd.GpuDelegate(backend=backend, inference_preference="sustained_speed")
    it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[d])
    out = run(it, INPUTS)
    assert {o["backend"] for o in it.get_ops_details()} == {backend}
    assert_float_close(out[0], run_litert(CONTENT, INPUTS)[0], 1e-4, what=f"tuned on {backend}")
    r = runner_of(it)
    assert r.plan.tuned and "tune_s" in r.timings
    info = d.backend.device_info()
    for call, program in zip(r.plan.kernels, r.programs):
        assert call.local_size is not None and program.local_size == call.local_size
        assert math.prod(call.local_size) <= info["max_work_group_size"]


@pytest.fixture
def tuning_pays_here(monkeypatch):
    """The device stands in for one where tuning pays, with a budget that never runs out."""
    monkeypatch.setattr(runner_mod, "TUNE_FOR_CACHE", ("gpu", "cpu", "other"))
    monkeypatch.setattr(runner_mod, "TUNE_SHARE", 1e9)
    monkeypatch.setattr(runner_mod, "TUNE_SECONDS", 1e9)


def test_the_fastest_size_wins_and_the_cache_keeps_it(backend, tmp_path, monkeypatch, tuning_pays_here):
    """A stand-in clock makes (1, 1, 1) the fastest size: every kernel must get it, and a warm start must
    read it back from the serialization cache without timing anything."""
    def clock(self, program, buffers, repeats=3):
        return 1.0 if program.local_size == (1, 1, 1) else 2.0

    monkeypatch.setattr(runner_mod.PlanRunner, "_time", clock)
    first = gd.Interpreter(model_content=CONTENT, experimental_delegates=[
        gd.GpuDelegate(backend=backend, serialization_dir=tmp_path, model_token="tuned")])
    cold = run(first, INPUTS)
    assert {call.local_size for call in runner_of(first).plan.kernels} == {(1, 1, 1)}

    def no_timing(*args, **kwargs):
        raise AssertionError("a plan read from the cache was tuned again")

    monkeypatch.setattr(runner_mod.PlanRunner, "_time", no_timing)
    second = gd.Interpreter(model_content=CONTENT, experimental_delegates=[
        gd.GpuDelegate(backend=backend, serialization_dir=tmp_path, model_token="tuned")])
    warm = run(second, INPUTS)
    r = runner_of(second)
    assert "tune_s" not in r.timings
    assert {p.local_size for p in r.programs} == {(1, 1, 1)}
    np.testing.assert_array_equal(warm[0], cold[0])
    assert_float_close(warm[0], run_litert(CONTENT, INPUTS)[0], 1e-4, what=f"warm tuned start on {backend}")


def test_a_directory_that_keeps_nothing_is_not_tuned_for(tmp_path, monkeypatch, tuning_pays_here):
    """Issue 18, item 9: a serialization dir that takes no file (a read-only mount; root writes through
    permission bits, so the refusal is made by the OS call) would have every start tune again for nothing."""
    def no_timing(*args, **kwargs):
        raise AssertionError("tuned for a cache that cannot keep the result")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(runner_mod.PlanRunner, "_time", no_timing)
    monkeypatch.setattr(cache_mod.Cache, "_create_temp", refuse)
    it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[
        gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="ro")])
    out = run(it, INPUTS)
    assert not runner_of(it).plan.tuned
    assert not list(tmp_path.iterdir())
    assert_float_close(out[0], run_litert(CONTENT, INPUTS)[0], 1e-4, what="read-only cache dir")


def test_a_serialization_dir_tunes_only_where_tuning_pays(tmp_path, monkeypatch):
    """PoCL and llvmpipe (device type "cpu") gain nothing measurable from tuning: a cache dir does not make a
    first start pay for it there."""
    monkeypatch.setattr(runner_mod.PlanRunner, "_time", lambda *a, **k: pytest.fail("tuned on a CPU device"))
    d = gd.GpuDelegate(backend="cl", serialization_dir=tmp_path, model_token="cpu")
    if d.backend.device_info()["device_type"] in runner_mod.TUNE_FOR_CACHE:
        pytest.skip("a device where tuning pays")
    it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[d])
    run(it, INPUTS)
    assert not runner_of(it).plan.tuned


def test_tuning_stops_at_its_budget(backend, monkeypatch, one_device):
    """With no time to spend, nothing is timed, and every kernel keeps the work-group size of the rule."""
    monkeypatch.setattr(runner_mod, "TUNE_SHARE", 0.0)
    monkeypatch.setattr(runner_mod.PlanRunner, "_time", lambda *a, **k: pytest.fail("timed past the budget"))
    d = gd.GpuDelegate(backend=backend, inference_preference="sustained_speed")
    it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[d])
    out = run(it, INPUTS)
    r = runner_of(it)
    assert r.plan.tuned
    assert [call.local_size for call in r.plan.kernels] == [d.backend.default_local_size(call.grid)
                                                            for call in r.plan.kernels]
    assert_float_close(out[0], run_litert(CONTENT, INPUTS)[0], 1e-4, what=f"budget-cut tuning on {backend}")


@pytest.mark.parametrize("preference", ["fast_single_answer"])
def test_no_tuning_by_default(preference):
    d = gd.GpuDelegate(backend="cl", inference_preference=preference)
    it = gd.Interpreter(model_content=CONTENT, experimental_delegates=[d])
    run(it, INPUTS)
    assert not runner_of(it).plan.tuned


@pytest.mark.parametrize("budget", ["whole", "none"])
def test_tuning_runs_the_plan_in_order_on_the_sample(backend, budget, monkeypatch, one_device):
    """Each kernel is timed on the values its producers compute from the start's sample inputs (zeros), written
    again first: the memory plan lends the input's buffer to a later tensor, so after the warm-up run it held that
    tensor's values (8-bit codes read as floats are denormals: an image model's first kernel took 4-7x its time on
    them). Every kernel runs, timed or not (past the budget, or a size chosen already), so the outputs' buffers
    hold the sample's answer when tuning ends."""
    if budget == "none":
        monkeypatch.setattr(runner_mod, "TUNE_SHARE", 0.0)
    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    x = mb.input("x", [1, 10, 9, 5])
    a, c, d = mb.tensor("a", [1, 10, 9, 5]), mb.tensor("c", [1, 10, 9, 6]), mb.tensor("d", [1, 10, 9, 6])
    mb.op("ADD", [x, x], [a])  # x read twice: PHWC4 on every API (no dense input), its buffer free after this
    mb.op("CONV_2D", [a, mb.const("w", rng.standard_normal((6, 3, 3, 5)).astype(np.float32)),
                      mb.const("b", rng.standard_normal(6).astype(np.float32))], [c],
          padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
    mb.op("DEPTHWISE_CONV_2D", [c, mb.const("dw", rng.standard_normal((1, 3, 3, 6)).astype(np.float32)),
                                mb.const("db", rng.standard_normal(6).astype(np.float32))], [d],
          padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
    y = mb.tensor("y", [1, 1, 1, 6])
    mb.op("MEAN", [d, mb.const("axes", np.array([1, 2], np.int32))], [y], keep_dims=True)
    mb.output(y)
    content = mb.build()
    delegate = gd.GpuDelegate(backend=backend, inference_preference="sustained_speed")
    it = gd.Interpreter(model_content=content, experimental_delegates=[delegate])
    it.allocate_tensors()
    r = runner_of(it)
    assert r.plan.tuned
    (x,) = r.plan.inputs
    assert any(r.plan.buffer_of[r.plan.storage(t)] == r.plan.buffer_of[x] for t in r.plan.tensors if t != x), \
        "the test wants a plan that lends its input's buffer"
    (out,) = r.plan.outputs
    zeros = [np.zeros_like(INPUTS[0])]
    assert_float_close(r._download(out).reshape(1, 1, 1, 6), run_litert(content, zeros)[0], 1e-5,
                       what=f"the outputs' buffer after tuning on {backend}")
