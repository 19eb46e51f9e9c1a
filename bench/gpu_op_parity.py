"""Where each op of issue 16 runs (GPU op parity with TFLite's GPU delegate): one tiny model per op
(tests/parity_models.py), on the cl and gl delegates, fp32 storage. Prints a markdown table: op | cl | gl |
why a node stayed on the CPU (``Interpreter.cpu_reasons()``), or why the model was refused.

    python bench/gpu_op_parity.py [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpu_delegate as gd  # noqa: E402
from tests.parity_models import MODELS  # noqa: E402


def where(content: bytes, backend: str) -> tuple[str, str]:
    """("gpu" | "cpu" | "partly" | "refused", the reasons)."""
    try:
        it = gd.Interpreter(model_content=content, experimental_delegates=[gd.GpuDelegate(backend=backend)])
        it.allocate_tensors()
    except (gd.ModelError, gd.DelegateError) as e:
        return "refused", str(e).splitlines()[0]
    backends = {d["backend"] for d in it.get_ops_details()}
    reasons = sorted(set(it.cpu_reasons().values()))
    if backends == {backend}:
        return "gpu", ""
    return ("cpu" if backends == {"cpu"} else "partly"), "; ".join(reasons)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    print("| op | cl | gl | reason if not on the GPU |")
    print("|---|---|---|---|")
    for name, make in MODELS.items():
        if args.only not in name:
            continue
        content, _ = make()
        cl, why_cl = where(content, "cl")
        gl, why_gl = where(content, "gl")
        why = why_cl if why_cl == why_gl or not why_gl else f"cl: {why_cl}; gl: {why_gl}"
        print(f"| {name} | {cl} | {gl} | {why[:160]} |", flush=True)


if __name__ == "__main__":
    main()
