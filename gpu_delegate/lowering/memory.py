"""Memory plan: tensors whose lifetimes do not overlap share a buffer (greedy by size, as TFLite does)."""

from __future__ import annotations

from .plan import Plan, vec4_count


def run(plan: Plan) -> None:
    last = len(plan.kernels)
    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}

    def touch(t: int, k: int) -> None:
        t = plan.storage(t)
        first_use[t] = min(first_use.get(t, k), k)
        last_use[t] = max(last_use.get(t, k), k)

    for t in plan.inputs:
        touch(t, -1)
    for k, call in enumerate(plan.kernels):
        for t in (*call.inputs.values(), *call.outputs.values()):
            touch(t, k)
        for p in call.postops:
            if p.operand is not None and not isinstance(p.source, str):
                touch(p.source, k)
    for t in plan.outputs:
        touch(t, last)
    sizes = {t: vec4_count(plan.tensors[t]) for t in first_use}
    slots: list[list[tuple[int, int]]] = []
    plan.buffer_sizes = []
    plan.buffer_of = {}
    for t in sorted(first_use, key=lambda t: (-sizes[t], first_use[t])):
        lo, hi = first_use[t], last_use[t]
        for i, intervals in enumerate(slots):
            if all(hi < a or lo > b for a, b in intervals):
                intervals.append((lo, hi))
                plan.buffer_sizes[i] = max(plan.buffer_sizes[i], sizes[t])
                plan.buffer_of[t] = i
                break
        else:
            slots.append([(lo, hi)])
            plan.buffer_sizes.append(sizes[t])
            plan.buffer_of[t] = len(slots) - 1
    for t in plan.aliases:
        plan.buffer_of[t] = plan.buffer_of.get(plan.storage(t), -1)
