"""Tensor / data-movement / quantization kernels one node at a time: onnxviz kernel vs an
onnxruntime single-node session, on shapes BERT-base (sequence 128) and ResNet-50 use.

Prints the median of ``--repeat`` calls, ours / onnxruntime as a ratio (lower is better).
Ops whose result is a view (Transpose, Reshape, Expand, Slice, Split) also get a
"+copy" column: the cost if a consumer needed the data contiguous, since onnxruntime
always materialises its outputs.

    python benchmarks/bench_tensor_kernels.py [--threads 1] [--repeat 20]
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

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

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


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


# (op, inputs, opset, attributes, number of outputs)
CASES: list[tuple[str, list[np.ndarray], int, dict[str, Any], int]] = [
    ("Transpose", [_r(1, 128, 12, 64)], 13, {"perm": [0, 2, 1, 3]}, 1),
    ("Reshape", [_r(1, 128, 768), _i64(1, 128, 12, 64)], 14, {}, 1),
    ("Expand", [_r(1, 1, 128, 128), _i64(1, 12, 128, 128)], 13, {}, 1),
    ("Slice", [_r(1, 128, 2304), _i64(768), _i64(1536), _i64(2)], 13, {}, 1),
    ("Split", [_r(1, 128, 2304), _i64(768, 768, 768)], 13, {"axis": 2}, 3),
    ("Concat", [_r(1, 64, 56, 56) for _ in range(4)], 13, {"axis": 1}, 1),
    ("Gather", [_r(30522, 768), RNG.integers(0, 30522, (1, 128))], 13, {}, 1),
    ("GatherElements", [_r(64, 1000), RNG.integers(0, 1000, (64, 10))], 13, {"axis": 1}, 1),
    (
        "ScatterND",
        [
            _r(1, 12, 256, 64),
            np.array([[[0, 1], [0, 4], [0, 7], [0, 9]]], np.int64),
            _r(1, 4, 256, 64),
        ],
        18,
        {},
        1,
    ),
    ("Pad", [_r(1, 64, 56, 56), _i64(0, 0, 1, 1, 0, 0, 1, 1)], 19, {}, 1),
    ("Pad", [_r(1, 64, 56, 56), _i64(0, 0, 3, 3, 0, 0, 3, 3)], 19, {"mode": "reflect"}, 1),
    ("TopK", [_r(64, 32000), _i64(50)], 11, {}, 2),
    ("TopK", [_r(1000, 80), _i64(80)], 11, {}, 2),
    ("Unique", [RNG.integers(0, 5000, 100000)], 11, {}, 4),
    ("NonZero", [(RNG.random((1, 12, 128, 128)) > 0.5).astype(np.float32)], 13, {}, 1),
    ("Tile", [_r(1, 128, 768), _i64(4, 1, 1)], 13, {}, 1),
    (
        "QuantizeLinear",
        [_r(1, 128, 768), np.array(0.05, np.float32), np.array(128, np.uint8)],
        21,
        {},
        1,
    ),
    (
        "DequantizeLinear",
        [RNG.integers(-128, 127, (1, 128, 768)).astype(np.int8), np.array(0.05, np.float32)],
        21,
        {},
        1,
    ),
    ("DynamicQuantizeLinear", [_r(1, 128, 768)], 11, {}, 3),
    (
        "MatMulInteger",
        [
            RNG.integers(0, 255, (128, 768)).astype(np.uint8),
            RNG.integers(-128, 127, (768, 768)).astype(np.int8),
        ],
        10,
        {},
        1,
    ),
    (
        "QLinearMatMul",
        [
            RNG.integers(0, 255, (128, 768)).astype(np.uint8),
            np.array(0.02, np.float32),
            np.array(128, np.uint8),
            RNG.integers(0, 255, (768, 768)).astype(np.uint8),
            np.array(0.01, np.float32),
            np.array(120, np.uint8),
            np.array(0.5, np.float32),
            np.array(128, np.uint8),
        ],
        10,
        {},
        1,
    ),
]

VIEW_OPS = {"Transpose", "Reshape", "Expand", "Slice", "Split"}


def main() -> None:
    assert ARGS is not None
    print(f"threads={ARGS.threads} repeat={ARGS.repeat}")
    print(
        f"{'op':22s} {'first input':16s} {'ours ms':>9s} {'+copy ms':>9s} {'ort ms':>9s} {'ratio':>7s}"
    )
    ratios = []
    for op, inputs, opset, attrs, n_out in CASES:
        node = single_node(op, len(inputs), n_out, attrs)
        ours_fn = our_call(node, inputs, opset)

        def copied(fn: Callable[[], Any] = ours_fn) -> Any:
            return [np.ascontiguousarray(o) for o in fn()]

        ours = median_seconds(ours_fn, ARGS.repeat)
        copy = median_seconds(copied, ARGS.repeat) if op in VIEW_OPS else float("nan")
        theirs = median_seconds(onnxruntime_call(node, inputs, opset, ARGS.threads), ARGS.repeat)
        ratio = ours / theirs
        ratios.append(ratio)
        shape = "x".join(map(str, inputs[0].shape))
        print(
            f"{op:22s} {shape:16s} {ours * 1e3:9.3f} {copy * 1e3:9.3f} {theirs * 1e3:9.3f} {ratio:7.2f}"
        )
    geo = geometric_mean(ratios)
    print(f"geometric mean ratio ours/onnxruntime: {geo:.2f}")


if __name__ == "__main__":
    main()
