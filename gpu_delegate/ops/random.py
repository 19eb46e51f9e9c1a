"""RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL (input: the output shape, int32 [rank]) and MULTINOMIAL (logits
[batch, classes] float32, num_samples int32 scalar; output int32 or int64 [batch, num_samples]).

With a seed or seed2 in the options the numbers are LiteRT's own: Philox seeded with (seed, seed2) — their low
32 bits, sign-extended, as LiteRT reads them — drawn as TFLite's random_ops.cc draws them (cpu/random.py).
Both seeds 0 means non-deterministic in TFLite; here the seeds then come from the operating system. The
generator lives on the graph, one per node: it carries on from invoke to invoke and restarts when allocation
sees the node's input shapes change (TFLite restarts it in Prepare, which LiteRT runs again after any resize).
"""

from __future__ import annotations

import secrets

import numpy as np

from ..cpu import random as r
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import data_dependent

_MASK64 = (1 << 64) - 1


def _as_int32(v: int) -> int:
    """LiteRT keeps the options' int64 seeds in ints: only the low 32 bits count, sign-extended."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _generator(node: Node, graph: Graph, shapes: list, restart: bool) -> r.Philox:
    """The node's generator; a fresh one when asked to restart and the input shapes differ from last time."""
    states = graph.__dict__.setdefault("_random_generators", {})
    key = tuple(tuple(s) for s in shapes)
    if node.index not in states or (restart and states[node.index][0] != key):
        seed, seed2 = (_as_int32(int(node.attrs.get(k, 0))) for k in ("seed", "seed2"))
        if seed == 0 and seed2 == 0:
            seed, seed2 = secrets.randbits(64), secrets.randbits(64)
        states[node.index] = (key, r.Philox(seed & _MASK64, seed2 & _MASK64))
    return states[node.index][1]


def _shape_of(node: Node, value: np.ndarray) -> tuple[int, ...]:
    shape = tuple(int(v) for v in value.reshape(-1))
    if any(d < 0 for d in shape):
        raise ModelError(f"{node}: output shape {list(shape)} has a negative dimension")
    return shape


class _RandomFloat(Op):
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 1 or node.inputs[0] < 0 or len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 1 input (the output shape) and 1 output")
        shape = graph.tensors[node.inputs[0]]
        if shape.dtype != np.int32 or len(shape.shape) != 1:
            raise ModelError(f"{node}: the shape input must be a 1-D int32 tensor, is {shape.dtype} "
                             f"{list(shape.shape)}")
        out = graph.tensors[node.outputs[0]]
        if out.dtype != np.float32:
            raise ModelError(f"{node}: output is {out.type_name or out.dtype}; LiteRT's kernel makes float32 only")

    @staticmethod
    def infer(node, graph, shapes):
        _generator(node, graph, shapes, restart=True)
        value = graph.tensors[node.inputs[0]].data
        if value is None:
            data_dependent(node)
        return [_shape_of(node, value)]

    @classmethod
    def draw(cls, rng: r.Philox, size: int) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def run_cpu(cls, node, graph, inputs):
        shape = _shape_of(node, inputs[0])
        size = int(np.prod(shape, dtype=np.int64))
        return [cls.draw(_generator(node, graph, [inputs[0].shape], restart=False), size).reshape(shape)]


@register
class RandomUniform(_RandomFloat):
    name = "RANDOM_UNIFORM"
    types = "float32 out (LiteRT's Philox numbers for a seed)"
    foldable = False  # a generator whose state moves at every invoke

    @classmethod
    def draw(cls, rng, size):
        return r.uniform(rng, size)


@register
class RandomStandardNormal(_RandomFloat):
    name = "RANDOM_STANDARD_NORMAL"
    types = "float32 out (LiteRT's Philox numbers for a seed)"
    foldable = False  # a generator whose state moves at every invoke

    @classmethod
    def draw(cls, rng, size):
        return r.standard_normal(rng, size)


@register
class Multinomial(Op):
    name = "MULTINOMIAL"
    types = "float32 logits; int32/int64 samples"
    foldable = False  # a generator whose state moves at every invoke
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 2 or min(node.inputs) < 0 or len(node.outputs) != 1:
            raise ModelError(f"{node}: expects 2 inputs (logits, num_samples) and 1 output")
        logits, count = (graph.tensors[t] for t in node.inputs)
        out = graph.tensors[node.outputs[0]]
        if logits.dtype != np.float32 or count.dtype != np.int32 or out.dtype not in (np.int32, np.int64):
            raise ModelError(f"{node}: logits must be float32, num_samples int32 and the output int32 or int64; got "
                             f"{logits.dtype}, {count.dtype}, {out.dtype}")

    @staticmethod
    def _samples(node: Node, value: np.ndarray) -> int:
        if value.ndim != 0:
            raise ModelError(f"{node}: num_samples must be a scalar, has shape {list(value.shape)}")
        n = int(value)
        if n < 0:
            raise ModelError(f"{node}: num_samples is {n}")
        return n

    @staticmethod
    def infer(node, graph, shapes):
        if len(shapes[0]) != 2 or shapes[0][1] < 1:
            raise ModelError(f"{node}: logits must be [batch, classes] with classes >= 1, have {list(shapes[0])}")
        _generator(node, graph, shapes, restart=True)
        value = graph.tensors[node.inputs[1]].data
        if value is None:
            data_dependent(node)
        return [(shapes[0][0], Multinomial._samples(node, value))]

    @staticmethod
    def run_cpu(node, graph, inputs):
        logits, count = inputs
        rng = _generator(node, graph, [logits.shape, count.shape], restart=False)
        out = r.multinomial(rng, np.asarray(logits, np.float32), Multinomial._samples(node, count))
        return [out.astype(graph.tensors[node.outputs[0]].dtype)]


@register
class StablehloRngBitGenerator(Op):
    """Input: the generator state (uint64 [2], or [3] for Philox); outputs: the new state and random bits
    (int32, int64, uint32 or uint64, the shape the model declares). algorithm: DEFAULT and PHILOX use
    Philox4x32-10, THREEFRY Threefry2x32."""

    name = "STABLEHLO_RNG_BIT_GENERATOR"

    foldable = False  # a generator whose state moves at every invoke
    max_version = 1

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        if len(node.inputs) != 1 or node.inputs[0] < 0 or len(node.outputs) != 2:
            raise ModelError(f"{node}: expects 1 input (the state) and 2 outputs (new state, bits)")
        state, new_state, bits = graph.tensors[node.inputs[0]], *(graph.tensors[t] for t in node.outputs)
        algorithm = int(node.attrs.get("algorithm", 0))
        sizes = (2,) if algorithm == 2 else (2, 3)
        if state.dtype != np.uint64 or new_state.dtype != np.uint64 or len(state.shape) != 1 \
                or state.shape[0] not in sizes:
            raise ModelError(f"{node}: the state must be uint64 of {' or '.join(map(str, sizes))} values, is "
                             f"{state.type_name or state.dtype} {list(state.shape)}")
        if bits.dtype not in (np.int32, np.int64, np.uint32, np.uint64):
            raise ModelError(f"{node}: the bits output must be int32, int64, uint32 or uint64, is {bits.dtype}")
        if algorithm not in (0, 1, 2):
            raise ModelError(f"{node}: unknown algorithm {algorithm}")

    @staticmethod
    def infer(node, graph, shapes):
        return [tuple(shapes[0]), graph.tensors[node.outputs[1]].shape]

    @staticmethod
    def run_cpu(node, graph, inputs):
        bits = graph.tensors[node.outputs[1]]
        n_words = bits.size * bits.dtype.itemsize // 4
        state, words = r.rng_bit_generator(inputs[0], int(node.attrs.get("algorithm", 0)), n_words)
        return [state, words.view(bits.dtype).reshape(bits.shape)]
