"""The plan: what a partition becomes on the GPU, independent of which API runs it.

A plan is a list of kernel calls over PHWC4 tensors and constant buffers. It is a pure function of the
partition, its input shapes and the delegate options, so it can be cached and serialized.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def bhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A tensor of rank <= 4 as BHWC, padding missing leading dimensions with 1."""
    if len(shape) > 4:
        raise ValueError(f"rank {len(shape)} > 4")
    s = (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)
    return s  # type: ignore[return-value]


def slices(channels: int) -> int:
    return (channels + 3) // 4


def vec4_count(shape: tuple[int, int, int, int]) -> int:
    b, h, w, c = shape
    return b * h * w * slices(c)


@dataclass
class PostOp:
    """One fused elementwise step applied to a kernel's result ``v`` (FLT4) before it is stored.

    ``code`` is dialect text assigning ``v``; it may read ``o`` (the other operand, fetched according to
    ``operand``: "tensor" = same index as the output, "channel" = per-slice constant, None = no operand).
    """

    code: str
    operand: str | None = None
    source: int | str | None = None  # tensor id ("tensor") or const key ("channel")
    node: int = -1


@dataclass
class KernelCall:
    kernel: str  # file stem in kernels/ (kernels/<kernel>.cl)
    node: int  # the graph node it came from
    inputs: dict[str, int]  # arg name -> plan tensor id
    outputs: dict[str, int]
    consts: dict[str, str]  # arg name -> const key
    defines: dict[str, int | float | str]
    grid: tuple[int, int, int]
    postops: list[PostOp] = field(default_factory=list)
    local_size: tuple[int, int, int] | None = None
    helpers: str = ""  # file-scope dialect text the lowering generated (e.g. an EXPR macro)

    @property
    def label(self) -> str:
        return f"{self.kernel}@{self.node}"


@dataclass
class Plan:
    tensors: dict[int, tuple[int, int, int, int]]  # plan tensor id -> BHWC
    consts: dict[str, np.ndarray]  # const key -> float32 array of shape (n, 4)
    kernels: list[KernelCall]
    inputs: list[int]  # graph tensor ids uploaded at the start of every invoke
    outputs: list[int]  # graph tensor ids downloaded at the end
    aliases: dict[int, int] = field(default_factory=dict)  # tensor -> tensor whose buffer it shares
    buffer_of: dict[int, int] = field(default_factory=dict)  # tensor -> buffer slot (memory plan)
    buffer_sizes: list[int] = field(default_factory=list)  # vec4 count per slot
    nodes: list[int] = field(default_factory=list)  # graph nodes this plan covers
    notes: list[str] = field(default_factory=list)  # what the passes did
    tuned: bool = False  # work-group sizes were timed on the device (runner.PlanRunner.tune)

    def storage(self, t: int) -> int:
        while t in self.aliases:
            t = self.aliases[t]
        return t

    @property
    def naive_bytes(self) -> int:
        return 16 * sum(vec4_count(s) for t, s in self.tensors.items() if t not in self.aliases)

    @property
    def planned_bytes(self) -> int:
        return 16 * sum(self.buffer_sizes)
