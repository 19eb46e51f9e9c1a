"""EMBEDDING_LOOKUP_SPARSE as TFLite's kernel walks it: entries in order, each adding weight * row to its output
bucket; when the bucket changes, the finished one is divided by its weight total (MEAN) or the root of its
squared weights (SQRTN). Entries of one bucket are expected next to each other (a sorted SparseTensor); a
bucket met twice is finalized twice, as in TFLite."""

from __future__ import annotations

import numpy as np

from .jit import njit

SUM, MEAN, SQRTN = 0, 1, 2


@njit(cache=True)
def _finalize(combiner, count, total, squares, row):
    if combiner != SUM and count > 0:
        divisor = total if combiner == MEAN else np.float32(np.sqrt(squares))
        for k in range(row.size):
            row[k] = row[k] / divisor


@njit(cache=True)
def lookup_sparse(ids, buckets, weights, table, combiner, out):
    """ids [N], buckets [N] (flat output row of each entry), weights [N] float32, table [vocab, size] float32,
    out [rows, size] zeroed."""
    current, count = 0, 0
    total, squares = np.float32(0.0), np.float32(0.0)
    for i in range(ids.size):
        bucket = buckets[i]
        if bucket != current:
            _finalize(combiner, count, total, squares, out[current])
            count, total, squares, current = 0, np.float32(0.0), np.float32(0.0), bucket
        w = weights[i]
        count += 1
        total += w
        squares += w * w
        for k in range(table.shape[1]):
            out[bucket, k] += table[ids[i], k] * w
    _finalize(combiner, count, total, squares, out[current])
