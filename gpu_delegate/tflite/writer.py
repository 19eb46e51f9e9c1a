"""Build .tflite flatbuffers from Python: tests make small models op by op, the CLI makes its demo model.

    mb = ModelBuilder()
    x = mb.input("x", [1, 8, 8, 3])
    w = mb.const("w", np.ones([5, 3, 3, 3], np.float32))
    y = mb.tensor("y", [1, 8, 8, 5])
    mb.op("CONV_2D", [x, w, -1], [y], padding="SAME", stride_w=1, stride_h=1)
    mb.output(y)
    content = mb.build()

Option names are the snake_case field names of the op's options table; enum fields also take their names
(``padding="SAME"``, ``fused_activation_function="RELU6"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import flatbuffers
import numpy as np
import tflite
from numpy.typing import ArrayLike, DTypeLike

from ..dtypes import NUMPY_TO_SCHEMA, SCHEMA_NAMES
from .schema import (
    BUILTIN_CODES,
    OPTIONS2_CODES,
    OPTIONS_CODES,
    options2_type_for_op,
    options_fields,
    options_module,
    options_type_for_op,
    vector_prepend,
)
from .strings import encode_strings

SCHEMA_CODES = {name: code for code, name in SCHEMA_NAMES.items()}
_ENUMS = {"padding": tflite.Padding, "fused_activation_function": tflite.ActivationFunctionType,
          "mode": tflite.MirrorPadMode, "combiner": tflite.CombinerType, "kernel_type": tflite.LSTMKernelType,
          "idx_out_type": tflite.TensorType, "reduce_function": tflite.ReduceWindowFunction,
          "algorithm": tflite.RngAlgorithm, "key_dtype": tflite.TensorType, "value_dtype": tflite.TensorType}


class TensorEntry(TypedDict):
    """A tensor as ModelBuilder.tensors holds it until build()."""

    name: str
    shape: list[int]
    type: int  # the schema's TensorType
    buffer: int  # index into ModelBuilder.buffers; 0: none
    scale: ArrayLike | None  # one per tensor, or one per channel along axis
    zero_point: ArrayLike | None
    axis: int
    shape_signature: Sequence[int] | None
    sparsity: dict[str, Any] | None  # traversal_order, block_map, dim_metadata (as Tensor.sparsity)
    is_variable: bool


# An op as ModelBuilder.ops holds it: opcode index, inputs, outputs, options, custom options, whether it is custom
OpEntry = tuple[int, list[int], list[int], dict[str, Any], bytes | None, bool]


@dataclass
class SubgraphEntry:
    """One subgraph as ModelBuilder holds it until build()."""

    name: str
    tensors: list[TensorEntry] = field(default_factory=list)
    ops: list[OpEntry] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


class ModelBuilder:
    """Tensors, ops, inputs and outputs go to the current subgraph: the main one (0) until `select` picks another
    one `add_subgraph` made (control flow: WHILE's cond and body, IF's branches, CALL_ONCE's init)."""

    def __init__(self, description: str = "gpu_delegate.ModelBuilder") -> None:
        self.description = description
        self.subgraphs: list[SubgraphEntry] = [SubgraphEntry("main")]
        self.current = 0
        self.buffers: list[bytes] = [b""]
        self.opcodes: list[tuple[str, int]] = []
        self.signatures: list[tuple[str, dict[str, int], dict[str, int], int]] = []

    # -- subgraphs ------------------------------------------------------------------------------------
    def add_subgraph(self, name: str) -> int:
        """A new empty subgraph; its index (what WHILE's and IF's options name). Use `select` to fill it."""
        self.subgraphs.append(SubgraphEntry(name))
        return len(self.subgraphs) - 1

    def select(self, index: int) -> None:
        """Make subgraph ``index`` the one tensors, ops, inputs and outputs go to."""
        if not 0 <= index < len(self.subgraphs):
            raise ValueError(f"no subgraph {index}: there are {len(self.subgraphs)}")
        self.current = index

    @property
    def tensors(self) -> list[TensorEntry]:
        return self.subgraphs[self.current].tensors

    @tensors.setter
    def tensors(self, value: list[TensorEntry]) -> None:
        self.subgraphs[self.current].tensors = value

    @property
    def ops(self) -> list[OpEntry]:
        return self.subgraphs[self.current].ops

    @ops.setter
    def ops(self, value: list[OpEntry]) -> None:
        self.subgraphs[self.current].ops = value

    @property
    def inputs(self) -> list[int]:
        return self.subgraphs[self.current].inputs

    @inputs.setter
    def inputs(self, value: list[int]) -> None:
        self.subgraphs[self.current].inputs = value

    @property
    def outputs(self) -> list[int]:
        return self.subgraphs[self.current].outputs

    @outputs.setter
    def outputs(self, value: list[int]) -> None:
        self.subgraphs[self.current].outputs = value

    # -- tensors --------------------------------------------------------------------------------------
    def tensor(self, name: str, shape: Sequence[int], dtype: DTypeLike = np.float32, *, scale: ArrayLike | None = None,
               zero_point: ArrayLike | None = None, axis: int = 0, data: ArrayLike | None = None,
               shape_signature: Sequence[int] | None = None, sparsity: dict[str, Any] | None = None,
               is_variable: bool = False, type_name: str | None = None) -> int:
        """A tensor of the current subgraph; ``type_name`` ("RESOURCE") gives a schema type numpy has no dtype for.
        A STRING tensor has dtype ``object`` (its data: bytes or str, written in TFLite's string buffer format)."""
        dtype = np.dtype(dtype)
        type_code = SCHEMA_CODES[type_name] if type_name is not None else NUMPY_TO_SCHEMA[dtype]
        buffer = 0
        if data is not None:
            buffer = len(self.buffers)
            self.buffers.append(encode_strings(np.asarray(data, object)) if type_code == SCHEMA_CODES["STRING"]
                                else np.ascontiguousarray(data, dtype).tobytes())
        self.tensors.append(TensorEntry(name=name, shape=[int(d) for d in shape], type=type_code,
                                        buffer=buffer, scale=scale, zero_point=zero_point, axis=axis,
                                        shape_signature=shape_signature, sparsity=sparsity, is_variable=is_variable))
        return len(self.tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: DTypeLike = np.float32, **kw: Any) -> int:
        t = self.tensor(name, shape, dtype, **kw)
        self.inputs.append(t)
        return t

    def const(self, name: str, data: ArrayLike, dtype: DTypeLike | None = None, **kw: Any) -> int:
        array = np.asarray(data, dtype)
        return self.tensor(name, array.shape, array.dtype, data=array, **kw)

    def output(self, *tensors: int) -> None:
        self.outputs.extend(tensors)

    # -- ops --------------------------------------------------------------------------------------------
    def op(self, op_name: str, inputs: Sequence[int], outputs: Sequence[int], /, *, version: int = 1,
           custom_options: bytes | None = None, **options: Any) -> None:
        """A node of the current subgraph; ``options`` are its options table's fields (STABLEHLO_COMPOSITE's
        ``name`` among them)."""
        custom = op_name not in BUILTIN_CODES
        key = (op_name, version)
        if key not in self.opcodes:
            self.opcodes.append(key)
        self.ops.append((self.opcodes.index(key), list(inputs), list(outputs), options, custom_options, custom))

    # -- serialization ----------------------------------------------------------------------------------
    def build(self) -> bytes:
        b = flatbuffers.Builder(1024 + sum(len(x) for x in self.buffers))

        def ivec(start: Callable[[Any, int], Any], values: Sequence[float], elem: str = "int32") -> int:
            start(b, len(values))
            for v in reversed(values):
                getattr(b, {"int32": "PrependInt32", "int64": "PrependInt64", "float": "PrependFloat32",
                            "uint8": "PrependUint8"}[elem])(v)
            return b.EndVector()

        buffers: list[int] = []
        for data in self.buffers:
            vec = None
            if data:
                b.StartVector(1, len(data), 16)
                b.head = b.head - len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                vec = b.EndVector()
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))

        def table_vec(start: Callable[[Any, int], Any], items: Sequence[int]) -> int:
            start(b, len(items))
            for it in reversed(items):
                b.PrependUOffsetTRelative(it)
            return b.EndVector()

        subgraphs: list[int] = []
        for sub in self.subgraphs:
            tensors: list[int] = []
            for t in sub.tensors:
                name = b.CreateString(t["name"])
                shape = ivec(tflite.TensorStartShapeVector, t["shape"])
                sig = ivec(tflite.TensorStartShapeSignatureVector, t["shape_signature"]) \
                    if t["shape_signature"] is not None else None
                quant = None
                if t["scale"] is not None:
                    scale = np.atleast_1d(np.asarray(t["scale"], np.float32)).tolist()
                    zp = np.atleast_1d(np.asarray(t["zero_point"] if t["zero_point"] is not None else 0, np.int64))
                    zero_points = (zp if zp.size == len(scale) else np.full(len(scale), zp[0])).tolist()
                    sv = ivec(tflite.QuantizationParametersStartScaleVector, scale, "float")
                    zv = ivec(tflite.QuantizationParametersStartZeroPointVector, zero_points, "int64")
                    tflite.QuantizationParametersStart(b)
                    tflite.QuantizationParametersAddScale(b, sv)
                    tflite.QuantizationParametersAddZeroPoint(b, zv)
                    tflite.QuantizationParametersAddQuantizedDimension(b, t["axis"])
                    quant = tflite.QuantizationParametersEnd(b)
                sparsity = self._sparsity(b, t["sparsity"], ivec) if t["sparsity"] else None
                tflite.TensorStart(b)
                tflite.TensorAddShape(b, shape)
                if sig is not None:
                    tflite.TensorAddShapeSignature(b, sig)
                tflite.TensorAddType(b, t["type"])
                tflite.TensorAddBuffer(b, t["buffer"])
                tflite.TensorAddIsVariable(b, t["is_variable"])
                tflite.TensorAddName(b, name)
                if quant is not None:
                    tflite.TensorAddQuantization(b, quant)
                if sparsity is not None:
                    tflite.TensorAddSparsity(b, sparsity)
                tensors.append(tflite.TensorEnd(b))

            ops: list[int] = []
            for opcode_index, inputs, outputs, options, custom_options, custom in sub.ops:
                op_name = self.opcodes[opcode_index][0]
                second = not custom and options_type_for_op(op_name) is None \
                    and options2_type_for_op(op_name) is not None
                opts_type, opts = (0, None) if custom else self._options(b, op_name, options, second)
                iv = ivec(tflite.OperatorStartInputsVector, inputs)
                ov = ivec(tflite.OperatorStartOutputsVector, outputs)
                cv = ivec(tflite.OperatorStartCustomOptionsVector, list(custom_options), "uint8") \
                    if custom_options else None
                tflite.OperatorStart(b)
                tflite.OperatorAddOpcodeIndex(b, opcode_index)
                tflite.OperatorAddInputs(b, iv)
                tflite.OperatorAddOutputs(b, ov)
                if opts is not None and second:
                    tflite.OperatorAddBuiltinOptions2Type(b, opts_type)
                    tflite.OperatorAddBuiltinOptions2(b, opts)
                elif opts is not None:
                    tflite.OperatorAddBuiltinOptionsType(b, opts_type)
                    tflite.OperatorAddBuiltinOptions(b, opts)
                if cv is not None:
                    tflite.OperatorAddCustomOptions(b, cv)
                ops.append(tflite.OperatorEnd(b))

            sg_name = b.CreateString(sub.name)
            tv = table_vec(tflite.SubGraphStartTensorsVector, tensors)
            inv = ivec(tflite.SubGraphStartInputsVector, sub.inputs)
            outv = ivec(tflite.SubGraphStartOutputsVector, sub.outputs)
            opv = table_vec(tflite.SubGraphStartOperatorsVector, ops)
            tflite.SubGraphStart(b)
            tflite.SubGraphAddTensors(b, tv)
            tflite.SubGraphAddInputs(b, inv)
            tflite.SubGraphAddOutputs(b, outv)
            tflite.SubGraphAddOperators(b, opv)
            tflite.SubGraphAddName(b, sg_name)
            subgraphs.append(tflite.SubGraphEnd(b))

        opcodes: list[int] = []
        for name, version in self.opcodes:
            custom_name = b.CreateString(name) if name not in BUILTIN_CODES else None
            code = BUILTIN_CODES.get(name, BUILTIN_CODES["CUSTOM"])
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddVersion(b, version)
            if custom_name is not None:
                tflite.OperatorCodeAddCustomCode(b, custom_name)
            opcodes.append(tflite.OperatorCodeEnd(b))

        sigs: list[int] = []
        for key, ins, outs, subgraph_index in self.signatures:
            maps: list[list[int]] = []
            for d in (ins, outs):
                entries: list[int] = []
                for n, index in d.items():
                    s = b.CreateString(n)
                    tflite.TensorMapStart(b)
                    tflite.TensorMapAddName(b, s)
                    tflite.TensorMapAddTensorIndex(b, index)
                    entries.append(tflite.TensorMapEnd(b))
                maps.append(entries)
            iv = table_vec(tflite.SignatureDefStartInputsVector, maps[0])
            ov = table_vec(tflite.SignatureDefStartOutputsVector, maps[1])
            k = b.CreateString(key)
            tflite.SignatureDefStart(b)
            tflite.SignatureDefAddInputs(b, iv)
            tflite.SignatureDefAddOutputs(b, ov)
            tflite.SignatureDefAddSignatureKey(b, k)
            tflite.SignatureDefAddSubgraphIndex(b, subgraph_index)
            sigs.append(tflite.SignatureDefEnd(b))

        desc = b.CreateString(self.description)
        ocv = table_vec(tflite.ModelStartOperatorCodesVector, opcodes)
        sgv = table_vec(tflite.ModelStartSubgraphsVector, subgraphs)
        bv = table_vec(tflite.ModelStartBuffersVector, buffers)
        sdv = table_vec(tflite.ModelStartSignatureDefsVector, sigs) if sigs else None
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, ocv)
        tflite.ModelAddSubgraphs(b, sgv)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, bv)
        if sdv is not None:
            tflite.ModelAddSignatureDefs(b, sdv)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    def add_signature(self, key: str, inputs: dict[str, int], outputs: dict[str, int], subgraph: int = 0) -> None:
        """A signature: names for tensors of subgraph ``subgraph``'s inputs and outputs."""
        self.signatures.append((key, inputs, outputs, subgraph))

    @staticmethod
    def _options(b: Any, op_name: str, options: dict[str, Any], second: bool = False) -> tuple[int, int | None]:
        type_name = options2_type_for_op(op_name) if second else options_type_for_op(op_name)
        if type_name is None:
            if options:
                raise ValueError(f"{op_name} takes no options, got {sorted(options)}")
            return 0, None
        module = options_module(type_name)
        fields = {snake: (getter, vec) for snake, getter, vec in options_fields(type_name)}
        vectors: dict[str, int] = {}  # vectors and strings: written before the table
        for key, value in options.items():
            if key not in fields:
                raise ValueError(f"{type_name} has no field {key!r}; fields: {sorted(fields)}")
            getter, is_vector = fields[key]
            if isinstance(value, str) and key not in _ENUMS:  # a string field (VAR_HANDLE's shared_name)
                vectors[key] = b.CreateString(value)
            elif is_vector:
                start = getattr(module, f"{type_name}Start{getter}Vector")
                start(b, len(value))
                prepend = getattr(b, vector_prepend(type_name, getter))
                for v in reversed(list(value)):
                    prepend(v.item() if isinstance(v, np.generic) else v)
                vectors[key] = b.EndVector()
        getattr(module, f"{type_name}Start")(b)
        for key, value in options.items():
            getter, is_vector = fields[key]
            if key in vectors:
                value = vectors[key]
            elif isinstance(value, str):
                value = getattr(_ENUMS[key], value)
            getattr(module, f"{type_name}Add{getter}")(b, value)
        codes = OPTIONS2_CODES if second else OPTIONS_CODES
        return codes[type_name], getattr(module, f"{type_name}End")(b)

    @staticmethod
    def _sparsity(b: Any, sp: dict[str, Any], ivec: Callable[..., int]) -> int:
        dims: list[int] = []
        for d in sp["dim_metadata"]:
            seg = idx = None
            if d["format"] == 1:
                seg_vals = ivec(tflite.Int32VectorStartValuesVector, list(d["segments"]))
                tflite.Int32VectorStart(b)
                tflite.Int32VectorAddValues(b, seg_vals)
                seg = tflite.Int32VectorEnd(b)
                idx_vals = ivec(tflite.Int32VectorStartValuesVector, list(d["indices"]))
                tflite.Int32VectorStart(b)
                tflite.Int32VectorAddValues(b, idx_vals)
                idx = tflite.Int32VectorEnd(b)
            tflite.DimensionMetadataStart(b)
            tflite.DimensionMetadataAddFormat(b, d["format"])
            tflite.DimensionMetadataAddDenseSize(b, d.get("dense_size", 0))
            if seg is not None:
                tflite.DimensionMetadataAddArraySegmentsType(b, 1)
                tflite.DimensionMetadataAddArraySegments(b, seg)
                tflite.DimensionMetadataAddArrayIndicesType(b, 1)
                tflite.DimensionMetadataAddArrayIndices(b, idx)
            dims.append(tflite.DimensionMetadataEnd(b))
        to = ivec(tflite.SparsityParametersStartTraversalOrderVector, list(sp["traversal_order"]))
        bm = ivec(tflite.SparsityParametersStartBlockMapVector, list(sp.get("block_map", [])))
        tflite.SparsityParametersStartDimMetadataVector(b, len(dims))
        for d in reversed(dims):
            b.PrependUOffsetTRelative(d)
        dv = b.EndVector()
        tflite.SparsityParametersStart(b)
        tflite.SparsityParametersAddTraversalOrder(b, to)
        tflite.SparsityParametersAddBlockMap(b, bm)
        tflite.SparsityParametersAddDimMetadata(b, dv)
        return tflite.SparsityParametersEnd(b)
