"""The `gpu-delegate` command: benchmark | diff | inspect | cache, speaking TFLite's tools' flags and output.

    gpu-delegate benchmark --graph=M.tflite --use_gpu=true --gpu_backend=cl --num_runs=50 ...
    gpu-delegate benchmark --gpu_backend=all --plot=out.png      # LiteRT, cl, gl and our CPU path side by side
    gpu-delegate diff --model_file=M.tflite --delegate=gpu [--gpu_backend=cl|gl] [--num_runs=50]
    gpu-delegate inspect [M.tflite] [--gpu_backend=cl|gl]

`benchmark` takes benchmark_model's flags with benchmark_model's defaults and prints benchmark_model's lines
(tensorflow/lite/tools/benchmark), then ours; `diff` is inference_diff (tensorflow/lite/tools/evaluation/tasks/
inference_diff): the delegate against a single-threaded CPU reference on random inputs. Flags are checked and
output paths validated before anything runs. A usage error (a bad flag, a missing model file, an output path
that cannot be written) exits 2 with one line; a model or delegate that fails exits 1 with one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import struct
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np

from . import tools
from .cache import Cache
from .errors import DelegateError, ModelError
from .gpu import GpuDelegate
from .graph import Quantization, Tensor
from .interpreter import Interpreter
from .ops.base import get_op
from .tflite.reader import read_model
from .version import __version__

T = TypeVar("T")

PROG = "gpu-delegate"
GPU_BACKENDS = ("cl", "gl")
INT32_MAX = 2**31 - 1
EXIT_FAILURE, EXIT_USAGE = 1, 2


class UserError(Exception):
    """Something the user can fix, found before anything ran: one line, exit 2 (argparse's usage code)."""


class RunError(Exception):
    """The run itself failed (a model nobody can run, a delegate that cannot take it): one line, exit 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse prints the whole usage; one line is clearer
        raise UserError(f"{message} ('{self.prog} --help' lists the flags)")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in --help, as benchmark_model's --help lists them."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, "", argparse.SUPPRESS) or action.option_strings == []:
            return action.help
        return super()._get_help_string(action)


def log(message: str = "", level: str = "INFO") -> None:
    """A line as TFLite's tools log one (tools/logging.h): INFO and WARN on stdout, ERROR on stderr."""
    print(f"{level}: {message}", file=sys.stderr if level == "ERROR" else sys.stdout, flush=level != "INFO")


# -- flag types ----------------------------------------------------------------------------------------------

def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true, false, 1 or 0, got {text!r}")


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _flag(group: Any, name: str, kind: str, default: Any, help_text: str, **kw: Any) -> None:
    """A benchmark_model-style flag: ``--name=value`` (``--name`` alone sets a bool true)."""
    types: dict[str, Any] = {"bool": _bool, "int": _int_at_least(-INT32_MAX), "uint": _int_at_least(0),
                             "count": _int_at_least(1), "float": _float, "str": str}
    options: dict[str, Any] = {"type": types[kind], "default": default, "help": help_text,
                               "metavar": {"bool": "true|false", "str": "S", "float": "X"}.get(kind, "N")}
    if kind == "bool":
        options.update(nargs="?", const=True)
    group.add_argument(f"--{name}", **{**options, **kw})


# benchmark_model's flags that change nothing here, with why (each is logged as a warning when set)
NO_EFFECT = {
    "use_caching": "Ruy's prepacked-weights cache; the CPU path here is numba's",
    "allow_fp16": "fp16 on the CPU kernels; --gpu_precision_loss_allowed is the GPU's",
    "max_profiling_buffer_entries": "the profiler here keeps every event",
    "allow_dynamic_profiling_buffer_increase": "the profiler here keeps every event",
    "min_nodes_per_partition": "the GPU delegate's partition policy decides",
    "first_delegate_node_index": "TFLITE_DEBUG_DELEGATE builds only",
    "last_delegate_node_index": "TFLITE_DEBUG_DELEGATE builds only",
    "gpu_invoke_loop_times": "TFLITE_GPU_ENABLE_INVOKE_LOOP builds only",
    "gpu_wait_type": "the Metal delegate's (iOS)",
    "release_dynamic_tensors": "dynamic tensors are freed with their step here",
    "optimize_memory_for_large_tensors": "no such allocator here",
    "benchmark_name": "names benchmark_model's own result files",
    "output_prefix": "names benchmark_model's own result files",
}
# other delegates' switches: false is accepted, true is refused
OTHER_DELEGATES = ("use_xnnpack", "use_nnapi", "use_hexagon", "use_coreml")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, allow_abbrev=False,
                     description="Benchmark, check and inspect TFLite models on the gpu_delegate GPU delegate, "
                                 "with the flags and output of TFLite's benchmark_model and inference_diff.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("benchmark", allow_abbrev=False, formatter_class=_Help,
                       help="latency and memory, like TFLite's benchmark_model",
                       description="Latency, memory and per-op profile of one model, with benchmark_model's flags, "
                                   "defaults and output lines (then ours). Without --graph it runs the built-in "
                                   "MobileNetV2; --gpu_backend=all runs LiteRT, cl, gl and our CPU path side by "
                                   "side.")
    b.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    m = b.add_argument_group("benchmark_model: runs")
    _flag(m, "graph", "str", "", "model file (default: the built-in MobileNetV2)")
    _flag(m, "num_runs", "uint", 50, "expected number of runs, see also min_secs, max_secs")
    _flag(m, "min_secs", "float", 1.0, "minimum seconds to rerun for, potentially more runs than num_runs")
    _flag(m, "max_secs", "float", 150.0, "maximum seconds to rerun for, potentially fewer runs than num_runs")
    _flag(m, "run_delay", "float", -1.0, "delay between runs in seconds (<= 0: none)")
    _flag(m, "run_frequency", "float", -1.0, "runs per second, overrides run_delay (<= 0: as fast as possible)")
    _flag(m, "warmup_runs", "uint", 1, "minimum number of warm-up runs, see also warmup_min_secs")
    _flag(m, "warmup_min_secs", "float", 0.5, "minimum seconds of warm-up runs")
    _flag(m, "num_threads", "int", -1, "threads of the CPU kernels (-1: the platform default)")
    _flag(m, "verbose", "bool", False, "log every parameter, not only those set on the command line")
    _flag(m, "dry_run", "bool", False, "load the model and allocate tensors, invoke nothing")
    _flag(m, "report_peak_memory_footprint", "bool", False,
          "sample the memory footprint in a thread and report its peak")
    _flag(m, "memory_footprint_check_interval_ms", "int", 50, "sampling interval of the peak memory footprint")
    _flag(m, "print_preinvoke_state", "bool", False, "print the interpreter's tensors before the runs")
    _flag(m, "print_postinvoke_state", "bool", False, "print the interpreter's tensors after the runs")
    i = b.add_argument_group("benchmark_model: inputs")
    _flag(i, "input_layer", "str", "", "input names, comma-separated, every input in the interpreter's order")
    _flag(i, "input_layer_shape", "str", "", "input shapes, colon-separated lists of dims: 1,224,224,3:1,20")
    _flag(i, "input_layer_value_range", "str", "", "integer input ranges, both ends inclusive: in1,1,2:in2,0,254")
    _flag(i, "input_layer_value_files", "str", "", "raw input files: in1:path1,in2:path2 (\"::\" escapes a ':')")
    p = b.add_argument_group("benchmark_model: profiling")
    _flag(p, "enable_op_profiling", "bool", False,
          "time every node, and every kernel inside GPU partitions (the Delegate internal tables)")
    _flag(p, "profiling_output_csv_file", "str", "", "write the op profile to this CSV file instead of stdout")
    _flag(p, "require_full_delegation", "bool", False, "fail when any node stays on the CPU")
    g = b.add_argument_group("benchmark_model: GPU delegate")
    _flag(g, "use_gpu", "bool", False, "run on the GPU delegate (a --gpu_backend other than 'all' implies true)")
    g.add_argument("--gpu_backend", choices=("", "cl", "gl", "auto", "all"), default="", metavar="cl|gl|auto|all",
                   help="GPU API; 'all' runs LiteRT, cl, gl and the CPU path side by side (default: auto)")
    _flag(g, "gpu_precision_loss_allowed", "bool", True, "fp16 storage on the GPU")
    _flag(g, "gpu_experimental_enable_quant", "bool", True, "run quantized models on the GPU")
    _flag(g, "gpu_inference_for_sustained_speed", "bool", False,
          "tune kernels' work-group sizes at start-up (slower start, faster runs)")
    _flag(g, "max_delegated_partitions", "uint", 0, "most partitions to delegate (0: the delegate's default, 1)")
    _flag(g, "delegate_serialize_dir", "str", "", "cache compiled kernels in this folder")
    _flag(g, "delegate_serialize_token", "str", "", "model token naming the cache entries")
    c = b.add_argument_group("benchmark_model flags accepted without effect here (a warning says why)")
    for name in NO_EFFECT:
        kind = ("bool" if name in ("use_caching", "allow_fp16", "allow_dynamic_profiling_buffer_increase",
                                   "release_dynamic_tensors") else
                "str" if name in ("gpu_wait_type", "benchmark_name", "output_prefix") else "int")
        _flag(c, name, kind, argparse.SUPPRESS, NO_EFFECT[name])
    for name in OTHER_DELEGATES:
        _flag(c, name, "bool", False, "another TFLite delegate: not in gpu_delegate (only false is accepted)")
    o = b.add_argument_group("gpu_delegate")
    _flag(o, "output_json", "str", "", "also write the results to this JSON file")
    _flag(o, "plot", "str", "", "write a PNG chart (needs matplotlib); with --gpu_backend=all: latency per "
                                "backend and GPU time per op type")
    _flag(o, "demo_input_size", "uint", 224, "built-in model: input height and width", type=_int_at_least(8))
    _flag(o, "demo_width", "float", 1.0, "built-in model: width multiplier", type=_positive_float)
    _flag(o, "seed", "uint", 0, "random input seed")

    d = sub.add_parser("diff", allow_abbrev=False, formatter_class=_Help,
                       help="inference diff against the CPU reference, like TFLite's inference_diff",
                       description="TFLite's inference_diff: random inputs through a single-threaded CPU "
                                   "reference (LiteRT when installed, else our CPU path) and the test "
                                   "interpreter (--delegate=gpu: the GPU delegate), per-output error statistics "
                                   "and latencies.")
    d.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    d.add_argument("model", metavar="MODEL", nargs="?", help="the model file, if --model_file is not given")
    _flag(d, "model_file", "str", "", "path to the test .tflite model")
    _flag(d, "num_runs", "count", 50, "runs of the reference and of the test interpreter")
    _flag(d, "num_interpreter_threads", "count", 1, "threads of the test interpreter")
    d.add_argument("--delegate", choices=("", "gpu", "none", "nnapi", "hexagon", "xnnpack", "coreml"), default="",
                   metavar="gpu", help="delegate of the test interpreter ('' or none: our CPU path)")
    _flag(d, "output_file_path", "str", "",
          "write the metrics as a serialized tflite.evaluation.EvaluationStageMetrics proto")
    _flag(d, "use_gpu", "bool", False, "same as --delegate=gpu (the delegate registrar's flag)")
    d.add_argument("--gpu_backend", choices=("", "cl", "gl", "auto"), default="", metavar="cl|gl|auto",
                   help="GPU API of the tested delegate (default: auto)")
    _flag(d, "gpu_precision_loss_allowed", "bool", True, "fp16 storage on the GPU")
    _flag(d, "gpu_experimental_enable_quant", "bool", True, "run quantized models on the GPU")
    _flag(d, "seed", "uint", 0, "random input seed")
    _flag(d, "output_json", "str", "", "also write the results to this JSON file")

    n = sub.add_parser("inspect", allow_abbrev=False, formatter_class=_Help,
                       help="tensors, nodes, placement and work of a model",
                       description="Inputs, outputs, every node with where it runs, partitions and MACs.")
    n.add_argument("model", metavar="MODEL", nargs="?", help=".tflite file (default: the built-in MobileNetV2)")
    n.add_argument("--gpu_backend", choices=("cl", "gl", "auto"),
                   help="show placement on this GPU backend (default: everything on the CPU)")
    n.add_argument("--demo_input_size", type=_int_at_least(8), default=224, metavar="N",
                   help="built-in model: input height and width")
    n.add_argument("--demo_width", type=_positive_float, default=1.0, metavar="W",
                   help="built-in model: width multiplier")

    k = sub.add_parser("cache", allow_abbrev=False, help="list or clear a serialization directory",
                       description="See (file, size, token, backend, date) or remove the delegate's cache files: "
                                   "`clear` removes only files whose header is a gpu_delegate cache header.")
    k.add_argument("action", choices=("ls", "clear"))
    k.add_argument("directory", metavar="DIR", help="the delegate's serialization_dir")
    return parser


# -- shared pieces -------------------------------------------------------------------------------------------

def _read_model(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except IsADirectoryError:
        raise UserError(f"model file {path!r} is a directory") from None
    except OSError as e:
        raise UserError(f"cannot read model file {path!r}: {e.strerror or e}") from None


def _check_output(flag: str, path: str) -> None:
    """Refuse, before anything runs, an output path that cannot be written."""
    if not path:
        return
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UserError(f"--{flag}={path}: is a directory")
    if not parent.is_dir():
        raise UserError(f"--{flag}={path}: the folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UserError(f"--{flag}={path}: not writable")


def make_delegate(backend: str, precision_loss_allowed: bool = False, serialization_dir: str | None = None,
                  model_token: str | None = None, **options: Any) -> GpuDelegate:
    return GpuDelegate(backend=backend, precision_loss_allowed=precision_loss_allowed,
                       serialization_dir=serialization_dir or None, model_token=model_token or None, **options)


def _fell_back(delegate: GpuDelegate, backend: str) -> bool:
    """Whether a GpuDelegate asked for ``backend`` found no GPU API and passes every node to the CPU."""
    name = getattr(delegate, "backend_name", backend)
    return name == "cpu" or (backend != "auto" and name != backend)


def _progress(iterable: Iterable[T], total: int, desc: str) -> Iterator[T]:
    from tqdm import tqdm

    # Shown only when the loop outlasts `delay`: short runs stay quiet, long ones show they are alive.
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, delay=1.5, leave=False, unit="run")


def _bar(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, delay=1.5, leave=False, unit="run")


def _write_json(path: str, data: dict[str, Any]) -> None:
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    except OSError as e:
        raise RunError(f"cannot write --output_json file {path!r}: {e.strerror or e}") from None
    print(f"gpu_delegate: results written to {path}")


def _need_matplotlib() -> Any:
    try:
        return tools.pyplot()
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'gpu_delegate[plot]'") from None


def _device(delegate: GpuDelegate) -> str:
    if delegate.backend is None:
        return "CPU"
    return " + ".join(tools.device_label(dict(b.device_info())) for b in delegate.backend.backends_in_use())


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return "CPU"


# -- benchmark: flags ------------------------------------------------------------------------------------------

# LogParams' descriptions (benchmark_model.cc, benchmark_tflite_model.cc, the delegate providers), in its order
PARAM_LOG = (("num_runs", "Min num runs"), ("min_secs", "Min runs duration (seconds)"),
             ("max_secs", "Max runs duration (seconds)"), ("run_delay", "Inter-run delay (seconds)"),
             ("run_frequency", "Number of prorated runs per second"), ("num_threads", "Num threads"),
             ("warmup_runs", "Min warmup runs"), ("warmup_min_secs", "Min warmup runs duration (seconds)"),
             ("dry_run", "Run w/o invoking kernels"),
             ("report_peak_memory_footprint", "Report the peak memory footprint"),
             ("memory_footprint_check_interval_ms", "Memory footprint check interval (ms)"),
             ("graph", "Graph"), ("input_layer", "Input layers"), ("input_layer_shape", "Input shapes"),
             ("input_layer_value_range", "Input value ranges"), ("input_layer_value_files", "Input value files"),
             ("require_full_delegation", "Require full delegation"),
             ("enable_op_profiling", "Enable op profiling"),
             ("profiling_output_csv_file", "CSV File to export profiling data to"),
             ("print_preinvoke_state", "Print pre-invoke interpreter state"),
             ("print_postinvoke_state", "Print post-invoke interpreter state"),
             ("max_delegated_partitions", "Max number of delegated partitions"),
             ("delegate_serialize_dir", "Directory for delegate serialization"),
             ("delegate_serialize_token", "Model-specific token/key for delegate serialization."),
             ("use_gpu", "Use gpu"), ("gpu_precision_loss_allowed", "Allow lower precision in gpu"),
             ("gpu_experimental_enable_quant", "Enable running quant models in gpu"),
             ("gpu_inference_for_sustained_speed", "Prefer maximizing the throughput in gpu"),
             ("gpu_backend", "GPU backend"))


def _given(argv: Sequence[str]) -> set[str]:
    """The flags set on the command line (benchmark_model logs only those unless --verbose)."""
    return {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")}


def _log_params(args: argparse.Namespace, given: set[str], graph: str) -> None:
    log(f"Log parameter values verbosely: [{int(args.verbose)}]")
    for name, text in PARAM_LOG:
        if args.verbose or name in given or name == "graph":
            value = graph if name == "graph" else getattr(args, name)
            shown = int(value) if isinstance(value, bool) else tools.cpp_number(value) \
                if isinstance(value, float) else value
            log(f"{text}: [{shown}]")


def _split(text: str, sep: str) -> list[str]:
    return [s for s in text.split(sep)] if text else []


def _input_specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """--input_layer, --input_layer_shape, --input_layer_value_range and --input_layer_value_files, checked as
    benchmark_model checks them (PopulateInputLayerInfo)."""
    names, shapes = _split(args.input_layer, ","), _split(args.input_layer_shape, ":")
    if len(names) != len(shapes):
        raise UserError(f"the number of items in --input_layer_shape ({args.input_layer_shape}, with {len(shapes)} "
                        f"items) must match the number of items in --input_layer ({args.input_layer}, with "
                        f"{len(names)} items). For example --input_layer=input1,input2 "
                        "--input_layer_shape=1,224,224,4:1,20")
    specs: list[dict[str, Any]] = []
    for name, shape_text in zip(names, shapes):
        try:
            shape = [int(s) for s in shape_text.split(",")]
        except ValueError:
            raise UserError(f"--input_layer_shape: incorrect size string specified: {shape_text!r}") from None
        if any(s == -1 for s in shape):
            raise UserError("--input_layer_shape: any unknown sizes in the shapes (-1's) must be replaced with the "
                            "size you want to benchmark with")
        if any(s < 0 for s in shape):
            raise UserError(f"--input_layer_shape: negative size in {shape_text!r}")
        specs.append({"name": name, "shape": shape, "range": None, "file": None})

    def find(name: str, flag: str) -> dict[str, Any]:
        for spec in specs:
            if spec["name"] == name:
                return spec
        raise UserError(f"--{flag}: cannot find the corresponding input_layer name ({name}) in --input_layer as "
                        f"{args.input_layer!r}")

    for item in _split(args.input_layer_value_range, ":"):
        parts = item.split(",")
        if len(parts) != 3:
            raise UserError(f"--input_layer_value_range: wrong input value range item specified: {item!r}")
        try:
            low, high = int(parts[1]), int(parts[2])
        except ValueError:
            low, high = 1, 0
        if low > high:
            raise UserError(f"--input_layer_value_range: wrong low and high value of the input value range "
                            f"specified: {item!r}")
        find(parts[0], "input_layer_value_range")["range"] = (low, high)
    for item in _split(args.input_layer_value_files.replace("::", "\0"), ","):
        parts = item.split(":")
        if len(parts) != 2:
            raise UserError(f"--input_layer_value_files: wrong input value file item specified: "
                            f"{item.replace(chr(0), '::')!r}")
        spec = find(parts[0].replace("\0", ":"), "input_layer_value_files")
        path = parts[1].replace("\0", ":")
        if not Path(path).is_file():
            raise UserError(f"--input_layer_value_files: {path!r} is not a file")
        spec["file"] = path
    return specs


def _check_benchmark_args(args: argparse.Namespace) -> tuple[bool, list[dict[str, Any]]]:
    """(use_gpu, input specs): every flag checked and every path validated before anything runs."""
    use_gpu = args.use_gpu or args.gpu_backend not in ("", "all") and "use_gpu" not in args.given
    if args.gpu_backend == "all":
        if "use_gpu" in args.given and not args.use_gpu:
            raise UserError("--gpu_backend=all compares the GPU backends; it cannot be combined with "
                            "--use_gpu=false")
        for flag in ("input_layer", "input_layer_shape", "input_layer_value_range", "input_layer_value_files",
                     "profiling_output_csv_file", "dry_run", "print_preinvoke_state", "print_postinvoke_state",
                     "require_full_delegation"):
            if getattr(args, flag):
                raise UserError(f"--{flag} applies to one backend; it cannot be combined with --gpu_backend=all")
    for name in OTHER_DELEGATES:
        if getattr(args, name):
            raise UserError(f"--{name}=true: gpu_delegate has no such delegate (its GPU delegate is --use_gpu; "
                            "LiteRT's own CPU path runs in --gpu_backend=all)")
    if not use_gpu and args.gpu_backend != "all":
        for flag in ("delegate_serialize_dir", "delegate_serialize_token"):
            if getattr(args, flag):
                raise UserError(f"--{flag} applies only with --use_gpu=true")
    if args.profiling_output_csv_file and not args.enable_op_profiling:
        raise UserError("--profiling_output_csv_file needs --enable_op_profiling=true")
    if args.memory_footprint_check_interval_ms <= 0:
        log(f"--memory_footprint_check_interval_ms is set to {args.memory_footprint_check_interval_ms} (ms), This "
            "value is invalid, and it will be set to the default value 50 (ms).", "WARN")
        args.memory_footprint_check_interval_ms = 50
    if args.graph:
        if not Path(args.graph).is_file():
            raise UserError(f"--graph={args.graph}: no such file" if not Path(args.graph).exists()
                            else f"--graph={args.graph}: not a file")
    elif args.input_layer or args.input_layer_shape:
        raise UserError("--input_layer and --input_layer_shape need --graph (the built-in model's input is "
                        "set by --demo_input_size)")
    for flag in ("output_json", "plot", "profiling_output_csv_file"):
        _check_output(flag, getattr(args, flag))
    if args.delegate_serialize_dir and Path(args.delegate_serialize_dir).exists() \
            and not Path(args.delegate_serialize_dir).is_dir():
        raise UserError(f"--delegate_serialize_dir={args.delegate_serialize_dir}: not a directory")
    for name in NO_EFFECT:
        if hasattr(args, name):
            log(f"--{name} has no effect in gpu_delegate: {NO_EFFECT[name]}.", "WARN")
    return use_gpu, _input_specs(args)


# -- benchmark: one interpreter --------------------------------------------------------------------------------

def _prepare_inputs(it: Interpreter, specs: list[dict[str, Any]], rng: np.random.Generator) -> list[np.ndarray]:
    """The benchmark inputs: from --input_layer_value_files, else random as benchmark_model makes them."""
    details = it.get_input_details()
    data = []
    for k, d in enumerate(details):
        spec = specs[k] if specs else None
        if spec is not None and spec["file"]:
            raw = Path(spec["file"]).read_bytes()
            nbytes = int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
            if len(raw) != nbytes:
                raise UserError(f"--input_layer_value_files: the size of {spec['file']} is {len(raw)} bytes. It "
                                f"should be {nbytes} bytes.")
            data.append(np.frombuffer(raw, d["dtype"]).reshape(d["shape"]))
        else:
            data.append(tools.benchmark_input(d["shape"], d["dtype"], rng, spec["range"] if spec else None))
    return data


def _resize_inputs(it: Interpreter, specs: list[dict[str, Any]]) -> None:
    details = it.get_input_details()
    if not specs:
        return
    if len(specs) != len(details):
        raise UserError(f"inputs mismatch: --input_layer names {len(specs)} inputs, the model has {len(details)}")
    for spec, d in zip(specs, details):
        if spec["name"] != d["name"]:
            log(f"Tensor # {d['index']} is named {d['name']} but flags call it {spec['name']}", "WARN")
        if len(spec["shape"]) != len(d["shape"]):
            raise UserError(f"input tensor #{d['index']} should have {len(d['shape'])} dimensions!")
        it.resize_tensor_input(d["index"], spec["shape"])


def _print_state(it: Interpreter, when: str) -> None:
    log(f"\n====Printing out TfLite interpreter {when}-invoke state begins====")
    tensors = it.get_tensor_details()
    print(f"Interpreter has 1 subgraphs.\n\n-----------Subgraph-0 has {len(tensors)} tensors and "
          f"{len(it.get_ops_details())} nodes------------")
    print(f"{len(it.get_input_details())} Inputs: {[d['index'] for d in it.get_input_details()]}")
    print(f"{len(it.get_output_details())} Outputs: {[d['index'] for d in it.get_output_details()]}\n")
    print("Tensor  ID Name                      Type            Bytes          Shape")
    for t in tensors:
        shape = list(map(int, t["shape"]))
        nbytes = int(np.prod(shape)) * np.dtype(t["dtype"]).itemsize
        print(f"Tensor {t['index']:3d} {t['name'][:24]:<25} {np.dtype(t['dtype']).name:<15} {nbytes:<14} {shape}")
    log(f"====Printing out TfLite interpreter {when}-invoke state ends====\n")


def _run_loop(it: Interpreter, min_runs: int, min_secs: float, max_secs: float, args: argparse.Namespace,
              desc: str, after_each: Callable[[], None] | None = None) -> list[int]:
    """benchmark_model's BenchmarkModel::Run: at least ``min_runs`` runs and ``min_secs`` seconds, never starting
    one after ``max_secs``; run_delay / run_frequency between runs. Microseconds per run."""
    log(f"Running benchmark for at least {min_runs} iterations and at least {tools.cpp_number(min_secs)} seconds "
        f"but terminate if exceeding {tools.cpp_number(max_secs)} seconds.")
    us: list[int] = []
    start = now = time.perf_counter()
    gap = 1.0 / args.run_frequency if args.run_frequency > 0 else 0.0
    next_finish = start + gap
    with _bar(min_runs, desc) as bar:
        while (len(us) < min_runs or now < start + min_secs) and now <= start + max_secs:
            t0 = time.perf_counter()
            it.invoke()
            us.append(tools.micros(time.perf_counter() - t0))
            if after_each is not None:
                after_each()
            bar.update()
            sleep = args.run_delay
            if args.run_frequency > 0:
                sleep, next_finish = next_finish - time.perf_counter(), next_finish + gap
            if sleep > 0:
                time.sleep(sleep)
            now = time.perf_counter()
    log(tools.stat_line(us) + "\n")
    return us


def _summary_ms(us: Sequence[int]) -> dict[str, float]:
    ms = [u / 1e3 for u in us]
    q1, q3 = (np.percentile(ms, [25, 75]).tolist() if ms else (0.0, 0.0))
    return {**tools.latency_stats(ms), "q1": q1, "q3": q3} if ms else {"count": 0}


def cmd_benchmark(args: argparse.Namespace) -> int:
    use_gpu, specs = _check_benchmark_args(args)
    plt = _need_matplotlib() if args.plot else None
    log("STARTING!")
    if args.gpu_backend == "all":
        return _benchmark_all(args, plt)
    start_rss = tools.maxrss_mb()
    monitor = tools.PeakMemoryMonitor(args.memory_footprint_check_interval_ms) \
        if args.report_peak_memory_footprint else None
    if monitor:
        monitor.start()
    content, label = (_read_model(args.graph), args.graph) if args.graph else \
        tools.demo_model(args.demo_input_size, args.demo_width)
    _log_params(args, args.given, label)
    log(f"Loaded model {label}")
    backend = args.gpu_backend or "auto"
    delegates: list[GpuDelegate] = []
    t_init = time.perf_counter()
    if use_gpu:
        delegates = [make_delegate(backend, args.gpu_precision_loss_allowed, args.delegate_serialize_dir,
                                   args.delegate_serialize_token,
                                   enable_quantized_inference=args.gpu_experimental_enable_quant,
                                   max_delegated_partitions=max(args.max_delegated_partitions, 1),
                                   inference_preference="sustained_speed" if args.gpu_inference_for_sustained_speed
                                   else "fast_single_answer", enable_op_profiling=args.enable_op_profiling)]
        log("GPU delegate created.")
        if _fell_back(delegates[0], backend):
            log(f"GPU acceleration is unsupported on this platform ({delegates[0].unavailable}).", "WARN")
    profiler = tools.OpProfiler(delegates) if args.enable_op_profiling else None
    t0 = time.perf_counter()
    it = tools.make_interpreter(content, delegates, args.num_threads, args.graph or None)
    t1 = time.perf_counter()
    _resize_inputs(it, specs)
    it.allocate_tensors()
    t2 = time.perf_counter()
    init_us = tools.micros(t2 - t_init)
    init_rss = tools.maxrss_mb()
    if profiler:
        profiler.add_init("ModifyGraphWithDelegate", t1 - t0)
        profiler.add_init("AllocateTensors", t2 - t1)
    counts = tools.backend_counts(it)
    if use_gpu:
        log(f"Going to apply {len(delegates)} delegates one after another.")
        on_gpu = sum(v for k, v in counts.items() if k != "cpu")
        partitions = len({tuple(e) for e in _partitions(it)})
        if on_gpu and not counts.get("cpu"):
            log("Explicitly applied GPU delegate, and the model graph will be completely executed by the delegate.")
        elif on_gpu:
            log(f"Explicitly applied GPU delegate, and the model graph will be partially executed by the delegate "
                f"w/ {partitions} delegate kernels.")
        else:
            log("Though GPU delegate is explicitly applied, the model graph will not be executed by the delegate.")
    if args.require_full_delegation and counts.get("cpu"):
        log("Disallowed CPU fallback detected.", "ERROR")
        return EXIT_FAILURE
    log(f"The input model file size (MB): {tools.cpp_number(len(content) / 1e6)}")
    log(f"Initialized session in {tools.cpp_number(init_us / 1e3)}ms.")
    tools.set_inputs(it, _prepare_inputs(it, specs, np.random.default_rng(args.seed)))
    if args.print_preinvoke_state:
        _print_state(it, "pre")
    if args.dry_run:
        args.warmup_runs, args.warmup_min_secs, args.num_runs, args.min_secs = 0, -1.0, 0, -1.0
    warmup = _run_loop(it, args.warmup_runs, args.warmup_min_secs, args.max_secs, args, "warm-up")
    if profiler:
        profiler.attach(it)
    runs = _run_loop(it, args.num_runs, args.min_secs, args.max_secs, args, "benchmark",
                     profiler.end_run if profiler else None)
    if profiler:
        profiler.detach(it)
    overall_rss = tools.maxrss_mb()
    first_us = warmup[0] if warmup else runs[0] if runs else 0
    log(f"Inference timings in us: Init: {init_us}, First inference: {first_us}, Warmup (avg): "
        f"{tools.cpp_number(statistics.fmean(warmup)) if warmup else 0}, Inference (avg): "
        f"{tools.cpp_number(statistics.fmean(runs)) if runs else 0}")
    log("Note: as the benchmark tool itself affects memory footprint, the following is only APPROXIMATE to the "
        "actual memory footprint of the model at runtime. Take the information at your discretion.")
    log(f"Memory footprint delta from the start of the tool (MB): init={tools.cpp_number(init_rss - start_rss)} "
        f"overall={tools.cpp_number(overall_rss - start_rss)}")
    peak = monitor.stop() if monitor else None
    if peak is not None:
        rss, shared = tools.rss_mb()
        log(f"Overall peak memory footprint (MB) via periodic monitoring: {tools.cpp_number(peak)}")
        log("Memory status at the end of exeution:")
        log(f"- VmRSS              : {int(rss)} MB")
        log(f"+ RssAnnon           : {int(rss - shared)} MB")
        log(f"+ RssFile + RssShmem : {int(shared)} MB")
    if profiler:
        if args.profiling_output_csv_file:
            try:
                Path(args.profiling_output_csv_file).write_text(profiler.report(csv=True))
            except OSError as e:
                raise RunError(f"cannot write --profiling_output_csv_file {args.profiling_output_csv_file!r}: "
                               f"{e.strerror or e}") from None
        else:
            text = profiler.report()
            print("INFO: " + text if text else "", end="")
    if args.print_postinvoke_state:
        _print_state(it, "post")

    # ours, after benchmark_model's lines
    where = delegates[0].backend_name if delegates else "cpu"
    device = _device(delegates[0]) if delegates else f"{_cpu_name()} (numba CPU kernels)"
    s = _summary_ms(runs)
    print(f"gpu_delegate: graph: {label}")
    print(f"gpu_delegate: backend: {where}, device: {device}")
    print(f"gpu_delegate: nodes: {sum(counts.values())} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})")
    if runs:
        print(f"gpu_delegate: inference (ms): count={s['count']} min={s['min']:.3f} q1={s['q1']:.3f} "
              f"median={s['median']:.3f} q3={s['q3']:.3f} max={s['max']:.3f} avg={s['avg']:.3f} std={s['std']:.3f}")
    if profiler:
        for name, clocks in sorted(profiler.clocks.items()):
            how = ("the API's own counters (OpenCL profiling events, GL timer queries)" if clocks == {"device"} else
                   "the host: each kernel dispatched alone and waited for (the driver's counters read ~0)")
            print(f"gpu_delegate: {name} kernels (Delegate internal) timed by {how}")
    result: dict[str, Any] = {
        "graph": label, "backend": where, "device": device, "num_threads": args.num_threads,
        "nodes_by_backend": counts, "init_us": init_us, "first_inference_us": first_us,
        "warmup_us": warmup, "inference_us": runs, "inference_ms": s,
        "memory_mb": {"init": init_rss - start_rss, "overall": overall_rss - start_rss, "peak": peak,
                      "maxrss": overall_rss}}
    if profiler:
        result["op_profile"] = profiler.json()
    _write_json(args.output_json, result)
    if plt is not None:
        _latency_chart(plt, args.plot, _chart_title(label, args), [(where, device, s)], None, len(runs),
                       first_us / 1e3)
    return 0


# -- benchmark --gpu_backend=all ---------------------------------------------------------------------------------

COLOURS = {"litert": "#8c8c8c", "cl": "#1f77b4", "gl": "#d95f02", "cpu": "#2ca02c"}
PROFILE_RUNS = 10  # profiled invokes per GPU backend for the time-per-op-type panel


def _litert() -> tuple[Any, str] | None:
    """(LiteRT's Interpreter class, its version), or None when ai-edge-litert is not installed."""
    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
    except ImportError:
        return None
    from importlib import metadata

    return LiteRT, metadata.version("ai-edge-litert")


def _benchmark_all(args: argparse.Namespace, plt: Any) -> int:
    """LiteRT's CPU kernels, cl, gl and our CPU path on the same inputs, timed in interleaved rounds (the order
    rotating each round) so that load from elsewhere hits all alike."""
    content, label = (_read_model(args.graph), args.graph) if args.graph else \
        tools.demo_model(args.demo_input_size, args.demo_width)
    log(f"Loaded model {label}")
    threads = args.num_threads if args.num_threads > 0 else None
    litert = _litert()
    entries: list[dict[str, Any]] = []
    unavailable: dict[str, str] = {}
    for backend in ("litert", *GPU_BACKENDS, "cpu"):
        t0 = time.perf_counter()
        try:
            if backend == "litert":
                if litert is None:
                    raise DelegateError("ai-edge-litert is not installed (pip install 'gpu_delegate[litert]')")
                try:
                    it: Any = litert[0](model_content=content, num_threads=threads)
                    it.allocate_tensors()
                except (ValueError, RuntimeError) as failure:
                    why = str(failure).strip().splitlines()[-1]
                    raise DelegateError(f"LiteRT cannot load the model: {why}") from None
                device = f"{_cpu_name()}, LiteRT {litert[1]} CPU kernels"
            else:
                delegates = [] if backend == "cpu" else [make_delegate(
                    backend, args.gpu_precision_loss_allowed, args.delegate_serialize_dir,
                    args.delegate_serialize_token, enable_quantized_inference=args.gpu_experimental_enable_quant,
                    max_delegated_partitions=max(args.max_delegated_partitions, 1))]
                if delegates and _fell_back(delegates[0], backend):
                    raise DelegateError(getattr(delegates[0], "unavailable", "") or "no such backend here")
                it = tools.make_interpreter(content, delegates, args.num_threads, args.graph or None)
                it.allocate_tensors()
                device = _device(delegates[0]) if delegates else f"{_cpu_name()}, numba CPU kernels"
        except DelegateError as failure:
            if backend == "cpu":
                raise
            unavailable[backend] = str(failure).splitlines()[0]
            log(f"{backend}: unavailable ({unavailable[backend]})", "WARN")
            continue
        init_ms = (time.perf_counter() - t0) * 1e3
        nodes = {} if backend == "litert" else tools.backend_counts(it)
        log(f"{backend}: initialized in {tools.cpp_number(round(init_ms, 3))}ms on {device}"
            + ("; nodes " + ", ".join(f"{k}: {v}" for k, v in sorted(nodes.items())) if nodes else ""))
        entries.append({"backend": backend, "it": it, "device": device, "init_ms": init_ms, "nodes": nodes})
    rng = np.random.default_rng(args.seed)
    inputs = [tools.benchmark_input(d["shape"], d["dtype"], rng) for d in entries[-1]["it"].get_input_details()]
    for e in entries:
        tools.set_inputs(e["it"], inputs)
        e["first_ms"] = tools.timed_invoke(e["it"])
        for _ in range(args.warmup_runs):
            e["it"].invoke()
    times: dict[str, list[float]] = {e["backend"]: [] for e in entries}
    rounds = max(args.num_runs, 1)
    log(f"Running {rounds} interleaved rounds of {', '.join(times)}.")
    for r in _progress(range(rounds), rounds, "rounds"):
        k = r % len(entries)
        for e in entries[k:] + entries[:k]:
            times[e["backend"]].append(tools.timed_invoke(e["it"]))
    reference = entries[0]["backend"]  # LiteRT when installed, else our CPU path
    ref_out = tools.get_outputs(entries[0]["it"])
    ref_median = statistics.median(times[reference])
    rows: list[list[Any]] = []
    for e in entries:
        ms = times[e["backend"]]
        q1, med, q3 = np.percentile(ms, [25, 50, 75]).tolist()
        e.update(median_ms=med, q1_ms=q1, q3_ms=q3, ratio=med / ref_median, runs_ms=ms,
                 error=tools.max_abs_error(tools.get_outputs(e["it"]), ref_out))
        rows.append([e["backend"], e["device"], f"{e['init_ms']:.1f}", f"{e['first_ms']:.2f}", f"{med:.3f}",
                     f"{q1:.3f}-{q3:.3f}", f"{e['ratio']:.2f}", f"{e['error']:.3g}"])
    for name, why in unavailable.items():
        rows.append([name, f"unavailable: {why}", "-", "-", "-", "-", "-", "-"])
    print(tools.markdown_table(["backend", "device", "init ms", "first ms", "median ms", "IQR ms",
                                f"ratio to {reference}", f"max abs error vs {reference}"], rows))
    clocks: dict[str, str] = {}
    op_types = _op_type_profile(args, content, inputs, [e["backend"] for e in entries], clocks) \
        if (plt is not None or args.enable_op_profiling) else {}
    if op_types:
        types = sorted({t for b in op_types.values() for t in b}, key=lambda t: -sum(op_types[b].get(t, 0.0)
                                                                                   for b in op_types))
        names = list(op_types)
        ratio = "gl/cl" if names == ["cl", "gl"] else None
        print(f"\nGPU time per op type (ms per invoke; {PROFILE_RUNS} profiled invokes each):")
        print(tools.markdown_table(["op type", *names, *([ratio] if ratio else [])],
                                   [[t, *(f"{op_types[b].get(t, 0.0):.3f}" for b in names),
                                     *([_ratio(op_types["gl"].get(t, 0.0), op_types["cl"].get(t, 0.0))]
                                       if ratio else [])] for t in types]))
    print(f"gpu_delegate: peak memory footprint (maxrss): {tools.maxrss_mb():.1f} MB")
    _write_json(args.output_json, {
        "graph": label, "num_runs": rounds, "reference": reference, "cpu": _cpu_name(),
        "backends": [{"backend": e["backend"], "device": e["device"], "nodes": e["nodes"], "init_ms": e["init_ms"],
                      "first_inference_ms": e["first_ms"], "median_ms": e["median_ms"], "q1_ms": e["q1_ms"],
                      "q3_ms": e["q3_ms"], "ratio_to_reference": e["ratio"],
                      "max_abs_error_vs_reference": e["error"], "inference_ms": tools.latency_stats(e["runs_ms"]),
                      "runs_ms": e["runs_ms"]} for e in entries]
        + [{"backend": name, "unavailable": why} for name, why in unavailable.items()],
        "op_type_ms": op_types, "op_type_clock": clocks, "peak_memory_mb": tools.maxrss_mb()})
    if plt is not None:
        stats = [(e["backend"], e["device"], {"median": e["median_ms"], "q1": e["q1_ms"], "q3": e["q3_ms"]})
                 for e in entries]
        _latency_chart(plt, args.plot, _chart_title(label, args), stats, op_types, rounds, None, clocks)
    return 0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def _op_type_profile(args: argparse.Namespace, content: bytes, inputs: list[np.ndarray],
                     backends: list[str], clocks: dict[str, str]) -> dict[str, dict[str, float]]:
    """{backend: {op type: ms per invoke}} of the GPU kernels, from fresh delegates with op profiling on (so the
    timed interpreters above ran without its per-kernel waits)."""
    out: dict[str, dict[str, float]] = {}
    for backend in (b for b in backends if b in GPU_BACKENDS):
        delegate = make_delegate(backend, args.gpu_precision_loss_allowed, args.delegate_serialize_dir,
                                 args.delegate_serialize_token,
                                 enable_quantized_inference=args.gpu_experimental_enable_quant,
                                 enable_op_profiling=True)
        it = tools.make_interpreter(content, [delegate], args.num_threads, args.graph or None)
        it.allocate_tensors()
        tools.set_inputs(it, inputs)
        it.invoke()
        profiler = tools.OpProfiler([delegate])
        profiler.attach(it)
        for _ in range(PROFILE_RUNS):
            it.invoke()
            profiler.end_run()
        profiler.detach(it)
        out[backend] = {t: us / 1e3 for t, _, us, _ in profiler.kernels.by_type()}
        clocks[backend] = "/".join(sorted(profiler.clocks.get(backend, set()))) or "-"
        log(f"{backend}: {len(profiler.kernels.details)} kernels profiled ({clocks[backend]} clock)")
    return out


def _model_name(label: str) -> str:
    """The chart's name for a model: the file's name, or the built-in model's description."""
    return Path(label).name if label.endswith(".tflite") else label.replace(", random weights", "")


def _chart_title(label: str, args: argparse.Namespace) -> str:
    flag = f"--gpu_precision_loss_allowed={str(args.gpu_precision_loss_allowed).lower()}"
    return f"{_model_name(label)}; GPU storage {'fp16' if args.gpu_precision_loss_allowed else 'fp32'} ({flag})"


def _latency_chart(plt: Any, path: str, title: str, stats: list[tuple[str, str, dict[str, float]]],
                   op_types: dict[str, dict[str, float]] | None, runs: int, first_ms: float | None,
                   clocks: dict[str, str] | None = None) -> None:
    """Median latency per backend with IQR whiskers and ratios to the first (the reference), and, given
    ``op_types``, GPU time per op type on each GPU backend."""
    panels = 2 if op_types else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.2 * panels + 0.6, 5.4), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 1.25][:panels]})
    ax = axes[0][0]
    names = [n for n, _, _ in stats]
    med = [s["median"] for _, _, s in stats]
    low = [s["median"] - s["q1"] for _, _, s in stats]
    high = [s["q3"] - s["median"] for _, _, s in stats]
    colours = [COLOURS.get(n, "#9467bd") for n in names]
    bars = ax.bar(names, med, yerr=[low, high], capsize=6, color=colours, edgecolor="black", linewidth=0.6,
                  error_kw={"elinewidth": 1.2})
    reference = names[0]
    if len(stats) > 1:
        bars[0].set_hatch("//")
        ax.axhline(med[0], color=COLOURS.get(reference, "black"), linestyle="--", linewidth=1)
    for bar, m, h, name in zip(bars, med, high, names):
        text = f"{m:.2f} ms" if name == reference or len(stats) == 1 else f"{m:.2f} ms\n{m / med[0]:.2f}x {reference}"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, m + h), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=9, fontweight="bold" if name != reference else "normal")
    ax.set_ylim(0, max(m + h for m, h in zip(med, high)) * 1.32)
    ax.set_ylabel("latency per invoke (ms): median, whiskers = IQR")
    ax.set_title(f"Latency, {runs} {'interleaved ' if len(stats) > 1 else ''}runs"
                 + (f" (reference: {reference})" if len(stats) > 1 else
                    f" (first inference {first_ms:.1f} ms)" if first_ms is not None else ""), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if op_types:
        ax2 = axes[0][1]
        gpu = list(op_types)
        totals: Counter[str] = Counter()
        for b in gpu:
            totals.update(op_types[b])
        types = [t for t, _ in totals.most_common()]
        shown = types[:9]
        rest = types[9:]
        rows = {b: [op_types[b].get(t, 0.0) for t in shown] + ([sum(op_types[b].get(t, 0.0) for t in rest)]
                                                              if rest else []) for b in gpu}
        labels = shown + (["other"] if rest else [])
        y = np.arange(len(labels))
        height = 0.8 / len(gpu)
        for k, b in enumerate(gpu):
            clock = (clocks or {}).get(b, "")
            how = {"device": "device counters", "host": "host-timed, each kernel alone"}.get(clock, clock)
            ax2.barh(y + (k - (len(gpu) - 1) / 2) * height, rows[b], height, color=COLOURS.get(b, "#9467bd"),
                     edgecolor="black", linewidth=0.4, label=f"{b} ({how})" if how else b)
        if gpu == ["cl", "gl"]:
            for yy, c, g in zip(y, rows["cl"], rows["gl"]):
                ax2.annotate(f"gl/cl {_ratio(g, c)}x", (max(c, g), yy), xytext=(4, 0), textcoords="offset points",
                             va="center", fontsize=8)
        ax2.set_yticks(y, labels, fontsize=9)
        ax2.invert_yaxis()
        ax2.set_xlim(0, max(max(v) for v in rows.values()) * 1.3)
        ax2.set_xlabel("GPU time per invoke (ms), summed over the op type's kernels")
        ax2.set_title(f"Where the GPU time goes: per op type ({PROFILE_RUNS} profiled invokes)", fontsize=10)
        ax2.legend(loc="lower right")
        ax2.grid(axis="x", alpha=0.3)
        ax2.set_axisbelow(True)
    devices = [f"{n}: {d}" for n, d, _ in stats]
    lines = ["   ".join(devices[k:k + 2]) for k in range(0, len(devices), 2)]
    fig.suptitle("\n".join([title, *lines]), fontsize=9.5)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise RunError(f"cannot write --plot file {path!r}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    print(f"gpu_delegate: chart written to {path}")


# -- diff --------------------------------------------------------------------------------------------------------

def _reference(content: bytes, path: str) -> tuple[Any, str]:
    """(interpreter, description): LiteRT's single-threaded CPU kernels, or ours when LiteRT is absent."""
    litert = _litert()
    if litert is None:
        it = tools.make_interpreter(content, [], 1, path)
        it.allocate_tensors()
        return it, "gpu_delegate CPU path, 1 thread (LiteRT is not installed)"
    try:
        ref = litert[0](model_content=content, num_threads=1)
        ref.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise RunError(f"LiteRT cannot load the model: {str(e).strip().splitlines()[-1]}") from None
    return ref, f"LiteRT {litert[1]} CPU, 1 thread"


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s are ten bytes of two's complement
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb(field: int, value: int | float | bytes, kind: str) -> bytes:
    """One protobuf field: kind "int" (varint), "double", "float" or "msg"."""
    if kind == "int":
        return _varint(field << 3) + _varint(int(value))
    if kind == "double":
        return _varint(field << 3 | 1) + struct.pack("<d", value)
    if kind == "float":
        return _varint(field << 3 | 5) + struct.pack("<f", value)
    assert isinstance(value, bytes)
    return _varint(field << 3 | 2) + _varint(len(value)) + value


def _latency_proto(us: list[int]) -> bytes:
    avg = sum(us) / len(us)
    std = int(math.sqrt(max(int(sum(float(u) * u for u in us) / len(us) - avg * avg), 0)))
    return (_pb(1, us[-1], "int") + _pb(2, max(us), "int") + _pb(3, min(us), "int") + _pb(4, sum(us), "int")
            + _pb(5, avg, "double") + _pb(6, std, "int"))


def evaluation_metrics_proto(num_runs: int, ref_us: list[int], test_us: list[int],
                             errors: list[list[float]]) -> bytes:
    """inference_diff's --output_file_path: a serialized tflite.evaluation.EvaluationStageMetrics
    {num_runs, process_metrics {inference_profiler_metrics {reference_latency, test_latency, output_errors}}}
    (tensorflow/lite/tools/evaluation/proto/evaluation_stages.proto)."""
    profiler = _pb(1, _latency_proto(ref_us), "msg") + _pb(2, _latency_proto(test_us), "msg")
    for per_run in errors:
        profiler += _pb(3, _pb(1, max(per_run), "float") + _pb(2, min(per_run), "float")
                        + _pb(3, statistics.fmean(per_run), "double")
                        + _pb(4, statistics.pstdev(per_run), "float"), "msg")
    return _pb(1, num_runs, "int") + _pb(2, _pb(5, profiler, "msg"), "msg")


def cmd_diff(args: argparse.Namespace) -> int:
    if args.model_file and args.model and args.model_file != args.model:
        raise UserError(f"two models given: --model_file={args.model_file} and {args.model}")
    path = args.model_file or args.model
    if not path:
        raise UserError("--model_file is required (the model may also be given as the first argument)")
    if not Path(path).is_file():
        raise UserError(f"--model_file={path}: " + ("not a file" if Path(path).exists() else "no such file"))
    delegate = "gpu" if args.use_gpu else "" if args.delegate == "none" else args.delegate
    if args.use_gpu and args.delegate not in ("", "gpu"):
        raise UserError(f"--use_gpu=true and --delegate={args.delegate} name two delegates")
    if delegate not in ("", "gpu"):
        raise UserError(f"--delegate={delegate}: gpu_delegate has only its GPU delegate (--delegate=gpu)")
    if args.gpu_backend and delegate != "gpu":
        raise UserError("--gpu_backend applies only with --delegate=gpu")
    for flag in ("output_file_path", "output_json"):
        _check_output(flag, getattr(args, flag))
    content = _read_model(path)
    if delegate == "gpu":
        delegates = [make_delegate(args.gpu_backend or "auto", args.gpu_precision_loss_allowed,
                                   enable_quantized_inference=args.gpu_experimental_enable_quant)]
        test_name = f"{delegates[0]!r} on {_device(delegates[0])}"
    else:
        delegates, test_name = [], "gpu_delegate CPU path (numba kernels)"
    test = tools.make_interpreter(content, delegates, args.num_interpreter_threads, path)
    test.allocate_tensors()
    ref, ref_name = _reference(content, path)
    rng = np.random.default_rng(args.seed)
    details = test.get_input_details()
    out_details = test.get_output_details()
    errors: list[list[float]] = [[] for _ in out_details]  # per output, per run: mean |test - ref|
    max_errors = [0.0 for _ in out_details]
    ref_us: list[int] = []
    test_us: list[int] = []
    ref.invoke()  # untimed: the first invoke compiles kernels (numba, GPU programs)
    test.invoke()
    for _ in _progress(range(args.num_runs), args.num_runs, "diff"):
        inputs = [tools.random_input(d["shape"], d["dtype"], rng) for d in details]
        tools.set_inputs(ref, inputs)
        tools.set_inputs(test, inputs)
        ref_us.append(tools.micros(tools.timed_invoke(ref) / 1e3))
        test_us.append(tools.micros(tools.timed_invoke(test) / 1e3))
        for k, (o, r) in enumerate(zip(tools.get_outputs(test), tools.get_outputs(ref))):
            if o.shape != r.shape:
                raise RunError(f"output {k} has shape {list(o.shape)} on the test side and {list(r.shape)} "
                               "on the reference")
            diff = np.abs(o.astype(np.float64) - r.astype(np.float64))
            errors[k].append(float(diff.mean()) if diff.size else 0.0)
            max_errors[k] = max(max_errors[k], float(diff.max()) if diff.size else 0.0)
    if args.output_file_path:
        try:
            Path(args.output_file_path).write_bytes(evaluation_metrics_proto(args.num_runs, ref_us, test_us, errors))
        except OSError as e:
            raise RunError(f"cannot write --output_file_path {args.output_file_path!r}: {e.strerror or e}") from None
    rs, ts = tools.latency_stats(ref_us), tools.latency_stats(test_us)

    def std_us(us: list[int]) -> int:
        avg = sum(us) / len(us)
        return int(math.sqrt(max(int(sum(float(u) * u for u in us) / len(us) - avg * avg), 0)))

    log(f"Num evaluation runs: {args.num_runs}")
    log(f"Reference run latency: avg={tools.cpp_number(rs['avg'])}(us), std_dev={std_us(ref_us)}(us)")
    log(f"Test run latency: avg={tools.cpp_number(ts['avg'])}(us), std_dev={std_us(test_us)}(us)")
    for k, per_run in enumerate(errors):
        log(f"OutputDiff[{k}]: avg_error={tools.cpp_number(statistics.fmean(per_run))}, "
            f"std_dev={tools.cpp_number(statistics.pstdev(per_run))}")
    # ours, after inference_diff's lines
    print(f"gpu_delegate: model: {path}")
    print(f"gpu_delegate: reference: {ref_name}")
    print(f"gpu_delegate: test: {test_name}, {args.num_interpreter_threads} thread(s)")
    if delegate == "gpu":
        counts = tools.backend_counts(test)
        print(f"gpu_delegate: test nodes: {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}")
    rows = [[k, d["name"], list(map(int, d["shape"])), tools.cpp_number(statistics.fmean(errors[k])),
             tools.cpp_number(max_errors[k])] for k, d in enumerate(out_details)]
    print(tools.markdown_table(["output", "name", "shape", "avg abs error", "max abs error"], rows))
    if args.output_file_path:
        print(f"gpu_delegate: metrics proto written to {args.output_file_path}")
    _write_json(args.output_json, {
        "model": path, "reference": ref_name, "test": test_name, "num_runs": args.num_runs,
        "reference_latency_ms": {k: v / 1e3 if k != "count" else v for k, v in rs.items()},
        "test_latency_ms": {k: v / 1e3 if k != "count" else v for k, v in ts.items()},
        "outputs": [{"index": k, "name": d["name"], "avg_error": statistics.fmean(errors[k]),
                     "std_dev": statistics.pstdev(errors[k]), "max_abs_error": max_errors[k]}
                    for k, d in enumerate(out_details)]})
    return 0


# -- inspect -------------------------------------------------------------------------------------------------

def _quant_text(q: Quantization | None) -> str:
    if q is None:
        return "-"
    if q.per_channel:
        return f"per-channel, {q.scale.size} scales on axis {q.axis}"
    s, z = q.scalar()
    return f"scale={s:.6g} zero_point={z}"


def _shape_text(t: Tensor) -> str:
    sig = t.shape_signature
    if sig is not None and tuple(sig) != tuple(t.shape):
        return f"{list(t.shape)} (signature {list(sig)})"
    return str(list(t.shape))


def _mmacs(n: int) -> str:
    return f"{n / 1e6:.3f} M"


def cmd_inspect(args: argparse.Namespace) -> int:

    if args.model:
        content, label = _read_model(args.model), args.model
    else:
        content, label = tools.demo_model(args.demo_input_size, args.demo_width)
    model = read_model(content, label)
    graph = model.main
    print(f"Model: {label} ({len(content)} bytes, schema version {model.version}, {len(model.subgraphs)} "
          f"subgraph{'s' if len(model.subgraphs) > 1 else ''})")
    if model.description:
        print(f"Description: {model.description}")
    for s in model.signatures:
        print(f"Signature {s.key!r}: inputs {list(s.inputs)} -> outputs {list(s.outputs)}")
    for title, ids in (("Inputs", graph.inputs), ("Outputs", graph.outputs)):
        print(f"\n{title}:")
        print(tools.markdown_table(["index", "name", "shape", "dtype", "quantization"],
                     [[i, graph.tensors[i].name, _shape_text(graph.tensors[i]),
                       graph.tensors[i].type_name.lower() or graph.tensors[i].dtype.name,
                       _quant_text(graph.tensors[i].quant)] for i in ids]))

    placement: dict[int, str] = {}
    reasons: dict[int, str] = {}
    partitions: list[list[int]] = []
    if args.gpu_backend:
        it = tools.make_interpreter(content, [make_delegate(args.gpu_backend)], path=args.model)
        placement = {d["index"]: d["backend"] for d in it.get_ops_details()}
        reasons = it.cpu_reasons()
        partitions = _partitions(it)
    rows = []
    macs_by_op: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for node in graph.nodes:
        op = get_op(node.op)
        macs = op.macs(node, graph) if op is not None else 0
        macs_by_op[node.op][0] += 1
        macs_by_op[node.op][1] += macs
        where = placement.get(node.index, "cpu" if op is not None else "none")
        note = reasons.get(node.index, "") if where == "cpu" else ""
        if op is None and where == "none":
            note = "no kernel implements this op"
        outs = ", ".join(str(list(graph.tensors[t].shape)) for t in node.outputs)
        rows.append([node.index, node.op + (" (custom)" if node.custom else ""), outs, where,
                     _mmacs(macs), note])
    print(f"\nNodes ({len(graph.nodes)}):")
    print(tools.markdown_table(["#", "op", "output shape", "runs on", "MACs", "why on the CPU"], rows))
    if args.gpu_backend:
        counts = Counter(placement.values())
        print(f"\nPlacement: {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}; "
              f"{len(partitions)} delegated partition{'' if len(partitions) == 1 else 's'}")
        for k, nodes in enumerate(partitions):
            print(f"  partition {k}: {len(nodes)} nodes ({_ranges(nodes)})")
    total = sum(m for _, m in macs_by_op.values())
    print("\nWork by op type:")
    print(tools.markdown_table(["op", "nodes", "MACs", "%"],
                 [[name, n, _mmacs(m), f"{100 * m / total:.1f}" if total else "-"]
                  for name, (n, m) in sorted(macs_by_op.items(), key=lambda kv: -kv[1][1])]))
    print(f"Total: {_mmacs(total)} MACs per inference")
    return 0


def _partitions(it: Interpreter) -> list[list[int]]:
    # The interpreter's execution plan holds each delegated partition as one step with a `.partition`.
    return [list(step.partition.nodes) for step in it._steps if hasattr(step, "partition")]


def _ranges(nodes: list[int]) -> str:
    """The nodes as sorted ranges: [0, 1, 2, 3, 7, 9, 10] -> "0-3, 7, 9-10"."""
    nodes = sorted(nodes)
    spans: list[str] = []
    start = nodes[0]
    for a, b in zip(nodes, [*nodes[1:], None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}-{a}")
            if b is not None:
                start = b
    return ", ".join(spans)


def cmd_cache(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UserError(f"{args.directory}: not a directory")
    if args.action == "clear":
        removed, kept = Cache.clear(directory)
        print(f"removed {len(removed)} cache file(s) from {directory}")
        for e in kept:
            print(f"kept {_printable(e['file'])}: it {e['error']}")
        return 0
    entries = Cache.entries(directory)
    print("| file | size | token | backend | created | valid |")
    print("|---|---:|---|---|---|---|")
    for e in entries:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["created"])) if e.get("created") else "-"
        verdict = "yes" if e["valid"] else f"no: {'' if e['ours'] else 'foreign: '}it {e.get('error', '')}"
        print(f"| {_printable(e['file'])} | {e['size']} | {_printable(e.get('token') or '-')} | "
              f"{_printable(e.get('backend') or '-')} | {created} | {verdict} |")
    print(f"{len(entries)} file(s), {sum(e['size'] for e in entries)} bytes")
    return 0


def _printable(text: object) -> str:
    """A name from a directory or a file's header as a table cell: no control characters, no cell breaks."""
    return "".join(c if c.isprintable() and c != "|" else "?" for c in str(text))


# -- entry point ---------------------------------------------------------------------------------------------

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "benchmark": cmd_benchmark, "diff": cmd_diff, "inspect": cmd_inspect, "cache": cmd_cache}


def _show_preparation() -> None:
    """Show what preparing a GPU partition is doing: a terminal gets progress.Progress's bar, anything else
    (a log file, a pipe) its INFO lines ("gpu_delegate cl: compiling 34 kernels")."""
    from .progress import log, stderr_is_terminal

    if stderr_is_terminal() or any(isinstance(h, _StderrLines) for h in log.handlers):
        return
    handler = _StderrLines()
    handler.setFormatter(logging.Formatter("gpu_delegate %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


class _StderrLines(logging.StreamHandler):
    """Log lines to whatever sys.stderr is when they are written (a test may swap it between calls)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _show_preparation()
    try:
        args = build_parser().parse_args(argv)
        args.given = _given(argv)
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `gpu-delegate inspect M | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail
        return 141
    except UserError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_USAGE
    except (RunError, ModelError, DelegateError, ValueError, OSError) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
