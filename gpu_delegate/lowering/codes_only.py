"""Where integer convolutions alone read an 8-bit tensor, its writers store only its codes, not its values.

An 8-bit convolution on integer dot products (ops/conv.py emit_conv_int8) reads its input's codes, a 32-bit word of
4 bytes a vec4, which the kernels writing the input store beside the values (codegen: ``t_write`` and ``t_store16``
with a ``t_codes`` partner). Where no kernel of the plan reads the values themselves (as its input, or as a post-op's
operand: a residual ADD), and they leave neither the partition nor a state update, the values are never read: the
writer's define ``t_CODES_ONLY`` drops their store, a fifth of the bytes it wrote (a float32 tensor's 16 bytes a
vec4 against the codes' 4). DenseNet121's BatchNormalization-ReLU copies before each 1x1 convolution and ResNet50's
convolutions inside a bottleneck are such writers. The buffer stays bound, unread.
"""

from __future__ import annotations

from .plan import Plan
from .view import PassResult


def run(plan: Plan) -> PassResult:
    result = PassResult("codes_only")
    read = {plan.storage(t) for call in plan.kernels for t in call.inputs.values()}
    read |= {plan.storage(t) for call in plan.kernels for p in call.postops if (t := p.tensor_operand) is not None}
    read |= {plan.storage(t) for t in (*plan.outputs, *plan.state_updates.values())}
    for call in plan.kernels:
        for arg, t in call.outputs.items():
            if f"{arg}_codes" in call.outputs and plan.storage(t) not in read:
                call.defines[f"{arg}_CODES_ONLY"] = 1
                result.applied.append(f"{call.label}: tensor {t}'s codes alone (integer convolutions read no values)")
    return result
