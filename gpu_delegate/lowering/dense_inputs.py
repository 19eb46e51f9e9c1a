"""Where convolutions alone read an input, they read it in the dense order the host writes (row-major BHWC, float32)
instead of from PHWC4 that a conversion kernel made of it.

The mirror of dense_outputs.py. An image model's input (224x224x3) or an audio model's (16000x1) is dense on the
host; PHWC4 pads its channels to slices and, past 4 channels, interleaves them by slice, so every invoke began with a
conversion kernel: 21 us of a 2-input net's 0.25 ms on PoCL for a 96x96x3 image, 20 us for 16000 audio samples of
one channel, which PHWC4 stores as 16000 vec4 (4x the bytes the convolution then reads). kernels/opencl/conv2d.cl
and conv2d_1x1.cl read their input one float at a time already (an input channel broadcast against a row of
weights): with SRC_DENSE a pixel's channels start at C x its index and slice s at 4 s past them, the lanes past C
skipped as in PHWC4's last slice. The input is then written into its buffer as it is (base.InputRoute
``dense_floats``), stored as float32 whatever the delegate's precision.

Declined (with the reason) unless: the API is OpenCL (the opencl/ variants of the convolutions run there, on a GPU
too); the input is float32 in the graph (8-bit inputs come as codes that a kernel dequantizes); every kernel that
reads its buffer (through dropped reshapes) is such a convolution reading it as its ``src``, and none writes it
(no state variable, no output).
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph
from .plan import Plan
from .view import PassResult

# the kernels/opencl/ kernels that read a dense ``src`` under SRC_DENSE
DENSE_READERS = ("conv2d", "conv2d_1x1", "copy")


def run(plan: Plan, graph: Graph, api: str) -> PassResult:
    result = PassResult("dense_inputs")
    if api != "OpenCL":
        return result
    outputs = {plan.storage(t) for t in (*plan.outputs, *plan.state_updates, *plan.state_updates.values())}
    for t in plan.inputs:
        why_not = _why_not(plan, graph, t, outputs)
        if why_not:
            result.declined.append(f"input {t}: {why_not}")
            continue
        readers = [call for call in plan.kernels if plan.storage(call.inputs.get("src", -1)) == t]
        for call in readers:
            call.defines["SRC_DENSE"] = 1
            if call.variants.get("opencl") == "copy":  # whose channel counts are run-time values
                call.defines["DENSE_C"] = plan.tensors[t][3]
        plan.dense.add(t)
        plan.fp32_tensors.add(t)
        result.applied.append(f"input {t}: read in the dense order by {', '.join(c.label for c in readers)}")
    return result


def _why_not(plan: Plan, graph: Graph, t: int, outputs: set[int]) -> str:
    """Why input ``t`` cannot be read in the dense order, or ""."""
    if t < len(graph.tensors) and np.dtype(graph.tensors[t].dtype) != np.float32:
        return f"it is {np.dtype(graph.tensors[t].dtype).name}, not float32"
    if plan.storage(t) != t:
        return "it shares another tensor's buffer"
    if t in outputs:
        return "the partition writes or returns it"
    readers = 0
    for call in plan.kernels:
        if any(plan.storage(u) == t for u in call.outputs.values()):
            return f"{call.label} writes it"
        if any(p.tensor_operand is not None and plan.storage(p.tensor_operand) == t for p in call.postops):
            return f"a post-op of {call.label} reads it"
        for arg, u in call.inputs.items():
            if plan.storage(u) != t:
                continue
            if arg != "src" or call.variants.get("opencl") not in DENSE_READERS:
                return f"{call.label} reads it as {arg!r}, from PHWC4"
            readers += 1
    return "" if readers else "no kernel reads it"
