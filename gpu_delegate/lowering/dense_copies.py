"""An output the host reads in PHWC4 through a conversion kernel gets a second store instead: each kernel writing it
also stores every vec4 at its place in the dense row-major BHWC order, in a float32 buffer the host reads as it is.

A feature map that leaves the partition while nodes of the partition read it (the 2-in/3-out net's first
convolution: read by a depthwise convolution, and an output) cannot be written in the dense order alone, as
dense_outputs.py writes the outputs that no node reads; the conversion kernel after the last dispatch read it back
and wrote it again (15-27 us of that net's ~200 on PoCL, a fifth of its kernels' time). With whole slices (channels
a multiple of 4) the dense order holds the same vec4 as PHWC4, only elsewhere: the writers' ``t_write`` and
``t_store16`` store each one twice (codegen._cl_accessors, the companion argument ``t_dense``), and the host reads
the companion (base.OutputRoute ``dense``).

Taken, on OpenCL, for an output of whole slices stored under its own name or sharing the buffer of a tensor of its
very shape (a dropped DEQUANTIZE: the 2-in/3-out net int8's feature map), neither placed in a larger tensor nor
holding a placed one, whose PHWC4 is not in the dense order already (base.pixels_in_order), every writer of which
stores through the accessors (the conversion kernels write their buffers directly). Outputs of one buffer share
its copy.
"""

from __future__ import annotations

from ..backends.base import pixels_in_order
from .plan import Plan
from .view import PassResult

# kernels that write their outputs' buffers directly, not through t_write / t_store16
RAW_WRITERS = ("convert_from_phwc4", "quantize_u8")


def run(plan: Plan, api: str) -> PassResult:
    result = PassResult("dense_copies")
    if api != "OpenCL":
        return result
    holding = {plan.storage(t) for t in plan.placed}
    copies: dict[int, int] = {}  # storage -> its dense copy
    for t in plan.outputs:
        shape, owner = plan.tensors[t], plan.storage(t)
        if t in plan.dense or owner in plan.dense or t in plan.dense_copies or owner in holding or shape[3] % 4 or \
                plan.tensors[owner] != shape:
            continue
        pixels = pixels_in_order(shape)
        if pixels is not None and pixels[0] == 1:
            continue  # read as it is
        if owner in copies:
            plan.dense_copies[t] = copies[owner]
            continue
        writers = [(call, arg) for call in plan.kernels for arg, u in call.outputs.items() if u == owner]
        if not writers:
            continue
        raw = [call.label for call, _ in writers if call.source("opencl")[1] in RAW_WRITERS]
        if raw:
            result.declined.append(f"output {t}: {raw[0]} writes its buffer directly")
            continue
        copy = max(plan.tensors) + 1
        plan.tensors[copy] = shape
        plan.fp32_tensors.add(copy)
        plan.dense_copies[t] = copies[owner] = copy
        for call, arg in writers:
            call.outputs[f"{arg}_dense"] = copy
        result.applied.append(f"output {t}: stored in the dense order too, by "
                              f"{', '.join(call.label for call, _ in writers)}")
    return result

