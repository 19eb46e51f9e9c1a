"""One-op models for the per-op tests: describe the operands, get .tflite bytes, compare ours with LiteRT.

    content = single_op("GATHER_ND", [In((2, 5, 3)), Const(np.array([[1, 2]], np.int32))], [Out((1, 3))])
    expect_same(content, [sample((2, 5, 3), np.float32)])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_float_close, run_litert, run_ours

Quant = tuple[float, int] | None


@dataclass
class In:
    """A graph input."""
    shape: tuple[int, ...]
    dtype: type = np.float32
    q: Quant = None


@dataclass
class Const:
    data: np.ndarray
    q: Quant = None


@dataclass
class Out:
    shape: tuple[int, ...]
    dtype: type = np.float32
    q: Quant = None


def _quant(q: Quant) -> dict:
    return {} if q is None else {"scale": q[0], "zero_point": q[1]}


def single_op(op: str, inputs: list[In | Const | None], outputs: list[Out], version: int = 1, **options) -> bytes:
    """A model running ``op`` once; None in ``inputs`` is an omitted optional input."""
    mb = ModelBuilder()
    ids = []
    for k, spec in enumerate(inputs):
        if spec is None:
            ids.append(-1)
        elif isinstance(spec, Const):
            ids.append(mb.const(f"c{k}", spec.data, **_quant(spec.q)))
        else:
            ids.append(mb.input(f"x{k}", spec.shape, spec.dtype, **_quant(spec.q)))
    outs = [mb.tensor(f"y{k}", o.shape, o.dtype, **_quant(o.q)) for k, o in enumerate(outputs)]
    mb.op(op, ids, outs, version=version, **options)
    mb.output(*outs)
    return mb.build()


def sample(shape, dtype, seed: int = 0, low: int | None = None, high: int | None = None) -> np.ndarray:
    """Normal floats, full-range integers (or [low, high]), random bools."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dtype)
    lo = info.min if low is None else low
    hi = info.max if high is None else high
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def expect_same(content: bytes, inputs: list[np.ndarray], rel: float | None = None,
                reference_kernels: bool = False) -> list[np.ndarray]:
    """Ours against LiteRT: bit-exact (``rel`` None) or within ``rel`` for float outputs. Returns ours."""
    ref = run_litert(content, inputs, reference_kernels=reference_kernels)
    ours = run_ours(content, inputs)
    assert len(ours) == len(ref)
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == r.dtype, f"output {k}: dtype {o.dtype} != reference {r.dtype}"
        assert o.shape == r.shape, f"output {k}: shape {o.shape} != reference {r.shape}"
        if rel is not None and r.dtype.kind == "c":  # assert_float_close compares real numbers
            scale = float(np.max(np.abs(r))) if r.size else 0.0
            assert float(np.max(np.abs(o - r), initial=0.0)) <= rel * (1 + scale), f"output {k}: too far"
        elif rel is not None and r.dtype.kind == "f":
            assert_float_close(o, r, rel, what=f"output {k}")
        else:
            np.testing.assert_array_equal(o, r, err_msg=f"output {k}")
    return ours


def refused_version(op: str, inputs: list[In | Const | None], outputs: list[Out], version: int,
                    **options) -> str:
    """The ModelError our interpreter raises for ``op`` at a version above what its kernel implements."""
    content = single_op(op, inputs, outputs, version=version, **options)
    try:
        gd.Interpreter(model_content=content)
    except gd.ModelError as e:
        return str(e)
    raise AssertionError(f"{op} version {version} was accepted")
