"""The CPU-fallback warning (issue 16): like TFLite's GPU delegate, one text per model naming each op left on
the CPU with its reason, then how many operations run where; nothing when the whole model runs on the GPU."""

from __future__ import annotations

import numpy as np

import gpu_delegate as gd
from gpu_delegate import cli
from gpu_delegate.summary import cpu_fallback_summary
from gpu_delegate.tflite.writer import ModelBuilder

from .parity_models import every_op_model
from .reference import shared_delegate


def summary_of(content: bytes, backend: str) -> str:
    it = gd.Interpreter(model_content=content, experimental_delegates=[shared_delegate(backend)])
    backends = {d["index"]: d["backend"] for d in it.get_ops_details()}
    return cpu_fallback_summary(it.graph, backends, it.cpu_reasons())


def test_names_each_cpu_op_with_its_reason_and_counts(backend):
    mb = ModelBuilder()
    x = mb.input("x", (2, 3, 4, 5))
    y = mb.tensor("y", (2, 3, 4, 5))
    mb.op("RELU", [x], [y])
    values, order = mb.tensor("values", (2, 3, 4, 2)), mb.tensor("order", (2, 3, 4, 2), np.int32)
    mb.op("TOPK_V2", [y, mb.const("k", np.array(2, np.int32))], [values, order])
    z = mb.tensor("z", (2, 3, 4, 2))
    mb.op("TANH", [values], [z])
    wide = mb.tensor("wide", (2, 3, 4, 2), np.int64)
    mb.op("CAST", [z], [wide])
    mb.output(order, wide)
    text = summary_of(mb.build(), backend)
    lines = text.splitlines()
    assert lines[0] == "Following operations are not supported by GPU delegate:"
    assert lines[1] == "TOPK_V2: op TOPK_V2 has no GPU kernel (node 1)"
    assert lines[2].startswith("CAST: ") and "int64" in lines[2] and lines[2].endswith("(node 3)")
    # TANH is supported, but in a second partition: the delegate keeps one (max_delegated_partitions=1)
    assert lines[3] == "1 supported operations run on the CPU: their partitions are beyond max_delegated_partitions " \
        "(node 2)"
    assert lines[4] == "1 operations will run on the GPU, and the remaining 3 operations will run on the CPU."


def test_says_nothing_when_all_runs_on_the_gpu(backend):
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    y = mb.tensor("y", (1, 4, 4, 3))
    mb.op("RELU", [x], [y])
    mb.output(y)
    assert summary_of(mb.build(), backend) == ""


def test_custom_ops_are_named_as_tflite_names_them():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4))
    y = mb.tensor("y", (1, 4))
    mb.op("RELU", [x], [y])
    z = mb.tensor("z", (1, 4))
    mb.op("MyOwnOp", [y], [z])
    mb.output(z)
    graph = gd.tflite.reader.read_model(mb.build(), "m").main
    text = cpu_fallback_summary(graph, {0: "gl"}, {1: "op MyOwnOp has no GPU kernel"})
    assert "CUSTOM MyOwnOp: op MyOwnOp has no GPU kernel (node 1)" in text


def test_inspect_shows_every_op_of_the_issue_on_the_gpu(backend, tmp_path, capsys):
    """`gpu-delegate inspect` on one graph holding every op of issue 16: all on the GPU, one partition."""
    path = tmp_path / "every_op.tflite"
    path.write_bytes(every_op_model())
    assert cli.main(["inspect", str(path), f"--gpu_backend={backend}"]) == 0
    out = capsys.readouterr().out
    nodes = len(gd.tflite.reader.read_model(path.read_bytes(), "m").main.nodes)
    assert f"Placement: {backend}: {nodes}; 1 delegated partition" in out


def test_the_interpreter_warns_once_per_model(backend, caplog):
    """The summary reaches the user as one WARNING of the "gpu_delegate" logger when the interpreter is made."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 4, 5))
    y, z = mb.tensor("y", (1, 3, 4, 5)), mb.tensor("z", (1, 3, 4, 5), np.int64)
    mb.op("RELU", [x], [y])
    mb.op("CAST", [y], [z])
    mb.output(z)
    with caplog.at_level("WARNING", logger="gpu_delegate"):
        it = gd.Interpreter(model_content=mb.build(), experimental_delegates=[shared_delegate(backend)])
        it.allocate_tensors()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "CAST:" in warnings[0] and "1 operations will run on the GPU, and the remaining 1" in warnings[0]
