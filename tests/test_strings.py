"""STRING tensors: what set_tensor takes and get_tensor gives, string constants read from the file, and the ops
LiteRT runs on strings, each against LiteRT on the same one-op model; ops LiteRT refuses strings for are refused."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.strings import decode_strings, encode_strings
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import litert_interpreter, run, run_litert, run_ours

S, I32, I64 = object, np.int32, np.int64
# NULs inside and at the end, an empty string, bytes that are not UTF-8
WORDS = np.array([[b"a", b"bc", b""], [b"x\x00y", b"\xff\xfe", b"zz\x00"]], S)


def strings(*items: bytes | str) -> np.ndarray:
    out = np.empty(len(items), S)
    out[:] = list(items)
    return out


def one_op(op: str, inputs: list[tuple[str, np.ndarray]], outputs: list[tuple[tuple[int, ...], type]],
           **options) -> bytes:
    """A model running ``op`` once: inputs are ("in", example value) graph inputs or ("const", value) constants."""
    mb = ModelBuilder()
    ids = [mb.input(f"x{k}", v.shape, v.dtype) if kind == "in" else mb.const(f"c{k}", v)
           for k, (kind, v) in enumerate(inputs)]
    outs = [mb.tensor(f"y{k}", shape, dtype) for k, (shape, dtype) in enumerate(outputs)]
    mb.op(op, ids, outs, **options)
    mb.output(*outs)
    return mb.build()


def same_as_litert(content: bytes, feeds: list[np.ndarray], reference_kernels: bool = False) -> list[np.ndarray]:
    ref = run_litert(content, feeds, reference_kernels=reference_kernels)
    ours = run_ours(content, feeds)
    assert len(ours) == len(ref)
    for k, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == r.dtype and o.shape == r.shape, f"output {k}: {o.dtype}{o.shape} vs {r.dtype}{r.shape}"
        assert o.tolist() == r.tolist(), f"output {k}: {o.tolist()} != {r.tolist()}"
    return ours


def reshape_model(shape=(2, 3)) -> bytes:
    return one_op("RESHAPE", [("in", np.empty(shape, S)), ("const", np.array([3, 2], I32))], [((3, 2), S)])


def test_buffer_format_round_trips():
    raw = encode_strings(WORDS)
    assert raw[:4] == (6).to_bytes(4, "little")
    assert decode_strings(raw, 6, "t").tolist() == WORDS.reshape(-1).tolist()
    with pytest.raises(ValueError, match="holds 6 strings"):
        decode_strings(raw, 5, "t")
    with pytest.raises(ValueError, match="offsets"):
        decode_strings(raw[:-1], 6, "t")


@pytest.mark.parametrize("value", [
    WORDS,
    WORDS.astype("S"),  # fixed-width bytes: numpy itself drops trailing NULs
    np.array([["a", "b", "c"], ["d", "\u00e9", "\u20ac\u00e9"]]),  # unicode: written as UTF-8
    np.array([["a", b"b", "c"], [b"d", "\u00e9", b""]], S),  # object arrays may mix str and bytes
], ids=["object-bytes", "fixed-bytes", "unicode", "object-mixed"])
def test_set_and_get_tensor_as_litert(value):
    content = reshape_model()
    ours, ref = gd.Interpreter(model_content=content), litert_interpreter(content)
    for it in (ours, ref):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], value)
        it.invoke()
    for d_ours, d_ref in ((ours.get_input_details()[0], ref.get_input_details()[0]),
                          (ours.get_output_details()[0], ref.get_output_details()[0])):
        assert d_ours["dtype"] is d_ref["dtype"] is np.bytes_
        got, want = ours.get_tensor(d_ours["index"]), ref.get_tensor(d_ref["index"])
        assert got.dtype == want.dtype == np.dtype(object) and got.shape == want.shape
        assert got.tolist() == want.tolist()


def test_unicode_is_written_as_utf8():
    it = gd.Interpreter(model_content=reshape_model())
    out = run(it, [np.array([["a", "\u00e9", ""], ["\u20ac", "x", "yz"]])])[0]
    assert out.tolist() == [[b"a", "\u00e9".encode()], [b"", "\u20ac".encode()], [b"x", b"yz"]]


@pytest.mark.parametrize("bad, match", [
    (np.zeros((2, 3), np.uint8), "expected type STRING"),
    (np.array([[1, 2, 3], [4, 5, 6]], S), "is int, not bytes or str"),
])
def test_set_tensor_refuses_what_litert_refuses(bad, match):
    content = reshape_model()
    ref = litert_interpreter(content)
    ref.allocate_tensors()
    with pytest.raises(ValueError):
        ref.set_tensor(ref.get_input_details()[0]["index"], bad)
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    with pytest.raises(ValueError, match=match):
        it.set_tensor(it.get_input_details()[0]["index"], bad)


def test_string_constants_read_exactly():
    """A constant string tensor (every awkward byte) through GATHER_ND, whose indices are the input."""
    content = one_op("GATHER_ND", [("const", WORDS), ("in", np.zeros((4, 2), I32))], [((4,), S)])
    out = same_as_litert(content, [np.array([[1, 2], [0, 2], [1, 0], [1, 1]], I32)])[0]
    assert out.tolist() == [b"zz\x00", b"", b"x\x00y", b"\xff\xfe"]


def test_unset_string_input_reads_as_empty_strings():
    it = gd.Interpreter(model_content=reshape_model())
    it.allocate_tensors()
    value = it.get_tensor(it.get_input_details()[0]["index"])
    assert value.dtype == np.dtype(object) and value.tolist() == [[b""] * 3] * 2


def test_malformed_string_buffer_is_a_model_error():
    mb = ModelBuilder()
    c = mb.tensor("c", [2], S)
    mb.tensors[-1]["buffer"] = len(mb.buffers)
    mb.buffers.append(np.array([2, 12, 13, 99], "<i4").tobytes() + b"ab")  # the last offset runs past the end
    y = mb.tensor("y", [2], S)
    mb.op("RESHAPE", [c, mb.const("s", np.array([2], I32))], [y])
    mb.output(y)
    with pytest.raises(gd.ModelError, match="tensor 0 .'c'.*string offsets"):
        gd.Interpreter(model_content=mb.build())


# -- ops on strings, against LiteRT ----------------------------------------------------------------------------

CASES = {
    "RESHAPE": lambda: (one_op("RESHAPE", [("in", WORDS), ("const", np.array([3, -1], I32))], [((3, 2), S)]),
                        [WORDS]),
    "SQUEEZE": lambda: (one_op("SQUEEZE", [("in", WORDS[:1])], [((3,), S)], squeeze_dims=[0]), [WORDS[:1].copy()]),
    "EXPAND_DIMS": lambda: (one_op("EXPAND_DIMS", [("in", WORDS), ("const", np.array([1], I32))],
                                   [((2, 1, 3), S)]), [WORDS]),
    "SLICE": lambda: (one_op("SLICE", [("in", WORDS), ("const", np.array([0, 1], I32)),
                                       ("const", np.array([2, -1], I32))], [((2, 2), S)]), [WORDS]),
    "STRIDED_SLICE": lambda: (one_op("STRIDED_SLICE", [("in", WORDS), ("const", np.array([1, 2], I32)),
                                                       ("const", np.array([-3, -4], I32)),
                                                       ("const", np.array([-1, -2], I32))], [((1, 2), S)]),
                              [WORDS]),
    "TILE": lambda: (one_op("TILE", [("in", WORDS), ("const", np.array([2, 3], I32))], [((4, 9), S)]), [WORDS]),
    "GATHER": lambda: (one_op("GATHER", [("in", WORDS.reshape(-1)), ("in", np.zeros((2, 3), I64))],
                              [((2, 3), S)], axis=0),
                       [WORDS.reshape(-1).copy(), np.array([[5, 0, 3], [3, 3, 1]], I64)]),
    "GATHER_ND": lambda: (one_op("GATHER_ND", [("in", WORDS.reshape(1, 2, 3)), ("const", np.array([[0, 1], [0, 0]],
                                                                                                  I32))],
                                 [((2, 3), S)]), [WORDS.reshape(1, 2, 3).copy()]),
    "FILL": lambda: (one_op("FILL", [("in", np.zeros(3, I32)), ("const", np.array(b"hi\x00", S))], [((2, 1, 3), S)]),
                     [np.array([2, 1, 3], I32)]),
    "EQUAL": lambda: (one_op("EQUAL", [("in", WORDS), ("in", strings(b"a", b"\xff\xfe", b"zz"))],
                             [((2, 3), np.bool_)]), [WORDS, strings(b"a", b"\xff\xfe", b"zz")]),
    "NOT_EQUAL": lambda: (one_op("NOT_EQUAL", [("in", WORDS), ("const", np.array(b"", S))], [((2, 3), np.bool_)]),
                          [WORDS]),
    "SHAPE": lambda: (one_op("SHAPE", [("in", WORDS)], [((2,), I64)], out_type=4), [WORDS]),
    "RANK": lambda: (one_op("RANK", [("in", WORDS)], [((), I32)]), [WORDS]),
    "HASHTABLE_LOOKUP": lambda: (one_op("HASHTABLE_LOOKUP", [("in", np.zeros(4, I32)),
                                                             ("const", np.array([2, 5, 9], I32)),
                                                             ("const", strings(b"two", b"", b"nine\x00"))],
                                        [((4,), S), ((4,), np.uint8)]), [np.array([9, 3, 2, 5], I32)]),
}


@pytest.mark.parametrize("op", list(CASES))
def test_string_op_matches_litert(op):
    content, feeds = CASES[op]()
    same_as_litert(content, feeds)


@pytest.mark.parametrize("op", ["RESHAPE", "GATHER_ND", "EQUAL", "TILE", "SLICE"])
def test_string_op_matches_litert_reference_kernels(op):
    content, feeds = CASES[op]()
    same_as_litert(content, feeds, reference_kernels=True)


@pytest.mark.parametrize("cond", [True, False])
def test_if_passes_strings_between_subgraphs(cond):
    """then: reshape; else: reverse both axes, then reshape."""
    mb = ModelBuilder()
    then, other = mb.add_subgraph("then"), mb.add_subgraph("else")
    c, x = mb.input("c", [], np.bool_), mb.input("x", [2, 3], S)
    y = mb.tensor("y", [3, 2], S)
    mb.op("IF", [c, x], [y], then_subgraph_index=then, else_subgraph_index=other)
    mb.output(y)
    for index in (then, other):
        mb.select(index)
        xi, yi = mb.input("x", [2, 3], S), mb.tensor("y", [3, 2], S)
        if index == other:
            flipped = mb.tensor("flipped", [2, 3], S)
            mb.op("STRIDED_SLICE", [xi, mb.const("b", np.array([-1, -1], I32)), mb.const("e", np.array([-3, -4], I32)),
                                    mb.const("st", np.array([-1, -1], I32))], [flipped])
            xi = flipped
        mb.op("RESHAPE", [xi, mb.const("s", np.array([3, 2], I32))], [yi])
        mb.output(yi)
    out = same_as_litert(mb.build(), [np.array(cond), WORDS])[0]
    assert out.tolist() == (WORDS if cond else WORDS[::-1, ::-1]).reshape(3, 2).tolist()


@pytest.mark.parametrize("op, inputs, outputs, options", [
    ("CONCATENATION", [("in", WORDS), ("in", WORDS)], [((4, 3), S)], {"axis": 0}),
    ("TRANSPOSE", [("in", WORDS), ("const", np.array([1, 0], I32))], [((3, 2), S)], {}),
    ("PAD", [("in", WORDS), ("const", np.array([[0, 1], [0, 0]], I32))], [((3, 3), S)], {}),
    ("GATHER", [("in", WORDS), ("const", np.array([1], I32))], [((1, 3), S)], {"axis": 0}),
    ("PACK", [("in", WORDS), ("in", WORDS)], [((2, 2, 3), S)], {"values_count": 2, "axis": 0}),
], ids=["CONCATENATION", "TRANSPOSE", "PAD", "GATHER-2d", "PACK"])
def test_ops_litert_refuses_strings_for_are_refused(op, inputs, outputs, options):
    content = one_op(op, inputs, outputs, **options)
    feeds = [v for kind, v in inputs if kind == "in"]
    with pytest.raises((RuntimeError, ValueError)):
        run_litert(content, feeds)
    with pytest.raises(gd.ModelError, match="STRING"):
        run_ours(content, feeds)
