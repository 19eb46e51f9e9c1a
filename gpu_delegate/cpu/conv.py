"""CPU kernels of the convolution family: im2col + BLAS matmul, a direct depthwise kernel, requantization.

Float convolutions are one float32 matmul per group (numpy: BLAS) over an im2col matrix that a numba
kernel builds; a stride-1 1x1 convolution needs no im2col, only a view of its input.

Integer convolutions give TFLite's reference results bit for bit but let BLAS do the multiply-adds: the
products are small integers, and a float32 sum of integers is exact while every partial sum stays within
2^24. The input is moved to the int8 range (x' = x, or x - 128 for uint8) so a product is at most
128 * max|w - w_zp|, and the contraction is cut into chunks short enough to stay within 2^24 (MobileNet's
1x1 layers, K <= 1024 with int8 weights, need one). The x' -> x - x_zp correction is a per-column
constant, added in int64 together with the bias before TFLite's fixed-point requantization.

Threads: every op splits its output rows into one block per thread (numba.get_num_threads(), which the
interpreter sets from num_threads) and runs the blocks on a small pool of Python threads; the numba
kernels release the GIL and so does BLAS. Each block goes through im2col, matmul and bias/activation or
requantization while its rows are in cache. BLAS itself is held to one thread meanwhile: OpenBLAS's own
threads busy-wait for each other, and next to a second pool, or on a machine with other work running,
that made whole models five to ten times slower than running on one thread (measured here).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..graph import ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, PADDING_SAME
from . import jit
from .jit import njit

F32_EXACT = 1 << 24  # every integer of magnitude <= 2^24 is a float32


def float_range(code: int) -> tuple[np.float32, np.float32]:
    """The clamp TFLite's float kernels apply for a fused activation (CalculateActivationRange).

    TANH and SIGN_BIT are not clamps: TFLite's conv, fully-connected and pool kernels ignore them, and so
    do we, to give the answers LiteRT gives.
    """
    if code == ACT_RELU:
        return np.float32(0.0), np.float32(np.inf)
    if code == ACT_RELU6:
        return np.float32(0.0), np.float32(6.0)
    if code == ACT_RELU_N1_TO_1:
        return np.float32(-1.0), np.float32(1.0)
    return np.float32(-np.inf), np.float32(np.inf)


def out_size(padding: int, size: int, filt: int, stride: int, dilation: int = 1) -> int:
    """TFLite's ComputeOutSize."""
    if padding == PADDING_SAME:
        return (size + stride - 1) // stride
    return (size + stride - ((filt - 1) * dilation + 1)) // stride


def pad_before(size: int, filt: int, stride: int, dilation: int, out: int) -> int:
    """TFLite's ComputePaddingWithOffset: padding on the top/left side (an odd one goes bottom/right)."""
    return max((out - 1) * stride + (filt - 1) * dilation + 1 - size, 0) // 2


@dataclass(frozen=True)
class Window:
    """Geometry of a sliding-window op over an NHWC input."""

    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int  # padding top / left
    pl: int
    oh: int
    ow: int

    @staticmethod
    def make(padding: int, h: int, w: int, kh: int, kw: int, sh: int, sw: int, dh: int = 1,
             dw: int = 1) -> Window:
        oh, ow = out_size(padding, h, kh, sh, dh), out_size(padding, w, kw, sw, dw)
        return Window(kh, kw, sh, sw, dh, dw, pad_before(h, kh, sh, dh, oh), pad_before(w, kw, sw, dw, ow),
                      oh, ow)


# -- threads ------------------------------------------------------------------------------------------------

MIN_WORK = 1 << 17  # multiply-adds (or element visits) a block must have to be worth a thread hand-off


class _OpenBLAS:
    """openblas_{get,set}_num_threads of the OpenBLAS that numpy loaded, found through ctypes; absent when
    numpy uses another BLAS or the platform has no /proc/self/maps."""

    def __init__(self) -> None:
        self.get: Callable[[], int] | None = None
        self.set: Callable[[int], None] | None = None
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = 1
        try:
            maps = Path("/proc/self/maps").read_text().splitlines()
        except OSError:
            return
        paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for stem in ("scipy_openblas_", "openblas_"):
                for suffix in ("64_", "_64", ""):
                    get = getattr(lib, f"{stem}get_num_threads{suffix}", None)
                    put = getattr(lib, f"{stem}set_num_threads{suffix}", None)
                    if get is not None and put is not None:
                        get.restype, get.argtypes = ctypes.c_int, []
                        put.restype, put.argtypes = None, [ctypes.c_int]
                        self.get, self.set = get, put
                        return

    @contextmanager
    def serial(self) -> Iterator[None]:
        """One BLAS thread inside the block, the previous count restored after the last nested exit."""
        get, put = self.get, self.set
        if get is None or put is None:
            yield
            return
        with self.lock:
            if self.depth == 0:
                self.saved = get()
                put(1)
            self.depth += 1
        try:
            yield
        finally:
            with self.lock:
                self.depth -= 1
                if self.depth == 0:
                    put(self.saved)


_openblas: _OpenBLAS | None = None
_pool: ThreadPoolExecutor | None = None
_setup_lock = threading.Lock()
_POOL_NAME = "gpu_delegate-cpu"


def _resources() -> tuple[_OpenBLAS, ThreadPoolExecutor]:
    global _openblas, _pool
    with _setup_lock:
        if _openblas is None or _pool is None:
            _openblas = _OpenBLAS()
            workers = max(1, (os.cpu_count() or 1) - 1)
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=_POOL_NAME)
        return _openblas, _pool


def _forget_after_fork() -> None:
    """A forked child has none of the parent's threads: build a new pool there instead of waiting forever."""
    global _openblas, _pool, _setup_lock
    _openblas, _pool, _setup_lock = None, None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def split_rows(part: Callable[[int, int], object], rows: int, work: int, blas: bool = False) -> None:
    """Run part(r0, r1) on contiguous blocks covering [0, rows): one block per thread (fewer when the
    ``work`` is small), block 0 on the calling thread. ``blas``: the part calls BLAS; when OpenBLAS's
    thread count cannot be set, such work stays in one block and BLAS threads it its own way."""
    if work < MIN_WORK:  # one block, and too little work for OpenBLAS to thread (it starts at 4x this)
        part(0, rows)
        return
    openblas, pool = _resources()
    n = max(1, min(jit.get_num_threads(), rows, work // MIN_WORK))
    if (blas and openblas.set is None) or threading.current_thread().name.startswith(_POOL_NAME):
        n = 1  # a part that splits again runs inline: waiting on its own pool could wait forever
    with openblas.serial() if blas else nullcontext():
        if n == 1:
            part(0, rows)
            return
        bounds = [rows * i // n for i in range(n + 1)]
        futures = [pool.submit(part, bounds[i], bounds[i + 1]) for i in range(1, n)]
        try:
            part(bounds[0], bounds[1])
        finally:
            for f in futures:
                f.result()


def serial_blas() -> AbstractContextManager[None]:
    """A context in which BLAS uses one thread (for ops too small to split)."""
    return _resources()[0].serial()


# -- numba kernels (nogil: blocks of rows run on several threads at once) -----------------------------------

@njit(cache=True, nogil=True)
def _im2col(x: np.ndarray, c0: int, cg: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pt: int,
            pl: int, oh: int, ow: int, r0: int, r1: int, pad_value: np.float32, out: np.ndarray) -> None:
    """For output rows r0..r1 (r = b * oh + oy): out[(r - r0) * ow + ox, (ky, kx, c)] =
    x[b, oy*sh - pt + ky*dh, ox*sw - pl + kx*dw, c0 + c], pad_value outside the input."""
    _, h, w, _ = x.shape
    for r in range(r0, r1):
        b = r // oh
        oy = r - b * oh
        for ox in range(ow):
            row = (r - r0) * ow + ox
            col = 0
            for ky in range(kh):
                iy = oy * sh - pt + ky * dh
                for kx in range(kw):
                    ix = ox * sw - pl + kx * dw
                    if 0 <= iy < h and 0 <= ix < w:
                        if cg >= 16:  # through views indexed by the loop counter alone: it vectorizes
                            dst, src = out[row, col:col + cg], x[b, iy, ix, c0:c0 + cg]
                            for c in range(cg):
                                dst[c] = src[c]
                        else:  # a few channels: views cost more than they save
                            for c in range(cg):
                                out[row, col + c] = x[b, iy, ix, c0 + c]
                    else:
                        for c in range(cg):
                            out[row, col + c] = pad_value
                    col += cg


@njit(cache=True, nogil=True)
def _bias_act(y: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32) -> None:
    """y = clamp(y + bias, lo, hi) in place, y of shape (rows, channels)."""
    rows, ch = y.shape
    for r in range(rows):
        yr = y[r]
        for c in range(ch):
            yr[c] = min(max(yr[c] + bias[c], lo), hi)


def _depthwise(x: np.ndarray, w: np.ndarray, bias: np.ndarray, sh: int, sw: int, dh: int, dw: int, pt: int, pl: int,
               lo: np.float32, hi: np.float32, r0: int, r1: int, out: np.ndarray) -> None:
    """out[b, oy, ox, c] = clamp(bias[c] + sum over (ky, kx) of x[b, iy, ix, c] * w[ky, kx, c], lo, hi)
    for the output rows r0..r1 (r = b * oh + oy).

    Taps outside the input are skipped, which for integer inputs shifted by their zero point is TFLite's
    "padding contributes zero". FMA contraction is allowed: it is exact on the integer path, and within
    rounding of the float one. The inner loops index only with loop counters over 1-D views, which is
    what lets numba drop its negative-index checks and LLVM vectorize them.

    The kernel is picked here, in Python, so that numba compiles only the ones a model needs: picked inside
    a numba function, both were compiled with it (2.1 s of a first CPU start after install, for 3x3 filters
    that never run the other kernel)."""
    kernel = _depthwise_3x3 if w.shape[0] == 3 and w.shape[1] == 3 else _depthwise_rows
    kernel(x, w, bias, sh, sw, dh, dw, pt, pl, r0, r1, out)
    if lo > -np.inf or hi < np.inf:
        _clamp_rows(out, lo, hi, r0, r1)


@njit(cache=True, nogil=True)
def _clamp_rows(out: np.ndarray, lo: np.float32, hi: np.float32, r0: int, r1: int) -> None:
    """out[b, oy] = clamp(out[b, oy], lo, hi) for the rows r0..r1 (r = b * oh + oy) of an NHWC array."""
    oh, ow, ch = out.shape[1], out.shape[2], out.shape[3]
    for r in range(r0, r1):
        b = r // oh
        acc = out[b, r - b * oh]
        for ox in range(ow):
            o = acc[ox]
            for c in range(ch):
                o[c] = min(max(o[c], lo), hi)


@njit(cache=True, nogil=True, fastmath={"contract"})
def _depthwise_rows(x: np.ndarray, w: np.ndarray, bias: np.ndarray, sh: int, sw: int, dh: int, dw: int, pt: int,
                    pl: int, r0: int, r1: int, out: np.ndarray) -> None:
    """Any filter size: one output row at a time, tap by tap, accumulating in the output row."""
    _, h, wd, ch = x.shape
    oh, ow = out.shape[1], out.shape[2]
    kh, kw = w.shape[0], w.shape[1]
    for r in range(r0, r1):
        b = r // oh
        oy = r - b * oh
        acc = out[b, oy]
        for ox in range(ow):
            for c in range(ch):
                acc[ox, c] = bias[c]
        for ky in range(kh):
            iy = oy * sh - pt + ky * dh
            if iy < 0 or iy >= h:
                continue
            row = x[b, iy]
            for kx in range(kw):
                off = kx * dw - pl  # ix = ox * sw + off must lie in [0, wd)
                ox0 = max(0, (sw - 1 - off) // sw)
                ox1 = min(ow, (wd - 1 - off) // sw + 1)
                wk = w[ky, kx]
                for ox in range(ox0, ox1):
                    xi = row[ox * sw + off]
                    ao = acc[ox]
                    for c in range(ch):
                        ao[c] += xi[c] * wk[c]


@njit(cache=True, nogil=True, fastmath={"contract"})
def _depthwise_3x3(x: np.ndarray, w: np.ndarray, bias: np.ndarray, sh: int, sw: int, dh: int, dw: int, pt: int,
                   pl: int, r0: int, r1: int, out: np.ndarray) -> None:
    """3x3 filters (nearly all of them): pixels whose window lies inside the input sum their nine taps in
    registers; the border pixels go tap by tap."""
    _, h, wd, ch = x.shape
    oh, ow = out.shape[1], out.shape[2]
    w00, w01, w02, w10, w11, w12 = w[0, 0], w[0, 1], w[0, 2], w[1, 0], w[1, 1], w[1, 2]
    w20, w21, w22 = w[2, 0], w[2, 1], w[2, 2]
    ox_a = min(ow, (pl + sw - 1) // sw)  # first ox whose window starts inside: ox * sw - pl >= 0
    ox_b = max(ox_a, min(ow, (wd - 1 - 2 * dw + pl) // sw + 1))  # past the last that ends inside
    for r in range(r0, r1):
        b = r // oh
        oy = r - b * oh
        acc = out[b, oy]
        iy = oy * sh - pt
        if iy < 0 or iy + 2 * dh >= h:
            # np.int64(0), not 0: a literal argument makes numba compile _depthwise_pixels a second time
            _depthwise_pixels(x, w, bias, b, oy, np.int64(0), ow, sh, sw, dh, dw, pt, pl, acc)
            continue
        x0, x1, x2 = x[b, iy], x[b, iy + dh], x[b, iy + 2 * dh]
        for ox in range(ox_a, ox_b):
            i = ox * sw - pl
            x00, x01, x02 = x0[i], x0[i + dw], x0[i + 2 * dw]
            x10, x11, x12 = x1[i], x1[i + dw], x1[i + 2 * dw]
            x20, x21, x22 = x2[i], x2[i + dw], x2[i + 2 * dw]
            ao = acc[ox]
            for c in range(ch):
                ao[c] = (bias[c] + x00[c] * w00[c] + x01[c] * w01[c] + x02[c] * w02[c]
                         + x10[c] * w10[c] + x11[c] * w11[c] + x12[c] * w12[c]
                         + x20[c] * w20[c] + x21[c] * w21[c] + x22[c] * w22[c])
        _depthwise_pixels(x, w, bias, b, oy, np.int64(0), ox_a, sh, sw, dh, dw, pt, pl, acc)
        _depthwise_pixels(x, w, bias, b, oy, ox_b, ow, sh, sw, dh, dw, pt, pl, acc)


@njit(cache=True, nogil=True, fastmath={"contract"})
def _depthwise_pixels(x: np.ndarray, w: np.ndarray, bias: np.ndarray, b: int, oy: int, ox_lo: int | np.int64,
                      ox_hi: int, sh: int, sw: int, dh: int, dw: int, pt: int, pl: int, acc: np.ndarray) -> None:
    """Output pixels ox_lo..ox_hi of row (b, oy), skipping the taps that fall outside the input."""
    h, wd, ch = x.shape[1], x.shape[2], x.shape[3]
    kh, kw = w.shape[0], w.shape[1]
    for ox in range(ox_lo, ox_hi):
        ao = acc[ox]
        for c in range(ch):
            ao[c] = bias[c]
        for ky in range(kh):
            iy = oy * sh - pt + ky * dh
            if iy < 0 or iy >= h:
                continue
            for kx in range(kw):
                ix = ox * sw - pl + kx * dw
                if ix < 0 or ix >= wd:
                    continue
                xi = x[b, iy, ix]
                wk = w[ky, kx]
                for c in range(ch):
                    ao[c] += xi[c] * wk[c]


@njit(cache=True, nogil=True)
def _requantize(acc: np.ndarray, corr: np.ndarray, multiplier: np.ndarray, right: np.ndarray, mask: np.ndarray,
                zero_point: int, qmin: int, qmax: int, out: np.ndarray) -> None:
    """out = clamp(zp + MultiplyByQuantizedMultiplier(acc + corr[c], m[c], shift[c]), qmin, qmax) for an
    integer-valued float acc.

    quant.multiply_by_quantized_multiplier's arithmetic, rearranged for speed (tests check the two agree):
    no branches; a left shift (multiplier > 1) folded into ``multiplier``, exact wherever TFLite's own
    int32 ``x * (1 << shift)`` does not overflow; ``right`` and ``mask`` are the rounding right shift and
    its remainder mask. The fixed-point multiplier lies in [2^30, 2^31), so the saturating
    INT32_MIN * INT32_MIN case cannot occur."""
    rows, ch = acc.shape
    low31 = np.int64((1 << 31) - 1)
    for r in range(rows):
        a = acc[r]
        o = out[r]
        for c in range(ch):
            ab = (np.int64(np.int32(a[c])) + corr[c]) * multiplier[c]
            num = ab + (np.int64(1 << 30) + (ab >> 63) * low31)  # nudge: 2^30, or 1 - 2^30 when negative
            q = (num + ((num >> 63) & low31)) >> 31  # divide by 2^31 rounding toward zero
            half = (mask[c] >> 1) - (q >> 63)  # ties round away from zero
            q = (q >> right[c]) - ((half - (q & mask[c])) >> 63)
            o[c] = min(max(q + zero_point, qmin), qmax)


@njit(cache=True, nogil=True)
def _requantize_single(acc: np.ndarray, corr: np.ndarray, multiplier: np.ndarray, total: np.ndarray,
                       zero_point: int, qmin: int, qmax: int, out: np.ndarray) -> None:
    """out = clamp(zp + ((acc + corr[c]) * m[c] + 2^(t[c] - 1)) >> t[c], qmin, qmax): TFLite's single-rounding
    MultiplyByQuantizedMultiplier (t = 31 - shift), one rounding half up instead of two."""
    rows, ch = acc.shape
    for r in range(rows):
        a = acc[r]
        o = out[r]
        for c in range(ch):
            q = ((np.int64(np.int32(a[c])) + corr[c]) * multiplier[c] + (np.int64(1) << (total[c] - 1))) >> total[c]
            o[c] = min(max(q + zero_point, qmin), qmax)


# -- float ops ----------------------------------------------------------------------------------------------

def patches(x: np.ndarray, win: Window, c0: int, cg: int, pad_value: float, r0: int, r1: int) -> np.ndarray:
    """Rows of the im2col matrix for output rows r0..r1 (r = b * oh + oy): ((r1 - r0) * OW, KH*KW*cg), columns
    in (ky, kx, c) order, the order of a TFLite filter [O, KH, KW, I] flattened per output channel. A
    stride-1 1x1 window over all channels is the input itself."""
    n, h, w, c = x.shape
    if (win.kh, win.kw, win.sh, win.sw, win.pt, win.pl, c0, cg) == (1, 1, 1, 1, 0, 0, 0, c):
        return x.reshape(-1, c)[r0 * w:r1 * w]
    out = np.empty(((r1 - r0) * win.ow, win.kh * win.kw * cg), np.float32)
    _im2col(x, c0, cg, win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.pt, win.pl, win.oh, win.ow, r0, r1,
            np.float32(pad_value), out)
    return out


def bias_act(y: np.ndarray, bias: np.ndarray | None, lo: np.float32, hi: np.float32) -> None:
    """In place on a (rows, channels) float32 array; skips the pass when there is nothing to do."""
    if bias is None and lo == -np.inf and hi == np.inf:
        return
    _bias_act(y, bias if bias is not None else np.zeros(y.shape[1], np.float32), lo, hi)


def conv2d_float(x: np.ndarray, mats: list[np.ndarray], bias: np.ndarray | None, win: Window, lo: np.float32,
                 hi: np.float32) -> np.ndarray:
    """x float32 NHWC; mats[g]: group g's C-contiguous float32 [KH*KW*I/groups, O/groups] matrix."""
    n, _, _, c = x.shape
    groups = len(mats)
    cg, og = c // groups, mats[0].shape[1]
    y = np.empty((n * win.oh * win.ow, og * groups), np.float32)

    def part(r0: int, r1: int) -> None:
        ys = y[r0 * win.ow:r1 * win.ow]
        for g, m in enumerate(mats):
            cols = patches(x, win, g * cg, cg, 0.0, r0, r1)
            if groups == 1:
                np.matmul(cols, m, out=ys)
            else:
                ys[:, g * og:(g + 1) * og] = cols @ m
        bias_act(ys, bias, lo, hi)

    split_rows(part, n * win.oh, y.size * mats[0].shape[0], blas=True)
    return y.reshape(n, win.oh, win.ow, -1)


def linear_float(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, lo: np.float32,
                 hi: np.float32) -> np.ndarray:
    """x float32 [M, K] @ w [K, O] + bias, clamped."""
    if x.shape[0] * w.size < MIN_WORK:
        # one block: the same arithmetic in numpy's calls, which cost less than the numba pass's call on the small
        # layers a loop's body runs again and again (its clamp keeps a NaN, as _bias_act's does)
        out = x @ w
        if bias is not None:
            out += bias
        if lo > -np.inf or hi < np.inf:
            np.clip(out, lo, hi, out=out)
        return out
    y = np.empty((x.shape[0], w.shape[1]), np.float32)

    def part(r0: int, r1: int) -> None:
        np.matmul(x[r0:r1], w, out=y[r0:r1])
        bias_act(y[r0:r1], bias, lo, hi)

    split_rows(part, x.shape[0], y.size * w.shape[0], blas=True)
    return y


def weight_matrices(w: np.ndarray, groups: int) -> list[np.ndarray]:
    """TFLite filter [O, KH, KW, I/groups] -> per group a C-contiguous [KH*KW*I/groups, O/groups] matrix.
    BLAS reads a transposed view of the filter several times slower on the narrow layers, so copy once."""
    og = w.shape[0] // groups
    return [np.ascontiguousarray(w[g * og:(g + 1) * og].reshape(og, -1).T) for g in range(groups)]


def depthwise_float(x: np.ndarray, w: np.ndarray, bias: np.ndarray, win: Window, lo: np.float32,
                    hi: np.float32) -> np.ndarray:
    """x float32 NHWC with as many channels as w [KH, KW, C] (repeat them for a depth multiplier)."""
    out = np.empty((x.shape[0], win.oh, win.ow, x.shape[3]), np.float32)
    split_rows(lambda r0, r1: _depthwise(x, w, bias, win.sh, win.sw, win.dh, win.dw, win.pt, win.pl, lo, hi,
                                         r0, r1, out),
               x.shape[0] * win.oh, out.size * win.kh * win.kw)
    return out


# -- integer ops --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantMatrix:
    """Integer weights laid out for `qmatmul`: (w - w_zp) as a float32 [K, O] matrix."""

    w: np.ndarray  # float32 [K, O], exact small integers
    colsum: np.ndarray  # int64 [O]: sum over K of (w - w_zp)
    chunk: int  # longest run of K whose float32 dot products with int8-range inputs stay exact


def quant_matrix(w_ko: np.ndarray, w_zp: np.ndarray) -> QuantMatrix:
    """w_ko: integer weights [K, O]; w_zp: zero point per output column (or one)."""
    d = w_ko.astype(np.int64) - np.asarray(w_zp, np.int64).reshape(1, -1)
    biggest = int(np.abs(d).max()) if d.size else 0
    chunk = F32_EXACT // (128 * max(biggest, 1))
    return QuantMatrix(np.ascontiguousarray(d, np.float32), d.sum(0), max(chunk, 1))


def shifted_f32(x: np.ndarray, offset: int) -> np.ndarray:
    """x - offset as float32 (exact for 8-bit x), converted in blocks on the thread pool."""
    out = np.empty(x.shape, np.float32)
    src, dst, off = x.reshape(-1), out.reshape(-1), np.float32(offset)

    def part(a: int, b: int) -> None:
        np.subtract(src[a:b], off, out=dst[a:b])

    split_rows(part, src.size, src.size)
    return out


def int8_range(x: np.ndarray) -> tuple[np.ndarray, int]:
    """x' = x - shift as float32 with x' in [-128, 127]: shift is 128 for uint8, 0 for int8."""
    shift = 128 if x.dtype == np.uint8 else 0
    return shifted_f32(x, shift), shift


def qmatmul(xs: np.ndarray, m: QuantMatrix) -> np.ndarray:
    """Exact integer xs @ m.w for int8-range float32 xs [M, K]: float32 when one chunk covers K, else
    float64 (a sum of exact float32 chunks)."""
    k = xs.shape[1]
    if k <= m.chunk:
        return xs @ m.w
    acc = np.zeros((xs.shape[0], m.w.shape[1]), np.float64)
    for k0 in range(0, k, m.chunk):
        acc += xs[:, k0:k0 + m.chunk] @ m.w[k0:k0 + m.chunk]
    return acc


@dataclass(frozen=True)
class Requant:
    """Per-output-channel fixed-point multipliers and the output's integer range."""

    multiplier: np.ndarray  # int64 [O]
    shift: np.ndarray  # int64 [O]; TFLite's exponent: left shift when > 0, rounding right shift when < 0
    zero_point: int
    qmin: int  # fused activation clamp, on the output's grid
    qmax: int
    dtype: np.dtype
    single_rounding: bool = False  # LiteRT's reference FULLY_CONNECTED rounds once; its convolutions twice


def requantize(acc: np.ndarray, corr: np.ndarray, rq: Requant, out: np.ndarray | None = None) -> np.ndarray:
    """acc (rows, O) integer-valued float32/float64, corr int64 [O] (bias and zero-point terms); written to
    ``out`` (rq.dtype, C-contiguous rows) when given. Returns the result."""
    buf = np.empty(acc.shape, np.int8) if out is None else out.view(np.int8)
    # One kernel for both types: uint8 is computed as v - 128 in int8, then the top bit is flipped.
    offset = 128 if rq.dtype == np.uint8 else 0
    zp, lo, hi = rq.zero_point - offset, rq.qmin - offset, rq.qmax - offset
    if rq.single_rounding:
        _requantize_single(acc, corr, rq.multiplier, 31 - rq.shift, zp, lo, hi, buf)
    else:
        multiplier = rq.multiplier << np.maximum(rq.shift, 0)
        right = np.maximum(-rq.shift, 0)
        mask = (np.int64(1) << right) - 1
        _requantize(acc, corr, multiplier, right, mask, zp, lo, hi, buf)
    if rq.dtype != np.uint8:
        return buf
    res = buf.view(np.uint8)
    np.bitwise_xor(res, np.uint8(0x80), out=res)
    return res


def conv2d_quant(x: np.ndarray, x_zp: int, mats: list[QuantMatrix], win: Window, bias: np.ndarray,
                 rq: Requant) -> np.ndarray:
    """Integer convolution of an int8/uint8 NHWC input; mats[g] is group g's [KH*KW*I/groups, O/groups]
    matrix, bias int64 [O]."""
    n, _, _, c = x.shape
    groups = len(mats)
    cg = c // groups
    xs, shift = int8_range(x)
    pad = x_zp - shift  # TFLite skips padded pixels: x' = x_zp' there makes their (x - x_zp) zero
    corr = bias - pad * np.concatenate([m.colsum for m in mats])
    out = np.empty((n * win.oh * win.ow, corr.size), rq.dtype)

    def part(r0: int, r1: int) -> None:
        accs = [qmatmul(patches(xs, win, g * cg, cg, pad, r0, r1), m) for g, m in enumerate(mats)]
        acc = accs[0] if groups == 1 else np.concatenate(accs, axis=1)
        requantize(acc, corr, rq, out[r0 * win.ow:r1 * win.ow])

    split_rows(part, n * win.oh, out.size * mats[0].w.shape[0], blas=True)
    return out.reshape(n, win.oh, win.ow, -1)


def linear_quant(xs: np.ndarray, x_zp: int, m: QuantMatrix, bias: np.ndarray, rq: Requant) -> np.ndarray:
    """xs: int8-range float32 [M, K] (x_zp on the same scale) @ weights, then requantized."""
    corr = bias - x_zp * m.colsum
    out = np.empty((xs.shape[0], corr.size), rq.dtype)
    split_rows(lambda r0, r1: requantize(qmatmul(xs[r0:r1], m), corr, rq, out[r0:r1]), xs.shape[0],
               out.size * xs.shape[1], blas=True)
    return out


def depthwise_quant(xs: np.ndarray, w: np.ndarray, win: Window, bias: np.ndarray, rq: Requant) -> np.ndarray:
    """xs: (x - x_zp) as float32 NHWC, w: (w - w_zp) as float32 [KH, KW, C], bias int64 [C]."""
    n, ch = xs.shape[0], w.shape[2]
    acc = np.empty((n, win.oh, win.ow, ch), np.float32)
    out = np.empty((n * win.oh * win.ow, ch), rq.dtype)
    biggest = max(float(np.abs(w).max()) if w.size else 0.0, 1.0)
    if 255 * biggest * win.kh * win.kw > F32_EXACT:  # huge filters only: exact float32 row groups, summed
        return _depthwise_quant_long(xs, w, win, bias, rq, biggest).reshape(n, win.oh, win.ow, ch)
    zero, lo, hi = np.zeros(ch, np.float32), np.float32(-np.inf), np.float32(np.inf)

    def part(r0: int, r1: int) -> None:
        _depthwise(xs, w, zero, win.sh, win.sw, win.dh, win.dw, win.pt, win.pl, lo, hi, r0, r1, acc)
        rows = slice(r0 * win.ow, r1 * win.ow)
        requantize(acc.reshape(-1, ch)[rows], bias, rq, out[rows])

    split_rows(part, n * win.oh, acc.size * win.kh * win.kw)
    return out.reshape(n, win.oh, win.ow, ch)


def _depthwise_quant_long(xs: np.ndarray, w: np.ndarray, win: Window, bias: np.ndarray, rq: Requant,
                          biggest: float) -> np.ndarray:
    kh, kw, ch = w.shape
    step = max(1, int(F32_EXACT // (255 * biggest * kw)))
    zero, lo, hi = np.zeros(ch, np.float32), np.float32(-np.inf), np.float32(np.inf)
    acc = np.zeros((xs.shape[0], win.oh, win.ow, ch), np.float64)
    part = np.empty(acc.shape, np.float32)
    for k0 in range(0, kh, step):
        rows = np.ascontiguousarray(w[k0:k0 + step])
        _depthwise(xs, rows, zero, win.sh, win.sw, win.dh, win.dw, win.pt - k0 * win.dh, win.pl, lo, hi, 0,
                   xs.shape[0] * win.oh, part)
        acc += part
    return requantize(acc.reshape(-1, ch), bias, rq)


def col2im_add(cols: np.ndarray, n: int, h: int, w: int, kh: int, kw: int, sh: int, sw: int, pt: int,
               pl: int, oh: int, ow: int) -> np.ndarray:
    """Transposed convolution's scatter: cols [(b, iy, ix), (ky, kx, o)] lands on out[b, iy*sh - pt + ky,
    ix*sw - pl + kx, o]; contributions outside the output are dropped. Same dtype as cols."""
    o = cols.shape[1] // (kh * kw)
    c = cols.reshape(n, h, w, kh, kw, o)
    full_h = max((h - 1) * sh + kh, pt + oh)
    full_w = max((w - 1) * sw + kw, pl + ow)
    full = np.zeros((n, full_h, full_w, o), cols.dtype)
    for ky in range(kh):
        for kx in range(kw):
            full[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (w - 1) * sw + 1:sw, :] += c[:, :, :, ky, kx, :]
    return full[:, pt:pt + oh, pl:pl + ow, :]
