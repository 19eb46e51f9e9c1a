"""TFLite's string tensor buffer: int32 count N, N + 1 int32 byte offsets from the buffer's start (the last one
is the buffer's length), then the strings' bytes back to back. Little-endian, as TFLite writes it."""

from __future__ import annotations

import numpy as np

from ..dtypes import STRING


def decode_strings(raw: bytes | np.ndarray, count: int, what: str) -> np.ndarray:
    """The ``count`` strings of a buffer as a flat object array of bytes; ValueError naming ``what`` when the
    buffer is not one of ``count`` strings."""
    data = raw.tobytes() if isinstance(raw, np.ndarray) else bytes(raw)
    if len(data) < 4:
        raise ValueError(f"{what}: a string buffer of {len(data)} bytes has no string count")
    n = int(np.frombuffer(data, "<i4", 1)[0])
    if n != count:
        raise ValueError(f"{what}: the string buffer holds {n} strings, the shape needs {count}")
    header = 4 * (n + 2)
    if len(data) < header:
        raise ValueError(f"{what}: a string buffer of {len(data)} bytes cannot hold the offsets of {n} strings")
    offsets = np.frombuffer(data, "<i4", n + 1, 4).astype(np.int64)
    if offsets[0] < header or offsets[-1] > len(data) or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{what}: the string offsets {offsets.tolist()[:8]}... do not lie in order within the "
                         f"{len(data)}-byte buffer")
    out = np.empty(n, STRING)
    for i in range(n):
        out[i] = data[offsets[i]:offsets[i + 1]]
    return out


def encode_strings(values: np.ndarray) -> bytes:
    """An array of bytes (or str, written as UTF-8) as a TFLite string buffer, in row-major order."""
    items = [v.encode() if isinstance(v, str) else bytes(v) for v in np.asarray(values, object).reshape(-1)]
    offsets = [4 * (len(items) + 2)]
    for item in items:
        offsets.append(offsets[-1] + len(item))
    return np.array([len(items), *offsets], "<i4").tobytes() + b"".join(items)
