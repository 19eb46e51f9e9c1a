"""MediaPipe's production models (face, hand, pose, palm, iris, selfie segmentation): taken from MediaPipe's wheel,
which ships them, for bench/converter_check.py to run against LiteRT (and, for the three with MediaPipe's custom
ops, against our CPU path).

    python bench/mediapipe_models.py --out bench/out/mediapipe
    python bench/converter_check.py bench/out/mediapipe

The wheel is downloaded with pip (no dependencies, nothing installed) and only its .tflite files are kept, with the
Apache-2.0 license that covers them. Not a dependency of the project.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.10.21"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/out/mediapipe"))
    ap.add_argument("--version", default=VERSION, help="MediaPipe release whose wheel to take the models from")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp,
                        f"mediapipe=={args.version}"], check=True)
        (wheel,) = Path(tmp).glob("mediapipe-*.whl")
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".tflite") or name.endswith("LICENSE"):
                    target = args.out / Path(name).name
                    target.write_bytes(z.read(name))
                    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
