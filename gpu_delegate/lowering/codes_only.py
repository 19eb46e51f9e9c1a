"""Where only codes are read of an 8-bit tensor, its writers store only its codes, not its values.

An 8-bit convolution on integer dot products (ops/conv.py emit_conv_int8) reads its input's codes, a 32-bit word of
4 bytes a vec4, which the kernels writing the input store beside the values (codegen: ``t_write`` and ``t_store16``
with a ``t_codes`` partner). A post-op that reads such a tensor as its operand (a residual ADD fused into the
convolution ending a block) reads the codes too and decodes them (``PostOp.codes_of``; codegen's decoding
accessors): (code - zp - 128) x scale is the stored value to the bit, since the value is on the tensor's grid. Where
then no kernel of the plan reads the values themselves (as its input), and they leave neither the partition nor a
state update, the values are never read: the writer's define ``t_CODES_ONLY`` drops their store, four fifths of the
bytes it wrote (a float32 tensor's 16 bytes a vec4 against the codes' 4). DenseNet121's BatchNormalization-ReLU copies
before each 1x1 convolution and ResNet50's convolutions, the blocks' outputs included, are such writers. The buffer
stays bound, unread.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .plan import KernelCall, Plan
from .view import PassResult

# post-op operands read at the output's own place (or its zero-extended channels): a vec4 of the operand at a time
CODED_OPERANDS = ("tensor", "zero_extended")


def run(plan: Plan) -> PassResult:
    result = PassResult("codes_only")
    coded = _coded_tensors(plan)
    for call in plan.kernels:
        _read_operands_as_codes(call, plan, coded, result)
    read = {plan.storage(t) for call in plan.kernels for t in call.inputs.values()}
    read |= {plan.storage(t) for call in plan.kernels for p in call.postops if (t := p.tensor_operand) is not None}
    read |= {plan.storage(t) for t in (*plan.outputs, *plan.state_updates.values())}
    for call in plan.kernels:
        for arg, t in call.outputs.items():
            if f"{arg}_codes" in call.outputs and plan.storage(t) not in read:
                call.defines[f"{arg}_CODES_ONLY"] = 1
                result.applied.append(f"{call.label}: tensor {t}'s codes alone (integer convolutions read no values)")
    return result


def _coded_tensors(plan: Plan) -> dict[int, tuple[int, float, float]]:
    """Tensor -> (its codes' tensor, scale, zero point + 128), for the tensors every writer of which stores codes
    into the same tensor of codes (a tensor stored whole under its own name: ops/conv.py _input_codes)."""
    writers: dict[int, list[tuple[KernelCall, str]]] = {}
    for call in plan.kernels:
        for arg, t in call.outputs.items():
            if not arg.endswith("_codes"):
                writers.setdefault(t, []).append((call, arg))
    coded = {}
    for t, calls in writers.items():
        targets = {call.outputs.get(f"{arg}_codes", -1) for call, arg in calls}
        if len(targets) != 1 or -1 in targets or plan.storage(t) != t:  # not an alias, nor a placed part
            continue
        call, arg = calls[0]
        # QINV is 1 / scale of a float32 scale: its reciprocal rounds back to that float32
        scale = float(np.float32(1.0 / float(call.defines[f"{arg}_QINV"])))
        coded[t] = (targets.pop(), scale, float(call.defines[f"{arg}_QOFF"]))
    return coded


def _read_operands_as_codes(call: KernelCall, plan: Plan, coded: dict[int, tuple[int, float, float]],
                            result: PassResult) -> None:
    for k, p in enumerate(call.postops):
        t = p.tensor_operand
        if t is None or p.operand not in CODED_OPERANDS or p.codes_of >= 0 or t not in coded or \
                plan.storage(call.outputs.get("dst", -1)) == t:
            continue
        codes, scale, offset = coded[t]
        call.postops[k] = dataclasses.replace(p, source=codes, codes_of=t)
        call.defines.update({f"p{k}_CODES_SCALE": scale, f"p{k}_CODES_OFF": offset})
        call.constants = (*call.constants, f"p{k}_CODES_SCALE", f"p{k}_CODES_OFF")
        result.applied.append(f"{call.label}: post-op {k} reads tensor {t}'s codes")
