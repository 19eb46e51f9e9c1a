"""NON_MAX_SUPPRESSION_V4 and _V5 (Soft-NMS), float32 (the only type LiteRT's kernel takes).

Inputs: boxes [N, 4] as (y1, x1, y2, x2), scores [N], max_output_size (int32 scalar), iou_threshold and
score_threshold (float scalars), and for V5 soft_nms_sigma. Outputs: selected indices [max_output_size] (int32,
zero past the valid ones), for V5 their scores, and the number of valid selections (int32 scalar). The outputs'
length is max_output_size's value: infer reads it from a constant, run_cpu from the array.
"""

from __future__ import annotations

import numpy as np

from ..cpu.detection import non_max_suppression
from ..errors import ModelError
from ..graph import Graph, Node
from .base import Op, register
from .checks import check_run_shapes, data_dependent


def _scalar(node: Node, value: np.ndarray, what: str) -> float:
    if value.size != 1:
        raise ModelError(f"{node}: {what} must be a single value, has shape {list(value.shape)}")
    return float(value.reshape(-1)[0])


class _Nms(Op):
    soft = False
    max_version = 1

    @classmethod
    def check(cls, node: Node, graph: Graph) -> None:
        n_in, n_out = (6, 3) if cls.soft else (5, 2)
        if len(node.inputs) != n_in or min(node.inputs) < 0 or len(node.outputs) != n_out:
            raise ModelError(f"{node}: expects {n_in} inputs and {n_out} outputs, has {len(node.inputs)} and "
                             f"{len(node.outputs)}")
        types = [graph.tensors[t].dtype for t in node.inputs]
        floats = [i for i in range(n_in) if i != 2]
        if any(types[i] != np.float32 for i in floats) or types[2] != np.int32:
            raise ModelError(f"{node}: boxes, scores and thresholds must be float32 and max_output_size int32, got "
                             f"{[str(t) for t in types]} (LiteRT's kernel takes float32 only)")
        for i in range(2, n_in):
            if graph.tensors[node.inputs[i]].shape != ():
                raise ModelError(f"{node}: input {i} must be a scalar, has shape "
                                 f"{list(graph.tensors[node.inputs[i]].shape)}")

    @classmethod
    def infer(cls, node, graph, shapes):
        boxes, scores = shapes[0], shapes[1]
        if len(boxes) != 2 or boxes[1] != 4 or tuple(scores) != (boxes[0],):
            raise ModelError(f"{node}: boxes must be [N, 4] and scores [N], have {list(boxes)} and {list(scores)}")
        value = graph.tensors[node.inputs[2]].data
        if value is None:
            data_dependent(node)
        size = cls._max_output(node, value)
        return [(size,), (size,), ()] if cls.soft else [(size,), ()]

    @staticmethod
    def _max_output(node: Node, value: np.ndarray) -> int:
        size = int(_scalar(node, value, "max_output_size"))
        if size < 0:
            raise ModelError(f"{node}: max_output_size is {size}")
        return size

    @classmethod
    def run_cpu(cls, node, graph, inputs):
        check_run_shapes(cls.infer, node, graph, [v.shape for v in inputs])
        sigma = _scalar(node, inputs[5], "soft_nms_sigma") if cls.soft else 0.0
        selected, scores, count = non_max_suppression(
            inputs[0], inputs[1], cls._max_output(node, inputs[2]), _scalar(node, inputs[3], "iou_threshold"),
            _scalar(node, inputs[4], "score_threshold"), sigma)
        valid = np.array(count, np.int32)
        return [selected, scores, valid] if cls.soft else [selected, valid]

    @staticmethod
    def macs(node, graph):
        n = graph.tensors[node.inputs[0]].shape[0]
        return n * max(graph.tensors[node.outputs[0]].size, 1)


@register
class NonMaxSuppressionV4(_Nms):
    name = "NON_MAX_SUPPRESSION_V4"
    types = "float32"


@register
class NonMaxSuppressionV5(_Nms):
    name = "NON_MAX_SUPPRESSION_V5"
    types = "float32"
    soft = True
