"""Hash tables, TensorFlow's static HashTableV2 as LiteRT runs it: HASHTABLE makes a table (a resource of the
interpreter, shared by every subgraph, named by its ``table_id``) and gives its handle, HASHTABLE_IMPORT fills it
once (later imports are ignored, as the converter leaves the initializer in the graph), HASHTABLE_FIND looks keys
up (the default value's first element where a key is missing) and HASHTABLE_SIZE counts the entries.

Keys and values are int64 -> STRING or STRING -> int64, the two pairs LiteRT's kernels take. A key imported twice
keeps its first value. The handle is a RESOURCE tensor of shape [1] holding the table id.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import SCHEMA_TO_NUMPY, STRING
from ..errors import ModelError
from ..graph import Graph, Node, Tensor
from .base import LookupTable, Op, Runtime, Shape, register
from .checks import all_required, arity

_I64 = np.dtype(np.int64)
_PAIRS = ((_I64, STRING), (STRING, _I64))


def _type_name(dtype: np.dtype) -> str:
    return "STRING" if dtype == STRING else str(dtype)


def _pair_error(node: Node, key: np.dtype, value: np.dtype, what: str) -> ModelError:
    return ModelError(f"{node}: {what} {_type_name(key)} -> {_type_name(value)}; LiteRT's hash tables map int64 -> "
                      "STRING or STRING -> int64")


def _check_handle(node: Node, graph: Graph) -> None:
    t = graph.tensors[node.inputs[0]]
    if t.type_name != "RESOURCE" or t.shape != (1,):
        raise ModelError(f"{node}: input 0 ({t.name!r}) must be a RESOURCE tensor of shape [1] (a table handle), is "
                         f"{t.type_name or t.dtype} of shape {list(t.shape)}")


def _check_pair(node: Node, key: Tensor, value: Tensor) -> None:
    if (key.dtype, value.dtype) not in _PAIRS:
        raise _pair_error(node, key.dtype, value.dtype, "keys and values are")


def _table(node: Node, handle: np.ndarray | None, runtime: Runtime, keys: np.ndarray,
           values_type: np.dtype) -> LookupTable:
    """The table the handle names, checked against the keys and values the node brings."""
    if handle is None or handle.size != 1:
        raise ModelError(f"{node}: the handle input is not a table handle")
    table = runtime.table(int(handle.reshape(-1)[0]))
    if table is None:
        raise ModelError(f"{node}: no hash table has id {int(handle.reshape(-1)[0])} (HASHTABLE has not run)")
    if (keys.dtype, values_type) != (table.key_type, table.value_type):
        raise ModelError(f"{node}: the table maps {_type_name(table.key_type)} -> {_type_name(table.value_type)}, "
                         f"the node brings {_type_name(keys.dtype)} -> {_type_name(values_type)}")
    return table


def _key_value_types(node: Node) -> tuple[np.dtype, np.dtype]:
    """HASHTABLE's key_dtype and value_dtype options (schema TensorType codes) as dtypes."""
    types = []
    for attr in ("key_dtype", "value_dtype"):
        code = node.attrs.get(attr)
        dtype = SCHEMA_TO_NUMPY.get(code) if isinstance(code, int) else None
        if dtype is None:
            raise ModelError(f"{node}: {attr} {code!r} is not a tensor type LiteRT's hash tables take")
        types.append(dtype)
    return types[0], types[1]


@register
class Hashtable(Op):
    """Creates the hash table ``table_id`` (unless one exists) and gives its handle."""

    name, max_version = "HASHTABLE", 1
    needs_runtime = True
    types = "int64 -> string, string -> int64"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 0, 1)
        out = graph.tensors[node.outputs[0]]
        if out.type_name != "RESOURCE":
            raise ModelError(f"{node}: the output must be a RESOURCE tensor, is {out.type_name or out.dtype}")
        if not isinstance(node.attrs.get("table_id"), int):
            raise ModelError(f"{node}: the options name no table_id")
        key, value = _key_value_types(node)
        if (key, value) not in _PAIRS:
            raise _pair_error(node, key, value, "key_dtype and value_dtype are")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        return [(1,)]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        table_id = int(node.attrs["table_id"])
        runtime.table(table_id, LookupTable(*_key_value_types(node)))
        return [np.array([table_id], np.int32)]


@register
class HashtableImport(Op):
    """Fills the table with keys (input 1) and values (input 2) of one shape, the first time only."""

    name, max_version = "HASHTABLE_IMPORT", 1
    needs_runtime = True
    strings = True
    types = "int64 -> string, string -> int64"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 0)
        _check_handle(node, graph)
        _check_pair(node, graph.tensors[node.inputs[1]], graph.tensors[node.inputs[2]])

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        _, keys, values = all_required(node, shapes)
        if keys != values:
            raise ModelError(f"{node}: keys {list(keys)} and values {list(values)} must have one shape")
        return []

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        handle, keys, values = all_required(node, inputs)
        table = _table(node, handle, runtime, keys, values.dtype)
        if keys.shape != values.shape:
            raise ModelError(f"{node}: keys {list(keys.shape)} and values {list(values.shape)} must have one shape")
        if not table.imported:
            for key, value in zip(keys.reshape(-1).tolist(), values.reshape(-1).tolist()):
                table.entries.setdefault(key, value)
            table.imported = True
        return []


@register
class HashtableFind(Op):
    """The value of each key (input 1), or the default's (input 2) first element where the table has none."""

    name, max_version = "HASHTABLE_FIND", 1
    needs_runtime = True
    strings = True
    foldable = False
    types = "int64 -> string, string -> int64"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 3, 1)
        _check_handle(node, graph)
        keys, default = graph.tensors[node.inputs[1]], graph.tensors[node.inputs[2]]
        out = graph.tensors[node.outputs[0]]
        if default.dtype != out.dtype:
            raise ModelError(f"{node}: the default value is {_type_name(default.dtype)}, the output "
                             f"{_type_name(out.dtype)}")
        _check_pair(node, keys, out)

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        _, keys, default = all_required(node, shapes)
        if int(np.prod(default)) < 1:
            raise ModelError(f"{node}: the default value has no element")
        return [keys]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        handle, keys, default = all_required(node, inputs)
        table = _table(node, handle, runtime, keys, default.dtype)
        if not table.imported:
            raise ModelError(f"{node}: looks up a hash table nothing has imported into yet")
        if default.size < 1:
            raise ModelError(f"{node}: the default value has no element")
        missing = default.reshape(-1)[0]
        out = np.empty(keys.shape, table.value_type)
        out.reshape(-1)[:] = [table.entries.get(key, missing) for key in keys.reshape(-1).tolist()]
        return [out]


@register
class HashtableSize(Op):
    """The number of entries of the table, as an int64 tensor of shape [1]."""

    name, max_version = "HASHTABLE_SIZE", 1
    needs_runtime = True
    types = "int64 out"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        _check_handle(node, graph)
        out = graph.tensors[node.outputs[0]]
        if out.dtype != _I64:
            raise ModelError(f"{node}: the output must be int64, is {out.type_name or out.dtype}")

    @staticmethod
    def infer_in(node: Node, graph: Graph, shapes: list[Shape | None], runtime: Runtime) -> list[Shape]:
        return [(1,)]

    @staticmethod
    def run_in(node: Node, graph: Graph, inputs: list[np.ndarray | None], runtime: Runtime) -> list[np.ndarray]:
        (handle,) = all_required(node, inputs)
        if handle.size != 1:
            raise ModelError(f"{node}: the handle input is not a table handle")
        table = runtime.table(int(handle.reshape(-1)[0]))
        if table is None:
            raise ModelError(f"{node}: no hash table has id {int(handle.reshape(-1)[0])} (HASHTABLE has not run)")
        return [np.array([len(table.entries)], np.int64)]
