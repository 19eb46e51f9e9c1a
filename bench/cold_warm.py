"""Cold vs warm start of the GPU delegate: construction + allocate_tensors + first invoke, each in a fresh
process. Cold: every cache empty (our serialization dir, PoCL's kernel cache, pyopencl's, Mesa's shader cache,
numba's). Warm: the same caches as the cold run left them, so the serialization cache is read.

    python bench/cold_warm.py [--models mobilenet_v2_224_fp32,face_detection_short_range] [--backends cl,gl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"
DEFAULT = ["mobilenet/mobilenet_v2_224_fp32", "real/face_detection_short_range", "real/iris_landmark",
           "real/sine_float"]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import gpu_delegate as gd
t1 = time.perf_counter()
path, backend, cache_dir = sys.argv[1:4]
d = gd.GpuDelegate(backend=backend, serialization_dir=cache_dir, model_token="bench")
it = gd.Interpreter(model_path=path, experimental_delegates=[d])
it.allocate_tensors()
for det in it.get_input_details():
    it.set_tensor(det["index"], np.zeros(det["shape"], det["dtype"]))
it.invoke()
t2 = time.perf_counter()
on_gpu = sum(o["backend"] == backend for o in it.get_ops_details())
print(json.dumps({"import_s": t1 - t0, "start_s": t2 - t1, "hits": d.cache.hits, "nodes_on_gpu": on_gpu,
                  "nodes": len(it.get_ops_details())}))
"""


def run_child(model: Path, backend: str, caches: Path) -> dict:
    env = dict(os.environ)
    env.update(POCL_CACHE_DIR=str(caches / "pocl"), MESA_SHADER_CACHE_DIR=str(caches / "mesa"),
               NUMBA_CACHE_DIR=str(caches / "numba"), PYOPENCL_CACHE_DIR=str(caches / "pyopencl"),
               XDG_CACHE_HOME=str(caches / "xdg"))
    out = subprocess.run([sys.executable, "-c", CHILD, str(model), backend, str(caches / "serialized")],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--backends", default="cl,gl")
    ap.add_argument("--repeats", type=int, default=3, help="warm starts per model (median)")
    args = ap.parse_args()
    if not MODELS.is_dir():
        sys.exit(f"the shared models folder {MODELS} is absent")
    rows = []
    for name in args.models.split(","):
        model = MODELS / f"{name}.tflite"
        for backend in args.backends.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                caches = Path(tmp)
                cold = run_child(model, backend, caches)
                warm = [run_child(model, backend, caches) for _ in range(args.repeats)]
            warm_s = statistics.median(w["start_s"] for w in warm)
            rows.append((name.split("/")[-1], backend, cold["nodes_on_gpu"], cold["nodes"], cold["start_s"], warm_s,
                         warm[0]["hits"]))
            print(f"{rows[-1]}", file=sys.stderr)
    print("| model | backend | nodes on GPU | cold start s | warm start s | warm / cold | cache hits |")
    print("|---|---|---|---|---|---|---|")
    for m, b, g, n, c, w, h in rows:
        print(f"| {m} | {b} | {g}/{n} | {c:.2f} | {w:.3f} | {100 * w / c:.1f}% | {h} |")


if __name__ == "__main__":
    main()
