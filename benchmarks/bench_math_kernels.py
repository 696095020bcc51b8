"""Math kernels one node at a time: onnxviz kernel vs onnxruntime single-node session.

Shapes are the ones ResNet-50 and BERT-base (sequence 128) feed these ops.  Prints the
median of ``--repeat`` calls for each, and ours / onnxruntime as a ratio (lower is better).

    python benchmarks/bench_math_kernels.py [--threads 1] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=20)
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto  # noqa: E402

from single_node import (  # noqa: E402
    geometric_mean,
    median_seconds,
    onnxruntime_call,
    single_node,
)
from single_node import ours as our_call  # noqa: E402

RNG = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES: list[tuple[str, list[np.ndarray], int, dict[str, Any]]] = [
    # (op, inputs, opset, attributes)
    ("MatMul", [_r(1, 128, 768), _r(768, 3072)], 13, {}),
    ("MatMul", [_r(12, 128, 64), _r(12, 64, 128)], 13, {}),
    ("Gemm", [_r(1, 2048), _r(1000, 2048), _r(1000)], 13, {"transB": 1}),
    ("Add", [_r(1, 128, 3072), _r(3072)], 14, {}),
    ("Mul", [_r(1, 12, 128, 128), _r(1)], 14, {}),
    ("Relu", [_r(1, 256, 56, 56)], 14, {}),
    ("Softmax", [_r(1, 12, 128, 128)], 13, {}),
    ("Erf", [_r(1, 128, 3072)], 13, {}),
    ("Gelu", [_r(1, 128, 3072)], 20, {}),
    ("Sigmoid", [_r(1, 128, 3072)], 13, {}),
    ("Tanh", [_r(1, 128, 3072)], 13, {}),
    ("Sqrt", [np.abs(_r(1, 128, 768))], 13, {}),
    ("Pow", [_r(1, 128, 768), np.array(2.0, np.float32)], 15, {}),
    ("ReduceMean", [_r(1, 128, 768), np.array([-1], np.int64)], 18, {}),
    ("ReduceMean", [_r(1, 2048, 7, 7), np.array([2, 3], np.int64)], 18, {}),
    ("Where", [RNG.random((1, 12, 128, 128)) > 0.5, _r(1, 12, 128, 128), _r(1)], 16, {}),
    ("Cast", [_r(1, 128, 768)], 21, {"to": TensorProto.FLOAT16}),
    ("CumSum", [_r(256, 1024), np.array(1, np.int64)], 14, {}),
]


def main() -> None:
    assert ARGS is not None
    print(f"threads={ARGS.threads} repeat={ARGS.repeat}")
    print(f"{'op':12s} {'input shapes':42s} {'ours ms':>9s} {'ort ms':>9s} {'ratio':>7s}")
    ratios = []
    for op, inputs, opset, attrs in CASES:
        node = single_node(op, len(inputs), 1, attrs)
        ours = median_seconds(our_call(node, inputs, opset), ARGS.repeat)
        theirs = median_seconds(onnxruntime_call(node, inputs, opset, ARGS.threads), ARGS.repeat)
        ratio = ours / theirs
        ratios.append(ratio)
        shapes = " ".join("x".join(map(str, v.shape)) or "()" for v in inputs)
        print(f"{op:12s} {shapes:42s} {ours * 1e3:9.3f} {theirs * 1e3:9.3f} {ratio:7.2f}")
    geo = geometric_mean(ratios)
    print(f"geometric mean ratio ours/onnxruntime: {geo:.2f}")


if __name__ == "__main__":
    main()
