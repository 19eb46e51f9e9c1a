"""Memory plan: tensors whose lifetimes do not overlap share a buffer (greedy by size, as TFLite does)."""

from __future__ import annotations

from bisect import bisect_left

from ..phwc4 import vec4_count
from .plan import Plan
from .view import PassResult


def run(plan: Plan) -> PassResult:
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
            if p.tensor_operand is not None:
                touch(p.tensor_operand, k)
    for t in (*plan.outputs, *plan.dense_copies.values()):
        touch(t, last)
    sizes = {t: vec4_count(plan.tensors[t]) for t in first_use}
    slots: list[_Slot] = []
    plan.buffer_sizes = []
    plan.buffer_fp32 = []
    plan.buffer_of = {}
    for t in sorted(first_use, key=lambda t: (-sizes[t], first_use[t])):
        lo, hi = first_use[t], last_use[t]
        fp32 = t in plan.fp32_tensors  # a slot holds tensors of one storage type
        for i, slot in enumerate(slots):
            if plan.buffer_fp32[i] == fp32 and slot.take(lo, hi):
                plan.buffer_sizes[i] = max(plan.buffer_sizes[i], sizes[t])
                plan.buffer_of[t] = i
                break
        else:
            slot = _Slot()
            slot.take(lo, hi)
            slots.append(slot)
            plan.buffer_sizes.append(sizes[t])
            plan.buffer_fp32.append(fp32)
            plan.buffer_of[t] = len(slots) - 1
    for t in (*plan.aliases, *plan.placed):
        plan.buffer_of[t] = plan.buffer_of.get(plan.storage(t), -1)
    saved = 1 - plan.planned_bytes / plan.naive_bytes if plan.naive_bytes else 0.0
    return PassResult("memory", applied=[f"{len(first_use)} tensors in {len(slots)} buffers ({saved:.0%} less memory)"])


class _Slot:
    """The lifetimes (kernel index intervals, inclusive) of the tensors sharing one buffer: disjoint, kept sorted,
    so whether another fits is two comparisons after a binary search, not a scan (a chain of thousands of kernels
    puts thousands of tensors in each of a few buffers)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def take(self, lo: int, hi: int) -> bool:
        """Add [lo, hi] if it overlaps none of the intervals; whether it was added."""
        k = bisect_left(self.starts, lo)
        if (k > 0 and self.ends[k - 1] >= lo) or (k < len(self.starts) and self.starts[k] <= hi):
            return False
        self.starts.insert(k, lo)
        self.ends.insert(k, hi)
        return True
