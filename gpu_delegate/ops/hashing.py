"""LSH_PROJECTION: locality-sensitive hashing of the input's rows into bits, as TFLite computes it.

For each seed (a float32 of the hash tensor) and each row of the input, the key is the seed's 4 bytes followed
by the row's bytes (whatever the element type); its FarmHash Fingerprint64, read as a signed 64-bit integer,
weighted by the row's weight (1 without a weight input), sums in float64 to a score whose sign is one bit.
DENSE outputs every bit; SPARSE packs the bits of each hash function into one int32, offset by
function index * 2^bits so that the functions do not collide.
"""

from __future__ import annotations

import numpy as np

from ..cpu.farmhash import fingerprint64
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import input_count
from .operands import Inputs, Shape, known, outputs, require_type, tensor_in, tensor_out

_SPARSE, _DENSE = 1, 2
_MAX_BITS = 32


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


@register
class LshProjection(Op):
    name, max_version = "LSH_PROJECTION", 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        input_count(node, 2, 3)
        outputs(node, 1)
        if node.inputs[0] < 0 or node.inputs[1] < 0:
            raise ModelError(f"{node}: the hash functions and the input are required")
        require_type(node, tensor_in(node, graph, 0), (np.float32,), "the hash functions")
        x = tensor_in(node, graph, 1)
        if x.type_name in ("STRING", "RESOURCE", "VARIANT"):
            raise ModelError(f"{node}: a {x.type_name} input is not supported (no string tensors here)")
        if len(node.inputs) == 3 and node.inputs[2] >= 0:
            require_type(node, tensor_in(node, graph, 2), (np.float32,), "the weights")
        require_type(node, tensor_out(node, graph), (np.int32,), "the output")
        if node.attrs.get("type") not in (_SPARSE, _DENSE):
            raise ModelError(f"{node}: projection type {node.attrs.get('type')} is neither SPARSE nor DENSE")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        hashes, x = known(node, shapes[:2])
        if len(hashes) != 2 or hashes[1] > _MAX_BITS:
            raise ModelError(f"{node}: the hash functions must be [functions, bits <= {_MAX_BITS}], are "
                             f"{list(hashes)}")
        if not x or x[0] < 1:
            raise ModelError(f"{node}: the input needs rank >= 1 and at least one row, has shape {list(x)}")
        weights = shapes[2] if len(shapes) > 2 else None
        if weights is not None and weights != (x[0],):
            raise ModelError(f"{node}: weights of shape {list(weights)} for {x[0]} input rows")
        return [(hashes[0],) if node.attrs.get("type") == _SPARSE else (hashes[0] * hashes[1],)]

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: Inputs) -> list[np.ndarray]:
        hashes, x = inputs[0], inputs[1]
        weights = inputs[2] if len(inputs) > 2 else None
        if hashes is None or x is None:
            raise ModelError(f"{node}: the hash functions and the input are required")
        LshProjection.infer(node, graph, [hashes.shape, x.shape, None if weights is None else weights.shape])
        rows = np.array(x, copy=True, order="C").reshape(x.shape[0], -1).view(np.uint8)
        row_bytes = [bytes(r) for r in rows]
        functions, bits = hashes.shape
        signs = np.zeros((functions, bits), np.int32)
        for f in range(functions):
            for b in range(bits):
                seed = np.float32(hashes[f, b]).tobytes()
                values = [float(_signed(fingerprint64(seed + r))) for r in row_bytes]
                if weights is None:
                    score = sum(values, 0.0)
                else:
                    score = 0.0
                    for w, v in zip(weights.astype(np.float64), values):
                        score += float(w) * v
                signs[f, b] = score > 0
        if node.attrs.get("type") == _DENSE:
            return [signs.reshape(-1)]
        packed = np.zeros(functions, np.int64)
        for b in range(bits):
            packed = (packed << 1) | signs[:, b]
        offsets = np.arange(functions, dtype=np.int64) << bits
        return [((packed + offsets + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)]
