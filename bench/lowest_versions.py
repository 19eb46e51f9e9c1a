"""The lowest versions pyproject.toml allows, installed in a fresh venv, running models: do the declared ranges work?

Every dependency (and the litert and plot extras) is pinned to its lower bound (``numpy>=1.24`` -> ``numpy==1.24.*``,
``tflite>=2.18`` -> ``tflite==2.18.*``), installed from wheels into a new virtual environment together with this
package, and then, inside it:
  1. ``gpu-delegate --version``;
  2. ``gpu-delegate benchmark --gpu_backend=all`` on a small built-in MobileNetV2: LiteRT, cl, gl and the CPU path
     must all run and agree with LiteRT;
  3. ``gpu-delegate diff --delegate=gpu`` on that model written to a file;
  4. the GpuDelegate inside LiteRT's own interpreter (the ctypes bridge), against LiteRT alone.

    python bench/lowest_versions.py [--keep DIR] [--python python3.11]

Prints the versions installed and a line per check; exits 1 if any fails. Needs the package index (pip) and
about two minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("litert", "plot")

BRIDGE_CHECK = """
import numpy as np
from ai_edge_litert.interpreter import Interpreter
import gpu_delegate as gd
from gpu_delegate import tools
content, _ = tools.demo_model(64, 0.35)
x = tools.random_input((1, 64, 64, 3), np.float32, np.random.default_rng(0))
outs = []
for delegates in ([], [gd.GpuDelegate(backend="cl")]):
    it = Interpreter(model_content=content, experimental_delegates=delegates)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
err = float(np.abs(outs[0] - outs[1]).max())
assert err < 1e-4, err
print(f"GpuDelegate(cl) inside LiteRT: max abs error vs LiteRT alone {err:.3g}")
"""


def lowest_pins(pyproject: Path = ROOT / "pyproject.toml", extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """Each requirement of the project and of ``extras`` pinned to its lower bound: "numpy==1.24.*"."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins = []
    for req in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:\[[^\]]+\])?)\s*>=\s*([0-9][0-9.]*)(?:\s*,.*)?", req.strip())
        if match is None:
            raise ValueError(f"pyproject.toml: {req!r} declares no lower bound (name>=version)")
        name, version = match.groups()
        parts = version.split(".")
        # "2023.1" -> "2023.1.*" (any patch release of the lowest minor); "1.0.0" stays exact
        pins.append(f"{name}=={version}" if len(parts) >= 3 else f"{name}=={version}.*")
    return pins


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", metavar="DIR", help="build the venv here and keep it (default: a temp dir)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venv")
    args = parser.parse_args()
    pins = lowest_pins()
    with tempfile.TemporaryDirectory(prefix="lowest_") as tmp:
        work = Path(args.keep or tmp)
        venv = work / "venv"
        bin_dir = venv / "bin"
        print(f"venv: {venv}\npins: {' '.join(pins)}", flush=True)
        steps = [[args.python, "-m", "venv", str(venv)],
                 [str(bin_dir / "pip"), "install", "-q", "--only-binary=:all:", *pins],
                 [str(bin_dir / "pip"), "install", "-q", "--no-deps", str(ROOT)]]
        for cmd in steps:
            out = run(cmd)
            if out.returncode:
                print(f"FAILED: {' '.join(cmd)}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
                return 1
        freeze = run([str(bin_dir / "pip"), "list", "--format=json"]).stdout
        installed = {p["name"].lower(): p["version"] for p in json.loads(freeze)}
        wanted = [re.split(r"[\[=]", pin)[0].lower() for pin in pins]
        print("installed: " + ", ".join(f"{n} {installed.get(n, installed.get(n.replace('-', '_'), '?'))}"
                                        for n in wanted), flush=True)
        model = work / "demo.tflite"
        report = work / "all.json"
        checks = {
            "version": [str(bin_dir / "gpu-delegate"), "--version"],
            "benchmark --gpu_backend=all": [str(bin_dir / "gpu-delegate"), "benchmark", "--demo_input_size=64",
                                            "--demo_width=0.35", "--gpu_backend=all", "--num_runs=3",
                                            f"--output_json={report}"],
            "write the model": [str(bin_dir / "python"), "-c",
                                f"from gpu_delegate import tools; open({str(model)!r}, 'wb').write("
                                "tools.demo_model(64, 0.35)[0])"],
            "diff --delegate=gpu": [str(bin_dir / "gpu-delegate"), "diff", f"--model_file={model}",
                                    "--delegate=gpu", "--num_runs=3"],
            "GpuDelegate inside LiteRT": [str(bin_dir / "python"), "-c", BRIDGE_CHECK],
        }
        failed = 0
        for name, cmd in checks.items():
            out = run(cmd, cwd=work, timeout=900)
            ok = out.returncode == 0
            if ok and name.startswith("benchmark"):
                rows = json.loads(report.read_text())["backends"]
                bad = [r["backend"] for r in rows if "unavailable" in r or r["max_abs_error_vs_reference"] > 1e-3]
                ok = not bad and len(rows) == 4
                detail = "; ".join(f"{r['backend']} {r.get('median_ms', 0):.2f} ms" for r in rows)
            else:
                detail = (out.stdout.strip().splitlines() or [""])[-1]
            print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
            if not ok:
                print(out.stdout[-3000:] + out.stderr[-3000:])
                failed += 1
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
