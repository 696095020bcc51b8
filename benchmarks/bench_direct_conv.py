"""The compiled direct conv (native/_conv.c) against the path nn_conv runs today, on the
plain (one group) conv shapes of the benchmark families, one thread, medians.

Per shape: ``current`` is nn_conv.conv_core with the weight wrapped as the fused runs
wrap it (ConvWeight: Winograd, shifted slices, im2col, whatever _conv_dispatch picks)
on an NCHW input, bias included; ``nhwc`` is the direct kernel on a channels-last input
into a channels-last output (a conv inside a channels-last chain); ``nchw`` is the
direct kernel reading and writing NCHW itself (the input rows transposed into its
row buffer, the output written plane by plane): what the NCHW Conv path runs.

    python benchmarks/bench_direct_conv.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from onnxviz.runtime.kernels.nn_conv import (
    ConvWeight,
    conv_core,
    conv_geometry,
    direct_lanes,
    native_direct,
    pack_direct,
)

# (label, C, M, H=W, kernel, stride, pad)
SHAPES: list[tuple[str, int, int, int, int, int, int]] = [
    ("r18 stem 7x7/2", 3, 32, 224, 7, 2, 3),
    ("r18 3x3 56 c32", 32, 32, 56, 3, 1, 1),
    ("r18 3x3/2 56 c32-64", 32, 64, 56, 3, 2, 1),
    ("r18 3x3 28 c64", 64, 64, 28, 3, 1, 1),
    ("r18 3x3/2 28 c64-128", 64, 128, 28, 3, 2, 1),
    ("r18 3x3 14 c128", 128, 128, 14, 3, 1, 1),
    ("r18 3x3/2 14 c128-256", 128, 256, 14, 3, 2, 1),
    ("r18 3x3 7 c256", 256, 256, 7, 3, 1, 1),
    ("r18 1x1/2 56 c32-64", 32, 64, 56, 1, 2, 0),
    ("r18 1x1/2 28 c64-128", 64, 128, 28, 1, 2, 0),
    ("r18 1x1/2 14 c128-256", 128, 256, 14, 1, 2, 0),
    ("r50 stem 7x7/2 c64", 3, 64, 224, 7, 2, 3),
    ("r50 3x3 56 c64", 64, 64, 56, 3, 1, 1),
    ("r50 3x3/2 56 c128", 128, 128, 56, 3, 2, 1),
    ("r50 3x3 28 c128", 128, 128, 28, 3, 1, 1),
    ("r50 3x3/2 28 c256", 256, 256, 28, 3, 2, 1),
    ("r50 3x3 14 c256", 256, 256, 14, 3, 1, 1),
    ("r50 3x3/2 14 c512", 512, 512, 14, 3, 2, 1),
    ("r50 3x3 7 c512", 512, 512, 7, 3, 1, 1),
    ("r50 1x1/2 56 c256-512", 256, 512, 56, 1, 2, 0),
    ("unet 3x3 128 c3-16", 3, 16, 128, 3, 1, 1),
    ("unet 3x3 128 c16", 16, 16, 128, 3, 1, 1),
    ("unet 3x3 64 c16-32", 16, 32, 64, 3, 1, 1),
    ("unet 3x3 64 c32", 32, 32, 64, 3, 1, 1),
    ("unet 3x3 32 c64", 64, 64, 32, 3, 1, 1),
    ("unet 3x3 16 c128", 128, 128, 16, 3, 1, 1),
    ("unet 3x3 128 c32-16", 32, 16, 128, 3, 1, 1),
]


def median_us(fn: Callable[[], object], repeat: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(
    c: int, m: int, size: int, k: int, s: int, p: int, lanes: int, repeat: int
) -> list[float]:
    """Median us of (current, nhwc, nchw) for one shape (outputs checked to agree)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((m, c, k, k)) / math.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    kernel, strides, dil, pads, out_shape = conv_geometry(
        x, w, "NOTSET", None, None, [p] * 4, [s, s]
    )
    packed = ConvWeight(w)
    wp = pack_direct(w, lanes)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    def current() -> np.ndarray:
        return conv_core(x, w, 1, kernel, strides, dil, pads, out_shape, b, packed)

    def nhwc() -> np.ndarray:
        out = np.empty((1, *out_shape, m), np.float32)
        native_direct(xl, wp, lanes, m, kernel, b, None, out, strides, dil, pads)
        return out

    def nchw() -> np.ndarray:
        out = np.empty((1, m, *out_shape), np.float32)
        native_direct(
            x, wp, lanes, m, kernel, b, None, out, strides, dil, pads, x_first=True, out_first=True
        )
        return out

    ref = current()
    assert np.allclose(ref, nchw(), rtol=1e-3, atol=1e-3)
    assert np.allclose(ref, nhwc().transpose(0, 3, 1, 2), rtol=1e-3, atol=1e-3)
    return [median_us(f, repeat) for f in (current, nhwc, nchw)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    lanes = direct_lanes()
    if lanes is None:
        raise SystemExit("the compiled _conv is off or not built")
    print(f"{'shape':26} {'current':>9} {'nhwc':>9} {'nchw':>9}  (us, lanes {lanes})")
    with threadpool_limits(1):
        for label, c, m, size, k, s, p in SHAPES:
            t = measure(c, m, size, k, s, p, lanes, args.repeat)
            print(f"{label:26} {t[0]:9.0f} {t[1]:9.0f} {t[2]:9.0f}", flush=True)


if __name__ == "__main__":
    main()
