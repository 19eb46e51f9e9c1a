"""The README's operator table is the one the op registry generates, and the builtin ops it lists as refused for
want of a LiteRT kernel are ones LiteRT's builtin resolver does refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_delegate.ops import REGISTRY
from gpu_delegate.ops.table import BEGIN, END, NOT_REGISTERED, REFUSED, markdown, rows
from gpu_delegate.tflite.writer import ModelBuilder

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_table_is_the_generated_one():
    text = README.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README.md lost the op table's marker comments"
    held = text[text.index(BEGIN):text.index(END) + len(END)]
    assert held == markdown(), "README.md's op table is stale: regenerate it with python -m gpu_delegate.ops.table"


def test_every_registered_op_has_a_row():
    named = {row[0].removesuffix(" (custom)") for row in rows()}
    assert set(REGISTRY) <= named
    for row in rows():
        if row[0] in REGISTRY:
            assert row[2] == row[3] == ("yes" if REGISTRY[row[0]].has_gpu_kernel() else "")


@pytest.mark.parametrize("op", [row[0] for row in rows() if row[1] == "refused" and row[0] != "CUSTOM"])
def test_refused_builtin_ops_have_no_litert_kernel(op):
    """Each refused builtin op (but CUSTOM, a marker) is one LiteRT cannot load either."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    mb = ModelBuilder()
    mb.op(op, [], [])
    with pytest.raises(ValueError, match="Didn't find op for builtin opcode"):
        litert.Interpreter(model_content=mb.build())
    assert REFUSED.get(op, NOT_REGISTERED)
