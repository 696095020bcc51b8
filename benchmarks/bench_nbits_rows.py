"""Up to how many rows of activations should MatMulNBits run the compiled kernel
(runtime/native/_nbits.c) rather than BLAS on the kept float32 weight?  The measurement
behind contrib_quant.MAX_ROWS_AT_LEVEL, to run again when the kernel, the CPU or OpenBLAS
change.

    python benchmarks/bench_nbits_rows.py [--rows 1,2,4,8,16,32,48,64] [--rounds 3]
    ONNXVIZ_NATIVE=avx2 python benchmarks/bench_nbits_rows.py     # a lower level's paths

The weights are the MatMulNBits shapes of one step of a Llama h2048x8 int4 export
(family_models' llama2k: q/k/v 2048x3072, o 2048x2048, gate and up 2048x5632, down
5632x2048 per layer, the 32000-word head), random, block 32, no zero points, read-only
like a model's initializers (so the BLAS path keeps its float32 form, warmed before the
rounds).  For each row count it prints the CPU time of the whole step's products both
ways, 1 thread, medians of alternating rounds, and the kernel's share of BLAS' time;
``--gemm`` also times the kernel's two AVX-512 paths against each other (decoding in
registers for every 4 rows of activations, or 4 rows of the weight into a buffer:
_nbits.set_gemm_rows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# (K, N, how many per step)
SHAPES = [(2048, 3072, 8), (2048, 2048, 8), (2048, 5632, 16), (5632, 2048, 8), (2048, 32000, 1)]
BLOCK = 32


def _frozen(x: np.ndarray) -> np.ndarray:
    return np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)


def _weights(rng: np.random.Generator) -> list[tuple[int, int, int, np.ndarray, np.ndarray]]:
    out = []
    for K, N, count in SHAPES:
        kb = K // BLOCK
        b = _frozen(rng.integers(0, 256, (N, kb, BLOCK // 2), dtype=np.uint8))
        scales = _frozen((rng.standard_normal(N * kb) * 0.02).astype(np.float32))
        out.append((K, N, count, b, scales))
    return out


def _step(run: Callable[[np.ndarray, Any, Any, int, int], Any], weights: list, rows: int) -> float:
    rng = np.random.default_rng(rows)
    total = 0.0
    for K, N, count, b, scales in weights:
        a = rng.standard_normal((rows, K)).astype(np.float32)
        t0 = time.process_time()
        for _ in range(count):
            run(a, b, scales, K, N)
        total += time.process_time() - t0
    return total


def main(argv: list[str]) -> int:
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime import native
    from onnxviz.runtime.kernels import contrib_quant as cq

    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rows", default="1,2,4,8,16,32,48,64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gemm", action="store_true", help="also the kernel's two AVX-512 paths")
    args = p.parse_args(argv)
    module = cq._NBITS
    if module is None:
        print("the compiled kernel is off or not built (ONNXVIZ_NATIVE, a C compiler)")
        return 1
    level = native.level()
    print(f"level {native.LEVEL_NAMES.get(level or 0)}; 1 thread; CPU time of one step's products")
    weights = _weights(np.random.default_rng(0))

    def kernel(a: np.ndarray, b: Any, scales: Any, K: int, N: int) -> Any:
        form = cq.native_form(b, scales, None, None, K, N, BLOCK, 4)
        return cq.native_product(module, a, b, scales, None, form, None, K, N, BLOCK, 4)

    def blas(a: np.ndarray, b: Any, scales: Any, K: int, N: int) -> Any:
        saved, cq._NBITS = cq._NBITS, None
        try:
            return cq.matmul_nbits(a, b, scales, K=K, N=N, block_size=BLOCK, bits=4)
        finally:
            cq._NBITS = saved

    with threadpool_limits(1):
        _step(blas, weights, 1)  # the float32 forms, made once
        for rows in (int(r) for r in args.rows.split(",")):
            times: dict[str, list[float]] = {"kernel": [], "blas": []}
            for _ in range(args.rounds):
                times["kernel"].append(_step(kernel, weights, rows))
                times["blas"].append(_step(blas, weights, rows))
            k, b = statistics.median(times["kernel"]), statistics.median(times["blas"])
            line = f"{rows:4d} rows  kernel {k * 1e3:8.1f} ms  BLAS {b * 1e3:8.1f} ms  {k / b:5.2f}"
            if args.gemm and (level or 0) >= native.AVX512:
                paths: dict[int, list[float]] = {1: [], 1 << 30: []}
                before = module.set_gemm_rows(1)
                try:
                    for _ in range(args.rounds):
                        for threshold, spent in paths.items():
                            module.set_gemm_rows(threshold)
                            spent.append(_step(kernel, weights, rows))
                finally:
                    module.set_gemm_rows(before)
                buffered = statistics.median(paths[1])
                registers = statistics.median(paths[1 << 30])
                line += f"  | buffered/in-register {buffered / registers:5.2f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
