"""How preparation time grows with the graph: chains of N nodes, constructed and allocated on each path.

A chain of N nodes must prepare in time about linear in N (issue 18, item 7: 10,000 nodes took 131 s on cl, 1.1 s
on the CPU path). Each size runs in a fresh child process per round (no program or plan left over from another
size), rounds interleaved across sizes and paths, and the median is reported with the time per node; the
kernel caches on disk (PoCL's, Mesa's) stay as they are, so a warm compile is part of every number.

    python bench/prepare_scaling.py [--sizes 1000,2500,5000,10000] [--kinds copies,fused,tanh]
                                    [--paths cpu,cl,gl] [--rounds 3] [--json out.json]

Kinds: "copies" ADD(t, t), a kernel per node; "fused" ADD/MUL with tensor constants, fused into few kernels and
split at the device's buffer limit; "tanh" TANH, fused and split every 64 post-ops.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
import gpu_delegate as gd
from gpu_delegate.tflite import ModelBuilder

path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
shape = [1, 4, 4, 8]
mb = ModelBuilder()
cur = mb.input("x", shape)
for k in range(n):
    out = mb.tensor(f"t{k}", shape)
    if kind == "copies":
        mb.op("ADD", [cur, cur], [out])
    elif kind == "fused":
        mb.op("MUL" if k % 2 else "ADD", [cur, mb.const(f"c{k}", np.full(shape, 0.5, np.float32))], [out])
    else:
        mb.op("TANH", [cur], [out])
    cur = out
mb.output(cur)
content = mb.build()
t0 = time.perf_counter()
delegates = None if path == "cpu" else [gd.GpuDelegate(backend=path)]
it = gd.Interpreter(model_content=content, experimental_delegates=delegates)
it.allocate_tensors()
t1 = time.perf_counter()
it.set_tensor(it.get_input_details()[0]["index"], np.zeros(shape, np.float32))
it.invoke()
t2 = time.perf_counter()
print(json.dumps({"prepare_s": t1 - t0, "first_invoke_s": t2 - t1,
                  "on_path": sum(o["backend"] == path for o in it.get_ops_details())}))
"""


def one(path: str, kind: str, n: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, path, kind, str(n)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{path} {kind} {n}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,2500,5000,10000")
    ap.add_argument("--kinds", default="copies,fused,tanh")
    ap.add_argument("--paths", default="cpu,cl,gl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for r in range(args.rounds):
        for kind in args.kinds.split(","):
            for path in args.paths.split(","):
                for n in sizes:
                    runs.setdefault((path, kind, n), []).append(one(path, kind, n))
        print(f"round {r + 1} of {args.rounds} done", flush=True)
    rows = []
    print("| path | chain | nodes | prepare (median) | per node | first invoke | nodes on the path |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (path, kind, n), results in runs.items():
        prepare = statistics.median(r["prepare_s"] for r in results)
        invoke = statistics.median(r["first_invoke_s"] for r in results)
        rows.append({"path": path, "kind": kind, "nodes": n, "prepare_s": prepare, "first_invoke_s": invoke,
                     "on_path": results[0]["on_path"]})
        print(f"| {path} | {kind} | {n} | {prepare:.2f} s | {1e3 * prepare / n:.3f} ms | {invoke:.2f} s | "
              f"{results[0]['on_path']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
