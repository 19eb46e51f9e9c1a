"""NON_MAX_SUPPRESSION_V4 and _V5 (Soft-NMS) against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd
from gpu_delegate.tflite.writer import ModelBuilder

from .reference import run_litert, run_ours


def nms_model(n: int, max_output: int, iou: float, score: float, sigma: float | None, const_max=True,
              version=1) -> bytes:
    mb = ModelBuilder()
    boxes = mb.input("boxes", [n, 4])
    scores = mb.input("scores", [n])
    m = mb.const("max", np.array(max_output, np.int32)) if const_max else mb.input("max", [], np.int32)
    ins = [boxes, scores, m, mb.const("iou", np.array(iou, np.float32)),
           mb.const("score", np.array(score, np.float32))]
    outs = [mb.tensor("selected", [max_output], np.int32)]
    if sigma is not None:
        ins.append(mb.const("sigma", np.array(sigma, np.float32)))
        outs.append(mb.tensor("selected_scores", [max_output]))
    outs.append(mb.tensor("count", [], np.int32))
    mb.op("NON_MAX_SUPPRESSION_V5" if sigma is not None else "NON_MAX_SUPPRESSION_V4", ins, outs, version=version)
    mb.output(*outs)
    return mb.build()


def boxes_and_scores(n: int, seed: int, ties: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 10, (n, 2))
    size = rng.uniform(0.5, 4, (n, 2))
    boxes = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    flip = rng.random(n) < 0.3  # corners in either order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = (rng.integers(0, 6, n) / 5 if ties else rng.random(n)).astype(np.float32)
    return [boxes, scores]


def compare(content: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    ref, ours = run_litert(content, inputs), run_ours(content, inputs)
    assert len(ref) == len(ours)
    for o, r in zip(ours, ref):
        assert o.dtype == r.dtype and o.shape == r.shape, (o.shape, r.shape)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(o, r)
    return ours


@pytest.mark.parametrize("n,max_output,iou,score", [(37, 10, 0.5, 0.2), (64, 64, 0.3, 0.0), (9, 3, 0.7, 0.95),
                                                    (25, 30, 0.0, -1.0), (1, 5, 0.5, 0.0)])
@pytest.mark.parametrize("seed", [0, 1])
def test_nms_v4(n, max_output, iou, score, seed):
    content = nms_model(n, max_output, iou, score, None)
    selected, count = compare(content, boxes_and_scores(n, seed))
    assert np.all(selected[int(count):] == 0)


def test_nms_v4_equal_scores_come_out_in_litert_order():
    content = nms_model(80, 40, 0.6, 0.1, None)
    compare(content, boxes_and_scores(80, 3, ties=True))


@pytest.mark.parametrize("sigma", [0.0, 0.5, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nms_v5_soft(sigma, seed):
    content = nms_model(40, 15, 0.8, 0.05, sigma)
    compare(content, boxes_and_scores(40, seed))


def test_nms_max_output_from_a_tensor():
    content = nms_model(20, 6, 0.5, 0.0, 0.3, const_max=False)
    for m in (6, 2, 1):
        compare(content, [*boxes_and_scores(20, 4), np.array(m, np.int32)])
    # LiteRT cannot hand out the empty outputs of max_output_size 0 ("Invalid tensor size"): check by hand
    selected, scores, count = run_ours(content, [*boxes_and_scores(20, 4), np.array(0, np.int32)])
    assert selected.shape == scores.shape == (0,) and count.shape == () and int(count) == 0


def test_nms_rejects_newer_version():
    with pytest.raises(gd.ModelError, match=r"NON_MAX_SUPPRESSION_V4.*version 2"):
        gd.Interpreter(model_content=nms_model(5, 3, 0.5, 0.0, None, version=2))
