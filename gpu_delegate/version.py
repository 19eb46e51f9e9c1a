"""The package version, and the build it names for cache files and program binaries."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def build_id() -> str:
    """``__version__`` and a digest of this package's code and kernel sources: what a cache file was written by. A
    plan keeps kernel names, defines and prepared constants, not the kernels' text, so a file from code that lays a
    constant out otherwise (or names a define differently) must not load, whatever the version number says."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    # the package (an installed one holds its kernels), and a checkout's kernels beside it (codegen._KERNEL_DIRS);
    # a "kernels" folder of some other package there has no dialect/
    for root in (package, package.parent / "kernels"):
        if root != package and not (root / "dialect").is_dir():
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".dialect", ".cl", ".glsl")
                           and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"
