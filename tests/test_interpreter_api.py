"""The interpreter's tf.lite surface, side by side with LiteRT's Interpreter on the same model."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite import ModelBuilder

from .reference import assert_float_close, litert_interpreter


def _model() -> tuple[bytes, dict[str, int]]:
    """y = relu(FC(x) + dequantize(q)), yq = quantize(y): a float and an int8 input, both batch-resizable."""
    mb = ModelBuilder()
    x = mb.input("x", [1, 4], shape_signature=[-1, 4])
    w = mb.const("w", (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 8)
    b = mb.const("b", np.array([0.5, -1, 2], np.float32))
    h = mb.tensor("h", [1, 3], shape_signature=[-1, 3])
    mb.op("FULLY_CONNECTED", [x, w, b], [h])
    q = mb.input("q", [1, 3], np.int8, scale=0.5, zero_point=-2, shape_signature=[-1, 3])
    dq = mb.tensor("dq", [1, 3], shape_signature=[-1, 3])
    mb.op("DEQUANTIZE", [q], [dq])
    y = mb.tensor("y", [1, 3], shape_signature=[-1, 3])
    mb.op("ADD", [h, dq], [y], fused_activation_function="RELU")
    yq = mb.tensor("yq", [1, 3], np.int8, scale=0.25, zero_point=5, shape_signature=[-1, 3])
    mb.op("QUANTIZE", [y], [yq])
    mb.output(y, yq)
    mb.add_signature("serving_default", {"x": x, "q": q}, {"y": y, "yq": yq})
    return mb.build(), {"x": x, "q": q, "y": y, "yq": yq}


CONTENT, T = _model()


def _pair():
    return gd.Interpreter(model_content=CONTENT), litert_interpreter(CONTENT)


def _inputs(batch: int, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {T["x"]: rng.standard_normal((batch, 4)).astype(np.float32),
            T["q"]: rng.integers(-128, 128, (batch, 3)).astype(np.int8)}


def _assert_details_equal(ours: dict, ref: dict, what: str) -> None:
    assert set(ours) == set(ref), f"{what}: keys {sorted(ours)} != LiteRT's {sorted(ref)}"
    for key, want in ref.items():
        got = ours[key]
        if key == "quantization_parameters":
            assert set(got) == set(want), f"{what}: quantization_parameters keys"
            for k, v in want.items():
                np.testing.assert_array_equal(got[k], v, err_msg=f"{what}: quantization_parameters[{k!r}]")
                if isinstance(v, np.ndarray):
                    assert got[k].dtype == v.dtype, f"{what}: quantization_parameters[{k!r}] dtype"
        elif isinstance(want, np.ndarray):
            np.testing.assert_array_equal(got, want, err_msg=f"{what}: {key}")
            assert got.dtype == want.dtype, f"{what}: {key} dtype {got.dtype} != {want.dtype}"
        else:
            assert got == want, f"{what}: {key} = {got!r}, LiteRT: {want!r}"


def test_input_and_output_details_match_litert():
    ours, ref = _pair()
    for stage in ("before allocate", "after allocate"):
        for kind in ("get_input_details", "get_output_details"):
            got, want = getattr(ours, kind)(), getattr(ref, kind)()
            assert len(got) == len(want) == 2
            for g, w in zip(got, want):
                _assert_details_equal(g, w, f"{kind} {stage} {w['name']}")
        ours.allocate_tensors()
        ref.allocate_tensors()


def test_invoke_before_allocate_tensors_is_a_runtime_error():
    ours, ref = _pair()
    with pytest.raises(RuntimeError):
        ref.invoke()
    with pytest.raises(RuntimeError, match="allocate_tensors"):
        ours.invoke()


@pytest.mark.parametrize("bad", ["dtype", "shape", "rank"])
def test_set_tensor_refuses_a_wrong_value_and_changes_nothing(bad):
    ours, ref = _pair()
    for it in (ours, ref):
        it.allocate_tensors()
        it.set_tensor(T["x"], np.full((1, 4), 7, np.float32))
    value = {"dtype": np.zeros((1, 4), np.float64), "shape": np.zeros((2, 4), np.float32),
             "rank": np.zeros(4, np.float32)}[bad]
    with pytest.raises(ValueError):
        ref.set_tensor(T["x"], value)
    with pytest.raises(ValueError, match=r"\bx\b") as e:
        ours.set_tensor(T["x"], value)
    assert ("float64" in str(e.value)) == (bad == "dtype")
    np.testing.assert_array_equal(ours.get_tensor(T["x"]), np.full((1, 4), 7, np.float32))
    assert ours.get_input_details()[0]["shape"].tolist() == [1, 4]


def test_tensor_index_out_of_range():
    ours, ref = _pair()
    n = len(ref.get_tensor_details())
    for it in (ours, ref):
        it.allocate_tensors()
        with pytest.raises(ValueError):
            it.get_tensor(n + 5)
        with pytest.raises(ValueError):
            it.set_tensor(-1, np.zeros((1, 4), np.float32))


def _run(it, inputs: dict[int, np.ndarray]) -> list[np.ndarray]:
    for i, v in inputs.items():
        it.set_tensor(i, v)
    it.invoke()
    return [it.get_tensor(T["y"]), it.get_tensor(T["yq"])]


def test_resize_to_a_new_batch_gives_litert_results():
    ours, ref = _pair()
    for it in (ours, ref):
        it.allocate_tensors()
    first = [_run(it, _inputs(1)) for it in (ours, ref)]
    for it in (ours, ref):
        it.resize_tensor_input(T["x"], [5, 4])
        it.resize_tensor_input(T["q"], np.array([5, 3]))
        it.allocate_tensors()
    assert [d["shape"].tolist() for d in ours.get_output_details()] == [[5, 3], [5, 3]]
    got, want = (_run(it, _inputs(5, seed=1)) for it in (ours, ref))
    assert_float_close(got[0], want[0], what="y")
    assert np.max(np.abs(got[1].astype(int) - want[1].astype(int))) <= 1, "yq"
    assert_float_close(first[0][0], first[1][0], what="y at batch 1")


def test_resize_is_checked_against_the_shape_signature_when_strict():
    ours, ref = _pair()
    with pytest.raises((ValueError, RuntimeError)):  # LiteRT documents ValueError, raises RuntimeError
        ref.resize_tensor_input(T["x"], [2, 5], strict=True)
    with pytest.raises(ValueError, match="'x'"):
        ours.resize_tensor_input(T["x"], [2, 5], strict=True)
    with pytest.raises(ValueError, match="not a model input"):
        ours.resize_tensor_input(T["y"], [2, 3])


def test_signature_list_and_runner_match_litert():
    ours, ref = _pair()
    assert ours.get_signature_list() == ref.get_signature_list()
    r_ours, r_ref = ours.get_signature_runner(), ref.get_signature_runner("serving_default")
    for kind in ("get_input_details", "get_output_details"):
        got, want = getattr(r_ours, kind)(), getattr(r_ref, kind)()
        assert set(got) == set(want)
        for name in want:
            _assert_details_equal(got[name], want[name], f"signature runner {kind}[{name!r}]")
    feed = {"x": _inputs(3)[T["x"]], "q": _inputs(3)[T["q"]]}
    got, want = r_ours(**feed), r_ref(**feed)
    assert set(got) == set(want) == {"y", "yq"}
    assert_float_close(got["y"], want["y"], what="y")
    with pytest.raises(ValueError, match="nope"):
        ours.get_signature_runner("nope")
    with pytest.raises(ValueError):
        r_ours(x=feed["x"])  # q is missing


def test_tensor_view_writes_inputs_and_reads_outputs():
    results = []
    for it in _pair():
        it.allocate_tensors()
        for i, v in _inputs(1, seed=2).items():
            it.tensor(i)()[...] = v  # a view: writing into it sets the input
        it.invoke()
        y = it.tensor(T["y"])
        np.testing.assert_array_equal(y(), it.get_tensor(T["y"]))
        results.append(y().copy())
    assert_float_close(results[0], results[1], what="y through tensor()")


def test_get_tensor_returns_a_copy():
    ours, _ = _pair()
    ours.allocate_tensors()
    _run(ours, _inputs(1))
    out = ours.get_tensor(T["y"])
    out[...] = -99
    assert not np.any(ours.get_tensor(T["y"]) == -99)


def test_unknown_op_is_refused_at_load_naming_op_and_node():
    mb = ModelBuilder()
    x = mb.input("x", [1, 4])
    h = mb.tensor("h", [1, 4])
    mb.op("RELU", [x], [h])
    y = mb.tensor("y", [1, 4])
    mb.op("NoSuchOp", [h], [y], custom_options=b"\x00")
    mb.output(y)
    content = mb.build()
    with pytest.raises((ValueError, RuntimeError), match="NoSuchOp"):
        litert_interpreter(content).allocate_tensors()
    with pytest.raises(gd.ModelError, match=r"node 1 \(NoSuchOp\)"):
        gd.Interpreter(model_content=content)


def _chain(broken: str) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", [1, 4])
    never = mb.tensor("never_written", [1, 4])
    a = mb.tensor("a", [1, 4])
    y = mb.tensor("y", [1, 4])
    if broken == "reads an unwritten tensor":
        mb.op("ADD", [x, never], [a])
        mb.op("RELU", [a], [y])
    elif broken == "out of order":
        mb.op("RELU", [a], [y])
        mb.op("RELU", [x], [a])
    elif broken == "two writers":
        mb.op("RELU", [x], [a])
        mb.op("RELU", [x], [a])
        mb.op("RELU", [a], [y])
    elif broken == "writes an input":
        mb.op("RELU", [x], [x])
        mb.op("RELU", [x], [y])
    elif broken == "output never written":
        mb.op("RELU", [x], [a])
    mb.output(y)
    return mb.build()


@pytest.mark.parametrize("broken, message", [
    ("reads an unwritten tensor", r"node 0 \(ADD\) reads tensor 1 \('never_written'\)"),
    ("out of order", r"node 0 \(RELU\) reads tensor 2 \('a'\)"),
    ("two writers", r"node 1 \(RELU\) writes tensor 2 \('a'\)"),
    ("writes an input", r"node 0 \(RELU\) writes tensor 0 \('x'\)"),
    ("output never written", r"graph output tensor 3 \('y'\) is never written"),
])
def test_graph_validation(broken, message):
    with pytest.raises(gd.ModelError, match=message):
        gd.Interpreter(model_content=_chain(broken))


def test_model_path_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.tflite"
    with pytest.raises(ValueError, match="missing.tflite"):
        gd.Interpreter(model_path=missing)
    garbage = tmp_path / "garbage.tflite"
    garbage.write_bytes(b"\x00" * 64)
    with pytest.raises(gd.ModelError, match="garbage.tflite"):
        gd.Interpreter(model_path=garbage)
    with pytest.raises(ValueError, match="exactly one"):
        gd.Interpreter(model_path=garbage, model_content=b"")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"model_path": 123}, TypeError, "model_path must be a str or os.PathLike, not int"),
    ({"model_content": "not bytes"}, TypeError, "model_content must be bytes, not str"),
    ({"model_content": CONTENT, "experimental_delegates": gd.SimpleDelegate()}, TypeError,
     r"experimental_delegates must be a list of delegates.*\[delegate\]"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        gd.Interpreter(**kwargs)


@pytest.mark.parametrize("size, match", [([10**30, 4], r"dimensions must be in \[0, 2\*\*31\)"),
                                         ([2**31, 4], r"dimensions must be in \[0, 2\*\*31\)"),
                                         ("ab", "tensor_size must be a list of ints"),
                                         ([1.5, 4], "tensor_size must be a list of ints")])
def test_bad_resizes_are_value_errors(size, match):
    it = gd.Interpreter(model_content=CONTENT)
    with pytest.raises(ValueError, match=match):
        it.resize_tensor_input(T["x"], size)
    assert list(it.get_input_details()[0]["shape"]) == [1, 4]  # nothing half-changed


def test_sizes_do_not_wrap_around():
    """A declared shape whose element count exceeds int64 is counted exactly (inspect's MACs, size checks)."""
    from gpu_delegate.graph import Tensor

    t = Tensor(0, "t", (2**40, 2**40), np.dtype(np.float32))
    assert t.size == 2**80


def _memory_bomb() -> bytes:
    """A kilobyte of model asking for 8 tensors of 10^9 int8 values (each within the per-tensor limit)."""
    mb = ModelBuilder()
    x = mb.input("x", [1], np.int8)
    outs = []
    for k in range(8):
        y = mb.tensor(f"y{k}", [10**9], np.int8)
        mb.op("BROADCAST_TO", [x, mb.const(f"s{k}", np.array([10**9], np.int32))], [y], version=2)
        outs.append(y)
    mb.output(*outs)
    return mb.build()


def test_a_memory_bomb_is_refused_at_allocation(monkeypatch):
    content = _memory_bomb()
    assert len(content) < 2048
    it = gd.Interpreter(model_content=content)
    with pytest.raises(gd.ModelError, match=r"would need 7\.5 GiB, more than the 4\.0 GiB allowed"):
        it.allocate_tensors()
    monkeypatch.setenv("GPU_DELEGATE_MAX_TENSOR_GIB", "1e-9")  # a byte
    small = gd.Interpreter(model_content=CONTENT)
    with pytest.raises(gd.ModelError, match="GPU_DELEGATE_MAX_TENSOR_GIB allows"):
        small.allocate_tensors()
