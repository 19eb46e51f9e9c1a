"""The .tflite reader against LiteRT's own reading of the same bytes, and the writer round trip."""

from __future__ import annotations

import struct
from collections import Counter

import flatbuffers
import numpy as np
import pytest
import tflite

import gpu_delegate as gd
from gpu_delegate.tflite import ModelBuilder, read_model

from .reference import litert_interpreter, need_models

# Op counts from ../shared/models/README.md.
V1 = {"CONV_2D": 15, "DEPTHWISE_CONV_2D": 13, "MEAN": 1, "RESHAPE": 1, "SOFTMAX": 1}
V2 = {"CONV_2D": 35, "DEPTHWISE_CONV_2D": 17, "ADD": 10, "MEAN": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1}
OP_COUNTS = {
    **{f"mobilenet/mobilenet_v1_224_{k}.tflite": V1 for k in ("fp32", "dynrange", "int8")},
    **{f"mobilenet/mobilenet_v2_224_{k}.tflite": V2 for k in ("fp32", "dynrange", "int8")},
    "mobilenet/mobilenet_v1_224_fp16.tflite": {**V1, "DEQUANTIZE": 35},
    "mobilenet/mobilenet_v2_224_fp16.tflite": {**V2, "DEQUANTIZE": 66},
    "real/sine_float.tflite": {"FULLY_CONNECTED": 3},
}
OP_SETS = {  # the README lists only which ops these use
    "real/face_detection_short_range.tflite": {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "RELU", "PAD",
                                               "MAX_POOL_2D", "RESHAPE", "CONCATENATION", "DEQUANTIZE"},
    "real/iris_landmark.tflite": {"CONV_2D", "PRELU", "DEPTHWISE_CONV_2D", "ADD", "MAX_POOL_2D", "RESHAPE",
                                  "PAD"},
}


def _litert_reader(content: bytes):
    """LiteRT's interpreter without XNNPACK, which would rewrite the node list."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    no_xnnpack = litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    return litert.Interpreter(model_content=content, experimental_op_resolver_type=no_xnnpack)


def _assert_tensors_match_litert(graph, content: bytes, check_data: bool = True) -> None:
    ref = _litert_reader(content)
    details = ref.get_tensor_details()
    assert len(details) == len(graph.tensors)
    for d in details:
        t = graph.tensors[d["index"]]
        label = f"tensor {t.index} ({t.name})"
        assert t.name == d["name"], label
        assert t.shape == tuple(d["shape"]), label
        assert (t.shape_signature or t.shape) == tuple(d["shape_signature"]), label
        assert t.dtype == np.dtype(d["dtype"]), label
        q = d["quantization_parameters"]
        if t.quant is None:
            assert q["scales"].size == 0, label
        else:
            np.testing.assert_array_equal(t.quant.scale, q["scales"], err_msg=label)
            np.testing.assert_array_equal(t.quant.zero_point, q["zero_points"], err_msg=label)
            assert t.quant.axis == q["quantized_dimension"], label
        if check_data and t.data is not None:
            np.testing.assert_array_equal(t.data, ref.get_tensor(t.index), err_msg=label)


@pytest.mark.parametrize("name", sorted({**OP_COUNTS, **OP_SETS}))
def test_shared_model_reads_as_litert_does(name):
    path = need_models() / name
    content = path.read_bytes()
    model = read_model(content, str(path))
    graph = model.main
    counts = Counter(n.op for n in graph.nodes)
    if name in OP_COUNTS:
        assert counts == OP_COUNTS[name]
    else:
        assert set(counts) == OP_SETS[name]
    ops = _litert_reader(content)._get_ops_details()
    assert [(o["op_name"], list(o["inputs"]), list(o["outputs"])) for o in ops] == \
        [(n.op, n.inputs, n.outputs) for n in graph.nodes]
    _assert_tensors_match_litert(graph, content)
    ref = _litert_reader(content)
    assert [graph.tensors[i].name for i in graph.inputs] == [d["name"] for d in ref.get_input_details()]
    assert [graph.tensors[i].name for i in graph.outputs] == [d["name"] for d in ref.get_output_details()]
    sigs = {s.key: {"inputs": sorted(s.inputs), "outputs": sorted(s.outputs)} for s in model.signatures}
    assert sigs == {k: {"inputs": sorted(v["inputs"]), "outputs": sorted(v["outputs"])}
                    for k, v in ref.get_signature_list().items()}


def test_int8_model_has_per_channel_weights():
    content = (need_models() / "mobilenet/mobilenet_v2_224_int8.tflite").read_bytes()
    graph = read_model(content).main
    conv = next(n for n in graph.nodes if n.op == "CONV_2D")
    w = graph.tensors[conv.inputs[1]]
    assert w.dtype == np.int8 and w.quant.per_channel and w.quant.axis == 0
    assert w.quant.scale.size == w.shape[0] and np.all(w.quant.zero_point == 0)
    dw = next(n for n in graph.nodes if n.op == "DEPTHWISE_CONV_2D")
    assert graph.tensors[dw.inputs[1]].quant.axis == 3


# -- the writer round trip -----------------------------------------------------------------------------------

# One node per options table the project's ops read, with values other than the defaults.
OPTIONS = [
    ("CONV_2D", {"padding": "VALID", "stride_w": 2, "stride_h": 3, "fused_activation_function": "RELU6",
                 "dilation_w_factor": 2, "dilation_h_factor": 4}),
    ("DEPTHWISE_CONV_2D", {"padding": "SAME", "stride_w": 1, "stride_h": 2, "depth_multiplier": 3,
                           "fused_activation_function": "RELU", "dilation_w_factor": 1,
                           "dilation_h_factor": 2}),
    ("TRANSPOSE_CONV", {"padding": "VALID", "stride_w": 2, "stride_h": 2,
                        "fused_activation_function": "TANH"}),
    ("AVERAGE_POOL_2D", {"padding": "SAME", "stride_w": 2, "stride_h": 1, "filter_width": 3,
                         "filter_height": 5, "fused_activation_function": "RELU_N1_TO_1"}),
    ("MAX_POOL_2D", {"padding": "VALID", "stride_w": 3, "stride_h": 3, "filter_width": 2,
                     "filter_height": 2}),
    ("FULLY_CONNECTED", {"fused_activation_function": "RELU", "keep_num_dims": True,
                         "asymmetric_quantize_inputs": True}),
    ("SOFTMAX", {"beta": 0.5}),
    ("ADD", {"fused_activation_function": "RELU6", "pot_scale_int16": False}),
    ("SUB", {"fused_activation_function": "RELU"}),
    ("MUL", {"fused_activation_function": "SIGN_BIT"}),
    ("DIV", {"fused_activation_function": "RELU_N1_TO_1"}),
    ("CONCATENATION", {"axis": -1, "fused_activation_function": "RELU"}),
    ("RESHAPE", {"new_shape": [1, -1, 7]}),
    ("SQUEEZE", {"squeeze_dims": [0, 2]}),
    ("MEAN", {"keep_dims": True}),
    ("SUM", {"keep_dims": False}),
    ("RESIZE_BILINEAR", {"align_corners": False, "half_pixel_centers": True}),
    ("RESIZE_NEAREST_NEIGHBOR", {"align_corners": True, "half_pixel_centers": False}),
    ("STRIDED_SLICE", {"begin_mask": 5, "end_mask": 2, "ellipsis_mask": 0, "new_axis_mask": 8,
                       "shrink_axis_mask": 1, "offset": True}),
    ("MIRROR_PAD", {"mode": "SYMMETRIC"}),
    ("LEAKY_RELU", {"alpha": 0.125}),
    ("GATHER", {"axis": 1, "batch_dims": 0}),
    ("SPLIT", {"num_splits": 4}),
    ("PACK", {"values_count": 3, "axis": -2}),
    ("SPACE_TO_DEPTH", {"block_size": 2}),
    ("DEPTH_TO_SPACE", {"block_size": 4}),
    ("L2_NORMALIZATION", {"fused_activation_function": "RELU"}),
    ("LOCAL_RESPONSE_NORMALIZATION", {"radius": 3, "bias": 1.5, "alpha": 0.25, "beta": 0.75}),
    ("CAST", {"in_data_type": 9, "out_data_type": 0}),
    ("ARG_MAX", {"output_type": 4}),
    ("BATCH_MATMUL", {"adj_x": True, "adj_y": False}),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"fused_activation_function": "TANH", "cell_clip": 10.0,
                                      "proj_clip": 0.5, "time_major": False}),
    ("MAXIMUM", {}),
    ("PAD", {}),
    ("HARD_SWISH", {}),
]
ENUM_VALUES = {"VALID": 1, "SAME": 0, "NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4,
               "SIGN_BIT": 5, "SYMMETRIC": 1}


def test_writer_options_round_trip():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4])
    for k, (op, options) in enumerate(OPTIONS):
        y = mb.tensor(f"y{k}", [1, 4])
        mb.op(op, [x], [y], version=2 if k % 2 else 1, **options)
        mb.output(y)
    mb.op("NoSuchOp", [x], [mb.tensor("z", [1])], custom_options=b"\x01\x02\xff")
    graph = read_model(mb.build()).main
    assert [n.op for n in graph.nodes] == [op for op, _ in OPTIONS] + ["NoSuchOp"]
    for (op, options), node in zip(OPTIONS, graph.nodes):
        assert node.version == (2 if node.index % 2 else 1) and not node.custom
        for key, value in options.items():
            want = ENUM_VALUES[value] if isinstance(value, str) else value
            assert node.attrs[key] == want, f"{op}.{key}: {node.attrs[key]!r} != {want!r}"
    custom = graph.nodes[-1]
    assert custom.custom and custom.custom_options == b"\x01\x02\xff" and custom.attrs == {}


def test_writer_tensors_round_trip():
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("in", [1, 3], shape_signature=[-1, 3])
    consts = {}
    for dt in (np.float32, np.float16, np.int32, np.uint8, np.int64, np.bool_, np.int16, np.int8, np.float64):
        data = (rng.standard_normal((2, 3)) * 100).astype(dt)
        consts[np.dtype(dt)] = (mb.const(f"c_{np.dtype(dt).name}", data), data)
    q = mb.tensor("q", [4, 1, 1, 3], np.int8, scale=[0.5, 0.25, 0.125, 1.0], zero_point=0, axis=0,
                  data=np.arange(-6, 6, dtype=np.int8).reshape(4, 1, 1, 3))
    v = mb.tensor("state", [1, 3], is_variable=True)
    y = mb.tensor("out", [1, 3], np.uint8, scale=0.75, zero_point=128)
    mb.op("ADD", [x, consts[np.dtype(np.float32)][0]], [y])
    mb.output(y)
    graph = read_model(mb.build()).main
    assert graph.inputs == [x] and graph.outputs == [y]
    t = graph.tensors[x]
    assert (t.name, t.shape, t.shape_signature, t.dtype, t.data) == ("in", (1, 3), (-1, 3), np.float32, None)
    for dt, (i, data) in consts.items():
        t = graph.tensors[i]
        assert t.dtype == dt and t.shape == (2, 3) and t.is_const
        np.testing.assert_array_equal(t.data, data)
    t = graph.tensors[q]
    assert t.quant.per_channel and t.quant.axis == 0
    np.testing.assert_array_equal(t.quant.scale, np.array([0.5, 0.25, 0.125, 1.0], np.float32))
    np.testing.assert_array_equal(t.quant.zero_point, np.zeros(4, np.int64))
    assert graph.tensors[v].is_variable and not graph.tensors[x].is_variable
    assert graph.tensors[y].quant.scalar() == (0.75, 128)


def _per_channel_model(axis: int, scales, shape) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", [1, 2, 2, 3])
    w = mb.tensor("w", shape, np.int8, scale=scales, zero_point=0, axis=axis,
                  data=np.ones(shape, np.int8))
    y = mb.tensor("y", [1, 2, 2, 3])
    mb.op("ADD", [x, w], [y])
    mb.output(y)
    return mb.build()


def test_per_channel_quantization_matches_litert():
    scales = [0.5, 0.25, 0.125]
    content = _per_channel_model(3, scales, [1, 1, 1, 3])
    graph = read_model(content).main
    assert graph.tensors[1].quant.axis == 3 and graph.tensors[1].quant.per_channel
    _assert_tensors_match_litert(graph, content)


def test_per_channel_scales_must_match_the_dimension():
    with pytest.raises(gd.ModelError, match=r"tensor 1 \('w'\).*3 per-channel scales.*dimension 1"):
        read_model(_per_channel_model(1, [0.5, 0.25, 0.125], [1, 2, 1, 3]))


def test_signatures_match_litert():
    mb = ModelBuilder()
    a = mb.input("serving_default_a:0", [1, 2])
    b = mb.input("serving_default_b:0", [1, 2])
    s = mb.tensor("StatefulPartitionedCall:0", [1, 2])
    mb.op("ADD", [a, b], [s])
    mb.output(s)
    mb.add_signature("serving_default", {"left": a, "right": b}, {"sum": s})
    content = mb.build()
    model = read_model(content)
    sig = model.signatures[0]
    assert (sig.key, sig.subgraph, sig.inputs, sig.outputs) == ("serving_default", 0, {"left": a, "right": b},
                                                                 {"sum": s})
    ref = _litert_reader(content).get_signature_list()
    assert ref == {"serving_default": {"inputs": ["left", "right"], "outputs": ["sum"]}}


def test_buffer_data_must_fit_the_shape():
    mb = ModelBuilder()
    x = mb.input("x", [4])
    c = mb.tensor("c", [4], np.float32, data=np.ones(3, np.float32))
    y = mb.tensor("y", [4])
    mb.op("ADD", [x, c], [y])
    mb.output(y)
    with pytest.raises(gd.ModelError, match=r"tensor 1 \('c'\): buffer has 12 bytes.*needs 16"):
        read_model(mb.build(), "m.tflite")


# -- buffers stored after the flatbuffer ---------------------------------------------------------------------

def _model_with_external_buffer(const: np.ndarray) -> bytes:
    """y = x + c, where c's bytes follow the flatbuffer and its Buffer table holds only offset and size:
    how the converter stores models over 2 GB. Built by hand (ModelBuilder writes data inline), with a
    placeholder offset that is patched once the flatbuffer's length is known."""
    b = flatbuffers.Builder(1024)
    placeholder = 0x7EADBEEF7EADBEEF
    buffers = []
    for external in (False, False, True):
        tflite.BufferStart(b)
        if external:
            tflite.BufferAddOffset(b, placeholder)
            tflite.BufferAddSize(b, const.nbytes)
        buffers.append(tflite.BufferEnd(b))

    def ints(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    tensors = []
    for name, buffer in (("x", 0), ("y", 1), ("c", 2)):
        n = b.CreateString(name)
        shape = ints(tflite.TensorStartShapeVector, list(const.shape))
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, tflite.TensorType.FLOAT32)
        tflite.TensorAddBuffer(b, buffer)
        tflite.TensorAddName(b, n)
        tensors.append(tflite.TensorEnd(b))
    ins, outs = ints(tflite.OperatorStartInputsVector, [0, 2]), ints(tflite.OperatorStartOutputsVector, [1])
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, 0)
    tflite.OperatorAddInputs(b, ins)
    tflite.OperatorAddOutputs(b, outs)
    op = tflite.OperatorEnd(b)

    def tables(start, items):
        start(b, len(items))
        for it in reversed(items):
            b.PrependUOffsetTRelative(it)
        return b.EndVector()

    tv = tables(tflite.SubGraphStartTensorsVector, tensors)
    ov = tables(tflite.SubGraphStartOperatorsVector, [op])
    gi, go = ints(tflite.SubGraphStartInputsVector, [0]), ints(tflite.SubGraphStartOutputsVector, [1])
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tv)
    tflite.SubGraphAddInputs(b, gi)
    tflite.SubGraphAddOutputs(b, go)
    tflite.SubGraphAddOperators(b, ov)
    sg = tflite.SubGraphEnd(b)
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddBuiltinCode(b, tflite.BuiltinOperator.ADD)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, tflite.BuiltinOperator.ADD)
    tflite.OperatorCodeAddVersion(b, 1)
    oc = tflite.OperatorCodeEnd(b)
    ocv = tables(tflite.ModelStartOperatorCodesVector, [oc])
    sgv = tables(tflite.ModelStartSubgraphsVector, [sg])
    bv = tables(tflite.ModelStartBuffersVector, buffers)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, ocv)
    tflite.ModelAddSubgraphs(b, sgv)
    tflite.ModelAddBuffers(b, bv)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    flat = bytearray(b.Output())
    offset = -(-len(flat) // 16) * 16
    at = bytes(flat).index(struct.pack("<Q", placeholder))
    flat[at:at + 8] = struct.pack("<Q", offset)
    return bytes(flat) + bytes(offset - len(flat)) + const.tobytes()


def test_buffer_stored_after_the_flatbuffer():
    const = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    content = _model_with_external_buffer(const)
    m = tflite.Model.GetRootAs(content, 0)
    assert m.Buffers(2).Offset() > 1 and m.Buffers(2).DataLength() == 0  # the layout the test means to build
    graph = read_model(content).main
    np.testing.assert_array_equal(graph.tensors[2].data, const)
    ref = litert_interpreter(content)
    ref.allocate_tensors()
    np.testing.assert_array_equal(ref.get_tensor(2), const)  # LiteRT reads the same bytes as the constant
    x = np.ones((3, 4), np.float32)
    ref.set_tensor(0, x)
    ref.invoke()
    np.testing.assert_array_equal(ref.get_tensor(1), x + const)


def test_buffer_past_the_end_of_the_file_is_refused():
    content = _model_with_external_buffer(np.ones((2, 2), np.float32))
    with pytest.raises(gd.ModelError, match=r"m\.tflite: tensor 2 \('c'\): buffer 2 lies at bytes .* "
                                            "past the end"):
        read_model(content[:-4], "m.tflite")


# -- INT4 ----------------------------------------------------------------------------------------------------

def _set_tensor_type(content: bytes, tensor: int, type_code: int) -> bytes:
    """Patch the (non-default, hence stored) type byte of one tensor in place."""
    t = tflite.Model.GetRootAs(content, 0).Subgraphs(0).Tensors(tensor)
    field = t._tab.Offset(6)  # Tensor.type is field 1: vtable slot 4 + 2 * 1
    assert field, "the type field must be stored to be patched"
    out = bytearray(content)
    out[t._tab.Pos + field] = type_code
    return bytes(out)


def test_int4_weights_unpack_as_litert_uses_them():
    rng = np.random.default_rng(4)
    units, depth = 3, 5  # 15 weights: an odd count leaves half of the last byte unused
    w = rng.integers(-8, 8, (units, depth)).astype(np.int8)
    nibbles = np.concatenate([w.reshape(-1), [0]]).astype(np.uint8) & 0xF
    packed = (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)  # low nibble first
    w_scales = np.array([0.5, 0.25, 0.125], np.float32)
    mb = ModelBuilder()
    x = mb.input("x", [1, depth], np.int8, scale=0.5, zero_point=1)
    wt = mb.tensor("w", [units, depth], np.int8, scale=w_scales, zero_point=0, axis=0,
                   data=packed.view(np.int8))
    bias = mb.const("b", np.array([3, -2, 1], np.int32), scale=0.5 * w_scales, zero_point=0)
    y = mb.tensor("y", [1, units], np.int8, scale=0.25, zero_point=-3)
    mb.op("FULLY_CONNECTED", [x, wt, bias], [y], version=13)
    mb.output(y)
    content = _set_tensor_type(mb.build(), wt, 17)  # INT4

    t = read_model(content).main.tensors[wt]
    assert t.type_name == "INT4" and t.dtype == np.int8 and t.shape == (units, depth)
    np.testing.assert_array_equal(t.data, w)
    with pytest.raises(gd.ModelError, match=r"tensor 1 \('w'\): INT4 buffer has 8 bytes, "
                                            r"shape \[3, 6\] needs 9"):
        read_model(_truncate_int4(content, wt))

    xq = rng.integers(-128, 128, (1, depth)).astype(np.int8)
    try:
        ref = litert_interpreter(content)
        ref.allocate_tensors()
    except (RuntimeError, ValueError) as e:
        pytest.skip(f"LiteRT cannot run an INT4 FULLY_CONNECTED here: {e}")
    ref.set_tensor(x, xq)
    ref.invoke()
    acc = (xq.astype(np.int64) - 1) @ w.T.astype(np.int64) + np.array([3, -2, 1])
    real = acc * 0.5 * w_scales.astype(np.float64)
    want = np.clip(np.round(real / 0.25) - 3, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(ref.get_tensor(y), want)


def _truncate_int4(content: bytes, tensor: int) -> bytes:
    """Declare one more weight per row than the packed buffer holds."""
    t = tflite.Model.GetRootAs(content, 0).Subgraphs(0).Tensors(tensor)
    at = t._tab.Vector(t._tab.Offset(4))  # Tensor.shape, field 0
    out = bytearray(content)
    out[at + 4:at + 8] = struct.pack("<i", t.Shape(1) + 1)
    return bytes(out)
