"""What passing shapes as run-time arguments would cost, side by side on OpenCL (issue 17): MobileNetV2's layers
of one kernel (conv2d_1x1 by default) compiled as today, shapes baked in as #defines, and again with the
geometry (B, H, W, S of each tensor, the grid, PIX_BLOCKS) as kernel arguments, so that layers of different sizes
could share a program. Reported: how many distinct kernels the model would need either way (channel counts and
the work-group size stay part of a kernel: #if tests and the launch read them), and the run time of every layer,
in interleaved rounds on the same buffers.

    python bench/runtime_shapes.py [--model M.tflite] [--kernel conv2d_1x1]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "mobilenet" / "mobilenet_v2_224_fp32.tflite"
GEOMETRY = ("src_B", "src_H", "src_W", "src_S", "dst_B", "dst_H", "dst_W", "dst_S", "GRID_X", "GRID_Y", "GRID_Z",
            "PIX_BLOCKS")
SHAPE_DEFINES = {"PIX_BLOCKS", "PT", "PL", "DST_BLOCKS", "COUNT", "DST_N4"}


def layer_specs(model: Path, kernel: str) -> list:
    """(spec, work-group size) of every call of ``kernel`` in the model's plan on OpenCL."""
    import gpu_delegate as gd
    from gpu_delegate.runner import kernel_spec

    d = gd.GpuDelegate(backend="cl")
    it = gd.Interpreter(model_path=str(model), experimental_delegates=[d])
    it.allocate_tensors()
    (runner,) = [s.kernel.runner for s in it._steps if hasattr(s, "kernel")]
    out = []
    for call in runner.plan.kernels:
        spec, _ = kernel_spec(call, runner.plan, runner.precision, "cl")
        if spec.name == kernel:
            out.append((spec, d.backend.local_size(spec)))
    return out


def with_runtime_geometry(text: str, entry: str) -> tuple[str, list[int]]:
    """``text`` (a kernel's section, codegen.opencl_source without the prelude) with the GEOMETRY defines read
    from int kernel arguments (passed on to helpers through BUFS_DECL / BUFS), and their values."""
    values, names = [], []
    for name in GEOMETRY:
        m = re.search(rf"^#define {name} (\S+)$", text, re.M)
        if m is None:  # a define this kernel does not have
            continue
        values.append(int(m.group(1)))
        names.append(name)
        text = text.replace(m.group(0), f"#define {name} rt_{name}")
    ints = "".join(f", int rt_{n}" for n in names)
    text = re.sub(r"^(#define BUFS_DECL .*)$", lambda m: m.group(1) + ints, text, flags=re.M)
    text = re.sub(r"^(#define BUFS .*)$", lambda m: m.group(1) + "".join(f", rt_{n}" for n in names), text,
                  flags=re.M)
    text = text.replace(f"__kernel void {entry}(", f"__kernel void {entry}({ints[2:]}, ", 1)
    return text, values


def main() -> None:
    import pyopencl as cl

    from gpu_delegate.backends import codegen

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--kernel", default="conv2d_1x1")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    layers = layer_specs(args.model, args.kernel)

    def kernel_key(spec, local, baked: bool) -> tuple:
        defines = spec.defines if baked else {k: v for k, v in spec.defines.items() if k not in SHAPE_DEFINES}
        shapes = [a.shape if baked else (a.shape[3] % 4 == 0) if a.shape else None for a in spec.args]
        return spec.name, tuple(sorted(defines.items())), tuple(shapes), local, spec.helpers

    print(f"{args.kernel}: {len(layers)} layers; distinct kernels with shapes baked in "
          f"{len({kernel_key(s, lo, True) for s, lo in layers})}, with every shape at run time "
          f"{len({kernel_key(s, lo, False) for s, lo in layers})}")

    warnings.simplefilter("ignore")
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    prelude = codegen.kernel_text("opencl/prelude.inc.cl")
    buffers = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 32 << 20) for _ in range(8)]
    launches: dict[str, list] = {"baked": [], "run time": []}
    for j, (spec, local) in enumerate(layers):
        entry = f"k{j}"
        baked = codegen.opencl_source(spec, entry, prelude=False)
        runtime, values = with_runtime_geometry(baked, entry)
        size = tuple(-(-g // lo) * lo for g, lo in zip(spec.grid, local))
        for kind, text, ints in (("baked", baked, []), ("run time", runtime, values)):
            program = cl.Program(ctx, prelude + text).build("-cl-std=CL1.2 -w")
            kernel = cl.Kernel(program, entry)
            kernel.set_args(*[np.int32(v) for v in ints], *buffers[:len(spec.args)])
            launches[kind].append((kernel, size, local))
            cl.enqueue_nd_range_kernel(queue, kernel, size, local)  # the first launch compiles
            queue.finish()
    times: dict[str, list[list[float]]] = {k: [[] for _ in layers] for k in launches}
    for r in range(args.rounds):
        for j in range(len(layers)):
            for kind in (("baked", "run time") if r % 2 == 0 else ("run time", "baked")):
                kernel, size, local = launches[kind][j]
                t = time.perf_counter()
                for _ in range(3):
                    cl.enqueue_nd_range_kernel(queue, kernel, size, local)
                queue.finish()
                times[kind][j].append((time.perf_counter() - t) / 3)
    med = {k: [statistics.median(ts) for ts in v] for k, v in times.items()}
    ratios = [rt / b for rt, b in zip(med["run time"], med["baked"])]
    print(f"run time of the {len(layers)} layers: baked {sum(med['baked']) * 1e3:.2f} ms, shapes at run time "
          f"{sum(med['run time']) * 1e3:.2f} ms ({sum(med['run time']) / sum(med['baked']):.3f}); per layer: median "
          f"{statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
