"""What the LiteRT bridge (gpu_delegate/litert.py) costs, and how a model runs through it.

    python bench/litert_bridge.py [--runs N] [--backend cl|gl] [--models]

1. Per-invoke overhead on a tiny model (one float32 ADD of 16 values): LiteRT alone, LiteRT with a no-op
   delegate kernel (the bridge's own cost), LiteRT with the numpy ADD/SUB delegate of examples/, and that
   delegate in gpu_delegate.Interpreter. Medians of repeated batches.
2. MobileNetV2 (../shared/models) latency: LiteRT + GpuDelegate vs gpu_delegate.Interpreter + GpuDelegate,
   with LiteRT alone for scale, and how many nodes the delegate took in each.
3. With --models: every shared model through LiteRT + GpuDelegate (cl and gl) against LiteRT alone.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT

import gpu_delegate as gd
from gpu_delegate.litert import bridge_of
from gpu_delegate.tflite import ModelBuilder

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"


def _example():
    spec = importlib.util.spec_from_file_location("add_sub_delegate", ROOT / "examples" / "add_sub_delegate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class NoOpDelegate(gd.SimpleDelegate):
    """Takes every ADD and does nothing with it: what remains is the bridge."""

    name = "NoOp"

    def is_node_supported(self, node, graph):
        return node.op == "ADD"

    def create_kernel(self):
        class Kernel(gd.DelegateKernel):
            def invoke(self, tensors):
                pass

        return Kernel()


def tiny_model() -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", [1, 16])
    y = mb.tensor("y", [1, 16])
    mb.op("ADD", [x, mb.const("c", np.arange(16, dtype=np.float32).reshape(1, 16))], [y])
    mb.output(y)
    return mb.build()


def prepared(it, inputs: list[np.ndarray]):
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it


def interleaved(its: dict[str, object], batch: int, rounds: int) -> dict[str, float]:
    """Median over ``rounds`` of the mean time of one invoke in a batch of ``batch``, in microseconds. The
    interpreters take turns, round after round, so that a machine whose load changes treats them alike."""
    times: dict[str, list[float]] = {label: [] for label in its}
    for _ in range(rounds):
        for label, it in its.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                it.invoke()
            times[label].append((time.perf_counter() - t0) / batch * 1e6)
    return {label: statistics.median(ts) for label, ts in times.items()}


def overhead_table(rounds: int) -> list[str]:
    ex = _example()
    content = tiny_model()
    x = [np.ones((1, 16), np.float32)]
    delegates = {"no-op": NoOpDelegate(), "numpy": ex.AddSubDelegate()}
    rows = {
        "LiteRT alone": LiteRT(model_content=content),
        "LiteRT + no-op delegate kernel (the bridge alone)": LiteRT(model_content=content,
                                                                    experimental_delegates=[delegates["no-op"]]),
        "LiteRT + numpy ADD/SUB delegate": LiteRT(model_content=content, experimental_delegates=[delegates["numpy"]]),
        "gpu_delegate.Interpreter + numpy ADD/SUB delegate": gd.Interpreter(
            model_content=content, experimental_delegates=[ex.AddSubDelegate()]),
    }
    taken = {k: sum(len(p) for p in bridge_of(d).last_partitions) for k, d in delegates.items()}
    assert taken == {"no-op": 1, "numpy": 1}, f"the tiny model's ADD must be delegated, got {taken}"
    results = interleaved({label: prepared(it, x) for label, it in rows.items()}, 1000, rounds)
    base = results["LiteRT alone"]
    lines = [f"| tiny model (1 ADD, 16 floats) | µs per invoke (median of {rounds} x 1000) | vs LiteRT alone |",
             "|---|---|---|"]
    lines += [f"| {label} | {us:.1f} | {us - base:+.1f} µs |" for label, us in results.items()]
    return lines


def mobilenet_table(backend: str, runs: int, warmup: int) -> list[str]:
    path = MODELS / "mobilenet" / "mobilenet_v2_224_fp32.tflite"
    if not path.exists():
        return [f"(MobileNetV2 skipped: {path} is absent)"]
    x = [np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32)]
    its, rows = {}, {}
    for label, make in (
            ("LiteRT alone (XNNPACK, 1 thread)", lambda: (LiteRT(model_path=str(path)), None)),
            (f"LiteRT + GpuDelegate({backend})", lambda: _with_delegate(LiteRT, path, backend)),
            (f"gpu_delegate.Interpreter + GpuDelegate({backend})", lambda: _with_delegate(gd.Interpreter, path,
                                                                                            backend))):
        t0 = time.perf_counter()
        it, delegate = make()
        its[label] = prepared(it, x)
        prepare_s = time.perf_counter() - t0
        for _ in range(warmup):
            it.invoke()
        if delegate is None:
            taken = "-"
        elif isinstance(it, gd.Interpreter):
            taken = str(sum(d["backend"] != "cpu" for d in it.get_ops_details()))
        else:
            taken = str(sum(len(p) for p in bridge_of(delegate).last_partitions))
        rows[label] = (taken, prepare_s)
    ms = {label: us / 1e3 for label, us in interleaved(its, 1, runs).items()}
    lines = [f"| MobileNetV2 fp32, batch 1 | nodes on the delegate | prepare s | ms per invoke (median of {runs}) |",
             "|---|---|---|---|"]
    lines += [f"| {label} | {taken} | {prepare_s:.2f} | {ms[label]:.1f} |" for label, (taken, prepare_s)
              in rows.items()]
    return lines


def _with_delegate(interpreter, path: Path, backend: str):
    d = gd.GpuDelegate(backend=backend)
    return interpreter(model_path=str(path), experimental_delegates=[d]), d


def models_table() -> list[str]:
    """Every shared model, with probes (intermediate float tensors made outputs, see tests/test_litert_bridge.py)
    since the MobileNets' final outputs are the same 0.001 whatever the weights."""
    sys.path.insert(0, str(ROOT))  # run as a script: the repository root holds the tests package
    from tests.reference import assert_matches, random_inputs, run
    from tests.test_litert_bridge import with_probes

    lines = ["| model | backend | nodes taken (LiteRT / ours) | outputs: max abs error | probes: max error / "
             "max\\|ref\\| | outputs within tolerance |", "|---|---|---|---|---|---|"]
    for path in sorted(MODELS.glob("*/*.tflite")):
        content, probes = with_probes(path.read_bytes())
        xs = random_inputs(content)
        ref = run(LiteRT(model_content=content), xs)
        n_out = len(ref) - len(probes)
        for backend in ("cl", "gl"):
            d = gd.GpuDelegate(backend=backend)
            out = run(LiteRT(model_content=content, experimental_delegates=[d]), xs)
            theirs = sorted(i for p in bridge_of(d).last_partitions for i in p)
            mine = [o["index"] for o in gd.Interpreter(model_content=content, experimental_delegates=[
                gd.GpuDelegate(backend=backend)]).get_ops_details() if o["backend"] != "cpu"]
            err = max((_abs_err(o, r) for o, r in zip(out[:n_out], ref[:n_out])), default=0.0)
            probe_err = max((_abs_err(o, r) / (float(np.max(np.abs(r))) or 1.0)
                             for o, r in zip(out[n_out:], ref[n_out:])), default=None)
            try:
                assert_matches(out[:n_out], ref[:n_out])
                ok = "yes"
            except AssertionError as e:
                ok = f"NO: {e}"
            lines.append(f"| {path.name} | {backend} | {len(theirs)} / {len(mine)}"
                         f"{'' if theirs == mine else ' (differ!)'} | {err:.3g} | "
                         f"{'-' if probe_err is None else f'{probe_err:.2g} ({len(probes)})'} | {ok} |")
    return lines


def _abs_err(o: np.ndarray, r: np.ndarray) -> float:
    return float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))) if r.size else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=15, help="batches of 1000 invokes for the overhead table")
    ap.add_argument("--backend", default="cl", choices=["cl", "gl"])
    ap.add_argument("--models", action="store_true", help="also check every shared model (cl and gl)")
    args = ap.parse_args()
    print("\n".join(overhead_table(args.rounds)), end="\n\n")
    print("\n".join(mobilenet_table(args.backend, args.runs, args.warmup)))
    if args.models:
        print()
        print("\n".join(models_table()))


if __name__ == "__main__":
    main()
