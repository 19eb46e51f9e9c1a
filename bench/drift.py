"""Where does a model's output drift from LiteRT's? Every node's output against LiteRT's (all tensors preserved), and
LiteRT's own kernels against each other, on the same random inputs.

    python bench/drift.py MODEL.tflite [--top 12]

Prints, per output, the error relative to max|ref| of ours (numba CPU kernels) and of LiteRT's XNNPACK and
builtin kernels, all against LiteRT's reference kernels (BUILTIN_REF); then the nodes that amplify the error most
(error of the output / error of the inputs). A drift that LiteRT's own kernel sets show against each other is the
model's conditioning, not a kernel bug.
"""

from __future__ import annotations

import argparse

import numpy as np

import gpu_delegate as gd
from gpu_delegate import tools


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b))) / (1e-30 + float(np.max(np.abs(b)))) if b.size else 0.0


def main() -> int:
    from ai_edge_litert.interpreter import Interpreter as LiteRT
    from ai_edge_litert.interpreter import OpResolverType

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    kinds = {"xnnpack": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
             "ref": OpResolverType.BUILTIN_REF}
    outs: dict[str, list[np.ndarray]] = {}
    xs: list[np.ndarray] = []
    preserved = None
    for name, kind in kinds.items():
        it = LiteRT(model_path=args.model, experimental_op_resolver_type=kind,
                    experimental_preserve_all_tensors=name == "xnnpack")
        it.allocate_tensors()
        xs = xs or [rng.random(d["shape"]).astype(d["dtype"]) for d in it.get_input_details()]
        tools.set_inputs(it, xs)
        it.invoke()
        outs[name] = tools.get_outputs(it)
        preserved = preserved or it
    ours = gd.Interpreter(model_path=args.model)
    ours.allocate_tensors()
    tools.set_inputs(ours, xs)
    ours.invoke()
    outs["ours"] = tools.get_outputs(ours)
    for name in ("ours", "xnnpack", "builtin"):
        print(f"{name:>8} vs reference kernels, per output:", " ".join(f"{rel(a, b):.1e}"
                                                                      for a, b in zip(outs[name], outs["ref"])))
    assert preserved is not None
    graph = ours.graph
    folded = {t for n in graph.nodes if n.op == "DEQUANTIZE" for t in n.outputs}  # LiteRT keeps no value for these
    rows = []
    for node in graph.nodes:
        if node.op == "DEQUANTIZE":
            continue
        for t in node.outputs:
            mine, theirs = ours.get_tensor(t), preserved.get_tensor(t)
            if theirs.dtype.kind != "f" or mine.shape != theirs.shape:
                continue
            err_in = max([rel(ours.get_tensor(i), preserved.get_tensor(i)) for i in node.inputs
                          if i >= 0 and graph.tensors[i].data is None and i not in folded
                          and preserved.get_tensor(i).dtype.kind == "f"] or [0.0])
            err = rel(mine, theirs)
            rows.append((err / max(err_in, 1e-7), err, err_in, node))
    rows.sort(key=lambda r: -r[0])
    print("\nnodes that amplify the error most (vs LiteRT XNNPACK, error relative to max|ref|):")
    print(tools.markdown_table(["node", "op", "output error", "input error", "amplification"],
                               [[r[3].index, r[3].op, f"{r[1]:.2e}", f"{r[2]:.2e}", f"{r[0]:.1f}"]
                                for r in rows[:args.top]]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
