"""HASHTABLE, HASHTABLE_IMPORT, HASHTABLE_FIND, HASHTABLE_SIZE and SKIP_GRAM against LiteRT (its reference
resolver has none of them), on hand-built models: tables made and filled in the main subgraph or in a CALL_ONCE
initializer as the converter lays them out, looked up over several invokes."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import litert_interpreter
from .single_op import In, Out, refused_version

S, I32, I64 = object, np.int32, np.int64
TYPE_NAMES = {np.dtype(I64): "INT64", np.dtype(S): "STRING", np.dtype(I32): "INT32", np.dtype(np.float32): "FLOAT32"}


def strings(*items: bytes) -> np.ndarray:
    out = np.empty(len(items), S)
    out[:] = list(items)
    return out


def handle(mb: ModelBuilder, key, value, table_id: int = 3) -> int:
    h = mb.tensor("h", [1], I32, type_name="RESOURCE")
    mb.op("HASHTABLE", [], [h], table_id=table_id, key_dtype=TYPE_NAMES[np.dtype(key)],
          value_dtype=TYPE_NAMES[np.dtype(value)])
    return h


def table_model(keys: np.ndarray, values: np.ndarray, default: np.ndarray, query_shape, *, in_init: bool = False,
                find_first: bool = False) -> bytes:
    """Outputs: the values found for the query (input 0), the table's size. The table is filled in the main
    subgraph (after the lookup with ``find_first``) or by a CALL_ONCE initializer subgraph."""
    mb = ModelBuilder()
    init = mb.add_subgraph("init")
    query = mb.input("q", query_shape, keys.dtype)
    if in_init:
        mb.op("CALL_ONCE", [], [], init_subgraph_index=init)
    h = handle(mb, keys.dtype, values.dtype)
    found, size = mb.tensor("found", query_shape, values.dtype), mb.tensor("size", [1], I64)
    find = ("HASHTABLE_FIND", [h, query, mb.const("default", default)], [found])
    if find_first:
        mb.op(*find)
    if in_init:
        mb.select(init)
        mb.op("HASHTABLE_IMPORT", [handle(mb, keys.dtype, values.dtype), mb.const("keys", keys),
                                   mb.const("values", values)], [])
        mb.select(0)
    else:
        mb.op("HASHTABLE_IMPORT", [h, mb.const("keys", keys), mb.const("values", values)], [])
    if not find_first:
        mb.op(*find)
    mb.op("HASHTABLE_SIZE", [h], [size])
    mb.output(found, size)
    return mb.build()


def invoke_both(content: bytes, queries: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Ours and LiteRT's outputs for each query in turn (one interpreter each: the table persists); asserts equal."""
    ours, ref = gd.Interpreter(model_content=content), litert_interpreter(content)
    results = []
    for it in (ours, ref):
        it.allocate_tensors()
    for q in queries:
        outs = []
        for it in (ours, ref):
            it.set_tensor(it.get_input_details()[0]["index"], q)
            it.invoke()
            outs.append([it.get_tensor(d["index"]) for d in it.get_output_details()])
        for o, r in zip(*outs):
            assert o.dtype == r.dtype and o.shape == r.shape and o.tolist() == r.tolist(), (o, r)
        results.append(outs[0])
    return results


@pytest.mark.parametrize("in_init", [False, True], ids=["main", "call-once"])
def test_int64_to_string(in_init):
    keys = np.array([1, 5, 9, 5, -7], I64)  # 5 twice: the first value stays
    values = strings(b"one", b"five", b"nine", b"FIVE", b"")
    content = table_model(keys, values, strings(b"?", b"!"), [2, 3], in_init=in_init)
    q1, q2 = np.array([[5, 2, 9], [1, -7, -3]], I64), np.array([[0, 0, 0], [9, 9, 1]], I64)
    (found, size), (found2, _) = invoke_both(content, [q1, q2])
    assert found.tolist() == [[b"five", b"?", b"nine"], [b"one", b"", b"?"]] and size.tolist() == [4]
    assert found2.tolist() == [[b"?"] * 3, [b"nine", b"nine", b"one"]]


@pytest.mark.parametrize("in_init", [False, True], ids=["main", "call-once"])
def test_string_to_int64(in_init):
    keys, values = strings(b"a", b"b", b"", b"a\x00"), np.array([10, 20, 30, 40], I64)
    content = table_model(keys, values, np.array(-1, I64), [5], in_init=in_init)
    (found, size), = invoke_both(content, [strings(b"b", b"zz", b"", b"a", b"a\x00")])
    assert found.tolist() == [20, -1, 30, 10, 40] and size.tolist() == [4]


def test_tables_are_shared_by_id_across_subgraphs():
    """Two HASHTABLE nodes with one table_id name one table: the CALL_ONCE initializer fills the main one's."""
    content = table_model(np.array([3], I64), strings(b"three"), strings(b"-"), [2], in_init=True)
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.array([3, 4], I64))
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).tolist() == [b"three", b"-"]


def test_find_before_import_fails_like_litert():
    content = table_model(np.array([1], I64), strings(b"x"), strings(b"?"), [1], find_first=True)
    ref = litert_interpreter(content)
    ref.allocate_tensors()
    with pytest.raises(RuntimeError, match="initialized"):
        ref.invoke()
    it = gd.Interpreter(model_content=content)
    it.allocate_tensors()
    with pytest.raises(gd.ModelError, match="nothing has imported"):
        it.invoke()


@pytest.mark.parametrize("key, value", [(I64, I64), (S, S), (I32, S), (S, np.float32)])
def test_type_pairs_litert_refuses_are_refused(key, value):
    mb = ModelBuilder()
    h = handle(mb, key, value)
    mb.output(h)
    content = mb.build()
    with pytest.raises(RuntimeError):
        litert_interpreter(content).allocate_tensors()
    with pytest.raises(gd.ModelError, match="int64 -> STRING or STRING -> int64"):
        gd.Interpreter(model_content=content).allocate_tensors()


@pytest.mark.parametrize("op, inputs, outputs, options", [
    ("HASHTABLE", [], [Out((1,), I32)], {"table_id": 0, "key_dtype": "INT64", "value_dtype": "STRING"}),
    ("SKIP_GRAM", [In((1,), S)], [Out((4,), S)], {"ngram_size": 2, "max_skip_size": 1}),
])
def test_newer_versions_are_refused(op, inputs, outputs, options):
    assert "op version 2" in refused_version(op, inputs, outputs, 2, **options)


# -- SKIP_GRAM -------------------------------------------------------------------------------------------------

def skip_gram_model(ngram_size: int, max_skip_size: int, include_all_ngrams: bool) -> bytes:
    mb = ModelBuilder()
    x, y = mb.input("x", [1], S), mb.tensor("y", [1], S)
    mb.op("SKIP_GRAM", [x], [y], ngram_size=ngram_size, max_skip_size=max_skip_size,
          include_all_ngrams=include_all_ngrams)
    mb.output(y)
    return mb.build()


TEXTS = [b"the quick brown fox jumps", b"  two\tspaced   words \n", b" lost first", b"one", b"", b"a b c d e f",
         b"caf\xc3\xa9 na\xefve \xff"]


@pytest.mark.parametrize("ngram_size, max_skip_size, include_all", [(1, 0, False), (2, 0, False), (2, 1, False),
                                                                   (3, 2, False), (2, 1, True), (3, 1, True)])
def test_skip_gram_matches_litert(ngram_size, max_skip_size, include_all):
    content = skip_gram_model(ngram_size, max_skip_size, include_all)
    ours, ref = gd.Interpreter(model_content=content), litert_interpreter(content)
    for it in (ours, ref):
        it.allocate_tensors()
    for text in TEXTS:
        outs = []
        for it in (ours, ref):
            it.set_tensor(it.get_input_details()[0]["index"], strings(text))
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        assert outs[0].dtype == outs[1].dtype and outs[0].tolist() == outs[1].tolist(), text


def test_skip_gram_by_hand():
    """The bigrams with one skip of "a b c d", in the kernel's order."""
    it = gd.Interpreter(model_content=skip_gram_model(2, 1, False))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], strings(b"a b c d"))
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).tolist() == [b"a b", b"a c", b"b c", b"b d", b"c d"]
