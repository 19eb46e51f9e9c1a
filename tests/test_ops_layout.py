"""Shape and layout ops on the CPU path against LiteRT (or a numpy formula where LiteRT refuses the model)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.cpu.quant import dequantize, quantize
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import random_inputs, run_litert, run_ours


class In:
    """A model input in a test spec (anything else in the spec list is a constant)."""

    def __init__(self, shape, dtype=np.float32, q=None):
        self.shape, self.dtype, self.q = shape, np.dtype(dtype), q


def model(op: str, ins: list, outs: list, out_dtype=np.float32, out_q=None, **opts) -> bytes:
    mb = ModelBuilder()
    ids = []
    for k, spec in enumerate(ins):
        if isinstance(spec, In):
            kw = {"scale": spec.q[0], "zero_point": spec.q[1]} if spec.q else {}
            ids.append(mb.input(f"x{k}", spec.shape, spec.dtype, **kw))
        else:
            ids.append(mb.const(f"c{k}", np.asarray(spec)))
    kw = {"scale": out_q[0], "zero_point": out_q[1]} if out_q else {}
    out_ids = [mb.tensor(f"y{k}", s, out_dtype, **kw) for k, s in enumerate(outs)]
    mb.op(op, ids, out_ids, **opts)
    mb.output(*out_ids)
    return mb.build()


def same_as_litert(content: bytes, seed: int = 0) -> list[np.ndarray]:
    """Pure data movement: our outputs must equal LiteRT's bit for bit."""
    inputs = random_inputs(content, seed)
    ref = run_litert(content, inputs)
    ours = run_ours(content, inputs)
    assert len(ours) == len(ref)
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert (o.dtype, o.shape) == (r.dtype, r.shape), f"output {k}: {o.dtype}{o.shape} vs reference"
        np.testing.assert_array_equal(o, r, err_msg=f"output {k}")
    return ours


I32 = np.int32


# -- reshaping ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_reshape_const_shape_with_minus_one(dtype):
    q = (0.1, 3) if dtype == np.int8 else None
    same_as_litert(model("RESHAPE", [In([2, 3, 5, 7], dtype, q), np.array([2, -1, 7], I32)], [[2, 15, 7]],
                         dtype, q))


def test_reshape_from_option_only():
    same_as_litert(model("RESHAPE", [In([2, 13])], [[13, 2]], new_shape=[13, 2]))


def test_reshape_dynamic_shape_input():
    content = model("RESHAPE", [In([3, 10]), In([2], I32)], [[5, 6]])
    x = np.arange(30, dtype=np.float32).reshape(3, 10)
    for shape in ([5, 6], [-1, 15], [30, 1]):
        inputs = [x, np.array(shape, I32)]
        ref, ours = run_litert(content, inputs), run_ours(content, inputs)
        np.testing.assert_array_equal(ours[0], ref[0])
        assert ours[0].shape == ref[0].shape


def test_reshape_rejects_wrong_element_count():
    content = model("RESHAPE", [In([2, 3]), np.array([4, 2], I32)], [[4, 2]])
    it = gd.Interpreter(model_content=content)
    with pytest.raises(gd.ModelError, match=r"node 0 \(RESHAPE\).*6 elements"):
        it.allocate_tensors()


@pytest.mark.parametrize("dims,shape,out", [([1, -1], [3, 1, 5, 1], [3, 5]), ([], [1, 7, 1, 1], [7]),
                                           ([0], [1, 13], [13])])
def test_squeeze(dims, shape, out):
    same_as_litert(model("SQUEEZE", [In(shape)], [out], squeeze_dims=dims))


@pytest.mark.parametrize("axis,dtype", [(0, I32), (-1, I32), (2, np.int64), (-3, I32)])
def test_expand_dims(axis, dtype):
    shape = [2, 3, 5]
    out = list(np.expand_dims(np.zeros(shape), axis).shape)
    same_as_litert(model("EXPAND_DIMS", [In(shape), np.array(axis, dtype)], [out]))


# -- joining and splitting ----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis,shapes", [(-1, [[2, 4, 3], [2, 4, 5], [2, 4, 7]]),
                                         (1, [[2, 3, 5, 13], [2, 1, 5, 13]]), (0, [[1, 7], [3, 7]])])
def test_concatenation_float(axis, shapes):
    out = list(np.concatenate([np.zeros(s) for s in shapes], axis).shape)
    same_as_litert(model("CONCATENATION", [In(s) for s in shapes], [out], axis=axis))


def test_concatenation_int8_same_quantization():
    q = (0.05, -3)
    same_as_litert(model("CONCATENATION", [In([2, 3, 5], np.int8, q), In([2, 3, 7], np.int8, q)],
                         [[2, 3, 12]], np.int8, q, axis=2))


def test_concatenation_uint8_requantizes_like_litert():
    ins = [In([2, 4, 3], np.uint8, (0.1, 128)), In([2, 4, 5], np.uint8, (0.03, 7)),
           In([2, 4, 7], np.uint8, (0.07, 100))]
    content = model("CONCATENATION", ins, [[2, 4, 15]], np.uint8, (0.08, 120), axis=-1)
    rng = np.random.default_rng(3)
    inputs = [rng.integers(0, 256, s).astype(np.uint8) for s in ([2, 4, 3], [2, 4, 5], [2, 4, 7])]
    ref, ours = run_litert(content, inputs)[0], run_ours(content, inputs)[0]
    # The third input shares no parameter with the output: every value goes through requantization.
    diff = np.abs(ours.astype(int) - ref)
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99
    assert np.any(ours[..., 3:8] != inputs[1]) and np.any(ours[..., 8:] != inputs[2])


def test_concatenation_int8_requantizes():
    # TFLite's int8 kernel refuses differing quantization; ours requantizes: compare with the real values.
    qa, qb, qo = (0.1, 3), (0.02, -50), (0.05, -10)
    content = model("CONCATENATION", [In([2, 3, 5], np.int8, qa), In([2, 3, 7], np.int8, qb)], [[2, 3, 12]],
                    np.int8, qo, axis=-1)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, s).astype(np.int8) for s in ([2, 3, 5], [2, 3, 7]))
    ours = run_ours(content, [a, b])[0]
    real = np.concatenate([dequantize(a, *qa), dequantize(b, *qb)], -1)
    want = quantize(real, *qo, np.int8)
    diff = np.abs(ours.astype(int) - want)
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99


@pytest.mark.parametrize("act,fn", [("RELU", lambda v: np.maximum(v, 0)),
                                    ("RELU6", lambda v: np.clip(v, 0, 6)), ("TANH", np.tanh)])
def test_concatenation_fused_activation(act, fn):
    # TFLite's kernel refuses a fused activation on CONCATENATION; the GPU delegate applies it.
    content = model("CONCATENATION", [In([2, 3]), In([2, 5])], [[2, 8]], axis=1,
                    fused_activation_function=act)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s).astype(np.float32) * 4 for s in ([2, 3], [2, 5]))
    want = fn(np.concatenate([a, b], 1))
    np.testing.assert_allclose(run_ours(content, [a, b])[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_pack_unpack(axis):
    shape = [2, 5, 3]
    out = list(np.stack([np.zeros(shape)] * 3, axis).shape)
    same_as_litert(model("PACK", [In(shape), In(shape), In(shape)], [out], values_count=3, axis=axis))
    n = shape[axis]
    parts = [list(np.take(np.zeros(shape), 0, axis).shape)] * n
    q = (0.1, 0)
    same_as_litert(model("UNPACK", [In(shape, np.int8, q)], parts, np.int8, q, num=n, axis=axis))


@pytest.mark.parametrize("axis", [1, -1])
def test_split(axis):
    shape = [2, 6, 9]
    parts = np.split(np.zeros(shape), 3, axis)
    outs = [list(p.shape) for p in parts]
    same_as_litert(model("SPLIT", [np.array(axis, I32), In(shape)], outs, num_splits=3))


def test_split_v_with_inferred_size():
    sizes = np.array([3, -1, 2], I32)
    outs = [[2, 3, 5], [2, 8, 5], [2, 2, 5]]
    same_as_litert(model("SPLIT_V", [In([2, 13, 5]), sizes, np.array([1], I32)], outs, num_splits=3))


def test_split_v_with_an_empty_piece_in_its_own_buffer():
    """The converter gives every tensor a buffer, empty unless constant: tf.signal.frame's SPLIT_V on an open
    batch writes a piece of size 0 whose empty buffer once read as a zero-element constant (model refused)."""
    mb = ModelBuilder()
    x = mb.input("x", [2, 13, 5])
    sizes, axis = mb.const("sizes", np.array([3, 0, 10], I32)), mb.const("axis", np.array([1], I32))
    pieces = [mb.tensor(f"y{k}", [2, n, 5], data=np.zeros((2, n, 5), np.float32) if n == 0 else None)
              for k, n in enumerate((3, 0, 10))]
    mb.op("SPLIT_V", [x, sizes, axis], pieces, num_splits=3)
    mb.output(*pieces)
    same_as_litert(mb.build())


# -- slicing ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("begin,size,dtype", [([0, 1, 2], [2, -1, 3], I32),
                                              ([1, 0, 0], [1, 4, -1], np.int64)])
def test_slice(begin, size, dtype):
    shape = [2, 5, 7]
    out = [d - b if s == -1 else s for d, b, s in zip(shape, begin, size)]
    same_as_litert(model("SLICE", [In(shape), np.array(begin, dtype), np.array(size, dtype)], [out]))


STRIDED = [
    # shape, begin, end, strides, options
    ([2, 5, 7], [0, 1, 2], [2, 4, 7], [1, 1, 2], {}),
    ([2, 5, 7], [1, -1, -2], [0, -6, 0], [-1, -1, -2], {}),  # negative strides and indices
    ([2, 5, 7], [0, 3, 6], [0, 0, 0], [1, -1, -3], {"begin_mask": 0b001, "end_mask": 0b111}),
    ([2, 5, 7], [1, 2, 0], [2, 3, 7], [1, 1, 1], {"shrink_axis_mask": 0b011}),
    ([2, 5, 7], [-1, 0, -1], [0, 5, 0], [1, 1, 1], {"shrink_axis_mask": 0b101}),
    ([2, 5, 7], [0, 1], [0, 4], [1, 2], {"ellipsis_mask": 0b01}),  # [..., 1:4:2]
    ([2, 5, 7], [1, 0], [2, 0], [1, 1], {"ellipsis_mask": 0b10, "shrink_axis_mask": 0b01}),  # [1, ...]
    ([2, 5, 7], [0, 0, 1], [0, 0, 3], [1, 1, 1], {"new_axis_mask": 0b010, "begin_mask": 0b001,
                                                 "end_mask": 0b001}),  # [:, None, 1:3]
    # [..., None, 2:5]
    ([2, 5, 7], [0, 0, 2], [0, 0, 5], [1, 1, 1], {"ellipsis_mask": 0b001, "new_axis_mask": 0b010}),
    ([3, 4, 13], [0, 2, 1], [2, 1, 3], [1, 1, 2], {"offset": True}),  # end counts from begin
    ([3, 4, 13], [-10, -100, 100], [10, 100, -100], [1, 1, -4], {}),  # out-of-range bounds clamp
    ([2, 3, 4, 5, 3], [0, 0, 1, 0, 0], [2, 3, 4, 5, 3], [1, 2, 1, -1, 1], {"end_mask": 0b01000,
                                                                        "begin_mask": 0b01000}),
]


@pytest.mark.parametrize("shape,begin,end,strides,opts", STRIDED)
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_strided_slice(shape, begin, end, strides, opts, dtype):
    q = (0.1, 1) if dtype == np.int8 else None
    args = [np.array(v, I32) for v in (begin, end, strides)]
    # Declare any output shape: LiteRT computes its own and ours must equal it.
    content = model("STRIDED_SLICE", [In(shape, dtype, q), *args], [[1]], dtype, q, **opts)
    ours = same_as_litert(content)
    it = gd.Interpreter(model_content=content)  # shape inference alone must find the same output shape
    it.allocate_tensors()
    assert tuple(it.get_output_details()[0]["shape"]) == ours[0].shape


def test_strided_slice_dynamic_bounds():
    ins = [In([4, 6]), In([2], I32), In([2], I32), np.array([1, -2], I32)]
    content = model("STRIDED_SLICE", ins, [[4, 6]])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    inputs = [x, np.array([1, 5], I32), np.array([3, 0], I32)]
    ref, ours = run_litert(content, inputs)[0], run_ours(content, inputs)[0]
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(ours, x[1:3, 5:0:-2])


def test_strided_slice_rejects_zero_stride():
    content = model("STRIDED_SLICE", [In([4]), *[np.array([v], I32) for v in (0, 4, 0)]], [[4]])
    with pytest.raises(gd.ModelError, match="STRIDED_SLICE.*zero"):
        gd.Interpreter(model_content=content).allocate_tensors()


# -- reordering ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,perm", [([2, 3, 5], [2, 0, 1]), ([2, 3, 5, 7], [0, 3, 1, 2]),
                                        ([2, 1, 3, 5, 2], [4, 2, 0, 3, 1])])
def test_transpose(shape, perm):
    out = [shape[p] for p in perm]
    same_as_litert(model("TRANSPOSE", [In(shape), np.array(perm, I32)], [out]))
    q = (0.5, 0)
    same_as_litert(model("TRANSPOSE", [In(shape, np.int8, q), np.array(perm, I32)], [out], np.int8, q))


@pytest.mark.parametrize("mult,dtype", [([2, 1, 3], I32), ([1, 3, 1], np.int64)])
def test_tile(mult, dtype):
    shape = [2, 3, 5]
    same_as_litert(model("TILE", [In(shape), np.array(mult, dtype)], [[d * m for d, m in zip(shape, mult)]]))


GATHER = [
    # params shape, indices, axis, batch_dims
    ([7, 3], [[4, 0], [6, 6]], 0, 0),
    ([2, 5, 13], [4, 0, 3], 1, 0),
    ([2, 5, 13], [12, 0, 5, 5], -1, 0),
    ([3, 5, 7], [[0, 4], [1, 1], [3, 2]], 1, 1),
    ([3, 4, 5, 2], [[[1], [0]], [[3], [3]], [[0], [2]]], 2, 1),
    ([3, 4, 5], [[1, 0], [0, 2], [4, 4]], -1, -1),
]


@pytest.mark.parametrize("shape,indices,axis,batch_dims", GATHER)
@pytest.mark.parametrize("idx_dtype", [I32, np.int64])
def test_gather(shape, indices, axis, batch_dims, idx_dtype):
    idx = np.array(indices, idx_dtype)
    a = axis % len(shape)
    bd = batch_dims % idx.ndim if batch_dims < 0 else batch_dims
    out = shape[:a] + list(idx.shape[bd:]) + shape[a + 1:]
    same_as_litert(model("GATHER", [In(shape), idx], [out], axis=axis, batch_dims=batch_dims))


def test_gather_int8_dynamic_indices():
    q = (0.1, 2)
    content = model("GATHER", [In([4, 3], np.int8, q), In([5], I32)], [[5, 3]], np.int8, q, axis=0)
    params = np.arange(12, dtype=np.int8).reshape(4, 3)
    idx = np.array([3, 1, 1, 0, 2], I32)
    np.testing.assert_array_equal(run_ours(content, [params, idx])[0], run_litert(content, [params, idx])[0])
    with pytest.raises(gd.ModelError, match=r"GATHER.*out of bounds"):
        run_ours(content, [params, np.array([0, 1, 4, 0, 0], I32)])


@pytest.mark.parametrize("shape,axis", [([7], 0), ([6, 1, 5], 0), ([3, 6, 2], 1), ([2, 3, 6], -1)])
def test_gather_one_index_at_run_time(shape, axis):
    """One run-time index (a loop body's step through its input sequence; the prepared step takes its slice):
    LiteRT's values for each position, a 0-d output of 1-D params among them; an index past the end refused."""
    content = model("GATHER", [In(shape), In([], I32)], [shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]],
                    axis=axis)
    params = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    size = shape[axis]
    for index in range(size):
        inputs = [params, np.array(index, I32)]
        (ours,), (ref,) = run_ours(content, inputs), run_litert(content, inputs)
        assert ours.shape == ref.shape and isinstance(ours, np.ndarray)
        np.testing.assert_array_equal(ours, ref)
    for bad in (size, -1):
        with pytest.raises(gd.ModelError, match=r"GATHER.*out of bounds"):
            run_ours(content, [params, np.array(bad, I32)])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    idx_shape = [3, 2]
    out = idx_shape[:axis % 3] + [5] + idx_shape[axis % 3:] if axis != -1 else idx_shape + [5]
    content = model("ONE_HOT", [In(idx_shape, I32), np.array(5, I32), np.array(2.5, np.float32),
                                np.array(-1.0, np.float32)], [out], axis=axis)
    indices = np.array([[0, 4], [-1, 2], [5, 1]], I32)  # -1 and 5 are off the table: all "off"
    np.testing.assert_array_equal(run_ours(content, [indices])[0], run_litert(content, [indices])[0])


@pytest.mark.parametrize("out_dtype,code", [(I32, 2), (np.int64, 4)])
def test_shape(out_dtype, code):
    same_as_litert(model("SHAPE", [In([2, 3, 5])], [[3]], out_dtype, out_type=code))


# -- padding and blocks -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,q", [(np.float32, None), (np.int8, (0.1, -7)), (np.uint8, (0.2, 130))])
def test_pad(dtype, q):
    pads = np.array([[0, 1], [2, 0], [1, 3], [0, 2]], I32)
    shape = [2, 3, 5, 3]
    out = [d + p.sum() for d, p in zip(shape, pads)]
    ours = same_as_litert(model("PAD", [In(shape, dtype, q), pads], [out], dtype, q))
    if q:  # the padding holds the quantized zero
        assert ours[0][0, 0, 0, 0] == q[1]


@pytest.mark.parametrize("dtype,q,value", [(np.float32, None, 1.5), (np.int8, (0.1, -7), 20),
                                           (np.uint8, (0.2, 130), 3)])
def test_padv2(dtype, q, value):
    pads = np.array([[1, 0], [0, 2], [3, 1]], np.int64)
    shape = [2, 5, 7]
    out = [d + p.sum() for d, p in zip(shape, pads)]
    kw = {"scale": q[0], "zero_point": q[1]} if q else {}
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype, **kw)
    p = mb.const("p", pads)
    v = mb.const("v", np.array(value, dtype), **kw)
    y = mb.tensor("y", out, dtype, **kw)
    mb.op("PADV2", [x, p, v], [y])
    mb.output(y)
    ours = same_as_litert(mb.build())
    assert ours[0][0, 0, 0] == np.array(value, dtype)


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_pad(mode):
    shape = [2, 4, 5, 3]
    most = 1 if mode == "REFLECT" else 0
    pads = np.array([[0, 0], [3, 2], [4 - most, 1], [1, 3 - most]], I32)  # includes the largest legal pads
    out = [d + p.sum() for d, p in zip(shape, pads)]
    ours = same_as_litert(model("MIRROR_PAD", [In(shape), pads], [out], mode=mode))
    x = random_inputs(model("MIRROR_PAD", [In(shape), pads], [out], mode=mode))[0]
    np.testing.assert_array_equal(ours[0], np.pad(x, pads, mode=mode.lower()))


def test_mirror_pad_rejects_too_large_padding():
    content = model("MIRROR_PAD", [In([1, 3]), np.array([[0, 0], [3, 0]], I32)], [[1, 6]], mode="REFLECT")
    with pytest.raises(gd.ModelError, match="MIRROR_PAD"):
        gd.Interpreter(model_content=content).allocate_tensors()


@pytest.mark.parametrize("bs,c", [(2, 3), (3, 5)])
@pytest.mark.parametrize("dtype,q", [(np.float32, None), (np.int8, (0.3, 4))])
def test_depth_to_space_and_back(bs, c, dtype, q):
    small = [2, 3, 2, c * bs * bs]
    big = [2, 3 * bs, 2 * bs, c]
    same_as_litert(model("DEPTH_TO_SPACE", [In(small, dtype, q)], [big], dtype, q, block_size=bs))
    same_as_litert(model("SPACE_TO_DEPTH", [In(big, dtype, q)], [small], dtype, q, block_size=bs))


# -- omitted inputs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,ins,omit,out,opts", [
    ("RESHAPE", [In([2, 3]), np.array([6], I32)], 0, [6], {}),
    ("SQUEEZE", [In([2, 1])], 0, [2], {}),
    ("EXPAND_DIMS", [In([2, 3]), np.array([0], I32)], 1, [1, 2, 3], {}),
    ("SPLIT", [np.array(0, I32), In([4, 3])], 0, [4, 3], {"num_splits": 1}),
    ("SLICE", [In([4, 3]), np.array([0, 0], I32), np.array([2, 3], I32)], 1, [2, 3], {}),
    ("TILE", [In([2, 3]), np.array([1, 2], I32)], 1, [2, 6], {}),
    ("PAD", [In([2, 3]), np.zeros((2, 2), I32)], 1, [2, 3], {}),
])
def test_omitted_input_names_the_node(op, ins, omit, out, opts):
    # the load check counts inputs but lets one be omitted (-1); the op needs it to infer or run
    mb = ModelBuilder()
    ids = [mb.input(f"x{k}", s.shape, s.dtype) if isinstance(s, In) else mb.const(f"c{k}", s)
           for k, s in enumerate(ins)]
    ids[omit] = -1
    y = mb.tensor("y", out, np.float32)
    mb.op(op, ids, [y], **opts)
    mb.output(y)
    with pytest.raises(gd.ModelError, match=rf"node 0 \({op}\): input {omit} is omitted, but {op} needs it"):
        it = gd.Interpreter(model_content=mb.build())
        it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.ones(d["shape"], np.float32))
        it.invoke()
