"""LSH_PROJECTION against LiteRT, sparse and dense, with and without weights. The keys (4 seed bytes + one input
row) are 7 to 136 bytes long: every branch of FarmHash's Fingerprint64 that a key can take (4..7, 8..16, 17..32,
33..64 bytes and the loop over longer ones)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_delegate as gd

from .single_op import Const, In, Out, expect_same, refused_version, sample, single_op

SPARSE, DENSE = 1, 2


@pytest.mark.parametrize("kind", [SPARSE, DENSE])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape,dtype", [((3,), np.int32), ((5, 2), np.float32), ((4, 5), np.int32),
                                         ((2, 13), np.float32), ((3, 30), np.int32), ((2, 3, 11), np.float32),
                                         ((7, 3), np.uint8), ((2, 1), np.int64)])
def test_lsh_projection(shape, dtype, weighted, kind):
    hashes = (sample((4, 6), np.float32, 1) * 10).astype(np.float32)
    inputs = [Const(hashes), In(shape, dtype)]
    if weighted:
        inputs.append(In((shape[0],)))
    out = (4,) if kind == SPARSE else (24,)
    content = single_op("LSH_PROJECTION", inputs, [Out(out, np.int32)], type=kind)
    x = sample(shape, dtype, 2) if dtype != np.int32 else sample(shape, dtype, 2, low=-1000, high=1000)
    feeds = [x] + ([sample((shape[0],), np.float32, 3)] if weighted else [])
    expect_same(content, feeds)


def test_newer_versions_are_refused_by_name():
    message = refused_version("LSH_PROJECTION", [Const(np.ones((1, 2), np.float32)), In((3,))],
                              [Out((1,), np.int32)], 2, type=SPARSE)
    assert "(LSH_PROJECTION): op version 2 is not supported" in message


def test_skip_gram_is_refused_by_name():
    # SKIP_GRAM reads and writes string tensors, which this interpreter does not hold
    content = single_op("SKIP_GRAM", [In((3,), np.uint8)], [Out((3,), np.uint8)], ngram_size=2, max_skip_size=1)
    with pytest.raises(gd.ModelError, match="SKIP_GRAM"):
        gd.Interpreter(model_content=content)
