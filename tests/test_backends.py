"""The two GPU backends and the kernel dialect, checked against numpy formulas (never against our own code)."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.backends import Arg, KernelSpec, choose_local_size, create_backend, opencl, opengl
from gpu_delegate.backends.base import DeviceInfo
from gpu_delegate.backends.codegen import literal

from .reference import assert_float_close, run, run_litert, runner_of
from .single_op import Const, In, Out, single_op

KINDS = ["cl", "gl"]


@pytest.fixture(scope="module", params=KINDS)
def backend(request):
    try:
        be = create_backend(request.param)
    except gd.DelegateError as e:
        pytest.skip(f"backend {request.param} is not available here: {e}")
    yield be
    be.close()


def phwc4(x: np.ndarray) -> np.ndarray:
    """numpy's own PHWC4 layout: (B, S, H, W, 4), zero padding channels, flattened."""
    b, h, w, c = x.shape
    s = -(-c // 4)
    p = np.zeros((b, h, w, 4 * s), x.dtype)
    p[..., :c] = x
    return p.reshape(b, h, w, s, 4).transpose(0, 3, 1, 2, 4).reshape(-1)


def f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


# y = relu(2 x + w) - 0.25 per channel; the helper reads a buffer, so it takes BUFS_DECL
AFFINE_HELPERS = """
FLT4 bias(int s BUFS_DECL) { return w_read(s); }
"""
AFFINE_BODY = """
int b = GID_Z / y_S;
int s = GID_Z - b * y_S;
FLT4 v = max(FMA(x_read(x_idx(b, GID_Y, GID_X, s)), SPLAT(2.0f), bias(s BUFS)), 0.0f) - OFFSET;
y_write(y_idx(b, GID_Y, GID_X, s), ZERO_PAD(v, s, y_C));
"""


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("channels", [5, 7, 13])
def test_kernel_matches_numpy(backend, precision, channels):
    rng = np.random.default_rng(channels)
    shape = (2, 3, 4, channels)
    slices = -(-channels // 4)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(channels).astype(np.float32)
    spec = KernelSpec("affine_relu", AFFINE_BODY, [Arg("x", "in", shape), Arg("w", "const"), Arg("y", "out", shape)],
                      grid=(4, 3, 2 * slices), defines={"OFFSET": 0.25}, helpers=AFFINE_HELPERS, precision=precision)
    program = backend.compile(spec)
    n = 2 * slices * 3 * 4
    xb, wb, yb = backend.alloc(n, precision), backend.alloc(slices, precision), backend.alloc(n, precision)
    backend.to_device(x, xb, shape)
    w_padded = np.zeros(4 * slices, np.float32)
    w_padded[:channels] = w
    backend.upload(wb, w_padded)
    program([xb, wb, yb])
    if precision == "fp16":  # fp16 storage, float32 arithmetic, rounded when stored
        x, w = f16(x), f16(w)
    want = np.maximum(x * np.float32(2) + w, np.float32(0)) - np.float32(0.25)
    if precision == "fp16":
        want = f16(want)
    # padding channels hold 0, not relu(0) - 0.25: ZERO_PAD did its job
    np.testing.assert_array_equal(backend.download(yb).astype(np.float32), phwc4(want))
    np.testing.assert_array_equal(backend.from_device(yb, shape), want)


def test_a_kernel_generic_in_its_channels_serves_every_channel_count(backend):
    """A spec with runtime_channels takes its channel counts and grid as arguments on OpenCL: one source (one
    driver program, one PoCL work-group function per size) for every channel count; each result is numpy's."""
    rng = np.random.default_rng(3)
    programs = []
    for channels in (5, 7, 13):  # (a multiple of 4 has no padding lanes to zero: a text of its own)
        shape = (2, 3, 4, channels)
        slices = -(-channels // 4)
        x = rng.standard_normal(shape).astype(np.float32)
        w = np.zeros(4 * slices, np.float32)
        w[:channels] = rng.standard_normal(channels)
        spec = KernelSpec("affine_relu", AFFINE_BODY, [Arg("x", "in", shape), Arg("w", "const"),
                                                         Arg("y", "out", shape)],
                          grid=(4, 3, 2 * slices), defines={"OFFSET": 0.25}, helpers=AFFINE_HELPERS,
                          runtime_channels=True)
        program = backend.compile(spec)
        n = 2 * slices * 3 * 4
        xb, wb, yb = backend.alloc(n), backend.alloc(slices), backend.alloc(n)
        backend.to_device(x, xb, shape)
        backend.upload(wb, w)
        program([xb, wb, yb])
        want = np.maximum(x * np.float32(2) + w[:channels], np.float32(0)) - np.float32(0.25)
        np.testing.assert_array_equal(backend.download(yb), phwc4(want))
        programs.append(program)
    if backend.name == "cl":
        assert len({p.source for p in programs}) == 1 and len({p.values for p in programs}) == 3
    else:  # GLSL has them as constants
        assert len({p.source for p in programs}) == 3


def test_a_generic_kernel_serving_one_layer_size_keeps_its_constants():
    """PlanRunner takes channel counts at run time only where layers then share a program: a generic kernel whose
    text would serve one layer size keeps its constants (cheaper code); two sizes share one generic text."""
    from types import SimpleNamespace

    from gpu_delegate.runner import PlanRunner

    backend = create_backend("cl")
    runner = SimpleNamespace(backend=backend, boundary=[])

    def spec(channels: int, h: int = 3) -> KernelSpec:
        shape = (1, h, 4, channels)
        return KernelSpec("affine_relu", AFFINE_BODY, [Arg("x", "in", shape), Arg("w", "const"),
                                                       Arg("y", "out", shape)],
                          grid=(4, h, -(-channels // 4)), defines={"OFFSET": 0.25}, helpers=AFFINE_HELPERS,
                          runtime_channels=True)

    kept = PlanRunner._share_channels(runner, [spec(5), spec(5), spec(7), spec(6, h=2)],
                                      lambda s: backend.source(s, backend.local_size(s)))
    assert [s.runtime_channels for s in kept] == [True, True, True, False]
    assert len({opencl.codegen.opencl_source(s) for s in kept[:3]}) == 1


def test_placed_parts_of_one_concatenation_share_a_program(backend):
    """Kernels writing different slices of one larger tensor (Arg.placed) differ in their first slice only: on
    OpenCL that is an argument, and the parts' program is one; every part lands where numpy puts it."""
    rng = np.random.default_rng(4)
    body = "int s = GID_Z; y_write(y_idx(0, GID_Y, GID_X, s), x_read(x_idx(0, GID_Y, GID_X, s)));\n"
    total = np.zeros((1, 3, 2, 12), np.float32)
    out = backend.alloc(3 * 3 * 2)
    programs = []
    for first in range(3):
        x = rng.standard_normal((1, 3, 2, 4)).astype(np.float32)
        total[..., 4 * first:4 * first + 4] = x
        xb = backend.alloc(3 * 2)
        backend.to_device(x, xb, x.shape)
        spec = KernelSpec("part", body, [Arg("x", "in", x.shape), Arg("y", "out", x.shape, placed=(first, 3))],
                          grid=(2, 3, 1))
        programs.append(backend.compile(spec))
        programs[-1]([xb, out])
    np.testing.assert_array_equal(backend.from_device(out, total.shape), total)
    assert len({p.source for p in programs}) == (1 if backend.name == "cl" else 3)


def test_a_preprocessor_test_of_a_run_time_value_is_refused():
    """The preprocessor reads an unknown name as 0: a generic kernel whose #if reads its channel count (directly
    or through a macro) would silently take the wrong branch, so its source is refused."""
    body = "#define WIDE (y_C > 4)\n#if WIDE\ny_write(0, SPLAT(1.0f));\n#endif\n"
    spec = KernelSpec("k", body, [Arg("y", "out", (1, 1, 1, 8))], grid=(1, 1, 1), runtime_channels=True)
    with pytest.raises(ValueError, match="y_C"):
        opencl.codegen.opencl_source(spec)
    opencl.codegen.opencl_source(dataclasses.replace(spec, runtime_channels=False))  # constants: fine


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 3, 8), (2, 2, 1, 13), (1, 40, 30, 15), (2, 30, 25, 16)])
def test_round_trip(backend, precision, shape):
    """to_device then from_device: small tensors come back through the host's reorder, the last two (more than
    HOST_REORDER_VEC4 vec4) through the conversion kernels (on a CPU's OpenCL its run of pixels a work item, whole
    slices and a batch of 2 in the last)."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 100).astype(np.float32)
    n = shape[0] * -(-shape[3] // 4) * shape[1] * shape[2]
    t = backend.alloc(n, precision)
    backend.to_device(x, t, shape)
    stored = x if precision == "fp32" else f16(x)
    np.testing.assert_array_equal(backend.download(t).astype(np.float32), phwc4(stored))
    back = backend.from_device(t, shape)
    assert back.dtype == np.float32 and back.shape == shape
    np.testing.assert_array_equal(back, stored)


def _fp16_edge_floats(rng: np.random.Generator, n: int) -> np.ndarray:
    """n float32 values where a conversion to half can go wrong: each finite half, the float just below and above
    it, the midpoints to the next half (ties to even) and just off them, across normals and subnormals; around the
    largest half (65504, 65520 rounds to Inf); signed zeros, Inf, NaN, values far past either end; random ones."""
    halves = np.arange(0x7c00, dtype=np.uint16).view(np.float16).astype(np.float64)  # every finite positive half
    mids = (halves[:-1] + halves[1:]) / 2  # exact in float32 (12 significant bits)
    f32 = np.float32
    picks = [halves.astype(f32), mids.astype(f32),
             np.nextafter(mids.astype(f32), f32(np.inf)), np.nextafter(mids.astype(f32), f32(0))]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, 65535.9, 65536, 1e10, 2.0**-25,
                        2.0**-25 * 1.0000001, 2.0**-24, 1.5 * 2.0**-24, 1e-30, 1e-45, 2.0**-14, 2.0**-14 * 0.99999],
                       np.float32)
    values = np.concatenate([rng.choice(np.concatenate(picks), n - 2 * special.size - n // 8), special, -special,
                             rng.standard_normal(n // 8).astype(f32) * 1000])
    values[rng.random(values.size) < 0.5] *= -1
    return values.astype(f32)


READ_EACH_VALUE = """
int b = GID_Z / y_S;
int s = GID_Z - b * y_S;
int i = y_idx(b, GID_Y, GID_X, s);
y_write(i, MAKE_FLT4(x_read1(4 * i), x_read1(4 * i + 1), x_read1(4 * i + 2), x_read1(4 * i + 3)));
"""


READ_4_VEC4 = """
int b = GID_Z / y_S;
int s = GID_Z - b * y_S;
int i = y_idx(b, GID_Y, 4 * GID_X, s);
float16 v = x_read16(i);
y_write(i, v.s0123);
y_write(i + 1, v.s4567);
y_write(i + 2, v.s89ab);
y_write(i + 3, v.scdef);
"""


def test_fp16_storage_conversions_are_exact(backend):
    """fp16 storage's conversions (OpenCL's vload_half* / vstore_half4_rte, on a CPU device the prelude's own: x86's
    F16C instructions, else an inlined scalar load; GL's unpackHalf2x16 / packHalf2x16): every one of the 65536
    halves read as numpy's float32 of it, through a tensor's vec4 reads (the conversion kernel), one value at a time
    (t_read1, the 1x1 convolutions' inner loop) and, on OpenCL, 4 vec4 at a time (t_read16), and float32 values at
    every edge of the rounding stored as numpy's float16 of them (round to nearest even), bit for bit (NaNs as
    NaNs)."""
    shape = (1, 32, 32, 64)
    every_half = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(shape)
    t = backend.alloc(65536 // 4, "fp16")
    backend.upload(t, phwc4(every_half))
    want = every_half.astype(np.float32)
    nan = np.isnan(want)
    got = backend.from_device(t, shape)  # more than HOST_REORDER_VEC4 vec4: the conversion kernel
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    reads = [("read_each_value", READ_EACH_VALUE, (32, 32, 16))]
    if backend.name == "cl":
        reads.append(("read_4_vec4", READ_4_VEC4, (8, 32, 16)))
    for name, body, grid in reads:
        spec = KernelSpec(name, body, [Arg("x", "in", shape), Arg("y", "out", shape, "fp32")], grid=grid,
                          precision="fp16")
        y = backend.alloc(65536 // 4, "fp32")
        backend.compile(spec)([t, y])
        got = backend.download(y).reshape(1, 16, 32, 32, 4).transpose(0, 2, 3, 1, 4).reshape(shape)
        assert np.array_equal(np.isnan(got), nan), name
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32), err_msg=name)

    x = _fp16_edge_floats(np.random.default_rng(7), 65536).reshape(shape)
    backend.to_device(x, t, shape)
    stored = backend.download(t).view(np.uint16)
    with np.errstate(over="ignore"):  # the values past the largest half become Inf, as they should
        want_h = phwc4(x.astype(np.float16))
    nan = np.isnan(want_h)
    assert np.array_equal(np.isnan(stored.view(np.float16)), nan)
    values, got_bits, want_bits = phwc4(x)[~nan], stored[~nan], want_h[~nan].view(np.uint16)
    bad = np.flatnonzero(got_bits != want_bits)[:8]
    assert bad.size == 0, [(float(values[k]), hex(got_bits[k]), hex(want_bits[k])) for k in bad]


def test_round_trip_float16_arrays(backend):
    shape = (2, 3, 4, 5)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float16)
    t = backend.alloc(2 * 2 * 3 * 4, "fp32")
    backend.to_device(x, t, shape)
    back = backend.from_device(t, shape, dtype=np.float16)
    assert back.dtype == np.float16
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize(("dtype", "scale", "zero_point"), [(np.int8, 0.0173, -5), (np.uint8, 0.5, 128)])
def test_quantized_codes_to_device(backend, precision, dtype, scale, zero_point):
    """to_device of int8/uint8 codes with (scale, zero_point) stores scale * (q - zero_point), rounded as float32,
    whether the backend dequantizes on the device (OpenCL) or on the host; a count of values that is no multiple
    of 4 leaves a partial last word of codes."""
    shape = (2, 3, 5, 7)
    info = np.iinfo(dtype)
    q = np.random.default_rng(3).integers(info.min, info.max + 1, shape).astype(dtype)
    t = backend.alloc(2 * 2 * 3 * 5, precision)
    backend.to_device(q, t, shape, quant=(scale, zero_point))
    want = ((q.astype(np.float64) - zero_point) * np.float64(np.float32(scale))).astype(np.float32)
    np.testing.assert_array_equal(backend.from_device(t, shape), want if precision == "fp32" else f16(want))
    with pytest.raises(ValueError, match="int8 or uint8"):
        backend.to_device(q.astype(np.int16), t, shape, quant=(scale, zero_point))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(2, 1, 1, 7), (1, 5, 3, 3), (2, 3, 4, 13), (1, 1, 1, 16), (2, 2, 2, 4),
                                   (1, 40, 30, 15), (1, 1, 1, 20001), (3, 1, 1, 8000), (1, 90, 70, 4),
                                   (2, 1, 1, 9001), (1, 90, 70, 3), (2, 30, 40, 12), (2, 60, 40, 1),
                                   (1, 80, 60, 2), (2, 35, 31, 7)])
def test_invoke_routes(backend, precision, shape):
    """Backend.invoke: inputs in through their routes, a kernel, outputs back, in one trip with one wait at the
    end. Small tensors are reordered on the host and written straight into the tensor; large ones that PHWC4
    stores in their own order too ((1, 1, 1, 20001), (3, 1, 1, 8000), (1, 90, 70, 4)); the other large ones
    through the conversion kernels (whole slices, and 1, 2, 3 or 7 channels whose vec4s span pixels and
    batches). The tensors held other values before, padding channels included: the
    route writes those zeros too."""
    rng = np.random.default_rng(sum(shape))
    b, h, w, c = shape
    slices = -(-c // 4)
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    spec = KernelSpec("affine_relu", AFFINE_BODY, [Arg("x", "in", shape), Arg("w", "const"), Arg("y", "out", shape)],
                      grid=(w, h, b * slices), defines={"OFFSET": 0.25}, helpers=AFFINE_HELPERS, precision=precision)
    n = b * slices * h * w
    xb, wb, yb = backend.alloc(n, precision), backend.alloc(slices, precision), backend.alloc(n, precision)
    backend.upload(xb, np.full(4 * n, 3.0, np.float32))
    backend.upload(wb, np.pad(bias, (0, 4 * slices - c)))
    bound = backend.bind([(backend.compile(spec), [xb, wb, yb])])
    route_in = backend.input_route(xb, shape)
    routes_out = [backend.output_route(yb, shape), backend.output_route(xb, shape)]
    converted = shape in [(1, 40, 30, 15), (2, 1, 1, 9001), (1, 90, 70, 3), (2, 30, 40, 12), (2, 60, 40, 1),
                          (1, 80, 60, 2), (2, 35, 31, 7)]
    assert bool(route_in.convert) == converted and bool(routes_out[0].convert) == converted
    for k in range(2):  # the second invoke reuses what the first set up
        x = x + k
        y, x_back = backend.invoke([(route_in, x)], bound, routes_out)
        stored = x if precision == "fp32" else f16(x)
        want = np.maximum(stored * np.float32(2) + (bias if precision == "fp32" else f16(bias)), np.float32(0))
        want = want - np.float32(0.25)
        np.testing.assert_array_equal(backend.download(xb).astype(np.float32), phwc4(stored))
        assert y.dtype == np.float32 and y.shape == shape
        np.testing.assert_array_equal(y, want if precision == "fp32" else f16(want))
        np.testing.assert_array_equal(x_back, stored)
    with pytest.raises(ValueError, match="does not fill"):
        backend.invoke([(route_in, x[..., :-1])], bound, routes_out)


def test_a_failed_invoke_leaves_no_transfer_in_flight(backend, monkeypatch):
    """A dispatch failing after the inputs went up: invoke waits for the transfers it enqueued before raising,
    so the caller may change its arrays at once (a large input is written from the caller's own array)."""
    shape = (1, 40, 30, 15)
    t = backend.alloc(40 * 30 * 4)
    route = backend.input_route(t, shape)
    settled: list[bool] = []
    real_settle = backend._settle

    def settle():
        settled.append(True)
        real_settle()

    def lost(bound):
        if bound is not route.convert:
            raise gd.DelegateError("device lost (simulated)")

    monkeypatch.setattr(backend, "_settle", settle)
    monkeypatch.setattr(backend, "_dispatch_bound", lost)
    with pytest.raises(gd.DelegateError, match="simulated"):
        backend.invoke([(route, np.ones(shape, np.float32))], [object()], [])
    assert settled == [True]
    assert not getattr(backend, "_transfers", [])


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 50, 40, 9), (1, 1, 1, 20001)])
@pytest.mark.parametrize(("dtype", "scale", "zero_point"), [(np.int8, 0.0173, -5), (np.uint8, 0.5, 128)])
def test_invoke_routes_codes(backend, shape, dtype, scale, zero_point):
    """An input route of int8/uint8 codes stores scale * (q - zero_point) rounded as float32: dequantized on the
    host where the route writes the tensor itself (small, or stored in its own order), else on the device where
    the backend can."""
    info = np.iinfo(dtype)
    q = np.random.default_rng(3).integers(info.min, info.max + 1, shape).astype(dtype)
    b, h, w, c = shape
    t = backend.alloc(b * -(-c // 4) * h * w, "fp32")
    route = backend.input_route(t, shape, (scale, zero_point, np.dtype(dtype)))
    (back,) = backend.invoke([(route, q)], [], [backend.output_route(t, shape)])
    want = ((q.astype(np.float64) - zero_point) * np.float64(np.float32(scale))).astype(np.float32)
    np.testing.assert_array_equal(back, want)
    np.testing.assert_array_equal(backend.download(t), phwc4(want))
    with pytest.raises(ValueError, match="codes"):
        backend.invoke([(route, q.astype(np.int16))], [], [])


# (7, 5, 3), (1, 4, 32) and (3, 1, 5) are narrower than a SIMD batch along x: GL flattens x and y, or all three,
# into one x (codegen.flat_dims); (16, 3, 2) and (2, 2, 1) keep a 3-D dispatch
@pytest.mark.parametrize("grid, local_size", [((7, 5, 3), (4, 4, 2)), ((7, 5, 3), None), ((1, 4, 32), None),
                                              ((3, 1, 5), None), ((16, 3, 2), None), ((2, 2, 1), None)])
def test_grid_not_a_multiple_of_the_local_size(backend, grid, local_size):
    body = """
int i = (GID_Z * GRID_Y + GID_Y) * GRID_X + GID_X;
o_write(i, MAKE_FLT4(TO_FLT(GID_X), TO_FLT(GID_Y), TO_FLT(GID_Z), 1.0f));
"""
    spec = KernelSpec("ids", body, [Arg("o", "out")], grid, local_size=local_size)
    program = backend.compile(spec)
    if local_size:
        assert program.local_size == local_size
    elif backend.name == "gl":
        flattened = program.local_size[0] >= 2 * grid[0]
        assert flattened == (grid[0] < 8 and math.prod(grid) >= 8), program.local_size
    n = math.prod(grid)
    out = backend.alloc(n + 8)
    backend.upload(out, np.full((n + 8) * 4, -1, np.float32))
    program([out])
    z, y, x = np.mgrid[0:grid[2], 0:grid[1], 0:grid[0]]
    want = np.stack([x, y, z, np.ones_like(x)], -1).reshape(-1).astype(np.float32)
    got = backend.download(out)
    np.testing.assert_array_equal(got[: 4 * n], want)
    np.testing.assert_array_equal(got[4 * n:], -1)  # nothing written past the grid


def test_compile_error_names_the_kernel_and_shows_the_log(backend):
    spec = KernelSpec("broken_kernel", "o_write(0, undeclared_thing);", [Arg("o", "out")], (1, 1, 1))
    with pytest.raises(gd.DelegateError, match="broken_kernel") as e:
        backend.compile(spec)
    # the compiler's own line (the source, numbered after it, names the identifier too)
    assert any("undeclared_thing" in line and "o_write" not in line for line in str(e.value).splitlines()), e.value


DIALECT_BODY = """
int i = GID_X;
FLT4 a = a_read(i);
FLT4 b = b_read(i);
FLT4 c = c_read(i);
o_write(K * i + 0, FMOD(a, b));
o_write(K * i + 1, MAKE_FLT4(FMOD(a.x, b.x), FMOD(a.y, b.y), FMOD(a.z, b.z), FMOD(a.w, b.w)));
o_write(K * i + 2, ROUND(a));
o_write(K * i + 3, MAKE_FLT4(ROUND(a.x), RINT(a.y), RINT(a.z), RINT(a.w)));
o_write(K * i + 4, FABS(a));
o_write(K * i + 5, RSQRT(FABS(b)));
o_write(K * i + 6, LT4(a, b) + 2.0f * GE4(a, b) + 4.0f * EQ4(a, b) + 8.0f * NE4(a, b));
o_write(K * i + 7, LE4(a, b) + 2.0f * GT4(a, b));
o_write(K * i + 8, SELECT4(a, b, LT4(b, a)));
float e[4];
for (int k = 0; k < 4; k++) {
  e[k] = LANE(a, 3 - k);
}
o_write(K * i + 9, MAKE_FLT4(e[0], e[1], e[2], e[3]));
o_write(K * i + 10, TO_FLT4(TO_INT4(a)) + SPLAT(TO_FLT(TO_INT(b.x))));
o_write(K * i + 11, FMA(a, b, c));
o_write(K * i + 12, a * b + c);
o_write(K * i + 13, ATAN2(a, b));
o_write(K * i + 14, MAKE_FLT4(PI_F32, BIG_NEG, INF_POS, TO_FLT(INT_DEF)));
o_write(K * i + 15, MAKE_FLT4(EXP_DEF, 0.0f, 0.0f, 0.0f));
FLT4 t = b;
t.xz = a.zx;
o_write(K * i + 16, t);
#if K > 16
o_write(K * i + 17, i % 2 == 0 ? clamp(a, -1.0f, 1.0f) : b);
#endif
"""


def test_qround(backend):
    """QROUND(x, lo, hi) is C round() of x clamped to [lo, hi] (a NaN gives lo on OpenCL; GLSL leaves clamp of a
    NaN undefined): halves away from zero, in and out of range."""
    x = np.array([-300.0, -5.5, -2.5, -0.5, -0.49, 0.0, 0.5, 1.5, 2.5, 3.4999998, 99.5, 1e9, 7.25, -0.75, 126.5,
                  np.nan if backend.name == "cl" else 1.0], np.float32)
    lo, hi = -128.0, 127.0
    spec = KernelSpec("qround", "o_write(GID_X, QROUND(x_read(GID_X), LO, HI));", [Arg("x", "in"), Arg("o", "out")],
                      (4, 1, 1), {"LO": lo, "HI": hi})
    xb, ob = backend.alloc(4), backend.alloc(4)
    backend.upload(xb, x)
    backend.compile(spec)([xb, ob])
    c = np.clip(np.nan_to_num(x.astype(np.float64), nan=lo), lo, hi)
    np.testing.assert_array_equal(backend.download(ob), (np.sign(c) * np.floor(np.abs(c) + 0.5)).astype(np.float32))


def test_dialect_functions(backend):
    e = np.float32(2.0**-12)
    a = np.array([[5.5, -5.5, 7.0, -7.25], [0.5, 1.5, 2.5, -2.5], [0.49999997, -0.5, 3.0, 1e9],
                  [1 + e, 16777215.0, -3.0, 0.0], [32.99565505981445, 89.4086685180664, -49.42863845825195, 1e7]],
                 np.float32)
    b = np.array([[2.0, 2.0, -3.0, 0.5], [0.5, 1.0, 3.0, -2.5], [0.1, 0.3, 3.0, 1e8],
                  [1 + e, 3.0, 0.75, 1.0], [0.1021537333726883, 0.07891321182250977, 2.0595266819000244, 0.1]],
                 np.float32)
    # rows 0-3: signs, halves, ties; row 4: x / y rounds up to the next integer in float32
    c = np.full(a.shape, -(1 + 2 * e), np.float32)
    k = 18
    defines = {"K": k, "PI_F32": np.pi, "BIG_NEG": -1.5e30, "INF_POS": float("inf"), "INT_DEF": -7,
               "EXP_DEF": 1e-7}
    spec = KernelSpec("dialect", DIALECT_BODY,
                      [Arg("a", "in"), Arg("b", "in"), Arg("c", "in"), Arg("o", "out")], (5, 1, 1), defines)
    bufs = [backend.alloc(5) for _ in range(3)] + [backend.alloc(5 * k)]
    for buf, v in zip(bufs, (a, b, c)):
        backend.upload(buf, v)
    backend.compile(spec)(bufs)
    o = backend.download(bufs[3]).reshape(5, k, 4)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(o[:, 0], np.fmod(a, b))
        np.testing.assert_array_equal(o[:, 1], np.fmod(a, b))
        a64 = a.astype(np.float64)  # exact halves test: |a| + 0.5 is exact in float64
        half_away = (np.sign(a64) * np.floor(np.abs(a64) + 0.5)).astype(np.float32)
        np.testing.assert_array_equal(o[:, 2], half_away)
        np.testing.assert_array_equal(o[:, 3, 0], half_away[:, 0])
        np.testing.assert_array_equal(o[:, 3, 1:], np.rint(a[:, 1:]))
        np.testing.assert_array_equal(o[:, 4], np.abs(a))
        np.testing.assert_allclose(o[:, 5], 1 / np.sqrt(np.abs(b.astype(np.float64))), rtol=1e-6)
        np.testing.assert_array_equal(o[:, 6], (a < b) + 2.0 * (a >= b) + 4.0 * (a == b) + 8.0 * (a != b))
        np.testing.assert_array_equal(o[:, 7], (a <= b) + 2.0 * (a > b))
        np.testing.assert_array_equal(o[:, 8], np.where(b < a, b, a))
        np.testing.assert_array_equal(o[:, 9], a[:, ::-1])
        np.testing.assert_array_equal(o[:, 10], np.trunc(a) + np.trunc(b[:, :1]))
    # (1 + e)^2 - (1 + 2e) is e^2 exactly; rounding the product first loses it
    fused = (a.astype(np.float64) * b + c).astype(np.float32)
    unfused = a * b + c
    assert fused[3, 0] == e * e and unfused[3, 0] == 0
    if backend.name == "cl":
        np.testing.assert_array_equal(o[:, 11], fused)
        np.testing.assert_array_equal(o[:, 12], unfused)  # FP_CONTRACT OFF: plain arithmetic is never contracted
    else:
        # GLSL may contract a product and sum wherever it likes (no `precise` in ES 3.1): llvmpipe never does,
        # NVIDIA's compiler fused the FMA line and not the plain one
        for column in (11, 12):
            np.testing.assert_array_equal(o[:, column], np.where(o[:, column] == fused, fused, unfused))
        if "llvmpipe" in backend.device_info()["name"]:
            np.testing.assert_array_equal(o[:, 11], unfused)
    np.testing.assert_allclose(o[:, 13], np.arctan2(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(o[0, 14], np.array([np.pi, -1.5e30, np.inf, -7], np.float32))
    assert o[0, 15, 0] == np.float32(1e-7)
    np.testing.assert_array_equal(o[:, 16], np.stack([a[:, 2], b[:, 1], a[:, 0], b[:, 3]], 1))
    np.testing.assert_array_equal(o[:, 17], np.where(np.arange(5)[:, None] % 2 == 0, np.clip(a, -1, 1), b))


def test_literals():
    assert literal(3) == "3" and literal(-3) == "(-3)" and literal(True) == "1"
    assert literal(0.1) == "0.1f" and literal(-2.5) == "(-2.5f)" and literal(1e-7) == "1e-07f"
    assert literal(float("-inf")) == "(-INF_F)" and literal("x + 1") == "x + 1"
    with pytest.raises(ValueError):
        literal(2**31)
    with pytest.raises(TypeError):
        literal(None)


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="role"):
        Arg("x", "inout")
    with pytest.raises(ValueError, match="identifier"):
        Arg("gl_x", "in")
    with pytest.raises(ValueError, match="identifier"):
        KernelSpec("a__b", "", [], (1, 1, 1))
    with pytest.raises(ValueError, match="clashes"):
        KernelSpec("k", "", [Arg("x", "in", (1, 1, 1, 4))], (1, 1, 1), defines={"x_S": 2})
    with pytest.raises(ValueError, match=r"kernel k: grid \(0, 1, 1\) must be 3 positive sizes"):
        KernelSpec("k", "", [], (0, 1, 1))
    with pytest.raises(ValueError, match=r"kernel k: local_size \(4, 4\) must be 3 positive sizes"):
        KernelSpec("k", "", [], (8, 8, 1), local_size=[4, 4])
    assert KernelSpec("k", "", [], [np.int64(8), 8, 1], local_size=[4, 4, 1]).local_size == (4, 4, 1)
    for defines in ({}, {"SCALE": "0.5f"}):  # a constant a kernel may take at run time is a number it defines
        with pytest.raises(ValueError, match="kernel k: constant 'SCALE' is not a number among its defines"):
            KernelSpec("k", "", [], (1, 1, 1), defines=defines, constants=("SCALE",))


def test_wrong_buffers_are_refused(backend):
    spec = KernelSpec("copy", "y_write(GID_X, x_read(GID_X));", [Arg("x", "in"), Arg("y", "out", (1, 1, 2, 4))],
                      (2, 1, 1))
    program = backend.compile(spec)
    with pytest.raises(gd.DelegateError, match="takes 2 buffers"):
        program([backend.alloc(2)])
    with pytest.raises(gd.DelegateError, match="argument 'y' needs 2 vec4 of fp32"):
        program([backend.alloc(2), backend.alloc(2, "fp16")])


def test_one_work_group_shares_memory(backend):
    """A kernel whose work items share arrays (// @shared in its file: KernelSpec.shared) runs as one work group
    with no work item returned early: each writes its vec4 into the shared array, and after BARRIER() reads
    another's (the group reversed), twice over so that the second barrier's writes are seen too. A spec whose local
    size is not its grid is refused."""
    body = ("ring[GID_X] = x_read(GID_X);\nBARRIER();\nFLT4 v = ring[GRID_X - 1 - GID_X];\nBARRIER();\n"
            "ring[GID_X] = v * SPLAT(2.0f);\nBARRIER();\ny_write(GID_X, ring[(GID_X + 1) % GRID_X]);\n")
    n = 48
    spec = KernelSpec("mirror", body, [Arg("x", "in"), Arg("y", "out")], (n, 1, 1), local_size=(n, 1, 1),
                      shared=(("ring", str(n)),))
    x, y = backend.alloc(n), backend.alloc(n)
    values = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
    backend.upload(x, values)
    backend.compile(spec)([x, y])
    mirrored = 2 * values[::-1]
    np.testing.assert_array_equal(backend.download(y, n).reshape(n, 4), np.roll(mirrored, -1, axis=0))
    with pytest.raises(ValueError, match="runs as one work group"):
        KernelSpec("mirror", body, [Arg("x", "in"), Arg("y", "out")], (n, 1, 1), local_size=(16, 1, 1),
                   shared=(("ring", str(n)),))


def _square_spec(value: float = 0.0) -> KernelSpec:
    return KernelSpec("square", "y_write(GID_X, x_read(GID_X) * x_read(GID_X) + ADD);",
                      [Arg("x", "in"), Arg("y", "out")], (3, 1, 1), {"ADD": value})


def test_program_binary_round_trip(backend, fresh_programs):
    if backend.device_info().get("program_binary_formats") == 0:
        pytest.skip("this GL driver keeps no program binaries (Mesa: shader cache disabled)")
    program = backend.compile(_square_spec())
    assert backend.compile(_square_spec()) is program  # compiled once per instance
    binary = backend.program_binary(program)
    fresh = create_backend(backend.name)  # a new instance has no program yet: it must load the binary
    loaded = fresh.compile(_square_spec(), binary=binary)
    x = np.arange(12, dtype=np.float32)
    xb, yb = fresh.alloc(3), fresh.alloc(3)
    fresh.upload(xb, x)
    loaded([xb, yb])
    np.testing.assert_array_equal(fresh.download(yb), x * x)
    with pytest.raises(gd.DelegateError, match="another source"):
        fresh.compile(_square_spec(1.0), binary=binary)
    with pytest.raises(gd.DelegateError, match="corrupt"):
        fresh.compile(_square_spec(2.0), binary=backend.program_binary(backend.compile(_square_spec(2.0)))[:-7])
    with pytest.raises(gd.DelegateError, match="another source"):
        fresh.compile(_square_spec(3.0), binary=b"not a binary")
    fresh.close()


def test_profiling_times_each_dispatch(backend):
    be = create_backend(backend.name, profile=True)
    program = be.compile(_square_spec())
    xb, yb = be.alloc(3), be.alloc(3)
    be.dispatch_all([(program, [xb, yb]), (program, [yb, xb])])
    timings = be.take_timings()
    assert [name for name, _ in timings] == ["square", "square"]
    assert all(isinstance(ns, int) and ns > 0 for _, ns in timings)
    assert be.take_timings() == []
    be.close()


def test_any_thread_may_call(backend):
    """GL work runs on the context's own thread; CL serializes its calls: both are safe from any thread."""
    program = backend.compile(_square_spec())

    def work(k: int) -> np.ndarray:
        xb, yb = backend.alloc(3), backend.alloc(3)
        for _ in range(5):
            backend.upload(xb, np.arange(12, dtype=np.float32) + k)
            program([xb, yb])
            out = backend.download(yb)
        return out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for k in range(4):
        x = np.arange(12, dtype=np.float32) + k
        np.testing.assert_array_equal(results[k], x * x)


def test_backend_created_on_another_thread():
    made = []
    thread = threading.Thread(target=lambda: made.append(create_backend("gl")))
    try:
        create_backend("gl")
    except gd.DelegateError as e:
        pytest.skip(f"OpenGL is not available here: {e}")
    thread.start()
    thread.join()
    be = made[0]
    x = np.arange(12, dtype=np.float32)
    xb, yb = be.alloc(3), be.alloc(3)
    be.upload(xb, x)
    be.compile(_square_spec())([xb, yb])
    np.testing.assert_array_equal(be.download(yb), x * x)
    be.close()


def test_device_info(backend):
    info = backend.device_info()
    for key in ("name", "vendor", "driver_version", "max_work_group_size", "max_work_group_dims", "has_fp16"):
        assert key in info
    assert backend.device_info() == info
    # what backends.base.DeviceInfo declares: every required key, nothing undeclared
    declared = DeviceInfo.__required_keys__ | DeviceInfo.__optional_keys__
    assert DeviceInfo.__required_keys__ <= info.keys() <= declared, sorted(info.keys() ^ declared)


def test_every_gl_entry_point_is_declared():
    assert set(opengl._GLFunctions.__annotations__) == {name.removeprefix("gl") for name in opengl._SIGNATURES}


def test_opencl_build_options_keep_ieee_numerics():
    for flag in ("-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations", "-cl-finite-math-only",
                 "-cl-denorms-are-zero", "-cl-mad-enable"):
        assert flag not in opencl.BUILD_OPTIONS


def test_opencl_divides_exactly_where_the_device_can():
    """The fake-quant step rounds a quotient: a 2.5-ulp division (OpenCL's default, NVIDIA's) moves rounding ties
    by a step (int8 CONCATENATION across scales on an H100: 2.4% of values), so every program asks for correctly
    rounded division on a device that offers it."""
    import pyopencl as cl

    backend = create_backend("cl")
    if not backend.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        pytest.skip("this OpenCL device offers no correctly rounded division")
    assert opencl.EXACT_DIVISION in backend.build_options.split()


@pytest.mark.parametrize("grid", [(1, 1, 1), (7, 7, 256), (1000, 3, 1), (112, 112, 16), (3, 1, 1), (1, 1, 999)])
def test_local_size_rule(grid):
    info = {"preferred_work_group_size": 64, "max_work_group_size": 48, "max_work_group_dims": (16, 8, 4),
            "compute_units": 2}
    local = choose_local_size(grid, info)
    assert np.prod(local) <= 48 and all(lsz <= d for lsz, d in zip(local, (16, 8, 4)))
    # no dimension is wider than its grid rounded up to a power of two
    assert all(lsz < 2 * g for lsz, g in zip(local, grid))
    groups = np.prod([-(-g // lsz) for g, lsz in zip(grid, local)])
    assert groups >= 4 or local == (1, 1, 1)


def little_model() -> tuple[bytes, np.ndarray]:
    """A 3x3 convolution (relu): ~38 k multiply-adds."""
    rng = np.random.default_rng(5)
    content = single_op("CONV_2D", [In((1, 12, 10, 5)), Const(rng.standard_normal((7, 3, 3, 5)).astype(np.float32)),
                                    Const(rng.standard_normal(7).astype(np.float32))], [Out((1, 12, 10, 7))],
                        padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
    return content, rng.standard_normal((1, 12, 10, 5)).astype(np.float32)


def test_little_work_runs_on_pocls_single_threaded_device(monkeypatch):
    """On PoCL, a plan of little work runs on the single-threaded "basic" device (no hand-off to worker threads
    per kernel), larger ones on the threaded device open_device() chose; both agree with LiteRT."""
    d = gd.GpuDelegate(backend="cl")
    main = d.backend
    small = opencl.open_small_device()
    if small is None:
        pytest.skip(f"no PoCL basic device beside {main.device_info()['name']} (POCL_DEVICES="
                    f"{os.environ.get('POCL_DEVICES')!r}, or not PoCL)")
    assert main.device_info()["name"].startswith("pthread")
    sibling = main.for_work(1e5)
    assert sibling is not main and sibling.device_info()["name"].startswith("basic")
    assert main.for_work(1e5) is sibling  # made once per backend
    assert main.backends_in_use() == [sibling]  # what reports name as the device
    assert main.for_work(1e9) is main
    assert sibling.for_work(1e5) is sibling
    monkeypatch.setenv(opencl.SMALL_DEVICE_SWITCH, "1")
    assert main.for_work(1e9) is sibling
    content, x = little_model()
    expected = run_litert(content, [x])[0]
    for switch, ran_on in (("", sibling), ("0", main)):
        monkeypatch.setenv(opencl.SMALL_DEVICE_SWITCH, switch)
        it = gd.Interpreter(model_content=content, experimental_delegates=[d])
        out = run(it, [x])[0]
        assert runner_of(it).backend is ran_on
        assert_float_close(out, expected, 1e-5, what=f"on {ran_on.device_info()['name']}")
    # a compile worker builds for the main device only
    assert main.shares_worker_builds and not sibling.shares_worker_builds
    sibling._staging_buffer(3, "fp32")  # as a conversion's: closing the delegate's backend frees the sibling's too
    assert sibling.live_buffers >= 1
    main.close()
    assert sibling.live_buffers == 0


def test_missing_devices_raise_delegate_error(monkeypatch):
    monkeypatch.setattr(opencl.cl, "get_platforms", list)
    with pytest.raises(gd.DelegateError, match="no OpenCL platform"):
        opencl._make_context()
    moderngl = pytest.importorskip("moderngl")

    def no_egl(**kwargs):
        raise RuntimeError("eglInitialize failed")

    monkeypatch.setattr(moderngl, "create_context", no_egl)
    with pytest.raises(gd.DelegateError, match="EGL context creation failed"):
        opengl._Runtime()
    with pytest.raises(ValueError, match="unknown GPU backend"):
        create_backend("vulkan")


@pytest.fixture
def kernel_dir(tmp_path, monkeypatch):
    """An empty kernels/ folder (one subfolder per language) in place of the project's."""
    from gpu_delegate.backends import codegen

    for language in codegen.LANGUAGES:
        (tmp_path / language).mkdir()
    monkeypatch.setattr(codegen, "_KERNEL_DIRS", (tmp_path,))
    codegen.kernel_text.cache_clear()
    codegen.runtime_channels.cache_clear()
    yield tmp_path
    codegen.kernel_text.cache_clear()
    codegen.runtime_channels.cache_clear()


def test_load_kernel_splits_helpers_and_reads_the_language_asked(kernel_dir):
    from gpu_delegate.backends import codegen

    (kernel_dir / "dialect" / "k.dialect").write_text(
        "float h(float v) { return v; }\n// @body\ny_write(0, SPLAT(h(1.0f)));\n")
    (kernel_dir / "glsl" / "k.glsl").write_text("y_write(0, vec4(1.0));\n")
    assert codegen.load_kernel("k") == ("float h(float v) { return v; }\n", "y_write(0, SPLAT(h(1.0f)));\n")
    assert codegen.load_kernel("k", "glsl") == ("", "y_write(0, vec4(1.0));\n")
    with pytest.raises(FileNotFoundError, match="opencl/k.cl"):
        codegen.load_kernel("k", "opencl")  # no silent fallback to the dialect's file
    with pytest.raises(FileNotFoundError, match="dialect/nothing.dialect"):
        codegen.load_kernel("nothing")
    with pytest.raises(ValueError, match="kernel language"):
        codegen.load_kernel("k", "cuda")


def test_kernel_call_runs_its_variant_only_where_asked():
    from gpu_delegate.lowering.plan import KernelCall

    call = KernelCall("conv2d", 0, {}, {}, {}, {}, (1, 1, 1), variants={"opencl": "conv2d_wide"})
    assert call.source("opencl") == ("opencl", "conv2d_wide")
    assert call.source("glsl") == ("dialect", "conv2d")
    assert call.source(None) == ("dialect", "conv2d")


def test_auto_picks_a_working_backend():
    try:
        be = create_backend("auto")
    except gd.DelegateError as e:
        assert "no GPU backend is available" in str(e)
        return
    assert be.name in ("cl", "gl")


def test_kernel_includes(kernel_dir):
    """``// @include FOLDER/FILE`` lines expand (nested), above or below ``// @body``; a missing file, a cycle,
    or a file of a language the includer cannot compile is an error naming the line."""
    from gpu_delegate.backends import codegen

    d, cl = kernel_dir / "dialect", kernel_dir / "opencl"
    (d / "a.inc.dialect").write_text("#define A 1\n// @include dialect/b.inc.dialect\n")
    (d / "b.inc.dialect").write_text("#define B 2\n")
    (d / "k.dialect").write_text("// @include dialect/a.inc.dialect\n// @body\nx = A + B;\n")
    (d / "loop.inc.dialect").write_text("// @include dialect/loop.inc.dialect\n")
    (d / "bad.dialect").write_text("// @include dialect/nowhere.inc.dialect\n")
    (d / "cycle.dialect").write_text("// @include dialect/loop.inc.dialect\n")
    (cl / "wide.inc.cl").write_text("#define W 16\n")
    (d / "api.dialect").write_text("// @include opencl/wide.inc.cl\n")  # GL could not compile this
    (cl / "k.cl").write_text("// @include opencl/wide.inc.cl\n// @include dialect/a.inc.dialect\n// @body\nx = W;\n")
    assert codegen.load_kernel("k") == ("#define A 1\n#define B 2\n", "x = A + B;\n")
    assert codegen.load_kernel("k", "opencl") == ("#define W 16\n#define A 1\n#define B 2\n", "x = W;\n")
    for name in ("bad", "cycle", "api"):
        with pytest.raises(FileNotFoundError, match="kernel include"):
            codegen.load_kernel(name)


def test_a_compiler_log_of_a_clean_build_warns_nobody(monkeypatch, fresh_programs):
    """NVIDIA's OpenCL compiler writes a log for clean builds, on which pyopencl raises a CompilerWarning (seen at every
    first start on an H200): the build keeps it quiet, the log goes to the debug log. PoCL writes none under -w, so the
    driver's build here warns as NVIDIA's made pyopencl warn."""
    import warnings

    import pyopencl as cl

    driver_program = getattr(getattr(cl, "_cl", None), "_Program", None)
    if driver_program is None:
        pytest.skip("this pyopencl has no driver program object")
    try:
        backend = create_backend("cl")
    except gd.DelegateError as e:
        pytest.skip(f"no OpenCL: {e}")
    real_build = driver_program.build

    def chatty_build(self, *args, **kwargs):
        result = real_build(self, *args, **kwargs)
        warnings.warn("Non-empty compiler output encountered.", cl.CompilerWarning, stacklevel=2)
        return result

    monkeypatch.setattr(driver_program, "build", chatty_build)
    spec = KernelSpec("quiet_build", "o_write(GID_X, SPLAT(1.0f));", [Arg("o", "out")], (1, 1, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend.compile(spec)
    assert not [w for w in caught if issubclass(w.category, cl.CompilerWarning)]
