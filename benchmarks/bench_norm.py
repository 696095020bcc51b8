"""The compiled row normalisation (native/_norm.c) against the numpy paths it replaces.

    python benchmarks/bench_norm.py [--shapes 128x128,197x192,...] [--repeat 200]

Per row shape (BERT-tiny 128x128, ViT-tiny 197x192, BERT-base 128x768, a Llama decode
step 1x2048 and a 32-token prompt 32x2048): microseconds per call of the op kernels
LayerNormalization (nn_norm.layer_norm, gamma and beta) and the com.microsoft
SkipSimplifiedLayerNormalization (contrib_ms, skip and bias added first, their sum an
output), each on its numpy path (the compiled kernel off) and through the kernel, and
the bare kernel call (row_norm.normalize); best of --repeat calls, one thread.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels import contrib_ms, nn_norm, row_norm

SHAPES = "128x128,197x192,128x768,1x2048,32x2048"


def best_us(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    if not row_norm.enabled():
        raise SystemExit("the compiled kernel is off or not built (ONNXVIZ_NATIVE, setup.py)")
    level = native.level()
    print(f"level {native.LEVEL_NAMES[level] if level is not None else 'off'}; us per call")
    head = f"{'shape':>9} {'op':<24} {'numpy':>9} {'kernel':>9} {'ratio':>6}"
    print(head)
    rng = np.random.default_rng(0)
    for spec in args.shapes.split(","):
        _shape(spec, args.repeat, rng)


def _shape(spec: str, repeat: int, rng: np.random.Generator) -> None:
    rows, cols = (int(v) for v in spec.split("x"))
    x = rng.standard_normal((1, rows, cols)).astype(np.float32)
    skip = rng.standard_normal((1, rows, cols)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("LayerNormalization", lambda: nn_norm.layer_norm(x, g, b)),
        (
            "SkipSimplifiedLayerNorm",
            lambda: contrib_ms.skip_simplified_layer_norm(x, skip, g, b, epsilon=1e-6),
        ),
    ]
    for name, fn in cases:
        fast = best_us(fn, repeat)
        with mock.patch.object(row_norm, "_NORM", None):
            slow = best_us(fn, repeat)
        print(f"{spec:>9} {name:<24} {slow:9.1f} {fast:9.1f} {slow / fast:5.1f}x")
    bare = best_us(lambda: row_norm.normalize(x, 2, 1e-5, gamma=g, beta=b), repeat)
    print(f"{spec:>9} {'(row_norm.normalize)':<24} {'':>9} {bare:9.1f}")


if __name__ == "__main__":
    main()
