"""Tensor element types: the flatbuffer schema's codes, numpy dtypes and the C API's codes, in one place."""

from __future__ import annotations

import numpy as np

# tflite schema `TensorType` -> numpy. None: a type we read but cannot compute with.
SCHEMA_TO_NUMPY: dict[int, np.dtype | None] = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float16),
    2: np.dtype(np.int32),
    3: np.dtype(np.uint8),
    4: np.dtype(np.int64),
    5: np.dtype(object),  # STRING: each element a Python bytes object (what LiteRT's get_tensor returns)
    6: np.dtype(np.bool_),
    7: np.dtype(np.int16),
    8: np.dtype(np.complex64),
    9: np.dtype(np.int8),
    10: np.dtype(np.float64),
    11: np.dtype(np.complex128),
    12: np.dtype(np.uint64),
    13: np.dtype(np.int32),  # RESOURCE: a handle the interpreter hands out (resource variables)
    14: None,  # VARIANT
    15: np.dtype(np.uint32),
    16: np.dtype(np.uint16),
    17: np.dtype(np.int8),  # INT4: stored packed two per byte; unpacked by the reader
    18: None,  # BFLOAT16
}

SCHEMA_NAMES = {
    0: "FLOAT32", 1: "FLOAT16", 2: "INT32", 3: "UINT8", 4: "INT64", 5: "STRING", 6: "BOOL", 7: "INT16",
    8: "COMPLEX64", 9: "INT8", 10: "FLOAT64", 11: "COMPLEX128", 12: "UINT64", 13: "RESOURCE", 14: "VARIANT",
    15: "UINT32", 16: "UINT16", 17: "INT4", 18: "BFLOAT16",
}

NUMPY_TO_SCHEMA: dict[np.dtype, int] = {
    np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int32): 2, np.dtype(np.uint8): 3,
    np.dtype(np.int64): 4, np.dtype(np.bool_): 6, np.dtype(np.int16): 7, np.dtype(np.complex64): 8,
    np.dtype(np.int8): 9, np.dtype(np.float64): 10, np.dtype(np.complex128): 11, np.dtype(np.uint64): 12,
    np.dtype(np.uint32): 15, np.dtype(np.uint16): 16, np.dtype(object): 5,
}

# TfLiteType in the C API (common.h) differs from the schema: kTfLiteFloat32 == 1, kTfLiteInt32 == 2, ...
C_API_TO_NUMPY: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.int32), 3: np.dtype(np.uint8), 4: np.dtype(np.int64),
    6: np.dtype(np.bool_), 7: np.dtype(np.int16), 8: np.dtype(np.complex64), 9: np.dtype(np.int8),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.complex128),
    13: np.dtype(np.uint64), 16: np.dtype(np.uint32), 17: np.dtype(np.uint16),
}
NUMPY_TO_C_API = {v: k for k, v in C_API_TO_NUMPY.items()}

# TfLiteType -> schema TensorType, for every type both know (incl. those numpy cannot hold: STRING, INT4, ...).
C_API_TO_SCHEMA: dict[int, int] = {
    1: 0, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9, 10: 1, 11: 10, 12: 11, 13: 12, 14: 13, 15: 14,
    16: 15, 17: 16, 18: 17, 19: 18,
}


# Non-float types the GPU path holds as float lanes, for the ops that declare it exact (Op.gpu_ints): bool as
# 0.0 / 1.0, int32 as its value in float32 storage whatever the delegate's precision (exact up to 2**24).
GPU_HELD_AS_FLOAT = (np.dtype(np.bool_), np.dtype(np.int32))
GPU_EXACT_INT = 1 << 24
# An int32 ADD or SUB of a graph input and a constant of at most this magnitude runs on the GPU (Keras 3's
# Embedding adds the vocabulary to negative token ids): the invoke then checks that input against
# GPU_EXACT_INT - GPU_INT_OFFSET, so the sum stays exact.
GPU_INT_OFFSET = 1 << 16
STRING = np.dtype(object)


def is_quantized_int(dtype: np.dtype) -> bool:
    return dtype in (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16))


def zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A tensor's value before anything writes it: zeros, or empty strings for a STRING tensor."""
    return np.full(shape, b"", STRING) if dtype == STRING else np.zeros(shape, dtype)


def public_type(dtype: np.dtype) -> type:
    """The ``dtype`` entry of a tensor's details, as LiteRT gives it: ``numpy.bytes_`` for a STRING tensor (whose
    values are object arrays of bytes), the numpy scalar type otherwise."""
    return np.bytes_ if dtype == STRING else dtype.type


def as_strings(value: np.ndarray, what: str) -> np.ndarray:
    """``value`` as a STRING tensor's value, converted as LiteRT's set_tensor converts it: an object array of bytes,
    from bytes (``S``) or unicode (``U``, encoded as UTF-8) arrays, or object arrays of bytes or str. Anything
    else is a ValueError naming ``what``."""
    if value.dtype.kind not in "SUO":
        raise ValueError(f"Cannot set tensor: got value of type {value.dtype} but expected type STRING for {what}")
    out = np.empty(value.shape, STRING)
    flat = out.reshape(-1)
    for i, item in enumerate(value.reshape(-1).tolist()):
        if isinstance(item, str):
            item = item.encode()
        elif not isinstance(item, bytes):
            raise ValueError(f"Cannot set tensor: element {i} of the value for {what} is {type(item).__name__}, "
                             "not bytes or str")
        flat[i] = item
    return out


FP16_MAX = 65504.0


def fp16_saturated(values: np.ndarray) -> np.ndarray:
    """Finite float32 ``values`` clamped into fp16's finite range (infinities and NaN kept): a constant beyond it
    is a sentinel (an attention mask's -1e9), and as an fp16 infinity it would make 0 * mask NaN."""
    # the NaN-ignoring extremes: two passes without temporaries (every constant of an fp16 plan goes through here at
    # each allocation: ResNet50's weights 134 ms with an isfinite mask, 19 ms so)
    if not values.size or -FP16_MAX <= np.fmin.reduce(values, axis=None) and \
            np.fmax.reduce(values, axis=None) <= FP16_MAX:
        return values
    return np.where(np.isfinite(values), np.clip(values, -FP16_MAX, FP16_MAX), values)
