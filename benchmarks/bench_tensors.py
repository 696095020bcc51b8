"""Tensor codec speed: onnxviz.model.tensors vs onnx.numpy_helper, measured in the same run.

Run: python benchmarks/bench_tensors.py [--mb 100]

Prints, per case, the best-of-N wall time of decode (to_array) and encode (from_array) for
both libraries and the ratio peer/ours (> 1 means onnxviz is faster).  Note that reading
`TensorProto.raw_data` from the protobuf runtime copies the bytes; both sides pay that.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from onnx import numpy_helper

from onnxviz.model import tensors


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def cases(mb: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n32 = mb * 2**20 // 4
    return {
        f"float32 {mb} MB": rng.standard_normal(n32, dtype=np.float32),
        f"float16 {mb // 4} MB": rng.standard_normal(mb * 2**20 // 8).astype(np.float16),
        f"int4 {mb // 4} MB packed": rng.integers(-8, 8, mb * 2**20 // 2, dtype=np.int8).astype(
            ml_dtypes.int4
        ),
        "string 100k": np.array([f"token_{i}" for i in range(100_000)], dtype=object),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    header = f"{'case':24} {'op':7} {'onnxviz ms':>11} {'onnx ms':>9} {'onnx/onnxviz':>13}"
    print(header)
    print("-" * len(header))
    for label, array in cases(args.mb).items():
        proto = numpy_helper.from_array(array, "x")
        ours_decoded = tensors.to_array(proto)
        peer_decoded = numpy_helper.to_array(proto)
        assert ours_decoded.shape == peer_decoded.shape
        if array.dtype != object:
            assert ours_decoded.tobytes() == peer_decoded.tobytes()
        timings = {
            "decode": (
                best_of(lambda: tensors.to_array(proto), args.repeat),  # noqa: B023
                best_of(lambda: numpy_helper.to_array(proto), args.repeat),  # noqa: B023
            ),
            "encode": (
                best_of(lambda: tensors.from_array(array, "x"), args.repeat),  # noqa: B023
                best_of(lambda: numpy_helper.from_array(array, "x"), args.repeat),  # noqa: B023
            ),
        }
        for op, (ours, peer) in timings.items():
            print(f"{label:24} {op:7} {ours * 1e3:11.2f} {peer * 1e3:9.2f} {peer / ours:13.2f}")
    # The cost left in decoding a big raw float32 tensor is the protobuf's copy of raw_data.
    big = numpy_helper.from_array(cases(args.mb)[f"float32 {args.mb} MB"], "x")
    copy = best_of(lambda: big.raw_data, args.repeat)
    decode = best_of(lambda: tensors.to_array(big), args.repeat)
    print(
        f"\nraw_data attribute access alone: {copy * 1e3:.2f} ms; full decode {decode * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
