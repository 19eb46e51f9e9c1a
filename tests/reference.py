"""Running a model on LiteRT (the independent reference) and on ours, and comparing the two."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import gpu_delegate as gd

MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"


def need_models() -> Path:
    if not MODELS.is_dir():
        pytest.skip(f"the shared test models folder {MODELS} (../shared/models) is absent")
    return MODELS


def litert_interpreter(content: bytes, reference_kernels: bool = False, num_threads: int = 1):
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    kind = litert.OpResolverType.BUILTIN_REF if reference_kernels else litert.OpResolverType.AUTO
    return litert.Interpreter(model_content=content, experimental_op_resolver_type=kind, num_threads=num_threads)


def run(interpreter, inputs: list[np.ndarray]) -> list[np.ndarray]:
    details = interpreter.get_input_details()
    for d, x in zip(details, inputs):
        if tuple(d["shape"]) != tuple(x.shape):
            interpreter.resize_tensor_input(d["index"], x.shape)
    interpreter.allocate_tensors()
    for d, x in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def run_litert(content: bytes, inputs: list[np.ndarray], reference_kernels: bool = False) -> list[np.ndarray]:
    return run(litert_interpreter(content, reference_kernels), inputs)


def run_ours(content: bytes, inputs: list[np.ndarray], delegates=None) -> list[np.ndarray]:
    return run(gd.Interpreter(model_content=content, experimental_delegates=delegates), inputs)


def random_inputs(content: bytes, seed: int = 0) -> list[np.ndarray]:
    """Inputs that exercise a model: normal floats, full-range integers."""
    rng = np.random.default_rng(seed)
    out = []
    for d in gd.Interpreter(model_content=content).get_input_details():
        dt = np.dtype(d["dtype"])
        shape = tuple(d["shape"])
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt == np.bool_:
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            info = np.iinfo(dt)
            out.append(rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dt))
    return out


def on_cpu_opencl(backend: str) -> bool:
    """Whether ``backend`` is OpenCL on a CPU device, which runs kernels/opencl/ versions of some kernels
    (LowerContext.cpu_opencl)."""
    return backend == "cl" and shared_delegate(backend).backend.device_info()["device_type"] == "cpu"


def int8_grid(values: list[np.ndarray]) -> dict[str, object]:
    """An int8 grid (ModelBuilder.tensor's dtype, scale, zero_point) covering ``values`` and 0, as the converter
    calibrates one."""
    lo = min(0.0, *(float(v.min()) for v in values))
    hi = max(0.0, *(float(v.max()) for v in values))
    scale = (hi - lo) / 255.0 or 1.0
    return {"dtype": np.int8, "scale": scale, "zero_point": int(np.clip(round(-128 - lo / scale), -128, 127))}


def to_int8(x: np.ndarray, grid: dict[str, object]) -> np.ndarray:
    """``x`` quantized onto an int8_grid."""
    scale, zero_point = float(grid["scale"]), int(grid["zero_point"])  # type: ignore[arg-type]
    return np.clip(np.round(x / scale) + zero_point, -128, 127).astype(np.int8)


def assert_float_close(ours: np.ndarray, ref: np.ndarray, rel: float = 1e-4, what: str = "") -> float:
    """|ours - ref| <= rel * (1 + max|ref|); returns the max error."""
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != reference {ref.shape}"
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != reference {ref.dtype}"
    ref64 = ref.astype(np.float64)
    err = float(np.max(np.abs(ours.astype(np.float64) - ref64))) if ref.size else 0.0
    bound = rel * (1.0 + (float(np.max(np.abs(ref64))) if ref.size else 0.0))
    assert err <= bound, f"{what}: max abs error {err:.3g} > {bound:.3g}"
    return err


def assert_quant_close(ours: np.ndarray, ref: np.ndarray, min_equal: float = 0.99, max_steps: int = 2,
                       what: str = "") -> None:
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, f"{what}: {ours.shape}/{ours.dtype} vs " \
        f"{ref.shape}/{ref.dtype}"
    diff = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
    equal = float(np.mean(diff == 0)) if diff.size else 1.0
    assert equal >= min_equal, f"{what}: only {equal:.2%} of values equal the reference"
    assert diff.size == 0 or diff.max() <= max_steps, f"{what}: {diff.max()} quantization steps apart"


def assert_matches(ours: list[np.ndarray], ref: list[np.ndarray], rel: float = 1e-4) -> None:
    assert len(ours) == len(ref)
    for k, (o, r) in enumerate(zip(ours, ref)):
        if r.dtype.kind == "f":
            assert_float_close(o, r, rel, what=f"output {k}")
        elif r.dtype in (np.int8, np.uint8, np.int16):
            assert_quant_close(o, r, what=f"output {k}")
        else:
            assert o.dtype == r.dtype and o.shape == r.shape, f"output {k}: {o.dtype}{o.shape} vs {r.dtype}{r.shape}"
            np.testing.assert_array_equal(o, r, err_msg=f"output {k}")


def run_wholly_on_gpu(content: bytes, inputs: list[np.ndarray], backend: str, fp16: bool = False
                      ) -> tuple[list[str], list[np.ndarray]]:
    """Run ``content`` on the shared delegate of ``backend``, asserting that every node ran there: the names of
    the kernels its plan launches, in order, and the outputs."""
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend, fp16)])
    outs = run(it, inputs)
    for d in it.get_ops_details():
        assert d["backend"] == backend, f"node {d['index']} ({d['op_name']}) ran on {d['backend']}"
    return [k.kernel for k in plan_of(it).kernels], outs


def runner_of(it: gd.Interpreter):
    """The PlanRunner of the interpreter's one GPU partition (a test's model delegates one)."""
    (runner,) = [s.kernel.runner for s in it._steps if getattr(getattr(s, "kernel", None), "runner", None)]
    return runner


def plan_of(it: gd.Interpreter):
    """The plan of the interpreter's one GPU partition."""
    return runner_of(it).plan


@functools.cache
def shared_delegate(backend: str, fp16: bool = False, quantized: bool = True) -> gd.GpuDelegate:
    """One GpuDelegate per backend and options for the whole session: programs compiled once are reused."""
    try:
        return gd.GpuDelegate(backend=backend, precision_loss_allowed=fp16, enable_quantized_inference=quantized)
    except gd.DelegateError as e:
        pytest.skip(f"backend {backend} is not available here: {e}")
