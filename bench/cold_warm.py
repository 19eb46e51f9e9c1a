"""First start of the GPU delegate: construction + allocate_tensors + first invoke, each in a fresh process.

    cold          PoCL's kernel cache and Mesa's shader cache empty (fresh folders for POCL_CACHE_DIR,
                  MESA_SHADER_CACHE_DIR and XDG_CACHE_HOME), no serialization dir; numba's cache warm (its
                  default place, warmed by one untimed process first: no GPU model here runs numba anyway)
    cold + dir    the same, with a fresh serialization dir (the README's example), which the start fills
    warm          a later start with that serialization dir and the driver caches that start left (as on a
                  user's machine)
    warm, dir only  the serialization dir alone, the driver caches empty again (PoCL's programs live in its own
                  kernel cache, not in the dir: this is what a warm start costs where that cache is gone)
    cpu           (--backends cpu) no delegate: every node on the numba kernels. cold: numba's cache empty (as
                  after install); warm: the cache the cold start left. The dir columns do not apply.
Each cell is the median of --repeats processes (each cold one with its own empty caches); the machine is
shared, so the load average is printed next to the numbers, and the cold start's CPU time (the process's, every
thread's: the drivers compile on threads of their own), which load from other processes changes far less than the
wall time; and the CPU time of every process of the start (a compile worker's, the linker's that PoCL runs).
Also, in the cold processes: the first invoke against the median of the five right after it, and
against invokes that follow a pause as it does (on this host an invoke after 0.3 s idle takes 15-20% longer than
one right after another: the drivers' threads sleep).

With --baseline PACKAGE (another copy of the package importable under that name, say the fork point's
gpu_delegate renamed gpu_delegate_old on PYTHONPATH), every cell is measured for both, their processes
interleaved so that the load of a shared machine falls on both alike.

    python bench/cold_warm.py [--models mobilenet/mobilenet_v2_224_fp32,real/face_detection_short_range]
                              [--backends cl,gl,cpu] [--repeats 3] [--baseline gpu_delegate_old]
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
DEFAULT = ["mobilenet/mobilenet_v2_224_fp32", "real/face_detection_short_range"]

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import importlib
import numpy as np
gd = importlib.import_module(sys.argv[4])
t1 = time.perf_counter()
c1 = time.process_time()
path, backend, cache_dir = sys.argv[1:4]
d = None if backend == "cpu" else gd.GpuDelegate(backend=backend, serialization_dir=cache_dir or None,
                                                 model_token="bench")
it = gd.Interpreter(model_path=path, experimental_delegates=[d] if d else None)
it.allocate_tensors()
t2 = time.perf_counter()
for det in it.get_input_details():
    it.set_tensor(det["index"], np.zeros(det["shape"], det["dtype"]))
it.invoke()
t3 = time.perf_counter()
c3 = time.process_time()
children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the compile worker, the drivers' linker runs
later, paused = [], []
for _ in range(5):
    t = time.perf_counter()
    it.invoke()
    later.append(time.perf_counter() - t)
for _ in range(3):
    time.sleep(0.3)  # as long as the gap between allocate_tensors and the first invoke, or longer
    t = time.perf_counter()
    it.invoke()
    paused.append(time.perf_counter() - t)
on_gpu = sum(o["backend"] == backend for o in it.get_ops_details()) if d else 0
print(json.dumps({"import_s": t1 - t0, "start_s": t3 - t1, "start_cpu_s": c3 - c1,
                  "children_cpu_s": children.ru_utime + children.ru_stime, "prepare_s": t2 - t1,
                  "first_s": t3 - t2,
                  "second_s": sorted(later)[2], "paused_s": sorted(paused)[1],
                  "hits": d.cache.hits if d and d.cache else 0, "nodes_on_gpu": on_gpu,
                  "nodes": len(it.get_ops_details())}))
"""


def run_child(model: Path, backend: str, drivers: Path, serialized: Path | None, package: str = "gpu_delegate"
              ) -> dict:
    env = dict(os.environ)
    # Python's bytecode cache as after an install (the untimed first process writes it): a compile worker is a
    # Python process of its own, whose start would otherwise include compiling the package
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    folders = {"POCL_CACHE_DIR": "pocl", "MESA_SHADER_CACHE_DIR": "mesa", "PYOPENCL_CACHE_DIR": "pyopencl",
               "XDG_CACHE_HOME": "xdg"}
    if backend == "cpu":  # the CPU path's first start is numba's: its cache is the driver cache here
        folders["NUMBA_CACHE_DIR"] = "numba"
    for variable, folder in folders.items():
        (drivers / folder).mkdir(parents=True, exist_ok=True)  # Mesa makes no parent folders: no cache without
        env[variable] = str(drivers / folder)
    out = subprocess.run([sys.executable, "-c", CHILD, str(model), backend, str(serialized or ""), package],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(runs: list[dict], key: str) -> float | None:
    return statistics.median(r[key] for r in runs) if runs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--backends", default="cl,gl")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per cell (median)")
    ap.add_argument("--output_json", type=Path)
    ap.add_argument("--baseline", default="", help="another package to measure alongside (interleaved)")
    args = ap.parse_args()
    if not MODELS.is_dir():
        sys.exit(f"the shared models folder {MODELS} is absent")
    packages = ["gpu_delegate", *([args.baseline] if args.baseline else [])]
    rows = []
    for name in args.models.split(","):
        model = MODELS / f"{name}.tflite"
        for backend in args.backends.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                runs: dict[str, dict[str, list[dict]]] = {p: {"cold": [], "dir": [], "warm": [], "dir_only": []}
                                                          for p in packages}
                load = os.getloadavg()[0]
                cpu = backend == "cpu"
                if not cpu:
                    for p in packages:
                        run_child(model, backend, root / p / "numba-warm-up", None, p)  # untimed: numba's own cache
                for k in range(args.repeats):
                    for p in packages:
                        runs[p]["cold"].append(run_child(model, backend, root / p / f"cold{k}", None, p))
                        if not cpu:
                            runs[p]["dir"].append(run_child(model, backend, root / p / f"dir{k}",
                                                            root / p / f"serialized{k}", p))
                for k in range(args.repeats):
                    for p in packages:
                        if cpu:
                            runs[p]["warm"].append(run_child(model, backend, root / p / "cold0", None, p))
                            continue
                        serialized = root / p / "serialized0"
                        runs[p]["warm"].append(run_child(model, backend, root / p / "dir0", serialized, p))
                        runs[p]["dir_only"].append(run_child(model, backend, root / p / f"empty{k}", serialized, p))
                load = (load + os.getloadavg()[0]) / 2
            for p in packages:
                r = runs[p]
                row = {"package": p, "model": name.split("/")[-1], "backend": backend,
                       "gpu": f"{r['cold'][0]['nodes_on_gpu']}/{r['cold'][0]['nodes']}",
                       "cold_s": median(r["cold"], "start_s"), "cold_cpu_s": median(r["cold"], "start_cpu_s"),
                       "cold_cpu_all_s": statistics.median(x["start_cpu_s"] + x["children_cpu_s"] for x in r["cold"]),
                       "dir_s": median(r["dir"], "start_s"),
                       "warm_s": median(r["warm"], "start_s"), "dir_only_s": median(r["dir_only"], "start_s"),
                       "first_over_second": statistics.median(x["first_s"] / x["second_s"] for x in r["cold"]),
                       "first_over_paused": statistics.median(x["first_s"] / x["paused_s"] for x in r["cold"]),
                       "import_s": median(r["cold"], "import_s"), "warm_hits": r["warm"][0]["hits"], "load": load,
                       "runs": r}
                rows.append(row)
                print({k: v for k, v in row.items() if k != "runs"}, file=sys.stderr, flush=True)
    print(f"medians of {args.repeats} fresh processes per cell; seconds from construction to the first result\n")
    print("| model | backend | package | GPU nodes | cold | cold CPU | cold CPU, all processes | cold + dir | "
          "dir / cold | warm | warm, dir only | first / next invokes | first / paused invokes | import | load avg |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cell(seconds: float | None) -> str:
        return "–" if seconds is None else f"{seconds:.2f}"

    for r in rows:
        print(f"| {r['model']} | {r['backend']} | {r['package']} | {r['gpu']} | {r['cold_s']:.2f} | "
              f"{r['cold_cpu_s']:.2f} | {r['cold_cpu_all_s']:.2f} | "
              f"{cell(r['dir_s'])} | {cell(r['dir_s'] and r['dir_s'] / r['cold_s'])} | {r['warm_s']:.2f} | "
              f"{cell(r['dir_only_s'])} | "
              f"{r['first_over_second']:.2f} | {r['first_over_paused']:.2f} | {r['import_s']:.2f} | {r['load']:.1f} |")
    if args.output_json:
        args.output_json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
