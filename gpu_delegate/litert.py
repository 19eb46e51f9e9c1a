"""The ctypes bridge: any SimpleDelegate (GpuDelegate included) inside ``ai_edge_litert.interpreter.Interpreter``.

LiteRT's Python interpreter takes any object whose ``_get_native_delegate_pointer()`` returns the address of
a ``TfLiteDelegate`` and hands it to ``ModifyGraphWithDelegate``. Its shared libraries export no ``TfLite*``
C symbols, so the opaque delegate API is out of reach; this module speaks the legacy struct API instead,
with ctypes mirrors of TFLite's ``common.h`` and ``builtin_op_data.h`` and nothing but the function pointers
that ``TfLiteContext`` carries.

    DelegatePrepare   read the execution plan, nodes and tensors into a `Graph`; choose partitions with our
                      policy (`partition.select_partitions`); ReplaceNodeSubsetsWithDelegateKernels.
    kernel init       ``create_kernel().init(graph, nodes, inputs, outputs)`` for one partition.
    kernel prepare    the boundary shapes, read from the context, ``kernel.prepare``.
    kernel invoke     numpy views over the interpreter's buffers, ``kernel.invoke``, outputs copied back.
    kernel free       ``kernel.free()``, and the kernel is dropped with whatever it holds.

The TfLiteDelegate does not claim dynamic tensors, so before each delegation LiteRT propagates every shape
with its own kernels, and after ``resize_tensor_input`` it undoes and redoes the delegation: shapes seen at
DelegatePrepare and at kernel prepare are final. Constants (kTfLiteMmapRo) reach the SimpleDelegate as
read-only views of the model the interpreter owns, valid until its kernels are freed: a delegate must not keep
them, or the Graph, beyond that.

Struct layouts differ between TFLite versions and a wrong one reads garbage or crashes, so the bridge
refuses LiteRT releases it does not know and checks every context it is given before trusting it.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import sys
import threading
import weakref
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    byref,
    c_bool,
    c_char_p,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
    sizeof,
)
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .dtypes import C_API_TO_NUMPY, C_API_TO_SCHEMA, SCHEMA_NAMES
from .errors import DelegateError
from .graph import Graph, Node, Quantization, Tensor
from .partition import Partition, select_partitions
from .tflite.schema import BUILTIN_OPS

if TYPE_CHECKING:  # the delegate module calls this bridge; the bridge only names its types
    from .delegate import DelegateKernel, SimpleDelegate

log = logging.getLogger("gpu_delegate")

#: Interpreter packages whose native core has the struct layouts below (TFLite's common.h and
#: builtin_op_data.h): every ai-edge-litert release on PyPI from 1.0.0 to 2.3.0 has them, each verified by
#: running the bridge's tests under it (bench/litert_versions.py). 1.0.x were built against numpy 1.x.
KNOWN_VERSIONS: dict[str, tuple[str, ...]] = {"ai-edge-litert": (
    "1.0.0", "1.0.1", "1.1.0", "1.1.1", "1.1.2", "1.2.0", "1.3.0", "1.4.0", "2.0.2", "2.0.3", "2.1.0", "2.1.1",
    "2.1.3", "2.1.4", "2.1.5", "2.1.6", "2.2.0", "2.3.0")}
#: Releases refused although their structs match, with why.
REFUSED_VERSIONS: dict[str, dict[str, str]] = {"ai-edge-litert": {
    "2.1.2": "it installs an empty top-level 'tflite' package over the 'tflite' flatbuffer schema package that "
             "gpu_delegate reads models with (pip install 'ai-edge-litert!=2.1.2' && pip install --force-reinstall "
             "tflite)"}}

# The Python package that calls _get_native_delegate_pointer -> the distribution that ships its native core.
_DISTRIBUTIONS = {"ai_edge_litert": "ai-edge-litert", "tflite_runtime": "tflite-runtime", "tensorflow": "tensorflow"}

K_OK, K_ERROR = 0, 1
K_MMAP_RO = 1  # TfLiteAllocationType: constants, memory-mapped from the model
K_AFFINE_QUANTIZATION = 1
BUILTIN_CUSTOM, BUILTIN_DELEGATE = 32, 51
MAX_C_TYPE, MAX_ALLOCATION_TYPE = 23, 8
MAX_RANK = 16


class LiteRtAbiError(DelegateError):
    """The interpreter's native structures are not laid out as this bridge knows them."""


# -- common.h -------------------------------------------------------------------------------------------------

class QuantizationParams(Structure):
    _fields_ = [("scale", c_float), ("zero_point", c_int32)]


class QuantizationC(Structure):
    _fields_ = [("type", c_int), ("params", c_void_p)]


class AffineQuantization(Structure):
    _fields_ = [("scale", c_void_p), ("zero_point", c_void_p), ("quantized_dimension", c_int32)]


class DimensionMetadata(Structure):
    _fields_ = [("format", c_int), ("dense_size", c_int), ("array_segments", c_void_p), ("array_indices", c_void_p)]


class SparsityC(Structure):
    _fields_ = [("traversal_order", c_void_p), ("block_map", c_void_p), ("dim_metadata", c_void_p),
                ("dim_metadata_size", c_int)]


class TensorC(Structure):
    _fields_ = [("type", c_int), ("data", c_void_p), ("dims", c_void_p), ("params", QuantizationParams),
                ("allocation_type", c_int), ("bytes", c_size_t), ("allocation", c_void_p), ("name", c_void_p),
                ("delegate", c_void_p), ("buffer_handle", c_int), ("data_is_stale", c_bool),
                ("is_variable", c_bool), ("quantization", QuantizationC), ("sparsity", c_void_p),
                ("dims_signature", c_void_p)]


class NodeC(Structure):
    _fields_ = [("inputs", c_void_p), ("outputs", c_void_p), ("intermediates", c_void_p),
                ("temporaries", c_void_p), ("user_data", c_void_p), ("builtin_data", c_void_p),
                ("custom_initial_data", c_void_p), ("custom_initial_data_size", c_int), ("delegate", c_void_p),
                ("might_have_side_effect", c_bool)]


class ContextC(Structure):
    _fields_ = [("tensors_size", c_size_t), ("GetExecutionPlan", c_void_p), ("tensors", c_void_p),
                ("impl_", c_void_p), ("ResizeTensor", c_void_p), ("ReportError", c_void_p),
                ("AddTensors", c_void_p), ("GetNodeAndRegistration", c_void_p),
                ("ReplaceNodeSubsetsWithDelegateKernels", c_void_p), ("recommended_num_threads", c_int),
                ("GetExternalContext", c_void_p), ("SetExternalContext", c_void_p),
                ("allow_fp32_relax_to_fp16", c_bool), ("profiler", c_void_p),
                ("AllocatePersistentBuffer", c_void_p), ("AllocateBufferForEval", c_void_p),
                ("RequestScratchBufferInArena", c_void_p), ("GetScratchBuffer", c_void_p),
                ("ResizeTensorExplicit", c_void_p), ("PreviewDelegatePartitioning", c_void_p)]


INIT_FN = CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_size_t)
FREE_FN = CFUNCTYPE(None, c_void_p, c_void_p)
NODE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)  # prepare, invoke
DELEGATE_PREPARE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)


class RegistrationC(Structure):
    _fields_ = [("init", INIT_FN), ("free", FREE_FN), ("prepare", NODE_FN), ("invoke", NODE_FN),
                ("profiling_string", c_void_p), ("builtin_code", c_int32), ("custom_name", c_char_p),
                ("version", c_int), ("registration_external", c_void_p), ("async_kernel", c_void_p),
                ("inplace_operator", c_uint64)]


class DelegateC(Structure):
    _fields_ = [("data_", c_void_p), ("Prepare", DELEGATE_PREPARE_FN), ("CopyFromBufferHandle", c_void_p),
                ("CopyToBufferHandle", c_void_p), ("FreeBufferHandle", c_void_p), ("flags", c_int64),
                ("opaque_delegate_builder", c_void_p)]


class DelegateParamsC(Structure):
    _fields_ = [("delegate", c_void_p), ("nodes_to_replace", c_void_p), ("input_tensors", c_void_p),
                ("output_tensors", c_void_p)]


GET_EXECUTION_PLAN = CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
GET_NODE_AND_REGISTRATION = CFUNCTYPE(c_int, c_void_p, c_int, POINTER(c_void_p), POINTER(c_void_p))
REPLACE_NODE_SUBSETS = CFUNCTYPE(c_int, c_void_p, RegistrationC, c_void_p, c_void_p)
PREVIEW_PARTITIONING = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(c_void_p), POINTER(c_int))
# ReportError is variadic; it is only ever called with a format that has no conversions.
REPORT_ERROR = CFUNCTYPE(None, c_void_p, c_char_p)

_TENSOR_SIZE = sizeof(TensorC)
_DATA_OFFSET = TensorC.data.offset
_DIMS_OFFSET = TensorC.dims.offset
_TENSORS_OFFSET = ContextC.tensors.offset
_USER_DATA_OFFSET = NodeC.user_data.offset
_WORDS, _DATA_WORD = _TENSOR_SIZE // sizeof(c_void_p), _DATA_OFFSET // sizeof(c_void_p)
_SIZEOF_PARAMS_ARRAY = sizeof(c_void_p) * 4  # TfLiteDelegateParams


def _ints(address: int | None, what: str, limit: int = 1 << 24) -> list[int]:
    """The entries of a TfLiteIntArray (an int count followed by the ints)."""
    if not address:
        return []
    n = c_int.from_address(address).value
    if not 0 <= n <= limit:
        raise LiteRtAbiError(f"{what} claims {n} entries")
    return list((c_int * n).from_address(address + sizeof(c_int))) if n else []


def _floats(address: int | None) -> list[float]:
    if not address:
        return []
    n = c_int.from_address(address).value
    if not 0 <= n <= 1 << 24:
        raise LiteRtAbiError(f"a TfLiteFloatArray claims {n} entries")
    return list((c_float * n).from_address(address + sizeof(c_int))) if n else []


# -- builtin_op_data.h: each op's params struct, field by field, as the attrs our reader produces ---------------

def _padding(v: int) -> int:
    if v not in (1, 2):
        raise ValueError(f"padding {v} is neither SAME nor VALID")
    return v - 1  # kTfLitePaddingSame=1, Valid=2 -> schema SAME=0, VALID=1


def _activation(v: int) -> int:
    if not 0 <= v <= 5:  # kTfLiteActSigmoid (6) has no schema counterpart
        raise ValueError(f"fused activation {v} has no TFLite schema counterpart")
    return v  # kTfLiteActNone..kTfLiteActSignBit share the schema's numbering


def _mirror_mode(v: int) -> int:
    if v not in (1, 2):
        raise ValueError(f"mirror padding mode {v} is neither REFLECT nor SYMMETRIC")
    return v - 1  # kTfLiteMirrorPaddingReflect=1, Symmetric=2 -> schema REFLECT=0, SYMMETRIC=1


def _tensor_type(v: int) -> int:
    if v not in C_API_TO_SCHEMA:
        raise ValueError(f"type code {v} is not a TfLiteType")
    return C_API_TO_SCHEMA[v]


# A field of a params struct: (attr, ctype) read as is (bool for c_bool), or (attr, ctype, converter) read through
# the converter, or through a reader of the whole struct when the converter is None.
_Field = tuple[str, type[Any]] | tuple[str, type[Any], Callable[[int], int] | None]
# An entry that computes attrs from the whole struct.
_StructReader = Callable[[Structure], dict[str, Any]]


def _counted(values_field: str, count_field: str, attr: str) -> _StructReader:
    """A fixed int array and its count (TfLiteReshapeParams.shape, TfLiteSqueezeParams.squeeze_dims)."""
    def read(s: Structure) -> dict[str, Any]:
        n = getattr(s, count_field)
        values = getattr(s, values_field)
        if not 0 <= n <= len(values):
            raise ValueError(f"{count_field} = {n}")
        return {attr: [int(v) for v in values[:n]]}
    return read


_I, _F, _B = c_int, c_float, c_bool
_PAD: _Field = ("padding", _I, _padding)
_ACT: _Field = ("fused_activation_function", _I, _activation)
_WINDOW: list[_Field] = [_PAD, ("stride_w", _I), ("stride_h", _I)]

# op -> the params struct's fields in declaration order, (attr, ctype[, converter]), with converter None for a
# field that only a callable last entry reads (it computes attrs from the whole struct). An op listed with no
# fields carries no parameters. An op missing from this table is one whose struct the bridge does not know: it
# is never handed to a delegate. Fields added to a struct after those listed (quantized_bias_type of CONV_2D,
# FULLY_CONNECTED, TRANSPOSE_CONV: no op reads it) are not read.
OP_PARAMS: dict[str, list[_Field | _StructReader]] = {
    "CONV_2D": [*_WINDOW, _ACT, ("dilation_w_factor", _I), ("dilation_h_factor", _I)],
    "DEPTHWISE_CONV_2D": [*_WINDOW, ("depth_multiplier", _I), _ACT, ("dilation_w_factor", _I),
                          ("dilation_h_factor", _I)],
    "TRANSPOSE_CONV": [*_WINDOW, _ACT],
    **{op: [*_WINDOW, ("filter_width", _I), ("filter_height", _I), _ACT]
       for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D")},
    "FULLY_CONNECTED": [_ACT, ("weights_format", _I), ("keep_num_dims", _B), ("asymmetric_quantize_inputs", _B)],
    "BATCH_MATMUL": [("adj_x", _B), ("adj_y", _B), ("asymmetric_quantize_inputs", _B)],
    "ADD": [_ACT, ("pot_scale_int16", _B)],
    "SUB": [_ACT, ("pot_scale_int16", _B)],
    "MUL": [_ACT],
    "DIV": [_ACT],
    "L2_NORMALIZATION": [_ACT],
    "CONCATENATION": [("axis", _I), _ACT],
    "SOFTMAX": [("beta", _F)],
    "LEAKY_RELU": [("alpha", _F)],
    "GELU": [("approximate", _B)],
    "LOCAL_RESPONSE_NORMALIZATION": [("radius", _I), ("bias", _F), ("alpha", _F), ("beta", _F)],
    **{op: [("keep_dims", _B)]
       for op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL")},
    "RESIZE_BILINEAR": [("align_corners", _B), ("half_pixel_centers", _B)],
    "RESIZE_NEAREST_NEIGHBOR": [("align_corners", _B), ("half_pixel_centers", _B)],
    "RESHAPE": [("shape", c_int32 * 8, None), ("num_dimensions", _I, None),
                _counted("shape", "num_dimensions", "new_shape")],
    "SQUEEZE": [("squeeze_dims", c_int32 * 8, None), ("num_squeeze_dims", _I, None),
                _counted("squeeze_dims", "num_squeeze_dims", "squeeze_dims")],
    "STRIDED_SLICE": [("begin_mask", _I), ("end_mask", _I), ("ellipsis_mask", _I), ("new_axis_mask", _I),
                      ("shrink_axis_mask", _I), ("offset", _B)],
    "SPACE_TO_DEPTH": [("block_size", _I)],
    "DEPTH_TO_SPACE": [("block_size", _I)],
    "SPLIT": [("num_splits", _I)],
    "SPLIT_V": [("num_splits", _I)],
    "GATHER": [("axis", _I), ("batch_dims", _I)],
    "PACK": [("values_count", _I), ("axis", _I)],
    "UNPACK": [("num", _I), ("axis", _I)],
    "ONE_HOT": [("axis", _I)],
    "CUMSUM": [("exclusive", _B), ("reverse", _B)],
    "MIRROR_PAD": [("mode", _I, _mirror_mode)],
    "CAST": [("in_data_type", _I, _tensor_type), ("out_data_type", _I, _tensor_type)],
    "ARG_MAX": [("output_type", _I, _tensor_type)],
    "ARG_MIN": [("output_type", _I, _tensor_type)],
    "SHAPE": [("out_type", _I, _tensor_type)],
    "UNIDIRECTIONAL_SEQUENCE_LSTM": [_ACT, ("cell_clip", _F), ("proj_clip", _F), ("time_major", _B),
                                     ("asymmetric_quantize_inputs", _B), ("diagonal_recurrent_tensors", _B)],
    **{op: [] for op in (
        "ABS", "ADD_N", "BATCH_TO_SPACE_ND", "BROADCAST_TO", "CEIL", "COS", "DENSIFY", "DEQUANTIZE", "ELU",
        "EQUAL", "EXP", "EXPAND_DIMS", "FILL", "FLOOR", "FLOOR_DIV", "FLOOR_MOD", "GATHER_ND", "GREATER",
        "GREATER_EQUAL", "HARD_SWISH", "LESS", "LESS_EQUAL", "LOG", "LOGICAL_AND", "LOGICAL_NOT", "LOGICAL_OR",
        "LOGISTIC", "LOG_SOFTMAX", "MAXIMUM", "MINIMUM", "NEG", "NOT_EQUAL", "PAD", "PADV2", "POW", "PRELU",
        "QUANTIZE", "RANGE", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "REVERSE_V2", "ROUND", "RSQRT",
        "SELECT", "SELECT_V2", "SIGN", "SIN", "SLICE", "SPACE_TO_BATCH_ND", "SQRT", "SQUARE",
        "SQUARED_DIFFERENCE", "TANH", "TILE", "TOPK_V2", "TRANSPOSE", "ZEROS_LIKE")},
}


def _params_struct(op: str) -> type[Structure] | None:
    fields = [f for f in OP_PARAMS[op] if not callable(f)]
    if not fields:
        return None
    return type(f"{op}_params", (Structure,), {"_fields_": [(f[0], f[1]) for f in fields]})


_PARAM_STRUCTS = {op: _params_struct(op) for op in OP_PARAMS}


def read_params(op: str, address: int | None) -> dict[str, Any]:
    """A builtin node's attrs, from the params struct at ``address`` (node->builtin_data)."""
    struct = _PARAM_STRUCTS[op]
    if struct is None:
        return {}
    if not address:
        raise ValueError("the node has no builtin parameters")
    s = struct.from_address(address)
    attrs: dict[str, Any] = {}
    for f in OP_PARAMS[op]:
        if callable(f):
            attrs.update(f(s))
            continue
        if len(f) == 3:
            convert = f[2]
            if convert is not None:  # None: the entry's callable reads it
                attrs[f[0]] = convert(getattr(s, f[0]))
            continue
        value = getattr(s, f[0])
        attrs[f[0]] = bool(value) if f[1] is c_bool else value
    return attrs


# -- the ABI guard --------------------------------------------------------------------------------------------

def interpreter_version(distribution: str = "ai-edge-litert") -> str | None:
    """The installed version of the package whose interpreter loads the delegate, None if absent."""
    from importlib import metadata  # here: importing it costs every `import gpu_delegate` ~20 ms

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_version(distribution: str = "ai-edge-litert") -> str:
    """The installed version, if the bridge knows its struct layouts; else a LiteRtAbiError that names it."""
    version = interpreter_version(distribution)
    known = KNOWN_VERSIONS.get(distribution, ())
    refused = REFUSED_VERSIONS.get(distribution, {})
    if version in refused:
        raise LiteRtAbiError(f"gpu_delegate's LiteRT bridge refuses {distribution} {version}: {refused[version]}")
    if version not in known:
        have = f"{distribution} {version}" if version else f"{distribution} (not installed)"
        raise LiteRtAbiError(
            f"gpu_delegate's LiteRT bridge does not know the native struct layouts of {have}: it was built "
            f"and checked against {_known_text()}. Install one of those, or run the model with "
            "gpu_delegate.Interpreter.")
    return f"{distribution} {version}"


def _known_text() -> str:
    return "; ".join(f"{d} {', '.join(vs)}" for d, vs in KNOWN_VERSIONS.items())


def _caller_distribution() -> str:
    """Which interpreter package asks for the pointer (LiteRT, tflite-runtime and TensorFlow embed different
    TFLite versions): the package of the first caller outside gpu_delegate."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "gpu_delegate":
        frame = frame.f_back
    top = str(frame.f_globals.get("__name__", "")).split(".")[0] if frame is not None else ""
    return _DISTRIBUTIONS.get(top, "ai-edge-litert")


def _check_tensor(i: int, t: TensorC, version: str) -> None:
    """Fail, naming the version, when a tensor does not look like a TfLiteTensor of the known layout."""
    def bad(what: str) -> LiteRtAbiError:
        return LiteRtAbiError(f"{version}: tensor {i} does not look like a TFLite 2.22 TfLiteTensor ({what}); "
                              "the interpreter's struct layout differs from the one this bridge knows")

    if not 0 <= t.type <= MAX_C_TYPE:
        raise bad(f"type code {t.type}")
    if not 0 <= t.allocation_type <= MAX_ALLOCATION_TYPE:
        raise bad(f"allocation type {t.allocation_type}")
    if t.quantization.type not in (0, 1, 2):
        raise bad(f"quantization type {t.quantization.type}")
    if t.dims:
        n = c_int.from_address(t.dims).value
        if not 0 <= n <= MAX_RANK:
            raise bad(f"rank {n}")
        dims = list((c_int * n).from_address(t.dims + sizeof(c_int)))
        if any(d < 0 for d in dims):
            raise bad(f"dims {dims}")
        dtype = C_API_TO_NUMPY.get(t.type)
        if dtype is not None and not t.sparsity and t.bytes and t.bytes != int(np.prod(dims)) * dtype.itemsize:
            raise bad(f"{t.bytes} bytes for dims {dims} of {dtype}")


# -- reading the interpreter's graph --------------------------------------------------------------------------

@dataclass
class _Snapshot:
    """The graph as one DelegatePrepare saw it, and how its node numbers map to the interpreter's."""

    graph: Graph
    tfl_index: list[int]  # our node index -> the interpreter's
    ours: dict[int, int]  # the interpreter's node index -> ours
    refused: dict[int, str] = field(default_factory=dict)  # nodes the bridge cannot hand over, and why


def _c_string(address: int | None) -> str:
    return ctypes.string_at(address).decode(errors="replace") if address else ""


def _tensor(i: int, t: TensorC) -> Tensor:
    shape = tuple(_ints(t.dims, f"tensor {i} dims", MAX_RANK))
    sig = tuple(_ints(t.dims_signature, f"tensor {i} dims_signature", MAX_RANK)) or None
    dtype = C_API_TO_NUMPY.get(t.type)
    schema = C_API_TO_SCHEMA.get(t.type)
    tensor = Tensor(i, _c_string(t.name), shape, dtype if dtype is not None else np.dtype(np.uint8),
                    shape_signature=sig, is_variable=bool(t.is_variable),
                    type_name=SCHEMA_NAMES.get(schema, f"TfLiteType {t.type}") if schema is not None
                    else f"TfLiteType {t.type}")
    q = t.quantization
    if q.type == K_AFFINE_QUANTIZATION and q.params:
        aq = AffineQuantization.from_address(q.params)
        scale = np.array(_floats(aq.scale), np.float32)
        if scale.size:
            zp = np.array(_ints(aq.zero_point, f"tensor {i} zero points"), np.int64)
            if zp.size != scale.size:
                zp = np.resize(zp, scale.size) if zp.size else np.zeros(scale.size, np.int64)
            tensor.quant = Quantization(scale, zp, int(aq.quantized_dimension) if scale.size > 1 else 0)
    if t.sparsity:
        sp = SparsityC.from_address(t.sparsity)
        dims = []
        for k in range(max(sp.dim_metadata_size, 0)):
            dm = DimensionMetadata.from_address(sp.dim_metadata + k * sizeof(DimensionMetadata))
            entry = {"format": dm.format, "dense_size": dm.dense_size}
            if dm.format == 1:  # kTfLiteDimSparseCSR
                entry["segments"] = np.array(_ints(dm.array_segments, "sparse segments"), np.int64)
                entry["indices"] = np.array(_ints(dm.array_indices, "sparse indices"), np.int64)
            dims.append(entry)
        tensor.sparsity = {"traversal_order": _ints(sp.traversal_order, "traversal order"),
                           "block_map": _ints(sp.block_map, "block map"), "dim_metadata": dims}
    if t.allocation_type == K_MMAP_RO and dtype is not None and t.data:
        # A constant, memory-mapped from the model the interpreter owns: a read-only view, no copy.
        raw = np.frombuffer((ctypes.c_char * t.bytes).from_address(t.data), np.uint8) if t.bytes \
            else np.zeros(0, np.uint8)
        data = raw.view(dtype)
        data = data if tensor.sparsity is not None else data.reshape(shape)
        data.flags.writeable = False
        tensor.data = data
    return tensor


def _attrs(op: str, node: NodeC) -> tuple[dict[str, Any], str | None]:
    if op not in OP_PARAMS:
        return {}, f"the LiteRT bridge has no parameter layout for {op}"
    try:
        return read_params(op, node.builtin_data), None
    except ValueError as e:
        return {}, f"unreadable {op} parameters: {e}"


def read_graph(context: int, version: str) -> _Snapshot:
    """The interpreter's current execution plan as a Graph (in plan order), checking that every struct it
    touches looks like the layout we know before reading pointers out of it."""
    ctx = ContextC.from_address(context)
    n_tensors = ctx.tensors_size
    for name in ("GetExecutionPlan", "GetNodeAndRegistration", "ReplaceNodeSubsetsWithDelegateKernels",
                 "ReportError", "ResizeTensor"):
        if not getattr(ctx, name):
            raise LiteRtAbiError(f"{version}: TfLiteContext.{name} is NULL; the context is not laid out as in "
                                 "TFLite 2.22")
    if not 0 < n_tensors < 1 << 26 or not ctx.tensors:
        raise LiteRtAbiError(f"{version}: the TfLiteContext claims {n_tensors} tensors at "
                             f"{ctx.tensors or 0:#x}; it is not laid out as in TFLite 2.22")
    raw_tensors = [TensorC.from_address(ctx.tensors + i * _TENSOR_SIZE) for i in range(n_tensors)]
    for i, raw in enumerate(raw_tensors):
        _check_tensor(i, raw, version)
    plan_ptr = c_void_p()
    if GET_EXECUTION_PLAN(ctx.GetExecutionPlan)(context, byref(plan_ptr)) != K_OK:
        raise DelegateError("GetExecutionPlan failed")
    plan = _ints(plan_ptr.value, "the execution plan")
    get_node = GET_NODE_AND_REGISTRATION(ctx.GetNodeAndRegistration)

    nodes: list[Node] = []
    refused: dict[int, str] = {}
    for k, index in enumerate(plan):
        node_ptr, reg_ptr = c_void_p(), c_void_p()
        if get_node(context, index, byref(node_ptr), byref(reg_ptr)) != K_OK or not node_ptr.value \
                or not reg_ptr.value:
            raise DelegateError(f"GetNodeAndRegistration failed for node {index}")
        node_c = NodeC.from_address(node_ptr.value)
        reg = RegistrationC.from_address(reg_ptr.value)
        inputs = _ints(node_c.inputs, f"node {index} inputs", 1 << 16)
        outputs = _ints(node_c.outputs, f"node {index} outputs", 1 << 16)
        # -1: an optional input, or an output nothing reads (the converter's WHILE drops its unread loop outputs)
        if any(not -1 <= t < n_tensors for t in (*inputs, *outputs)) or not 0 <= reg.builtin_code < 1 << 16:
            raise LiteRtAbiError(f"{version}: node {index} names tensors outside 0..{n_tensors - 1} or builtin code "
                                 f"{reg.builtin_code}; the TfLiteNode is not laid out as in TFLite 2.22")
        code = reg.builtin_code
        custom_options = b""
        attrs: dict[str, Any] = {}
        if node_c.delegate or code == BUILTIN_DELEGATE:
            op = reg.custom_name.decode(errors="replace") if reg.custom_name else "DELEGATE"
            refused[k] = f"already taken by delegate {op}"
        elif code == BUILTIN_CUSTOM:
            op = reg.custom_name.decode(errors="replace") if reg.custom_name else "CUSTOM"
            if node_c.custom_initial_data and node_c.custom_initial_data_size > 0:
                custom_options = ctypes.string_at(node_c.custom_initial_data, node_c.custom_initial_data_size)
        else:
            op = BUILTIN_OPS.get(code, f"BUILTIN_{code}")
            attrs, why = _attrs(op, node_c)
            if why:
                refused[k] = why
        nodes.append(Node(index=k, op=op, inputs=inputs, outputs=outputs, attrs=attrs, version=reg.version,
                          custom=code == BUILTIN_CUSTOM, custom_options=custom_options,
                          intermediates=_ints(node_c.intermediates, f"node {index} intermediates", 1 << 16)))

    tensors = [_tensor(i, raw) for i, raw in enumerate(raw_tensors)]
    for node in nodes:
        for t in (*node.inputs, *node.outputs):
            if t >= 0 and raw_tensors[t].type not in C_API_TO_NUMPY and node.index not in refused:
                refused[node.index] = f"tensor {t} ({tensors[t].name!r}) is {tensors[t].type_name}, which the " \
                                      "LiteRT bridge does not hand to a Python delegate"
    produced = {t for n in nodes for t in n.outputs if t >= 0}
    consumed = {t for n in nodes for t in n.inputs if t >= 0}
    inputs = sorted(t for t in consumed - produced if tensors[t].data is None and not tensors[t].is_variable)
    outputs = sorted(produced - consumed)  # the context does not say which tensors the model outputs
    graph = Graph(tensors, nodes, inputs, outputs, name="litert")
    graph.model_digest = _digest(graph)
    return _Snapshot(graph, plan, {tfl: k for k, tfl in enumerate(plan)}, refused)


def _digest(graph: Graph) -> str:
    """Names the model in serialization file names; the cache fingerprint itself covers the constants."""
    h = hashlib.sha256()
    for t in graph.tensors:
        h.update(f"{t.name}|{t.dtype}|{t.shape}|{t.data is not None};".encode())
    for n in graph.nodes:
        h.update(f"{n.op}|{n.inputs}|{n.outputs};".encode())
    return h.hexdigest()


# -- kernels --------------------------------------------------------------------------------------------------

class _KernelState:
    """One delegated partition inside one interpreter: the SimpleDelegate's kernel and the tensors it touches."""

    __slots__ = ("kernel", "graph", "nodes", "inputs", "outputs", "shapes", "dtypes", "slots", "context",
                 "base", "words", "ptrs", "views")

    def __init__(self, kernel: DelegateKernel, graph: Graph, nodes: list[int], inputs: list[int],
                 outputs: list[int]) -> None:
        self.kernel = kernel
        self.graph = graph
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.dtypes = {t: graph.tensors[t].dtype for t in (*inputs, *outputs)}
        # (tensor, index of its data pointer among the tensor array's pointer-sized words)
        self.slots = [(t, t * _WORDS + _DATA_WORD) for t in (*inputs, *outputs)]
        self.context: ContextC | None = None
        self.base: int | None = None  # context->tensors when `words` was made
        # the tensor array as pointer-sized words, for cheap reads of data pointers (made at the first invoke)
        self.words: ctypes.Array[c_void_p] = (c_void_p * 0)()
        self.ptrs: list[int | None] = []
        self.views: dict[int, np.ndarray] = {}


def _dims(tensors: int, t: int) -> tuple[int, ...]:
    return tuple(_ints(c_void_p.from_address(tensors + t * _TENSOR_SIZE + _DIMS_OFFSET).value, "dims", MAX_RANK))


# -- the bridge -----------------------------------------------------------------------------------------------

class Bridge:
    """The TfLiteDelegate of one SimpleDelegate. One object serves every interpreter the delegate is given to:
    per-interpreter state lives in the kernels TFLite creates (one per partition) and frees."""

    def __init__(self, delegate: SimpleDelegate, version: str) -> None:
        self._delegate = weakref.ref(delegate)
        self.version = version
        self.name = str(getattr(delegate, "name", type(delegate).__name__))
        self._lock = threading.RLock()
        self._handles = itertools.count(1)
        # per kernel handle: its state, or what its init raised (prepare reports it)
        self._kernels: dict[int, _KernelState | BaseException] = {}
        self._preparing: dict[int, _Snapshot] = {}
        #: what the latest DelegatePrepare did: the partitions it handed over (our node indices, which are
        #: also positions in the execution plan it saw) and, per node left to the interpreter, why
        self.last_partitions: list[list[int]] = []
        self.last_reasons: dict[int, str] = {}
        # the delegate, held strongly while an interpreter may call (pin), and the interpreters that may
        self._pinned: SimpleDelegate | None = None
        self._owners: set[int] = set()
        # Callbacks and the name must outlive every interpreter that holds pointers to them: they live here, and
        # every bridge is kept for the process (_BRIDGES: a few hundred bytes each, the delegate is not in it).
        self._name_bytes = self.name.encode()
        self._c_prepare = DELEGATE_PREPARE_FN(self._delegate_prepare)
        self._c_init = INIT_FN(self._init)
        self._c_free = FREE_FN(self._free)
        self._c_node_prepare = NODE_FN(self._prepare)
        self._c_invoke = NODE_FN(self._invoke)
        self.registration = RegistrationC(init=self._c_init, free=self._c_free, prepare=self._c_node_prepare,
                                          invoke=self._c_invoke, builtin_code=BUILTIN_DELEGATE,
                                          custom_name=self._name_bytes, version=1)
        self.struct = DelegateC(Prepare=self._c_prepare, flags=0)
        self.pointer = ctypes.addressof(self.struct)

    @property
    def live_kernels(self) -> int:
        """Kernels that interpreters hold right now (each freed when its interpreter is deleted or its graph
        re-delegated)."""
        return len(self._kernels)

    # -- error reporting ----------------------------------------------------------------------------------
    def _fail(self, context: int, where: str, e: BaseException) -> int:
        """Report a Python exception to the interpreter, which raises it as a RuntimeError, and return
        kTfLiteError (an exception must never cross into C)."""
        msg = f"{self.name} {where}: {type(e).__name__}: {e}\n"
        log.debug("%s", msg, exc_info=e)
        try:
            fn = ContextC.from_address(context).ReportError
            if fn:
                REPORT_ERROR(fn)(context, msg.replace("%", "%%").encode(errors="replace"))
        except Exception:  # noqa: BLE001  (reporting is best effort; the status code still says kTfLiteError)
            log.error("%s", msg)
        return K_ERROR

    # -- TfLiteDelegate.Prepare ---------------------------------------------------------------------------
    def _delegate_prepare(self, context: int, _delegate: int) -> int:
        try:
            with self._lock:
                self._replace_nodes(context)
            return K_OK
        except BaseException as e:  # noqa: BLE001
            return self._fail(context, "cannot delegate the graph", e)
        finally:
            self._preparing.pop(context, None)

    def _live_delegate(self) -> SimpleDelegate:
        delegate = self._delegate()
        if delegate is None:
            raise DelegateError("the SimpleDelegate behind this TfLiteDelegate no longer exists")
        return delegate

    def _replace_nodes(self, context: int) -> None:
        delegate = self._live_delegate()
        snap = read_graph(context, self.version)
        graph = snap.graph
        partitions, why_not = select_partitions(delegate, graph, set(snap.refused))
        why_not.update(snap.refused)
        self.last_partitions = [list(p.nodes) for p in partitions]
        self.last_reasons = {i: r for i, r in why_not.items() if not any(i in p.nodes for p in partitions)}
        if not partitions:
            return
        ctx = ContextC.from_address(context)
        wanted = sorted(snap.tfl_index[i] for p in partitions for i in p.nodes)
        nodes = (c_int * (len(wanted) + 1))(len(wanted), *wanted)
        self._check_preview(ctx, context, nodes, partitions, snap)
        self._preparing[context] = snap
        status = REPLACE_NODE_SUBSETS(ctx.ReplaceNodeSubsetsWithDelegateKernels)(
            context, self.registration, ctypes.addressof(nodes), self.pointer)
        if status != K_OK:
            raise DelegateError(f"ReplaceNodeSubsetsWithDelegateKernels failed (status {status})")
        log.info("%s (LiteRT): %d operations will run on the delegate in %d partition(s), the remaining %d on "
                 "LiteRT", self.name, len(wanted), len(partitions), len(graph.nodes) - len(wanted))

    def _check_preview(self, ctx: ContextC, context: int, nodes: ctypes.Array[c_int], partitions: list[Partition],
                       snap: _Snapshot) -> None:
        """LiteRT re-partitions the node set it is given by connectivity: say so when it would not keep ours."""
        if not ctx.PreviewDelegatePartitioning:
            return
        array, count = c_void_p(), c_int()
        if PREVIEW_PARTITIONING(ctx.PreviewDelegatePartitioning)(context, ctypes.addressof(nodes), byref(array),
                                                                 byref(count)) != K_OK:
            return
        params = cast(int, array.value)  # the TfLiteDelegateParams array: not NULL when count > 0, read only then
        theirs = sorted(sorted(snap.ours[i] for i in _ints(
            c_void_p.from_address(params + k * _SIZEOF_PARAMS_ARRAY + DelegateParamsC.nodes_to_replace.offset
                                  ).value, "preview nodes")) for k in range(count.value))
        ours = sorted(sorted(p.nodes) for p in partitions)
        if theirs != ours:
            log.warning("%s (LiteRT): LiteRT splits the delegated nodes into partitions %s, not %s as "
                        "gpu_delegate.Interpreter would", self.name, theirs, ours)

    # -- the kernel's TfLiteRegistration ------------------------------------------------------------------
    def _init(self, context: int, buffer: int, _length: int) -> int:
        handle = next(self._handles)
        try:
            snap = self._preparing[context]
            params = DelegateParamsC.from_address(buffer)
            graph = snap.graph
            nodes = sorted(snap.ours[i] for i in _ints(params.nodes_to_replace, "nodes_to_replace"))
            inputs = [t for t in _ints(params.input_tensors, "input_tensors")
                      if t >= 0 and graph.tensors[t].data is None]  # LiteRT lists constants too
            outputs = _ints(params.output_tensors, "output_tensors")
            kernel = self._live_delegate().create_kernel()
            kernel.init(graph, nodes, inputs, outputs)
            self._kernels[handle] = _KernelState(kernel, graph, nodes, inputs, outputs)
        except BaseException as e:  # noqa: BLE001  (init cannot fail in C: prepare reports it)
            self._kernels[handle] = e
        return handle

    def _free(self, _context: int, buffer: int | None) -> None:
        st = self._kernels.pop(buffer or 0, None)
        if isinstance(st, _KernelState):
            try:
                st.kernel.free()
            except Exception as e:  # noqa: BLE001  (TFLite's free cannot fail; at exit the backend may be gone)
                log.debug("%s: freeing a kernel failed: %s: %s", self.name, type(e).__name__, e)
        self._maybe_unpin()

    # -- lifetime -----------------------------------------------------------------------------------------
    def pin(self, delegate: SimpleDelegate, owner: object | None) -> None:
        """Keep ``delegate`` alive while LiteRT interpreter ``owner`` (None: one we could not find, for the
        process) can call into it: a caller who drops the delegate, or empties the list it passed, must not leave
        LiteRT calling into freed Python objects."""
        self._pinned = delegate
        if owner is None:
            self._owners.add(-1)
            return
        key = id(owner)
        if key not in self._owners:
            self._owners.add(key)
            weakref.finalize(owner, self._owner_gone, key)

    def _owner_gone(self, key: int) -> None:
        self._owners.discard(key)
        self._maybe_unpin()

    def _maybe_unpin(self) -> None:
        # an interpreter is finalized before its C++ side frees the kernels: the last free releases the delegate
        if not self._owners and not self._kernels:
            self._pinned = None

    def _state(self, node: int) -> _KernelState:
        st = self._kernels.get(c_void_p.from_address(node + _USER_DATA_OFFSET).value or 0)
        if st is None:
            raise DelegateError("a delegate node whose kernel was never created or already freed")
        if isinstance(st, BaseException):
            raise st
        return st

    def _prepare(self, context: int, node: int) -> int:
        try:
            st = self._state(node)
            # This TfLiteDelegate does not claim dynamic tensors, so LiteRT has propagated every shape with its
            # own kernels before delegating (and re-delegates after a resize): the context's dims are final.
            st.context = None  # invoke refuses a kernel until its prepare has succeeded
            ctx = ContextC.from_address(context)
            st.shapes = {t: _dims(ctx.tensors, t) for t in (*st.inputs, *st.outputs)}
            st.base, st.ptrs, st.views = None, [None] * len(st.slots), {}
            st.kernel.prepare({t: np.broadcast_to(np.zeros((), st.dtypes[t]), st.shapes[t]) for t in st.inputs})
            st.context = ctx
            return K_OK
        except BaseException as e:  # noqa: BLE001
            return self._fail(context, "prepare", e)

    def _invoke(self, context: int, node: int) -> int:
        try:
            st = self._kernels.get(c_void_p.from_address(node + _USER_DATA_OFFSET).value or 0)
            if not isinstance(st, _KernelState) or st.context is None:
                raise DelegateError("invoke of a kernel that was not successfully prepared")
            base = st.context.tensors
            if base != st.base:  # the tensor array itself moved (tensors were added)
                st.words = (c_void_p * (st.context.tensors_size * _WORDS)).from_address(base)
                st.base = base
            words, ptrs, views = st.words, st.ptrs, st.views
            for k, (t, w) in enumerate(st.slots):
                # Data pointers can move with every allocation: read them now, rebuild a view when one did.
                ptr = words[w]
                if ptr != ptrs[k]:
                    views[t] = self._view(t, ptr, st)
                    ptrs[k] = ptr
            # the inputs only: every output must be written (a kernel that forgets one is an error, as in
            # gpu_delegate.Interpreter, not the previous invoke's values passed off as this one's)
            io = {t: views[t] for t in st.inputs}
            st.kernel.invoke(io)
            for t in st.outputs:
                value = io.get(t)
                view = views[t]
                if value is None:
                    raise DelegateError(f"the kernel did not write output tensor {t} "
                                        f"({st.graph.tensors[t].name!r})")
                if value is view:
                    continue
                value = np.asarray(value)
                if value.shape != view.shape:
                    raise DelegateError(f"the kernel wrote shape {list(value.shape)} to output tensor {t} "
                                        f"({st.graph.tensors[t].name!r}), which has shape {list(view.shape)}")
                if value.dtype == view.dtype:
                    view[...] = value
                else:
                    np.copyto(view, value, casting="same_kind")
            return K_OK
        except BaseException as e:  # noqa: BLE001
            return self._fail(context, "invoke", e)

    @staticmethod
    def _view(t: int, ptr: int | None, st: _KernelState) -> np.ndarray:
        shape, dtype = st.shapes[t], st.dtypes[t]
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not ptr:
            if n:
                raise DelegateError(f"tensor {t} ({st.graph.tensors[t].name!r}) has no memory")
            return np.zeros(shape, dtype)
        # numpy's stubs take no ctypes array, which is a writable buffer like a bytearray
        view = np.frombuffer((ctypes.c_char * n).from_address(ptr), dtype).reshape(shape)  # type: ignore[call-overload]
        if t in st.inputs:
            view.flags.writeable = False
        return view


def native_delegate_pointer(delegate: SimpleDelegate) -> int:
    """The address of the TfLiteDelegate that runs ``delegate`` inside LiteRT's Interpreter. Refuses, with a
    LiteRtAbiError naming the version, an interpreter whose struct layouts the bridge does not know."""
    version = check_version(_caller_distribution())
    b = delegate.__dict__.get("_litert_bridge")
    if b is None:
        b = Bridge(delegate, version)
        delegate.__dict__["_litert_bridge"] = b
        _BRIDGES.append(b)
    b.version = version
    b.pin(delegate, _calling_interpreter())
    return b.pointer


# Every bridge ever handed to LiteRT: its C callbacks must stay valid whatever the caller keeps.
_BRIDGES: list[Bridge] = []


def _calling_interpreter() -> object | None:
    """The interpreter object whose construction asks for the pointer (LiteRT's Interpreter.__init__ calls it), or
    None when it cannot be found."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "__init__" and owner is not None and type(owner).__name__ == "Interpreter" \
                and not type(owner).__module__.startswith("gpu_delegate"):
            return owner
        frame = frame.f_back
    return None


def bridge_of(delegate: SimpleDelegate) -> Bridge | None:
    """The bridge a delegate has been handed to LiteRT through, if any (its last_partitions, live_kernels...)."""
    return delegate.__dict__.get("_litert_bridge")
