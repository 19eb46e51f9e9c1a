"""Division and contraction on each backend's device, against numpy's float32.

kernels/README.md's "Numerics" promises bit-identical CL and GL results for kernels of `+ - * /`, comparisons and
the dialect's exact helpers, where the drivers round division correctly and contract nothing the dialect does not
ask for. This counts, over 2^20 random values on each backend's device: divisions not correctly rounded (and their
largest error in ulp), plain `a * b + c` that came back fused, and the dialect's `FMA` that did (OpenCL fuses it
where the device has the instruction; GLSL may or may not). On PoCL and llvmpipe: 0%, 0%, and 100% / 0%.

    python bench/gpu_numerics.py [--backends cl,gl]
"""

from __future__ import annotations

import argparse

import numpy as np

from gpu_delegate.backends import Arg, KernelSpec, create_backend

BODY = """
int i = GID_X;
FLT4 a = a_read(i);
FLT4 b = b_read(i);
FLT4 c = c_read(i);
o_write(3 * i + 0, a / b);
o_write(3 * i + 1, a * b + c);
o_write(3 * i + 2, FMA(a, b, c));
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="cl,gl")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = 1 << 18
    a = rng.uniform(-100, 100, (n, 4)).astype(np.float32)
    b = rng.uniform(0.01, 10, (n, 4)).astype(np.float32)
    c = -(a * b)  # a fused multiply-add keeps the product's rounding error, a separate one gives 0
    quotient = a / b
    fused = (a.astype(np.float64) * b + c).astype(np.float32)
    for name in args.backends.split(","):
        backend = create_backend(name)
        bufs = [backend.alloc(n) for _ in range(3)] + [backend.alloc(3 * n)]
        for buf, v in zip(bufs, (a, b, c)):
            backend.upload(buf, v)
        spec = KernelSpec("numerics", BODY, [Arg("a", "in"), Arg("b", "in"), Arg("c", "in"), Arg("o", "out")],
                          (n, 1, 1), {})
        backend.compile(spec)(bufs)
        o = backend.download(bufs[3]).reshape(n, 3, 4)
        ulps = np.abs(o[:, 0].view(np.int32).astype(np.int64) - quotient.view(np.int32))
        print(f"{name} ({backend.device_info()['name']}): division not correctly rounded {np.mean(ulps != 0):.2%} "
              f"(max {ulps.max()} ulp); a * b + c fused {np.mean((o[:, 1] == fused) & (fused != 0)):.2%}; "
              f"FMA fused {np.mean((o[:, 2] == fused) & (fused != 0)):.2%}")
        backend.close()


if __name__ == "__main__":
    main()
