"""Read a .tflite flatbuffer into the graph IR, validating everything it touches.

Whatever the bytes, the result is a `Model` or a `ModelError` that says what is wrong: the generated
flatbuffer accessors raise struct/index errors on bad offsets, and every vector length is checked against
the file size before it is iterated, so a hostile file cannot make us loop or allocate without bound.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import tflite

from ..dtypes import SCHEMA_NAMES, SCHEMA_TO_NUMPY
from ..errors import ModelError
from ..graph import Graph, Model, Node, Quantization, Signature, Tensor
from .schema import BUILTIN_OPS, OPTIONS2_TYPES, OPTIONS_TYPES, options_fields, options_module
from .strings import decode_strings

MAX_RANK = 16


def read_model(content: bytes | bytearray | memoryview, source: str = "model") -> Model:
    """Parse .tflite bytes. ``source`` names the file in error messages."""
    buf = content if isinstance(content, (bytes, bytearray)) else bytes(content)
    if len(buf) < 8:
        raise ModelError(f"{source}: {len(buf)} bytes is too short to be a TFLite model")
    if buf[4:8] != b"TFL3":
        raise ModelError(f"{source}: not a TFLite model (file identifier {bytes(buf[4:8])!r}, expected b'TFL3')")
    try:
        model = _Reader(buf, source).model()
    except ModelError:
        raise
    except struct.error:  # an offset or length points past the end of the bytes
        raise ModelError(f"{source}: truncated or corrupt .tflite file: its flatbuffer points past the end of "
                         f"its {len(buf)} bytes") from None
    except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError,
            AttributeError, KeyError, MemoryError) as e:
        raise ModelError(f"{source}: truncated or corrupt .tflite file: malformed flatbuffer "
                         f"({type(e).__name__}: {e})") from None
    digest = hashlib.sha256(buf).hexdigest()
    for g in model.subgraphs:
        g.model_digest = digest
    return model


class _Reader:
    """Reads one model; the flatbuffer objects of the generated `tflite` classes are untyped (Any)."""

    def __init__(self, buf: bytes | bytearray, source: str) -> None:
        self.buf = buf
        self.source = source

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.source}: {what}")

    def count(self, obj: Any, field: str, elem_size: int = 4) -> int:
        n = getattr(obj, f"{field}Length")()
        if n < 0 or n * elem_size > len(self.buf):
            raise self.fail(f"{type(obj).__name__}.{field} claims {n} entries, more than the file can hold")
        return n

    def ints(self, obj: Any, field: str) -> list[int]:
        n = self.count(obj, field)
        return [int(v) for v in getattr(obj, f"{field}AsNumpy")()] if n else []

    def model(self) -> Model:
        m = tflite.Model.GetRootAs(self.buf, 0)
        self.opcodes = [self.opcode(m.OperatorCodes(i), i) for i in range(self.count(m, "OperatorCodes"))]
        self.buffers = [m.Buffers(i) for i in range(self.count(m, "Buffers"))]
        n_sub = self.count(m, "Subgraphs")
        if n_sub == 0:
            raise self.fail("the model has no subgraph")
        subgraphs = [self.subgraph(m.Subgraphs(i), i) for i in range(n_sub)]
        signatures: list[Signature] = []
        for i in range(self.count(m, "SignatureDefs")):
            s = m.SignatureDefs(i)
            sg = s.SubgraphIndex()
            if not 0 <= sg < n_sub:
                raise self.fail(f"signature {i} names subgraph {sg}, the model has {n_sub}")
            maps: list[dict[str, int]] = []
            for field in ("Inputs", "Outputs"):
                d: dict[str, int] = {}
                for j in range(self.count(s, field)):
                    tm = getattr(s, field)(j)
                    t = tm.TensorIndex()
                    if not 0 <= t < len(subgraphs[sg].tensors):
                        raise self.fail(f"signature {i} names tensor {t}, out of range")
                    d[(tm.Name() or b"").decode()] = t
                maps.append(d)
            signatures.append(Signature((s.SignatureKey() or b"").decode(), sg, maps[0], maps[1]))
        desc = (m.Description() or b"").decode(errors="replace")
        return Model(subgraphs, signatures, version=m.Version(), description=desc)

    def opcode(self, oc: Any, i: int) -> tuple[str, bool, int]:
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        if code == 32:  # CUSTOM
            name = (oc.CustomCode() or b"").decode(errors="replace")
            if not name:
                raise self.fail(f"operator code {i} is CUSTOM with no custom code name")
            return name, True, oc.Version()
        if code not in BUILTIN_OPS:
            raise self.fail(f"operator code {i} has unknown builtin code {code}")
        return BUILTIN_OPS[code], False, oc.Version()

    def subgraph(self, sg: Any, si: int) -> Graph:
        tensors = [self.tensor(sg.Tensors(i), i) for i in range(self.count(sg, "Tensors"))]
        nt = len(tensors)

        def check(ids: list[int], what: str, optional: bool) -> list[int]:
            for t in ids:
                if not (0 <= t < nt or (optional and t == -1)):
                    raise self.fail(f"subgraph {si}: {what} names tensor {t}, but there are {nt} tensors")
            return ids

        inputs = check(self.ints(sg, "Inputs"), "graph input", False)
        outputs = check(self.ints(sg, "Outputs"), "graph output", False)
        nodes: list[Node] = []
        for i in range(self.count(sg, "Operators")):
            op = sg.Operators(i)
            idx = op.OpcodeIndex()
            if not 0 <= idx < len(self.opcodes):
                raise self.fail(f"subgraph {si}: node {i} uses operator code {idx}, there are {len(self.opcodes)}")
            name, custom, version = self.opcodes[idx]
            node = Node(index=i, op=name, version=version, custom=custom,
                        inputs=check(self.ints(op, "Inputs"), f"node {i} ({name}) input", True),
                        outputs=check(self.ints(op, "Outputs"), f"node {i} ({name}) output", False),
                        intermediates=check(self.ints(op, "Intermediates"), f"node {i} intermediate", False))
            if custom:
                n = self.count(op, "CustomOptions", 1)
                node.custom_options = op.CustomOptionsAsNumpy().tobytes() if n else b""
            else:
                node.attrs = self.options(op, name, i)
            nodes.append(node)
        # the converter gives every tensor a buffer, so an op's output with no elements (SPLIT_V's empty piece)
        # looks like a zero-element constant: what a node or the caller writes is no constant
        for t in [*inputs, *(t for node in nodes for t in node.outputs)]:
            if tensors[t].data is not None and tensors[t].size == 0:
                tensors[t].data = None
        return Graph(tensors, nodes, inputs, outputs, name=(sg.Name() or b"").decode(errors="replace"), index=si)

    def options(self, op: Any, op_name: str, i: int) -> dict[str, Any]:
        """The op's options from either union (builtin_options, or builtin_options_2 for StableHLO ops)."""
        return {**self.options_table(op.BuiltinOptionsType(), op.BuiltinOptions, OPTIONS_TYPES, op_name, i),
                **self.options_table(op.BuiltinOptions2Type(), op.BuiltinOptions2, OPTIONS2_TYPES, op_name, i)}

    def options_table(self, type_code: int, get_table: Callable[[], Any], types: dict[int, str], op_name: str,
                      i: int) -> dict[str, Any]:
        if type_code == 0:
            return {}
        type_name = types.get(type_code)
        if type_name is None:
            raise self.fail(f"node {i} ({op_name}) has unknown builtin options type {type_code}")
        table = get_table()
        if table is None:
            return {}
        obj = getattr(options_module(type_name), type_name)()
        obj.Init(table.Bytes, table.Pos)
        attrs: dict[str, Any] = {}
        for snake, getter, is_vector in options_fields(type_name):
            if is_vector:
                self.count(obj, getter)
                attrs[snake] = [v.item() for v in getattr(obj, f"{getter}AsNumpy")()] \
                    if getattr(obj, f"{getter}Length")() else []
            else:
                value = getattr(obj, getter)()
                if isinstance(value, (int, float, bool)):
                    attrs[snake] = value
                elif isinstance(value, bytes):  # string fields (VAR_HANDLE's container and shared_name)
                    attrs[snake] = value.decode(errors="replace")
        return attrs

    def tensor(self, t: Any, i: int) -> Tensor:
        name = (t.Name() or b"").decode(errors="replace")
        label = f"tensor {i} ({name!r})"
        shape = tuple(self.ints(t, "Shape"))
        if len(shape) > MAX_RANK or any(d < 0 for d in shape):
            raise self.fail(f"{label} has an invalid shape {list(shape)}")
        sig = tuple(self.ints(t, "ShapeSignature")) or None
        type_code = t.Type()
        if type_code not in SCHEMA_TO_NUMPY:
            raise self.fail(f"{label} has unknown element type {type_code}")
        dtype = SCHEMA_TO_NUMPY[type_code] or np.dtype(np.uint8)
        tensor = Tensor(i, name, shape, dtype, shape_signature=sig, is_variable=bool(t.IsVariable()),
                        type_name=SCHEMA_NAMES[type_code])
        tensor.quant = self.quantization(t.Quantization(), label, shape)
        sp = t.Sparsity()
        if sp is not None:
            tensor.sparsity = self.sparsity(sp, label)
        b = t.Buffer()
        if not 0 <= b < max(len(self.buffers), 1):
            raise self.fail(f"{label} uses buffer {b}, there are {len(self.buffers)}")
        if b > 0:
            raw = self.buffer_bytes(b, label)
            if raw is not None and raw.size:
                tensor.data = self.constant(raw, tensor, type_code, label)
            elif tensor.size == 0 and SCHEMA_TO_NUMPY[type_code] is not None and not tensor.is_variable:
                # a constant with no elements has no bytes either (RESHAPE to a scalar takes a shape of [0])
                tensor.data = np.zeros(shape, dtype)
        return tensor

    def buffer_bytes(self, b: int, label: str) -> np.ndarray | None:
        buf = self.buffers[b]
        offset, size = buf.Offset(), buf.Size()
        if offset > 1:
            if offset + size > len(self.buf):
                raise self.fail(f"{label}: buffer {b} lies at bytes {offset}..{offset + size}, "
                                f"past the end of the {len(self.buf)}-byte file")
            return np.frombuffer(self.buf, np.uint8, size, offset)
        o = buf._tab.Offset(4)
        if not o:
            return None
        n = buf._tab.VectorLen(o)
        start = buf._tab.Vector(o)
        if start + n > len(self.buf):
            raise self.fail(f"{label}: buffer {b} runs past the end of the file")
        return np.frombuffer(self.buf, np.uint8, n, start)

    def constant(self, raw: np.ndarray, tensor: Tensor, type_code: int, label: str) -> np.ndarray:
        if SCHEMA_TO_NUMPY[type_code] is None:
            return raw  # variants and bfloat16: kept as bytes, no op we run reads them
        if tensor.type_name == "STRING":
            try:
                return decode_strings(raw, tensor.size, label).reshape(tensor.shape)
            except ValueError as e:
                raise self.fail(str(e)) from None
        if tensor.sparsity is not None:
            if raw.size % tensor.dtype.itemsize:
                raise self.fail(f"{label}: sparse buffer of {raw.size} bytes is not a whole number of elements")
            return raw.view(tensor.dtype)
        n = tensor.size
        if type_code == 17:  # INT4, two per byte, low nibble first
            if raw.size != (n + 1) // 2:
                raise self.fail(f"{label}: INT4 buffer has {raw.size} bytes, shape {list(tensor.shape)} needs "
                                f"{(n + 1) // 2}")
            lo = (raw.astype(np.int8) << 4) >> 4
            hi = raw.astype(np.int8) >> 4
            return np.stack([lo, hi], -1).reshape(-1)[:n].reshape(tensor.shape)
        need = n * tensor.dtype.itemsize
        if raw.size != need:
            raise self.fail(f"{label}: buffer has {raw.size} bytes, shape {list(tensor.shape)} of "
                            f"{tensor.dtype} needs {need}")
        if (raw.ctypes.data % tensor.dtype.itemsize) == 0:
            arr = raw.view(tensor.dtype)
        else:  # misaligned data in a file written by hand: copy rather than fault on strict platforms
            arr = raw.copy().view(tensor.dtype)
        return arr.reshape(tensor.shape)

    def quantization(self, q: Any, label: str, shape: tuple[int, ...]) -> Quantization | None:
        if q is None:
            return None
        ns, nz = self.count(q, "Scale"), self.count(q, "ZeroPoint", 8)
        if ns == 0:
            return None
        scale = q.ScaleAsNumpy().astype(np.float32)
        zp = q.ZeroPointAsNumpy().astype(np.int64) if nz else np.zeros(ns, np.int64)
        if nz not in (0, ns):
            raise self.fail(f"{label}: {ns} quantization scales but {nz} zero points")
        axis = q.QuantizedDimension()
        if ns > 1 and not (0 <= axis < len(shape) and shape[axis] == ns):
            raise self.fail(f"{label}: {ns} per-channel scales do not match dimension {axis} of shape "
                            f"{list(shape)}")
        if not np.all(np.isfinite(scale)):
            raise self.fail(f"{label}: quantization scale is not finite")
        return Quantization(scale, zp, axis)

    def sparsity(self, sp: Any, label: str) -> dict[str, Any]:
        dims: list[dict[str, Any]] = []
        for j in range(self.count(sp, "DimMetadata")):
            dm = sp.DimMetadata(j)
            entry: dict[str, Any] = {"format": dm.Format(), "dense_size": dm.DenseSize()}
            if dm.Format() == 1:  # SPARSE_CSR
                entry["segments"] = self.index_vector(dm.ArraySegmentsType(), dm.ArraySegments(), label)
                entry["indices"] = self.index_vector(dm.ArrayIndicesType(), dm.ArrayIndices(), label)
            dims.append(entry)
        return {"traversal_order": self.ints(sp, "TraversalOrder"), "block_map": self.ints(sp, "BlockMap"),
                "dim_metadata": dims}

    def index_vector(self, type_code: int, table: Any, label: str) -> np.ndarray:
        names = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}
        if type_code not in names or table is None:
            raise self.fail(f"{label}: sparse dimension has no index vector")
        cls = getattr(tflite, names[type_code])
        v = cls()
        v.Init(table.Bytes, table.Pos)
        self.count(v, "Values", 1)
        return v.ValuesAsNumpy().astype(np.int64) if v.ValuesLength() else np.zeros(0, np.int64)
