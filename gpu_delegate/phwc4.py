"""PHWC4, the layout of every tensor on the GPU: a BHWC tensor as ceil(C / 4) slices of 4 channels.

Element (b, y, x, slice s) is the vec4 at index ((b * S + s) * H + y) * W + x; padding channels of the last
slice are zero. Tensors of rank below 4 are BHWC with leading ones. These facts are written here once: the
lowering, the backends and the delegate's support check all read them from this module.
"""

from __future__ import annotations

import numpy as np

BHWC = tuple[int, int, int, int]


def slices(channels: int) -> int:
    """How many 4-channel slices hold ``channels`` channels."""
    return (channels + 3) // 4


def collapse(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without the leading 1s that take it beyond rank 4: a rank-5 tensor of batch 1 is rank 4 in
    disguise (Keras 3's nearest UpSampling2D goes through one), stored as that rank-4 tensor."""
    shape = tuple(shape)
    while len(shape) > 4 and shape[0] == 1:
        shape = shape[1:]
    return shape


def bhwc(shape: tuple[int, ...]) -> BHWC:
    """A tensor of rank <= 4 as BHWC, padding missing leading dimensions with 1."""
    if len(shape) > 4:
        raise ValueError(f"rank {len(shape)} > 4")
    b, h, w, c = (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)
    return b, h, w, c


def vec4_count(shape: BHWC) -> int:
    """How many vec4 a PHWC4 tensor of BHWC ``shape`` takes."""
    b, h, w, c = shape
    return b * h * w * slices(c)


def grid(shape: BHWC) -> tuple[int, int, int]:
    """The dispatch grid of one work item per vec4: (W, H, B * S)."""
    b, h, w, c = shape
    return w, h, b * slices(c)


# pixels a work item copies where kernels/opencl/convert_from_phwc4.cl stores a PHWC4 tensor in the dense order
# (a (6000, 25) output: 42 us on PoCL, 52 with 8 pixels, 55 with 16)
DENSE_RUN = 4


def dense_store_grid(shape: BHWC) -> tuple[int, int, int]:
    """The grid of kernels/opencl/convert_from_phwc4.cl for a PHWC4 tensor of ``shape``: a work item per DENSE_RUN
    pixels, on two dimensions so that neither outgrows a device's limit."""
    runs = -(-shape[0] * shape[1] * shape[2] // DENSE_RUN)
    row = min(runs, 1024)
    return row, -(-runs // row), 1


def same_layout(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two shapes store the same elements at the same places: PHWC4 orders (b, s, y, x), so B, C and
    H * W must agree (a reshape between such shapes moves no data)."""
    ba, ha, wa, ca = bhwc(a)
    bb, hb, wb, cb = bhwc(b)
    return ba == bb and ca == cb and ha * wa == hb * wb


def to_rows(x: np.ndarray, shape: tuple[int, ...] | None = None, pixel_major: bool = False) -> np.ndarray:
    """A dense array (read as BHWC ``shape``, default its own shape) as float32 PHWC4 rows of 4, zero
    padding channels: how constant tensors go to the device. ``pixel_major``: a pixel's slices side by side
    instead (row ((b * H + y) * W + x) * S + s), as a table whose pixels are looked up whole is read."""
    b, h, w, c = bhwc(tuple(x.shape) if shape is None else shape)
    s = slices(c)
    padded = np.zeros((b, h, w, s * 4), np.float32)
    padded[..., :c] = np.asarray(x, np.float32).reshape(b, h, w, c)
    if pixel_major:
        return padded.reshape(-1, 4)
    return np.ascontiguousarray(padded.reshape(b, h, w, s, 4).transpose(0, 3, 1, 2, 4)).reshape(-1, 4)


def from_rows(rows: np.ndarray, shape: BHWC) -> np.ndarray:
    """PHWC4 rows (any float dtype) back to a dense BHWC array of ``shape`` (padding channels dropped)."""
    b, h, w, c = shape
    return rows.reshape(b, -1, h, w, 4).transpose(0, 2, 3, 1, 4).reshape(b, h, w, -1)[..., :c]
