"""One module per op family. Importing this package registers every op in `base.REGISTRY`."""

import importlib

from .base import REGISTRY, Op, get_op, register

_FAMILIES = ["conv", "pool", "elementwise", "reduce", "layout", "resize", "quantize", "lstm", "rnn", "conv3d",
             "segment", "unique", "detection", "random", "svdf", "embedding_sparse", "reduce_window", "stablehlo",
             "math", "shape", "index", "space", "normalization", "signal", "hashing", "control_flow", "variables",
             "mediapipe", "hashtable", "text"]


def _import_families() -> None:
    for family in _FAMILIES:
        try:
            importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise


_import_families()
_load_all = True

__all__ = ["REGISTRY", "Op", "get_op", "register"]
