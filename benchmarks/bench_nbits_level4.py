"""MatMulNBits at accuracy_level 4 (int8 activations, what onnxruntime-genai's builder
writes for int4 CPU models): ours against onnxruntime's node, the products of one step
of a Llama, and our int8 kernel (runtime/native/_nbits8.c, every row count) against our
float routes on the rounded rows.

    python benchmarks/bench_nbits_level4.py [--model 1k|2k] [--rows 1,4,16,32,64,128] [--rounds 5]

The weights are the MatMulNBits shapes of family_models' llama1k (hidden 1024, MLP 2816,
4 layers) or llama2k (2048, 5632, 8 layers) with the 32000-word head, random, block 32,
no zero points (as the builder writes them), read-only like a model's initializers, one
copy per product of the step (a decode step's weights stream from memory).  For
each row count it prints the CPU time of the step's products three ways, 1 thread,
median of alternating rounds: ours through matmul_nbits at level 4 (the int8 kernel, in
calls of contrib_quant.INT8_ROWS_PER_CALL rows), ours with the int8 kernel off (the float
routes on the rounded rows), and onnxruntime's single-node sessions at level 4; then our
time over onnxruntime's.  The weights of a step exceed the caches, as in a model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

BLOCK = 32
# (K, N, how many per step)
LLAMA = {
    "1k": [(1024, 1536, 4), (1024, 1024, 4), (1024, 2816, 8), (2816, 1024, 4), (1024, 32000, 1)],
    "2k": [(2048, 3072, 8), (2048, 2048, 8), (2048, 5632, 16), (5632, 2048, 8), (2048, 32000, 1)],
}


def _frozen(x: np.ndarray) -> np.ndarray:
    return np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)


def _ort_session(K: int, N: int, b: np.ndarray, scales: np.ndarray) -> Any:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node(
        "MatMulNBits",
        ["A", "B", "S"],
        ["Y"],
        domain="com.microsoft",
        K=K,
        N=N,
        bits=4,
        block_size=BLOCK,
        accuracy_level=4,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", N])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "S")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="1k", choices=sorted(LLAMA))
    parser.add_argument("--rows", default="1,4,16,32,64,128")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    from onnxviz.runtime.kernels import contrib_quant
    from onnxviz.runtime.kernels._weight_cache import clear

    rng = np.random.default_rng(0)
    # One weight per product of the step, each its own copy, as in a model: a product
    # repeated on one weight would read it from the caches after its first call (a
    # decode step's 2k weights, 213 MB, stream from memory).
    weights = []
    for K, N, count in LLAMA[args.model]:
        kb = K // BLOCK
        for _ in range(count):
            b = _frozen(rng.integers(0, 256, (N, kb, BLOCK // 2), dtype=np.uint8))
            scales = _frozen((rng.standard_normal((N, kb)) * 0.02).astype(np.float32))
            weights.append((K, N, b, scales, _ort_session(K, N, b, scales)))
    int8_kernel = contrib_quant._NBITS8

    def ours(a: np.ndarray, K: int, N: int, b: Any, scales: Any, _s: Any) -> Any:
        return contrib_quant.matmul_nbits(
            a, b, scales, K=K, N=N, block_size=BLOCK, bits=4, accuracy_level=4
        )

    def theirs(a: np.ndarray, K: int, N: int, b: Any, scales: Any, session: Any) -> Any:
        return session.run(None, {"A": a})[0]

    def step(run: Callable[..., Any], rows: int, kernel: Any) -> float:
        contrib_quant._NBITS8 = kernel
        total = 0.0
        for K, N, b, scales, session in weights:
            a = np.random.default_rng(rows).standard_normal((rows, K)).astype(np.float32)
            t0 = time.process_time()
            run(a, K, N, b, scales, session)
            total += time.process_time() - t0
        return total

    print(f"Llama {args.model} int4 step, MatMulNBits at accuracy_level 4, 1 thread, ms")
    print(f"{'rows':>5} {'ours':>9} {'no int8 kernel':>15} {'onnxruntime':>12} {'ratio':>7}")
    for rows in (int(r) for r in args.rows.split(",")):
        times: dict[str, list[float]] = {"ours": [], "float": [], "ort": []}
        for run, kernel in ((ours, int8_kernel), (ours, None), (theirs, int8_kernel)):
            step(run, rows, kernel)  # warm: the kept forms are made
        for _ in range(args.rounds):
            times["ours"].append(step(ours, rows, int8_kernel))
            times["float"].append(step(ours, rows, None))
            times["ort"].append(step(theirs, rows, int8_kernel))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"{rows:>5} {med['ours']:>9.2f} {med['float']:>15.2f} {med['ort']:>12.2f} "
            f"{med['ours'] / med['ort']:>6.2f}x"
        )
        clear()
    contrib_quant._NBITS8 = int8_kernel
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
