"""The plan: what a partition becomes on the GPU, independent of which API runs it.

A plan is a list of kernel calls over PHWC4 tensors and constant buffers. It is a pure function of the
partition, its input shapes and the delegate options, so it can be cached and serialized.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..phwc4 import BHWC, slices, vec4_count

OperandMode = Literal["tensor", "zero_extended", "channel", "scalar", "table", "kept"]


@dataclass(frozen=True)
class CodeTable:
    """An elementwise unary op on an 8-bit quantized tensor as TFLite computes it: one output per input code."""

    values: np.ndarray  # float32: the dequantized output of each input code, the lowest code first
    scale: float  # the input's grid
    zero_point: int
    code_min: int  # the lowest code of the input's type (-128 for int8, 0 for uint8)


@dataclass(frozen=True)
class ScoreRounding:
    """An 8-bit chain's roundings in a product that normalizes its scores: the product onto its grid (``product``:
    scale, lowest and highest code less the zero point; a multiply by the reciprocal, as a sum of products'
    fake-quant step), looked up in ``scores`` (that code's score, the MUL by the scale and its rounding included),
    and the probabilities onto the SOFTMAX's output grid ``out``."""

    product: tuple[float, float, float]
    scores: CodeTable
    out: tuple[float, float, float]


@dataclass(frozen=True)
class SoftmaxAfter:
    """A product's scores normalized in its own kernel (lowering/fuse_matmul_softmax.py): SOFTMAX(scores * scale,
    beta); in an 8-bit chain with its ``rounding`` (the scale is then 1: the scores' table holds it)."""

    scale: float
    beta: float
    rounding: ScoreRounding | None = None


@dataclass
class PostOp:
    """One fused elementwise step applied to a kernel's result ``v`` (FLT4) before it is stored.

    kind "expr": ``v = expr``, a dialect expression over FLT4 ``a`` (the value flowing through) and, when the step
    has an operand, ``b`` (the operand; ``operand_first`` swaps the two: the operand was the op's first input).
    The operand is read by ``operand``: "tensor" = the output's own index in tensor ``source``, "channel" = one
    vec4 per slice of ``source`` (a const, or a tensor of shape [1, 1, 1, C]), "scalar" = const ``source``'s single
    row, "zero_extended" = the output's own batch, row, column and channel in tensor ``source``, which has the
    output's B, H, W and fewer channels: the channels beyond its own read as 0.
    kind "fake_quant": quantize then dequantize on the grid of ``scale`` with integer bounds ``qmin``..``qmax``
    (relative to the zero point): the step a quantized op's output takes so that float follows fixed point. It
    divides by the scale (``exact``: a requantization lands on the halves between codes, and only the correctly
    rounded quotient rounds them as TFLite does) or, where the value is a sum of products (``exact`` False: a
    convolution's result lands on a half by chance alone), multiplies by the reciprocal: the division cost
    MobileNetV2 int8's 1x1 and depthwise convolutions 5-13% of their time on PoCL.
    kind "lut": the value's code on the grid of ``scale`` (bounds ``qmin``..``qmax`` as for "fake_quant") plus
    ``offset`` indexes const ``source`` (operand "table", one float per code): an 8-bit op whose TFLite kernel is
    a table or fixed-point arithmetic gives exactly TFLite's answer, where its float formula could be a step off.
    Its code is rounded as a fake-quant step's (``exact``: the step the lookup replaces).
    kind "keep": the value as it stands is kept under slot ``slot``; a later "expr" step of operand "kept" and the
    same slot reads it as its operand (a node that reads both a tensor and a function of it, as swish's MUL reads
    x and LOGISTIC(x), runs in the kernel producing x, which is then never stored).
    ``codes_of`` (operands "tensor" and "zero_extended"): ``source`` is the scratch tensor of 8-bit tensor
    ``codes_of``'s codes, a word a vec4 (ops/conv.py _input_codes), read in ``codes_of``'s geometry and decoded
    (lowering/codes_only.py): a residual ADD reads a quarter of the bytes, and its writers need not store values.
    The backends' codegen renders them all (backends/codegen.py, render_postops).
    """

    kind: Literal["expr", "fake_quant", "lut", "keep"]
    expr: str = ""
    operand: OperandMode | None = None
    source: int | str | None = None  # tensor id ("tensor", "zero_extended") or const key ("channel", "scalar")
    operand_first: bool = False
    scale: float = 0.0
    qmin: float = 0.0
    qmax: float = 0.0
    offset: int = 0
    slot: int = -1  # "keep": the slot it fills; "expr" of operand "kept": the slot it reads
    node: int = -1
    exact: bool = True  # "fake_quant" and "lut": divide by the scale (True) or multiply by its reciprocal
    codes_of: int = -1  # the 8-bit tensor whose codes ``source`` holds (decoded on read), or -1

    def __post_init__(self) -> None:
        if self.kind not in ("expr", "fake_quant", "lut", "keep"):
            raise ValueError(f"post-op kind {self.kind!r} is not 'expr', 'fake_quant', 'lut' or 'keep'")
        if (self.kind == "keep" or self.operand == "kept") != (self.slot >= 0) or \
                (self.operand == "kept" and self.kind != "expr"):
            raise ValueError("a 'keep' post-op fills a slot, an 'expr' of operand 'kept' reads one; no other has one")
        if (self.operand is None or self.operand == "kept") != (self.source is None):
            raise ValueError("a post-op has both an operand mode and a source, or neither")
        if (self.kind == "lut") != (self.operand == "table" and isinstance(self.source, str)):
            raise ValueError("a 'lut' post-op, and it alone, reads a constant table")

    @property
    def tensor_operand(self) -> int | None:
        """The tensor of the plan the operand is read from; None for a constant operand or none."""
        return self.source if isinstance(self.source, int) else None


@dataclass
class KernelCall:
    kernel: str  # kernels/dialect/<kernel>.dialect
    node: int  # the graph node it came from
    inputs: dict[str, int]  # arg name -> plan tensor id
    outputs: dict[str, int]
    consts: dict[str, str]  # arg name -> const key
    defines: dict[str, int | float | str]
    grid: tuple[int, int, int]
    postops: list[PostOp] = field(default_factory=list)
    local_size: tuple[int, int, int] | None = None
    helpers: str = ""  # file-scope dialect text the lowering generated (e.g. an EXPR macro)
    # language -> a kernel written in that API's own language that runs instead on that API, with the same
    # arguments, defines and grid: {"opencl": "conv2d"} runs kernels/opencl/conv2d.cl on OpenCL
    variants: dict[str, str] = field(default_factory=dict)
    # graph nodes whose work this call took over besides its own and its post-ops' (a MUL by a per-channel gate
    # read as the convolution's input scale: lowering/fuse_channel_scale.py)
    fused_nodes: tuple[int, ...] = ()
    # defines that are constants of the arithmetic, which no preprocessor test reads (an 8-bit average pool's
    # input grid): an API may take them at run time, so that layers differing in them alone share a program
    # (KernelSpec.constants)
    constants: tuple[str, ...] = ()

    def reads(self, t: int) -> bool:
        """Whether this call reads plan tensor ``t``: as an input, or as a post-op's operand."""
        return t in self.inputs.values() or any(p.tensor_operand == t for p in self.postops)

    @property
    def nodes(self) -> tuple[int, ...]:
        """Every graph node this call computes: its own, its post-ops', and those fused into it otherwise."""
        return tuple(dict.fromkeys((self.node, *(p.node for p in self.postops if p.node >= 0), *self.fused_nodes)))

    def source(self, language: str | None) -> tuple[str, str]:
        """(language, kernel name) of the file this call runs on a backend of ``language`` ("opencl", "glsl")."""
        if language is not None and language in self.variants:
            return language, self.variants[language]
        return "dialect", self.kernel

    @property
    def label(self) -> str:
        return f"{self.kernel}@{self.node}"


@dataclass
class Plan:
    tensors: dict[int, BHWC]  # plan tensor id -> BHWC
    consts: dict[str, np.ndarray]  # const key -> float32 array of shape (n, 4)
    kernels: list[KernelCall]
    inputs: list[int]  # graph tensor ids uploaded at the start of every invoke
    outputs: list[int]  # graph tensor ids downloaded at the end
    aliases: dict[int, int] = field(default_factory=dict)  # tensor -> tensor whose buffer it shares
    # tensor -> (tensor of the same B, H, W of which it is a run of slices, its first slice there): a part of a
    # concatenation its producer writes in place (lowering/place_concat.py)
    placed: dict[int, tuple[int, int]] = field(default_factory=dict)
    buffer_of: dict[int, int] = field(default_factory=dict)  # tensor -> buffer slot (memory plan)
    buffer_sizes: list[int] = field(default_factory=list)  # vec4 count per slot
    nodes: list[int] = field(default_factory=list)  # graph nodes this plan covers
    notes: list[str] = field(default_factory=list)  # what the passes did
    tuned: bool = False  # work-group sizes were timed on the device (runner.PlanRunner.tune)
    # stored as float32 whatever the delegate's precision (int32 values, exact to 2**24; fp16 is exact to 2048)
    fp32_tensors: set[int] = field(default_factory=set)
    fp32_consts: set[str] = field(default_factory=set)
    # stored as float16 whatever the delegate's precision: weights a kernel streams, each value a half exactly
    # (lowering/half_weights.py)
    half_consts: set[str] = field(default_factory=set)
    buffer_fp32: list[bool] = field(default_factory=list)  # per buffer slot (memory plan)
    # variable (graph) tensor -> plan tensor holding its new value after an invoke; those are in ``outputs``
    state_updates: dict[int, int] = field(default_factory=dict)
    # inputs and outputs stored in the dense row-major BHWC order, float32, not in PHWC4 (lowering/dense_inputs.py,
    # dense_outputs.py)
    dense: set[int] = field(default_factory=set)
    # output -> the dense float32 copy of it that its writers store besides PHWC4, which the host reads
    # (lowering/dense_copies.py)
    dense_copies: dict[int, int] = field(default_factory=dict)

    def stored_dense(self, t: int) -> bool:
        """Whether plan tensor ``t`` is a plain buffer of float32 values in the dense order: a dense input or output,
        or an output's dense copy."""
        return t in self.dense or t in self.dense_copies.values()

    def dense_source(self, t: int) -> int | None:
        """The plan tensor the host reads output ``t`` from in the dense order: its dense copy, ``t`` itself where it
        is stored dense, or None where it is read from PHWC4."""
        return self.dense_copies.get(t, t if t in self.dense else None)

    def tensor_precision(self, t: int, precision: str) -> str:
        """The storage of plan tensor ``t`` when the delegate stores ``precision``."""
        return "fp32" if self.storage(t) in self.fp32_tensors else precision

    def const_precision(self, key: str, precision: str) -> str:
        """The storage of constant ``key`` when the delegate stores ``precision``."""
        return "fp32" if key in self.fp32_consts else "fp16" if key in self.half_consts else precision

    def storage(self, t: int) -> int:
        """The tensor that owns t's buffer (past dropped reshapes and placed parts)."""
        while t in self.aliases or t in self.placed:
            t = self.aliases[t] if t in self.aliases else self.placed[t][0]
        return t

    def placement(self, t: int) -> tuple[int, int] | None:
        """(first slice, slices) of placed tensor t's place in the tensor its buffer holds (codegen.Arg.placed);
        None where t is not placed. A placed tensor is no alias, nor the source of one (place_concat.py)."""
        if t not in self.placed:
            return None
        first = 0
        while t in self.placed:
            t, start = self.placed[t]
            first += start
        return first, slices(self.tensors[t][3])

    @property
    def naive_bytes(self) -> int:
        return 16 * sum(vec4_count(s) for t, s in self.tensors.items()
                        if t not in self.aliases and t not in self.placed)

    @property
    def planned_bytes(self) -> int:
        return 16 * sum(self.buffer_sizes)
