"""Non-max suppression (TFLite's NonMaxSuppressionV4 / V5, with Soft-NMS), float32.

The candidates sit in a binary max-heap on score that repeats libstdc++'s push_heap / pop_heap step for step
(what std::priority_queue inside LiteRT does), so candidates of equal score come out in LiteRT's order.
"""

from __future__ import annotations

import numpy as np

from .jit import njit


@njit(cache=True)
def _iou(boxes, i, j):
    y1i, y2i = min(boxes[i, 0], boxes[i, 2]), max(boxes[i, 0], boxes[i, 2])
    x1i, x2i = min(boxes[i, 1], boxes[i, 3]), max(boxes[i, 1], boxes[i, 3])
    y1j, y2j = min(boxes[j, 0], boxes[j, 2]), max(boxes[j, 0], boxes[j, 2])
    x1j, x2j = min(boxes[j, 1], boxes[j, 3]), max(boxes[j, 1], boxes[j, 3])
    area_i = (y2i - y1i) * (x2i - x1i)
    area_j = (y2j - y1j) * (x2j - x1j)
    zero = np.float32(0.0)
    if area_i <= zero or area_j <= zero:
        return zero
    inter = max(min(y2i, y2j) - max(y1i, y1j), zero) * max(min(x2i, x2j) - max(x1i, x1j), zero)
    union = area_i + area_j - inter
    if union == zero:
        return zero
    return np.float32(inter / union)


@njit(cache=True)
def _push(heap_idx, heap_score, heap_begin, n, idx, score, begin):
    """libstdc++ __push_heap: sift the new last element up while its parent is smaller."""
    hole = n
    parent = (hole - 1) // 2
    while hole > 0 and heap_score[parent] < score:
        heap_idx[hole], heap_score[hole], heap_begin[hole] = heap_idx[parent], heap_score[parent], heap_begin[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap_idx[hole], heap_score[hole], heap_begin[hole] = idx, score, begin


@njit(cache=True)
def _pop(heap_idx, heap_score, heap_begin, n):
    """libstdc++ pop_heap over n elements: the top leaves, the last one fills the hole (__adjust_heap)."""
    top = (heap_idx[0], heap_score[0], heap_begin[0])
    idx, score, begin = heap_idx[n - 1], heap_score[n - 1], heap_begin[n - 1]
    length = n - 1
    hole = 0
    child = 0
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if heap_score[child] < heap_score[child - 1]:
            child -= 1
        heap_idx[hole], heap_score[hole], heap_begin[hole] = heap_idx[child], heap_score[child], heap_begin[child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2 and length > 0:
        child = 2 * (child + 1)
        heap_idx[hole], heap_score[hole], heap_begin[hole] = (heap_idx[child - 1], heap_score[child - 1],
                                                              heap_begin[child - 1])
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > 0 and heap_score[parent] < score:
        heap_idx[hole], heap_score[hole], heap_begin[hole] = heap_idx[parent], heap_score[parent], heap_begin[parent]
        hole = parent
        parent = (hole - 1) // 2
    if length > 0:
        heap_idx[hole], heap_score[hole], heap_begin[hole] = idx, score, begin
    return top


@njit(cache=True)
def _nms(boxes, scores, max_output, iou_threshold, score_threshold, sigma, selected, selected_scores):
    n = scores.size
    heap_idx = np.empty(n, np.int64)
    heap_score = np.empty(n, np.float32)
    heap_begin = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        if scores[i] > score_threshold:
            _push(heap_idx, heap_score, heap_begin, size, i, scores[i], 0)
            size += 1
    count = 0
    wanted = min(size, max_output)
    scale = np.float32(-0.5) / sigma if sigma > 0 else np.float32(0.0)
    while count < wanted and size > 0:
        idx, score, begin = _pop(heap_idx, heap_score, heap_begin, size)
        size -= 1
        original = score
        hard = False
        for j in range(count - 1, begin - 1, -1):
            iou = _iou(boxes, idx, selected[j])
            if iou >= iou_threshold:
                hard = True
                break
            if sigma > 0:
                score = np.float32(score * np.float32(np.exp(np.float32(scale * iou * iou))))
            if score <= score_threshold:
                break
        begin = count  # the selections compared so far
        if not hard:
            if score == original:
                selected[count] = idx
                selected_scores[count] = score
                count += 1
            if score > score_threshold:  # LiteRT pushes a just-selected box back too (it then meets itself)
                _push(heap_idx, heap_score, heap_begin, size, idx, score, begin)
                size += 1
    return count


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output: int, iou_threshold: float,
                        score_threshold: float, sigma: float) -> tuple[np.ndarray, np.ndarray, int]:
    """(selected indices [max_output] int32, their scores [max_output] float32, how many are valid); the
    unused tail is zero."""
    selected = np.zeros(max_output, np.int64)
    selected_scores = np.zeros(max_output, np.float32)
    count = _nms(np.ascontiguousarray(boxes, np.float32), np.ascontiguousarray(scores, np.float32), max_output,
                 np.float32(iou_threshold), np.float32(score_threshold), np.float32(sigma), selected, selected_scores)
    return selected.astype(np.int32), selected_scores, int(count)
