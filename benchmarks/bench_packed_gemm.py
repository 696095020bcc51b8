"""Which products should run the compiled GEMM by a prepacked weight (runtime/native/
_sgemm.c through kernels/packed_gemm.py) rather than OpenBLAS?  The measurement behind
packed_gemm.use_for, to run again when the kernel, the CPU or OpenBLAS change.

    python benchmarks/bench_packed_gemm.py [--rounds 15]
                                           [--shapes resnet,bert,nchw,cold,small,transposed,few]
    ONNXVIZ_NATIVE=avx2 python benchmarks/bench_packed_gemm.py     # a lower level's paths

Shapes: ResNet-50's 1x1 convs at batch 1 (rows = H*W: 3136, 784, 196, 49; the (C, M)
pairs of its bottlenecks) and BERT-base's products by constant weights (128 and 256
tokens; 768x768, 768x3072, 3072x768).  For each, 1 thread, medians of alternating
rounds (the machine is shared: alternating keeps a slow moment from landing on one side):

* ``plain``: ``a @ w`` by OpenBLAS (blas.gemm) against the kernel;
* ``fused``: what the pointwise conv of a bottleneck's last 1x1 does now (residual +
  bias written into the output, OpenBLAS accumulating onto it, then Relu) against the
  kernel with bias, residual and Relu in its epilogue;
* ``nchw``: the ResNet shapes as an NCHW conv computes them (weight by image,
  nn_conv._products_with_bias against gemm_left; its fused column without the Relu,
  which the conv chain applies in a pass of its own there);
* ``cold``: a decoder's products of few rows (GPT-2's and a Llama's weights), each call
  by another copy of the weight from a set larger than the caches, as a decoder's step
  reads each of its weights from memory once (the plain product only);
* ``transposed``: a 1x1 conv reading an NCHW image into a channels-last output (a UNet's
  skip convs after a Concat, Inception's 1x1s after one), M pixels, K input and N output
  channels: OpenBLAS's weight by image (the NCHW conv's product, N x M) against gemm
  given the image as A's transpose (a_trans: copied into rows first when it fits in L2,
  else tile by tile); fused: with the bias and Relu (OpenBLAS's bias written first, its
  Relu a pass after);
* ``few``: 1 to 8 rows by a recurrent layer's or a decoder's weights (an LSTMCell's
  4 x 128 -> 512 step, 256 x 1024, 768 x 768, 768 x 3072), as ``plain`` and ``fused``:
  the few-row tiles (at AVX2 the wide tile for 1-2 rows, tiles of only their rows for
  3-5, the 6-row tile and one of those past 6);
* ``small``: products of a few thousand multiply-adds (a tiny decoder's, a token's by a
  small weight) up to just past packed_gemm.small_macs(), as a node calls them: numpy's
  matmul making its result against the held product (packed_gemm.held_product, C from
  call to result); with a bias: matmul then ``+=`` the bias against the held product
  with the bias in its epilogue.  Fractions of a microsecond here: two decimals.

The ratio is ours / OpenBLAS's (below 1: the kernel is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

RESNET = [
    (3136, 64, 64), (3136, 64, 256), (3136, 256, 64), (3136, 256, 128),
    (784, 128, 512), (784, 512, 128), (784, 256, 512), (784, 512, 256),
    (196, 256, 1024), (196, 1024, 256), (196, 512, 1024), (196, 1024, 512),
    (49, 512, 2048), (49, 2048, 512), (49, 1024, 2048),
]  # fmt: skip
BERT = [
    (128, 768, 768), (128, 768, 3072), (128, 3072, 768),
    (256, 768, 768), (256, 768, 3072), (256, 3072, 768),
]  # fmt: skip
COLD = [
    (1, 768, 3072), (8, 768, 3072), (16, 768, 3072), (16, 3072, 768), (32, 768, 3072),
    (16, 2048, 5632), (32, 2048, 5632),
]  # fmt: skip
SMALL = [
    (1, 64, 128), (4, 64, 128), (4, 128, 64), (16, 64, 32), (1, 128, 256), (2, 128, 128),
    (7, 64, 64), (1, 256, 128), (32, 32, 32), (2, 256, 64), (1, 256, 256), (8, 64, 128),
    (4, 128, 128), (2, 256, 256), (16, 64, 128), (1, 128, 512), (1, 128, 384),
    (1, 256, 512), (2, 128, 512), (4, 128, 256), (8, 128, 128), (1, 128, 1024),
    (4, 256, 256), (1, 512, 512),
]  # fmt: skip
FEW = [
    (m, k, n) for k, n in ((128, 512), (256, 1024), (768, 768), (768, 3072)) for m in range(1, 9)
]
# Bytes of weight copies a cold product cycles through: beyond a server's L3.
COLD_BYTES = 768 << 20


def _time(fns: list[Callable[[], None]], rounds: int) -> list[float]:
    """Median CPU-clock microseconds of each of ``fns``, called in turn each round."""
    for f in fns:
        f()
    got: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            got[i].append(time.perf_counter() - t0)
    return [statistics.median(g) * 1e6 for g in got]


def _right(mod: Any, m: int, k: int, n: int, rounds: int) -> list[float]:
    """(OpenBLAS, ours) for the product alone, then (OpenBLAS, ours) with the epilogue of
    a bottleneck's last 1x1 conv (bias, residual, Relu): A (m x k) by the weight (k x n)."""
    from onnxviz.runtime.kernels import blas, packed_gemm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    p = packed_gemm.pack(w, mod)

    def blas_fused() -> None:
        np.add(res, bias, out=out)
        blas.gemm(a, w, out, accumulate=True)
        np.maximum(out, 0, out=out)

    def ours_fused() -> None:
        packed_gemm.matmul_packed(mod, a, p, out, bias=bias, addend=res, act=packed_gemm.ACT_RELU)

    return _time(
        [
            lambda: blas.gemm(a, w, out),
            lambda: packed_gemm.matmul_packed(mod, a, p, out),
            blas_fused,
            ours_fused,
        ],
        rounds,
    )


def _not_routed(*args: Any) -> None:
    raise RuntimeError("the held product did not take the call")


def _small(mod: Any, m: int, k: int, n: int, rounds: int) -> list[float]:
    """(numpy, held product) plain, then with a bias (module docstring, ``small``)."""
    from onnxviz.runtime.kernels import packed_gemm

    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    p = packed_gemm.pack(w, mod)

    def held(bias: np.ndarray | None) -> Any:
        # held_product's object, told to take these rows whatever small_macs() says (the
        # shapes past it are here to show where it should stand).
        return mod.product(
            p.data, p.offset, k, n, p.nr, bias, m, m, False, 0, (), _not_routed, np.ndarray, np.empty,
            np.dtype(np.float32),
        )  # fmt: skip

    plain, biased = held(None), held(bias)

    def blas_biased() -> None:
        y = np.matmul(a, w)
        y += bias

    return _time(
        [lambda: np.matmul(a, w), lambda: plain(a), blas_biased, lambda: biased(a)], rounds
    )


def _cold(mod: Any, m: int, k: int, n: int, rounds: int) -> list[float]:
    """(OpenBLAS, ours) for the product alone, each call by the next of enough copies of
    the weight that none is in a cache when its turn comes; no fused columns (nan)."""
    from onnxviz.runtime.kernels import blas, packed_gemm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    copies = max(2, COLD_BYTES // w.nbytes)
    ws = [w.copy() for _ in range(copies)]
    ps = [packed_gemm.pack(x, mod) for x in ws]
    out = np.empty((m, n), np.float32)
    turn = [0, 0]

    def blas_next() -> None:
        turn[0] = (turn[0] + 1) % copies
        blas.gemm(a, ws[turn[0]], out)

    def ours_next() -> None:
        turn[1] = (turn[1] + 1) % copies
        packed_gemm.matmul_packed(mod, a, ps[turn[1]], out)

    return [*_time([blas_next, ours_next], rounds * 8), float("nan"), float("nan")]


def _left(mod: Any, m: int, k: int, n: int, rounds: int) -> list[float]:
    """The same for an NCHW 1x1 conv: the weight (m x k) by the image (k x n pixels),
    the bias per row (nn_conv._products_with_bias against gemm_left)."""
    from onnxviz.runtime.kernels import blas, packed_gemm

    rng = np.random.default_rng(0)
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    p = packed_gemm.pack_rows(w, mod)

    def blas_fused() -> None:
        np.add(res, bias[:, None], out=out)
        blas.gemm(w, x, out, accumulate=True)

    def ours_fused() -> None:
        packed_gemm.left_matmul_packed(mod, p, x, out, bias=bias, addend=res)

    return _time(
        [
            lambda: blas.gemm(w, x, out),
            lambda: packed_gemm.left_matmul_packed(mod, p, x, out),
            blas_fused,
            ours_fused,
        ],
        rounds,
    )


# (pixels, input channels, output channels): the UNets' skip convs and Inception v2's 1x1
# convs after a Concat, then two past the size the kernel copies into rows.
TRANSPOSED = [
    (1024, 96, 32), (256, 128, 64), (64, 128, 64), (1024, 32, 32), (1024, 64, 64),
    (784, 256, 64), (784, 320, 128), (196, 576, 224), (3136, 64, 256), (3136, 256, 64),
]  # fmt: skip


def _transposed(mod: Any, m: int, k: int, n: int, rounds: int) -> list[float]:
    """(OpenBLAS, ours) for a 1x1 conv of an NCHW image x (k x m) by the weight (n x k):
    OpenBLAS's w @ x (n x m, the NCHW conv's product) against gemm reading x as A's
    transpose into a channels-last (m x n) output; then both with the bias and Relu."""
    from onnxviz.runtime.kernels import blas, packed_gemm

    rng = np.random.default_rng(0)
    x = rng.standard_normal((k, m)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    planes = np.empty((n, m), np.float32)
    rows = np.empty((m, n), np.float32)
    p = packed_gemm.pack(np.ascontiguousarray(w.T), mod)

    def blas_fused() -> None:
        planes[...] = bias[:, None]
        blas.gemm(w, x, planes, accumulate=True)
        np.maximum(planes, 0, out=planes)

    def ours(**kw: Any) -> None:
        packed_gemm.matmul_packed(mod, x, p, rows, a_transposed=True, **kw)

    return _time(
        [
            lambda: blas.gemm(w, x, planes),
            ours,
            blas_fused,
            lambda: ours(bias=bias, act=packed_gemm.ACT_RELU),
        ],
        rounds,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", default="resnet,bert,nchw")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime import native
    from onnxviz.runtime.kernels import blas

    mod = native.load("sgemm")
    if mod is None:
        print("the compiled GEMM is off or not built (ONNXVIZ_NATIVE, a C compiler)")
        return 1
    print(f"level {native.LEVEL_NAMES[mod.level()]}, OpenBLAS {blas.status().get('core')}")
    runs: list[tuple[str, Any, list[tuple[int, int, int]]]] = []
    if "resnet" in args.shapes:
        runs.append(("gemm", _right, RESNET))
    if "bert" in args.shapes:
        runs.append(("gemm", _right, BERT))
    if "nchw" in args.shapes:  # the same convs NCHW: (M out, C in, pixels)
        runs.append(("gemm_left", _left, [(n, k, m) for m, k, n in RESNET]))
    if "cold" in args.shapes:
        runs.append(("cold", _cold, COLD))
    if "few" in args.shapes:
        runs.append(("few", _right, FEW))
    if "small" in args.shapes:
        runs.append(("small", _small, SMALL))
    if "transposed" in args.shapes:
        runs.append(("a_trans", _transposed, TRANSPOSED))
    with threadpool_limits(1):
        for name, fn, shapes in runs:
            print(f"{name:>9} {'M':>5} {'K':>5} {'N':>5} | {'plain: blas':>11} {'ours':>7}"
                  f" {'ratio':>5} | {'fused: blas':>11} {'ours':>7} {'ratio':>5}")  # fmt: skip
            digits = 2 if name == "small" else 0
            for m, k, n in shapes:
                b1, o1, b2, o2 = fn(mod, m, k, n, args.rounds)
                print(f"{'':>9} {m:>5} {k:>5} {n:>5} | {b1:>11.{digits}f} {o1:>7.{digits}f}"
                      f" {o1 / b1:>5.2f} | {b2:>11.{digits}f} {o2:>7.{digits}f} {o2 / b2:>5.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
