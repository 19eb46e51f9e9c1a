"""Names and reflection over the generated `tflite` flatbuffer classes, shared by the reader and the writer."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from types import ModuleType

import tflite

if not all(hasattr(tflite, name) for name in ("BuiltinOperator", "BuiltinOptions", "BuiltinOptions2")):
    # tflite < 2.18 has no second options union; an empty 'tflite' (ai-edge-litert 2.1.2 installs one over it)
    # has nothing: either would fail later as if every model were broken
    raise ImportError(f"gpu_delegate needs the 'tflite' flatbuffer schema package >= 2.18 (BuiltinOptions2); the one "
                      f"at {getattr(tflite, '__file__', None) or tflite.__path__} lacks it: pip install "
                      "--force-reinstall 'tflite>=2.18'")

BUILTIN_OPS: dict[int, str] = {
    v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)
}
BUILTIN_CODES: dict[str, int] = {v: k for k, v in BUILTIN_OPS.items()}
OPTIONS_TYPES: dict[int, str] = {
    v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_") and isinstance(v, int)
}
OPTIONS_CODES: dict[str, int] = {v: k for k, v in OPTIONS_TYPES.items()}
# The second union (Operator.builtin_options_2): StableHLO ops, REDUCE_WINDOW, DILATE.
OPTIONS2_TYPES: dict[int, str] = {
    v: k for k, v in vars(tflite.BuiltinOptions2).items() if not k.startswith("_") and isinstance(v, int)
}
OPTIONS2_CODES: dict[str, int] = {v: k for k, v in OPTIONS2_TYPES.items()}

# Ops whose options table is not named after the op.
_OPTIONS_OVERRIDES = {
    "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "LESS_EQUAL": "LessEqualOptions", "CONCATENATION": "ConcatenationOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions", "L2_NORMALIZATION": "L2NormOptions",
    "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions", "CONV_3D_TRANSPOSE": "Conv3DOptions",
    "RANDOM_UNIFORM": "RandomOptions", "RANDOM_STANDARD_NORMAL": "RandomOptions", "MULTINOMIAL": "RandomOptions",
}
_OPTIONS_BY_KEY = {name.upper(): name for name in OPTIONS_CODES}
_OPTIONS2_BY_KEY = {name.upper(): name for name in OPTIONS2_CODES if name != "NONE"}

# Options vectors whose elements are float32 (every other options vector holds int32).


def options_type_for_op(op_name: str) -> str | None:
    """The BuiltinOptions table name an op carries (``CONV_2D`` -> ``Conv2DOptions``), or None."""
    if op_name in _OPTIONS_OVERRIDES:
        return _OPTIONS_OVERRIDES[op_name]
    return _OPTIONS_BY_KEY.get(op_name.replace("_", "") + "OPTIONS")


def options2_type_for_op(op_name: str) -> str | None:
    """The BuiltinOptions2 table name an op carries (``STABLEHLO_PAD`` -> ``StablehloPadOptions``), or None."""
    return _OPTIONS2_BY_KEY.get(op_name.replace("_", "") + "OPTIONS")


def snake_case(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z])(?=[a-z])", r"_\1\2", camel).lower()


@functools.cache
def options_module(type_name: str) -> ModuleType:
    return importlib.import_module(f"tflite.{type_name}")


@functools.cache
def options_fields(type_name: str) -> tuple[tuple[str, str, bool], ...]:
    """(snake_name, getter, is_vector) for each scalar or vector field of an options table."""
    cls = getattr(options_module(type_name), type_name)
    names = [n for n in vars(cls) if not n.startswith("_") and callable(getattr(cls, n))]
    skip = {"Init", "GetRootAs", f"GetRootAs{type_name}", f"{type_name}BufferHasIdentifier"}
    fields = []
    for n in names:
        if n in skip or n.endswith(("AsNumpy", "Length", "IsNone")):
            continue
        is_vector = f"{n}Length" in names
        if is_vector and f"{n}AsNumpy" not in names:
            continue  # vectors of tables: no op we run uses them
        fields.append((snake_case(n), n, is_vector))
    return tuple(fields)


_VECTOR_PREPEND = {"Int64Flags": "PrependInt64", "Int32Flags": "PrependInt32", "Uint32Flags": "PrependUint32",
                   "Uint8Flags": "PrependUint8", "BoolFlags": "PrependBool", "Float32Flags": "PrependFloat32"}


@functools.cache
def vector_prepend(type_name: str, getter: str) -> str:
    """The flatbuffers Builder method that writes one element of a vector field (read off the generated
    accessor, which names the element type)."""
    source = inspect.getsource(getattr(getattr(options_module(type_name), type_name), f"{getter}AsNumpy"))
    flags = re.search(r"GetVectorAsNumpy\(flatbuffers\.number_types\.(\w+Flags)", source)
    return _VECTOR_PREPEND.get(flags.group(1), "PrependInt32") if flags else "PrependInt32"
