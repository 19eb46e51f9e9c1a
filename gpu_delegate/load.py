"""load_delegate: a GpuDelegate from a library name and string options, as `tf.lite.experimental.load_delegate`
makes a delegate from a shared library and its options, so that code written for TFLite's GPU delegate library
changes only its import:

    delegate = gd.load_delegate("gpu", {"backend": "cl", "precision_loss_allowed": "true"})
    gd.Interpreter(model_path=..., experimental_delegates=[delegate])

Option values may be strings (as a command line or a config file gives them) or Python values. The keys are
GpuDelegate's arguments; TFLite's names for the same options (TfLiteGpuDelegateOptionsV2) are taken too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .gpu import BACKENDS, GpuDelegate

# What the first argument may name: ours, and TFLite's GPU delegate library with or without lib prefix and suffix
LIBRARY_NAMES = ("gpu", "gpu_delegate", "tensorflowlite_gpu_delegate")
_SUFFIXES = (".so", ".dylib", ".dll")

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).strip().lower() in TRUE + FALSE:
        return str(value).strip().lower() in TRUE
    raise ValueError(f"load_delegate option {name}={value!r} is not a boolean (true/false, 1/0, yes/no)")


def _count(name: str, value: Any) -> int:
    try:
        number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
    except ValueError:
        raise ValueError(f"load_delegate option {name}={value!r} is not an integer") from None
    return number


def _backend(name: str, value: Any) -> str:
    text = str(value).strip().lower()
    text = {"opencl": "cl", "opengl": "gl", "": "auto"}.get(text, text)
    if text not in BACKENDS:
        raise ValueError(f"load_delegate option {name}={value!r} is not one of {', '.join(BACKENDS)} "
                         "(or opencl, opengl)")
    return text


def _preference(name: str, value: Any) -> str:
    # TFLite's TfLiteGpuInferenceUsage: 0 fast single answer, 1 sustained speed
    text = {"0": "fast_single_answer", "1": "sustained_speed"}.get(str(value).strip(), str(value).strip().lower())
    if text not in ("fast_single_answer", "sustained_speed"):
        raise ValueError(f"load_delegate option {name}={value!r} is not fast_single_answer (0) or "
                         "sustained_speed (1)")
    return text


def _text(name: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"load_delegate option {name}={value!r} must be a string")
    return os.fspath(value)


# option name -> (GpuDelegate argument, parser); TFLite's spellings map onto ours
OPTIONS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "backend": ("backend", _backend),
    "precision_loss_allowed": ("precision_loss_allowed", _flag),
    "is_precision_loss_allowed": ("precision_loss_allowed", _flag),
    "enable_quantized_inference": ("enable_quantized_inference", _flag),
    "enable_quant": ("enable_quantized_inference", _flag),
    "max_delegated_partitions": ("max_delegated_partitions", _count),
    "serialization_dir": ("serialization_dir", _text),
    "model_token": ("model_token", _text),
    "inference_preference": ("inference_preference", _preference),
    "enable_op_profiling": ("enable_op_profiling", _flag),
}


def load_delegate(library: str, options: Mapping[str, Any] | None = None) -> GpuDelegate:
    """The GpuDelegate that ``library`` ("gpu", or TFLite's GPU delegate library name) and ``options`` describe.
    A ValueError names an unknown library, an unknown option or a value that does not parse, before anything is
    created."""
    if not isinstance(library, (str, os.PathLike)):
        raise TypeError(f"load_delegate: library={library!r} must be a string")
    stem = os.path.basename(os.fspath(library))
    for suffix in _SUFFIXES:
        stem = stem.removesuffix(suffix)
    stem = stem.removeprefix("lib")
    if stem not in LIBRARY_NAMES:
        raise ValueError(f"load_delegate: {library!r} is not a delegate this package provides (names: "
                         f"{', '.join(LIBRARY_NAMES)}, with or without lib and .so)")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"load_delegate: options must be a dict of option name to value, not {type(options).__name__}")
    kwargs: dict[str, Any] = {}
    for key, value in options.items():
        if key not in OPTIONS:
            raise ValueError(f"load_delegate: unknown option {key!r}; the options are {', '.join(OPTIONS)}")
        argument, parse = OPTIONS[key]
        if argument in kwargs:
            raise ValueError(f"load_delegate: option {key!r} sets {argument} a second time")
        kwargs[argument] = parse(key, value)
    return GpuDelegate(**kwargs)
