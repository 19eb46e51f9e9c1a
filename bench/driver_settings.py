"""A driver setting (an environment variable such as GALLIVM_PERF or POCL_WORK_GROUP_METHOD) side by side with
the driver's default: its cost in kernel speed and what it saves at a cold first start.

Two worker processes per model and backend, one with the setting and one without, each with its own empty driver
caches (PoCL's kernel cache, Mesa's shader cache), prepare the model (timed: a cold start) and then run invokes in
interleaved rounds, A B B A ..., so that the load of a shared machine falls on both alike. Reported: each side's
preparation, the median invoke and the median over rounds of the paired ratio B / A (with its quartiles), the
load average beside. A setting is worth keeping only where the ratio stays within the noise (the quartiles
straddle 1.0).

    python bench/driver_settings.py GALLIVM_PERF=nopt [--backends gl] [--models ...] [--rounds 15] [--runs 5]
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

WORKER = r"""
import json, sys, time
import numpy as np
import gpu_delegate as gd
path, backend = sys.argv[1:3]
t0 = time.perf_counter()
it = gd.Interpreter(model_path=path, experimental_delegates=[gd.GpuDelegate(backend=backend)])
it.allocate_tensors()
for det in it.get_input_details():
    it.set_tensor(det["index"], np.random.default_rng(0).standard_normal(det["shape"]).astype(det["dtype"]))
it.invoke()
print(json.dumps({"start_s": time.perf_counter() - t0}), flush=True)
it.invoke()
for line in sys.stdin:
    times = []
    for _ in range(int(line)):
        t = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - t)
    print(json.dumps({"times": times}), flush=True)
"""


def start_worker(model: Path, backend: str, caches: Path, setting: dict[str, str]) -> subprocess.Popen[str]:
    env = dict(os.environ, **setting)
    folders = {"POCL_CACHE_DIR": "pocl", "MESA_SHADER_CACHE_DIR": "mesa", "XDG_CACHE_HOME": "xdg"}
    for variable, folder in folders.items():
        (caches / folder).mkdir(parents=True, exist_ok=True)
        env[variable] = str(caches / folder)
    return subprocess.Popen([sys.executable, "-c", WORKER, str(model), backend], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def ask(worker: subprocess.Popen[str], runs: int | None = None) -> dict:
    assert worker.stdin is not None and worker.stdout is not None
    if runs is not None:
        worker.stdin.write(f"{runs}\n")
        worker.stdin.flush()
    line = worker.stdout.readline()
    if not line:
        raise RuntimeError(f"a worker ended (exit status {worker.wait()})")
    return json.loads(line)


def compare(model: Path, backend: str, setting: dict[str, str], rounds: int, runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        load = os.getloadavg()[0]
        workers = {}
        starts = {}
        for side, env in (("A", {}), ("B", setting)):  # one after the other: each cold start has the host to itself
            workers[side] = start_worker(model, backend, Path(tmp) / side, env)
            starts[side] = ask(workers[side])["start_s"]
        medians: dict[str, list[float]] = {"A": [], "B": []}
        for r in range(rounds):
            for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                medians[side].append(statistics.median(ask(workers[side], runs)["times"]))
        for w in workers.values():
            assert w.stdin is not None
            w.stdin.close()
            w.wait()
        load = (load + os.getloadavg()[0]) / 2
    ratios = sorted(b / a for a, b in zip(medians["A"], medians["B"]))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"model": model.stem, "backend": backend, "start_a_s": starts["A"], "start_b_s": starts["B"],
            "invoke_a_ms": 1e3 * statistics.median(medians["A"]), "invoke_b_ms": 1e3 * statistics.median(medians["B"]),
            "ratio": statistics.median(ratios), "ratio_q1": quartiles[0], "ratio_q3": quartiles[2], "load": load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting", nargs="+", help="VARIABLE=VALUE, for side B")
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--backends", default="cl,gl")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--runs", type=int, default=5, help="invokes per round and side")
    ap.add_argument("--output_json", type=Path)
    args = ap.parse_args()
    setting = dict(s.split("=", 1) for s in args.setting)
    rows = []
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            row = compare(MODELS / f"{name}.tflite", backend, setting, args.rounds, args.runs)
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    label = " ".join(args.setting)
    print(f"A: the driver's default; B: {label}. Cold start: one process each (empty driver caches); invokes: "
          f"{args.rounds} interleaved rounds of {args.runs}\n")
    print("| model | backend | cold start A s | cold start B s | invoke A ms | invoke B ms | B / A (quartiles) "
          "| load |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['backend']} | {r['start_a_s']:.2f} | {r['start_b_s']:.2f} | "
              f"{r['invoke_a_ms']:.1f} | {r['invoke_b_ms']:.1f} | {r['ratio']:.3f} ({r['ratio_q1']:.3f}-"
              f"{r['ratio_q3']:.3f}) | {r['load']:.1f} |")
    if args.output_json:
        args.output_json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
