"""Which ai-edge-litert releases the LiteRT bridge (gpu_delegate/litert.py) works with.

For each release (default: every one `pip index versions ai-edge-litert` lists), the wheel is installed alone into
a temp folder put first on PYTHONPATH, the release is added to the bridge's KNOWN_VERSIONS for the run, and the
bridge's tests that exercise the native struct layouts run under it: the numpy delegate of examples/, op
parameters read from builtin_data, custom options and sparse constants, resize, the output checks, the GPU
delegate on built float and int8 models, and the context checks. A release built against numpy 1.x
(``_ARRAY_API not found`` under numpy 2) is tried again with numpy 1.26.

    python bench/litert_versions.py [--versions 2.2.0,2.1.6] [--tests EXPR]

Prints one line per release; the releases that pass are what KNOWN_VERSIONS should list.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("add_sub or op_parameters or custom_options or resize_reprepares or kernel_outputs or built_model "
         "or context_check")
RUNNER = """
import sys
from importlib import metadata
import pytest
import gpu_delegate.litert as bridge
version = metadata.version("ai-edge-litert")
bridge.KNOWN_VERSIONS["ai-edge-litert"] = (*bridge.KNOWN_VERSIONS["ai-edge-litert"], version)
bridge.REFUSED_VERSIONS.get("ai-edge-litert", {}).pop(version, None)
sys.exit(pytest.main(sys.argv[1:]))
"""


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def releases() -> list[str]:
    out = pip("index", "versions", "ai-edge-litert").stdout
    match = re.search(r"Available versions: (.*)", out)
    return match.group(1).split(", ") if match else []


def check(version: str, tmp: Path, tests: str, numpy_dir: Path | None) -> tuple[bool, str]:
    target = tmp / version
    if not target.exists():
        out = pip("install", "-q", "--no-deps", "--target", str(target), f"ai-edge-litert=={version}")
        if out.returncode:
            return False, "no wheel for this Python: " + (out.stderr.strip().splitlines() or ["?"])[-1]
    path = os.pathsep.join(str(p) for p in (target, numpy_dir) if p)
    out = subprocess.run([sys.executable, "-c", RUNNER, "-q", "-x", "-p", "no:cacheprovider",
                          "tests/test_litert_bridge.py", "-k", tests], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": path})
    last = (out.stdout.strip().splitlines() or ["?"])[-1]
    if out.returncode and "_ARRAY_API not found" in out.stdout + out.stderr and numpy_dir is None:
        numpy_dir = tmp / "numpy1"
        if not numpy_dir.exists():
            pip("install", "-q", "--no-deps", "--target", str(numpy_dir), "numpy==1.26.*")
        ok, text = check(version, tmp, tests, numpy_dir)
        return ok, f"{text} (with numpy 1.26: the wheel was built against numpy 1.x)"
    if "tflite" in last and "ImportError" in out.stdout + out.stderr:
        return False, "installs a top-level 'tflite' package over the flatbuffer schema package: " + last
    return out.returncode == 0, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", help="comma-separated releases (default: every one on the index)")
    parser.add_argument("--tests", default=TESTS, help="pytest -k expression")
    args = parser.parse_args()
    versions = args.versions.split(",") if args.versions else releases()
    passed = []
    with tempfile.TemporaryDirectory(prefix="litert_versions_") as tmp:
        for version in versions:
            ok, text = check(version, Path(tmp), args.tests, None)
            print(f"ai-edge-litert {version}: {'ok  ' if ok else 'FAIL'} {text}", flush=True)
            if ok:
                passed.append(version)
    print(f"\npassing: {', '.join(sorted(passed, key=lambda v: tuple(map(int, v.split('.')))))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
