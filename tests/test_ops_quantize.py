"""QUANTIZE, DEQUANTIZE and DENSIFY on the CPU path against LiteRT and plain numpy formulas."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpu_delegate as gd
import gpu_delegate.cpu.quantize as cpu_quantize
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import assert_matches, run_litert, run_ours


def check(content: bytes, inputs: list[np.ndarray], reference_kernels: bool = False) -> list[np.ndarray]:
    ours = run_ours(content, inputs)
    assert_matches(ours, run_litert(content, inputs, reference_kernels))
    return ours


def single(op: str, shape, din, dout, qin=None, qout=None) -> bytes:
    """One ``op`` from an input of type ``din`` to an output of type ``dout``; q = (scale, zero_point[, axis])."""
    mb = ModelBuilder()

    def quant(q) -> dict:
        return {} if q is None else {"scale": q[0], "zero_point": q[1], "axis": q[2] if len(q) > 2 else 0}
    x = mb.input("x", shape, din, **quant(qin))
    y = mb.tensor("y", shape, dout, **quant(qout))
    mb.op(op, [x], [y])
    mb.output(y)
    return mb.build()


# -- QUANTIZE -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,q", [(np.int8, (0.05, -7)), (np.uint8, (0.021, 131)), (np.int16, (0.001, 0))])
def test_quantize_float(dtype, q):
    rng = np.random.default_rng(1)
    shape = (2, 5, 7, 3)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    ties = (np.arange(-20, 20) + 0.5).astype(np.float32) * np.float32(q[0])  # halves go away from zero
    x.reshape(-1)[:40] = ties
    x.reshape(-1)[40:42] = [1e6, -1e6]  # saturate
    # the reference kernel, as XNNPACK (LiteRT's default) rounds halves to even
    check(single("QUANTIZE", shape, np.float32, dtype, qout=q), [x], reference_kernels=True)


def test_quantize_float_per_channel():
    rng = np.random.default_rng(2)
    shape = (2, 3, 5)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    scales, zps = np.array([0.01, 0.05, 0.1], np.float32), np.array([-3, 0, 9])
    content = single("QUANTIZE", shape, np.float32, np.int8, qout=(scales, zps, 1))
    ref = np.clip(np.round(x / scales[:, None]) + zps[:, None], -128, 127).astype(np.int8)
    assert_matches(run_ours(content, [x]), [ref])


REQUANT = [(np.int8, (0.05, -7), np.uint8, (0.05, 121)), (np.uint8, (0.05, 121), np.int8, (0.05, -7)),
           (np.int8, (0.05, -7), np.int8, (0.031, 12)), (np.uint8, (0.02, 100), np.uint8, (0.07, 3)),
           (np.int16, (0.001, 0), np.int8, (0.02, 5)), (np.int8, (0.05, -7), np.int16, (0.0005, 0))]


@pytest.mark.parametrize("din,qin,dout,qout", REQUANT,
                         ids=[f"{np.dtype(a)}->{np.dtype(b)}" for a, _, b, _ in REQUANT])
def test_requantize(din, qin, dout, qout):
    rng = np.random.default_rng(3)
    info = np.iinfo(din)
    x = rng.integers(info.min, info.max + 1, (2, 5, 7, 3)).astype(din)
    check(single("QUANTIZE", x.shape, din, dout, qin, qout), [x], reference_kernels=True)


# -- DEQUANTIZE -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,q", [(np.int8, (0.05, -7)), (np.uint8, (0.021, 131)), (np.int16, (0.001, 0))])
def test_dequantize_input(dtype, q):
    info = np.iinfo(dtype)
    x = np.random.default_rng(4).integers(info.min, info.max + 1, (2, 5, 7, 3)).astype(dtype)
    check(single("DEQUANTIZE", x.shape, dtype, np.float32, qin=q), [x])


def test_dequantize_float16_input():
    x = (np.random.default_rng(5).standard_normal((3, 5)) * 100).astype(np.float16)
    check(single("DEQUANTIZE", x.shape, np.float16, np.float32), [x])


def _const_then_add(weights: np.ndarray, **quant) -> bytes:
    """x + DEQUANTIZE(constant): the pattern of a quantized or float16 weight feeding a float op."""
    mb = ModelBuilder()
    w = mb.const("w", weights, **quant)
    wf = mb.tensor("w_float", weights.shape)
    x = mb.input("x", weights.shape)
    y = mb.tensor("y", weights.shape)
    mb.op("DEQUANTIZE", [w], [wf])
    mb.op("ADD", [x, wf], [y])
    mb.output(y)
    return mb.build()


def test_dequantize_constants_once(monkeypatch):
    """int8 per-channel and float16 constants: the values LiteRT gives, converted only once however many
    times the model runs."""
    rng = np.random.default_rng(6)
    w8 = rng.integers(-128, 128, (3, 2, 2, 5)).astype(np.int8)
    scales = np.array([0.1, 0.02, 0.5], np.float32)
    w16 = (rng.standard_normal((3, 2, 2, 5)) * 10).astype(np.float16)
    calls = []
    real = cpu_quantize.dequantize_tensor
    monkeypatch.setattr(cpu_quantize, "dequantize_tensor", lambda x, t: calls.append(t.index) or real(x, t))
    for content, expect in [(_const_then_add(w8, scale=scales, zero_point=np.array([0, 3, -2]), axis=0),
                             (w8.astype(np.float32) - np.array([0, 3, -2])[:, None, None, None])
                             * scales[:, None, None, None]),
                            (_const_then_add(w16), w16.astype(np.float32))]:
        x = rng.standard_normal(w8.shape).astype(np.float32)
        (ours,) = check(content, [x])
        np.testing.assert_allclose(ours, x + expect, rtol=1e-6, atol=1e-6)
        it = gd.Interpreter(model_content=content)
        it.allocate_tensors()
        calls.clear()
        for _ in range(3):
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
        assert calls == [0], f"the constant was dequantized {len(calls)} times"


# -- DENSIFY --------------------------------------------------------------------------------------------

def to_sparse(dense: np.ndarray, order, formats, block_map=(), block_size=()) -> tuple[np.ndarray, dict]:
    """TFLite's sparse encoding of ``dense`` (the inverse of what DENSIFY computes), written directly from
    the format's definition: walk the expanded dimensions in traversal order; a DENSE level lists every
    child, a SPARSE_CSR level only the children with a non-zero value below them."""
    rank = dense.ndim
    blocked = list(dense.shape)
    for d, b in zip(block_map, block_size):
        blocked[d] //= b
    extent = [(blocked + list(block_size))[d] for d in order]
    levels = len(order)

    def element(idx):
        orig = [0] * rank
        for lvl in range(rank):
            orig[order[lvl]] = idx[lvl]
        for lvl in range(rank, levels):
            b = order[lvl] - rank
            orig[block_map[b]] = orig[block_map[b]] * block_size[b] + idx[lvl]
        return dense[tuple(orig)]

    def nonzero_below(idx):
        return any(element(idx + list(rest)) != 0 for rest in itertools.product(*map(range, extent[len(idx):])))

    segments = {lvl: [0] for lvl in range(levels) if formats[lvl]}
    indices = {lvl: [] for lvl in segments}
    values = []

    def walk(idx):
        lvl = len(idx)
        if lvl == levels:
            values.append(element(idx))
            return
        for i in range(extent[lvl]):
            if formats[lvl] == 0:
                walk(idx + [i])
            elif nonzero_below(idx + [i]):
                indices[lvl].append(i)
                walk(idx + [i])
        if formats[lvl]:
            segments[lvl].append(len(indices[lvl]))

    walk([])
    dims = [{"format": 1, "dense_size": 0, "segments": segments[lvl], "indices": indices[lvl]} if formats[lvl]
            else {"format": 0, "dense_size": extent[lvl]} for lvl in range(levels)]
    sparsity = {"traversal_order": list(order), "block_map": list(block_map), "dim_metadata": dims}
    return np.array(values, dense.dtype), sparsity


SPARSE = [  # shape, traversal order, formats, block map, block size
    ((4, 6), [0, 1], [0, 1], (), ()),  # CSR
    ((4, 6), [1, 0], [0, 1], (), ()),  # CSC
    ((4, 8), [0, 1, 2], [0, 1, 0], (1,), (4,)),  # 1x4 blocks
    ((4, 6), [0, 1, 2, 3], [0, 1, 0, 0], (0, 1), (2, 3)),  # 2x3 blocks
    ((2, 3, 4), [2, 0, 1], [1, 0, 1], (), ()),  # 3D, permuted, two compressed levels
]


def _sparse_dense(shape, dtype, rng) -> np.ndarray:
    dense = (rng.standard_normal(shape) * 5).astype(dtype)
    dense[rng.random(shape) < 0.6] = 0
    dense.reshape(-1)[:2] = 0  # a leading empty row or block
    return dense


def _densify_model(values, sparsity, shape, dtype, dequantize: bool) -> bytes:
    mb = ModelBuilder()
    w = mb.tensor("w_sparse", shape, dtype, data=values, sparsity=sparsity)
    wd = mb.tensor("w_dense", shape, dtype)
    mb.op("DENSIFY", [w], [wd])
    if dequantize:
        wf = mb.tensor("w_float", shape)
        mb.op("DEQUANTIZE", [wd], [wf])
        wd = wf
    x = mb.input("x", shape)
    y = mb.tensor("y", shape)
    mb.op("ADD", [x, wd], [y])
    mb.output(y)
    return mb.build()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,order,formats,block_map,block_size", SPARSE)
def test_densify(shape, order, formats, block_map, block_size, dtype):
    rng = np.random.default_rng(7)
    dense = _sparse_dense(shape, dtype, rng)
    values, sparsity = to_sparse(dense, order, formats, block_map, block_size)
    assert values.size < dense.size or 0 not in formats  # the encoding really is sparse somewhere
    content = _densify_model(values, sparsity, shape, dtype, dequantize=dtype == np.float16)
    x = rng.standard_normal(shape).astype(np.float32)
    (ours,) = check(content, [x])
    np.testing.assert_array_equal(ours, x + dense.astype(np.float32))


def test_densify_int8_constant():
    rng = np.random.default_rng(8)
    dense = rng.integers(-128, 128, (4, 8)).astype(np.int8)
    dense[rng.random(dense.shape) < 0.7] = 0
    values, sparsity = to_sparse(dense, [0, 1, 2], [0, 1, 0], (1,), (4,))
    mb = ModelBuilder()
    w = mb.tensor("w", dense.shape, np.int8, data=values, sparsity=sparsity)
    y = mb.tensor("y", dense.shape, np.int8)
    mb.op("DENSIFY", [w], [y])
    mb.output(y)
    it = gd.Interpreter(model_content=mb.build())
    it.allocate_tensors()
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), dense)


def test_densify_malformed_names_the_node():
    dense = np.eye(4, dtype=np.float32)
    values, sparsity = to_sparse(dense, [0, 1], [0, 1])
    sparsity["dim_metadata"][1]["indices"][1] = 9  # outside the row
    with pytest.raises(gd.ModelError, match=r"node 0 \(DENSIFY\).*indices outside"):
        gd.Interpreter(model_content=_densify_model(values, sparsity, (4, 4), np.float32, False))
    values, sparsity = to_sparse(dense, [0, 1], [0, 1])
    with pytest.raises(gd.ModelError, match=r"node 0 \(DENSIFY\).*describes 4 values, the buffer holds 3"):
        gd.Interpreter(model_content=_densify_model(values[:3], sparsity, (4, 4), np.float32, False))
