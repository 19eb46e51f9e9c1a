"""Ops on text (STRING tensors): SKIP_GRAM."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..dtypes import STRING
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, Shape, register
from .checks import arity, data_dependent, required


def _words(text: bytes) -> list[bytes]:
    """``text`` split at ASCII whitespace as LiteRT's kernel splits it: a word ends at a whitespace byte; the
    first byte never ends a word, and a word that starts at byte 0 with a whitespace byte is dropped with the
    text up to the next whitespace (so " a b" gives only "b", as in LiteRT)."""
    words = []
    start = 0
    for i in range(1, len(text)):
        if text[i:i + 1].isspace():
            if i > start and not text[start:start + 1].isspace():
                words.append(text[start:i])
            start = i + 1
    if len(text) > start:
        words.append(text[start:])
    return words


def _grams(count: int, size: int, max_skip: int, all_sizes: bool) -> Iterator[list[int]]:
    """Word index lists of the skip-grams, in LiteRT's order: for each first word, depth first over the next words
    (each at most ``max_skip`` words after the previous one), a gram after the longer grams that extend it."""

    def extend(gram: list[int]) -> Iterator[list[int]]:
        if len(gram) < size:
            for nxt in range(gram[-1] + 1, min(gram[-1] + max_skip + 2, count)):
                yield from extend([*gram, nxt])
        if len(gram) == size or all_sizes:
            yield gram

    for first in range(count):
        yield from extend([first])


@register
class SkipGram(Op):
    """The skip-grams of the first string's words, joined by single spaces, as a 1-D STRING tensor."""

    name, max_version = "SKIP_GRAM", 1
    strings = True
    types = "string"

    @staticmethod
    def check(node: Node, graph: Graph) -> None:
        arity(node, 1, 1)
        for t in (node.inputs[0], node.outputs[0]):
            if graph.tensors[t].dtype != STRING:
                raise ModelError(f"{node}: tensor {t} ({graph.tensors[t].name!r}) must be STRING")
        size, skip = node.attrs.get("ngram_size", 0), node.attrs.get("max_skip_size", 0)
        if not isinstance(size, int) or size < 1 or not isinstance(skip, int) or skip < 0:
            raise ModelError(f"{node}: ngram_size {size!r} must be >= 1 and max_skip_size {skip!r} >= 0")

    @staticmethod
    def infer(node: Node, graph: Graph, shapes: list[Shape | None]) -> list[Shape]:
        data_dependent(node)

    @staticmethod
    def run_cpu(node: Node, graph: Graph, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        text = required(node, inputs, 0)
        if text.size == 0:
            raise ModelError(f"{node}: the input holds no string")
        words = _words(text.reshape(-1)[0])
        size, skip = int(node.attrs["ngram_size"]), int(node.attrs["max_skip_size"])
        grams: list[bytes] = []
        if len(words) >= size:
            grams = [b" ".join(words[i] for i in gram)
                     for gram in _grams(len(words), size, skip, bool(node.attrs.get("include_all_ngrams")))]
        out = np.empty(len(grams), STRING)
        out[:] = grams
        return [out]
